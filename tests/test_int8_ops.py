"""Caffe2's Int8 operators against NumPy references of their integer arithmetic
(tests/_int8_reference.py: gemmlowp's and QNNPACK's formulas), bit for bit, and the
named errors for bad Int8 input."""
import math

import numpy as np
import pytest

import _int8_reference as R
from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

rng = np.random.default_rng(1234)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def feed(name, data, scale=1.0, zero_point=0):
    workspace.FeedBlob(name, workspace.Int8Tensor(np.asarray(data), scale, zero_point))


def run(op_type, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))
    return workspace.FetchInt8Blob(outputs[0]) if outputs else None


def u8(*shape):
    return rng.integers(0, 256, shape, dtype=np.uint8)


# ----------------------------------------------------------------- Int8Quantize / Int8Dequantize

def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.0, 0.25, 0.75, 1.25, -0.25, -0.75, 1e6, -1e6, 3.1, -3.1, 0.5 - 1e-7, np.nan], np.float32)
    workspace.FeedBlob("x", x)
    q = run("Int8Quantize", ["x"], ["q"], Y_scale=0.5, Y_zero_point=10)
    assert q.scale == 0.5 and q.zero_point == 10 and q.data.dtype == np.uint8
    # x / 0.5 = 0, 0.5, 1.5, 2.5, -0.5, -1.5 -> 0, 0, 2, 2, 0, -2 (ties to even)
    assert q.data.tolist() == [10, 10, 12, 12, 10, 8, 255, 0, 16, 4, 11, 0]
    x = rng.standard_normal((3, 4, 5)).astype(np.float32) * 3
    workspace.FeedBlob("x", x)
    q = run("Int8Quantize", ["x"], ["q"], Y_scale=0.023, Y_zero_point=131)
    assert (q.data == R.quantize(x, 0.023, 131)).all()


def test_quantize_qparam_input_replaces_the_arguments():
    from caffe2py.int8_tensor import Int8QuantParams
    x = rng.standard_normal(20).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.current_workspace().blobs["qp"] = Int8QuantParams(0.04, 77)
    q = run("Int8Quantize", ["x", "qp"], ["q"], Y_scale=1.0, Y_zero_point=0)
    assert (q.scale, q.zero_point) == (float(np.float32(0.04)), 77)
    assert (q.data == R.quantize(x, 0.04, 77)).all()


def test_dequantize_is_scale_times_offset_value():
    data = u8(2, 3, 4)
    feed("q", data, 0.037, 99)
    workspace.RunOperatorOnce(core.CreateOperator("Int8Dequantize", ["q"], ["y"]))
    y = workspace.FetchBlob("y")
    assert y.dtype == np.float32
    assert np.array_equal(y, (data.astype(np.int32) - 99).astype(np.float32) * np.float32(0.037))


def test_given_tensor_fills():
    values = u8(2, 2, 2, 3)
    q = run("Int8GivenTensorFill", [], ["w"], values=values.tobytes(), shape=[2, 2, 2, 3], Y_scale=0.5,
            Y_zero_point=128)
    assert (q.data == values).all() and (q.scale, q.zero_point) == (0.5, 128)
    b = run("Int8GivenIntTensorFill", [], ["b"], values=[-7, 0, 2 ** 31 - 1], shape=[3], Y_scale=0.25)
    assert b.data.dtype == np.int32 and b.data.tolist() == [-7, 0, 2 ** 31 - 1]
    with pytest.raises(Caffe2Error, match="5 values do not fill shape"):
        run("Int8GivenTensorFill", [], ["w"], values=b"12345", shape=[2, 3])
    with pytest.raises(Caffe2Error, match="does not fit int32"):
        run("Int8GivenIntTensorFill", [], ["b"], values=[2 ** 31], shape=[1])


# ----------------------------------------------------------------- Int8Conv / Int8ConvRelu

CONV_CASES = [
    # (n, h, w, c, m, kernel, stride, pads (t, l, b, r), dilation, group)
    (2, 7, 6, 3, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (1, 9, 9, 16, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    (1, 8, 10, 12, 6, (3, 2), (1, 2), (0, 1, 2, 0), (2, 1), 3),       # groups, dilation, uneven pads
    (3, 5, 5, 20, 33, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),       # 1x1
    (2, 10, 10, 24, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 24),   # depthwise
    (1, 6, 6, 8, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),       # channel multiplier 2
    (1, 4, 4, 300, 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),     # long K (2700)
    (2, 9, 11, 40, 32, (3, 3), (1, 1), (0, 2, 1, 0), (1, 1), 1),      # 3x3 stride 1 (Winograd): odd sizes, uneven pads
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("relu", [False, True])
def test_conv_matches_the_integer_reference(case, relu):
    n, h, w, c, m, kernel, stride, pads, dilation, group = case
    x, wt = u8(n, h, w, c), u8(m, kernel[0], kernel[1], c // group)
    bias = rng.integers(-20000, 20000, m).astype(np.int32)
    xs, ws, ys = 0.021, 0.0047, 0.09
    feed("x", x, xs, 117)
    feed("w", wt, ws, 129)
    feed("b", bias, xs * ws, 0)
    y = run("Int8ConvRelu" if relu else "Int8Conv", ["x", "w", "b"], ["y"], kernels=list(kernel),
            strides=list(stride), pads=[pads[0], pads[1], pads[2], pads[3]], dilations=list(dilation), group=group,
            order="NHWC", Y_scale=ys, Y_zero_point=41)
    acc = R.conv_nhwc(x, 117, wt, 129, bias, kernel, stride, pads, dilation, group)
    want = R.requantize(acc, R.conv_multiplier(xs, ws, ys), 41, lo=41 if relu else 0)
    assert y.data.shape == want.shape and (y.scale, y.zero_point) == (float(np.float32(ys)), 41)
    assert np.array_equal(y.data, want)
    assert 0 < (y.data == (41 if relu else 0)).mean() < 0.9      # the values exercise the clamp, not saturate


@pytest.mark.parametrize("channels", [19, 24])
def test_conv_requantization_rounds_as_gemmlowp(channels):
    """Scale 0.25 exactly (multiplier 2**30, shift 1): the doubling high multiply rounds
    acc / 2 half up, then the divide by 2 rounds half away from zero, so +1 -> 1 and
    -6 -> -2, where rounding acc / 4 once would give 0 and -2 (or -1 to even). With 24
    channels (a multiple of 8) the output pass runs on 8 int32 lanes at a time."""
    acc = np.arange(-9, 10)
    feed("x", np.full((1, 1, len(acc), 1), 100, np.uint8), 0.5, 100)   # x - zp = 0: the bias is the sum
    feed("w", np.ones((channels, 1, 1, 1), np.uint8), 0.5, 0)
    rows = []
    for k, a in enumerate(acc):
        bias = np.zeros(channels, np.int32)
        bias[k] = a
        feed("b", bias, 0.25, 0)
        y = run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, order="NHWC", Y_scale=1.0, Y_zero_point=128)
        rows.append(int(y.data[0, 0, 0, k]) - 128)
    assert rows == [int(v) for v in R.requantize(acc, 0.25, 128).astype(int) - 128]
    assert rows[acc.tolist().index(1)] == 1 and rows[acc.tolist().index(-6)] == -2
    assert rows[acc.tolist().index(2)] == 1 and rows[acc.tolist().index(-2)] == -1


@pytest.mark.parametrize("channels", [2, 8])
def test_conv_int32_sums_wrap_as_in_c(channels):
    """A bias near the int32 limit: the sum wraps modulo 2**32 (QNNPACK's int32 math), in
    the scalar output pass and (8 channels) the 8-lane one."""
    feed("x", np.full((1, 1, 1, 4), 255, np.uint8), 0.01, 0)
    feed("w", np.full((channels, 1, 1, 4), 255, np.uint8), 0.01, 0)
    bias = np.array([2 ** 31 - 1000, -5] + [-2 ** 31 + 7] * (channels - 2), np.int32)
    feed("b", bias, 1e-4, 0)
    y = run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, order="NHWC", Y_scale=0.5, Y_zero_point=128)
    acc = bias.astype(np.int64) + 4 * 255 * 255
    assert y.data.reshape(-1).tolist() == R.requantize(acc, R.conv_multiplier(0.01, 0.01, 0.5), 128).tolist()
    assert y.data[0, 0, 0, 0] == 0                 # wrapped negative, clamped


@pytest.mark.parametrize("c, winograd", [(896, True), (1100, False)])
def test_conv_3x3_sums_at_the_winograd_bound_are_exact(c, winograd):
    """3x3 stride-1 layers run Winograd F(2x2, 3x3), whose int32 arithmetic is exact while
    9 * C * max|x - x_zp| * max|w - w_zp| < 2**29; the extreme bytes 0 / 255 with zero
    points 0 put C = 896 just inside (sums near 2**31 / 4) and C = 1100 outside (the direct
    GEMM then runs). Both equal the reference bit for bit."""
    from caffe2py.kernels.cpu.quant import int8_winograd as WG
    assert WG.winograd_exact(c, 0, 255) == winograd
    x = rng.choice(np.array([0, 255], np.uint8), (1, 5, 6, c))
    wt = rng.choice(np.array([0, 255], np.uint8), (20, 3, 3, c))
    wt[0] = 255
    x[0, :3, :3] = 255                                  # one window's sum at the bound: 9 * C * 255 * 255
    feed("x", x, 0.01, 0)
    feed("w", wt, 0.01, 0)
    feed("b", np.zeros(20, np.int32))
    y = run("Int8Conv", ["x", "w", "b"], ["y"], kernel=3, pad=1, order="NHWC", Y_scale=300.0, Y_zero_point=0)
    acc = R.conv_nhwc(x, 0, wt, 0, np.zeros(20), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert acc.max() == 9 * c * 255 * 255
    want = R.requantize(acc, R.conv_multiplier(0.01, 0.01, 300.0), 0)
    assert np.array_equal(y.data, want) and 0 < want.mean() < 250


def test_conv_geometry_arguments_and_legacy_pad():
    x, wt = u8(1, 7, 7, 4), u8(3, 3, 3, 4)
    feed("x", x, 0.1, 128)
    feed("w", wt, 0.01, 128)
    feed("b", np.zeros(3, np.int32))
    y = run("Int8Conv", ["x", "w", "b"], ["y"], kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_t=1, pad_l=1,
            pad_b=1, pad_r=1, order="NHWC", Y_scale=0.05, Y_zero_point=128)
    acc = R.conv_nhwc(x, 128, wt, 128, np.zeros(3), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1)
    assert np.array_equal(y.data, R.requantize(acc, R.conv_multiplier(0.1, 0.01, 0.05), 128))
    y = run("Int8Conv", ["x", "w", "b"], ["y"], kernel=3, legacy_pad=2, order="NHWC", Y_scale=0.05, Y_zero_point=128)
    assert y.data.shape == (1, 7, 7, 3)         # SAME


# ----------------------------------------------------------------- Int8FC

@pytest.mark.parametrize("x_shape, n", [((5, 7), 9), ((3, 2, 2, 8), 40), ((1, 640), 10), ((17, 33), 1)])
def test_fc_matches_the_integer_reference(x_shape, n):
    x = u8(*x_shape)
    k = int(np.prod(x_shape[1:]))
    wt, bias = u8(n, k), rng.integers(-5000, 5000, n).astype(np.int32)
    feed("x", x, 0.013, 140)
    feed("w", wt, 0.006, 127)
    feed("b", bias, 0.013 * 0.006)
    y = run("Int8FC", ["x", "w", "b"], ["y"], Y_scale=0.07, Y_zero_point=100)
    acc = (x.reshape(-1, k).astype(np.int64) - 140) @ (wt.astype(np.int64) - 127).T + bias
    assert np.array_equal(y.data, R.requantize(acc, R.conv_multiplier(0.013, 0.006, 0.07), 100))


def test_fc_weights_fed_again_are_used():
    """The packed weights are cached per weight blob: a new blob value repacks."""
    x = u8(4, 6)
    feed("x", x, 0.1, 0)
    feed("b", np.zeros(3, np.int32))
    net = core.Net("fc")
    net.Int8FC(["x", "w", "b"], ["y"], Y_scale=1.0, Y_zero_point=0)
    for zp in (0, 5):
        wt = u8(3, 6)
        feed("w", wt, 0.01, zp)
        workspace.RunNetOnce(net)
        acc = x.astype(np.int64) @ (wt.astype(np.int64) - zp).T
        assert np.array_equal(workspace.FetchInt8Blob("y").data, R.requantize(acc, R.conv_multiplier(0.1, 0.01, 1.0), 0))


def test_numpy_twins_of_the_compiled_gemm_agree_bit_for_bit():
    """The NumPy twins (what runs while a kernel compiles in the background) give the
    compiled kernels' bytes: the GEMM (grouped), depthwise and Winograd paths."""
    from caffe2py.kernels.cpu.runtime import jit
    x, w, wd = u8(2, 9, 8, 12), u8(10, 3, 3, 6), u8(12, 3, 3, 1)
    feed("x", x, 0.05, 120)
    feed("w", w, 0.01, 130)
    feed("wd", wd, 0.02, 125)
    feed("b", rng.integers(-999, 999, 12).astype(np.int32), 0.0005)
    feed("b10", rng.integers(-999, 999, 10).astype(np.int32), 0.0005)
    net = core.Net("twins")
    net.Int8ConvRelu(["x", "w", "b10"], "g", kernel=3, stride=2, pad=1, group=2, order="NHWC", Y_scale=0.2,
                     Y_zero_point=9)
    net.Int8Conv(["x", "wd", "b"], "d", kernel=3, pad=1, group=12, order="NHWC", Y_scale=0.1, Y_zero_point=128)
    net.Int8ConvRelu(["x", "w3", "b"], "f", kernel=3, pads=[1, 0, 2, 1], order="NHWC", Y_scale=0.3,
                     Y_zero_point=100)                  # Winograd F(2x2, 3x3)
    feed("w3", u8(12, 3, 3, 12), 0.01, 131)
    before = jit.jit_mode()
    results = []
    try:
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            workspace.RunNetOnce(net)
            results.append([workspace.FetchInt8Blob(b).data for b in ("g", "d", "f")])
    finally:
        jit.set_jit_mode(before)
    for compiled, twin in zip(*results):
        assert np.array_equal(compiled, twin)


# ----------------------------------------------------------------- Int8ConvTranspose

@pytest.mark.parametrize("stride, pads, adj", [(1, (0, 0, 0, 0), 0), (2, (1, 1, 1, 1), 1), (2, (0, 1, 1, 0), 0)])
def test_conv_transpose_matches_the_integer_reference(stride, pads, adj):
    n, h, w, c, m, k = 2, 4, 5, 6, 7, 3
    x, wt, bias = u8(n, h, w, c), u8(c, k, k, m), rng.integers(-3000, 3000, m).astype(np.int32)
    feed("x", x, 0.02, 120)
    feed("w", wt, 0.01, 130)
    feed("b", bias, 0.0002)
    y = run("Int8ConvTranspose", ["x", "w", "b"], ["y"], kernel=k, stride=stride, pads=list(pads), adj=adj,
            order="NHWC", Y_scale=0.1, Y_zero_point=50)
    full_h, full_w = (h - 1) * stride + k + adj, (w - 1) * stride + k + adj
    acc = np.zeros((n, full_h, full_w, m), np.int64)
    for iy in range(h):
        for ix in range(w):
            for ky in range(k):
                for kx in range(k):
                    acc[:, iy * stride + ky, ix * stride + kx] += \
                        (x[:, iy, ix].astype(np.int64) - 120) @ (wt[:, ky, kx].astype(np.int64) - 130)
    acc = acc[:, pads[0]:full_h - pads[2], pads[1]:full_w - pads[3]] + bias
    assert np.array_equal(y.data, R.requantize(acc, R.conv_multiplier(0.02, 0.01, 0.1), 50))


# ----------------------------------------------------------------- Int8Add / Int8Sum

@pytest.mark.parametrize("op", ["Int8Add", "Int8AddRelu", "Int8Sum", "Int8SumRelu"])
@pytest.mark.parametrize("scales", [(0.02, 0.03, 0.05), (0.1, 0.001, 0.04), (0.003, 0.005, 0.02), (0.5, 0.5, 0.01)])
def test_add_matches_qnnpacks_fixed_point_add(op, scales):
    a, b = u8(2, 3, 4, 5), u8(2, 3, 4, 5)
    feed("a", a, scales[0], 100)
    feed("b", b, scales[1], 7)
    y = run(op, ["a", "b"], ["y"], Y_scale=scales[2], Y_zero_point=60)
    want = R.qnnpack_add(a, 100, scales[0], b, 7, scales[1], scales[2], 60, lo=60 if "Relu" in op else 0)
    assert np.array_equal(y.data, want) and (y.scale, y.zero_point) == (float(np.float32(scales[2])), 60)
    # within a quantization step of the real sum
    real = (a.astype(np.float64) - 100) * np.float32(scales[0]) + (b.astype(np.float64) - 7) * np.float32(scales[1])
    inside = (real / np.float32(scales[2]) + 60 > 0.5) & (real / np.float32(scales[2]) + 60 < 254.5)
    if "Relu" in op:
        inside &= real > 0
    if inside.any():              # (0.5, 0.5, 0.01) saturates nearly everywhere
        assert np.abs(y.data[inside] - (real[inside] / np.float32(scales[2]) + 60)).max() <= 0.5 + 1e-3


def test_add_in_place_and_shape_errors():
    a = u8(3, 4)
    feed("a", a, 0.1, 0)
    feed("b", u8(3, 4), 0.1, 0)
    run("Int8Add", ["a", "b"], ["a"], Y_scale=0.2)
    assert workspace.FetchInt8Blob("a").scale == float(np.float32(0.2))
    feed("c", u8(4, 3), 0.1, 0)
    with pytest.raises(Caffe2Error, match="does not broadcast"):
        run("Int8Add", ["a", "c"], ["y"], Y_scale=0.2)
    with pytest.raises(Caffe2Error, match="exactly two"):
        run("Int8Sum", ["a", "b", "c"], ["y"], Y_scale=0.2)


# ----------------------------------------------------------------- activations

def test_relu_clamps_at_the_zero_point():
    x = u8(4, 5)
    feed("x", x, 0.3, 90)
    y = run("Int8Relu", ["x"], ["y"], Y_scale=0.3, Y_zero_point=90)
    assert np.array_equal(y.data, np.maximum(x, 90))


@pytest.mark.parametrize("alpha, x_q, y_q", [(0.01, (0.05, 128), (0.05, 128)), (0.3, (0.1, 200), (0.07, 150))])
def test_leaky_relu_is_qnnpacks_table(alpha, x_q, y_q):
    x = np.arange(256, dtype=np.uint8).reshape(16, 16)
    feed("x", x, *x_q)
    y = run("Int8LeakyRelu", ["x"], ["y"], alpha=alpha, Y_scale=y_q[0], Y_zero_point=y_q[1])
    f = np.float32
    v = f(f(x_q[0]) / f(y_q[0])) * (x.astype(np.int32) - x_q[1]).astype(f)
    v = np.where(v < 0, v * f(alpha), v)
    want = np.rint(np.clip(v, f(-y_q[1]), f(255 - y_q[1]))).astype(np.int64) + y_q[1]
    assert np.array_equal(y.data, want.astype(np.uint8))


def test_sigmoid_is_qnnpacks_table():
    x = np.arange(256, dtype=np.uint8)
    feed("x", x, 0.06, 120)
    y = run("Int8Sigmoid", ["x"], ["y"], Y_scale=1 / 256, Y_zero_point=0)
    assert np.array_equal(y.data, R.sigmoid_table(0.06, 120))
    assert (y.scale, y.zero_point) == (1 / 256, 0)
    real = 1 / (1 + np.exp(-0.06 * (x.astype(np.float64) - 120)))
    assert np.abs(y.data / 256 - np.minimum(real, 255 / 256)).max() <= 0.5 / 256 + 1e-6


@pytest.mark.parametrize("shape, scale", [((4, 10), 0.1), ((3, 2, 5), 0.5), ((2, 1000), 0.02), ((1, 7), 3.0)])
def test_softmax_is_qnnpacks_soft_argmax(shape, scale):
    x = u8(*shape)
    feed("x", x, scale, 77)
    y = run("Int8Softmax", ["x"], ["y"], Y_scale=1 / 256, Y_zero_point=0)
    want = R.softargmax(x.reshape(shape[0], -1), scale).reshape(shape)
    assert np.array_equal(y.data, want)
    rows = x.reshape(shape[0], -1).astype(np.float64)
    real = np.exp(np.float32(scale) * (rows - rows.max(axis=1, keepdims=True)))
    real = (real / real.sum(axis=1, keepdims=True)).reshape(shape)
    assert np.abs(y.data / 256 - np.minimum(real, 255 / 256)).max() <= 1 / 256


# ----------------------------------------------------------------- pooling

@pytest.mark.parametrize("kernel, stride, pads", [((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 2), (2, 2), (0, 0, 0, 0)),
                                                  ((3, 2), (1, 2), (0, 1, 2, 0))])
@pytest.mark.parametrize("relu", [False, True])
def test_average_pool_is_qnnpacks(kernel, stride, pads, relu):
    x = u8(2, 9, 8, 5)
    feed("x", x, 0.04, 110)
    y = run("Int8AveragePoolRelu" if relu else "Int8AveragePool", ["x"], ["y"], kernels=list(kernel),
            strides=list(stride), pads=list(pads), order="NHWC", Y_scale=0.03, Y_zero_point=100)
    acc = R.average_pool_sums(x, 110, kernel, stride, pads)
    want = R.qnnpack_avgpool_quantize(acc, 0.04, 0.03, kernel[0] * kernel[1], 100, lo=100 if relu else 0)
    assert np.array_equal(y.data, want)


def test_global_average_pool():
    x = u8(3, 7, 7, 6)
    feed("x", x, 0.02, 128)
    y = run("Int8AveragePool", ["x"], ["y"], global_pooling=1, order="NHWC", Y_scale=0.02, Y_zero_point=128)
    acc = (x.astype(np.int64) - 128).sum(axis=(1, 2), keepdims=True)
    assert y.data.shape == (3, 1, 1, 6)
    assert np.array_equal(y.data, R.qnnpack_avgpool_quantize(acc, 0.02, 0.02, 49, 128))


@pytest.mark.parametrize("relu", [False, True])
def test_max_pool(relu):
    x = u8(2, 7, 6, 4)
    feed("x", x, 0.1, 120)
    y = run("Int8MaxPoolRelu" if relu else "Int8MaxPool", ["x"], ["y"], kernel=3, stride=2, pad=1, order="NHWC",
            Y_scale=0.1, Y_zero_point=120)
    want = np.zeros((2, 4, 3, 4), np.uint8)
    for oy in range(4):
        for ox in range(3):
            y0, x0 = oy * 2 - 1, ox * 2 - 1
            want[:, oy, ox] = x[:, max(y0, 0):y0 + 3, max(x0, 0):x0 + 3].max(axis=(1, 2))
    assert np.array_equal(y.data, np.maximum(want, 120) if relu else want)


# ----------------------------------------------------------------- layout ops

def test_layout_ops_move_bytes_and_keep_the_quantization():
    x = u8(2, 3, 4, 6)
    feed("x", x, 0.5, 9)
    q = dict(Y_scale=0.5, Y_zero_point=9)
    y = run("Int8Reshape", ["x"], ["y", "old"], shape=[2, -1], **q)
    assert np.array_equal(y.data, x.reshape(2, -1)) and workspace.FetchBlob("old").tolist() == [2, 3, 4, 6]
    assert (y.scale, y.zero_point) == (0.5, 9)
    assert np.array_equal(run("Int8Flatten", ["x"], ["y"], axis=2, **q).data, x.reshape(6, 24))
    assert np.array_equal(run("Int8Transpose", ["x"], ["y"], axes=[0, 3, 1, 2], **q).data, x.transpose(0, 3, 1, 2))
    z = u8(2, 3, 4, 2)
    feed("z", z, 0.5, 9)
    y = run("Int8Concat", ["x", "z"], ["y", "split"], order="NHWC", **q)
    assert np.array_equal(y.data, np.concatenate([x, z], axis=3)) and workspace.FetchBlob("split").tolist() == [6, 2]
    assert np.array_equal(run("Int8Concat", ["x", "x"], ["y"], **q).data, np.concatenate([x, x], axis=0))
    y = run("Int8Slice", ["x"], ["y"], starts=[0, 1, 0, 2], ends=[-1, 3, -2, 5], **q)
    assert np.array_equal(y.data, x[:, 1:3, 0:3, 2:5])
    assert np.array_equal(run("Int8Slice", ["x"], ["y"], dim=3, start_idx=1, end_idx=-1, **q).data, x[..., 1:])
    y = run("Int8ChannelShuffle", ["x"], ["y"], group=2, order="NHWC", **q)
    assert np.array_equal(y.data, x.reshape(2, 3, 4, 2, 3).transpose(0, 1, 2, 4, 3).reshape(x.shape))


@pytest.mark.parametrize("hs, ws", [(2.0, 2.0), (1.5, 0.5), (0.75, 3.0)])
def test_resize_nearest(hs, ws):
    x = u8(2, 5, 6, 3)
    feed("x", x, 0.2, 4)
    y = run("Int8ResizeNearest", ["x"], ["y"], height_scale=hs, width_scale=ws, Y_scale=0.2, Y_zero_point=4)
    oh, ow = int(5 * hs), int(6 * ws)
    want = np.empty((2, oh, ow, 3), np.uint8)
    for oy in range(oh):
        for ox in range(ow):
            want[:, oy, ox] = x[:, min(int(oy / hs), 4), min(int(ox / ws), 5)]
    assert np.array_equal(y.data, want)


def _roi_align_reference(x, x_scale, x_zp, rois, spatial_scale, ph, pw, ratio, y_scale, y_zp):
    """Caffe2's Int8RoIAlign written out: byte weights round(w * 255), x_zp * 255 off per
    sample, gemmlowp requantization by x_scale / (y_scale * 255 * samples)."""
    f = np.float32
    n, h, w, c = x.shape
    out = np.zeros((len(rois), ph, pw, c), np.uint8)
    for i, roi in enumerate(rois):
        b, box = (int(roi[0]), roi[1:]) if len(roi) == 5 else (0, roi)
        sw_, sh_, ew, eh = (f(v) * f(spatial_scale) for v in box)
        rw, rh = max(f(ew - sw_), f(1)), max(f(eh - sh_), f(1))
        bh, bw = f(rh / f(ph)), f(rw / f(pw))
        gh = ratio if ratio > 0 else int(math.ceil(f(rh / f(ph))))
        gw = ratio if ratio > 0 else int(math.ceil(f(rw / f(pw))))
        mult, shift = R.quantize_multiplier_smaller_than_one(float(f(x_scale)) / (float(f(y_scale)) * 255.0 * gh * gw))
        for py in range(ph):
            for px in range(pw):
                acc = np.zeros(c, np.int64)
                for iy in range(gh):
                    yy = f(sh_ + f(py) * bh) + f(f(iy + f(0.5)) * bh / f(gh))
                    for ix in range(gw):
                        xx = f(sw_ + f(px) * bw) + f(f(ix + f(0.5)) * bw / f(gw))
                        acc -= x_zp * 255
                        if yy < -1 or yy > h or xx < -1 or xx > w:
                            continue
                        yy, xx = max(yy, f(0)), max(xx, f(0))
                        y0, x0 = int(yy), int(xx)
                        y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                        if y0 >= h - 1:
                            y0, yy = h - 1, f(h - 1)
                        if x0 >= w - 1:
                            x0, xx = w - 1, f(w - 1)
                        ly, lx = f(yy - f(y0)), f(xx - f(x0))
                        hy, hx = f(1) - ly, f(1) - lx
                        for wy, wx, yi, xi in ((hy, hx, y0, x0), (hy, lx, y0, x1), (ly, hx, y1, x0), (ly, lx, y1, x1)):
                            acc += int(np.rint(f(f(wy * wx) * f(255)))) * x[b, yi, xi].astype(np.int64)
                v = R.rounding_divide_by_pot(R.saturating_rounding_doubling_high_mul(R.wrap_int32(acc), mult), shift)
                out[i, py, px] = np.clip(v + y_zp, 0, 255)
    return out


@pytest.mark.parametrize("ratio", [2, -1])
def test_roi_align_matches_caffe2s_integer_sampling(ratio):
    x = u8(2, 12, 10, 4)
    rois = np.array([[0, 1.0, 1.5, 7.0, 9.0], [1, 0.0, 0.0, 9.5, 11.5], [1, 3.3, 2.2, 3.4, 2.3],
                     [0, -2.0, -1.0, 15.0, 3.0]], np.float32)
    feed("x", x, 0.05, 100)
    workspace.FeedBlob("r", rois)
    y = run("Int8RoIAlign", ["x", "r"], ["y"], spatial_scale=0.8, pooled_h=3, pooled_w=2, sampling_ratio=ratio,
            Y_scale=0.06, Y_zero_point=90)
    want = _roi_align_reference(x, 0.05, 100, rois, 0.8, 3, 2, ratio, 0.06, 90)
    assert np.array_equal(y.data, want)
    workspace.FeedBlob("r", np.zeros((0, 5), np.float32))
    assert run("Int8RoIAlign", ["x", "r"], ["y"], pooled_h=3, pooled_w=2, Y_scale=0.06).data.shape == (0, 3, 2, 4)


# ----------------------------------------------------------------- bad Int8 input

def test_a_float_blob_where_an_int8_tensor_is_read_is_a_named_error():
    workspace.FeedBlob("x", np.ones((1, 4, 4, 2), np.float32))
    feed("w", u8(2, 1, 1, 2), 0.1, 0)
    feed("b", np.zeros(2, np.int32))
    with pytest.raises(Caffe2Error, match=r"Int8Conv .*blob 'x'.*reads an Int8 tensor.*float32 tensor"):
        run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, order="NHWC")
    with pytest.raises(Caffe2Error, match=r"blob 'x'.*reads an Int8 tensor"):
        run("Int8Dequantize", ["x"], ["y"])
    feed("x", u8(1, 4, 4, 2), 0.1, 0)
    workspace.FeedBlob("b", np.zeros(2, np.int32))
    with pytest.raises(Caffe2Error, match=r"blob 'b'.*reads an Int8 tensor"):
        run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, order="NHWC")
    with pytest.raises(Caffe2Error, match="quantizes a float32 tensor"):
        run("Int8Quantize", ["x"], ["y"])


@pytest.mark.parametrize("scale, zero_point, message", [
    (0.0, 10, "scale 0.0; a quantization scale must be positive"),
    (-0.5, 10, "scale -0.5"),
    (0.1, 256, r"zero point 256; uint8 zero points lie in \[0, 255\]"),
    (0.1, -1, "zero point -1"),
])
def test_bad_input_scale_or_zero_point_is_a_named_error(scale, zero_point, message):
    feed("x", u8(2, 3), scale, zero_point)
    for op, kwargs in (("Int8Relu", {}), ("Int8Dequantize", {}), ("Int8Sigmoid", dict(Y_scale=1 / 256))):
        with pytest.raises(Caffe2Error, match=message):
            run(op, ["x"], ["y"], **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(Y_scale=0.0), "Y_scale / Y_zero_point.*scale 0.0"),
    (dict(Y_scale=float("inf")), "must be positive and finite"),
    (dict(Y_scale=0.1, Y_zero_point=300), r"zero point 300; uint8 zero points lie in \[0, 255\]"),
])
def test_bad_output_quantization_arguments_are_named_errors(kwargs, message):
    workspace.FeedBlob("x", np.ones(3, np.float32))
    with pytest.raises(Caffe2Error, match=message):
        run("Int8Quantize", ["x"], ["y"], **kwargs)


@pytest.mark.parametrize("op, kwargs", [
    ("Int8Relu", {}), ("Int8MaxPool", dict(kernel=1, order="NHWC")), ("Int8Reshape", dict(shape=[-1])),
    ("Int8Flatten", {}), ("Int8Transpose", {}), ("Int8Concat", {}), ("Int8Slice", dict(starts=[0], ends=[1])),
    ("Int8ChannelShuffle", dict(order="NHWC")), ("Int8ResizeNearest", {}),
])
def test_mismatched_scales_where_caffe2_requires_equal_ones_are_named_errors(op, kwargs):
    feed("x", u8(1, 2, 2, 2), 0.1, 5)
    with pytest.raises(Caffe2Error, match=r"must equal the input's scale 0.1.* zero point 5"):
        run(op, ["x"], ["y"], Y_scale=0.2, Y_zero_point=5, **kwargs)
    with pytest.raises(Caffe2Error, match=r"Y_zero_point 6 must equal"):
        run(op, ["x"], ["y"], Y_scale=0.1, Y_zero_point=6, **kwargs)
    run(op, ["x"], ["y"], Y_scale=0.1, Y_zero_point=5, **kwargs)      # equal: fine


def test_unrepresentable_requantization_is_a_named_error():
    feed("x", u8(1, 2, 2, 3), 0.5, 0)
    feed("w", u8(2, 1, 1, 3), 0.5, 0)
    feed("b", np.zeros(2, np.int32))
    with pytest.raises(Caffe2Error, match="is 1; .* needs it below 1"):
        run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, order="NHWC", Y_scale=0.25)
    with pytest.raises(Caffe2Error, match="only supports NHWC"):
        run("Int8Conv", ["x", "w", "b"], ["y"], kernel=1, Y_scale=4.0)
    with pytest.raises(Caffe2Error, match="Y_scale must be 0.00390625"):
        run("Int8Softmax", ["x"], ["y"], Y_scale=0.01)
    feed("a", u8(2, 2), 1.0, 0)
    feed("c", u8(2, 2), 1.0, 0)
    with pytest.raises(Caffe2Error, match="fixed-point add"):
        run("Int8Add", ["a", "c"], ["y"], Y_scale=1e-4)
    with pytest.raises(Caffe2Error, match="alpha must lie in"):
        run("Int8LeakyRelu", ["a"], ["y"], alpha=1.5)
