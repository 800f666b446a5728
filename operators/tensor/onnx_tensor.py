"""ONNX tensor ops: Constant, ConstantOfShape, Shape, Size, Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Concat, Split, Gather, GatherElements, Slice,
Pad, Tile, Expand, Where, Range, NonZero, TopK, CumSum, DepthToSpace,
SpaceToDepth, OneHot. Attribute-vs-input changes across opsets follow the spec."""
import math
import numpy as np

from caffe2py.kernels.cpu.tensor import layout as layout_k
from caffe2py.kernels.cpu.tensor import onnx_tensor as tk
from caffe2py.tensors import tensor_to_numpy

from caffe2py.registry import Arg
from caffe2py.schema_rules import Axis, Broadcast, OneOf, Range, Rank, Scalar, output_size_problem

from ..onnx_base import axis_of, onnx_op


def _ints(arr):
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def _whole_numbers(ctx, index, arr):
    """_ints of an input that early opsets type as float (Split-1's split, Tile-1's tiles
    and axis): each value must be a finite whole number."""
    values = np.asarray(arr).reshape(-1)
    if values.dtype.kind == "f":
        bad = np.flatnonzero(~(np.isfinite(values) & (values == np.trunc(values))))
        if bad.size:
            raise ctx.input_error(index, "must hold whole numbers, got %r at position %d"
                                  % (float(values[bad[0]]), bad[0]))
    return _ints(values)


# ----------------------------------------------------------------- constants

@onnx_op("Constant", (1, None))
def constant(ctx):
    if ctx.has("value"):
        value = tensor_to_numpy(ctx.tensor("value"))
    elif ctx.has("value_float"):
        value = np.array(ctx.float("value_float"), dtype=np.float32)
    elif ctx.has("value_floats"):
        value = np.array(ctx.floats("value_floats"), dtype=np.float32)
    elif ctx.has("value_int"):
        value = np.array(ctx.int("value_int"), dtype=np.int64)
    elif ctx.has("value_ints"):
        value = np.array(ctx.ints("value_ints"), dtype=np.int64)
    elif ctx.has("value_string"):
        value = np.array(ctx.string("value_string"), dtype=object)
    elif ctx.has("value_strings"):
        value = np.array(ctx.strings("value_strings"), dtype=object)
    else:
        raise ctx.error("Constant needs one of value, value_float(s), value_int(s), value_string(s)")
    value.setflags(write=False)   # shared by every run; kernels never write inputs
    return lambda: value


def _refuse_huge(ctx, index, shape, dtype):
    """Refuse by name an output whose shape, read from input `index`, no memory holds."""
    problem = output_size_problem(shape, np.dtype(dtype).itemsize)
    if problem:
        raise ctx.input_error(index, problem)


@onnx_op("ConstantOfShape", (9, None))
def constant_of_shape(ctx):
    fill = tensor_to_numpy(ctx.tensor("value")).reshape(-1) if ctx.has("value") else \
        np.zeros(1, dtype=np.float32)
    if fill.size != 1:
        raise ctx.error("'value' must be a one-element tensor, got %d elements" % fill.size)

    def run(shape):
        dims = _ints(shape)
        if any(d < 0 for d in dims):
            raise ctx.input_error(0, "shape %s has a negative dimension" % dims)
        _refuse_huge(ctx, 0, dims, fill.dtype)
        return np.full(dims, fill[0], dtype=fill.dtype)
    return run


# ----------------------------------------------------------------- shape

@onnx_op("Shape", (1, None))
def shape(ctx):
    start, end = ctx.int("start", 0), ctx.int("end", None)

    def run(x):
        dims = list(x.shape)
        return np.array(dims[start:end] if (start or end is not None) else dims, dtype=np.int64)
    return run


@onnx_op("Size", (1, None))
def size(ctx):
    return lambda x: np.array(x.size, dtype=np.int64)


@onnx_op("Reshape", (1, 4), (5, None))
def reshape(ctx):
    allowzero = bool(ctx.int("allowzero", 0))
    attr_shape = ctx.ints("shape", None) if ctx.op_version < 5 else None

    targets = {}     # (input shape, shape bytes) -> the checked-out target: a run is then one view

    def run(x, shape=None):
        key = None
        if isinstance(shape, np.ndarray) and shape.dtype == np.int64 and shape.ndim == 1:
            key = (x.shape, shape.tobytes())
            target = targets.get(key)
            if target is not None:
                return x.reshape(target)
        wanted = attr_shape if shape is None else _ints(shape)
        if wanted is None:
            raise ctx.error("the new shape is missing (attribute 'shape' before opset 5, input 1 from 5)")
        if shape is not None and shape.ndim != 1:
            raise ctx.input_error(1, "the shape must be a 1-D tensor, got shape %s" % list(shape.shape))
        try:
            target = tk.reshape_target(x.shape, wanted, allowzero)
        except (ValueError, IndexError):
            target = wanted
        try:
            y = x.reshape(target)   # a view: kernels never write their inputs
        except ValueError:
            raise ctx.input_error(0, "cannot reshape %s (%d elements) to %s"
                                  % (list(x.shape), x.size, target)) from None
        if key is not None:
            if len(targets) > 64:
                targets.clear()
            targets[key] = y.shape      # a shape x's size fits (only x's shape and the values matter)
        return y
    return run


@onnx_op("Flatten", (1, None), args=(Arg("axis", "int", 1, check=Axis(0, extra=1)),))
def flatten(ctx):
    axis = ctx.int("axis", 1)

    def run(x):
        if not -x.ndim <= axis <= x.ndim:
            raise ctx.input_error(0, "axis %d is out of range for rank %d (valid: %d to %d)"
                                  % (axis, x.ndim, -x.ndim, x.ndim))
        a = axis + x.ndim if axis < 0 else axis
        rows = math.prod(x.shape[:a])
        return x.reshape(rows, -1) if x.size else x.reshape(rows, math.prod(x.shape[a:]))
    return run


@onnx_op("Transpose", (1, None))
def transpose(ctx):
    perm = ctx.ints("perm", None)

    def run(x):
        p = perm if perm else list(range(x.ndim))[::-1]
        if sorted(p) != list(range(x.ndim)):
            raise ctx.input_error(0, "perm %s is not a permutation of %d axes" % (p, x.ndim))
        return np.ascontiguousarray(np.transpose(x, p))
    return run


@onnx_op("Squeeze", (1, None))
def squeeze(ctx):
    attr_axes = ctx.ints("axes", None) if ctx.op_version < 13 else None

    def run(x, axes=None):
        ax = attr_axes if axes is None else _ints(axes)
        if not ax:
            return x.reshape([d for d in x.shape if d != 1])
        ax = [axis_of(ctx, a, x.ndim) for a in ax]
        if len(set(ax)) != len(ax):
            raise ctx.error("axes %s name an axis of a rank-%d input more than once" % (_ints(ax), x.ndim))
        for a in ax:
            if x.shape[a] != 1:
                raise ctx.input_error(0, "cannot squeeze axis %d of shape %s (size is not 1)" % (a, list(x.shape)))
        return np.squeeze(x, axis=tuple(ax))
    return run


@onnx_op("Unsqueeze", (1, None))
def unsqueeze(ctx):
    attr_axes = ctx.ints("axes", None) if ctx.op_version < 13 else None

    def run(x, axes=None):
        ax = attr_axes if axes is None else _ints(axes)
        if ax is None:
            raise ctx.error("axes are missing (attribute before opset 13, input 1 from 13)")
        rank = x.ndim + len(ax)
        if rank > 32:
            raise ctx.error("%d axes on a rank-%d input give rank %d; at most 32 are supported" % (len(ax), x.ndim, rank))
        if len({a % rank if -rank <= a < rank else a for a in ax}) != len(ax):
            raise ctx.error("axes %s name an output axis twice" % ax)
        ax = sorted(axis_of(ctx, a, rank) for a in ax)
        shape = list(x.shape)
        for a in ax:
            shape.insert(a, 1)
        return x.reshape(shape)
    return run


@onnx_op("Concat", (1, None))
def concat(ctx):
    axis = ctx.int("axis", 1)   # opset 1-3 defaulted to 1

    def run(*xs):
        a = axis_of(ctx, axis, xs[0].ndim)
        try:
            return layout_k.concat(xs, a)
        except ValueError as exc:
            raise ctx.error("inputs of shapes %s cannot be concatenated on axis %d: %s"
                            % ([list(x.shape) for x in xs], a, exc)) from None
    return run


@onnx_op("Split", (1, None))
def split(ctx):
    axis = ctx.int("axis", 0)
    attr_split = ctx.ints("split", None) if ctx.op_version < 13 else None
    n = ctx.n_outputs
    if ctx.op_version >= 18 and ctx.has("num_outputs") and ctx.int("num_outputs") != n:
        raise ctx.error("num_outputs is %d but the node has %d outputs" % (ctx.int("num_outputs"), n))

    def run(x, split_in=None):
        a = axis_of(ctx, axis, x.ndim)
        sizes = attr_split if split_in is None else _whole_numbers(ctx, 1, split_in)
        if sizes and min(sizes) < 0:
            message = "split sizes %s must be non-negative" % list(sizes)
            raise ctx.error(message) if split_in is None else ctx.input_error(1, message)
        try:
            sizes = tk.split_sizes(x.shape[a], sizes, n)
        except ValueError as exc:
            raise ctx.input_error(0, str(exc)) from None
        if len(sizes) != n:
            raise ctx.error("split gives %d parts for %d outputs" % (len(sizes), n))
        bounds = np.cumsum(sizes)[:-1]
        parts = tuple(p.copy() for p in np.split(x, bounds, axis=a))
        return parts if n > 1 else parts[0]
    return run


@onnx_op("Gather", (1, None))
def gather(ctx):
    axis = ctx.int("axis", 0)

    def run(x, indices):
        a = axis_of(ctx, axis, x.ndim)
        dim = x.shape[a]
        idx = np.where(indices < 0, indices + dim, indices)
        if idx.size and (idx.min() < 0 or idx.max() >= dim):
            raise ctx.input_error(1, "index out of range [-%d, %d)" % (dim, dim))
        return np.take(x, idx, axis=a)
    return run


@onnx_op("GatherElements", (11, None))
def gather_elements(ctx):
    axis = ctx.int("axis", 0)

    def run(x, indices):
        a = axis_of(ctx, axis, x.ndim)
        if indices.ndim != x.ndim:
            raise ctx.input_error(1, "indices must have the rank of data (%d), got shape %s"
                                  % (x.ndim, list(indices.shape)))
        for d in range(x.ndim):
            if d != a and indices.shape[d] > x.shape[d]:
                raise ctx.input_error(1, "indices of shape %s exceed data of shape %s on axis %d"
                                      % (list(indices.shape), list(x.shape), d))
        idx = np.where(indices < 0, indices + x.shape[a], indices)
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[a]):
            raise ctx.input_error(1, "index out of range for axis of size %d" % x.shape[a])
        # indices may be shorter than data on the other axes: take from the matching corner
        corner = tuple(slice(0, indices.shape[d]) if d != a else slice(None) for d in range(x.ndim))
        return np.take_along_axis(x[corner], idx, axis=a)
    return run


@onnx_op("Slice", (1, 9), (10, None))
def slice_op(ctx):
    legacy = ctx.op_version < 10
    if legacy:
        attr_starts, attr_ends = ctx.ints("starts"), ctx.ints("ends")
        if attr_starts is None or attr_ends is None:
            raise ctx.error("Slice before opset 10 needs the attributes 'starts' and 'ends'")
        attr_axes = ctx.ints("axes", None)

    def run(x, starts=None, ends=None, axes=None, steps=None):
        if legacy:
            s, e, ax, st = attr_starts, attr_ends, attr_axes, None
        else:
            s, e = _ints(starts), _ints(ends)
            ax = None if axes is None else _ints(axes)
            st = None if steps is None else _ints(steps)
        if ax is None and len(s) > x.ndim:
            raise ctx.error("%d starts for a rank-%d input (without axes they name dims 0, 1, ...)" % (len(s), x.ndim))
        ax = list(range(len(s))) if ax is None else [axis_of(ctx, a, x.ndim) for a in ax]
        st = [1] * len(s) if st is None else st
        if not len(s) == len(e) == len(ax) == len(st) or len(set(ax)) != len(ax):
            raise ctx.error("starts %s, ends %s, axes %s and steps %s must have one value per distinct axis"
                            % (s, e, ax, st))
        try:
            index = tk.slice_index(x.shape, s, e, ax, st)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
        return x[index].copy()
    return run


@onnx_op("Pad", (1, 10), (11, None))
def pad(ctx):
    if ctx.op_version < 11:
        mode = ctx.string("mode", "constant")
        attr_pads = ctx.ints("pads", None) or ctx.ints("paddings", None)
        value = ctx.float("value", 0.0)
    else:
        mode = ctx.string("mode", "constant")

    def run(x, pads=None, constant_value=None, axes=None):
        if x.ndim == 0:                       # as onnxruntime: a scalar has no axis to pad
            raise ctx.input_error(0, "is a scalar; Pad needs an input of rank 1 or more")
        if ctx.op_version < 11:
            p, v = attr_pads, value
            if p is None:
                raise ctx.error("Pad before opset 11 needs the attribute 'pads'")
        else:
            p = _ints(pads)
            if constant_value is not None and constant_value.size > 1:
                raise ctx.input_error(2, "constant_value must be one value, got shape %s"
                                      % list(constant_value.shape))
            v = 0 if constant_value is None or constant_value.size == 0 else constant_value.reshape(-1)[0]
            if axes is not None:
                ax = [axis_of(ctx, a, x.ndim) for a in _ints(axes)]
                full = [0] * (2 * x.ndim)
                for i, a in enumerate(ax):
                    full[a], full[a + x.ndim] = p[i], p[i + len(ax)]
                p = full
        if len(p) != 2 * x.ndim:
            raise ctx.error("pads has %d values; a rank-%d input needs %d" % (len(p), x.ndim, 2 * x.ndim))
        out = [x.shape[d] + p[d] + p[d + x.ndim] for d in range(x.ndim)]
        if min(out, default=0) < 0:
            d = int(np.argmin(out))
            raise ctx.error("pads %s would give dim %d a negative size (%d + %d + %d = %d) for input shape %s"
                            % (p, d, x.shape[d], p[d], p[d + x.ndim], out[d], list(x.shape)))
        too_big = output_size_problem(out, x.dtype.itemsize)
        if too_big:
            raise ctx.error("pads %s on input shape %s: %s" % (list(p), list(x.shape), too_big))
        try:
            return tk.pad(x, p, mode, v).astype(x.dtype, copy=False)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


@onnx_op("Tile", (1, 5), (6, None))
def tile(ctx):
    def run(x, repeats, axis=None):
        if axis is not None:   # opset 1: (input, tiles, axis)
            if x.ndim == 0:
                raise ctx.input_error(0, "opset-1 Tile repeats one axis; a 0-d input has none")
            for index, value in ((1, repeats), (2, axis)):
                if value.size != 1:
                    raise ctx.input_error(index, "opset-1 Tile takes one value for %s, got shape %s"
                                          % (("tiles", "axis")[index - 1], list(value.shape)))
            reps = [1] * x.ndim
            reps[axis_of(ctx, _whole_numbers(ctx, 2, axis)[0], x.ndim)] = _whole_numbers(ctx, 1, repeats)[0]
        else:
            reps = _ints(repeats)
        if len(reps) != x.ndim:
            raise ctx.input_error(1, "repeats has %d values for a rank-%d input" % (len(reps), x.ndim))
        if min(reps, default=0) < 0:
            raise ctx.input_error(1, "repeats must not be negative, got %s" % reps)
        _refuse_huge(ctx, 1, [d * r for d, r in zip(x.shape, reps)], x.dtype)
        return np.tile(x, reps)
    return run


@onnx_op("Expand", (8, None))
def expand(ctx):
    def run(x, shape):
        dims = _ints(shape)
        try:
            target = np.broadcast_shapes(x.shape, tuple(dims))
        except ValueError:
            raise ctx.input_error(1, "shape %s does not broadcast with input %s" % (dims, list(x.shape))) from None
        _refuse_huge(ctx, 1, target, x.dtype)
        return np.broadcast_to(x, target).copy()
    return run


@onnx_op("Where", (9, None), checks=(Broadcast(),))
def where(ctx):
    return lambda cond, a, b: np.where(cond, a, b)


_RANGE_LIMIT = 1 << 31      # values a Range may produce (an int32 index space)


@onnx_op("Range", (11, None), checks=(Scalar((0, 1, 2)),))
def range_op(ctx):
    def run(start, limit, delta):
        a, b, d = start.item(), limit.item(), delta.item()
        if not all(math.isfinite(v) for v in (a, b, d)):
            raise ctx.error("start %r, limit %r and delta %r must be finite" % (a, b, d))
        if d == 0:
            raise ctx.input_error(2, "delta must not be 0")
        n = max(math.ceil((b - a) / d), 0)
        if n > _RANGE_LIMIT:
            raise ctx.error("start %r, limit %r, delta %r would give %d values (more than %d)"
                            % (a, b, d, n, _RANGE_LIMIT))
        return np.arange(a, b, d).astype(start.dtype)[:n]
    return run


@onnx_op("NonZero", (9, None))
def nonzero(ctx):
    # a 0-d input counts as rank 1 (onnx's reference and onnxruntime agree)
    return lambda x: np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64).reshape(max(x.ndim, 1), -1)


@onnx_op("TopK", (1, None), args=(Arg("axis", "int", -1, check=Axis(0)),), checks=(Scalar(1),))
def topk(ctx):
    axis = ctx.int("axis", -1)
    largest, ordered = bool(ctx.int("largest", 1)), bool(ctx.int("sorted", 1))
    attr_k = ctx.int("k", None) if ctx.op_version < 10 else None

    def run(x, k=None):
        a = axis_of(ctx, axis, x.ndim)
        kk = attr_k if k is None else int(k.reshape(-1)[0])
        if kk is None or not 0 <= kk <= x.shape[a]:
            raise ctx.input_error(min(1, ctx.n_inputs - 1), "k = %s must be between 0 and %d (the size of axis %d "
                                  "of input shape %s)" % (kk, x.shape[a], a, list(x.shape)))
        if largest:   # negating unsigned values would wrap around
            key = (np.iinfo(x.dtype).max - x) if x.dtype.kind == "u" else -x
        else:
            key = x
        idx = np.argsort(key, axis=a, kind="stable")
        idx = np.take(idx, np.arange(kk), axis=a)
        values = np.take_along_axis(x, idx, axis=a)
        return (values, idx.astype(np.int64)) if ctx.n_outputs > 1 else values
    return run


@onnx_op("CumSum", (11, None), checks=(Scalar(1),))
def cumsum(ctx):
    exclusive, reverse = bool(ctx.int("exclusive", 0)), bool(ctx.int("reverse", 0))

    def run(x, axis):
        a = axis_of(ctx, int(axis.reshape(-1)[0]), x.ndim)
        y = np.flip(x, a) if reverse else x
        out = np.cumsum(y, axis=a, dtype=x.dtype)
        if exclusive and out.shape[a]:
            out = np.concatenate([np.zeros_like(np.take(out, [0], axis=a)),
                                  np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
        return np.ascontiguousarray(np.flip(out, a) if reverse else out)
    return run


_BLOCK = (Arg("blocksize", "int", None, check=Range(1), required=True), Arg("mode", "string", "DCR", check=OneOf("DCR", "CRD")))


@onnx_op("DepthToSpace", (1, None), args=_BLOCK, checks=(Rank(0, 4, 4),))
def depth_to_space(ctx):
    b = ctx.int("blocksize")
    crd = ctx.string("mode", "DCR") == "CRD"

    def run(x):
        n, c, h, w = x.shape
        if c % (b * b):
            raise ctx.input_error(0, "%d channels do not divide into blocks of %d x %d" % (c, b, b))
        out = (n, c // (b * b), h * b, w * b)
        if x.size == 0:      # no values to move; NumPy refuses the 6-D view's dims (fuzz onnx:9:10454)
            if output_size_problem([d for d in out if d], x.itemsize):
                raise ctx.input_error(0, "blocksize %d makes the output %s, whose dims no array can have, even "
                                         "an empty one" % (b, list(out)))
            return np.empty(out, x.dtype)
        if crd:
            y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return y.reshape(n, c // (b * b), h * b, w * b).copy()
    return run


@onnx_op("SpaceToDepth", (1, None), args=_BLOCK[:1], checks=(Rank(0, 4, 4),))
def space_to_depth(ctx):
    b = ctx.int("blocksize")
    crd = ctx.string("mode", "DCR") == "CRD"

    def run(x):
        n, c, h, w = x.shape
        if h % b or w % b:
            raise ctx.input_error(0, "height %d and width %d must be multiples of blocksize %d" % (h, w, b))
        y = x.reshape(n, c, h // b, b, w // b, b)
        y = y.transpose(0, 1, 3, 5, 2, 4) if crd else y.transpose(0, 3, 5, 1, 2, 4)
        return y.reshape(n, c * b * b, h // b, w // b).copy()
    return run


@onnx_op("OneHot", (9, None), checks=(Scalar(1), Rank(2, 1, 1)))
def one_hot(ctx):
    axis = ctx.int("axis", -1)

    def run(indices, depth, values):
        value = float(depth.reshape(-1)[0])
        if not (np.isfinite(value) and 1 <= value <= 1 << 31):
            raise ctx.input_error(1, "depth must be a count from 1 to 2^31, got %r" % value)
        d = int(value)
        if values.size != 2:
            raise ctx.input_error(2, "values must hold [off_value, on_value], got %d values" % values.size)
        if not -(indices.ndim + 1) <= axis <= indices.ndim:
            raise ctx.error("axis %d is out of range for a rank-%d output" % (axis, indices.ndim + 1))
        idx = np.where(indices < 0, indices + d, indices).astype(np.int64)
        hot = (idx[..., None] == np.arange(d)).astype(bool)
        out = np.where(hot, values[1], values[0]).astype(values.dtype)
        a = axis if axis >= 0 else out.ndim + axis
        return np.moveaxis(out, -1, a).copy()
    return run
