"""ConvGradient (Caffe2's name) and the Conv maker.

Inputs X, filter, dY; outputs dfilter, dbias (unless no_bias=1) and dX (unless the
forward had no_gradient_to_input=1): Caffe2's GetConvGradient output lists. The
geometry arguments are the forward's (copied by the maker): every kernel / stride /
pad / dilation spelling, legacy_pad, groups, NCHW or NHWC, N-d."""
import numpy as np

from caffe2py.errors import Caffe2Error
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import conv_grad as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Rank

from .._common import conv_geometry, legacy_pads
from .nn import _CONV_ARGS, _CONV_CHECKS, _from_nchw, _nchw, _to_nchw


def _infer(ctx, ins):
    x, w = ins[0], ins[1]
    outs = [w]
    if not ctx.bool("no_bias"):
        outs.append(TensorType((w.dims[0],), w.dtype))
    return (outs + [x])[:ctx.n_outputs]


register_schema(OpSchema(
    "ConvGradient", num_inputs=3, num_outputs=(1, 3),
    args=_CONV_ARGS + (Arg("no_bias", "int", 0, doc="1: no bias gradient output"),),
    checks=_CONV_CHECKS + (Rank(2, 3),), inference=_infer, inputs=("X", "filter", "dY"), outputs=("dfilter", "dbias", "dX"),
    doc="Gradient of Conv: dfilter, then dbias unless no_bias=1, then dX when there is one "
        "more output. Geometry arguments as the forward's."))


@register_kernel("ConvGradient")
def conv_gradient(ctx):
    nchw = _nchw(ctx)
    group = ctx.int("group", 1)
    legacy = ctx.int("legacy_pad", 0)
    need_db = not ctx.bool("no_bias")
    n_outputs = 1 + int(need_db)
    need_dx = ctx.n_outputs == n_outputs + 1
    if ctx.n_outputs not in (n_outputs, n_outputs + 1):
        raise ctx.error("with no_bias=%d this op has %d or %d outputs, got %d"
                        % (int(not need_db), n_outputs, n_outputs + 1, ctx.n_outputs))
    if group < 1:
        raise ctx.error("group must be positive, got %d" % group)

    def run(x, w, dy):
        xc = x if nchw else _to_nchw(x)
        wc = w if nchw else _to_nchw(w)
        dyc = dy if nchw else _to_nchw(dy)
        rank = xc.ndim - 2
        if rank < 1 or wc.ndim != xc.ndim:
            raise ctx.input_error(1, "filter of shape %s does not match %d-D input" % (list(w.shape), x.ndim))
        kernel, strides, pads, dil = conv_geometry(ctx, rank, kernel_from=wc.shape[2:])
        if list(kernel) != list(wc.shape[2:]):
            raise ctx.input_error(1, "filter spatial shape %s differs from kernel %s" % (list(wc.shape[2:]), kernel))
        if xc.shape[1] != wc.shape[1] * group or wc.shape[0] % group:
            raise ctx.input_error(1, "filter of shape %s with group %d does not fit %d input channels"
                                  % (list(w.shape), group, xc.shape[1]))
        pads = legacy_pads(legacy, xc.shape[2:], kernel, strides, dil, pads)
        if min(pads) < 0 or min(strides) < 1 or min(dil) < 1:
            raise ctx.error("pads %s must be >= 0, strides %s and dilations %s positive" % (pads, strides, dil))
        out = (xc.shape[0], wc.shape[0]) + tuple(
            conv_k.conv_output_size(xc.shape[2 + i], kernel[i], strides[i], pads[i], pads[rank + i], dil[i])
            for i in range(rank))
        if tuple(dyc.shape) != out:
            raise ctx.input_error(2, "gradient of shape %s does not match the convolution output %s"
                                  % (list(dy.shape), list(out if nchw else (out[0],) + out[2:] + (out[1],))))
        dw, db, dx = K.conv_backward(xc, wc, dyc, strides, pads, dil, group, need_dx, need_db)
        if not nchw:
            dw = _from_nchw(dw)
            dx = None if dx is None else _from_nchw(dx)
        outs = (dw,) + ((db,) if need_db else ()) + ((dx,) if need_dx else ())
        return outs[0] if len(outs) == 1 else outs
    return run


@register_gradient("Conv")
def _conv_maker(g):
    if len(g.def_.input) > 3:
        raise Caffe2Error("%s: a Conv writing into a concat buffer (4 inputs, made by caffe2py.optimize "
                          "for inference) has no gradient" % g.label)
    if g.has_arg("shuffle_group"):
        raise Caffe2Error("%s: a Conv reading its input through a channel shuffle (shuffle_group, made by "
                          "caffe2py.optimize for inference) has no gradient" % g.label)
    want_dx = not g.arg("no_gradient_to_input", 0)
    ins = [g.I(0), g.I(1), g.GO(0)]
    if len(g.def_.input) == 3:
        outs = [g.GI(1), g.GI(2)] + ([g.GI(0)] if want_dx else [])
        return [g.op("ConvGradient", ins, outs)]
    outs = [g.GI(1)] + ([g.GI(0)] if want_dx else [])
    return [g.op("ConvGradient", ins, outs, no_bias=1)]
