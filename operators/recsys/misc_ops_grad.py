"""Gradients of misc_ops.py's Tile, LpNorm, Clip and Mean and of fused_rowwise.py's
half-float casts, as Caffe2 makes them:
  Tile -> TileGradient(dY[, tiles][, axis]) with the forward's tiles/axis arguments:
    the `tiles` copies along axis summed;
  LpNorm -> LpNormGradient(X, dY): sign(X) (0 within 1e-12 of zero) for p=1, 2 X for
    p=2, times dY, divided by X's size when average=1;
  Clip -> ClipGradient(Y, dY): dY where min < Y < max, 0 elsewhere (at the bounds too);
  Mean -> MeanGradient(dY, X_0, ..., X_n-1) (late Caffe2, for broadcast inputs): dY / n
    summed to each input's shape; MeanGradient(dY) alone (the older form) still runs;
  FloatToHalf -> HalfToFloat(dY) and HalfToFloat -> FloatToHalf(dY)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math.elementwise_grad import reduce_to_shape
from caffe2py.registry import Arg, OpSchema, TensorType, UNKNOWN, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Scalar

from .._caffe2_binary import FLOATS, check_dtype
from .._common import same_as_input
from .misc_ops import tile_params


def _same_shape(ctx, index, dy, like, what):
    if dy.shape != like.shape:
        raise ctx.input_error(index, "has shape %s but %s has %s" % (list(dy.shape), what, list(like.shape)))


# ----------------------------------------------------------------- Tile

def _tile_gradient_infer(ctx, ins):
    tiles = ctx.int("tiles")
    if ctx.n_inputs != 1 or not ins[0].known or not ins[0].dims or tiles <= 0:
        return [UNKNOWN]         # tiles / axis from blobs: not static
    dims = list(ins[0].dims)
    dims[ctx.int("axis") % len(dims)] //= tiles
    return [TensorType(tuple(dims), ins[0].dtype)]


register_schema(OpSchema(
    "TileGradient", num_inputs=(1, 3), num_outputs=1, inputs=("dY", "tiles", "axis"), outputs=("dX",),
    args=(Arg("tiles", "int", 1, doc="copies along axis"), Arg("axis", "int", 0)),
    checks=(Scalar((1, 2)), DTypes((1, 2), "int")),
    inference=_tile_gradient_infer,
    doc="Gradient of Tile: dY's `tiles` copies along `axis` summed (inputs 1 and 2 override the args)."))


@register_kernel("TileGradient")
def tile_gradient(ctx):
    def run(dy, tiles_blob=None, axis_blob=None):
        check_dtype(ctx, 0, dy, FLOATS)
        tiles, axis = tile_params(ctx, dy, tiles_blob, axis_blob)
        if tiles == 0 or dy.shape[axis] % tiles:
            raise ctx.input_error(0, "dim %d of dY %s is not %d tiles of X's dim (tiles must be > 0 for the "
                                     "gradient)" % (axis, list(dy.shape), tiles))
        outer = dy.shape[:axis]
        copies = dy.reshape(outer + (tiles, dy.shape[axis] // tiles) + dy.shape[axis + 1:])
        return copies.sum(axis=axis, dtype=np.float64 if dy.dtype == np.float64 else np.float32).astype(dy.dtype)
    return run


@register_gradient("Tile")
def _tile_maker(g):
    return [g.op("TileGradient", [g.GO(0)] + list(g.def_.input[1:]), [g.GI(0)])]


# ----------------------------------------------------------------- LpNorm

register_schema(OpSchema(
    "LpNormGradient", num_inputs=2, num_outputs=1, inputs=("X", "dout"), outputs=("dx",),
    args=(Arg("p", "int", 2, doc="1 or 2, as the forward"), Arg("average", "bool", False)),
    checks=(DTypes(0, "float"),), inference=same_as_input(0),
    doc="Gradient of LpNorm: dout (1 value) times sign(X) for p=1 (0 within 1e-12 of zero) or 2 X for "
        "p=2, divided by X's size when average=1."))


@register_kernel("LpNormGradient")
def lp_norm_gradient(ctx):
    p, average = ctx.int("p"), ctx.bool("average")
    if p not in (1, 2):
        raise ctx.error("p must be 1 or 2, got %d" % p)

    def run(x, dnorm):
        if dnorm.shape != (1,):
            raise ctx.input_error(1, "must be a 1-D tensor of one value (LpNorm's output), got shape %s"
                                  % list(dnorm.shape))
        scale = float(dnorm[0]) / (x.size if average and x.size else 1)
        x64 = x.astype(np.float64, copy=False)
        if p == 1:
            local = np.where(x64 > 1e-12, 1.0, np.where(x64 < -1e-12, -1.0, 0.0))
        else:
            local = 2.0 * x64
        return (local * scale).astype(x.dtype)
    return run


@register_gradient("LpNorm")
def _lp_norm_maker(g):
    return [g.op("LpNormGradient", [g.input_value(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- Clip

register_schema(OpSchema(
    "ClipGradient", num_inputs=2, num_outputs=1, allow_inplace={(1, 0)}, inputs=("Y", "dY"), outputs=("dX",),
    args=(Arg("min", "float", None, doc="lower bound (none: -inf)"),
          Arg("max", "float", None, doc="upper bound (none: +inf)")),
    inference=same_as_input(1),
    doc="Gradient of Clip from its output Y: dY where min < Y < max, 0 where Y is at (or past) a bound."))


@register_kernel("ClipGradient")
def clip_gradient(ctx):
    lo = ctx.float("min") if ctx.has("min") else -np.inf
    hi = ctx.float("max") if ctx.has("max") else np.inf

    def run(y, dy):
        _same_shape(ctx, 1, dy, y, "Y")
        return np.where((y > lo) & (y < hi), dy, 0).astype(dy.dtype, copy=False)
    return run


@register_gradient("Clip")
def _clip_maker(g):
    return [g.op("ClipGradient", [g.O(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- Mean

register_schema(OpSchema(
    "MeanGradient", num_inputs=(1, None), num_outputs=(1, None), allow_inplace={(0, 0)},
    inputs=("dY", "X_0"), inference=lambda ctx, ins: [ins[0]] * ctx.n_outputs if ctx.n_inputs == 1 else list(ins[1:]),
    inputs_outputs_check=lambda n_in, n_out: n_in in (1, n_out + 1),
    checks=(DTypes(0, "float"),),
    doc="Gradient of Mean over n inputs (n = the output count): dY / n, summed over the axes input i "
        "was broadcast along when the forward inputs follow dY (late Caffe2: dY, X_0, ..., X_n-1); "
        "with dY alone (the older form) every output is dY / n."))


def _broadcasts_to(shape, target):
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


@register_kernel("MeanGradient")
def mean_gradient(ctx):
    n = ctx.n_outputs

    def run(dy, *xs):
        share = (dy / dy.dtype.type(n)).astype(dy.dtype, copy=False)
        if not xs:
            return share if n == 1 else tuple([share] + [share.copy() for _ in range(n - 1)])
        grads = []
        for k, x in enumerate(xs, 1):
            if not _broadcasts_to(x.shape, dy.shape):
                raise ctx.input_error(k, "shape %s does not broadcast to dY's %s" % (list(x.shape), list(dy.shape)))
            g = reduce_to_shape(share, x.shape)
            grads.append(g.copy() if g is share else g)
        return grads[0] if n == 1 else tuple(grads)
    return run


@register_gradient("Mean")
def _mean_maker(g):
    # the inputs give only their shapes: in place, X_0 is the output, of X_0's shape
    n = len(g.def_.input)
    return [g.op("MeanGradient", [g.GO(0)] + list(g.def_.input), [g.GI(i) for i in range(n)])]


# ----------------------------------------------------------------- half-float casts

@register_gradient("FloatToHalf")
def _float_to_half_maker(g):
    return [g.op("HalfToFloat", [g.GO(0)], [g.GI(0)])]


@register_gradient("HalfToFloat")
def _half_to_float_maker(g):
    return [g.op("FloatToHalf", [g.GO(0)], [g.GI(0)])]
