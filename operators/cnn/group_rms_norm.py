"""Caffe2's GroupNorm (`group`, `epsilon`, `order`; outputs Y, mean, inv_std of shape
[N, G]) and RMSNorm (`axis`, `eps`; outputs Y, rrms), with GroupNormGradient and
RMSNormGradient. Kernels: kernels/cpu/cnn/group_rms_norm.py."""
import math

from caffe2py.kernels.cpu.cnn import group_rms_norm as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import register_gradient
from .caffe2_norm import _pass_cost, canonical_axis_index

# ----------------------------------------------------------------- GroupNorm

_GN_ARGS = (Arg("group", "int", 32, doc="number of channel groups; C must be a multiple of it"),
            Arg("epsilon", "float", 1e-5, doc="added to the variance"),
            Arg("order", "string", "NCHW", doc="NCHW or NHWC"))


def _gn_infer(ctx, ins):
    x = ins[0]
    stats = TensorType((x.dims[0], ctx.int("group")), x.dtype) if x.known else TensorType(None, x.dtype)
    return [x, stats, stats]


register_schema(OpSchema(
    "GroupNorm", num_inputs=3, num_outputs=3, args=_GN_ARGS, inputs=("X", "gamma", "beta"),
    outputs=("Y", "mean", "inv_std"), inference=_gn_infer, cost=_pass_cost(8),
    doc="Group normalisation: the C channels split into `group` groups of C/group; each (sample, group) "
        "normalised over its channels and spatial positions, then * gamma[c] + beta[c]. X is N x C x ... "
        "(NCHW) or N x ... x C (NHWC), at least 2-D; mean and inv_std = 1/sqrt(var + epsilon) are [N, G]."))
register_schema(OpSchema(
    "GroupNormGradient", num_inputs=6, num_outputs=3, args=_GN_ARGS,
    inputs=("dY", "X", "gamma", "beta", "mean", "inv_std"), outputs=("dX", "dgamma", "dbeta"),
    inference=lambda ctx, ins: [ins[1], ins[2], ins[2]],
    doc="Gradient of GroupNorm from the forward's mean and inv_std."))


def _gn_setup(ctx):
    group, order = ctx.int("group"), ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got %r" % order)
    if group <= 0:
        raise ctx.error("group must be positive, got %d" % group)
    return group, order == "NHWC"


def _gn_check(ctx, x, gamma, beta, group, nhwc, x_index, gamma_index):
    check_dtype(ctx, x_index, x, FLOATS)
    if x.ndim < 2:
        raise ctx.input_error(x_index, "GroupNorm needs at least 2 dims (N, C), got shape %s" % list(x.shape))
    c = x.shape[-1] if nhwc else x.shape[1]
    if c % group:
        raise ctx.input_error(x_index, "has %d channels, not a multiple of group=%d" % (c, group))
    for k, p in ((gamma_index, gamma), (gamma_index + 1, beta)):
        if p.size != c:
            raise ctx.input_error(k, "has %d values; GroupNorm needs one per channel (%d)" % (p.size, c))


@register_kernel("GroupNorm")
def group_norm(ctx):
    group, nhwc = _gn_setup(ctx)
    eps = ctx.float("epsilon")

    def run(x, gamma, beta):
        _gn_check(ctx, x, gamma, beta, group, nhwc, 0, 1)
        return K.group_norm(x, gamma, beta, group, eps, nhwc)
    return run


@register_kernel("GroupNormGradient")
def group_norm_gradient(ctx):
    group, nhwc = _gn_setup(ctx)

    def run(dy, x, gamma, beta, mean, inv_std):
        _gn_check(ctx, x, gamma, beta, group, nhwc, 1, 2)
        if dy.shape != x.shape:
            raise ctx.input_error(0, "shape %s differs from X's %s" % (list(dy.shape), list(x.shape)))
        for k, s in ((4, mean), (5, inv_std)):
            if s.size != x.shape[0] * group:
                raise ctx.input_error(k, "has %d values; expected N * group = %d" % (s.size, x.shape[0] * group))
        return K.group_norm_gradient(dy, x, gamma, mean, inv_std, group, nhwc)
    return run


@register_gradient("GroupNorm")
def _group_norm_maker(g):
    return [g.op("GroupNormGradient", [g.GO(0), g.I(0), g.I(1), g.I(2), g.O(1), g.O(2)],
                 [g.GI(0), g.GI(1), g.GI(2)])]


# ----------------------------------------------------------------- RMSNorm

_RMS_ARGS = (Arg("axis", "int", 1, doc="statistics over the dims from axis on"),
             Arg("eps", "float", 0.0, doc="added to the mean square"))


def _rms_infer(ctx, ins):
    x = ins[0]
    if not x.known:
        return [x, TensorType(None, x.dtype)]
    axis = canonical_axis_index(ctx, ctx.int("axis"), len(x.dims))
    return [x, TensorType(tuple(x.dims[:axis]), x.dtype)]


register_schema(OpSchema(
    "RMSNorm", num_inputs=3, num_outputs=2, args=_RMS_ARGS, inputs=("X", "gamma", "beta"),
    outputs=("Y", "rrms"), inference=_rms_infer, cost=_pass_cost(5),
    doc="Root-mean-square normalisation: X viewed as (M, N) with N the product of the dims from `axis`; "
        "rrms = 1/sqrt(mean(x^2) + eps) per row, Y = x * rrms * gamma + beta (gamma, beta: N values). "
        "rrms has shape X.dims[:axis]."))
register_schema(OpSchema(
    "RMSNormGradient", num_inputs=4, num_outputs=3, args=_RMS_ARGS[:1],
    inputs=("dY", "X", "gamma", "rrms"), outputs=("dX", "dgamma", "dbeta"),
    inference=lambda ctx, ins: [ins[1], ins[2], ins[2]],
    doc="Gradient of RMSNorm from the forward's rrms."))


def _rms_rows(ctx, x, x_index):
    check_dtype(ctx, x_index, x, FLOATS)
    if x.ndim < 1:
        raise ctx.input_error(x_index, "RMSNorm needs at least 1 dim")
    axis = canonical_axis_index(ctx, ctx.int("axis"), x.ndim)
    return axis, math.prod(x.shape[:axis]), math.prod(x.shape[axis:])


def _rms_params(ctx, n, params, first_index):
    for k, p in enumerate(params, first_index):
        if p.size != n:
            raise ctx.input_error(k, "has %d values; RMSNorm needs one per normalised element (%d)" % (p.size, n))


@register_kernel("RMSNorm")
def rms_norm(ctx):
    eps = ctx.float("eps")

    def run(x, gamma, beta):
        axis, m, n = _rms_rows(ctx, x, 0)
        _rms_params(ctx, n, (gamma, beta), 1)
        y, rrms = K.rms_norm(x.reshape(m, n), gamma.reshape(-1), beta.reshape(-1), eps)
        return y.reshape(x.shape), rrms.reshape(x.shape[:axis])
    return run


@register_kernel("RMSNormGradient")
def rms_norm_gradient(ctx):
    def run(dy, x, gamma, rrms):
        axis, m, n = _rms_rows(ctx, x, 1)
        _rms_params(ctx, n, (gamma,), 2)
        if dy.shape != x.shape:
            raise ctx.input_error(0, "shape %s differs from X's %s" % (list(dy.shape), list(x.shape)))
        if rrms.size != m:
            raise ctx.input_error(3, "has %d values; X has %d rows before axis %d" % (rrms.size, m, axis))
        dx, dgamma, dbeta = K.rms_norm_gradient(dy.reshape(m, n), x.reshape(m, n), gamma.reshape(-1),
                                                rrms.reshape(-1))
        return dx.reshape(x.shape), dgamma.reshape(gamma.shape), dbeta.reshape(gamma.shape)
    return run


@register_gradient("RMSNorm")
def _rms_norm_maker(g):
    return [g.op("RMSNormGradient", [g.GO(0), g.I(0), g.I(1), g.O(1)], [g.GI(0), g.GI(1), g.GI(2)])]
