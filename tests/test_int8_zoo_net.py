"""An int8 net built as Caffe2's quantized model-zoo nets are (ResNet-style body, FC
classifier, a Mask R-CNN-style head behind If over IsEmpty): an init net of
Int8GivenTensorFill / Int8GivenIntTensorFill parameters and a predict net read from
text NetDef (NCHW2NHWC, Int8Quantize, Int8ConvRelu, Int8Conv, Int8SumRelu,
Int8AveragePool, Int8FC, Int8Softmax, Int8RoIAlign, Int8Dequantize, NHWC2NCHW).
Its outputs match the float net it was quantized from within the quantization error.

The quantization is done here as a converter would: activation ranges from a run of the
float net on calibration data, weights per tensor around zero point 128, biases as
int32 at the input scale times the weight scale, FC rows reordered from CHW to HWC."""
import numpy as np
import pytest
from google.protobuf import text_format

from caffe2py import core, workspace
from caffe2py.proto import caffe2_pb2

rng = np.random.default_rng(7)
C_IN, C, CLASSES, H = 3, 8, 10, 16


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def float_params():
    return {
        "w1": rng.uniform(-0.5, 0.5, (C, C_IN, 3, 3)).astype(np.float32), "b1": rng.uniform(-0.1, 0.1, C).astype(np.float32),
        "w2": rng.uniform(-0.3, 0.3, (C, C, 3, 3)).astype(np.float32), "b2": rng.uniform(-0.1, 0.1, C).astype(np.float32),
        "wf": rng.uniform(-0.2, 0.2, (CLASSES, C * 4 * 4)).astype(np.float32),
        "bf": rng.uniform(-0.2, 0.2, CLASSES).astype(np.float32),
        "wm": rng.uniform(-0.5, 0.5, (4, C, 1, 1)).astype(np.float32), "bm": rng.uniform(-0.1, 0.1, 4).astype(np.float32),
    }


def float_net():
    net = core.Net("float")
    net.Conv(["X", "w1", "b1"], "c1", kernel=3, pad=1)
    net.Relu("c1", "r1")
    net.Conv(["r1", "w2", "b2"], "c2", kernel=3, pad=1)
    net.Sum(["c2", "r1"], "s")
    net.Relu("s", "feat")
    net.AveragePool("feat", "p", kernel=4, stride=4)
    net.FC(["p", "wf", "bf"], "f")
    net.Softmax("f", "prob")
    net.RoIAlign(["r1", "rois"], "roi", pooled_h=2, pooled_w=2, spatial_scale=1.0, sampling_ratio=2)
    net.Conv(["roi", "wm", "bm"], "mask", kernel=1)
    return net


PREDICT_NET = """
name: "int8_predict"
external_input: "X"
external_input: "rois"
external_input: "w1" external_input: "b1" external_input: "w2" external_input: "b2"
external_input: "wf" external_input: "bf" external_input: "wm" external_input: "bm"
external_output: "prob"
external_output: "feat"
external_output: "mask"
op { type: "NCHW2NHWC" input: "X" output: "X_nhwc" }
op { type: "Int8Quantize" input: "X_nhwc" output: "Xq"
     arg { name: "Y_scale" f: %(x)s } arg { name: "Y_zero_point" i: 0 } }
op { type: "Int8ConvRelu" input: "Xq" input: "w1" input: "b1" output: "r1q"
     arg { name: "kernel" i: 3 } arg { name: "pad" i: 1 } arg { name: "order" s: "NHWC" }
     arg { name: "Y_scale" f: %(r1)s } arg { name: "Y_zero_point" i: 0 } }
op { type: "Int8Conv" input: "r1q" input: "w2" input: "b2" output: "c2q"
     arg { name: "kernel" i: 3 } arg { name: "pad" i: 1 } arg { name: "order" s: "NHWC" }
     arg { name: "Y_scale" f: %(c2)s } arg { name: "Y_zero_point" i: 128 } }
op { type: "Int8SumRelu" input: "c2q" input: "r1q" output: "featq"
     arg { name: "Y_scale" f: %(feat)s } arg { name: "Y_zero_point" i: 0 } }
op { type: "Int8AveragePool" input: "featq" output: "pq"
     arg { name: "kernel" i: 4 } arg { name: "stride" i: 4 } arg { name: "order" s: "NHWC" }
     arg { name: "Y_scale" f: %(feat)s } arg { name: "Y_zero_point" i: 0 } }
op { type: "Int8FC" input: "pq" input: "wf" input: "bf" output: "fq"
     arg { name: "Y_scale" f: %(f)s } arg { name: "Y_zero_point" i: 128 } }
op { type: "Int8Softmax" input: "fq" output: "probq"
     arg { name: "Y_scale" f: 0.00390625 } arg { name: "Y_zero_point" i: 0 } }
op { type: "Int8Dequantize" input: "probq" output: "prob" }
op { type: "Int8Dequantize" input: "featq" output: "feat_nhwc" }
op { type: "NHWC2NCHW" input: "feat_nhwc" output: "feat" }
op { type: "IsEmpty" input: "rois" output: "no_rois" }
op { type: "If" input: "no_rois" input: "r1q" input: "rois" output: "mask"
     arg { name: "then_net" n {
       name: "no_detections"
       op { type: "ConstantFill" output: "mask" arg { name: "shape" ints: 0 ints: 4 ints: 2 ints: 2 } }
     } }
     arg { name: "else_net" n {
       name: "mask_head"
       op { type: "Int8RoIAlign" input: "r1q" input: "rois" output: "roiq"
            arg { name: "pooled_h" i: 2 } arg { name: "pooled_w" i: 2 } arg { name: "spatial_scale" f: 1.0 }
            arg { name: "sampling_ratio" i: 2 } arg { name: "order" s: "NHWC" }
            arg { name: "Y_scale" f: %(roi)s } arg { name: "Y_zero_point" i: 0 } }
       op { type: "Int8Conv" input: "roiq" input: "wm" input: "bm" output: "maskq"
            arg { name: "kernel" i: 1 } arg { name: "order" s: "NHWC" }
            arg { name: "Y_scale" f: %(mask)s } arg { name: "Y_zero_point" i: 128 } }
       op { type: "Int8Dequantize" input: "maskq" output: "mask_nhwc" }
       op { type: "NHWC2NCHW" input: "mask_nhwc" output: "mask" }
     } }
}
"""


def quantize_weights(w):
    """Per tensor, zero point 128: (uint8 values, scale)."""
    scale = float(np.float32(np.abs(w).max() / 127.0))
    return np.clip(np.rint(w / np.float32(scale)) + 128, 0, 255).astype(np.uint8), scale


def init_net(params, scales):
    """Int8 parameters as the zoo's init nets hold them (NHWC filters, int32 biases)."""
    net = core.Net("int8_init")
    inputs = {"w1": "x", "w2": "r1", "wf": "feat", "wm": "roi"}
    for w_name, b_name in (("w1", "b1"), ("w2", "b2"), ("wf", "bf"), ("wm", "bm")):
        w = params[w_name]
        if w_name == "wf":            # FC over an NHWC-flattened map: rows CHW -> HWC
            w = w.reshape(CLASSES, C, 4, 4).transpose(0, 2, 3, 1).reshape(CLASSES, -1)
        else:
            w = w.transpose(0, 2, 3, 1)
        q, w_scale = quantize_weights(w)
        net.Int8GivenTensorFill([], [w_name], values=q.tobytes(), shape=list(q.shape), Y_scale=w_scale,
                                Y_zero_point=128)
        b_scale = float(np.float32(scales[inputs[w_name]]) * np.float32(w_scale))
        bias = np.rint(params[b_name] / b_scale).astype(np.int32)
        net.Int8GivenIntTensorFill([], [b_name], values=bias.tolist(), shape=[len(bias)], Y_scale=b_scale)
    return net


def calibrate(params, x, rois):
    """Activation scales from a float run: [0, max] over 255 steps for post-ReLU maps,
    +-max over 127 steps around 128 for signed ones."""
    for name, value in params.items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("rois", rois)
    workspace.RunNetOnce(float_net())
    fetch = workspace.FetchBlob
    return {"x": 1.0 / 255, "r1": fetch("r1").max() / 255, "c2": np.abs(fetch("c2")).max() / 127,
            "feat": fetch("feat").max() / 255, "f": np.abs(fetch("f")).max() / 127, "roi": fetch("roi").max() / 255,
            "mask": np.abs(fetch("mask")).max() / 127}


def run_int8(params, scales, x, rois):
    workspace.RunNetOnce(init_net(params, scales))
    predict = text_format.Parse(PREDICT_NET % {k: repr(float(np.float32(v))) for k, v in scales.items()},
                                caffe2_pb2.NetDef())
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("rois", rois)
    workspace.RunNetOnce(predict)
    return {name: workspace.FetchBlob(name) for name in ("prob", "feat", "mask")}


def test_int8_zoo_style_net_matches_its_float_net_within_quantization_error():
    params = float_params()
    x = rng.uniform(0, 1, (2, C_IN, H, H)).astype(np.float32)
    rois = np.array([[0, 1.0, 2.0, 9.0, 12.0], [1, 4.5, 0.5, 14.0, 7.5], [1, 0.0, 0.0, 15.0, 15.0]], np.float32)
    # calibration data that covers the input's range, as a converter's representative set does
    scales = calibrate(params, np.concatenate([x, rng.uniform(0, 1, (4, C_IN, H, H)).astype(np.float32)]), rois)

    for name, value in params.items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("rois", rois)
    workspace.RunNetOnce(float_net())
    want = {name: workspace.FetchBlob(name) for name in ("prob", "feat", "mask")}

    workspace.ResetWorkspace()
    got = run_int8(params, scales, x, rois)
    assert got["feat"].shape == want["feat"].shape == (2, C, H, H)
    assert got["mask"].shape == want["mask"].shape == (3, 4, 2, 2)
    assert got["prob"].shape == want["prob"].shape == (2, CLASSES)
    # each output within a few of its own quantization steps of the float value (the
    # errors of the layers before it add up), and much closer on average
    for name, step in (("feat", scales["feat"]), ("mask", scales["mask"]), ("prob", 1 / 256)):
        err = np.abs(got[name] - want[name])
        assert err.max() <= 4 * step, (name, err.max() / step)
        assert err.mean() <= 1 * step, (name, err.mean() / step)
    assert (got["prob"].argmax(axis=1) == want["prob"].argmax(axis=1)).all()


def test_the_head_is_skipped_when_there_are_no_rois():
    params = float_params()
    calib = rng.uniform(0, 1, (2, C_IN, H, H)).astype(np.float32)
    rois = np.array([[0, 1.0, 2.0, 9.0, 12.0]], np.float32)
    scales = calibrate(params, calib, rois)
    workspace.ResetWorkspace()
    got = run_int8(params, scales, calib, np.zeros((0, 5), np.float32))
    assert got["mask"].shape == (0, 4, 2, 2)
    assert not workspace.HasBlob("roiq")            # the branch's blobs stay inside it
    assert got["prob"].shape == (2, CLASSES)
