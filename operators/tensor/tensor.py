"""Shape and layout ops: Copy, Alias, Reshape, Flatten, Transpose, ChannelShuffle, Concat,
Split, Iter."""
import math
import numpy as np

from caffe2py.kernels.cpu.tensor import layout as layout_k
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Axis, DTypes, OneOf, Permutation

from .._common import same_as_input

INT64 = caffe2_pb2.TensorProto.INT64
INT32 = caffe2_pb2.TensorProto.INT32


def _copy_cost(ctx, ins):
    n = float(np.prod(ins[0].dims))
    return Cost(bytes_read=4 * n, bytes_written=4 * n)


for _op in ("Copy", "CopyFromCPUInput", "EnsureDense", "StopGradient"):
    register_schema(OpSchema(_op, num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
                             inference=same_as_input(0), cost=_copy_cost,
                             doc="Output is a copy of the input."))
    register_kernel(_op)(lambda ctx: lambda x: np.array(x, copy=True))

register_schema(OpSchema("Alias", num_inputs=1, num_outputs=1, inference=same_as_input(0),
                         doc="Output shares the input's data."))
register_kernel("Alias")(lambda ctx: lambda x: x)


# ----------------------------------------------------------------- Reshape

def _resolve_shape(ctx, in_shape, new_shape):
    new_shape = list(new_shape)
    for i, d in enumerate(new_shape):
        if d == 0:  # 0 copies the input's dim (Caffe2 and ONNX without allowzero)
            if i >= len(in_shape):
                raise ctx.error("shape %s: 0 at position %d has no input dim to copy" % (new_shape, i))
            new_shape[i] = in_shape[i]
    total = int(np.prod(in_shape, dtype=np.int64))
    if new_shape.count(-1) > 1:
        raise ctx.error("shape %s has more than one -1" % new_shape)
    if -1 in new_shape:
        known = int(np.prod([d for d in new_shape if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ctx.error("cannot reshape %s into %s" % (list(in_shape), new_shape), blob=ctx.inputs[0])
        new_shape[new_shape.index(-1)] = total // known
    if int(np.prod(new_shape, dtype=np.int64)) != total or any(d < 0 for d in new_shape):
        raise ctx.error("cannot reshape %s (%d elements) into %s" % (list(in_shape), total, new_shape),
                        blob=ctx.inputs[0])
    return tuple(new_shape)


def _reshape_infer(ctx, ins):
    if ctx.n_inputs == 2:
        return [UNKNOWN, TensorType((len(ins[0].dims),), INT64)]
    return [TensorType(_resolve_shape(ctx, ins[0].dims, ctx.ints("shape")), ins[0].dtype),
            TensorType((len(ins[0].dims),), INT64)]


register_schema(OpSchema(
    "Reshape", num_inputs=(1, 2), num_outputs=(1, 2), allow_inplace={(0, 0)},
    args=(Arg("shape", "ints", None, doc="new shape; 0 copies a dim, one -1 is inferred"),),
    inference=_reshape_infer, inputs=("data", "new_shape"), outputs=("reshaped", "old_shape"),
    checks=(DTypes(1, "int32/64"),),     # as Caffe2 dispatches on the shape blob
    doc="Reshape to `shape` (or input 1's int32/int64 values); output 1 holds the old shape (int64)."))


@register_kernel("Reshape")
def reshape(ctx):
    if ctx.n_inputs == 1 and not ctx.has("shape"):
        raise ctx.error("needs argument 'shape' or a second input holding the shape")
    if ctx.n_inputs == 2 and ctx.has("shape"):
        raise ctx.error("takes the shape from argument 'shape' or from input 1, not both")
    arg_shape = ctx.ints("shape")
    two = ctx.n_outputs == 2

    def run(x, shape_blob=None):
        target = arg_shape if shape_blob is None else [int(v) for v in np.asarray(shape_blob).reshape(-1)]
        y = x.reshape(_resolve_shape(ctx, x.shape, target))
        return (y, np.asarray(x.shape, dtype=np.int64)) if two else y
    return run


# ----------------------------------------------------------------- Flatten

def _flatten_dims(dims, axis):
    axis = axis % (len(dims) + 1) if axis < 0 else axis
    return (int(np.prod(dims[:axis], dtype=np.int64)), int(np.prod(dims[axis:], dtype=np.int64)))


register_schema(OpSchema("Flatten", num_inputs=1, num_outputs=1,
                         args=(Arg("axis", "int", 1, check=Axis(0, extra=1)),),
                         inference=lambda ctx, ins: [TensorType(_flatten_dims(ins[0].dims, ctx.int("axis")),
                                                                ins[0].dtype)],
                         doc="2-D view: dims before `axis` times dims from `axis` on."))


@register_kernel("Flatten")
def flatten(ctx):
    axis = ctx.int("axis")

    def run(x):
        if not 0 <= (axis if axis >= 0 else axis + x.ndim + 1) <= x.ndim:
            raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis, x.ndim))
        return x.reshape(_flatten_dims(x.shape, axis))
    return run


# ----------------------------------------------------------------- Transpose

def _perm(ctx, rank):
    axes = ctx.ints("axes") or list(range(rank))[::-1]
    if sorted(a % rank if rank else a for a in axes) != list(range(rank)):
        raise ctx.error("axes %s are not a permutation of %d dims" % (axes, rank))
    return [a % rank for a in axes]


register_schema(OpSchema("Transpose", num_inputs=1, num_outputs=1,
                         args=(Arg("axes", "ints", None, doc="permutation; default reverses",
                                   check=Permutation(0)),),
                         inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[a] for a in _perm(ctx, len(ins[0].dims))),
                                                                ins[0].dtype)],
                         cost=_copy_cost, doc="Permute the dims."))


@register_kernel("Transpose")
def transpose(ctx):
    def run(x):
        # copy(order="C"), not ascontiguousarray: that one turns a 0-d tensor into shape [1]
        return x.transpose(_perm(ctx, x.ndim)).copy(order="C")
    return run


# ----------------------------------------------------------------- ChannelShuffle

register_schema(OpSchema(
    "ChannelShuffle", num_inputs=1, num_outputs=1,
    args=(Arg("group", "int", 1), Arg("order", "string", "NCHW")),
    inference=lambda ctx, ins: [ins[0]], cost=_copy_cost,
    doc="ShuffleNet's channel shuffle: the C = group * K channels, read as a (group, K) "
        "grid, are written out transposed (channel k * group + g takes channel g * K + k). "
        "caffe2py.optimize makes it of ONNX's Reshape -> Transpose -> Reshape spelling."))


def shuffle_channels(ctx, x, group, nchw, inverse=False):
    """ChannelShuffle's copy: the channels read as a (group, C / group) grid, written
    transposed. inverse (its gradient): the same copy with C / group groups."""
    axis = 1 if nchw else x.ndim - 1
    if x.ndim < 2 or x.shape[axis] % group:
        raise ctx.input_error(0, "%d channels (shape %s, %s) do not split into %d groups"
                              % (x.shape[axis] if x.ndim >= 2 else 0, list(x.shape),
                                 "NCHW" if nchw else "NHWC", group))
    if inverse:
        group = max(x.shape[axis] // group, 1)
    if nchw:
        return layout_k.channel_shuffle(x, group)
    lead = math.prod(x.shape[:axis])           # explicit sizes: -1 is ambiguous when empty
    grid = x.reshape(lead, group, x.shape[axis] // group)
    return np.ascontiguousarray(grid.transpose(0, 2, 1)).reshape(x.shape)


def channel_shuffle_args(ctx):
    """(group, NCHW?) checked at plan time."""
    group = ctx.int("group", 1)
    order = ctx.string("order", "NCHW")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    if group < 1:
        raise ctx.error("group must be positive, got %d" % group)
    return group, order == "NCHW"


@register_kernel("ChannelShuffle")
def channel_shuffle(ctx):
    group, nchw = channel_shuffle_args(ctx)
    return lambda x: shuffle_channels(ctx, x, group, nchw)


# ----------------------------------------------------------------- Concat / Split

def _axis(ctx, default=1):
    if ctx.has("order") and not ctx.has("axis"):
        return 1 if ctx.string("order") == "NCHW" else 3
    return ctx.int("axis", default)


def _checked_axis(ctx, axis, rank, what="input"):
    """axis normalised against rank, or a named error (Caffe2's canonical_axis_index)."""
    if not -rank <= axis < rank:
        raise ctx.input_error(0, "axis %d is out of range for a %d-D %s (valid: %d to %d)"
                              % (axis, rank, what, -rank, rank - 1))
    return axis % rank


def _concat_infer(ctx, ins):
    axis = _axis(ctx)
    first = ins[0].dims
    if ctx.bool("add_axis"):
        rank = len(first) + 1
        axis = axis % rank
        dims = first[:axis] + (len(ins),) + first[axis:]
        split = (len(ins),)
    else:
        axis = axis % len(first)
        dims = first[:axis] + (sum(t.dims[axis] for t in ins),) + first[axis + 1:]
        split = (len(ins),)
    return [TensorType(dims, ins[0].dtype), TensorType(split, INT32)][:ctx.n_outputs]


register_schema(OpSchema(
    "Concat", num_inputs=(1, None), num_outputs=(1, 2),
    args=(Arg("axis", "int", 1), Arg("order", "string", None), Arg("add_axis", "int", 0)),
    inference=_concat_infer, cost=_copy_cost, outputs=("concat_result", "split_info"),
    doc="Join inputs along `axis` (a new axis with add_axis=1); output 1 holds each input's size "
        "along the axis (int32)."))


@register_kernel("Concat")
def concat(ctx):
    add_axis = ctx.bool("add_axis")
    axis_arg = _axis(ctx)
    two = ctx.n_outputs == 2

    def run(*xs):
        rank = xs[0].ndim + (1 if add_axis else 0)
        axis = _checked_axis(ctx, axis_arg, rank, "output")
        for k, x in enumerate(xs[1:], 1):
            a, b = list(xs[0].shape), list(x.shape)
            if not add_axis and len(a) == len(b):
                a.pop(axis)
                b.pop(axis)
            if a != b:
                raise ctx.input_error(k, "shape %s does not match input 0's %s for concatenation on axis %d"
                                      % (list(x.shape), list(xs[0].shape), axis))
        y = np.stack(xs, axis=axis) if add_axis else layout_k.concat(xs, axis)
        if not two:
            return y
        sizes = [1] * len(xs) if add_axis else [x.shape[axis] for x in xs]
        return y, np.asarray(sizes, dtype=np.int32)
    return run


def _split_sizes(ctx, total, n, split_blob=None):
    if split_blob is not None:
        sizes = [int(v) for v in np.asarray(split_blob).reshape(-1)]
    elif ctx.has("split"):
        sizes = ctx.ints("split")
    else:
        if total % n:
            raise ctx.error("axis size %d does not split evenly into %d outputs" % (total, n))
        sizes = [total // n] * n
    if len(sizes) != n or sum(sizes) != total:
        raise ctx.error("split sizes %s do not cover axis size %d with %d outputs" % (sizes, total, n))
    return sizes


def _split_infer(ctx, ins):
    if ctx.n_inputs == 2:
        return [UNKNOWN] * ctx.n_outputs
    x = ins[0].dims
    axis = _axis(ctx) % len(x)
    if ctx.bool("add_axis"):
        dims = x[:axis] + x[axis + 1:]
        return [TensorType(dims, ins[0].dtype)] * ctx.n_outputs
    sizes = _split_sizes(ctx, x[axis], ctx.n_outputs)
    return [TensorType(x[:axis] + (s,) + x[axis + 1:], ins[0].dtype) for s in sizes]


register_schema(OpSchema(
    "Split", num_inputs=(1, 2), num_outputs=(1, None),
    args=(Arg("axis", "int", 1), Arg("split", "ints", None), Arg("order", "string", None),
          Arg("add_axis", "int", 0)),
    checks=(DTypes(1, "int"),),          # the split sizes input
    inference=_split_infer, cost=_copy_cost,
    doc="Split along `axis` into equal parts or the sizes in `split` (or input 1); add_axis=1 "
        "removes the axis (each part must then be 1 wide)."))


@register_kernel("Split")
def split(ctx):
    add_axis = ctx.bool("add_axis")
    n = ctx.n_outputs

    def run(x, split_blob=None):
        axis = _checked_axis(ctx, _axis(ctx), x.ndim)
        sizes = _split_sizes(ctx, x.shape[axis], n, split_blob)
        if add_axis and any(s != 1 for s in sizes):
            raise ctx.input_error(0, "add_axis=1 needs parts of size 1, got %s" % sizes)
        parts = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
        parts = [np.squeeze(p, axis=axis) if add_axis else np.ascontiguousarray(p) for p in parts]
        return parts[0] if n == 1 else tuple(parts)
    return run
