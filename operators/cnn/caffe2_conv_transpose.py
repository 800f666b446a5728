"""Caffe2's ConvTranspose in the caffe2 domain (NCHW or NHWC; kernel / stride / pad / adj
spellings, legacy_pad VALID or SAME, groups) and ConvTransposeGradient. Kernel:
kernels/cpu/cnn/conv_transpose.py (one GEMM per group on the team, then col2im)."""
import math

import numpy as np

from caffe2py.kernels.cpu.cnn import conv_transpose as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._common import LEGACY_CAFFE_POOLING, LEGACY_NOTSET, _pick, conv_geometry
from .._gradient_hooks import register_gradient

_ARGS = (Arg("kernel", "int"), Arg("kernels", "ints"), Arg("kernel_h", "int"), Arg("kernel_w", "int"),
         Arg("stride", "int", 1), Arg("strides", "ints"), Arg("stride_h", "int"), Arg("stride_w", "int"),
         Arg("pad", "int", 0), Arg("pads", "ints"), Arg("pad_t", "int"), Arg("pad_l", "int"), Arg("pad_b", "int"),
         Arg("pad_r", "int"),
         Arg("adj", "int", 0, doc="extra output rows/columns at the end, 0..stride"), Arg("adjs", "ints"),
         Arg("adj_h", "int"), Arg("adj_w", "int"),
         Arg("group", "int", 1), Arg("order", "string", "NCHW"),
         Arg("legacy_pad", "int", 0, doc="0 explicit pads; 1 VALID / 2 SAME: no padding"),
         Arg("shared_buffer", "int", 0, doc="accepted; caffe2py keeps no shared column buffer"),
         Arg("no_bias", "int", 0, doc="gradient op: no bias gradient output"))


def _nchw(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NCHW"


def _geometry(ctx, rank, filter_kernel):
    """(kernel, strides, pads (begins + ends), adjs), Caffe2's ConvTransposeUnpoolBase
    rules: explicit pads or legacy VALID / SAME (both meaning no padding), 0 <= adj <=
    stride, no dilation."""
    legacy = ctx.int("legacy_pad")
    if legacy == LEGACY_CAFFE_POOLING or legacy not in (0, 1, 2):
        raise ctx.error("legacy_pad %d is not supported by ConvTranspose (0, 1 VALID or 2 SAME)" % legacy)
    explicit = any(ctx.has(n) for n in ("pad", "pads", "pad_t", "pad_l", "pad_b", "pad_r"))
    if legacy != LEGACY_NOTSET and explicit:
        raise ctx.error("with legacy_pad VALID or SAME, give no explicit pads")
    for name in ("dilation", "dilations", "dilation_h", "dilation_w"):
        if ctx.has(name) and any(v != 1 for v in (ctx.ints(name) if name == "dilations" else [ctx.int(name)])):
            raise ctx.error("ConvTranspose has no dilation (argument %s)" % name)
    kernel, strides, pads, _ = conv_geometry(ctx, rank, kernel_from=filter_kernel)
    if legacy != LEGACY_NOTSET:
        pads = [0] * (2 * rank)
    adjs = _pick(ctx, "adj", "adjs", "adj_%s", rank, 0)
    if not (len(kernel) == len(strides) == len(adjs) == rank and len(pads) == 2 * rank):
        raise ctx.error("kernel %s, strides %s, pads %s and adjs %s do not describe a %d-D transposed convolution"
                        % (list(kernel), list(strides), list(pads), list(adjs), rank))
    if list(kernel) != list(filter_kernel):
        raise ctx.error("kernel %s differs from the filter's spatial shape %s" % (list(kernel), list(filter_kernel)))
    if min(strides) < 1 or min(pads) < 0 or any(not 0 <= a <= s for a, s in zip(adjs, strides)):
        raise ctx.error("strides %s must be >= 1, pads %s >= 0 and each adj in [0, stride] (adjs %s)"
                        % (list(strides), list(pads), list(adjs)))
    return list(kernel), list(strides), list(pads), list(adjs)


def _out_dims(ctx, x_dims, w_dims):
    nchw = _nchw(ctx)
    if len(x_dims) < 3 or len(w_dims) != len(x_dims):
        raise ctx.error("input %s and filter %s must be (N, C, spatial...) tensors of one rank"
                        % (list(x_dims), list(w_dims)))
    rank = len(x_dims) - 2
    spatial = x_dims[2:] if nchw else x_dims[1:-1]
    filter_kernel = w_dims[2:] if nchw else w_dims[1:-1]
    kernel, strides, pads, adjs = _geometry(ctx, rank, filter_kernel)
    out = [K.output_size(spatial[i], kernel[i], strides[i], pads[i], pads[rank + i], 1, adjs[i]) for i in range(rank)]
    if min(out) < 1:
        raise ctx.error("output spatial size %s is not positive (input %s, kernel %s, strides %s, pads %s)"
                        % (out, list(spatial), kernel, strides, pads))
    m = (w_dims[1] if nchw else w_dims[-1]) * ctx.int("group")
    return (x_dims[0], m) + tuple(out) if nchw else (x_dims[0],) + tuple(out) + (m,)


def _infer(ctx, ins):
    return [TensorType(_out_dims(ctx, ins[0].dims, ins[1].dims), ins[0].dtype)]


def _cost(ctx, ins):
    x, w = ins[0].dims, ins[1].dims
    macs = float(math.prod(x)) * float(math.prod(w[1:]))       # every input value times its filter row
    out = _out_dims(ctx, x, w)
    return Cost(flops=2 * macs, bytes_read=4.0 * (math.prod(x) + math.prod(w)),
                bytes_written=4.0 * math.prod(out), params_bytes=4.0 * math.prod(w))


register_schema(OpSchema(
    "ConvTranspose", num_inputs=(2, 3), num_outputs=1, args=_ARGS, inputs=("X", "filter", "bias"),
    outputs=("Y",), inference=_infer, cost=_cost,
    doc="Transposed convolution (the gradient of Conv with respect to its input, plus a bias). NCHW: filter "
        "(C, M / group, kH, kW), Y (N, M, H_out, W_out); NHWC: filter (C, kH, kW, M / group). Each spatial "
        "output size is (in - 1) * stride + kernel + adj - pad_begin - pad_end."))


def _check_filter(ctx, xc, wc, group):
    if group < 1 or xc.shape[1] % group:
        raise ctx.error("group %d must be >= 1 and divide the %d input channels" % (group, xc.shape[1]))
    if wc.shape[0] != xc.shape[1]:
        raise ctx.input_error(1, "filter's first dim %d differs from the input's %d channels"
                              % (wc.shape[0], xc.shape[1]))


def _to_nchw(x):
    return np.moveaxis(x, -1, 1)


def _from_nchw(y):
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))


@register_kernel("ConvTranspose")
def conv_transpose(ctx):
    nchw = _nchw(ctx)
    group = ctx.int("group")

    def run(x, w, b=None):
        check_dtype(ctx, 0, x, FLOATS)
        out_dims = _out_dims(ctx, x.shape, w.shape)
        xc, wc = (x, w) if nchw else (_to_nchw(x), _to_nchw(w))
        _check_filter(ctx, xc, wc, group)
        if b is not None and b.size != wc.shape[1] * group:
            raise ctx.input_error(2, "bias has %d values; the output has %d channels" % (b.size, wc.shape[1] * group))
        kernel, strides, pads, adjs = _geometry(ctx, xc.ndim - 2, wc.shape[2:])
        y = K.conv_transpose(xc, wc, b, strides, pads, [1] * len(kernel), group, adjs)
        y = y.astype(x.dtype, copy=False)
        return y if nchw else _from_nchw(y)
    return run


# ----------------------------------------------------------------- gradient

def _grad_infer(ctx, ins):
    x, w = ins[0], ins[1]
    outs = [w]
    if not ctx.int("no_bias"):
        outs.append(TensorType(((w.dims[1] if _nchw(ctx) else w.dims[-1]) * ctx.int("group"),), w.dtype))
    return (outs + [x])[:ctx.n_outputs]


register_schema(OpSchema(
    "ConvTransposeGradient", num_inputs=3, num_outputs=(1, 3), args=_ARGS, inputs=("X", "filter", "dY"),
    outputs=("dfilter", "dbias", "dX"), inference=_grad_infer,
    doc="Gradient of ConvTranspose: dfilter, then dbias unless no_bias=1, then dX when there is one more "
        "output. Geometry arguments as the forward's."))


@register_kernel("ConvTransposeGradient")
def conv_transpose_gradient(ctx):
    nchw = _nchw(ctx)
    group = ctx.int("group")
    need_db = not ctx.int("no_bias")
    base = 2 if need_db else 1
    if ctx.n_outputs not in (base, base + 1):
        raise ctx.error("with no_bias=%d this op has %d or %d outputs, got %d"
                        % (int(not need_db), base, base + 1, ctx.n_outputs))
    need_dx = ctx.n_outputs == base + 1

    def run(x, w, dy):
        check_dtype(ctx, 0, x, FLOATS)
        out_dims = _out_dims(ctx, x.shape, w.shape)
        if tuple(dy.shape) != tuple(out_dims):
            raise ctx.input_error(2, "gradient of shape %s does not match the output %s" % (list(dy.shape),
                                                                                            list(out_dims)))
        xc, wc, dyc = (x, w, dy) if nchw else (_to_nchw(x), _to_nchw(w), _to_nchw(dy))
        _check_filter(ctx, xc, wc, group)
        kernel, strides, pads, _ = _geometry(ctx, xc.ndim - 2, wc.shape[2:])
        dw, db, dx = K.conv_transpose_gradient(xc, wc, dyc, strides, pads, [1] * len(kernel), group, need_dx,
                                               need_db)
        dw = (dw if nchw else _from_nchw(dw)).astype(w.dtype, copy=False)
        outs = [dw] + ([db.astype(w.dtype, copy=False)] if need_db else [])
        if need_dx:
            outs.append((dx if nchw else _from_nchw(dx)).astype(x.dtype, copy=False))
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


@register_gradient("ConvTranspose")
def _conv_transpose_maker(g):
    want_dx = not g.arg("no_gradient_to_input", 0)
    ins = [g.input_value(0), g.input_value(1), g.GO(0)]
    if len(g.def_.input) == 3:
        return [g.op("ConvTransposeGradient", ins, [g.GI(1), g.GI(2)] + ([g.GI(0)] if want_dx else []))]
    return [g.op("ConvTransposeGradient", ins, [g.GI(1)] + ([g.GI(0)] if want_dx else []), no_bias=1)]
