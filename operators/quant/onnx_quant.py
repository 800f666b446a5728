"""ONNX quantisation ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (8-bit integer types).

The integer sums of 2-D ConvInteger / QLinearConv and of 2-D MatMulInteger /
QLinearMatMul with 8-bit operands and one input zero point run on the Int8 GEMM that
Caffe2's Int8Conv / Int8FC use (kernels/cpu/quant/int8_conv.py: int32 sums of the
zero-point-centred bytes); each op then requantizes with ONNX's rounding (the float
scale product, round half to even), not Caffe2's fixed-point multiplier."""
import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.kernels.cpu.cnn import onnx_nn as nn_k
from caffe2py.kernels.cpu.quant import int8_conv as int8_k
from caffe2py.kernels.cpu.quant import onnx_quant as qk
from caffe2py.kernels.cpu.runtime.jit import team

from caffe2py.schema_rules import Rank, Scalar, broadcast_problem

from ..onnx_base import axis_of, onnx_op

def _param_axis(ctx, axis, x, scale, block):
    """The quantisation axis; only checked when the scale is per axis or blocked."""
    if np.size(scale) == 1 and not block:
        return 0
    return axis_of(ctx, axis, x.ndim)


@onnx_op("QuantizeLinear", (10, None))
def quantize_linear(ctx):
    axis, block = ctx.int("axis", 1), ctx.int("block_size", 0)
    saturate = bool(ctx.int("saturate", 1))
    out_type = om.onnx_dtype(ctx.int("output_dtype")) if ctx.int("output_dtype", 0) else None

    def run(x, scale, zero_point=None):
        dtype = out_type or (zero_point.dtype if zero_point is not None else np.dtype(np.uint8))
        if not qk.is_quantized_type(dtype):
            raise ctx.error("quantising to %s is not supported" % dtype)
        _check_zero_point(ctx, scale, zero_point)
        try:
            return qk.quantize(x, scale, zero_point, dtype, _param_axis(ctx, axis, x, scale, block), block,
                               saturate)
        except ValueError as exc:      # the kernel words the scale's shape problem
            raise ctx.input_error(1, str(exc)) from None
    return run


@onnx_op("DequantizeLinear", (10, None))
def dequantize_linear(ctx):
    axis, block = ctx.int("axis", 1), ctx.int("block_size", 0)
    out_type = om.onnx_dtype(ctx.int("output_dtype")) if ctx.int("output_dtype", 0) else None

    def run(q, scale, zero_point=None):
        if not qk.is_quantized_type(q.dtype):
            raise ctx.input_error(0, "dequantising %s is not supported" % q.dtype)
        _check_zero_point(ctx, scale, zero_point)
        try:
            return qk.dequantize(q, scale, zero_point, _param_axis(ctx, axis, q, scale, block), block, out_type)
        except ValueError as exc:
            raise ctx.input_error(1, str(exc)) from None
    return run


def _check_zero_point(ctx, scale, zero_point):
    # per tensor, a [1] zero point goes with a 0-d scale (onnx's own cases, onnxruntime)
    if zero_point is not None and np.shape(zero_point) != np.shape(scale) and not (
            np.size(zero_point) == 1 and np.size(scale) == 1):
        raise ctx.input_error(2, "zero point of shape %s must have the scale's shape %s"
                              % (list(np.shape(zero_point)), list(np.shape(scale))))


def _matmul_shapes(ctx, a, b, ia=0, ib=1):
    """NumPy/ONNX MatMul shape rules, or a named error."""
    if a.ndim == 0 or b.ndim == 0:
        raise ctx.error("MatMul operands must have at least one dim, got shapes %s and %s"
                        % (list(a.shape), list(b.shape)))
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise ctx.input_error(ib, "shapes %s and %s do not multiply (%d != %d)"
                              % (list(a.shape), list(b.shape), k_a, k_b))
    problem = broadcast_problem([a.shape[:-2], b.shape[:-2]]) if a.ndim > 2 and b.ndim > 2 else None
    if problem:
        raise ctx.error("batch dims: " + problem)


_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _one_value(zp):
    return zp is None or np.size(zp) == 1


def _gemm_matmul(a, b, a_zp, b_zp, packed):
    """int64 A @ B of 2-D 8-bit A and B (zero points: A one value, B one or one per
    column) on the Int8 GEMM, or None when it does not cover the case."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in _BYTES or b.dtype not in _BYTES or not _one_value(a_zp) \
            or not (b_zp is None or np.size(b_zp) in (1, b.shape[1])):
        return None
    k, n = b.shape
    bt = np.ascontiguousarray(b.T).reshape(n, 1, 1, k)
    weights = packed.get(b, 0 if b_zp is None else b_zp, 1, lambda w, z, g: int8_k.pack_weights(bt, z, 1))
    with team():
        sums = int8_k.fc_sums(np.ascontiguousarray(a), 0 if a_zp is None else np.asarray(a_zp).item(), weights,
                              np.zeros(n, np.int32))
    return sums.astype(np.int64)


def _gemm_conv(ctx, x, w, x_zp, w_zp, bias, packed):
    """int64 NCHW sums of a 2-D 8-bit convolution (+ int32 bias) on the Int8 GEMM, or None."""
    if x.ndim != 4 or x.dtype not in _BYTES or w.dtype not in _BYTES or not _one_value(x_zp):
        return None
    kernel = list(w.shape[2:])
    strides = ctx.ints("strides", None) or [1, 1]
    dilations = ctx.ints("dilations", None) or [1, 1]
    pads = nn_k.auto_pads(ctx.string("auto_pad", "NOTSET"), x.shape[2:], kernel, strides, dilations,
                          ctx.ints("pads", None) or [0] * 4)
    if min(pads) < 0 or min(strides) < 1 or min(dilations) < 1:
        return None
    out = [conv_k.conv_output_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[2 + i], dilations[i])
           for i in range(2)]
    if min(out) < 1:
        return None
    group = ctx.int("group", 1)
    m = w.shape[0]
    weights = packed.get(w, 0 if w_zp is None else w_zp, group,
                         lambda wa, z, g: int8_k.pack_weights(np.ascontiguousarray(wa.transpose(0, 2, 3, 1)), z, g))
    b32 = np.zeros(m, np.int32) if bias is None else np.ascontiguousarray(bias.reshape(m).astype(np.int32))
    with team():
        sums = int8_k.conv_sums_nhwc(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                     0 if x_zp is None else np.asarray(x_zp).item(), weights, b32, kernel, strides,
                                     pads, dilations, group, (x.shape[0], out[0], out[1], m))
    return sums.transpose(0, 3, 1, 2).astype(np.int64)


@onnx_op("DynamicQuantizeLinear", (11, None))
def dynamic_quantize_linear(ctx):
    return lambda x: qk.dynamic_quantize(x)


def _centered(v, zp):
    return v.astype(np.int32) - (0 if zp is None else np.asarray(zp).astype(np.int32))


def _broadcasts_onto(small, shape):
    """True when `small` broadcasts to `shape` and leaves it as it is."""
    return (len(small) <= len(shape) and broadcast_problem([tuple(shape), tuple(small)]) is None
            and np.broadcast_shapes(tuple(shape), tuple(small)) == tuple(shape))


@onnx_op("MatMulInteger", (10, None))
def matmul_integer(ctx):
    packed = int8_k.PackedWeights()

    def run(a, b, a_zp=None, b_zp=None):
        _matmul_shapes(ctx, a, b)
        # a zero point is a scalar, a 1-D tensor of one value per row of A / column of B,
        # or an N-D tensor per matrix of a batch ([..., M, 1] / [..., 1, N]): whatever it
        # is, it must broadcast to its input's shape without changing that shape
        if a_zp is not None and a_zp.ndim == 1 and a.ndim > 1 and a_zp.size == a.shape[-2]:
            a_zp = a_zp.reshape(-1, 1)
        for k, zp, x, name in ((2, a_zp, a, "A"), (3, b_zp, b, "B")):
            if zp is not None and not _broadcasts_onto(zp.shape, x.shape):
                raise ctx.input_error(k, (
                    "zero point of shape %s must be one value, one per %s, or broadcast to %s's shape %s "
                    "without changing it" % (list(zp.shape), "row of A" if k == 2 else "column of B", name,
                                             list(x.shape))))
        fast = _gemm_matmul(a, b, a_zp, b_zp, packed)
        if fast is not None:
            return fast.astype(np.int32)
        return np.matmul(_centered(a, a_zp), _centered(b, b_zp)).astype(np.int32)
    return run


@onnx_op("QLinearMatMul", (10, None), checks=(Scalar((1, 2, 6, 7)),))
def qlinear_matmul(ctx):
    packed = int8_k.PackedWeights()

    def run(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
        _matmul_shapes(ctx, a, b, 0, 3)
        if np.size(b_scale) not in (1, b.shape[-1]) or np.size(b_zp) != np.size(b_scale):
            raise ctx.input_error(4, "b's scale and zero point must hold 1 or %d values, got %d and %d"
                                  % (b.shape[-1], np.size(b_scale), np.size(b_zp)))
        acc = _gemm_matmul(a, b, a_zp, b_zp, packed)
        if acc is None:
            acc = np.matmul(_centered(a, a_zp).astype(np.float64), _centered(b, b_zp).astype(np.float64))
        real = acc.astype(np.float64) * np.float64(a_scale) * np.asarray(b_scale, np.float64)
        return qk.quantize(real, y_scale, y_zp, y_zp.dtype)
    return run


def _int_conv(ctx, x, w, strides_pads):
    kernel = list(w.shape[2:])
    k = len(kernel)
    strides = ctx.ints("strides", None) or [1] * k
    dilations = ctx.ints("dilations", None) or [1] * k
    pads = nn_k.auto_pads(ctx.string("auto_pad", "NOTSET"), x.shape[2:], kernel, strides, dilations,
                          ctx.ints("pads", None) or [0] * (2 * k))
    try:
        return conv_k.conv_nchw(x, w, None, strides, pads, dilations, ctx.int("group", 1))
    except ValueError as exc:       # the conv kernel words geometry problems
        raise ctx.error(str(exc)) from None


def _check_int_conv(ctx, x, w, w_index, w_zp=None, w_zp_index=None):
    group = ctx.int("group", 1)
    if group < 1 or x.ndim != w.ndim or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ctx.input_error(w_index, "W of shape %s does not fit X of shape %s with group %d"
                              % (list(w.shape), list(x.shape), group))
    if w_zp is not None and np.size(w_zp) not in (1, w.shape[0]):
        raise ctx.input_error(w_zp_index, "W's zero point must hold 1 or %d values, got %d"
                              % (w.shape[0], np.size(w_zp)))


@onnx_op("ConvInteger", (10, None), checks=(Rank(0, 3), Rank(1, 3)))
def conv_integer(ctx):
    packed = int8_k.PackedWeights()

    def run(x, w, x_zp=None, w_zp=None):
        _check_int_conv(ctx, x, w, 1, w_zp, 3)
        if x_zp is not None and x_zp.size != 1:
            raise ctx.input_error(2, "X's zero point must be one value, got shape %s" % list(x_zp.shape))
        fast = _gemm_conv(ctx, x, w, x_zp, w_zp, None, packed)
        if fast is not None:
            return fast.astype(np.int32)
        wz = None if w_zp is None else (w_zp if w_zp.size == 1 else w_zp.reshape(-1, *([1] * (w.ndim - 1))))
        xc = _centered(x, x_zp).astype(np.float64)
        wc = _centered(w, wz).astype(np.float64)
        return np.rint(_int_conv(ctx, xc, wc, None)).astype(np.int32)
    return run


@onnx_op("QLinearConv", (10, None), checks=(Rank(0, 3), Rank(3, 3), Scalar((1, 2, 6, 7))))
def qlinear_conv(ctx):
    packed = int8_k.PackedWeights()

    def run(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None):
        _check_int_conv(ctx, x, w, 3, w_zp, 5)
        if np.size(w_scale) not in (1, w.shape[0]):
            raise ctx.input_error(4, "W's scale must hold 1 or %d values, got %d" % (w.shape[0], np.size(w_scale)))
        if b is not None and b.size != w.shape[0]:
            raise ctx.input_error(8, "B must hold %d values, got shape %s" % (w.shape[0], list(b.shape)))
        acc = _gemm_conv(ctx, x, w, x_zp, w_zp, b, packed)
        if acc is None:
            wz = w_zp if np.size(w_zp) == 1 else np.asarray(w_zp).reshape(-1, *([1] * (w.ndim - 1)))
            acc = _int_conv(ctx, _centered(x, x_zp).astype(np.float64), _centered(w, wz).astype(np.float64), None)
            if b is not None:
                acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
        acc = acc.astype(np.float64)
        ws = np.asarray(w_scale, np.float64)
        ws = ws.reshape((1, -1) + (1,) * (x.ndim - 2)) if ws.size > 1 else ws
        real = acc * np.float64(x_scale) * ws
        return qk.quantize(real, y_scale, y_zp, np.asarray(y_zp).dtype)
    return run
