"""What fuzz campaign 9 (seed 9, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest
from onnx import helper

from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend


def test_depth_to_space_of_an_empty_tensor():
    # onnx:9:10454: blocksize 2**31 - 1 on 0 channels reached NumPy's reshape refusal
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2 ** 31 - 1)
    with pytest.raises(Caffe2Error, match="whose dims no array can have, even an empty one"):
        backend.run_node(node, [np.zeros((3, 0, 3, 1), np.float32)], opset_version=13)
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)
    (y,) = backend.run_node(node, [np.zeros((3, 0, 3, 1), np.float32)], opset_version=13)
    assert y.shape == (3, 0, 6, 2) and y.dtype == np.float32
    x = np.arange(8, dtype=np.float32).reshape(1, 4, 1, 2)      # DCR: channel c = (i * 2 + j) * C' + c'
    (y,) = backend.run_node(node, [x], opset_version=13)
    want = x.reshape(1, 2, 2, 1, 1, 2).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 2, 4)
    np.testing.assert_array_equal(y, want)
