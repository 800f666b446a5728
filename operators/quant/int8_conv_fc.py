"""Caffe2's Int8Conv, Int8ConvRelu, Int8ConvTranspose and Int8FC: uint8 NHWC inputs and
weights with int32 biases (Int8 tensors), int32 accumulation with the zero points
subtracted, requantized to Y_scale / Y_zero_point by the Q31 fixed-point multiplier of
X.scale * W.scale / Y_scale (QNNPACK's arithmetic, which Caffe2 runs; it needs that
ratio below 1). Compute: kernels/cpu/quant/int8_conv.py (compiled, on the team)."""
import numpy as np

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.quant import int8_conv as K
from caffe2py.kernels.cpu.quant import int8_winograd as WG
from caffe2py.kernels.cpu.quant import requantize as rq
from caffe2py.kernels.cpu.runtime.jit import team
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._common import conv_geometry, legacy_pads
from ..cnn import caffe2_conv_transpose as conv_t
from ..cnn.nn import _CONV_ARGS
from ._int8 import (INT32, Y_ARGS, RequantizationError, int8_input, output, output_params, qparam_override,
                    requant_error)

DT = caffe2_pb2.TensorProto


def _require_nhwc(ctx):
    order = ctx.string("order", "NCHW")
    if order != "NHWC":
        raise ctx.error("%s only supports NHWC order (Caffe2's Int8 ops are NHWC), got order '%s'" % (ctx.type, order))


def _requant_params(ctx, x, w, y_scale):
    try:
        return rq.q31_multiplier(rq.conv_scale(x.scale, w.scale, y_scale))
    except RequantizationError as exc:
        raise requant_error(ctx, exc) from None


def _bias(ctx, b, m):
    if b is None:
        return np.zeros(m, np.int32)
    b = int8_input(ctx, 2, b, INT32)
    if b.size != m:
        raise ctx.input_error(2, "the bias must hold %d int32 values (one per output channel), got shape %s"
                              % (m, list(b.shape)))
    return np.ascontiguousarray(b.data.reshape(m))


# ----------------------------------------------------------------- Int8Conv / Int8ConvRelu

def _conv_geometry(ctx, x_shape, w_shape):
    """(kernel, strides, pads (t, l, b, r), dilations, output shape) of an NHWC conv."""
    kernel, strides, pads, dil = conv_geometry(ctx, 2, kernel_from=w_shape[1:3])
    if list(kernel) != list(w_shape[1:3]):
        raise ctx.input_error(1, "filter spatial shape %s differs from kernel %s" % (list(w_shape[1:3]), kernel))
    pads = legacy_pads(ctx.int("legacy_pad", 0), x_shape[1:3], kernel, strides, dil, pads)
    out = [conv_k.conv_output_size(x_shape[1 + i], kernel[i], strides[i], pads[i], pads[2 + i], dil[i])
           for i in range(2)]
    if min(out) < 1:
        raise ctx.error("output spatial size %s is not positive (input %s, kernel %s, strides %s, pads %s)"
                        % (out, list(x_shape[1:3]), kernel, strides, pads))
    return kernel, strides, pads, dil, (x_shape[0], out[0], out[1], w_shape[0])


def _conv_infer(ctx, ins):
    _require_nhwc(ctx)
    return [TensorType(_conv_geometry(ctx, ins[0].dims, ins[1].dims)[4], DT.UINT8)]


def _conv_cost(ctx, ins):
    out = _conv_geometry(ctx, ins[0].dims, ins[1].dims)[4]
    macs = float(np.prod(out, dtype=np.float64)) * float(np.prod(ins[1].dims[1:], dtype=np.float64))
    return Cost(flops=2 * macs, bytes_read=float(np.prod(ins[0].dims) + np.prod(ins[1].dims)),
                bytes_written=float(np.prod(out)), params_bytes=float(np.prod(ins[1].dims)))


for _op, _relu in (("Int8Conv", False), ("Int8ConvRelu", True)):
    register_schema(OpSchema(
        _op, num_inputs=(2, 3), num_outputs=1, args=_CONV_ARGS + Y_ARGS, inference=_conv_infer, cost=_conv_cost,
        inputs=("X", "W", "B"), outputs=("Y",),
        doc="Quantized 2-D convolution, NHWC only (order='NHWC'): X uint8 (N, H, W, C), W uint8 (M, kH, kW, "
            "C / group), B int32 (M) (Int8 tensors); Y = requantize(sum (X - X.zero_point) * (W - "
            "W.zero_point) + B) with scale Y_scale, zero point Y_zero_point%s. Kernel / stride / pad / "
            "dilation / group / legacy_pad spellings as Conv." % (", clamped below at the zero point (ReLU)"
                                                                  if _relu else "")))


def _winograd_filters(cache, x, w, kernel, strides, dilations, pads, group):
    """The transformed filters (cached per W) when the Winograd F(2x2, 3x3) path computes
    this layer bit for bit like the direct GEMM (3x3 stride 1, sums within its bound), else
    None. It gives the same int32 sums with 2.25x fewer multiplies."""
    if not WG.winograd_fits(kernel, strides, dilations, pads, group):
        return None
    packed, w_absmax = cache.get(w.data, w.zero_point, 1, lambda d, z, g: WG.winograd_weights(d, z))
    return packed if WG.winograd_exact(x.shape[3], x.zero_point, w_absmax) else None


def _int8_conv_factory(relu):
    def factory(ctx):
        _require_nhwc(ctx)
        group = ctx.int("group", 1)
        y_scale, y_zp = output_params(ctx)
        lo = rq.relu_floor(y_scale, y_zp) if relu else 0
        packed = K.PackedWeights()
        depthwise_w = K.PackedWeights()
        winograd_w = K.PackedWeights()

        def run(x, w, b=None):
            x = int8_input(ctx, 0, x)
            w = int8_input(ctx, 1, w)
            if x.ndim != 4 or w.ndim != 4:
                raise ctx.error("X %s and W %s must be 4-D NHWC tensors" % (list(x.shape), list(w.shape)))
            c, m = x.shape[3], w.shape[0]
            if group < 1 or c % group or m % group or w.shape[3] * group != c:
                raise ctx.input_error(1, "W of shape %s does not fit %d input channels with group %d (W is "
                                         "(M, kH, kW, C / group), M divisible by group)" % (list(w.shape), c, group))
            kernel, strides, pads, dil, out_shape = _conv_geometry(ctx, x.shape, w.shape)
            bias = _bias(ctx, b, m)
            multiplier, shift = _requant_params(ctx, x, w, y_scale)
            with team():
                if group == c == m and group > 1:
                    w16 = depthwise_w.get(w.data, w.zero_point, group, lambda d, z, g: K.depthwise_weights(d, z))
                    y = K.depthwise_nhwc(x.data, x.zero_point, w16, bias, multiplier, shift, y_zp, lo, 255,
                                         kernel, strides, pads, dil, out_shape)
                elif (wg := _winograd_filters(winograd_w, x, w, kernel, strides, dil, pads, group)) is not None:
                    y = WG.conv_nhwc(x.data, x.zero_point, wg, bias, multiplier, shift, y_zp, lo, 255, pads,
                                     out_shape)
                else:
                    y = K.conv_nhwc(x.data, x.zero_point, packed.get(w.data, w.zero_point, group), bias, multiplier,
                                    shift, y_zp, lo, 255, kernel, strides, pads, dil, group, out_shape)
            return output(y, y_scale, y_zp)
        return run
    return factory


register_kernel("Int8Conv")(_int8_conv_factory(False))
register_kernel("Int8ConvRelu")(_int8_conv_factory(True))


# ----------------------------------------------------------------- Int8ConvTranspose

def _transpose_infer(ctx, ins):
    _require_nhwc(ctx)
    return [TensorType(conv_t._out_dims(ctx, ins[0].dims, ins[1].dims), DT.UINT8)]


register_schema(OpSchema(
    "Int8ConvTranspose", num_inputs=3, num_outputs=1,
    args=tuple(a for a in conv_t._ARGS if a.name not in ("no_bias", "shared_buffer")) + Y_ARGS,
    inference=_transpose_infer, inputs=("X", "W", "B"), outputs=("Y",),
    doc="Quantized transposed convolution, NHWC only, group 1: X uint8 (N, H, W, C), W uint8 (C, kH, kW, M), "
        "B int32 (M); each output is the requantized sum of (X - X.zero_point) * (W - W.zero_point) over the "
        "inputs that reach it, plus B. Output size (in - 1) * stride + kernel + adj - pads."))


@register_kernel("Int8ConvTranspose")
def int8_conv_transpose(ctx):
    _require_nhwc(ctx)
    if ctx.int("group", 1) != 1:
        raise ctx.error("Int8ConvTranspose runs with group 1 (as Caffe2's), got group %d" % ctx.int("group"))
    y_scale, y_zp = output_params(ctx)

    def run(x, w, b):
        x = int8_input(ctx, 0, x)
        w = int8_input(ctx, 1, w)
        if x.ndim != 4 or w.ndim != 4 or w.shape[0] != x.shape[3]:
            raise ctx.input_error(1, "W of shape %s must be (C, kH, kW, M) for X of shape %s"
                                  % (list(w.shape), list(x.shape)))
        kernel, strides, pads, adjs = conv_t._geometry(ctx, 2, list(w.shape[1:3]))
        out_dims = conv_t._out_dims(ctx, x.shape, w.shape)
        bias = _bias(ctx, b, w.shape[3])
        multiplier, shift = _requant_params(ctx, x, w, y_scale)
        y = K.conv_transpose_nhwc(x.data, x.zero_point, w.data, w.zero_point, bias, multiplier, shift, y_zp,
                                  strides, pads, adjs)
        assert y.shape == tuple(out_dims)
        return output(y, y_scale, y_zp)
    return run


# ----------------------------------------------------------------- Int8FC

def _fc_dims(ctx, x_dims, w_dims):
    axis, axis_w = ctx.int("axis", 1), ctx.int("axis_w", 1)
    if not (1 <= axis <= len(x_dims) and 1 <= axis_w <= len(w_dims)):
        raise ctx.error("axis %d / axis_w %d do not split X %s / W %s" % (axis, axis_w, list(x_dims), list(w_dims)))
    k = int(np.prod(x_dims[axis:], dtype=np.int64))
    n = int(np.prod(w_dims[:axis_w], dtype=np.int64))
    if int(np.prod(w_dims[axis_w:], dtype=np.int64)) != k:
        raise ctx.input_error(1, "W of shape %s does not hold %d inputs per output (X of shape %s, axis %d)"
                              % (list(w_dims), k, list(x_dims), axis))
    return tuple(x_dims[:axis]) + (n,), k, n


register_schema(OpSchema(
    "Int8FC", num_inputs=(3, 4), num_outputs=1,
    args=(Arg("axis", "int", 1), Arg("axis_w", "int", 1)) + Y_ARGS,
    inference=lambda ctx, ins: [TensorType(_fc_dims(ctx, ins[0].dims, ins[1].dims)[0], DT.UINT8)],
    inputs=("X", "W", "b", "Qparam"), outputs=("Y",),
    cost=lambda ctx, ins: Cost(flops=2.0 * np.prod(ins[0].dims) * ins[1].dims[0]),
    doc="Quantized fully connected layer: X uint8 (M, K) (dims from `axis` on flattened), W uint8 (N, K), b "
        "int32 (N) (Int8 tensors); Y uint8 (M, N) = requantize(sum (X - X.zero_point) * (W - W.zero_point) + "
        "b) with Y_scale / Y_zero_point (or the Qparam input's)."))


@register_kernel("Int8FC")
def int8_fc(ctx):
    y_scale, y_zp = output_params(ctx)
    packed = K.PackedWeights()

    def run(x, w, b, qparam=None):
        x = int8_input(ctx, 0, x)
        w = int8_input(ctx, 1, w)
        out_dims, k, n = _fc_dims(ctx, x.shape, w.shape)
        bias = _bias(ctx, b, n)
        s, z = qparam_override(ctx, 3, qparam, y_scale, y_zp)
        multiplier, shift = _requant_params(ctx, x, w, s)
        weights = packed.get(w.data, w.zero_point, 1, lambda d, zp, g: K.pack_weights(d.reshape(n, 1, 1, k), zp, 1))
        with team():
            y = K.fc(np.ascontiguousarray(x.data.reshape(-1, k)), x.zero_point, weights, bias, multiplier, shift, z)
        return output(y.reshape(out_dims), s, z)
    return run
