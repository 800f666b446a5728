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


def test_upsample_to_an_empty_output_with_an_absurd_dim_is_a_named_error():
    # onnx:10:75003: scales (1e30, 1e-5) give shape [1e30, 0]: empty, but no array has it
    node = helper.make_node("Upsample", ["x"], ["y"], scales=[1e30, 1e-5])
    with pytest.raises(Caffe2Error, match="scales/sizes give an output of shape"):
        backend.run_node(node, [np.ones((1, 4), np.float32)], opset_version=8)
    node = helper.make_node("Upsample", ["x"], ["y"], scales=[2.0, 1.0])
    (y,) = backend.run_node(node, [np.array([[1.0, 2.0]], np.float32)], opset_version=8)
    np.testing.assert_array_equal(y, [[1.0, 2.0], [1.0, 2.0]])


def test_lstm_unit_timestep_must_be_a_whole_number():
    # op:10:65920: a NaN timestep reached int()
    from caffe2py import core, workspace
    workspace.ResetWorkspace()
    zeros = np.zeros((1, 1, 1), np.float32)
    for name, value in (("h", zeros), ("c", zeros), ("g", np.zeros((1, 1, 4), np.float32)),
                        ("seq", np.ones(1, np.int32)), ("t", np.array(np.nan, np.float32))):
        workspace.FeedBlob(name, value)
    net = core.Net("lstm_unit")
    net.LSTMUnit(["h", "c", "g", "seq", "t"], ["h_out", "c_out"], sequence_lengths=1)
    with pytest.raises(Caffe2Error, match="timestep must be a whole number"):
        workspace.RunNetOnce(net)


def test_lstm_unit_timestep_of_strings_is_named_before_any_numeric_test():
    # op:13:90242 (campaign 11): the check above called np.isfinite on an object timestep
    from caffe2py import core, workspace
    workspace.ResetWorkspace()
    zeros = np.zeros((1, 1, 1), np.float32)
    for name, value in (("h", zeros), ("c", zeros), ("g", np.zeros((1, 1, 4), np.float32)),
                        ("t", np.array("3", dtype=object))):
        workspace.FeedBlob(name, value)
    net = core.Net("lstm_unit_strings")
    net.LSTMUnit(["h", "c", "g", "t"], ["h_out", "c_out"], sequence_lengths=0)
    with pytest.raises(Caffe2Error, match="timestep must be a number, got dtype object"):
        workspace.RunNetOnce(net)
