"""Reductions over axes, over the leading or trailing dims of a tensor viewed as a
(rows, cols) matrix (with optional per-column / per-row lengths), their gradients,
and top-k / arg-extreme selection. NumPy: each is one or two whole-array passes;
top-k with a small k is a compiled loop (one pass per row keeping the best k in
order, rows over the team; NumPy's partition + selection took ~4x torch.topk's time
on [4096, 1000], k=10). Callers check shapes, axes and lengths first; these
functions assume they are valid."""
import numpy as np

from ..runtime.jit import compiled, prange, team, team_blocks

# top-k keeps its k best in an ordered buffer: O(n * k) per row at worst, so the
# compiled loop serves small k and a sort serves the rest
_COMPILED_TOP_K_MAX = 64

KINDS = ("sum", "mean", "max", "min", "l1", "l2")


def lowest(dtype):
    """The identity of max over an empty set."""
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


# column_sums adds this many float32 rows before widening to float64
_COLUMN_SUM_BLOCK = 64


def column_sums(x2):
    """Sums of the columns of a 2-D float32/float64 array, in x2's dtype: float32 rows
    are added in blocks of 64 in float32 (one fast pass) and the block sums in
    float64, so the error stays near float64 accumulation's (a bias gradient over
    1600 rows: a fifth of the time of summing it all in float64, measured)."""
    rows = x2.shape[0]
    if x2.dtype != np.float32 or rows <= _COLUMN_SUM_BLOCK:
        return x2.sum(axis=0, dtype=np.float64).astype(x2.dtype)
    whole = rows - rows % _COLUMN_SUM_BLOCK
    blocks = x2[:whole].reshape(-1, _COLUMN_SUM_BLOCK, x2.shape[1]).sum(axis=1)
    total = blocks.sum(axis=0, dtype=np.float64)
    if whole < rows:
        total += x2[whole:].sum(axis=0, dtype=np.float64)
    return total.astype(np.float32)


def reduce_axes(x, axes, keepdims, kind):
    """Reduce x over `axes` (a sorted tuple of non-negative ints); the result keeps
    x's dtype. Empty reductions give 0 (sum, l1, l2), NaN (mean of floats), or the
    dtype's lowest / highest value (max / min)."""
    if kind == "sum":
        y = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    elif kind == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.mean(x, axis=axes, keepdims=keepdims, dtype=np.float32 if x.dtype == np.float16 else None)
    elif kind in ("max", "min"):
        if x.size == 0:
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
            return np.full(shape, lowest(x.dtype) if kind == "max" else highest(x.dtype), x.dtype)
        y = (np.max if kind == "max" else np.min)(x, axis=axes, keepdims=keepdims)
    elif kind == "l1":
        y = np.sum(np.abs(x), axis=axes, keepdims=keepdims)
    else:
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        y = np.sqrt(np.sum(wide * wide, axis=axes, keepdims=keepdims))
    return np.asarray(y).astype(x.dtype, copy=False)


def reduce_axes_gradient(dy, x, y, axes, kind):
    """dX of reduce_axes: dy and y have x's rank with size 1 on `axes` (keepdims)
    or the reduced rank (they are reshaped here)."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    dy = dy.reshape(kept)
    if kind == "sum":
        return np.broadcast_to(dy, x.shape).astype(x.dtype, copy=True)
    if kind == "mean":
        count = 1
        for a in axes:
            count *= x.shape[a]
        return np.broadcast_to(dy / dy.dtype.type(max(count, 1)), x.shape).astype(x.dtype, copy=True)
    y = y.reshape(kept)
    if kind in ("max", "min"):
        return np.where(x == y, dy, x.dtype.type(0)).astype(x.dtype, copy=False)
    if kind == "l1":
        return (np.sign(x) * dy).astype(x.dtype, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(y == 0, x.dtype.type(0), x * (dy / y)).astype(x.dtype, copy=False)


def _truncated_mean(total, count):
    """C's integer division (toward zero) for integer sums, true division otherwise."""
    if total.dtype.kind in "iu":
        q = np.abs(total) // count
        return (np.sign(total) * q).astype(total.dtype)
    return (total / count).astype(total.dtype, copy=False)


def _mask(rows, cols, lengths, front):
    """Which cells of the (rows, cols) view count: row < lengths[col] (front) or
    col < lengths[row] (back)."""
    if front:
        return np.arange(rows)[:, None] < lengths.reshape(1, cols)
    return np.arange(cols)[None, :] < lengths.reshape(rows, 1)


def front_back(x2, front, kind, lengths=None):
    """Reduce the (rows, cols) matrix x2 over rows (front=True: one value per column)
    or over columns (one value per row); kind sum, mean or max. lengths (int, one per
    result) limits each reduction to its first lengths[i] entries; every length is
    in [0, rows] (front) or [0, cols] (back), and >= 1 for mean and max."""
    rows, cols = x2.shape
    axis = 0 if front else 1
    out_len = cols if front else rows
    if rows == 0 or cols == 0:
        return np.zeros(out_len, x2.dtype)
    if lengths is None:
        if kind == "sum":
            return np.sum(x2, axis=axis, dtype=x2.dtype)
        if kind == "max":
            return np.max(x2, axis=axis)
        return _truncated_mean(np.sum(x2, axis=axis, dtype=x2.dtype), x2.shape[axis])
    mask = _mask(rows, cols, lengths, front)
    if kind == "max":
        return np.max(np.where(mask, x2, lowest(x2.dtype)), axis=axis).astype(x2.dtype, copy=False)
    total = np.sum(np.where(mask, x2, x2.dtype.type(0)), axis=axis, dtype=x2.dtype)
    if kind == "sum":
        return total
    return _truncated_mean(total, lengths.reshape(-1).astype(np.int64))


def front_back_gradient(dy, rows, cols, front, kind, lengths=None, x2=None, y=None):
    """dX (rows, cols) of front_back: dy has one value per result; x2 and y (the
    forward input and output) are needed for max."""
    dy = dy.reshape(-1)
    spread = dy.reshape(1, cols) if front else dy.reshape(rows, 1)
    if kind == "max":
        ref = y.reshape(1, cols) if front else y.reshape(rows, 1)
        dx = np.where(x2 == ref, spread, dy.dtype.type(0))
    elif kind == "mean":
        if lengths is None:
            count = rows if front else cols
            dx = np.broadcast_to(spread / dy.dtype.type(max(count, 1)), (rows, cols))
        else:
            per = np.maximum(lengths.reshape(-1), 1).astype(dy.dtype)
            dx = np.broadcast_to(spread / (per.reshape(1, cols) if front else per.reshape(rows, 1)), (rows, cols))
    else:
        dx = np.broadcast_to(spread, (rows, cols))
    if lengths is not None:
        dx = np.where(_mask(rows, cols, lengths, front), dx, dy.dtype.type(0))
    return np.array(dx, dtype=dy.dtype, copy=True)


def arg_extreme(x, axis, keepdims, largest):
    """Index (int64) of the first largest / smallest value along `axis`; zeros when
    that axis is empty. NaN counts as the extreme (NumPy's rule)."""
    if x.shape[axis] == 0:
        shape = list(x.shape)
        if keepdims:
            shape[axis] = 1
        else:
            del shape[axis]
        return np.zeros(shape, np.int64)
    fn = np.argmax if largest else np.argmin
    return fn(x, axis=axis, keepdims=keepdims).astype(np.int64, copy=False)


def _descending(lines):
    """Per row of the 2-D `lines`: column order by value descending, equal values by
    ascending column (a stable ascending sort of the reversed row, read backwards).
    NaN ranks above every number."""
    n = lines.shape[1]
    return (n - 1) - np.argsort(lines[:, ::-1], axis=1, kind="stable")[:, ::-1]


def _top_columns_numpy(lines, k):
    """The k columns of each row of `lines` (2-D) that top_k selects, in top_k's order.
    For k well below the row length: one partition finds each row's k-th largest
    value t; the row keeps everything above t and its first equal-to-t columns, and
    only those k are sorted."""
    rows, n = lines.shape
    if k * 4 > n or rows == 0 or (lines.dtype.kind == "f" and np.isnan(lines).any()):
        return _descending(lines)[:, :k]
    t = np.partition(lines, n - k, axis=1)[:, n - k:n - k + 1]
    above = lines > t
    ties = lines == t
    need = k - above.sum(axis=1, keepdims=True)            # >= 1: t itself is among the top k
    keep = above | (ties & (np.cumsum(ties, axis=1) <= need))
    cols = np.nonzero(keep)[1].reshape(rows, k)             # row by row, ascending column
    chosen = np.take_along_axis(lines, cols, axis=1)
    return np.take_along_axis(cols, _descending(chosen), axis=1)


@compiled(parallel=True)
def _top_k_rows(lines, k, cols, blocks):
    """cols[i] = the k columns of row i with the largest values, best first: NaN
    before numbers, then larger values, equal ones by column. One pass per row; a
    value enters the ordered buffer only when it beats the current k-th, `worst`
    (kept in a register: most values are rejected by one comparison)."""
    rows, n = lines.shape
    for t in prange(blocks):
        for i in range(rows * t // blocks, rows * (t + 1) // blocks):
            row = lines[i]
            best = cols[i]
            count = 0
            worst = row[0]
            for j in range(n):
                v = row[j]
                v_nan = v != v
                if count == k:
                    # a later column must rank strictly higher than the current k-th
                    if not (v > worst or (v_nan and worst == worst)):
                        continue
                    pos = k - 1
                else:
                    pos = count
                    count += 1
                while pos > 0:
                    w = row[best[pos - 1]]
                    if (v_nan and w == w) or v > w:
                        best[pos] = best[pos - 1]
                        pos -= 1
                    else:
                        break
                best[pos] = j
                worst = row[best[count - 1]]


@_top_k_rows.numpy_twin
def _top_k_rows_numpy(lines, k, cols, blocks):
    cols[...] = _top_columns_numpy(lines, k)


def _top_columns(lines, k):
    if k > _COMPILED_TOP_K_MAX or lines.dtype.kind not in "fi" or lines.dtype == np.float16:
        return _top_columns_numpy(lines, k)
    cols = np.empty((lines.shape[0], k), np.int64)
    with team():
        _top_k_rows(lines, k, cols, team_blocks(lines.shape[0], lines.shape[1]))
    return cols


def top_k(x, k, axis):
    """(values, indices) of the k largest entries along `axis`, largest first, equal
    values in index order; with k past the axis length the rest is 0 / -1. NaN
    ranks above every number."""
    n = x.shape[axis]
    xt = np.moveaxis(x, axis, -1)
    lead = xt.shape[:-1]
    lines = np.ascontiguousarray(xt).reshape(int(np.prod(lead)), n)
    take = min(k, n)
    idx = _top_columns(lines, take)
    values = np.take_along_axis(lines, idx, axis=1)
    if take < k:
        values = np.pad(values, ((0, 0), (0, k - take)))
        idx = np.pad(idx, ((0, 0), (0, k - take)), constant_values=-1)
    values, idx = values.reshape(lead + (k,)), idx.astype(np.int64).reshape(lead + (k,))
    return (np.ascontiguousarray(np.moveaxis(values, -1, axis)),
            np.ascontiguousarray(np.moveaxis(idx, -1, axis)))


def flat_indices(indices, shape, axis):
    """Positions in x.reshape(-1) of the entries `indices` (top_k's, along axis)
    selects; -1 stays -1."""
    grids = list(np.indices(indices.shape, sparse=True))
    grids[axis] = indices
    strides = np.cumprod((list(shape[1:]) + [1])[::-1])[::-1]
    flat = sum(g * int(s) for g, s in zip(grids, strides))
    return np.where(indices < 0, -1, flat).astype(np.int64).reshape(-1)


def top_k_gradient(dvalues, indices, x_shape, axis):
    """dX: each dvalues entry added at its index along axis (entries with index -1,
    top_k's padding, are dropped)."""
    dx = np.zeros(x_shape, dvalues.dtype)
    valid = indices >= 0
    dxt = np.moveaxis(dx, axis, -1)
    dvt = np.moveaxis(np.where(valid, dvalues, 0), axis, -1)
    it = np.moveaxis(np.where(valid, indices, 0), axis, -1)
    lead = np.indices(it.shape, sparse=True)[:-1]
    np.add.at(dxt, tuple(lead) + (it,), dvt)
    return dx
