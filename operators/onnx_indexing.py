"""ONNX indexing ops: ScatterND, ScatterElements (and the old Scatter),
GatherND, Trilu, EyeLike, Compress, ReverseSequence, Unique, CumProd, Einsum,
Det."""
import numpy as np

from caffe2py.kernels.cpu.onnx import tensor as tk

from .onnx_base import axis_of, onnx_op


def _check_indices(ctx, idx, dims, which=1):
    dims = np.asarray(dims)
    if idx.size and ((idx < -dims).any() or (idx >= dims).any()):
        raise ctx.input_error(which, "index out of range for dims %s" % dims.tolist())
    return np.where(idx < 0, idx + dims, idx)


@onnx_op("ScatterND", (11, None))
def scatter_nd(ctx):
    reduction = ctx.string("reduction", "none")

    def run(data, indices, updates):
        k = indices.shape[-1]
        idx = _check_indices(ctx, indices, data.shape[:k])
        try:
            return tk.scatter_nd(data, idx, updates, reduction)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


def _scatter_elements(ctx):
    axis = ctx.int("axis", 0)
    reduction = ctx.string("reduction", "none")

    def run(data, indices, updates):
        a = axis_of(ctx, axis, data.ndim)
        idx = _check_indices(ctx, indices, data.shape[a])
        try:
            return tk.scatter_elements(data, idx, updates, a, reduction)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


onnx_op("ScatterElements", (11, None))(_scatter_elements)
onnx_op("Scatter", (9, 10))(_scatter_elements)


@onnx_op("GatherND", (11, None))
def gather_nd(ctx):
    batch_dims = ctx.int("batch_dims", 0)

    def run(data, indices):
        k = indices.shape[-1]
        idx = _check_indices(ctx, indices, data.shape[batch_dims:batch_dims + k])
        return tk.gather_nd(data, idx, batch_dims)
    return run


@onnx_op("Trilu", (14, None))
def trilu(ctx):
    upper = bool(ctx.int("upper", 1))

    def run(x, k=None):
        kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        return np.triu(x, kk) if upper else np.tril(x, kk)
    return run


@onnx_op("EyeLike", (9, None))
def eye_like(ctx):
    from caffe2py.kernels.cpu.onnx import math as om
    k = ctx.int("k", 0)
    dtype = om.onnx_dtype(ctx.int("dtype")) if ctx.has("dtype") else None
    return lambda x: np.eye(x.shape[0], x.shape[1], k, dtype=dtype or x.dtype)


@onnx_op("Compress", (9, None))
def compress(ctx):
    axis = ctx.int("axis", None)

    def run(x, condition):
        cond = condition.astype(bool)
        if axis is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=axis_of(ctx, axis, x.ndim))
    return run


@onnx_op("ReverseSequence", (10, None))
def reverse_sequence(ctx):
    batch_axis, time_axis = ctx.int("batch_axis", 1), ctx.int("time_axis", 0)

    def run(x, lengths):
        out = x.copy()
        for b, n in enumerate(lengths.tolist()):
            src = [slice(None)] * x.ndim
            src[batch_axis], src[time_axis] = b, slice(0, n)
            out[tuple(src)] = np.flip(x[tuple(src)], axis=time_axis - (1 if batch_axis < time_axis else 0))
        return out
    return run


@onnx_op("Unique", (11, None))
def unique(ctx):
    axis = ctx.int("axis", None)
    ordered = bool(ctx.int("sorted", 1))

    def run(x):
        a = None if axis is None else axis_of(ctx, axis, x.ndim)
        values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                                   return_counts=True, axis=a)
        inverse = inverse.reshape(-1)
        if not ordered:   # order of first occurrence
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            values = np.take(values, order, axis=0 if a is None else a)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        outs = (values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))
        return outs[:ctx.n_outputs] if ctx.n_outputs > 1 else outs[0]
    return run


@onnx_op("CumProd", (26, None))
def cumprod(ctx):
    exclusive, reverse = bool(ctx.int("exclusive", 0)), bool(ctx.int("reverse", 0))

    def run(x, axis):
        a = axis_of(ctx, int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        y = np.flip(x, a) if reverse else x
        out = np.cumprod(y, axis=a, dtype=x.dtype)
        if exclusive:
            ones = np.ones_like(np.take(out, [0], axis=a))
            out = np.concatenate([ones, np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
        return np.ascontiguousarray(np.flip(out, a) if reverse else out)
    return run


@onnx_op("Einsum", (12, None))
def einsum(ctx):
    equation = ctx.string("equation").replace(" ", "")

    def run(*xs):
        try:
            if xs[0].dtype.kind == "V" or xs[0].dtype.name.startswith(("bfloat", "float8")):
                # einsum has no loops for ml_dtypes' types: compute in float32
                dtype = xs[0].dtype
                return np.asarray(np.einsum(equation, *[x.astype(np.float32) for x in xs])).astype(dtype)
            return np.asarray(np.einsum(equation, *xs)).astype(xs[0].dtype, copy=False)
        except ValueError as exc:
            raise ctx.error("einsum '%s' on shapes %s: %s" % (equation, [list(x.shape) for x in xs], exc)) from None
    return run


@onnx_op("Det", (11, None))
def det(ctx):
    return lambda x: np.linalg.det(x).astype(x.dtype, copy=False)
