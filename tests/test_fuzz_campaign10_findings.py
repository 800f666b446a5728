"""What fuzz campaign 10 (seed 10, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend


def _constant_model(attribute):
    node = helper.make_node("Constant", [], ["y"])
    node.attribute.extend([attribute])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_tensor_attribute_whose_type_says_otherwise_is_a_named_error():
    # mutate:10:27846: Constant's `value` typed FLOATS (a flipped byte) reached a None tensor
    value = np.arange(4, dtype=np.float32)
    attribute = helper.make_attribute("value", numpy_helper.from_array(value))
    attribute.type = helper.AttributeProto.FLOATS
    with pytest.raises(Caffe2Error, match="argument 'value' should be a tensor"):
        backend.prepare(_constant_model(attribute)).run([])
    (y,) = backend.prepare(_constant_model(helper.make_attribute("value", numpy_helper.from_array(value)))).run([])
    np.testing.assert_array_equal(y, value)
