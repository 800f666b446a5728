"""BatchBucketize and BisectPercentile: per-column lookups of values in sorted
boundary lists, vectorised with np.searchsorted. Callers validate shapes first."""
import numpy as np


def batch_bucketize(feature, indices, boundaries, lengths):
    """out[:, i] = how many of column indices[i]'s boundaries are < the value."""
    out = np.empty((feature.shape[0], len(indices)), np.int32)
    offset = 0
    for i, (col, length) in enumerate(zip(indices, lengths)):
        out[:, i] = np.searchsorted(boundaries[offset:offset + length], feature[:, col], side="left")
        offset += length
    return out


def bisect_percentile(x, raw, mapping, lower, upper, lengths):
    """Each column j's values mapped through its piecewise-linear percentile curve:
    0 below its first raw value, 1 above its last, mapping[k] on raw[k], and between
    raw[k] and raw[k + 1] the line from upper[k] to lower[k + 1]."""
    out = np.empty(x.shape, np.float64)
    offset = 0
    for j, length in enumerate(lengths):
        r, m, lo, up = (a[offset:offset + length].astype(np.float64) for a in (raw, mapping, lower, upper))
        offset += length
        v = x[:, j].astype(np.float64)
        k = np.clip(np.searchsorted(r, v, side="left"), 1, length - 1 if length > 1 else 1)
        exact_k = np.minimum(np.searchsorted(r, v, side="left"), length - 1)
        exact = r[exact_k] == v
        left = np.clip(k - 1, 0, length - 1)
        right = np.minimum(left + 1, length - 1)
        span = r[right] - r[left]
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(span != 0, (lo[right] - up[left]) / np.where(span != 0, span, 1), 0.0)
        col = np.where(exact, m[exact_k], up[left] + slope * (v - r[left]))
        col = np.where(v < r[0], 0.0, np.where(v > r[-1], 1.0, col))
        out[:, j] = col
    return out.astype(x.dtype)
