"""Caffe2's UpsampleBilinear (`height_scale`, `width_scale`, or a 2-value `scales` input that
overrides them) and UpsampleBilinearGradient. Kernels: kernels/cpu/cnn/upsample_bilinear.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.cnn import upsample_bilinear as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import register_gradient

_ARGS = (Arg("width_scale", "float", 1.0, doc="output width = int(W * width_scale)"),
         Arg("height_scale", "float", 1.0, doc="output height = int(H * height_scale)"))


def _infer(ctx, ins):
    x = ins[0]
    if not x.known or len(ins) > 1 or len(x.dims) != 4:
        return [TensorType(None, x.dtype)]
    n, c, h, w = x.dims
    return [TensorType((n, c, K.output_size(h, ctx.float("height_scale")),
                        K.output_size(w, ctx.float("width_scale"))), x.dtype)]


def _cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(flops=8 * n, bytes_read=4 * n, bytes_written=16 * n)


register_schema(OpSchema(
    "UpsampleBilinear", num_inputs={1, 2}, num_outputs=1, args=_ARGS, inputs=("X", "scales"),
    outputs=("Y",), inference=_infer, cost=_cost,
    doc="Bilinear upsampling of a 4-D NCHW X with corners aligned: output pixel i samples input "
        "position i * (in - 1) / (out - 1). The optional input scales = [height_scale, width_scale] "
        "overrides the arguments."))
register_schema(OpSchema(
    "UpsampleBilinearGradient", num_inputs={2, 3}, num_outputs=1, args=_ARGS, inputs=("dY", "X", "scales"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[1]],
    doc="Gradient of UpsampleBilinear: dY spread back onto X's pixels with the forward's weights."))


def _scales(ctx, scales, index):
    """(height_scale, width_scale) from the arguments, or from the scales input when given."""
    if scales is None:
        return ctx.float("height_scale"), ctx.float("width_scale")
    if scales.size != 2:
        raise ctx.input_error(index, "scales must hold 2 values [height_scale, width_scale], got %d"
                              % scales.size)
    return float(scales.reshape(-1)[0]), float(scales.reshape(-1)[1])


def _check_x(ctx, x, index):
    check_dtype(ctx, index, x, FLOATS)
    if x.ndim != 4:
        raise ctx.input_error(index, "must be 4-D NCHW, got shape %s" % list(x.shape))


def _output_hw(ctx, x, hs, ws, index):
    out = K.output_size(x.shape[2], hs), K.output_size(x.shape[3], ws)
    if not (np.isfinite(hs) and np.isfinite(ws)) or min(out) <= 0:
        raise ctx.input_error(index, "scales (%g, %g) give an empty output for %dx%d"
                              % (hs, ws, x.shape[2], x.shape[3]))
    return out


@register_kernel("UpsampleBilinear")
def upsample_bilinear(ctx):
    def run(x, scales=None):
        _check_x(ctx, x, 0)
        hs, ws = _scales(ctx, scales, 1)
        out_h, out_w = _output_hw(ctx, x, hs, ws, 1)
        if x.shape[2] == 0 or x.shape[3] == 0:
            raise ctx.input_error(0, "has an empty spatial size %s" % list(x.shape))
        return K.upsample(x, out_h, out_w)
    return run


@register_kernel("UpsampleBilinearGradient")
def upsample_bilinear_gradient(ctx):
    def run(dy, x, scales=None):
        _check_x(ctx, x, 1)
        check_dtype(ctx, 0, dy, FLOATS)
        if dy.ndim != 4 or dy.shape[:2] != x.shape[:2]:
            raise ctx.input_error(0, "must be 4-D with X's N and C %s, got shape %s"
                                  % (list(x.shape[:2]), list(dy.shape)))
        if x.shape[2] == 0 or x.shape[3] == 0:
            raise ctx.input_error(1, "has an empty spatial size %s" % list(x.shape))
        return K.upsample_gradient(dy, x.shape[2], x.shape[3])
    return run


@register_gradient("UpsampleBilinear")
def _upsample_bilinear_maker(g):
    ins = [g.GO(0), g.I(0)] + ([g.I(1)] if len(g.def_.input) == 2 else [])
    return [g.op("UpsampleBilinearGradient", ins, [g.GI(0)])]
