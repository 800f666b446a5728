"""Per-channel sums and histograms: whole-array NumPy passes. Callers check shapes."""
import numpy as np


def _wide(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x


def channel_sums(x3):
    """(sum, sum of squares) per channel of x3 viewed as (N, C, S): one value per C."""
    xs = _wide(x3)
    return xs.sum(axis=(0, 2)).astype(x3.dtype), np.einsum("ncs,ncs->c", xs, xs).astype(x3.dtype)


def channel_backprop_stats(x3, mean, inv_std, dy3):
    """(scale gradient, bias gradient) per channel for (N, C, S) views of the input
    and the output gradient of a batch norm with the given per-channel statistics:
    sum(dy * (x - mean) * inv_std) and sum(dy)."""
    xs, dys = _wide(x3), _wide(dy3)
    dbias = dys.sum(axis=(0, 2))
    centered = xs - _wide(mean).reshape(1, -1, 1)
    dscale = np.einsum("ncs,ncs->c", dys, centered) * _wide(inv_std).reshape(-1)
    return dscale.astype(x3.dtype), dbias.astype(x3.dtype)


def histogram(x, lower, upper, num_buckets):
    """Counts (int64, num_buckets + 2): [0] values below lower, [1..num_buckets] the
    equal-width buckets of [lower, upper), [num_buckets + 1] values >= upper. NaN
    values are counted nowhere."""
    v = _wide(x).reshape(-1).astype(np.float64)
    v = v[~np.isnan(v)]
    segment = (upper - lower) / num_buckets
    inside = np.clip(v, lower, upper)           # infinities would not cast to int
    index = np.floor((inside - lower) / segment).astype(np.int64) + 1
    # rounding can put a value just below `upper` one past the last bucket
    index = np.clip(index, 1, num_buckets)
    index = np.where(v < lower, 0, np.where(v >= upper, num_buckets + 1, index))
    return np.bincount(index, minlength=num_buckets + 2).astype(np.int64)


def bin_counts(x, edges):
    """Counts of x's values in each bin [edges[i], edges[i + 1]), values outside
    [edges[0], edges[-1]) and NaN left out."""
    bins = np.searchsorted(edges, x.reshape(-1).astype(np.float64), side="right") - 1
    bins = bins[(bins >= 0) & (bins < edges.size - 1)]
    return np.bincount(bins, minlength=edges.size - 1).astype(np.int64)


def self_binning_edges(lo, hi, num_bins, logarithmic, log_start, dtype):
    """num_bins + 1 nondecreasing bin starts in dtype spanning the data [lo, hi]: linear
    from lo, or geometric from max(lo, log_start); the last is nudged just above hi so
    every value falls below it. All equal to the start when the span is empty."""
    start = max(lo, log_start) if logarithmic else lo
    if not hi > start:
        return np.full(num_bins + 1, start, dtype)
    if logarithmic:
        edges = np.geomspace(start, hi, num_bins + 1)
    else:
        edges = np.linspace(start, hi, num_bins + 1)
    edges = np.maximum.accumulate(edges.astype(dtype))      # rounding must not reorder them
    edges[-1] = np.nextafter(dtype.type(hi), dtype.type(np.inf))
    return edges


def counts_below_edges(values, edges):
    """Counts per bin i of values in [edges[i], edges[i + 1]); values below edges[0]
    counted in bin 0 (only the logarithmic spacing leaves any there); every value in
    bin 0 when the edges are all equal (the data had no span)."""
    if edges[0] == edges[-1]:
        counts = np.zeros(edges.size, np.int64)
        counts[0] = values.size
        return counts
    bins = np.searchsorted(edges.astype(np.float64), values.astype(np.float64), side="right") - 1
    return np.bincount(np.clip(bins, 0, edges.size - 1), minlength=edges.size).astype(np.int64)
