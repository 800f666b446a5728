"""Small Caffe2 ops that bound shape inference meets in recommendation nets:
Bucketize, LpNorm, Clip, Mean, Tile, Shape, SparseLengthsSumSparseLookup (with
CPU kernels), and schema-only row-wise sparse SLS variants (their kernels are out of
scope here). Int8Quantize and Int8FC live with the Int8 family in operators/quant/."""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Ascending, DTypes, Finite, Rank, Scalar

from .._common import elementwise_cost, same_as_input

DT = caffe2_pb2.TensorProto


# ----------------------------------------------------------------- Bucketize

register_schema(OpSchema(
    "Bucketize", num_inputs=1, num_outputs=1,
    args=(Arg("boundaries", "floats", None, required=True, doc="sorted bucket boundaries",
              check=(Finite(), Ascending())),),
    checks=(DTypes(0, "float"), Rank(0, 1)),
    inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.INT32)],
    doc="Bucket index of each value: i with boundaries[i-1] < x <= boundaries[i] (int32)."))


@register_kernel("Bucketize")
def bucketize(ctx):
    boundaries = np.asarray(ctx.floats("boundaries"), dtype=np.float64)
    if np.any(np.diff(boundaries) < 0):
        raise ctx.error("boundaries %s must be sorted ascending" % boundaries.tolist())

    def run(x):
        return np.searchsorted(boundaries, x, side="left").astype(np.int32)
    return run


# ----------------------------------------------------------------- LpNorm

register_schema(OpSchema(
    "LpNorm", num_inputs=1, num_outputs=1,
    args=(Arg("p", "int", 2, doc="1 (sum |x|) or 2 (sum x^2, not its square root)"),
          Arg("average", "bool", False, doc="divide by the element count")),
    # lpnorm_op.cc's inference declares shape [1] and the input's type (FLOAT), though Caffe2's
    # lpnorm_op_test asserts INT64: the schema, not that test, is followed here
    inference=lambda ctx, ins: [TensorType((1,), ins[0].dtype)],
    cost=elementwise_cost, checks=(DTypes(0, "float"),),      # Caffe2 registers it for float only
    doc="Caffe2's LpNorm: p=1 gives sum |x|, p=2 gives sum x^2; a 1-element output."))


@register_kernel("LpNorm")
def lp_norm(ctx):
    p, average = ctx.int("p"), ctx.bool("average")
    if p not in (1, 2):
        raise ctx.error("p must be 1 or 2, got %d" % p)

    def run(x):
        x64 = x.astype(np.float64, copy=False)
        value = np.abs(x64).sum() if p == 1 else np.square(x64).sum()
        if average and x.size:
            value /= x.size
        return np.asarray([value], dtype=x.dtype)
    return run


# ----------------------------------------------------------------- Clip / Mean

register_schema(OpSchema(
    "Clip", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("min", "float", None, doc="lower bound (none: -inf)"),
          Arg("max", "float", None, doc="upper bound (none: +inf)")),
    inference=same_as_input(0), cost=elementwise_cost, doc="Clamp values to [min, max]."))


@register_kernel("Clip")
def clip(ctx):
    lo = ctx.float("min") if ctx.has("min") else -np.inf
    hi = ctx.float("max") if ctx.has("max") else np.inf
    if lo > hi:
        raise ctx.error("min %g is above max %g" % (lo, hi))

    def run(x):
        return np.clip(x, lo, hi).astype(x.dtype, copy=False)
    return run


def _mean_infer(ctx, ins):
    if not all(t.known for t in ins):
        return [UNKNOWN]
    try:
        return [TensorType(np.broadcast_shapes(*(t.dims for t in ins)), ins[0].dtype)]
    except ValueError:
        raise ctx.error("input shapes %s do not broadcast" % [list(t.dims) for t in ins]) from None


register_schema(OpSchema(
    "Mean", num_inputs=(1, None), num_outputs=1, allow_inplace=lambda i, o: o == 0,
    inference=_mean_infer, cost=elementwise_cost, checks=(DTypes("*", "numeric"),),
    doc="Elementwise mean of the inputs, broadcast against each other as NumPy does (late Caffe2; "
        "numeric types, where Caffe2 takes float only). In place on input 0 only when the output has "
        "input 0's shape."))


@register_kernel("Mean")
def mean(ctx):
    in_place = ctx.outputs[0] == ctx.inputs[0]

    def run(*xs):
        try:
            shape = np.broadcast_shapes(*(x.shape for x in xs))
        except ValueError:
            raise ctx.error("input shapes %s do not broadcast" % [list(x.shape) for x in xs]) from None
        if in_place and shape != xs[0].shape:
            raise ctx.input_error(0, "is also the output, but the inputs broadcast to %s, not its shape %s"
                                  % (list(shape), list(xs[0].shape)))
        total = np.zeros(shape, dtype=np.float64)
        for x in xs:
            total += x
        return (total / len(xs)).astype(xs[0].dtype)
    return run


# ----------------------------------------------------------------- Tile

def _tile_infer(ctx, ins):
    if ctx.n_inputs != 1:
        return [UNKNOWN]   # tiles / axis come from blobs: not static
    dims = list(ins[0].dims)
    if not dims:
        return [UNKNOWN]
    axis = ctx.int("axis") % len(dims)
    dims[axis] *= ctx.int("tiles")
    return [TensorType(tuple(dims), ins[0].dtype)]


register_schema(OpSchema(
    "Tile", num_inputs=(1, 3), num_outputs=1,
    args=(Arg("tiles", "int", 1, doc="copies along axis"), Arg("axis", "int", 0),
          Arg("dynamic", "int", 0, doc="bound shape inference: tiles are the batch size")),
    checks=(Scalar((1, 2)), DTypes((1, 2), "int")),
    inference=_tile_infer, inputs=("data", "tiles", "axis"), outputs=("tiled_data",),
    doc="Repeat the whole input `tiles` times along `axis` (inputs 1 and 2 override the args)."))


def tile_params(ctx, x, tiles_blob=None, axis_blob=None):
    """(tiles, axis in [0, ndim)) of Tile and TileGradient: inputs 1 and 2 override the
    arguments; x is the array the axis indexes (X, or dY for the gradient)."""
    tiles = int(np.asarray(tiles_blob).reshape(-1)[0]) if tiles_blob is not None else ctx.int("tiles")
    axis = int(np.asarray(axis_blob).reshape(-1)[0]) if axis_blob is not None else ctx.int("axis")
    if tiles < 0:
        raise ctx.error("tiles must be >= 0, got %d" % tiles)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis, x.ndim))
    return tiles, axis % x.ndim


@register_kernel("Tile")
def tile(ctx):
    def run(x, tiles_blob=None, axis_blob=None):
        tiles, axis = tile_params(ctx, x, tiles_blob, axis_blob)
        reps = [1] * x.ndim
        reps[axis] = tiles
        return np.tile(x, reps)
    return run


# ----------------------------------------------------------------- Shape

def _shape_infer(ctx, ins):
    axes = ctx.ints("axes")
    return [TensorType((len(axes) if axes else len(ins[0].dims),), DT.INT64)]


register_schema(OpSchema(
    "Shape", num_inputs=1, num_outputs=1, args=(Arg("axes", "ints", None, doc="only these dims"),),
    inference=_shape_infer, doc="The input's dims as an int64 vector."))


@register_kernel("Shape")
def shape(ctx):
    axes = ctx.ints("axes")

    def run(x):
        dims = np.asarray(x.shape, dtype=np.int64)
        if axes:
            if any(not -x.ndim <= a < x.ndim for a in axes):
                raise ctx.input_error(0, "axes %s out of range for %d-D input" % (axes, x.ndim))
            dims = dims[[a % x.ndim for a in axes]]
        return dims
    return run


# ----------------------------------------------------------------- SparseLengthsSumSparseLookup

register_schema(OpSchema(
    "SparseLengthsSumSparseLookup", num_inputs=(3, 4), num_outputs=(2, 3),
    inference=lambda ctx, ins: [ins[0], ins[1]] + ([ins[3]] if ctx.n_inputs == 4 and ctx.n_outputs == 3 else []),
    checks=(DTypes((0, 1, 2), "int32/64"), DTypes(3, "float"), Rank("*", 1, 1)),
    inputs=("INDICES", "LENGTHS", "COMPRESSED_INDICES_MAPPING", "WEIGHTS"),
    outputs=("output_indices", "output_lengths", "output_weights"),
    doc="Map indices through a pruning table (-1 = pruned), dropping pruned entries and "
        "shortening lengths (and weights) to match. Bounds keep the input shapes."))


@register_kernel("SparseLengthsSumSparseLookup")
def sparse_lookup(ctx):
    with_weights = ctx.n_inputs == 4

    def run(indices, lengths, mapping, weights=None):
        if lengths.sum() != indices.size:
            raise ctx.input_error(1, "lengths sum to %d but there are %d indices" % (lengths.sum(), indices.size))
        if indices.size and (indices.min() < 0 or indices.max() >= mapping.size):
            raise ctx.input_error(0, "indices must lie in [0, %d)" % mapping.size)
        mapped = mapping[indices]
        keep = mapped != -1
        segment = np.repeat(np.arange(lengths.size), lengths)
        new_lengths = np.bincount(segment[keep], minlength=lengths.size).astype(lengths.dtype)
        outs = (mapped[keep].astype(indices.dtype), new_lengths)
        if with_weights:
            outs += (weights[keep],)
        return outs[:ctx.n_outputs]
    return run


# ----------------------------------------------------------------- schema-only ops

# SparseLengths*BitRowwiseSparse: schemas and kernels in rowwise_sparse_lookup.py; Int8Quantize and
# Int8FC: operators/quant/.

# UnPackRecords: schema and kernel in dataset_ops.py.
