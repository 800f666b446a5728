"""What fuzz campaign 12 (seed 14, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest
from onnx import helper

from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend


def _pad(x, pads, value):
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"])
    return backend.run_node(node, [x, np.asarray(pads, np.int64), value], opset_version=20)[0]


def test_pad_of_a_scalar_is_a_named_error():
    # onnx:14:7558: a 0-d input with no pads reached np.pad's "`pad_width` must be of integral type"
    with pytest.raises(Caffe2Error, match="is a scalar; Pad needs an input of rank 1 or more"):
        _pad(np.array(2.0, np.float32), [], np.array(1.0, np.float32))


def test_pad_constant_value_must_be_one_value():
    # the same case's constant_value held 6 values, of which Pad silently took the first
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(Caffe2Error, match="constant_value must be one value, got shape \\[2, 3\\]"):
        _pad(x, [1, 1], np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(_pad(x, [1, 2], np.array(7.0, np.float32)),
                                  np.concatenate([[7.0], x, [7.0, 7.0]]))
