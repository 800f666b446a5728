"""Caffe2's normalisation ops in the caffe2 domain: LayerNorm (`axis`, `epsilon`,
`elementwise_affine`; outputs Y, mean, std), Normalize (L2 along `axis`), NormalizeL1,
NormalizePlanarYUV and ClipTensorByScaling, with LayerNormGradient and
NormalizeGradient. Kernels: kernels/cpu/cnn/normalize.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.cnn import normalize as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_alias, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._common import same_as_input
from .._gradient_hooks import register_gradient, should_not_do_gradient


def canonical_axis_index(ctx, axis, ndim):
    """Caffe2's canonical_axis_index: axis in [-ndim, ndim), negative counts from the end."""
    if not -ndim <= axis < ndim:
        raise ctx.error("axis %d is out of range for a %d-D input (valid: [%d, %d])" % (axis, ndim, -ndim, ndim - 1))
    return axis % ndim


def _pass_cost(passes):
    def cost(ctx, ins):
        n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
        return Cost(flops=passes * n, bytes_read=4 * n * len(ins), bytes_written=4 * n)
    return cost


# ----------------------------------------------------------------- LayerNorm

_LN_ARGS = (Arg("axis", "int", 1, doc="statistics over the dims from axis on"),
            Arg("epsilon", "float", 1e-5, doc="added to the variance"),
            Arg("elementwise_affine", "bool", False, doc="inputs gamma and beta scale and shift Y"))


def _layer_norm_infer(ctx, ins):
    x = ins[0]
    axis = canonical_axis_index(ctx, ctx.int("axis"), len(x.dims))
    stats = TensorType(tuple(x.dims[:axis]) + (1,), x.dtype)
    return [x, stats, stats]


register_schema(OpSchema(
    "LayerNorm", num_inputs={1, 3}, num_outputs=3, args=_LN_ARGS, inputs=("input", "gamma", "beta"),
    outputs=("output", "mean", "std"), inference=_layer_norm_infer, cost=_pass_cost(8),
    doc="Layer normalisation: X viewed as (M, N) with N the product of the dims from `axis`; each row "
        "becomes (x - mean) / std with std = sqrt(variance + epsilon), then * gamma + beta (N values "
        "each) when elementwise_affine=1. mean and std have shape X.dims[:axis] + [1]. X at least 2-D; "
        "float types (float16 computed in float32)."))
register_schema(OpSchema(
    "LayerNormGradient", num_inputs={5, 6}, num_outputs={1, 3}, args=_LN_ARGS[:1] + _LN_ARGS[2:],
    inputs=("dY", "Y", "mean", "std", "X", "gamma"), outputs=("dX", "dgamma", "dbeta"),
    inference=lambda ctx, ins: [ins[4]] + [ins[5]] * (ctx.n_outputs - 1),
    doc="Gradient of LayerNorm: dX, and with elementwise_affine=1 (gamma as input 5) dgamma and dbeta."))


def _affine(ctx, plain, with_affine):
    """elementwise_affine, checked against the op's input count (plan time)."""
    affine = ctx.bool("elementwise_affine")
    want = with_affine if affine else plain
    if ctx.n_inputs != want:
        raise ctx.error("with elementwise_affine=%d this op takes %d inputs, got %d" % (int(affine), want, ctx.n_inputs))
    return affine


def _rows(ctx, x):
    if x.ndim < 2:
        raise ctx.input_error(0, "LayerNorm needs an input of at least 2 dims, got shape %s" % list(x.shape))
    axis = canonical_axis_index(ctx, ctx.int("axis"), x.ndim)
    return axis, math.prod(x.shape[:axis]), math.prod(x.shape[axis:])


def _check_params(ctx, x, n, params, first_index):
    for k, p in enumerate(params, first_index):
        if p.size != n:
            raise ctx.input_error(k, "has %d values; elementwise_affine needs one per normalised element (%d, "
                                     "the product of X %s from axis %d)"
                                  % (p.size, n, list(x.shape), ctx.int("axis")))
        if p.dtype != x.dtype:
            raise ctx.input_error(k, "dtype %s differs from X's %s" % (p.dtype, x.dtype))


@register_kernel("LayerNorm")
def layer_norm(ctx):
    eps = ctx.float("epsilon")
    affine = _affine(ctx, 1, 3)

    def run(x, gamma=None, beta=None):
        check_dtype(ctx, 0, x, FLOATS)
        axis, m, n = _rows(ctx, x)
        if affine:
            _check_params(ctx, x, n, (gamma, beta), 1)
        y, mean, sigma = K.layer_norm(x.reshape(m, n), eps, gamma, beta)
        stats = tuple(x.shape[:axis]) + (1,)
        return y.reshape(x.shape), mean.reshape(stats), sigma.reshape(stats)
    return run


@register_kernel("LayerNormGradient")
def layer_norm_gradient(ctx):
    affine = _affine(ctx, 5, 6)
    if ctx.n_outputs != (3 if affine else 1):
        raise ctx.error("elementwise_affine=%d gives %d outputs, got %d" % (int(affine), 3 if affine else 1,
                                                                             ctx.n_outputs))

    def run(dy, y, mean, sigma, x, gamma=None):
        check_dtype(ctx, 4, x, FLOATS)
        axis, m, n = _rows(ctx, x)
        if dy.shape != x.shape:
            raise ctx.input_error(0, "shape %s differs from X's %s" % (list(dy.shape), list(x.shape)))
        for k, s in ((2, mean), (3, sigma)):
            if s.size != m:
                raise ctx.input_error(k, "has %d values; X %s has %d rows before axis %d"
                                      % (s.size, list(x.shape), m, axis))
        if affine:
            _check_params(ctx, x, n, (gamma,), 5)
        dx, dgamma, dbeta = K.layer_norm_gradient(dy.reshape(m, n), x.reshape(m, n), mean, sigma, gamma)
        return (dx.reshape(x.shape), dgamma, dbeta) if affine else dx.reshape(x.shape)
    return run


@register_gradient("LayerNorm")
def _layer_norm_maker(g):
    ins = [g.GO(0), g.O(0), g.O(1), g.O(2), g.input_value(0)]
    if len(g.def_.input) == 3:
        return [g.op("LayerNormGradient", ins + [g.I(1)], [g.GI(0), g.GI(1), g.GI(2)])]
    return [g.op("LayerNormGradient", ins, [g.GI(0)])]


# ----------------------------------------------------------------- Normalize / NormalizeL1

_AXIS = (Arg("axis", "int", -1, doc="the axis to normalise along (negative counts from the end)"),)

register_schema(OpSchema(
    "Normalize", num_inputs=1, num_outputs=1, args=_AXIS, inputs=("X",), outputs=("Y",),
    inference=same_as_input(0), cost=_pass_cost(3),
    doc="L2 normalisation along `axis`: x / max(||x||_2, 1e-12)."))
register_schema(OpSchema(
    "NormalizeGradient", num_inputs=2, num_outputs=1, args=_AXIS, inputs=("X", "dY"), outputs=("dX",),
    inference=same_as_input(0), doc="Gradient of Normalize."))
register_schema(OpSchema(
    "NormalizeL1", num_inputs=1, num_outputs=1, args=_AXIS, inputs=("X",), outputs=("Y",),
    inference=same_as_input(0), cost=_pass_cost(2),
    doc="L1 normalisation along `axis`: x / sum(|x|); vectors of zeros stay zero."))


def _normalize_factory(fn):
    def factory(ctx):
        axis_arg = ctx.int("axis")

        def run(x):
            check_dtype(ctx, 0, x, FLOATS)
            return fn(x, canonical_axis_index(ctx, axis_arg, x.ndim))
        return run
    return factory


register_kernel("Normalize")(_normalize_factory(K.l2_normalize))
register_kernel("NormalizeL1")(_normalize_factory(K.l1_normalize))


@register_kernel("NormalizeGradient")
def normalize_gradient(ctx):
    axis_arg = ctx.int("axis")

    def run(x, dy):
        check_dtype(ctx, 0, x, FLOATS)
        if dy.shape != x.shape or dy.dtype != x.dtype:
            raise ctx.input_error(1, "%s %s differs from X's %s %s" % (dy.dtype, list(dy.shape), x.dtype,
                                                                        list(x.shape)))
        return K.l2_normalize_gradient(x, dy, canonical_axis_index(ctx, axis_arg, x.ndim))
    return run


@register_gradient("Normalize")
def _normalize_maker(g):
    return [g.op("NormalizeGradient", [g.input_value(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- NormalizePlanarYUV

register_schema(OpSchema(
    "NormalizePlanarYUV", num_inputs=3, num_outputs=1, allow_inplace={(0, 0)}, inputs=("X", "mean", "std"),
    outputs=("Y",), inference=same_as_input(0), cost=_pass_cost(2),
    doc="Y = (X - mean[c]) / std[c] for a 4-D NCHW X; mean and std are [1, C]."))


@register_kernel("NormalizePlanarYUV")
def normalize_planar_yuv(ctx):
    def run(x, mean, std):
        check_dtype(ctx, 0, x, FLOATS)
        if x.ndim != 4:
            raise ctx.input_error(0, "must be 4-D NCHW, got shape %s" % list(x.shape))
        for k, v in ((1, mean), (2, std)):
            if v.shape != (1, x.shape[1]):
                raise ctx.input_error(k, "must have shape [1, C] = [1, %d], got %s" % (x.shape[1], list(v.shape)))
        return K.channel_affine_nchw(x, mean, std)
    return run


# ----------------------------------------------------------------- ClipTensorByScaling

register_schema(OpSchema(
    "ClipTensorByScaling", num_inputs=(2, 3), num_outputs=1, allow_inplace={(0, 0)},
    inputs=("input_tensor", "val", "additional_threshold"), outputs=("clipped",),
    args=(Arg("threshold", "float", 0.0, doc="must be > 0"),),
    inference=same_as_input(0), cost=_pass_cost(1),
    doc="input_tensor * (threshold / val) when val (one value, usually the tensor's norm) is above the "
        "threshold, else input_tensor unchanged. An optional one-value input multiplies the threshold."))


def _single(ctx, index, v):
    if v.size != 1:
        raise ctx.input_error(index, "must hold one value, got shape %s" % list(v.shape))
    return float(v.reshape(-1)[0])


@register_kernel("ClipTensorByScaling")
def clip_tensor_by_scaling(ctx):
    threshold = ctx.float("threshold")
    if not threshold > 0:
        raise ctx.error("threshold must be greater than 0, got %g" % threshold)

    def run(x, val, extra=None):
        check_dtype(ctx, 0, x, FLOATS)
        if x.size == 0:
            raise ctx.input_error(0, "must not be empty")
        limit = threshold * (1.0 if extra is None else _single(ctx, 2, extra))
        value = _single(ctx, 1, val)
        if value > limit:
            return (x * x.dtype.type(limit / value)).astype(x.dtype, copy=False)
        return np.array(x, copy=True)
    return run


should_not_do_gradient("ClipTensorByScaling")      # Caffe2's SHOULD_NOT_DO_GRADIENT


# Caffe2's c10 export of LayerNorm under a second name (same arguments, inputs and outputs).
register_alias("C10LayerNorm_DontUseThisOpYet", "LayerNorm",
               doc="Caffe2's c10 name for LayerNorm (the same operator; see LayerNorm).")
