"""What fuzz campaign 5 (seed 5, docs/reliability.md) found, each fixed at its source.
References are NumPy formulas written here or onnxruntime (skipped cleanly when absent)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend
from caffe2py.proto import caffe2_pb2

RNG = np.random.default_rng(5)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_an_int32_overflowing_attribute_is_our_error_not_a_crash_in_onnx_inference():
    # onnx:5:30261: onnx's C++ shape inference segfaulted on LayerNormalization axis 2**31;
    # run in a child so that a crash fails this test instead of killing the test run
    code = textwrap.dedent("""
        import numpy as np
        from onnx import helper
        from caffe2py.errors import Caffe2Error
        from caffe2py.onnx import backend
        node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], axis=2 ** 31, stash_type=1)
        try:
            backend.run_node(node, [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)], opset_version=18)
        except Caffe2Error as exc:
            print("named:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "named:" in done.stdout and "axis = 2147483648 is not an axis of any tensor" in done.stdout


def test_conv_transpose_bias_must_be_one_value_per_output_channel():
    # onnx:5:32730: a 5-D B reached NumPy's broadcasting error
    x, w = f32(1, 4, 3, 3), f32(4, 2, 2, 2)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2)
    with pytest.raises(Caffe2Error, match=r"B must have shape \[4\]"):
        backend.run_node(node, [x, w, f32(4, 1)], opset_version=13)
    ort = pytest.importorskip("onnxruntime")
    b = f32(4)
    (got,) = backend.run_node(node, [x, w, b], opset_version=13)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                            for n, a in (("x", x), ("w", w), ("b", b))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "w": w, "b": b})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_op_field_that_is_not_utf8_is_a_named_error():
    # mutate:5:80316: a damaged init net's engine came back from protobuf as bytes
    net = caffe2_pb2.NetDef(name="damaged")
    net.op.extend([core.CreateOperator("ConstantFill", [], ["c"], shape=[1], value=1.0, engine="QQ")])
    raw = net.SerializeToString().replace(b"QQ", b"\x18\xff")
    damaged = caffe2_pb2.NetDef.FromString(raw)
    assert isinstance(damaged.op[0].engine, bytes)          # what protobuf does with it
    workspace.ResetWorkspace()
    with pytest.raises(Caffe2Error, match="its engine .* is not UTF-8 text"):
        workspace.RunNetOnce(damaged)
    assert not workspace.HasBlob("c")


def test_a_fill_shape_dimension_beyond_any_memory_is_named_even_beside_a_zero():
    # op:5:63357: shape [2, 0, 1, 2**62] holds 0 elements but NumPy refuses the dimension
    workspace.ResetWorkspace()
    net = core.Net("fill")
    net.GivenTensorInt16Fill([], ["y"], shape=[2, 0, 1, 1 << 62], values=[])
    with pytest.raises(Caffe2Error, match="has a dimension of 4611686018427387904 elements, more than any memory holds"):
        workspace.RunNetOnce(net)


def test_lengths_mean_takes_integer_lengths():
    # op:5:83529: float LENGTHS with a NaN reached "cannot convert float NaN to integer"
    data = f32(5, 2)
    workspace.ResetWorkspace()
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("lengths", np.array([2.0, np.nan, 3.0], np.float32))
    net = core.Net("lengths_mean")
    net.LengthsMean(["data", "lengths"], ["y"])
    with pytest.raises(Caffe2Error, match="input 1 must be a tensor of"):
        workspace.RunNetOnce(net)
    workspace.FeedBlob("lengths", np.array([2, 0, 3], np.int32))
    workspace.RunNetOnce(net)
    want = np.stack([data[:2].mean(0), np.zeros(2, np.float32), data[2:].mean(0)])
    np.testing.assert_allclose(workspace.FetchBlob("y"), want, rtol=1e-6, atol=1e-6)
