"""Caffe2 -> ONNX export of Int8 nets (QDQ form): onnx's checker accepts the model and
onnxruntime's results are within one quantization step of caffe2py's (the float ops
between DequantizeLinear and QuantizeLinear round differently from Caffe2's
fixed-point requantization), most of them equal."""
import numpy as np
import pytest

from _onnx_export import run_caffe2, run_onnxruntime, value_info_of
from caffe2py import core
from caffe2py.onnx import frontend
from caffe2py.onnx.export_op import ExportError

onnx = pytest.importorskip("onnx")
rng = np.random.default_rng(5)


def init_net():
    net = core.Net("init")

    def weights(name, shape, scale):
        net.Int8GivenTensorFill([], [name], values=rng.integers(0, 256, shape, dtype=np.uint8).tobytes(),
                                shape=list(shape), Y_scale=scale, Y_zero_point=128)

    def bias(name, n, scale):
        net.Int8GivenIntTensorFill([], [name], values=rng.integers(-3000, 3000, n).tolist(), shape=[n], Y_scale=scale)
    weights("w1", (8, 3, 3, 3), 0.004)
    bias("b1", 8, 0.0001)
    weights("w2", (8, 3, 3, 16), 0.003)
    bias("b2", 8, 0.0001)
    weights("wd", (16, 3, 3, 1), 0.01)
    bias("bd", 16, 0.0001)
    weights("wf", (5, 8 * 8 * 16), 0.002)
    bias("bf", 5, 0.0001)
    weights("wt", (16, 2, 2, 4), 0.01)
    bias("bt", 4, 0.0001)
    return net


EXACT = ["cat", "split", "mp", "relu", "sh", "big", "cut", "tr", "flat", "fl"]
WITHIN_ONE_STEP = ["c1", "c2", "cd", "up", "f", "add", "ap", "gap", "prob", "sig", "leaky"]


def predict_net():
    """Every Int8 op reads tensors Int8Quantize makes (bit-exact in both runtimes), so
    each output shows that op's own rounding difference, not a chain's."""
    net = core.Net("int8_export")
    net.Proto().external_input.extend(["X", "G", "H", "F", "w1", "b1", "w2", "b2", "wd", "bd", "wf", "bf", "wt", "bt"])
    q = dict(order="NHWC")
    for name, scale, zp in (("X", 0.02, 128), ("G", 0.03, 120), ("H", 0.05, 130)):
        net.NCHW2NHWC(name, name + "n")
        net.Int8Quantize(name + "n", name.lower() + "q", Y_scale=scale, Y_zero_point=zp)
    net.Int8Quantize("F", "fq", Y_scale=0.1, Y_zero_point=128)
    keep = dict(Y_scale=0.03, Y_zero_point=120)
    net.Int8ConvRelu(["xq", "w1", "b1"], "c1", kernel=3, pad=1, Y_scale=0.05, Y_zero_point=0, **q)
    net.Int8Conv(["gq", "w2", "b2"], "c2", kernel=3, stride=2, pad=1, Y_scale=0.08, Y_zero_point=128, **q)
    net.Int8Conv(["gq", "wd", "bd"], "cd", kernel=3, pad=1, group=16, Y_scale=0.05, Y_zero_point=128, **q)
    net.Int8ConvTranspose(["gq", "wt", "bt"], "up", kernel=2, stride=2, Y_scale=0.1, Y_zero_point=128, **q)
    net.Int8FC(["gq", "wf", "bf"], "f", Y_scale=0.2, Y_zero_point=128)
    net.Int8AddRelu(["gq", "hq"], "add", Y_scale=0.07, Y_zero_point=0)
    net.Int8AveragePool("gq", "ap", kernel=3, stride=2, pad=1, Y_scale=0.02, Y_zero_point=110, **q)
    net.Int8AveragePool("gq", "gap", global_pooling=1, Y_scale=0.01, Y_zero_point=128, **q)
    net.Int8Softmax("fq", "prob", Y_scale=1 / 256, Y_zero_point=0)
    net.Int8Sigmoid("gq", "sig", Y_scale=1 / 256, Y_zero_point=0)
    net.Int8LeakyRelu("gq", "leaky", alpha=0.2, Y_scale=0.02, Y_zero_point=100)
    net.Int8Concat(["gq", "gq"], ["cat", "split"], **dict(keep, **q))
    net.Int8MaxPool("gq", "mp", kernel=2, stride=2, **dict(keep, **q))
    net.Int8Relu("gq", "relu", **keep)
    net.Int8ChannelShuffle("gq", "sh", group=2, **dict(keep, **q))
    net.Int8ResizeNearest("gq", "big", height_scale=2.0, width_scale=1.5, **keep)
    net.Int8Slice("gq", "cut", starts=[0, 1, 2, 0], ends=[-1, -2, 7, 3], **keep)
    net.Int8Transpose("gq", "tr", axes=[0, 3, 1, 2], **keep)
    net.Int8Reshape("gq", ["flat", "old_shape"], shape=[0, -1], **keep)
    net.Int8Flatten("gq", "fl", axis=2, **keep)
    net.Int8Dequantize("add", "add_f")
    net.Proto().external_output.extend(EXACT + WITHIN_ONE_STEP + ["add_f", "old_shape"])
    return net


def test_int8_net_exports_as_qdq_and_runs_in_onnxruntime():
    feeds = {"X": rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32),
             "G": rng.uniform(-3, 3, (2, 16, 8, 8)).astype(np.float32),
             "H": rng.uniform(-4, 4, (2, 16, 8, 8)).astype(np.float32),
             "F": rng.uniform(-5, 5, (2, 5)).astype(np.float32)}
    pred, init = predict_net().Proto(), init_net().Proto()
    want = dict(zip(pred.external_output, run_caffe2(pred, init, feeds)))
    model = frontend.caffe2_net_to_onnx_model(pred, init, value_info_of(feeds))
    onnx.checker.check_model(model, full_check=True)
    types = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "ConvTranspose", "Gemm", "AveragePool",
            "GlobalAveragePool", "Resize", "Softmax"} <= types
    got = dict(zip(pred.external_output, run_onnxruntime(model, feeds)))
    for name in EXACT + WITHIN_ONE_STEP:
        w = want[name][0] if isinstance(want[name], tuple) else want[name]     # an Int8 blob: its data
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, name
        diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
        if name in EXACT:
            assert diff.max() == 0, name
        else:
            assert diff.max() <= 1 and (diff == 0).mean() > 0.8, (name, diff.max(), (diff == 0).mean())
    assert np.abs(got["add_f"] - want["add_f"]).max() <= np.float32(0.07) * 1.0001
    assert got["old_shape"].tolist() == want["old_shape"].tolist() == [2, 8, 8, 16]


def test_int8_graph_inputs_without_known_quantization_are_refused():
    net = core.Net("n")
    net.Int8Relu("q", "y", Y_scale=0.1)
    with pytest.raises(ExportError, match="scale and zero point of this Int8 tensor are not known"):
        frontend.caffe2_net_to_onnx_model(net.Proto(), None, {"q": (onnx.TensorProto.UINT8, [2, 3])})
