"""Caffe2's Int8AveragePool / Int8AveragePoolRelu (QNNPACK's average pooling: any output
quantization) and Int8MaxPool / Int8MaxPoolRelu (the input's quantization), NHWC only.
Kernel / stride / pad spellings and global_pooling as the float pools; no dilation, pads
below the kernel. Compute: kernels/cpu/quant/int8_pool.py."""
from caffe2py.kernels.cpu.quant import int8_pool as K
from caffe2py.kernels.cpu.quant import requantize as rq
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .._common import LEGACY_CAFFE_POOLING
from ..cnn.nn import _CONV_ARGS, _check_pads_below_kernel, _pool_geometry
from ._int8 import (Y_ARGS, RequantizationError, int8_input, output, output_params, require_input_params,
                    requant_error)

DT = caffe2_pb2.TensorProto


def _geometry(ctx, spatial):
    """(kernel, strides, pads (t, l, b, r), output size, global)."""
    if ctx.int("legacy_pad", 0) == LEGACY_CAFFE_POOLING:
        raise ctx.error("legacy_pad=3 (Caffe's rounded-up pooling size) is not supported by %s: QNNPACK's pools "
                        "round the output size down" % ctx.type)
    kernel, strides, pads, dil, _ = _pool_geometry(ctx, list(spatial))
    if any(d != 1 for d in dil):
        raise ctx.error("%s has no dilation, got dilations %s" % (ctx.type, list(dil)))
    if ctx.bool("global_pooling"):
        return kernel, strides, pads, (1, 1), True
    if min(kernel) < 1:
        raise ctx.error("kernel %s must be positive" % list(kernel))
    _check_pads_below_kernel(ctx, kernel, pads)
    out = tuple((spatial[i] + pads[i] + pads[2 + i] - kernel[i]) // strides[i] + 1 for i in range(2))
    if min(out) < 1:
        raise ctx.error("the %s window %s with pads %s does not fit the input %s" % (ctx.type, list(kernel),
                                                                                    list(pads), list(spatial)))
    return kernel, strides, pads, out, False


def _require_nhwc(ctx):
    if ctx.string("order", "NCHW") != "NHWC":
        raise ctx.error("%s only supports NHWC order (Caffe2's Int8 ops are NHWC), got order '%s'"
                        % (ctx.type, ctx.string("order", "NCHW")))


def _infer(ctx, ins):
    _require_nhwc(ctx)
    x = ins[0].dims
    out = _geometry(ctx, x[1:3])[3]
    return [TensorType((x[0],) + tuple(out) + (x[3],), DT.UINT8)]


_POOL_ARGS = _CONV_ARGS + (Arg("global_pooling", "bool", False),) + Y_ARGS
for _op in ("Int8AveragePool", "Int8AveragePoolRelu", "Int8MaxPool", "Int8MaxPoolRelu"):
    _average = "Average" in _op
    register_schema(OpSchema(
        _op, num_inputs=1, num_outputs=1, args=_POOL_ARGS, inference=_infer, inputs=("X",), outputs=("Y",),
        doc=("Quantized average pooling, NHWC: each window's sum of (q - zero point), padding counting as 0.0, "
             "requantized by X.scale / (Y_scale * window size) (QNNPACK's rounding) to Y_scale / Y_zero_point"
             if _average else
             "Quantized max pooling, NHWC, in the input's quantization (Y_scale / Y_zero_point must equal X's)")
        + (", clamped below at the zero point (ReLU)." if _op.endswith("Relu") else ".")))


def _pool_factory(average, relu):
    def factory(ctx):
        _require_nhwc(ctx)
        y_scale, y_zp = output_params(ctx)
        lo = rq.relu_floor(y_scale, y_zp) if relu else 0

        def run(x):
            x = int8_input(ctx, 0, x)
            if x.ndim != 4:
                raise ctx.input_error(0, "%s takes a 4-D NHWC tensor, got shape %s" % (ctx.type, list(x.shape)))
            kernel, strides, pads, out_hw, is_global = _geometry(ctx, x.shape[1:3])
            if not average:
                require_input_params(ctx, x, y_scale, y_zp)
                if is_global:
                    kernel, strides, pads, out_hw = list(x.shape[1:3]), [1, 1], [0, 0, 0, 0], (1, 1)
                return output(K.max_pool(x.data, kernel, strides, pads, out_hw, lo, 255), y_scale, y_zp)
            size = x.shape[1] * x.shape[2] if is_global else kernel[0] * kernel[1]
            try:
                params = rq.avgpool_params(x.scale, y_scale, size)
            except RequantizationError as exc:
                raise requant_error(ctx, exc) from None
            if is_global:
                y = K.global_average_pool(x.data, x.zero_point, params, y_zp, lo, 255)
            else:
                y = K.average_pool(x.data, x.zero_point, kernel, strides, pads, out_hw, params, y_zp, lo, 255)
            return output(y, y_scale, y_zp)
        return run
    return factory


register_kernel("Int8AveragePool")(_pool_factory(True, False))
register_kernel("Int8AveragePoolRelu")(_pool_factory(True, True))
register_kernel("Int8MaxPool")(_pool_factory(False, False))
register_kernel("Int8MaxPoolRelu")(_pool_factory(False, True))
