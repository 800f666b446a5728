"""Selecting, deduplicating and sampling: Unique, Find, FindDuplicateElements,
BooleanUnmask, FlexibleTopK, RemoveDataBlocks, RowWiseArgMax, WeightedSample,
WeightedMultiSampling and the unique uniform sampler of UniqueUniformFill.

Whole-array NumPy (sorts, searches and one gather each). Errors are
LookupInputError(role, message) with Caffe2's texts where Caffe2 has one.
"""
import numpy as np

from .cpp_shuffle import std_shuffle
from .sparse_lengths import LookupInputError


def unique(values):
    """(sorted distinct values, remapping int32 with unique[remapping] == values)."""
    u, inverse = np.unique(values, return_inverse=True)
    return u.astype(values.dtype, copy=False), inverse.reshape(-1).astype(np.int32)


def find(index, needles, missing_value):
    """For each needle the last position of it in INDEX, else missing_value (INDEX's dtype)."""
    flat = index.reshape(-1)
    order = np.argsort(flat, kind="stable")
    sorted_index = flat[order]
    q = needles.reshape(-1)
    pos = np.searchsorted(sorted_index, q, side="right") - 1
    safe = np.maximum(pos, 0)
    found = (pos >= 0) & (sorted_index[safe] == q) if flat.size else np.zeros(q.size, bool)
    out = np.full(q.size, missing_value, index.dtype)
    out[found] = order[safe[found]]
    return out.reshape(needles.shape)


def find_duplicates(values):
    """Positions (int64, ascending) of the elements equal to an earlier element."""
    if values.dtype.kind == "f":
        _, first = np.unique(values, return_index=True, equal_nan=False)
    else:
        _, first = np.unique(values, return_index=True)
    dup = np.ones(values.size, bool)
    dup[first] = False
    if values.dtype.kind == "f":
        dup[np.isnan(values)] = False          # NaN never equals an earlier NaN
    return np.flatnonzero(dup).astype(np.int64)


def boolean_unmask(masks, values):
    """Caffe2 BooleanUnmask: position p takes the next unused value of the first mask
    that is true at p."""
    stacked = np.stack([m.reshape(-1) for m in masks]) if masks else np.zeros((0, 0), bool)
    size = stacked.shape[1]
    any_true = stacked.any(axis=0)
    if not any_true.all():
        raise LookupInputError("mask0", "All masks have False at position %d." % int(np.flatnonzero(~any_true)[0]))
    chosen = np.argmax(stacked, axis=0)
    out = np.empty(size, values[0].dtype)
    for k, v in enumerate(values):
        where = np.flatnonzero(chosen == k)
        if where.size != v.size:
            raise LookupInputError("values%d" % k, "The number of true at mask %d does not match the "
                                   "corresponding value size." % k)
        out[where] = v.reshape(-1)
    return out


def flexible_top_k(x, k):
    """Top k[i] values of each row of x viewed as (rows, r), largest first, ties by
    lower column; returns the flat values and the flat column indices (int64)."""
    r = x.shape[-1]
    rows = x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), r)
    kk = np.asarray(k).reshape(-1).astype(np.int64)
    if kk.size != rows.shape[0]:
        raise LookupInputError("k", "first n-1 dims of input data and K does not match.")
    bad = np.flatnonzero((kk > r) | (kk <= 0))
    if bad.size:
        i = int(bad[0])
        if kk[i] > r:
            raise LookupInputError("k", "k should not be greater than last dim, error at index %d, with value: %d"
                                   % (i, kk[i]))
        raise LookupInputError("k", "k should be greater than 0, error at index %d,  with value: %d" % (i, kk[i]))
    order = np.argsort(-rows, axis=1, kind="stable")          # descending, lower column first on ties
    take = np.arange(r)[None, :] < kk[:, None]
    cols = order[take]
    row_of = np.repeat(np.arange(rows.shape[0]), kk)
    return rows[row_of, cols], cols.astype(np.int64)


def remove_data_blocks(data, indices):
    """DATA without the outer rows listed in INDICES (duplicates allowed)."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    if idx.size == 0:
        return data.copy()
    if idx.min() < 0:
        raise LookupInputError("indices", "The min index should be larger than zero.")
    if idx.max() >= data.shape[0]:
        raise LookupInputError("indices", "The max index should be smaller than the data outer size.")
    keep = np.ones(data.shape[0], bool)
    keep[idx] = False
    return data[keep]


def row_wise_arg_max(x):
    """Index of the first maximum of each row (N, 1) int32; Caffe2's loop compares
    with '>', so a NaN in column 0 keeps index 0 and later NaNs are skipped."""
    n, d = x.shape
    out = np.zeros((n, 1), np.int32)
    if n == 0 or d == 0:
        return out
    nan_free = np.where(np.isnan(x), -np.inf, x)
    best = np.argmax(nan_free, axis=1)
    # a row whose non-NaN maximum does not beat column 0 (e.g. all -inf) keeps 0
    first_nan = np.isnan(x[:, 0])
    beats = nan_free[np.arange(n), best] > x[:, 0]
    out[:, 0] = np.where(first_nan | ~beats, 0, best)
    return out


def weighted_sample(weights, values, rng):
    """Caffe2 WeightedSample: per row an index drawn with probability proportional to
    its weight, and (with VALUES) the value there."""
    cum = np.cumsum(weights, axis=1, dtype=np.float32)
    r = (rng.random(weights.shape[0], dtype=np.float32) * cum[:, -1]).astype(np.float32)
    cum[:, -1] += np.float32(0.01)           # Caffe2's margin against rounding at the top
    idx = (cum < r[:, None]).sum(axis=1).astype(np.int32)
    picked = None if values is None else values[np.arange(values.shape[0]), idx].astype(np.float32)
    return idx, picked


def weighted_multi_sampling(cdf, count, rng):
    """Caffe2 WeightedMultiSampling: `count` indices drawn from a cumulative
    distribution (sorted, its last value the total mass)."""
    r = rng.random(count, dtype=np.float32) * cdf[-1]
    return np.searchsorted(cdf, r, side="left").astype(np.int32)


def unique_uniform(count, low, high, avoid, rng, dtype):
    """`count` distinct integers from [low, high] that are not in `avoid`."""
    avoid = np.unique(np.asarray(avoid, np.int64).reshape(-1))
    avoid = avoid[(avoid >= low) & (avoid <= high)]
    span = high - low + 1
    if count + avoid.size > span:
        raise LookupInputError("avoid", "The range [%d, %d] has %d values; %d samples plus %d values to avoid "
                                        "do not fit" % (low, high, span, count, avoid.size))
    # draw ranks among the allowed values, then map them past the avoided ones
    ranks = np.sort(rng.choice(span - avoid.size, size=count, replace=False)).astype(np.int64)
    values = ranks + low
    offsets = avoid - low - np.arange(avoid.size)                  # allowed rank at which each avoid sits
    values += np.searchsorted(offsets, ranks, side="right")
    rng.shuffle(values)
    return values.astype(dtype)


def sort_and_shuffle(size, sort_values, batch_size, shuffle_size, rng=None):
    """Caffe2 SortAndShuffle: record order 0..size-1, sorted by sort_values (when given,
    stable), shuffled within consecutive chunks of batch_size * shuffle_size records
    (every chunk that ends before the last record), then the whole batches in a shuffled
    order, the last partial batch last. int64. Without `rng` each shuffle is Caffe2's own
    (libstdc++'s std::shuffle with a fresh default engine), so the order is Caffe2's."""
    def shuffle(view):
        if rng is None:
            std_shuffle(view)
        else:
            view[:] = rng.permutation(view)

    if batch_size * shuffle_size > size:
        shuffle_size = size // batch_size
    order = np.arange(size, dtype=np.int64)
    if sort_values is not None:
        order = np.argsort(sort_values, kind="stable").astype(np.int64)
    chunk = batch_size * shuffle_size
    if chunk > 1:
        offset = 0
        while offset + chunk < size:
            shuffle(order[offset:offset + chunk])
            offset += chunk
    n_batch = size // batch_size
    batches = np.arange(n_batch)
    shuffle(batches)
    head = order[:n_batch * batch_size].reshape(n_batch, batch_size)[batches].reshape(-1)
    return np.concatenate([head, order[n_batch * batch_size:]])
