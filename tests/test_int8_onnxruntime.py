"""Caffe2's Int8 ops against onnxruntime's quantized ops of the same computation, and
caffe2py's ONNX import of those ops (which shares the Int8 GEMM) against onnxruntime.

Where the rounding rules agree the results are equal: QuantizeLinear (round half to
even of x / scale) and DequantizeLinear. Where they differ the results are within one
quantization step: Caffe2 requantizes with gemmlowp's / QNNPACK's fixed-point multiplier
(ties up, then away from zero; QNNPACK's add and pooling their own integer rounding),
onnxruntime with a float32 scale product rounded half to even (QLinearConv,
QLinearMatMul, com.microsoft's QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool,
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax). Int8MaxPool and Int8Concat move bytes:
equal to uint8 MaxPool and QLinearConcat at the same scale."""
import numpy as np
import pytest

from caffe2py import core, workspace

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

rng = np.random.default_rng(99)
U8 = TensorProto.UINT8


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def model(nodes, inputs, outputs, initializers=(), ms=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    return m


def ort_run(m, feeds):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def scalar(name, value, dtype):
    return helper.make_tensor(name, dtype, [], [value])


def int8_run(op, inputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op, inputs, ["y"], **kwargs))
    return workspace.FetchInt8Blob("y")


def feed(name, data, scale, zp):
    workspace.FeedBlob(name, workspace.Int8Tensor(data, scale, zp))


def within_one_step(got, want):
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, diff.max()
    return (diff == 0).mean()


def test_quantize_and_dequantize_equal_onnxruntimes():
    x = (rng.standard_normal((4, 50)) * 3).astype(np.float32)
    x[0, :6] = [0.05, 0.15, -0.05, 0.25, 1e9, -1e9]            # ties at scale 0.1 and saturation
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
               helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
              [helper.make_tensor_value_info("q", U8, x.shape), helper.make_tensor_value_info("d", TensorProto.FLOAT, x.shape)],
              [scalar("s", 0.1, TensorProto.FLOAT), scalar("z", 130, U8)])
    q_ort, d_ort = ort_run(m, {"x": x})
    workspace.FeedBlob("x", x)
    q = int8_run("Int8Quantize", ["x"], Y_scale=0.1, Y_zero_point=130)
    assert np.array_equal(q.data, q_ort)
    workspace.RunOperatorOnce(core.CreateOperator("Int8Dequantize", ["y"], ["d"]))
    assert np.array_equal(workspace.FetchBlob("d"), d_ort)


@pytest.mark.parametrize("stride, pad, group", [(1, 1, 1), (2, 1, 1), (1, 0, 4)])
def test_conv_within_one_step_of_qlinearconv(stride, pad, group):
    n, c, h, m, k = 2, 16, 11, 24, 3
    x, w = rng.integers(0, 256, (n, h, h, c), dtype=np.uint8), rng.integers(0, 256, (m, k, k, c // group), dtype=np.uint8)
    b = rng.integers(-4000, 4000, m).astype(np.int32)
    xs, ws, ys, yz = 0.02, 0.005, 0.08, 100
    feed("x", x, xs, 120)
    feed("w", w, ws, 135)
    feed("b", b, xs * ws, 0)
    y = int8_run("Int8Conv", ["x", "w", "b"], kernel=k, stride=stride, pad=pad, group=group, order="NHWC",
                 Y_scale=ys, Y_zero_point=yz)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group)
    w_nchw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    m_onnx = model([node], [helper.make_tensor_value_info("x", U8, [n, c, h, h])],
                   [helper.make_tensor_value_info("y", U8, None)],
                   [scalar("xs", xs, TensorProto.FLOAT), scalar("xz", 120, U8),
                    helper.make_tensor("w", U8, w_nchw.shape, w_nchw.tobytes(), raw=True),
                    scalar("ws", ws, TensorProto.FLOAT), scalar("wz", 135, U8), scalar("ys", ys, TensorProto.FLOAT),
                    scalar("yz", yz, U8), helper.make_tensor("b", TensorProto.INT32, [m], b.tolist())])
    (want,) = ort_run(m_onnx, {"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))})
    equal = within_one_step(y.data.transpose(0, 3, 1, 2), want)
    assert equal > 0.95
    # caffe2py's ONNX import of QLinearConv (the same integer sums, ONNX's rounding)
    from caffe2py.onnx import backend
    (ours,) = backend.prepare(m_onnx).run({"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))})
    within_one_step(ours, want)


def test_fc_within_one_step_of_qlinearmatmul():
    x, w = rng.integers(0, 256, (7, 300), dtype=np.uint8), rng.integers(0, 256, (20, 300), dtype=np.uint8)
    feed("x", x, 0.01, 128)
    feed("w", w, 0.004, 127)
    feed("b", np.zeros(20, np.int32), 0.00004, 0)
    y = int8_run("Int8FC", ["x", "w", "b"], Y_scale=0.2, Y_zero_point=128)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    wt = np.ascontiguousarray(w.T)
    m = model([node], [helper.make_tensor_value_info("a", U8, x.shape)], [helper.make_tensor_value_info("y", U8, None)],
              [scalar("as", 0.01, TensorProto.FLOAT), scalar("az", 128, U8),
               helper.make_tensor("b", U8, wt.shape, wt.tobytes(), raw=True), scalar("bs", 0.004, TensorProto.FLOAT),
               scalar("bz", 127, U8), scalar("ys", 0.2, TensorProto.FLOAT), scalar("yz", 128, U8)])
    (want,) = ort_run(m, {"a": x})
    assert within_one_step(y.data, want) > 0.95
    from caffe2py.onnx import backend
    (ours,) = backend.prepare(m).run({"a": x})
    within_one_step(ours, want)


def test_add_pool_sigmoid_within_one_step_of_onnxruntimes_contrib_ops():
    a, b = rng.integers(0, 256, (2, 6, 6, 8), dtype=np.uint8), rng.integers(0, 256, (2, 6, 6, 8), dtype=np.uint8)
    feed("a", a, 0.03, 100)
    feed("b", b, 0.05, 90)
    add = int8_run("Int8Add", ["a", "b"], Y_scale=0.06, Y_zero_point=110)
    pool = int8_run("Int8AveragePool", ["a"], kernel=2, stride=2, order="NHWC", Y_scale=0.025, Y_zero_point=95)
    sig = int8_run("Int8Sigmoid", ["a"], Y_scale=1 / 256, Y_zero_point=0)
    nodes = [helper.make_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["add"],
                              domain="com.microsoft"),
             helper.make_node("QLinearAveragePool", ["a", "as", "az", "ps", "pz"], ["pool"], domain="com.microsoft",
                              kernel_shape=[2, 2], strides=[2, 2], channels_last=1),
             helper.make_node("QLinearSigmoid", ["a", "as", "az", "ss", "sz"], ["sig"], domain="com.microsoft")]
    m = model(nodes, [helper.make_tensor_value_info("a", U8, a.shape), helper.make_tensor_value_info("b", U8, b.shape)],
              [helper.make_tensor_value_info(o, U8, None) for o in ("add", "pool", "sig")],
              [scalar("as", 0.03, TensorProto.FLOAT), scalar("az", 100, U8), scalar("bs", 0.05, TensorProto.FLOAT),
               scalar("bz", 90, U8), scalar("ys", 0.06, TensorProto.FLOAT), scalar("yz", 110, U8),
               scalar("ps", 0.025, TensorProto.FLOAT), scalar("pz", 95, U8), scalar("ss", 1 / 256, TensorProto.FLOAT),
               scalar("sz", 0, U8)], ms=True)
    want_add, want_pool, want_sig = ort_run(m, {"a": a, "b": b})
    assert within_one_step(add.data, want_add) > 0.9
    assert within_one_step(pool.data, want_pool) > 0.9
    assert within_one_step(sig.data, want_sig) > 0.9


def test_leaky_relu_softmax_global_pool_within_one_step_and_max_pool_concat_equal_to_onnxruntimes():
    a = rng.integers(0, 256, (2, 5, 5, 8), dtype=np.uint8)
    feed("a", a, 0.04, 120)
    leaky = int8_run("Int8LeakyRelu", ["a"], alpha=0.1, Y_scale=0.03, Y_zero_point=140)
    gap = int8_run("Int8AveragePool", ["a"], global_pooling=1, order="NHWC", Y_scale=0.02, Y_zero_point=125)
    mp = int8_run("Int8MaxPool", ["a"], kernel=2, stride=1, order="NHWC", Y_scale=0.04, Y_zero_point=120)
    cat = int8_run("Int8Concat", ["a", "a"], order="NHWC", Y_scale=0.04, Y_zero_point=120)
    rows = rng.integers(0, 256, (4, 30), dtype=np.uint8)
    feed("r", rows, 0.15, 100)
    soft = int8_run("Int8Softmax", ["r"], Y_scale=1 / 256, Y_zero_point=0)
    ms = dict(domain="com.microsoft")
    nodes = [helper.make_node("QLinearLeakyRelu", ["a", "as", "az", "ls", "lz"], ["leaky"], alpha=0.1, **ms),
             helper.make_node("QLinearGlobalAveragePool", ["a", "as", "az", "gs", "gz"], ["gap"], channels_last=1, **ms),
             helper.make_node("Transpose", ["a"], ["a_nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("MaxPool", ["a_nchw"], ["mp_nchw"], kernel_shape=[2, 2]),     # uint8 MaxPool
             helper.make_node("Transpose", ["mp_nchw"], ["mp"], perm=[0, 2, 3, 1]),
             helper.make_node("QLinearConcat", ["as", "az", "a", "as", "az", "a", "as", "az"], ["cat"], axis=3, **ms),
             helper.make_node("QLinearSoftmax", ["r", "rs", "rz", "ss", "sz"], ["soft"], axis=1, opset=13, **ms)]
    m = model(nodes, [helper.make_tensor_value_info("a", U8, a.shape), helper.make_tensor_value_info("r", U8, rows.shape)],
              [helper.make_tensor_value_info(o, U8, None) for o in ("leaky", "gap", "mp", "cat", "soft")],
              [scalar("as", 0.04, TensorProto.FLOAT), scalar("az", 120, U8), scalar("ls", 0.03, TensorProto.FLOAT),
               scalar("lz", 140, U8), scalar("gs", 0.02, TensorProto.FLOAT), scalar("gz", 125, U8),
               scalar("rs", 0.15, TensorProto.FLOAT), scalar("rz", 100, U8), scalar("ss", 1 / 256, TensorProto.FLOAT),
               scalar("sz", 0, U8)], ms=True)
    want = dict(zip(("leaky", "gap", "mp", "cat", "soft"), ort_run(m, {"a": a, "r": rows})))
    assert np.array_equal(mp.data, want["mp"]) and np.array_equal(cat.data, want["cat"])      # no rounding
    assert within_one_step(leaky.data, want["leaky"]) > 0.9
    assert within_one_step(gap.data.reshape(want["gap"].shape), want["gap"]) > 0.9
    assert within_one_step(soft.data, want["soft"]) > 0.9
