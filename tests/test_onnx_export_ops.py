"""Each exported Caffe2 op family: the exported model passes onnx's full check and
onnxruntime computes what caffe2py computes on the original net."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from _onnx_export import check_export, init_net_of, onnx_op_types, predict_net  # noqa: E402

RNG = np.random.default_rng(1234)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------- Conv

CONV_CASES = [
    dict(kernel=3, pad=1),
    dict(kernel=3, stride=2, pad_t=0, pad_l=1, pad_b=2, pad_r=1),
    dict(kernels=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(kernel=3, group=2),
    dict(kernel=3, stride=2, legacy_pad=2),      # SAME: the odd pixel at the end
    dict(kernel=3, legacy_pad=1, pad=4),         # VALID drops the pads
]


@pytest.mark.parametrize("args", CONV_CASES, ids=lambda a: ",".join("%s=%s" % kv for kv in a.items()))
def test_conv(args):
    group = args.get("group", 1)
    x, w, b = randn(2, 4, 9, 8), randn(6, 4 // group, 3, 3), randn(6)
    init = init_net_of({"w": w, "b": b})
    pred = predict_net(lambda n: n.Conv(["x", "w", "b"], "y", **args), ["x", "w", "b"], ["y"])
    check_export(pred, init, {"x": x}, rtol=1e-4, atol=1e-5)


def test_conv_same_padding_with_symbolic_spatial_dims_uses_auto_pad():
    x, w = randn(1, 2, 7, 6), randn(3, 2, 3, 3)
    init = init_net_of({"w": w})
    pred = predict_net(lambda n: n.Conv(["x", "w"], "y", kernel=3, stride=2, legacy_pad=2), ["x", "w"], ["y"])
    model = check_export(pred, init, {"x": x}, value_info={"x": (1, [1, 2, "h", "w"])}, rtol=1e-4, atol=1e-5)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    assert {a.name: a.s for a in conv.attribute}["auto_pad"] == b"SAME_UPPER"


def test_conv_nhwc_1d_3d_and_no_bias():
    x, w = randn(2, 5, 6, 3), randn(4, 3, 3, 3)      # NHWC input, filter M x kH x kW x C
    pred = predict_net(lambda n: n.Conv(["x", "w"], "y", kernel=3, pad=1, order="NHWC"), ["x", "w"], ["y"])
    check_export(pred, init_net_of({"w": w}), {"x": x}, rtol=1e-4, atol=1e-5)
    x1, w1 = randn(2, 3, 10), randn(4, 3, 3)
    pred = predict_net(lambda n: n.Conv(["x", "w"], "y", kernels=[3], strides=[2], pads=[1, 1]), ["x", "w"], ["y"])
    check_export(pred, init_net_of({"w": w1}), {"x": x1}, rtol=1e-4, atol=1e-5)
    x3, w3 = randn(1, 2, 4, 5, 6), randn(3, 2, 2, 2, 2)
    pred = predict_net(lambda n: n.Conv(["x", "w"], "y", kernels=[2, 2, 2]), ["x", "w"], ["y"])
    check_export(pred, init_net_of({"w": w3}), {"x": x3}, rtol=1e-4, atol=1e-5)


def test_fused_conv_forms():
    x, w, b, s = randn(1, 3, 6, 6), randn(4, 3, 3, 3), randn(4), randn(1, 4, 6, 6)
    init = init_net_of({"w": w, "b": b})
    pred = predict_net(lambda n: (n.ConvRelu(["x", "w", "b"], "y1", kernel=3, pad=1),
                                  n.ConvSumRelu(["x", "w", "b", "s"], "y2", kernel=3, pad=1)),
                       ["x", "w", "b", "s"], ["y1", "y2"])
    model = check_export(pred, init, {"x": x, "s": s}, rtol=1e-4, atol=1e-5)
    assert onnx_op_types(model) == ["Conv", "Relu", "Conv", "Add", "Relu"]


# ----------------------------------------------------------------- FC

@pytest.mark.parametrize("op,x_shape,w_shape,axis,axis_w", [
    ("FC", (5, 6), (3, 6), 1, 1),
    ("FC", (2, 3, 4, 2), (7, 24), 1, 1),          # X flattened at axis 1
    ("FC", (2, 3, 4, 2), (7, 8), 2, 1),           # Y reshaped to X.shape[:2] + [7]
    ("FC", (4, 6), (3, 2, 6), 1, 2),              # W flattened at axis_w 2
    ("FCTransposed", (5, 6), (6, 3), 1, 1),
    ("FCTransposed", (2, 2, 6), (6, 4), 2, 1),
])
def test_fc(op, x_shape, w_shape, axis, axis_w):
    n = int(np.prod(w_shape[axis_w:] if op == "FCTransposed" else w_shape[:axis_w]))
    x, w, b = randn(*x_shape), randn(*w_shape), randn(n)
    pred = predict_net(lambda net: getattr(net, op)(["x", "w", "b"], "y", axis=axis, axis_w=axis_w),
                       ["x", "w", "b"], ["y"])
    check_export(pred, init_net_of({"w": w, "b": b}), {"x": x}, rtol=1e-5, atol=1e-5)


def test_fc_with_symbolic_batch_and_axis_2():
    x, w, b = randn(3, 2, 5), randn(4, 5), randn(4)
    pred = predict_net(lambda n: n.FC(["x", "w", "b"], "y", axis=2), ["x", "w", "b"], ["y"])
    check_export(pred, init_net_of({"w": w, "b": b}), {"x": x}, value_info={"x": (1, ["batch", 2, 5])})


# ----------------------------------------------------------------- pooling, BN, LRN, Dropout

POOL_CASES = [
    ("MaxPool", dict(kernel=3, stride=2, pad=1)),
    ("MaxPool", dict(kernel=2, stride=2, legacy_pad=3)),         # Caffe's ceil rounding
    ("MaxPool", dict(kernels=[3, 2], strides=[2, 1], dilations=[2, 1])),
    ("AveragePool", dict(kernel=3, stride=2, pad=1)),
    ("AveragePool", dict(kernel=3, stride=2, pad=1, count_include_pad=1)),
    ("AveragePool", dict(kernel=3, stride=2, legacy_pad=3)),
    ("MaxPool", dict(global_pooling=1)),
    ("AveragePool", dict(global_pooling=1)),
    ("MaxPool", dict(kernel=3, stride=2, legacy_pad=2)),
    ("AveragePool", dict(kernel=2, stride=2, order="NHWC")),
]


@pytest.mark.parametrize("op,args", POOL_CASES, ids=lambda v: str(v))
def test_pool(op, args):
    x = randn(2, 3, 9, 10)
    pred = predict_net(lambda n: getattr(n, op)(["x"], "y", **args), ["x"], ["y"])
    check_export(pred, None, {"x": x})


def test_average_pool_dilations_are_refused():
    from caffe2py.errors import Caffe2Error
    from caffe2py.onnx import frontend
    pred = predict_net(lambda n: n.AveragePool(["x"], "y", kernel=2, dilation=2), ["x"], ["y"])
    with pytest.raises(Caffe2Error, match=r"AveragePool #0 'y': .*dilation"):
        frontend.caffe2_net_to_onnx_model(pred, None, {"x": (1, [1, 2, 9, 9])})


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_spatial_bn(order):
    x = randn(2, 4, 5, 3) if order == "NCHW" else randn(2, 5, 3, 4)
    params = {"s": randn(4), "b": randn(4), "m": randn(4), "v": np.abs(randn(4)) + 0.5}
    pred = predict_net(lambda n: n.SpatialBN(["x", "s", "b", "m", "v"], "y", is_test=1, epsilon=1e-3, order=order),
                       ["x", "s", "b", "m", "v"], ["y"])
    check_export(pred, init_net_of(params), {"x": x}, rtol=1e-5, atol=1e-5)


def test_lrn_and_dropout():
    x = randn(2, 7, 4, 4)
    pred = predict_net(lambda n: (n.LRN(["x"], ["y", "scale"], size=5, alpha=2e-4, beta=0.75, bias=2.0),
                                  n.Dropout(["y"], ["z", "mask"], ratio=0.3, is_test=1)),
                       ["x"], ["z", "mask"])
    model = check_export(pred, None, {"x": x})
    assert "Dropout" in onnx_op_types(model)      # the mask output is a graph output
    pred = predict_net(lambda n: n.Dropout(["x"], ["z"], ratio=0.3, is_test=1), ["x"], ["z"])
    assert onnx_op_types(check_export(pred, None, {"x": x})) == ["Identity"]


def test_lrn_scale_output_read_is_refused():
    from caffe2py.errors import Caffe2Error
    pred = predict_net(lambda n: (n.LRN(["x"], ["y", "scale"], size=3, alpha=1e-3, beta=0.5),
                                  n.Relu(["scale"], "z")), ["x"], ["z"])
    with pytest.raises(Caffe2Error, match=r"LRN #0 'y'.*scale"):
        check_export(pred, None, {"x": randn(1, 4, 3, 3)})


# ----------------------------------------------------------------- activations and arithmetic

@pytest.mark.parametrize("shape,axis", [((3, 5), 1), ((2, 3, 4, 5), 1), ((2, 3, 4), 2), ((2, 3, 4), -1),
                                        ((2, 3, 4), 0)])
def test_softmax_coerces_to_2d_at_axis(shape, axis):
    x = randn(*shape)
    pred = predict_net(lambda n: n.Softmax(["x"], "y", axis=axis), ["x"], ["y"])
    check_export(pred, None, {"x": x})
    # Caffe2's meaning, written out: normalise over everything from `axis` on
    flat = x.reshape(int(np.prod(shape[:axis % len(shape)])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    expected = (e / e.sum(axis=1, keepdims=True)).reshape(shape)
    from _onnx_export import run_onnxruntime
    from caffe2py.onnx import frontend
    got = run_onnxruntime(frontend.caffe2_net_to_onnx_model(pred, None, {"x": (1, shape)}), {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_activations_scale_and_sum():
    x, y = randn(3, 4), randn(3, 4)
    pred = predict_net(lambda n: (n.Relu("x", "r"), n.Sigmoid("x", "s"), n.Tanh("x", "t"),
                                  n.Scale("t", "t", scale=-2.5),
                                  n.Sum(["r", "s", "t", "y"], "out")), ["x", "y"], ["out"])
    check_export(pred, None, {"x": x, "y": y})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("b_shape,args", [
    ((4,), dict(broadcast=1, axis=1)),             # per channel, MNIST's bias add
    ((3, 4), dict(broadcast=1, axis=0)),
    ((5, 6), dict(broadcast=1)),                   # suffix
    ((4, 1), dict(broadcast=1, axis=1)),           # trailing 1 sticking out is dropped
    ((4,), dict(broadcast=1, axis_str="C", order="NCHW")),
    ((1, 4, 1, 1), {}),                            # NumPy broadcasting
])
def test_binary_broadcasting(op, b_shape, args):
    a = randn(3, 4, 5, 6)
    b = np.abs(randn(*b_shape)) + 0.5
    pred = predict_net(lambda n: getattr(n, op)(["a", "b"], "c", **args), ["a", "b"], ["c"])
    check_export(pred, init_net_of({"b": b}), {"a": a})


def test_binary_with_constant_input_legacy_broadcast_in_place():
    a = randn(2, 3)
    pred = predict_net(lambda n: n.Mul(["a", "s"], "a", broadcast=1), ["a", "s"], ["a"])
    model = check_export(pred, init_net_of({"s": np.array([2.0], np.float32)}), {"a": a},
                         value_info={"a": (1, [2, 3])})
    assert [o.name for o in model.graph.output] == ["a_1"]     # the input keeps the name


# ----------------------------------------------------------------- layout

def test_concat_split_with_split_info():
    a, b = randn(2, 3, 4), randn(2, 5, 4)
    pred = predict_net(lambda n: (n.Concat(["a", "b"], ["c", "info"], axis=1),
                                  n.Relu("c", "r"),
                                  n.Split(["r", "info"], ["p", "q"], axis=1)),
                       ["a", "b"], ["c", "info", "p", "q"])
    check_export(pred, None, {"a": a, "b": b})
    check_export(pred, None, {"a": a, "b": b},
                 value_info={"a": (1, ["n", "k1", 4]), "b": (1, ["n", "k2", 4])})   # symbolic sizes


@pytest.mark.parametrize("opset", [13, 18])
def test_concat_add_axis_and_split_forms(opset):
    a, b, c = randn(2, 3), randn(2, 3), randn(2, 3)
    pred = predict_net(lambda n: (n.Concat(["a", "b", "c"], ["s", "info"], axis=1, add_axis=1),
                                  n.Split(["s"], ["p0", "p1", "p2"], axis=1, add_axis=1),
                                  n.Split(["s"], ["q0", "q1"], axis=2, split=[1, 2]),
                                  n.Split(["s"], ["e0", "e1", "e2"], axis=-1)),
                       ["a", "b", "c"], ["s", "info", "p0", "p1", "p2", "q0", "q1", "e0", "e2"])
    check_export(pred, None, {"a": a, "b": b, "c": c}, opset=opset)


def test_reshape_flatten_transpose():
    x = randn(2, 3, 4)
    pred = predict_net(lambda n: (n.Reshape(["x"], ["r", "old"], shape=[0, -1]),
                                  n.Transpose(["x"], "t", axes=[2, 0, 1]),
                                  n.Transpose(["x"], "tr"),
                                  n.Flatten(["t"], "f", axis=2),
                                  n.Reshape(["t", "shape"], ["r2"])),
                       ["x", "shape"], ["r", "old", "t", "tr", "f", "r2"])
    check_export(pred, init_net_of({"shape": np.array([6, -1], np.int32)}), {"x": x})


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_channel_shuffle(order):
    x = randn(2, 6, 3, 2) if order == "NCHW" else randn(2, 3, 2, 6)
    pred = predict_net(lambda n: n.ChannelShuffle(["x"], "y", group=3, order=order), ["x"], ["y"])
    check_export(pred, None, {"x": x})


def test_concat_split_by_order():
    a, b = randn(1, 2, 2, 3), randn(1, 2, 2, 5)
    pred = predict_net(lambda n: (n.Concat(["a", "b"], ["t", "info"], order="NHWC"),
                                  n.Split(["t", "info"], ["p", "q"], order="NHWC")),
                       ["a", "b"], ["t", "info", "p", "q"])
    check_export(pred, None, {"a": a, "b": b})


def test_copy_like_ops_are_identity():
    x = randn(2, 2)
    pred = predict_net(lambda n: (n.Copy("x", "a"), n.StopGradient("a", "b")), ["x"], ["b"])
    assert onnx_op_types(check_export(pred, None, {"x": x})) == ["Identity", "Identity"]


# ----------------------------------------------------------------- recsys helpers, Cast, Clip

@pytest.mark.parametrize("ta,tb,shapes", [(0, 0, ((2, 3, 4), (2, 4, 5))), (1, 0, ((2, 4, 3), (2, 4, 5))),
                                          (0, 1, ((3, 4), (5, 4))), (1, 1, ((2, 4, 3), (2, 5, 4)))])
def test_batch_matmul(ta, tb, shapes):
    a, b = randn(*shapes[0]), randn(*shapes[1])
    pred = predict_net(lambda n: n.BatchMatMul(["a", "b"], "y", trans_a=ta, trans_b=tb), ["a", "b"], ["y"])
    check_export(pred, None, {"a": a, "b": b})


def test_batch_matmul_broadcast():
    a, b = randn(2, 1, 3, 4), randn(5, 4, 2)
    pred = predict_net(lambda n: n.BatchMatMul(["a", "b"], "y", broadcast=1), ["a", "b"], ["y"])
    check_export(pred, None, {"a": a, "b": b})


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_and_batch_gather(index_dtype):
    data = randn(6, 4)
    idx = np.array([[0, 5], [2, 2]], index_dtype)
    cols = np.array([3, 0, 1], index_dtype)
    pred = predict_net(lambda n: (n.Gather(["data", "idx"], "g"), n.BatchGather(["data", "cols"], "bg")),
                       ["data", "idx", "cols"], ["g", "bg"])
    check_export(pred, None, {"data": data, "idx": idx, "cols": cols})


def test_cast_and_clip():
    x = randn(3, 4) * 3
    pred = predict_net(lambda n: (n.Cast(["x"], "i", to=2),               # INT32 in Caffe2's enum
                                  n.Cast(["i"], "d", to="double"),
                                  n.Cast(["x"], "h", to=12),              # FLOAT16
                                  n.Cast(["x"], "flag", to="BOOL"),
                                  n.Clip(["x"], "c", min=-1.0, max=0.5),
                                  n.Clip(["x"], "lo", min=0.25)),
                       ["x"], ["i", "d", "h", "flag", "c", "lo"])
    check_export(pred, None, {"x": x})
