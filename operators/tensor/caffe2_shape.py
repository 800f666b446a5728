"""Caffe2's shape and tensor-utility ops in the caffe2 domain: ExpandDims, Squeeze,
FlattenToVec, MergeDim, PrependDim, ResizeLike, Size, HasElements, IsEmpty, Range,
Slice, ScatterAssign, UnsafeCoalesce, CopyOnDeviceLike and DiagonalFill."""
import math

import numpy as np

from caffe2py import shared_storage
from caffe2py.kernels.cpu.tensor import fill_scatter as fs
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import check_dtype
from .._common import same_as_input
from .fills import _CONSTANT_DTYPES, _FILL_ARGS, _fill_inference, _shape

DT = caffe2_pb2.TensorProto


def _copy_cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(bytes_read=4 * n, bytes_written=4 * n)


def _view_schema(op_type, infer, doc, args=(), num_inputs=1, inputs=("data",)):
    register_schema(OpSchema(op_type, num_inputs=num_inputs, num_outputs=1, allow_inplace={(0, 0)}, args=args,
                             inputs=inputs, outputs=("reshaped",), inference=infer, cost=_copy_cost, doc=doc))


# ----------------------------------------------------------------- ExpandDims / Squeeze

def _dims_arg(ctx):
    """Caffe2's `dims`: required, sorted, repeats dropped, none negative."""
    dims = sorted(set(ctx.ints("dims") or []))
    if not dims:
        raise ctx.error("argument dims must be provided and not empty")
    if dims[0] < 0:
        raise ctx.error("dims %s: dimension ids must be non-negative" % dims)
    return dims


def _expanded(ctx, shape, dims):
    if len(shape) + len(dims) < dims[-1] + 1:
        raise ctx.input_error(0, "has %d dims; dims %s need at least %d"
                              % (len(shape), dims, dims[-1] + 1 - len(dims)))
    out = list(shape)
    for d in dims:
        out.insert(d, 1)
    return tuple(out)


def _squeezed(ctx, shape, dims):
    if len(shape) <= dims[-1]:
        raise ctx.input_error(0, "has %d dims; dims %s need at least %d" % (len(shape), dims, dims[-1] + 1))
    for d in dims:
        if shape[d] != 1:
            raise ctx.input_error(0, "dim %d of shape %s is %d, not 1: it cannot be squeezed"
                                  % (d, list(shape), shape[d]))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


_DIMS_ARG = (Arg("dims", "ints", None, required=True, doc="dimension ids (sorted, repeats ignored)"),)
_view_schema("ExpandDims", lambda ctx, ins: [TensorType(_expanded(ctx, ins[0].dims, _dims_arg(ctx)), ins[0].dtype)],
             "Insert a dim of size 1 at each of `dims` (ids in the output, applied in increasing order).",
             args=_DIMS_ARG)
_view_schema("Squeeze", lambda ctx, ins: [TensorType(_squeezed(ctx, ins[0].dims, _dims_arg(ctx)), ins[0].dtype)],
             "Remove the dims listed in `dims`; each must have size 1.", args=_DIMS_ARG)


@register_kernel("ExpandDims")
def expand_dims(ctx):
    dims = _dims_arg(ctx)
    return lambda x: x.reshape(_expanded(ctx, x.shape, dims))


@register_kernel("Squeeze")
def squeeze(ctx):
    dims = _dims_arg(ctx)
    return lambda x: x.reshape(_squeezed(ctx, x.shape, dims))


# ----------------------------------------------------------------- FlattenToVec / MergeDim / PrependDim

def _flat(ctx, shape):
    if len(shape) < 1:
        raise ctx.input_error(0, "the rank of the tensor must be >= 1, got a scalar")
    return (math.prod(shape),)


def _merged(ctx, shape):
    if len(shape) < 2:
        raise ctx.input_error(0, "must be at least 2-D, got shape %s" % list(shape))
    return (shape[0] * shape[1],) + tuple(shape[2:])


def _prepended(ctx, shape, dim_size):
    if len(shape) < 1:
        raise ctx.input_error(0, "must be at least 1-D, got a scalar")
    if shape[0] % dim_size:
        raise ctx.input_error(0, "first dim %d is not a multiple of dim_size %d" % (shape[0], dim_size))
    return (dim_size, shape[0] // dim_size) + tuple(shape[1:])


def _dim_size(ctx):
    size = ctx.int("dim_size")
    if size <= 0:
        raise ctx.error("argument dim_size must be greater than zero, got %d" % size)
    return size


_view_schema("FlattenToVec", lambda ctx, ins: [TensorType(_flat(ctx, ins[0].dims), ins[0].dtype)],
             "The input as a 1-D vector.")
_view_schema("MergeDim", lambda ctx, ins: [TensorType(_merged(ctx, ins[0].dims), ins[0].dtype)],
             "Merge the first two dims into one: (d0, d1, ...) -> (d0 * d1, ...).")
_view_schema("PrependDim", lambda ctx, ins: [TensorType(_prepended(ctx, ins[0].dims, _dim_size(ctx)), ins[0].dtype)],
             "Split the first dim: (d0, ...) -> (dim_size, d0 / dim_size, ...).",
             args=(Arg("dim_size", "int", 0, required=True, doc="size of the new first dim (> 0)"),))

register_kernel("FlattenToVec")(lambda ctx: lambda x: x.reshape(_flat(ctx, x.shape)))
register_kernel("MergeDim")(lambda ctx: lambda x: x.reshape(_merged(ctx, x.shape)))


@register_kernel("PrependDim")
def prepend_dim(ctx):
    size = _dim_size(ctx)
    return lambda x: x.reshape(_prepended(ctx, x.shape, size))


# ----------------------------------------------------------------- ResizeLike

register_schema(OpSchema(
    "ResizeLike", num_inputs=2, num_outputs=1, inputs=("data", "shape_tensor"), outputs=("output",),
    inference=lambda ctx, ins: [TensorType(ins[1].dims, ins[0].dtype)], cost=_copy_cost,
    doc="The data of input 0 in the shape of input 1 (the element counts must match)."))


@register_kernel("ResizeLike")
def resize_like(ctx):
    def run(x, like):
        if x.size != like.size:
            raise ctx.input_error(0, "has %d elements (shape %s) but '%s' has %d (shape %s)"
                                  % (x.size, list(x.shape), ctx.inputs[1], like.size, list(like.shape)))
        return x.reshape(like.shape)
    return run


# ----------------------------------------------------------------- Size / HasElements / IsEmpty

register_schema(OpSchema("Size", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("size",),
                         inference=lambda ctx, ins: [TensorType((), DT.INT64)],
                         doc="The number of elements of X, as an int64 scalar (0-d)."))
register_kernel("Size")(lambda ctx: lambda x: np.asarray(np.size(x), dtype=np.int64))

register_schema(OpSchema("HasElements", num_inputs=(1, None), num_outputs=1, outputs=("has_elements",),
                         inference=lambda ctx, ins: [TensorType((), DT.BOOL)],
                         doc="A bool scalar: True when any input has at least one element."))
register_kernel("HasElements")(lambda ctx: lambda *xs: np.asarray(any(np.size(x) > 0 for x in xs)))

register_schema(OpSchema("IsEmpty", num_inputs=1, num_outputs=1, inputs=("tensor",), outputs=("is_empty",),
                         inference=lambda ctx, ins: [TensorType((), DT.BOOL)],
                         doc="A bool scalar: True when the input has no elements."))
register_kernel("IsEmpty")(lambda ctx: lambda x: np.asarray(np.size(x) == 0))


# ----------------------------------------------------------------- Range

register_schema(OpSchema(
    "Range", num_inputs=(1, 3), num_outputs=1, inputs=("start", "stop", "step"), outputs=("output",),
    inference=lambda ctx, ins: [UNKNOWN],
    doc="The values of [start, stop) with step, as numpy.arange: inputs (stop), (start, stop) or "
        "(start, stop, step); scalars of one type (int32, int64, float, double), which the output "
        "takes. start defaults to 0, step to 1."))

_RANGE_TYPES = (np.int32, np.int64, np.float32, np.float64)


@register_kernel("Range")
def range_kernel(ctx):
    n = ctx.n_inputs

    def run(*xs):
        check_dtype(ctx, 0, xs[0], _RANGE_TYPES)
        for k, x in enumerate(xs):
            if x.ndim != 0:
                raise ctx.input_error(k, "all inputs must be scalars (0-d), got shape %s" % list(x.shape))
            if x.dtype != xs[0].dtype:
                raise ctx.input_error(k, "dtype %s differs from input 0's %s" % (x.dtype, xs[0].dtype))
        values = [x.item() for x in xs]
        start, stop, step = (0, values[0], 1) if n == 1 else (values[0], values[1], 1) if n == 2 else values
        if step == 0:
            raise ctx.input_error(2, "step size cannot be 0")
        if xs[0].dtype.kind == "f" and not all(math.isfinite(v) for v in (start, stop, step)):
            raise ctx.error("start %r, stop %r and step %r must be finite" % (start, stop, step))
        return fs.range_values(start, stop, step, xs[0].dtype)
    return run


# ----------------------------------------------------------------- Slice

def slice_bounds(ctx, shape, starts, ends):
    """Per-dim (start, end) by Caffe2's rule: a negative index i means dim + 1 + i
    (so -1 is the end), indices past the dim are clamped, and end >= start."""
    if len(starts) != len(ends):
        raise ctx.error("starts %s and ends %s differ in length" % (list(starts), list(ends)))
    if len(starts) > len(shape):
        raise ctx.input_error(0, "has %d dims but starts/ends give %d" % (len(shape), len(starts)))
    bounds = []
    for i, d in enumerate(shape):
        if i >= len(starts) or d == 0:
            bounds.append((0, d))
            continue
        s, e = int(starts[i]), int(ends[i])
        s = d + 1 + s if s < 0 else s
        e = d + 1 + e if e < 0 else e
        s, e = min(s, d), min(e, d)
        if s < 0 or e < 0 or e < s:
            raise ctx.input_error(0, "slice [%d, %d) of dim %d (size %d) is not valid: after negative indices "
                                     "count from the end, start and end must be >= 0 and end >= start"
                                  % (int(starts[i]), int(ends[i]), i, d))
        bounds.append((s, e))
    return bounds


def _slice_infer(ctx, ins):
    if ctx.n_inputs != 1 or not (ctx.has("starts") and ctx.has("ends")):
        return [UNKNOWN]
    bounds = slice_bounds(ctx, ins[0].dims, ctx.ints("starts"), ctx.ints("ends"))
    return [TensorType(tuple(e - s for s, e in bounds), ins[0].dtype)]


register_schema(OpSchema(
    "Slice", num_inputs={1, 3}, num_outputs=1, inputs=("X", "starts", "ends"), outputs=("Y",),
    args=(Arg("starts", "ints", None, doc="start index per dim"), Arg("ends", "ints", None, doc="end index per dim")),
    inference=_slice_infer, cost=_copy_cost,
    doc="X[starts[0]:ends[0], starts[1]:ends[1], ...] from the arguments or from inputs 1 and 2 (1-D int32/"
        "int64). A negative index i stands for dim + 1 + i, so -1 is the end of the dim; dims past the "
        "given ones are kept whole. (Caffe2 sliced one dim per op; several are allowed here.)"))


def slice_arguments(ctx, n_blob_inputs):
    """Plan time: (starts, ends) from the arguments when the op has no starts/ends
    inputs (n_blob_inputs = its input count without them), else (None, None)."""
    if ctx.n_inputs != n_blob_inputs:
        return None, None
    if not (ctx.has("starts") and ctx.has("ends")):
        raise ctx.error("needs arguments starts and ends, or inputs starts and ends")
    return ctx.ints("starts"), ctx.ints("ends")


def slice_blob_bounds(ctx, shape, starts, ends, first_index=1):
    """Per-dim (start, end) from starts/ends blobs (inputs first_index and next: 1-D int32/int64)."""
    for k, v in ((first_index, starts), (first_index + 1, ends)):
        check_dtype(ctx, k, v, (np.int32, np.int64))
        if v.ndim != 1:
            raise ctx.input_error(k, "must be 1-D, got shape %s" % list(v.shape))
    return slice_bounds(ctx, shape, starts.tolist(), ends.tolist())


@register_kernel("Slice")
def slice_kernel(ctx):
    arg_starts, arg_ends = slice_arguments(ctx, 1)

    def run(x, starts=None, ends=None):
        bounds = (slice_bounds(ctx, x.shape, arg_starts, arg_ends) if arg_starts is not None
                  else slice_blob_bounds(ctx, x.shape, starts, ends))
        return np.ascontiguousarray(x[tuple(slice(s, e) for s, e in bounds)])
    return run


# ----------------------------------------------------------------- ScatterAssign

register_schema(OpSchema(
    "ScatterAssign", num_inputs=3, num_outputs=1, enforce_inplace={(0, 0)}, inputs=("DATA", "INDICES", "SLICES"),
    outputs=("DATA",), inference=same_as_input(0),
    doc="DATA[INDICES[k]] = SLICES[k] for each k: rows of DATA (its first dim) are overwritten; SLICES "
        "holds len(INDICES) rows of DATA's row size. The output must be DATA itself. Caffe2 wrote in "
        "place; here the updated DATA is a new array (a failing net leaves the old one), so each call "
        "copies DATA."))

_SCATTER_DATA = (np.float32, np.float16, np.uint8, np.int32, np.int64)


@register_kernel("ScatterAssign")
def scatter_assign(ctx):
    def run(data, indices, slices):
        check_dtype(ctx, 0, data, _SCATTER_DATA)
        check_dtype(ctx, 1, indices, (np.int32, np.int64))
        if slices.dtype != data.dtype:
            raise ctx.input_error(2, "dtype %s differs from DATA's %s" % (slices.dtype, data.dtype))
        if data.ndim < 1:
            raise ctx.input_error(0, "must be at least a vector, got a scalar")
        rows = data.shape[0]
        block = math.prod(data.shape[1:])
        if slices.size != block * indices.size:
            raise ctx.input_error(2, "has %d elements; %d indices of rows of %d elements need %d"
                                  % (slices.size, indices.size, block, block * indices.size))
        if indices.size and (indices.min() < 0 or indices.max() >= rows):
            bad = indices[(indices < 0) | (indices >= rows)].reshape(-1)[0]
            raise ctx.input_error(1, "index %d is out of range [0, %d) for DATA '%s'" % (bad, rows, ctx.inputs[0]))
        return fs.scatter_assign(data, indices, slices)
    return run


# ----------------------------------------------------------------- UnsafeCoalesce

register_schema(OpSchema(
    "UnsafeCoalesce", num_inputs=(0, None), num_outputs=(1, None), allow_inplace=lambda i, o: i == o,
    inputs_outputs_check=lambda n_in, n_out: n_in + 1 == n_out,
    inference=lambda ctx, ins: list(ins) + [TensorType((sum(math.prod(t.dims) for t in ins),), DT.FLOAT)],
    doc="Copies the N float inputs, in order, into one flat float output (the last of N + 1 outputs) "
        "and makes outputs 0..N-1 views of it shaped like the inputs."))


@register_kernel("UnsafeCoalesce")
def unsafe_coalesce(ctx):
    def run(*xs):
        for k, x in enumerate(xs):
            check_dtype(ctx, k, x, (np.float32,))
        views, flat = fs.coalesce(xs)
        shared_storage.mark_shared(flat)    # FeedBlob into any of them writes to all, as in Caffe2
        return tuple(views) + (flat,)
    return run


# ----------------------------------------------------------------- CopyOnDeviceLike

register_schema(OpSchema(
    "CopyOnDeviceLike", num_inputs=2, num_outputs=1, inputs=("input", "dst"), outputs=("output",),
    inference=same_as_input(0), cost=_copy_cost,
    doc="A copy of input on the device of dst (on the CPU: a copy)."))
register_kernel("CopyOnDeviceLike")(lambda ctx: lambda x, dst: np.array(x, copy=True))


# ----------------------------------------------------------------- DiagonalFill

register_schema(OpSchema(
    "DiagonalFill", num_inputs=(0, 1), num_outputs=1, allow_inplace={(0, 0)}, inputs=("input",),
    outputs=("output",),
    args=_FILL_ARGS + (Arg("value", "float", 0.0, doc="the diagonal value"),
                       Arg("dtype", "int", DT.FLOAT, doc="output TensorProto.DataType")),
    inference=_fill_inference(lambda ctx: ctx.int("dtype", DT.FLOAT)),
    doc="Zeros with `value` on the diagonal (elements whose indices are all equal; a tall 2-D matrix "
        "wraps around as in Caffe2). Shape from `shape`, or input 0 (its shape, or its values with "
        "input_as_shape=1), plus `extra_shape`. At least 2-D; more than 2 dims must all be equal."))


@register_kernel("DiagonalFill")
def diagonal_fill(ctx):
    code = ctx.int("dtype")
    dtype = _CONSTANT_DTYPES.get(code)
    if dtype is None or dtype is object:
        raise ctx.error("unsupported dtype %d" % code)
    value = ctx.float("value")

    def fill(shape):
        if len(shape) < 2:
            raise ctx.error("the output shape %s must have at least 2 dims" % list(shape))
        if len(shape) > 2 and len(set(shape)) != 1:
            raise ctx.error("all dims of the %d-D output shape %s must be equal" % (len(shape), list(shape)))
        if any(d < 0 for d in shape):
            raise ctx.error("the output shape %s has a negative dim" % list(shape))
        return fs.diagonal_fill(shape, value, dtype)

    if ctx.n_inputs == 0:
        shape = _shape(ctx, ())
        fill(shape)          # a bad shape fails at plan time
        return lambda: fill(shape)
    return lambda x: fill(_shape(ctx, (x,)))
