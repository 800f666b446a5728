"""Feature transforms of Caffe2's ranking nets: Box-Cox, one-hot encodings and
bucketing, percentiles, piecewise-linear calibration, n-grams of categorical columns,
id-list merging and key splitting.

Whole-array NumPy: a few passes each over [N, D] feature matrices where D (features)
is small. Errors are LookupInputError(role, message).
"""
import numpy as np

from .sparse_lengths import LookupInputError

_BOX_COX_EPS = 1e-6


def as_matrix(a):
    """a viewed as (a.shape[0], everything else); works for 0 rows too."""
    return a.reshape(a.shape[0], int(np.prod(a.shape[1:], dtype=np.int64)))


def box_cox(data, lambda1, lambda2):
    """Per column j: ln(max(x + l2, eps)) if l1 == 0, else (max(x + l2, eps)^l1 - 1) / l1."""
    x = as_matrix(data)
    l1 = np.asarray(lambda1, data.dtype).reshape(-1)
    l2 = np.asarray(lambda2, data.dtype).reshape(-1)
    eps = data.dtype.type(_BOX_COX_EPS)
    tmp = np.maximum(x + l2, eps)
    zero = l1 == 0
    safe = np.where(zero, data.dtype.type(1), l1)
    with np.errstate(over="ignore", invalid="ignore"):
        powered = (np.power(tmp, safe) - data.dtype.type(1)) / safe
    out = np.where(zero, np.log(tmp), powered)
    return out.astype(data.dtype, copy=False).reshape(data.shape)


def _check_lengths(lens, width, role="lengths", positive=False):
    lens = np.asarray(lens).reshape(-1).astype(np.int64, copy=False)
    if lens.size != width:
        raise LookupInputError(role, "lengths has %d entries, data has %d columns" % (lens.size, width))
    low = 1 if positive else 0
    if lens.size and lens.min() < low:
        k = int(np.flatnonzero(lens < low)[0])
        raise LookupInputError(role, "lengths[%d] = %d must be %s" % (k, lens[k], "> 0" if positive else ">= 0"))
    return lens


def batch_one_hot(data, lens, vals):
    """Column j of DATA [N, D] against its lens[j] values: 1 where equal (DATA's dtype)."""
    x = as_matrix(data)
    lens = _check_lengths(lens, x.shape[1])
    vals = np.asarray(vals).reshape(-1)
    if vals.size != int(lens.sum()):
        raise LookupInputError("values", "values has %d entries, sum(lengths) is %d" % (vals.size, int(lens.sum())))
    feature = np.repeat(np.arange(x.shape[1]), lens)
    return (x[:, feature] == vals[None, :]).astype(data.dtype)


def batch_bucket_one_hot(data, lens, boundaries):
    """Column j bucketised by its lens[j] sorted boundaries (right-inclusive buckets
    (-inf, b1], (b1, b2], ..., (bk, inf); a value equal to a repeated boundary goes to
    the middle bucket of the run, as Caffe2 does), one-hot over lens[j] + 1 columns
    (float32)."""
    n = data.shape[0]
    x = as_matrix(data)
    lens = _check_lengths(lens, x.shape[1], positive=True)
    b = np.asarray(boundaries).reshape(-1)
    if b.size != int(lens.sum()):
        raise LookupInputError("boundaries", "The sum of length should be equal to the length of boundaries")
    out = np.zeros((n, int(lens.sum()) + lens.size), np.float32)
    start, col = 0, 0
    rows = np.arange(n)
    for j, k in enumerate(lens):
        # (lower_bound + upper_bound) // 2: a value on a single boundary goes to the bucket
        # that boundary closes, a value on a repeated boundary to the middle of its run
        edges = b[start:start + k]
        bucket = (np.searchsorted(edges, x[:, j], side="left") + np.searchsorted(edges, x[:, j], side="right")) // 2
        out[rows, col + bucket] = 1.0
        start += k
        col += k + 1
    return out


def one_hot(indices, size):
    """[len(indices), size] float32 with a 1 at each index."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    _check_index_range(idx, size)
    out = np.zeros((idx.size, size), np.float32)
    out[np.arange(idx.size), idx] = 1.0
    return out


def segment_one_hot(lengths, indices, size):
    """[len(lengths), size] float32: row i has a 1 at each index of segment i."""
    lens = np.asarray(lengths).reshape(-1).astype(np.int64, copy=False)
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    if lens.size and lens.min() < 0:
        raise LookupInputError("lengths", "lengths must be non-negative")
    if int(lens.sum()) != idx.size:
        raise LookupInputError("lengths", "lengths sum to %d, there are %d indices" % (int(lens.sum()), idx.size))
    _check_index_range(idx, size)
    out = np.zeros((lens.size, size), np.float32)
    out[np.repeat(np.arange(lens.size), lens), idx] = 1.0
    return out


def _check_index_range(idx, size):
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = int(idx[(idx < 0) | (idx >= size)][0])
        raise LookupInputError("indices", "index %d is out of range [0, %d)" % (bad, size))


def percentile(values, value_pct, lengths):
    """Caffe2 Percentile: per column j, the percentile of each value from that column's
    sorted (value, percentile) samples: exact match -> its percentile, between samples
    -> linear interpolation, above all -> 1, below all -> 0."""
    n, f = values.shape
    lens = _check_lengths(lengths, f)
    if int(lens.sum()) != value_pct.shape[0]:
        raise LookupInputError("lengths", "Sum of lengths should be equal to the total number of samples")
    samples = value_pct[:, 0].astype(np.float32)
    pcts = value_pct[:, 1].astype(np.float32)
    out = np.empty((n, f), np.float32)
    start = 0
    for j, k in enumerate(lens):
        sv, sp = samples[start:start + k], pcts[start:start + k]
        x = values[:, j]
        lb = np.searchsorted(sv, x, side="left")
        res = np.empty(n, np.float32)
        above = lb == k
        res[above] = 1.0
        inside = ~above
        lbi = lb[inside]
        exact = sv[lbi] == x[inside]
        below = lbi == 0
        r = np.empty(lbi.size, np.float32)
        r[exact] = sp[lbi[exact]]
        r[~exact & below] = 0.0
        mid = ~exact & ~below
        lo = lbi[mid] - 1
        span = sv[lo + 1] - sv[lo]
        frac = (x[inside][mid] - sv[lo]) / span
        r[mid] = sp[lo] + frac * (sp[lo + 1] - sp[lo])
        res[inside] = r
        out[:, j] = res
        start += k
    return out


def piecewise_linear(x, bounds, slopes, intercepts, pieces):
    """y = slope * x + intercept of the piece (bounds[i], bounds[i+1]] holding x, x
    clamped to [bounds[0], bounds[-1]]; one group of `pieces` pieces per column of x."""
    cols = as_matrix(x)
    out = np.empty_like(cols)
    for j in range(cols.shape[1]):
        b = bounds[j * (pieces + 1):(j + 1) * (pieces + 1)]
        s = slopes[j * pieces:(j + 1) * pieces]
        c = intercepts[j * pieces:(j + 1) * pieces]
        v = cols[:, j]
        piece = np.clip(np.searchsorted(b, v, side="left") - 1, 0, pieces - 1)
        y = s[piece] * v + c[piece]
        y = np.where(v <= b[0], s[0] * b[0] + c[0], y)
        y = np.where(v >= b[pieces], s[pieces - 1] * b[pieces] + c[pieces - 1], y)
        out[:, j] = y
    return out.reshape(x.shape)


def ngram_from_categorical(floats, col_ids, limits, vals):
    """Caffe2 NGramFromCategorical: sum over the chosen columns k of m_k * prod(limits
    before k), m_k the position of round(x) in that column's `vals` block (0 when absent)."""
    n = floats.shape[0]
    x = as_matrix(floats)
    out = np.zeros(n, np.int64)
    base, start = 1, 0
    for col, limit in zip(col_ids, limits):
        block = np.asarray(vals[start:start + limit], np.int64)
        c = x[:, col].astype(np.float64)                 # exact: no rounding in the + 0.5
        # NaN and values past int32 can match no `vals` entry (int32 arguments): park them
        # out of int32's range so the cast below stays defined (no garbage, no warning)
        c = np.clip(np.nan_to_num(c, nan=2.0 ** 40), -2.0 ** 40, 2.0 ** 40)
        v = np.trunc(c + np.copysign(0.5, c)).astype(np.int64)     # C's round: halves away from 0
        # the last occurrence of a value in the block wins, as std::map's assignment does
        order = np.argsort(block, kind="stable")
        sorted_block = block[order]
        pos = np.searchsorted(sorted_block, v, side="right") - 1
        found = (pos >= 0) & (sorted_block[np.maximum(pos, 0)] == v)
        m = np.where(found, order[np.maximum(pos, 0)], 0)
        out += m * base
        base *= limit
        start += limit
    return out


def merge_id_lists(pairs):
    """Caffe2 MergeIdLists: per sample the sorted distinct ids of all (lengths, values)
    lists. Returns (lengths int32, values)."""
    batch = pairs[0][0].size
    samples, ids = [], []
    for lengths, values in pairs:
        lens = np.asarray(lengths).reshape(-1).astype(np.int64, copy=False)
        if lens.size and lens.min() < 0:
            raise LookupInputError("lengths", "lengths must be non-negative")
        if int(lens.sum()) != values.size:
            raise LookupInputError("lengths", "lengths sum to %d, the values list has %d ids"
                                   % (int(lens.sum()), values.size))
        samples.append(np.repeat(np.arange(batch, dtype=np.int64), lens))
        ids.append(values.reshape(-1))
    s = np.concatenate(samples)
    v = np.concatenate(ids).astype(pairs[0][1].dtype, copy=False)
    order = np.lexsort((v, s))
    s, v = s[order], v[order]
    keep = np.ones(s.size, bool)
    if s.size:
        keep[1:] = (s[1:] != s[:-1]) | (v[1:] != v[:-1])
    return np.bincount(s[keep], minlength=batch).astype(np.int32), v[keep]


def key_split(keys, limit):
    """Caffe2 KeySplit: for each key value k in [0, limit), the positions holding k (int32)."""
    k = np.asarray(keys).reshape(-1).astype(np.int64, copy=False)
    if k.size and (k.min() < 0 or k.max() >= limit):
        bad = int(k[(k < 0) | (k >= limit)][0])
        raise LookupInputError("keys", "key %d is out of range [0, %d) (categorical_limit)" % (bad, limit))
    order = np.argsort(k, kind="stable").astype(np.int32)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(k, minlength=limit))))
    return [order[bounds[j]:bounds[j + 1]] for j in range(limit)]
