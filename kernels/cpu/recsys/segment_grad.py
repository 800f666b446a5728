"""Gradients of the segment reductions and of the selection ops around them
(Caffe2's *Gradient operators): each spreads an output gradient back over the
entries that made the output, so every one is a gather of gradient rows by segment
id, scaled or masked per entry. Whole-array NumPy; ids are checked first and errors
are LookupInputError(role, message).
"""
import math

import numpy as np

from .segments import check_segment_ids, int_vector, offsets_from_lengths, offsets_from_sorted_ids
from .sparse_lengths import LookupInputError


def _rows(a):
    return a.reshape(a.shape[0], math.prod(a.shape[1:]))


def _ids_of_sorted(ids, k):
    offsets_from_sorted_ids(ids)                     # sorted, from 0, no gaps
    flat = int_vector(ids)
    if flat.size and flat[-1] != k - 1:
        raise LookupInputError("segment_ids", "Indices must be sorted and not have gaps")
    return flat


def segment_grad(grad, ids, reducer, scalars=None, sorted_ids=False):
    """{Sorted,Unsorted}Segment{Sum,Mean,WeightedSum}Gradient: entry i gets
    grad[ids[i]] (divided by its segment's size for Mean, times scalars[i] for
    WeightedSum); shape [len(ids)] + grad.shape[1:]."""
    k = grad.shape[0]
    if sorted_ids:
        seg = _ids_of_sorted(ids, k)
    else:
        seg = int_vector(ids)
        check_segment_ids(seg, k)
    out = _rows(grad)[seg]
    if reducer == "Mean":
        counts = np.bincount(seg, minlength=k)
        out *= (np.float32(1) / counts[seg].astype(np.float32))[:, None]
    elif reducer == "WeightedSum":
        out *= np.asarray(scalars, grad.dtype).reshape(-1, 1)
    return out.reshape((seg.size,) + grad.shape[1:])


def _run_grad(data, out, grad, seg, counts, reducer):
    """Gradient of one range/lengths reduction per entry (seg: entry -> segment)."""
    x, g = _rows(data), _rows(grad)[seg]
    if reducer == "Sum":
        return g
    if reducer == "Mean":
        return g * (np.float32(1) / counts[seg].astype(np.float32))[:, None]
    y = _rows(out)[seg]
    if reducer == "Max":                         # every entry equal to the max (Caffe2's loop)
        return np.where(x == y, g, np.zeros((), grad.dtype))
    e = g * np.exp(x - y)
    if reducer == "LogMeanExp":
        e /= counts[seg].astype(np.float32)[:, None]
    return e


def range_grad(data, out, grad, ids, reducer):
    """SortedSegmentRange{Sum,Mean,Max,LogSumExp,LogMeanExp}Gradient."""
    k = grad.shape[0]
    seg = _ids_of_sorted(ids, k)
    if data.shape[0] != seg.size:
        raise LookupInputError("data", "DATA has %d rows, SEGMENT_IDS %d" % (data.shape[0], seg.size))
    counts = np.bincount(seg, minlength=k)
    return _run_grad(data, out, grad, seg, counts, reducer).reshape(data.shape)


def lengths_max_grad(out, grad, lengths, data):
    """LengthsMaxWithMainInputAndForwardOutputGradient: grad where DATA equals its
    segment's max."""
    offsets = offsets_from_lengths(lengths, data.shape[0])
    counts = np.diff(offsets)
    seg = np.repeat(np.arange(counts.size), counts)
    return _run_grad(data, out, grad, seg, counts, "Max").reshape(data.shape)


def lengths_weighted_sum_grad(scalars, grad, lengths, data=None):
    """Lengths(WeightedSum)Gradient, and WithMainInput: also SCALARS' gradient
    <grad[segment], DATA[i]>."""
    w = np.asarray(scalars).reshape(-1)
    offsets = offsets_from_lengths(lengths, w.size)
    seg = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    g = _rows(grad)[seg]
    d = (g * w.astype(grad.dtype)[:, None]).reshape((w.size,) + grad.shape[1:])
    if data is None:
        return d
    if data.shape[0] != w.size:
        raise LookupInputError("data", "DATA has %d rows, SCALARS %d" % (data.shape[0], w.size))
    dw = np.einsum("ij,ij->i", g.astype(np.float64), _rows(data).astype(np.float64)).astype(w.dtype)
    return d, dw


def reduce_front_weighted_sum_grad(scalars, grad, shape):
    """ReduceFrontWeightedSumGradient: scalars[i...] * grad, shaped `shape`."""
    w = np.asarray(scalars, grad.dtype).reshape(tuple(np.shape(scalars)) + (1,) * grad.ndim)
    return np.broadcast_to(w * grad, tuple(shape)).astype(grad.dtype)


def lengths_top_k_grad(lengths, indices, grad):
    """LengthsTopKGradient: each top-k value's gradient back at its position."""
    lens = int_vector(lengths)
    n, k = indices.shape[0], indices.shape[1] if indices.ndim > 1 else 0
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if lens.size else np.zeros(0, np.int64)
    out = np.zeros(int(lens.sum()), grad.dtype)
    idx = np.asarray(indices).reshape(n, k).astype(np.int64)
    used = (np.arange(k)[None, :] < np.minimum(lens, k)[:, None]) & (idx >= 0)
    if (idx[used] >= np.repeat(lens, k).reshape(n, k)[used]).any():
        raise LookupInputError("indices", "a top-k index is past its segment's length")
    out[(starts[:, None] + idx)[used]] = np.asarray(grad).reshape(n, k)[used]
    return out


def sparse_to_dense_mask_grad(indices, grad, mask, lengths=None):
    """SparseToDenseMaskGradient: the value of the last occurrence of each masked id
    in a row gets that column's gradient; other values get 0."""
    idx = int_vector(indices)
    n_rows = 1 if lengths is None else np.asarray(lengths).size
    cols = len(mask)
    g = grad.reshape((n_rows, cols) + grad.shape[2 if lengths is not None else 1:])
    rows = np.zeros(idx.size, np.int64) if lengths is None else \
        np.repeat(np.arange(n_rows), offsets_from_lengths_diff(lengths, idx.size))
    out = np.zeros((idx.size,) + g.shape[2:], grad.dtype)
    mask_arr = np.asarray(mask, np.int64)
    order = np.argsort(mask_arr, kind="stable")
    pos = np.searchsorted(mask_arr[order], idx)
    pos_c = np.minimum(pos, cols - 1)
    hit = np.flatnonzero((pos < cols) & (mask_arr[order][pos_c] == idx))
    if hit.size:
        col = order[pos_c[hit]]
        keys = rows[hit] * cols + col
        rev = keys[::-1]
        _, first = np.unique(rev, return_index=True)
        last = hit.size - 1 - first
        out[hit[last]] = g[rows[hit[last]], col[last]]
    return out


def offsets_from_lengths_diff(lengths, entries):
    return np.diff(offsets_from_lengths(lengths, entries))


def flexible_top_k_grad(x_shape, k, grad, indices):
    """FlexibleTopKGradient: zeros of X's shape with each top value's gradient back at
    its last-dim index."""
    r = x_shape[-1]
    kk = int_vector(k)
    rows = int(np.prod(x_shape[:-1], dtype=np.int64))
    if kk.size != rows:
        raise LookupInputError("k", "K must hold one count per row of X %s (%d rows), got %d"
                               % (list(x_shape), rows, kk.size))
    out = np.zeros((kk.size, r), grad.dtype)
    idx = int_vector(indices)
    if idx.size != int(kk.sum()) or np.size(grad) != idx.size:
        raise LookupInputError("indices", "indices and values must hold sum(K) = %d entries" % int(kk.sum()))
    if idx.size and (idx.min() < 0 or idx.max() >= r):
        raise LookupInputError("indices", "an index is outside the last dimension %d" % r)
    out[np.repeat(np.arange(kk.size), kk), idx] = np.asarray(grad).reshape(-1)
    return out.reshape(x_shape)
