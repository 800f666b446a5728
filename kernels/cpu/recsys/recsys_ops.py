"""Array helpers recommendation nets use around embedding lookups: Gather,
BatchGather, LengthsRangeFill, LengthsSum/LengthsMean and BatchMatMul."""
import numpy as np

from .sparse_lengths import LookupInputError, check_lengths_sum, segment_reduce


def gather(data, indices, axis=0, wrap_indices=False):
    """DATA.shape[:axis] + INDICES.shape + DATA.shape[axis+1:]; indices checked first."""
    if not -data.ndim <= axis < data.ndim:
        raise LookupInputError("data", "axis %d is out of range for %d-D DATA" % (axis, data.ndim))
    axis %= data.ndim
    dim = data.shape[axis]
    idx = np.asarray(indices).astype(np.int64, copy=False)
    if wrap_indices:
        idx = np.where(idx < 0, idx + dim, idx)
    if idx.size:
        lo, hi = idx.min(), idx.max()
        if lo < 0 or hi >= dim:
            bad = idx.reshape(-1)[np.flatnonzero((idx.reshape(-1) < 0) | (idx.reshape(-1) >= dim))[0]]
            raise LookupInputError("indices", "INDICES element is out of DATA bounds, id=%d axis_dim=%d"
                                   % (bad, dim))
    return np.take(data, idx, axis=axis)


def lengths_range_fill(lengths):
    """[0..l0), [0..l1), ... concatenated, int32."""
    lengths = np.asarray(lengths).astype(np.int64, copy=False).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    check_lengths_sum(lengths)
    total = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.arange(total, dtype=np.int64) - starts).astype(np.int32)


def lengths_reduce(data, lengths, mean=False):
    """Sum (or mean) of consecutive DATA rows per segment: [len(LENGTHS)] + DATA.shape[1:]."""
    lengths = np.asarray(lengths).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    check_lengths_sum(lengths)
    if int(lengths.sum()) != data.shape[0]:
        raise LookupInputError("lengths", "LENGTHS must sum to the first dimension of DATA (%d), got %d"
                               % (data.shape[0], int(lengths.sum())))
    idx = np.arange(data.shape[0], dtype=np.int64)
    out = segment_reduce(data, idx, lengths, mean=mean)
    return out.reshape((lengths.size,) + data.shape[1:]).astype(
        np.float16 if data.dtype == np.float16 else np.float32, copy=False)


def batch_matmul(a, b, trans_a=False, trans_b=False, broadcast=False):
    """Caffe2 BatchMatMul: matmul over the last two dims (after optional transposes).
    Without broadcast both inputs must have the same rank (>= 2) and batch dims."""
    if not broadcast:
        if a.ndim < 2 or b.ndim < 2:
            raise LookupInputError("data", "A and B must have at least 2 dims without broadcast=1")
        if a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
            raise LookupInputError("data", "batch dims differ: A %s, B %s (set broadcast=1 to broadcast)"
                                   % (list(a.shape), list(b.shape)))
    if trans_a and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if trans_b and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    if ka != kb:
        raise LookupInputError("data", "inner dimensions differ: A %s vs B %s" % (ka, kb))
    try:
        return np.matmul(a, b)
    except ValueError:
        raise LookupInputError("data", "the batch dims of A %s and B %s do not broadcast"
                               % (list(a.shape[:-2]), list(b.shape[:-2]))) from None
