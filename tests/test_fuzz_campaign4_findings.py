"""What fuzz campaign 4 (seed 4, docs/reliability.md) found, each fixed at its source:
a named error where the input is wrong, the right result where it is merely unusual.
References are NumPy formulas written here or onnxruntime (skipped cleanly when absent)."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from caffe2py import core
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend
from caffe2py.proto import caffe2_pb2
from caffe2py.workspace import Workspace

from _unique_strings import assert_unique_of_strings_matches_onnxruntime

RNG = np.random.default_rng(4)


def run_op(op_type, inputs, outputs=("Y",), **args):
    ws = Workspace("fuzz_campaign4")
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    net = caffe2_pb2.NetDef(name="fuzz_campaign4")
    net.op.extend([core.CreateOperator(op_type, list(inputs), list(outputs), **args)])
    ws.run_net_once(net)
    return [ws.fetch_blob(o) for o in outputs]


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_a_tensor_blob_record_without_a_tensor_is_a_named_error():
    # api:4:2546: Deserialize recursed until Python's stack ran out
    from caffe2py import workspace
    proto = caffe2_pb2.BlobProto(name="b", type="Tensor")
    with pytest.raises(Caffe2Error, match="its type is Tensor but the record has no tensor"):
        workspace.DeserializeBlob("dst", proto.SerializeToString())


def test_api_case_reproducers_keep_their_steps(tmp_path):
    # the api family's steps (tuples holding bytes) were left out of case.json, so a
    # reproducer folder replayed as a KeyError
    from caffe2py.tools.fuzz.cases import case_from_folder, case_rng
    from caffe2py.tools.fuzz.gen_hostile import generate_api
    case = generate_api("api:4:2546", case_rng("api", 4, 2546))
    for name, data in case.files().items():
        (tmp_path / name).write_bytes(data)
    again = case_from_folder(str(tmp_path))
    assert again.data["steps"] == case.data["steps"]
    assert any(isinstance(part, bytes) for step in again.data["steps"] for part in step)


def test_onnx_squeeze_naming_an_axis_twice_is_a_named_error():
    node = helper.make_node("Squeeze", ["x", "axes"], ["y"])
    with pytest.raises(Caffe2Error, match=r"axes \[0, 0\] name an axis of a rank-2 input more than once"):
        backend.run_node(node, [f32(1, 3), np.array([0, 0], np.int64)], opset_version=13)


@pytest.mark.parametrize("op_type", ["Conv", "MaxPool", "AveragePool"])
def test_window_pads_beyond_any_memory_are_named_before_allocating(op_type):
    # netdef:4:25148: pads of 2**62 reached NumPy's "array is too big"
    inputs = {"X": f32(1, 2, 8, 8)}
    if op_type == "Conv":
        inputs.update(W=f32(3, 2, 2, 2), B=f32(3))
    pads = [4, 1 << 62, 0, 2]
    expected = "more than this process can hold" if op_type == "Conv" else "each pad must be smaller than the kernel"
    with pytest.raises(Caffe2Error, match=expected):
        run_op(op_type, inputs, kernels=[2, 2], pads=pads)


def test_conv_with_pads_that_fit_still_matches_the_formula():
    x, w = f32(1, 1, 3, 3), f32(1, 1, 2, 2)
    (y,) = run_op("Conv", {"X": x, "W": w, "B": np.zeros(1, np.float32)}, kernels=[2, 2], pads=[1, 0, 0, 1])
    xp = np.pad(x[0, 0], ((1, 0), (0, 1)))
    want = np.array([[(xp[i:i + 2, j:j + 2] * w[0, 0]).sum() for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(y[0, 0], want, rtol=1e-5, atol=1e-6)


def test_an_int_argument_beyond_int64_is_a_named_error():
    # netdef:4:52586: stride given as the float 1e30 overflowed a C long
    with pytest.raises(Caffe2Error, match="argument 'stride' should be an int"):
        run_op("MaxPool", {"X": f32(1, 1, 4, 4)}, kernel=2, stride=1e30)
    (y,) = run_op("MaxPool", {"X": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)}, kernel=2, stride=2.0)
    np.testing.assert_array_equal(y[0, 0], [[5, 7], [13, 15]])


def test_pad_image_value_must_be_one_of_the_input_dtypes_values():
    # op:4:45317: an int16 image padded with 1e30
    x = RNG.integers(-5, 5, (1, 2, 2, 3)).astype(np.int16)
    with pytest.raises(Caffe2Error, match="is int16; the pad value"):
        run_op("PadImage", {"X": x}, pad=1, value=1e30)
    (y,) = run_op("PadImage", {"X": x}, pad=1, value=7.0)
    np.testing.assert_array_equal(y, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=7))


def test_svm_regressor_with_more_support_vectors_than_values_is_a_named_error():
    # onnx:4:38027: n_supports 2**62 and no support_vectors reshaped into "array is too big"
    node = helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_supports=1 << 62,
                            coefficients=[1.0], rho=[0.0])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                              ir_version=8)
    with pytest.raises(Caffe2Error, match="do not split into 4611686018427387904 vectors"):
        backend.prepare(model).run([f32(3, 2)])


@pytest.mark.parametrize("is_sorted", [1, 0])
def test_unique_of_strings_along_an_axis_matches_onnxruntime(is_sorted):
    # onnx:4:65098: NumPy's unique(axis=) refuses object arrays
    x = np.array([["b", "a"], ["a", "c"], ["b", "a"], ["a", "b"]], dtype=object)
    assert_unique_of_strings_matches_onnxruntime(x, axis=0, sorted=is_sorted)


def test_constant_fill_value_must_be_one_value_of_its_dtype():
    # op:4:85618: value given as a list of ints broadcast into a scalar
    with pytest.raises(Caffe2Error, match="argument 'value' must be one value, got a list of 2"):
        run_op("ConstantFill", {}, shape=[2], value=[2, 1], dtype=caffe2_pb2.TensorProto.FLOAT)
    with pytest.raises(Caffe2Error, match="is not a INT32 value"):
        run_op("ConstantFill", {}, shape=[2], value=1e30, dtype=caffe2_pb2.TensorProto.INT32)
    (y,) = run_op("ConstantFill", {}, shape=[2, 3], value=-4, dtype=caffe2_pb2.TensorProto.INT32)
    np.testing.assert_array_equal(y, np.full((2, 3), -4, np.int32))
