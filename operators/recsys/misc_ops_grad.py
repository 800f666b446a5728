"""Gradients of Clip, Mean and LpNorm (misc_ops.py) and of FloatToHalf / HalfToFloat
(fused_rowwise.py), as Caffe2's makers write them:
  Clip -> ClipGradient(Y, dY): dY where min < Y < max (strictly; Caffe2's bounds
    default to float's lowest and max);
  Mean -> MeanGradient(dY) -> dX_0, dX_1, ...: dY / n each;
  LpNorm -> LpNormGradient(X, dnorm) with p and average;
  FloatToHalf -> HalfToFloat(dY), HalfToFloat -> FloatToHalf(dY)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.recsys import misc_ops_grad as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import DTypes

_FLOAT32 = np.finfo(np.float32)


# ----------------------------------------------------------------- Clip

register_schema(OpSchema(
    "ClipGradient", num_inputs=2, num_outputs=1, allow_inplace={(1, 0)}, inputs=("Y", "dY"), outputs=("dX",),
    args=(Arg("min", "float", None, doc="the forward's lower bound (none: float's lowest)"),
          Arg("max", "float", None, doc="the forward's upper bound (none: float's max)")),
    checks=(DTypes((0, 1), "float"),), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of Clip from its output: dX = dY where min < Y < max, else 0."))


@register_kernel("ClipGradient")
def clip_gradient(ctx):
    lo = ctx.float("min") if ctx.has("min") else float(_FLOAT32.min)
    hi = ctx.float("max") if ctx.has("max") else float(_FLOAT32.max)

    def run(y, dy):
        if dy.size != y.size:
            raise ctx.input_error(1, "has %d values but Y has %d (shape %s)" % (dy.size, y.size, list(y.shape)))
        return K.clip_grad(y, dy, lo, hi)
    return run


@register_gradient("Clip")
def _clip_maker(g):
    return [g.op("ClipGradient", [g.O(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- Mean

register_schema(OpSchema(
    "MeanGradient", num_inputs=1, num_outputs=(1, None), allow_inplace={(0, 0)}, inputs=("dY",),
    outputs=("dX_0",), checks=(DTypes(0, "float"),),
    inference=lambda ctx, ins: [ins[0]] * ctx.n_outputs,
    doc="Gradient of Mean over n inputs (n = the number of outputs): every dX_i = dY / n."))


@register_kernel("MeanGradient")
def mean_gradient(ctx):
    n = ctx.n_outputs

    def run(dy):
        dx = K.mean_grad(dy, n)
        return dx if n == 1 else (dx,) + tuple(dx.copy() for _ in range(n - 1))
    return run


@register_gradient("Mean")
def _mean_maker(g):
    return [g.op("MeanGradient", [g.GO(0)], [g.GI(i) for i in range(len(g.def_.input))])]


# ----------------------------------------------------------------- LpNorm

register_schema(OpSchema(
    "LpNormGradient", num_inputs=2, num_outputs=1, inputs=("X", "dout"), outputs=("dx",),
    args=(Arg("p", "int", 2, doc="1 or 2, the forward's"), Arg("average", "bool", False)),
    checks=(DTypes((0, 1), "float"),), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of LpNorm: p=1 gives sign(X) * dout (0 where |X| <= 1e-12), p=2 gives 2 X dout; "
        "divided by X's size with average=1. dout holds one value (shape [1])."))


@register_kernel("LpNormGradient")
def lp_norm_gradient(ctx):
    p, average = ctx.int("p"), ctx.bool("average")
    if p not in (1, 2):
        raise ctx.error("p must be 1 or 2, got %d" % p)

    def run(x, dnorm):
        if dnorm.shape != (1,):
            raise ctx.input_error(1, "must have shape [1] (LpNorm's output), got %s" % list(dnorm.shape))
        return K.lp_norm_grad(x, dnorm[0], p, average)
    return run


@register_gradient("LpNorm")
def _lp_norm_maker(g):
    return [g.op("LpNormGradient", [g.input_value(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- FloatToHalf / HalfToFloat

@register_gradient("FloatToHalf")
def _float_to_half_maker(g):
    return [g.op("HalfToFloat", [g.GO(0)], [g.GI(0)])]


@register_gradient("HalfToFloat")
def _half_to_float_maker(g):
    return [g.op("FloatToHalf", [g.GO(0)], [g.GI(0)])]
