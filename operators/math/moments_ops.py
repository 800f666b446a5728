"""Caffe2's Moments (mean and variance over some axes) and BatchMoments (per channel
mean of X and of X^2, as SpatialBN's batch statistics) with their gradient ops
MomentsGradient(dmean, dvariance, X, mean) and BatchMomentsGradient(dmu, dvar, X).
Kernels: kernels/cpu/math/moments.py."""
import math

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import moments as K
from caffe2py.registry import UNKNOWN as _UNKNOWN
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes

from .._caffe2_binary import FLOATS, check_dtype
from .._common import same_as_input


def _cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(flops=3 * n, bytes_read=4 * n)


def _axes(ctx, ndim):
    """Caffe2's axes argument (negative counted from the end), all axes when absent."""
    if not ctx.has("axes"):
        return tuple(range(ndim))
    axes = []
    for a in ctx.ints("axes"):
        if not -ndim <= a < ndim:
            raise ctx.input_error(0, "axes value %d out of range for a %d-D tensor" % (a, ndim))
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ctx.error("axes %s names an axis twice" % list(ctx.ints("axes")))
    return tuple(sorted(axes))


def _moments_infer(ctx, ins):
    t = ins[0]
    if not t.known:
        return [_UNKNOWN, _UNKNOWN]
    axes = _axes(ctx, len(t.dims))
    keep = ctx.bool("keepdims")
    dims = tuple(1 if i in axes else d for i, d in enumerate(t.dims) if keep or i not in axes)
    return [TensorType(dims, t.dtype)] * 2


register_schema(OpSchema(
    "Moments", num_inputs=1, num_outputs=2, inputs=("X",), outputs=("mean", "variance"),
    args=(Arg("axes", "ints", None, doc="axes reduced over (default all)"),
          Arg("keepdims", "bool", True, doc="keep the reduced axes as size 1")),
    checks=(DTypes(0, *FLOATS),), inference=_moments_infer, cost=_cost,
    doc="Mean and population variance (mean of squared deviations) of X over axes."))
register_schema(OpSchema(
    "MomentsGradient", num_inputs=4, num_outputs=1, inputs=("dmean", "dvariance", "X", "mean"),
    outputs=("dX",), args=(Arg("axes", "ints", None), Arg("keepdims", "bool", True)),
    inference=same_as_input(2), cost=_cost,
    doc="Gradient of Moments: dX = (dmean + 2 (X - mean) dvariance) / n, n the number of "
        "elements reduced into each output."))


def _check_reduced(ctx, index, a, x, axes):
    want = math.prod(d for i, d in enumerate(x.shape) if i not in axes)
    if a.size != want:
        raise ctx.input_error(index, "has %d values; X %s reduced over axes %s has %d"
                              % (a.size, list(x.shape), list(axes), want))


@register_kernel("Moments")
def moments(ctx):
    keepdims = ctx.bool("keepdims")

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        return K.moments(x, _axes(ctx, x.ndim), keepdims)
    return run


@register_kernel("MomentsGradient")
def moments_gradient(ctx):
    def run(dmean, dvar, x, mean):
        axes = _axes(ctx, x.ndim)
        for index, a in ((0, dmean), (1, dvar), (3, mean)):
            _check_reduced(ctx, index, a, x, axes)
        return K.moments_grad(dmean, dvar, x, mean, axes)
    return run


@register_gradient("Moments")
def _moments_gradient(g):
    return [g.op("MomentsGradient", [g.GO(0), g.GO(1), g.input_value(0), g.O(0)], [g.GI(0)])]


# ----------------------------------------------------------------- BatchMoments

def _nchw(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NCHW"


def _as_ncs(ctx, x, nchw):
    """x as (N, C, S); NHWC as (N * S, C, 1)."""
    if x.ndim < 2:
        raise ctx.input_error(0, "needs at least 2 dims (N, C, ...), got shape %s" % list(x.shape))
    if nchw:
        return x.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1], 1)


def _batch_infer(ctx, ins):
    t = ins[0]
    if not t.known or len(t.dims) < 2:
        return [_UNKNOWN, _UNKNOWN]
    c = t.dims[1] if _nchw(ctx) else t.dims[-1]
    return [TensorType((c,), t.dtype)] * 2


_ORDER = Arg("order", "string", "NCHW")
register_schema(OpSchema(
    "BatchMoments", num_inputs=1, num_outputs=2, inputs=("X",), outputs=("mu", "var"), args=(_ORDER,),
    checks=(DTypes(0, *FLOATS),), inference=_batch_infer, cost=_cost,
    doc="Per channel over the batch and spatial positions: mu = mean(X) and var = mean(X^2) "
        "(Caffe2's name; it is the second raw moment, not the variance)."))
register_schema(OpSchema(
    "BatchMomentsGradient", num_inputs=3, num_outputs=1, inputs=("dmu", "dvar", "X"), outputs=("dX",),
    args=(_ORDER,), inference=same_as_input(2), cost=_cost,
    doc="Gradient of BatchMoments: dX = (dmu + 2 X dvar) / (N * spatial size), per channel."))


@register_kernel("BatchMoments")
def batch_moments(ctx):
    nchw = _nchw(ctx)

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        return K.batch_moments(_as_ncs(ctx, x, nchw))
    return run


@register_kernel("BatchMomentsGradient")
def batch_moments_gradient(ctx):
    nchw = _nchw(ctx)

    def run(dmu, dvar, x):
        x3 = _as_ncs(ctx, x, nchw)
        for index, a in ((0, dmu), (1, dvar)):
            if a.size != x3.shape[1]:
                raise ctx.input_error(index, "has %d values; X has %d channels" % (a.size, x3.shape[1]))
        return K.batch_moments_grad(dmu, dvar, x3).reshape(x.shape)
    return run


@register_gradient("BatchMoments")
def _batch_moments_gradient(g):
    return [g.op("BatchMomentsGradient", [g.GO(0), g.GO(1), g.input_value(0)], [g.GI(0)])]
