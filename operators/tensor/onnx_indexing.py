"""ONNX indexing ops: ScatterND, ScatterElements (and the old Scatter),
GatherND, Trilu, EyeLike, Compress, ReverseSequence, Unique, CumProd, Einsum,
Det."""
import numpy as np

from caffe2py.kernels.cpu.tensor import onnx_tensor as tk

from caffe2py.registry import Arg
from caffe2py.schema_rules import InputRule, Range, Rank, Scalar

from ..onnx_base import axis_of, onnx_op


def _check_indices(ctx, idx, dims, which=1):
    dims = np.asarray(dims)
    if idx.size and ((idx < -dims).any() or (idx >= dims).any()):
        raise ctx.input_error(which, "index out of range for dims %s" % dims.tolist())
    return np.where(idx < 0, idx + dims, idx)


def _shape_error(ctx, which, what, want, got):
    return ctx.input_error(which, "%s must have shape %s, got %s" % (what, list(want), list(got)))


@onnx_op("ScatterND", (11, None), checks=(Rank(1, 1),))
def scatter_nd(ctx):
    reduction = ctx.string("reduction", "none")

    def run(data, indices, updates):
        k = indices.shape[-1]
        if k > data.ndim:
            raise ctx.input_error(1, "the last dim of indices (%d) exceeds the rank of data (%d)" % (k, data.ndim))
        want = indices.shape[:-1] + data.shape[k:]
        if updates.shape != want:
            raise _shape_error(ctx, 2, "updates", want, updates.shape)
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
        if indices.ndim != data.ndim:
            raise ctx.input_error(1, "indices must have the rank of data (%d), got shape %s"
                                  % (data.ndim, list(indices.shape)))
        if updates.shape != indices.shape:
            raise _shape_error(ctx, 2, "updates", indices.shape, updates.shape)
        idx = _check_indices(ctx, indices, data.shape[a])
        try:
            return tk.scatter_elements(data, idx, updates, a, reduction)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


onnx_op("ScatterElements", (11, None), checks=(Rank(0, 1),))(_scatter_elements)
onnx_op("Scatter", (9, 10), checks=(Rank(0, 1),))(_scatter_elements)


# batch_dims < 0 is checked here, before onnx's shape inference (a rule), which crashes
# the process on it (segfault in onnx 1.x's GatherND inference, found by the fuzzer)
@onnx_op("GatherND", (11, None), checks=(Rank(1, 1),), args=(Arg("batch_dims", "int", 0, check=Range(0)),))
def gather_nd(ctx):
    batch_dims = ctx.int("batch_dims", 0)

    def run(data, indices):
        k = indices.shape[-1]
        if not 0 <= batch_dims < min(data.ndim, indices.ndim) or batch_dims + k > data.ndim:
            raise ctx.input_error(1, "batch_dims %d and index length %d do not fit data of shape %s and "
                                     "indices of shape %s" % (batch_dims, k, list(data.shape), list(indices.shape)))
        if data.shape[:batch_dims] != indices.shape[:batch_dims]:
            raise ctx.input_error(1, "the first %d (batch) dims of data %s and indices %s differ"
                                  % (batch_dims, list(data.shape), list(indices.shape)))
        idx = _check_indices(ctx, indices, data.shape[batch_dims:batch_dims + k])
        return tk.gather_nd(data, idx, batch_dims)
    return run


@onnx_op("Trilu", (14, None), checks=(Rank(0, 2), Scalar(1)))
def trilu(ctx):
    upper = bool(ctx.int("upper", 1))

    def run(x, k=None):
        kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        return np.triu(x, kk) if upper else np.tril(x, kk)
    return run


@onnx_op("EyeLike", (9, None), checks=(Rank(0, 2, 2),))
def eye_like(ctx):
    from caffe2py.kernels.cpu.math import onnx_math as om
    k = ctx.int("k", 0)
    dtype = om.onnx_dtype(ctx.int("dtype")) if ctx.has("dtype") else None
    return lambda x: np.eye(x.shape[0], x.shape[1], k, dtype=dtype or x.dtype)


@onnx_op("Compress", (9, None), checks=(Rank(1, 1, 1),))
def compress(ctx):
    axis = ctx.int("axis", None)

    def run(x, condition):
        cond = condition.astype(bool)
        a = None if axis is None else axis_of(ctx, axis, x.ndim)
        size = x.size if a is None else x.shape[a]
        if cond.size > size:
            raise ctx.input_error(1, "condition has %d values for %d elements along the %s"
                                  % (cond.size, size, "flattened input" if a is None else "axis %d" % a))
        if a is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=a)
    return run


@onnx_op("ReverseSequence", (10, None), checks=(Rank(0, 2), Rank(1, 1, 1)))
def reverse_sequence(ctx):
    batch_axis, time_axis = ctx.int("batch_axis", 1), ctx.int("time_axis", 0)
    if {batch_axis, time_axis} != {0, 1}:
        raise ctx.error("batch_axis %d and time_axis %d must be 0 and 1 in some order" % (batch_axis, time_axis))

    def run(x, lengths):
        if lengths.size != x.shape[batch_axis]:
            raise ctx.input_error(1, "sequence_lens has %d values for a batch of %d"
                                  % (lengths.size, x.shape[batch_axis]))
        if lengths.size and (lengths.min() < 0 or lengths.max() > x.shape[time_axis]):
            raise ctx.input_error(1, "sequence lengths must lie in [0, %d], got %s"
                                  % (x.shape[time_axis], lengths.tolist()))
        out = x.copy()
        for b, n in enumerate(lengths.tolist()):
            src = [slice(None)] * x.ndim
            src[batch_axis], src[time_axis] = b, slice(0, n)
            out[tuple(src)] = np.flip(x[tuple(src)], axis=time_axis - (1 if batch_axis < time_axis else 0))
        return out
    return run


def _unique_slices(x, axis):
    """np.unique(..., axis=axis) for object (string) tensors: slices compared as tuples,
    in lexicographic order of their flattened values, as NumPy orders numeric slices."""
    keys = [tuple(np.asarray(s, dtype=object).ravel().tolist()) for s in np.moveaxis(x, axis, 0)]
    ordered = sorted(set(keys))
    rank = {k: i for i, k in enumerate(ordered)}
    inverse = np.array([rank[k] for k in keys], np.int64)
    first = np.full(len(ordered), -1, np.int64)
    for i, r in enumerate(inverse.tolist()):
        if first[r] < 0:
            first[r] = i
    counts = np.bincount(inverse, minlength=len(ordered))
    return np.take(x, first, axis=axis), first, inverse, counts


@onnx_op("Unique", (11, None))
def unique(ctx):
    axis = ctx.int("axis", None)
    ordered = bool(ctx.int("sorted", 1))

    def run(x):
        a = None if axis is None else axis_of(ctx, axis, x.ndim)
        if a is not None and x.dtype == object:       # strings: NumPy's axis mode takes numbers only
            values, first, inverse, counts = _unique_slices(x, a)
        else:
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


@onnx_op("CumProd", (26, None), checks=(Scalar(1),))
def cumprod(ctx):
    exclusive, reverse = bool(ctx.int("exclusive", 0)), bool(ctx.int("reverse", 0))

    def run(x, axis):
        a = axis_of(ctx, int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        y = np.flip(x, a) if reverse else x
        out = np.cumprod(y, axis=a, dtype=x.dtype)
        if exclusive and out.shape[a]:
            ones = np.ones_like(np.take(out, [0], axis=a))
            out = np.concatenate([ones, np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
        return np.ascontiguousarray(np.flip(out, a) if reverse else out)
    return run


class EinsumEquation(InputRule):
    """The equation is well formed for the inputs: one term per input, each with one
    label per dim ('...' standing for the rest), output labels taken from the inputs,
    a label's dims equal (or 1) wherever it appears. Checked before onnx's shape
    inference, which loops forever on some malformed equations."""

    def runtime(self, ctx):
        equation = (ctx.string("equation") or "").replace(" ", "")

        def check(xs):
            problem = _einsum_problem(equation, [x.shape for x in xs])
            if problem:
                raise ctx.error("equation '%s' does not fit inputs of shapes %s: %s"
                                % (equation, [list(x.shape) for x in xs], problem))
        return check


def _einsum_problem(equation, shapes):
    import re
    if equation.count("->") > 1 or not re.fullmatch(r"[A-Za-z.,]*(->[A-Za-z.]*)?", equation):
        return "only letters, '...', ',' and one '->' may appear"
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return "%d terms for %d inputs" % (len(terms), len(shapes))
    sizes = {}
    for term, shape in zip(terms, shapes):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            return "term '%s' has a malformed '...'" % term
        labels = term.replace("...", "")
        if (len(labels) != len(shape)) if "..." not in term else (len(labels) > len(shape)):
            return "term '%s' has %d labels for a rank-%d input" % (term, len(labels), len(shape))
        head, _, tail = term.partition("...")
        dims = list(shape[:len(head)]) + (list(shape[len(shape) - len(tail):]) if tail else [])
        for label, dim in zip(head + tail, dims):
            if dim != 1 and sizes.setdefault(label, dim) != dim:
                return "label '%s' has sizes %d and %d" % (label, sizes[label], dim)
    if rhs:
        if "." in rhs.replace("...", "") or rhs.count("...") > 1:
            return "the output '%s' has a malformed '...'" % rhs
        out = rhs.replace("...", "")
        if len(set(out)) != len(out) or any(c not in lhs for c in out):
            return "the output '%s' repeats a label or uses one no input has" % rhs
    return None


@onnx_op("Einsum", (12, None), checks=(EinsumEquation(),),
         args=(Arg("equation", "string", None, required=True),))
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


@onnx_op("Det", (11, None), checks=(Rank(0, 2),))
def det(ctx):
    def run(x):
        if x.shape[-1] != x.shape[-2]:
            raise ctx.input_error(0, "the last two dims must be square, got shape %s" % list(x.shape))
        # LAPACK has no half precision: float16 goes through float32
        work = x.astype(np.float32) if x.dtype == np.float16 else x
        return np.asarray(np.linalg.det(work)).astype(x.dtype, copy=False)
    return run
