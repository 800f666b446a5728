"""ONNX quantisation ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (8-bit integer types)."""
import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.onnx import math as om
from caffe2py.kernels.cpu.onnx import nn as nn_k
from caffe2py.kernels.cpu.onnx import quant as qk

from .onnx_base import axis_of, onnx_op

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
        return qk.quantize(x, scale, zero_point, dtype, _param_axis(ctx, axis, x, scale, block), block,
                           saturate)
    return run


@onnx_op("DequantizeLinear", (10, None))
def dequantize_linear(ctx):
    axis, block = ctx.int("axis", 1), ctx.int("block_size", 0)
    out_type = om.onnx_dtype(ctx.int("output_dtype")) if ctx.int("output_dtype", 0) else None

    def run(q, scale, zero_point=None):
        if not qk.is_quantized_type(q.dtype):
            raise ctx.input_error(0, "dequantising %s is not supported" % q.dtype)
        return qk.dequantize(q, scale, zero_point, _param_axis(ctx, axis, q, scale, block), block, out_type)
    return run


@onnx_op("DynamicQuantizeLinear", (11, None))
def dynamic_quantize_linear(ctx):
    return lambda x: qk.dynamic_quantize(x)


def _centered(v, zp):
    return v.astype(np.int32) - (0 if zp is None else np.asarray(zp).astype(np.int32))


@onnx_op("MatMulInteger", (10, None))
def matmul_integer(ctx):
    def run(a, b, a_zp=None, b_zp=None):
        a_zp = None if a_zp is None else (a_zp if a_zp.ndim == 0 else a_zp.reshape(-1, 1))
        return np.matmul(_centered(a, a_zp), _centered(b, b_zp)).astype(np.int32)
    return run


@onnx_op("QLinearMatMul", (10, None))
def qlinear_matmul(ctx):
    def run(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
        acc = np.matmul(_centered(a, a_zp).astype(np.float64), _centered(b, b_zp).astype(np.float64))
        real = acc * np.float64(a_scale) * np.asarray(b_scale, np.float64)
        return qk.quantize(real, y_scale, y_zp, y_zp.dtype)
    return run


def _int_conv(ctx, x, w, strides_pads):
    kernel = list(w.shape[2:])
    k = len(kernel)
    strides = ctx.ints("strides", None) or [1] * k
    dilations = ctx.ints("dilations", None) or [1] * k
    pads = nn_k.auto_pads(ctx.string("auto_pad", "NOTSET"), x.shape[2:], kernel, strides, dilations,
                          ctx.ints("pads", None) or [0] * (2 * k))
    return conv_k.conv_nchw(x, w, None, strides, pads, dilations, ctx.int("group", 1))


@onnx_op("ConvInteger", (10, None))
def conv_integer(ctx):
    def run(x, w, x_zp=None, w_zp=None):
        wz = None if w_zp is None else (w_zp if w_zp.size == 1 else w_zp.reshape(-1, *([1] * (w.ndim - 1))))
        xc = _centered(x, x_zp).astype(np.float64)
        wc = _centered(w, wz).astype(np.float64)
        return np.rint(_int_conv(ctx, xc, wc, None)).astype(np.int32)
    return run


@onnx_op("QLinearConv", (10, None))
def qlinear_conv(ctx):
    def run(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None):
        wz = w_zp if np.size(w_zp) == 1 else np.asarray(w_zp).reshape(-1, *([1] * (w.ndim - 1)))
        acc = _int_conv(ctx, _centered(x, x_zp).astype(np.float64), _centered(w, wz).astype(np.float64), None)
        if b is not None:
            acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
        ws = np.asarray(w_scale, np.float64)
        ws = ws.reshape((1, -1) + (1,) * (x.ndim - 2)) if ws.size > 1 else ws
        real = acc * np.float64(x_scale) * ws
        return qk.quantize(real, y_scale, y_zp, np.asarray(y_zp).dtype)
    return run
