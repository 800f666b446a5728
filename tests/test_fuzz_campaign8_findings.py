"""What fuzz campaign 8 (seed 8, docs/reliability.md) found, each fixed at its source."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend


def _model(node, inputs, outputs, opsets):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=8)


def test_an_empty_member_of_a_variadic_input_is_a_named_error():
    # mutate:8:7536: Max with its first input name emptied reached a None in the kernel
    node = helper.make_node("Max", ["", "b"], ["y"])
    model = _model(node, [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [("", 13)])
    with pytest.raises(Caffe2Error, match=r"input 0 \('data_0'\) of onnx's Max-13 is required, but the node leaves it empty"):
        backend.prepare(model).run([np.ones(3, np.float32)])


def test_optional_inputs_may_still_be_left_empty():
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    (y,) = backend.run_node(node, [x, np.array(1.0, np.float32)], opset_version=13)
    np.testing.assert_array_equal(y, np.minimum(x, 1.0))


def test_label_encoder_default_tensor_must_hold_one_value():
    # onnx:8:5321: an empty default_tensor was indexed at 0
    empty = helper.make_tensor("t", TensorProto.FLOAT, [0], [])
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                            values_floats=[1.0, 2.0], default_tensor=empty)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [("", 17), ("ai.onnx.ml", 4)])
    with pytest.raises(Caffe2Error, match="default_tensor must hold one value, got 0"):
        backend.prepare(model).run([np.array(["a", "z"], dtype=object)])


def test_reduce_gradients_keep_the_forward_dtype_rule():
    # op:8:20464: ReduceL1Gradient of int64/bool blobs reached NumPy's sign loop error
    workspace.ResetWorkspace()
    for name, value in (("dy", np.ones(2, np.int64)), ("x", np.ones((2, 3), np.int64)), ("y", np.ones(2, np.int64))):
        workspace.FeedBlob(name, value)
    net = core.Net("reduce_l1_grad")
    net.ReduceL1Gradient(["dy", "x", "y"], ["dx"], axes=[1], keepdims=0)
    with pytest.raises(Caffe2Error, match="ReduceL1Gradient does not support dtype int64"):
        workspace.RunNetOnce(net)
    x = np.array([[1.0, -2.0, 0.5], [-1.0, 3.0, -4.0]], np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("dy", np.array([2.0, -1.0], np.float32))
    workspace.FeedBlob("y", np.abs(x).sum(1))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("dx"), np.sign(x) * np.array([[2.0], [-1.0]], np.float32))


def test_load_refuses_a_db_path_with_a_nul_byte():
    # op:8:5545: "embedded null byte" from the file system layer
    workspace.ResetWorkspace()
    net = core.Net("load")
    net.Load([], ["a"], dbs=["a\x00b"], db_type="minidb", load_all=0)
    with pytest.raises(Caffe2Error, match="argument 'dbs' names a file and cannot hold a NUL byte"):
        workspace.RunNetOnce(net)


def test_col2im_image_and_block_shapes_are_checked():
    # onnx:8:55396: a negative image dim reached NumPy's "negative dimensions"
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"])
    x = np.ones((1, 4, 4), np.float32)
    with pytest.raises(Caffe2Error, match=r"image_shape \[3, -2\] must be >= 0"):
        backend.run_node(node, [x, np.array([3, -2], np.int64), np.array([2, 2], np.int64)], opset_version=18)
    # a valid Col2Im: 2x2 blocks of a 3x3 image, each column summed back where it came from
    (y,) = backend.run_node(node, [x, np.array([3, 3], np.int64), np.array([2, 2], np.int64)], opset_version=18)
    np.testing.assert_array_equal(y[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])


def test_linear_regressor_needs_a_coefficient_per_target():
    # onnx:8:70348: targets 2**62 with no coefficients reshaped into "array is too big"
    node = helper.make_node("LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", targets=1 << 62)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [("", 17), ("ai.onnx.ml", 3)])
    with pytest.raises(Caffe2Error, match="must hold `targets`"):
        backend.prepare(model).run([np.ones((2, 2), np.float32)])


def test_add_padding_widths_beyond_any_memory_are_refused_by_size():
    # op:8:80701: NumPy's "Maximum allowed dimension exceeded"
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones((3, 1), np.float32))
    net = core.Net("add_padding")
    net.AddPadding(["x"], ["y"], padding_width=1 << 62)
    with pytest.raises(Caffe2Error, match="more than any memory holds"):
        workspace.RunNetOnce(net)
    net = core.Net("add_padding_ok")
    net.AddPadding(["x"], ["y"], padding_width=1)
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.array([[0], [1], [1], [1], [0]], np.float32))


def test_the_fuzz_oracle_compares_large_outputs_in_pieces(monkeypatch):
    # mutate:8:87545: the comparison's float64 copies of a 0.6 GB output exceeded the
    # worker's 4 GiB; they are made a piece at a time now
    from caffe2py.tools.fuzz import gen_onnx
    monkeypatch.setattr(gen_onnx, "_CHUNK", 4)
    a = np.arange(10, dtype=np.float32)
    b = a.copy()
    assert gen_onnx.compare([a], [b]) is None
    b[9] += 1
    assert gen_onnx.compare([a], [b]) == "output 0 element 9 is np.float32(9.0), reference np.float32(10.0)"
