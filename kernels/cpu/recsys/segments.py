"""Segment reductions: Caffe2's SortedSegment*, UnsortedSegment*, SparseSortedSegment*,
SparseUnsortedSegment*, SortedSegmentRange*, Lengths{Max,WeightedSum} and
ReduceFrontWeightedSum.

A reduction combines rows of DATA (viewed as (rows, D)) into K output rows. Which
entries go to which output row comes in one of three forms:
    lengths         consecutive runs (Lengths*)
    sorted ids      consecutive runs given by non-decreasing ids without gaps
    unsorted ids    any order
Sparse variants first map each entry to a DATA row through INDICES; weighted ones
multiply each entry by SCALARS[entry].

Lengths and sorted ids become CSR offsets (segment k holds entries offsets[k] ..
offsets[k+1]) and `_reduce_runs` works segment by segment on the team (each block of
segments writes only its own output rows). Unsorted ids are scattered in entry order:
rows of 32+ values with the columns split over the team (`_scatter_wide`, no two
threads write the same value), shorter rows with the entries split over the team into
per-thread partial outputs added up in thread order (`_scatter_narrow`). Segments
and wide scatters add rows in entry order, as Caffe2's reducers do, so float32
results round the way Caffe2's do; narrow scatters on several threads differ in the
last bits (partial sums).

Every index, id and length is checked here, before the compiled loops run (they have
no bounds checks); errors are LookupInputError(role, message) with Caffe2's texts.
"""
import math

import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from .sparse_lengths import LookupInputError, check_lengths_sum

# reduction modes of the compiled kernels
SUM, MEAN, MAX, RANGE_MAX, RANGE_MEAN, LOG_SUM_EXP, LOG_MEAN_EXP = range(7)
_NONE_INT = np.empty(0, np.int64)

# rows at least this long are scattered with the columns split over the team (every
# thread walks all entries); shorter rows split the entries and sum per-thread partials
_WIDE_ROW = 32

REDUCERS = {"Sum": SUM, "Mean": MEAN, "Max": MAX, "WeightedSum": SUM}
RANGE_REDUCERS = {"Sum": SUM, "Mean": RANGE_MEAN, "Max": RANGE_MAX,
                  "LogSumExp": LOG_SUM_EXP, "LogMeanExp": LOG_MEAN_EXP}


# --------------------------------------------------------------------------- compiled

@compiled
def _reduce_segments(data, offsets, src, weights, mode, lowest, out, first, last):
    """out[k] for segments first .. last-1: the reduction of the entries offsets[k] ..
    offsets[k+1]. Entry e reads DATA row src[e] (e when src is empty) times
    weights[e] (1 when weights is empty). `lowest` is the dtype's lowest finite value
    (Caffe2's start for range max and log-sum-exp). The caller checked that offsets
    are non-decreasing within [0, entries] and every src value is a row. Arithmetic
    stays in DATA's dtype, as Caffe2's does."""
    d = data.shape[1]
    use_src = src.size > 0
    use_w = weights.size > 0
    tmp = np.empty(d, out.dtype)
    num = np.empty(3, out.dtype)          # [1, n, 1/n] in the data's dtype
    num[0] = 1
    for k in range(first, last):
        acc = out[k]
        a, b = offsets[k], offsets[k + 1]
        num[1] = b - a
        num[2] = 1.0 / max(b - a, 1)
        n, inv = num[1], num[2]
        if mode == RANGE_MAX or mode == LOG_SUM_EXP or mode == LOG_MEAN_EXP:
            for i in range(d):
                acc[i] = lowest
        else:
            for i in range(d):
                acc[i] = 0
        for e in range(a, b):
            row = data[src[e]] if use_src else data[e]
            if mode == MAX:
                if e == a:
                    for i in range(d):
                        acc[i] = row[i]
                else:
                    for i in range(d):
                        if row[i] > acc[i]:
                            acc[i] = row[i]
            elif mode == RANGE_MAX or mode == LOG_SUM_EXP or mode == LOG_MEAN_EXP:
                for i in range(d):
                    if acc[i] < row[i]:
                        acc[i] = row[i]
            elif mode == RANGE_MEAN:
                for i in range(d):
                    acc[i] += row[i] / n
            else:
                w = weights[e] if use_w else num[0]
                for i in range(d):
                    acc[i] += w * row[i]
        if mode == MEAN and b > a:
            for i in range(d):
                acc[i] *= inv
        elif (mode == LOG_SUM_EXP or mode == LOG_MEAN_EXP) and b > a:
            for i in range(d):
                tmp[i] = 0
            for e in range(a, b):
                row = data[e]
                for i in range(d):
                    tmp[i] += np.exp(row[i] - acc[i])
            if mode == LOG_MEAN_EXP:
                for i in range(d):
                    tmp[i] /= n
            for i in range(d):
                acc[i] = np.log(tmp[i]) + acc[i]


@_reduce_segments.numpy_twin
def _reduce_segments_numpy(data, offsets, src, weights, mode, lowest, out, first, last):
    if last <= first:
        return
    off = offsets[first:last + 1]
    a, b = int(off[0]), int(off[-1])
    dtype = out.dtype.type
    rows = data[src[a:b]] if src.size else data[a:b]
    if mode in (SUM, MEAN) and weights.size:
        rows = rows * weights[a:b, None]
    counts = np.diff(off)
    res = np.full((last - first, data.shape[1]),
                  lowest if mode in (RANGE_MAX, LOG_SUM_EXP, LOG_MEAN_EXP) else 0, out.dtype)
    nz = counts > 0
    starts = (off[:-1] - a)[nz]
    if starts.size:
        per_row = np.repeat(counts[nz], counts[nz]).astype(out.dtype)[:, None]
        if mode in (SUM, MEAN):
            r = np.add.reduceat(rows, starts, axis=0)
            if mode == MEAN:
                r *= (dtype(1) / counts[nz].astype(out.dtype))[:, None]
        elif mode == RANGE_MEAN:
            r = np.add.reduceat(rows / per_row, starts, axis=0)
        else:
            r = np.maximum.reduceat(rows, starts, axis=0)
            if mode != MAX:
                r = np.maximum(r, lowest)
            if mode in (LOG_SUM_EXP, LOG_MEAN_EXP):
                t = np.add.reduceat(np.exp(rows - np.repeat(r, counts[nz], axis=0)), starts, axis=0)
                if mode == LOG_MEAN_EXP:
                    t /= counts[nz].astype(out.dtype)[:, None]
                r = np.log(t) + r
        res[nz] = r
    out[first:last] = res


# the CompiledKernel, for Python callers: compiling a parallel caller rebinds _reduce_segments to numba's
# dispatcher (no twin, no background compile behind that name)
REDUCE_SEGMENTS = _reduce_segments


@compiled(parallel=True)
def _reduce_runs(data, offsets, src, weights, mode, lowest, out, bounds):
    """_reduce_segments over the segment blocks bounds[t] .. bounds[t+1] on the team."""
    for t in prange(bounds.size - 1):
        _reduce_segments(data, offsets, src, weights, mode, lowest, out, bounds[t], bounds[t + 1])


@_reduce_runs.numpy_twin
def _reduce_runs_numpy(data, offsets, src, weights, mode, lowest, out, bounds):
    _reduce_segments_numpy(data, offsets, src, weights, mode, lowest, out, int(bounds[0]), int(bounds[-1]))


@compiled
def _scatter_columns(data, src, seg, weights, out, lo, hi):
    """out[seg[e], lo:hi] += weights[e] * DATA[src[e], lo:hi] for every entry e in
    order (src empty: row e; weights empty: 1)."""
    use_src = src.size > 0
    use_w = weights.size > 0
    one = np.ones(1, out.dtype)
    for e in range(seg.size):
        row = data[src[e] if use_src else e, lo:hi]
        dst = out[seg[e], lo:hi]
        w = weights[e] if use_w else one[0]
        for i in range(hi - lo):
            dst[i] += w * row[i]


@_scatter_columns.numpy_twin
def _scatter_columns_numpy(data, src, seg, weights, out, lo, hi):
    rows = (data[src] if src.size else data)[:, lo:hi]
    if weights.size:
        rows = rows * weights[:, None]
    np.add.at(out[:, lo:hi], seg, rows)          # a view: adds into out


# the CompiledKernel, for Python callers: compiling a parallel caller rebinds _scatter_columns to numba's
# dispatcher (no twin, no background compile behind that name)
SCATTER_COLUMNS = _scatter_columns


@compiled(parallel=True)
def _scatter_wide(data, src, seg, weights, out, blocks):
    """_scatter_columns with the columns split into `blocks` blocks on the team (no two
    threads touch the same value). The caller zeroed out and checked every seg value
    (< out rows) and src value."""
    d = data.shape[1]
    for t in prange(blocks):
        _scatter_columns(data, src, seg, weights, out, d * t // blocks, d * (t + 1) // blocks)


@_scatter_wide.numpy_twin
def _scatter_wide_numpy(data, src, seg, weights, out, blocks):
    _scatter_columns_numpy(data, src, seg, weights, out, 0, data.shape[1])


@compiled
def _scatter_entries(data, src, seg, weights, acc, lo, hi):
    """acc[seg[e]] += weights[e] * DATA[src[e]] for entries lo .. hi-1, in order."""
    d = data.shape[1]
    if d == 1 and src.size == 0 and weights.size == 0:
        # one value per row (the common 1-D case): flat views, four entries at a time
        # with their ids and values loaded before the four adds (the compiler cannot
        # know the adds do not write the ids, so one at a time every load waited for
        # the previous store: 15.7 -> 5.7 ms for 2M values, torch's scatter_reduce 12)
        x = data.reshape(data.shape[0])
        a = acc.reshape(acc.shape[0])
        e = lo
        while e + 4 <= hi:
            s0, s1, s2, s3 = seg[e], seg[e + 1], seg[e + 2], seg[e + 3]
            v0, v1, v2, v3 = x[e], x[e + 1], x[e + 2], x[e + 3]
            a[s0] += v0
            a[s1] += v1
            a[s2] += v2
            a[s3] += v3
            e += 4
        while e < hi:
            a[seg[e]] += x[e]
            e += 1
    elif src.size > 0:
        if weights.size > 0:
            for e in range(lo, hi):
                r, s, w = src[e], seg[e], weights[e]
                for i in range(d):
                    acc[s, i] += w * data[r, i]
        else:
            for e in range(lo, hi):
                r, s = src[e], seg[e]
                for i in range(d):
                    acc[s, i] += data[r, i]
    elif weights.size > 0:
        for e in range(lo, hi):
            s, w = seg[e], weights[e]
            for i in range(d):
                acc[s, i] += w * data[e, i]
    else:
        for e in range(lo, hi):
            s = seg[e]
            for i in range(d):
                acc[s, i] += data[e, i]


@_scatter_entries.numpy_twin
def _scatter_entries_numpy(data, src, seg, weights, acc, lo, hi):
    rows = data[src[lo:hi]] if src.size else data[lo:hi]
    if weights.size:
        rows = rows * weights[lo:hi, None]
    np.add.at(acc, seg[lo:hi], rows)


# the CompiledKernel, for Python callers: compiling a parallel caller rebinds _scatter_entries to numba's
# dispatcher (no twin, no background compile behind that name)
SCATTER_ENTRIES = _scatter_entries


@compiled(parallel=True)
def _scatter_narrow(data, src, seg, weights, partial):
    """The same sum for short rows: the entries split into partial.shape[0] blocks on
    the team, block t adding into its own zeroed partial[t] (K, D), entries in order."""
    blocks = partial.shape[0]
    n = seg.size
    for t in prange(blocks):
        _scatter_entries(data, src, seg, weights, partial[t], n * t // blocks, n * (t + 1) // blocks)


@_scatter_narrow.numpy_twin
def _scatter_narrow_numpy(data, src, seg, weights, partial):
    blocks, n = partial.shape[0], seg.size
    for t in range(blocks):
        _scatter_entries_numpy(data, src, seg, weights, partial[t], n * t // blocks, n * (t + 1) // blocks)


# --------------------------------------------------------------------------- checks

def as_rows(data):
    """DATA as a C-contiguous (rows, D) view (a copy only when DATA is strided)."""
    n = data.shape[0]
    d = math.prod(data.shape[1:])
    return np.ascontiguousarray(data).reshape(n, d)


def int_vector(a):
    return np.asarray(a).reshape(-1).astype(np.int64, copy=False)


def offsets_from_lengths(lengths, entries, role="lengths"):
    """CSR offsets of LENGTHS, which must be non-negative and sum to `entries`."""
    lengths = int_vector(lengths)
    if lengths.size and lengths.min() < 0:
        k = int(np.flatnonzero(lengths < 0)[0])
        raise LookupInputError(role, "LENGTHS must be non-negative, lengths[%d] = %d" % (k, lengths[k]))
    check_lengths_sum(lengths, role)
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total > entries:
        k = int(np.searchsorted(offsets, entries, side="right")) - 1
        raise LookupInputError(role, "When calculating the %dth output with length=%d, the index is out of "
                                     "bounds: %d vs. valid range 0 to %d" % (k, lengths[k], entries, entries))
    if total != entries:
        raise LookupInputError(role, "%d != %d" % (total, entries))
    return offsets


def offsets_from_sorted_ids(ids):
    """CSR offsets of sorted segment ids that start at 0 and have no gaps."""
    ids = int_vector(ids)
    if ids.size == 0:
        return np.zeros(1, np.int64)
    steps = np.diff(ids)
    if ids[0] != 0 or (steps.size and (steps.min() < 0 or steps.max() > 1)):
        raise LookupInputError("segment_ids", "Indices must be sorted and not have gaps")
    starts = np.flatnonzero(steps) + 1
    return np.concatenate(([0], starts, [ids.size])).astype(np.int64)


@compiled
def _min_max(a):
    """(min, max) of a non-empty int64 vector in one pass (NumPy's min and max are two)."""
    lo = hi = a[0]
    for i in range(a.size):          # min/max, not branches: the loop vectorises
        lo = min(lo, a[i])
        hi = max(hi, a[i])
    return lo, hi


@_min_max.numpy_twin
def _min_max_numpy(a):
    return a.min(), a.max()


def id_range(ids):
    """(min, max) of an int vector as Python ints; (0, -1) when it is empty."""
    if ids.size == 0:
        return 0, -1
    lo, hi = _min_max(int_vector(ids))
    return int(lo), int(hi)


def check_segment_ids(ids, k, bounds=None):
    """Every id in [0, k); bounds: id_range(ids) when the caller has it."""
    lo, hi = id_range(ids) if bounds is None else bounds
    if ids.size and (lo < 0 or hi >= k):
        bad = int(ids[(ids < 0) | (ids >= k)][0])
        raise LookupInputError("segment_ids", "Segment id out of range: %d, range 0 to %d" % (bad, k))


def check_rows(indices, n_rows):
    """Every index a row of DATA (Caffe2's segment-op message)."""
    lo, hi = id_range(indices)
    if indices.size and (lo < 0 or hi >= n_rows):
        bad = int(indices[(indices < 0) | (indices >= n_rows)][0])
        raise LookupInputError("indices", "Index out of bounds: %d, range 0 to %d" % (bad, n_rows))


def _blocks_by_entries(offsets, d):
    """Segment boundaries of team blocks with about equal entries each."""
    k = offsets.size - 1
    blocks = team_blocks(k, max(1, (int(offsets[-1]) * d) // max(k, 1)))
    if blocks <= 1:
        return np.array([0, k], np.int64)
    targets = (np.arange(blocks + 1, dtype=np.int64) * int(offsets[-1])) // blocks
    bounds = np.searchsorted(offsets[:-1], targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, k
    return np.maximum.accumulate(bounds)


# --------------------------------------------------------------------------- reductions

def reduce_runs(data, offsets, mode, indices=None, weights=None):
    """Reduce DATA rows (or DATA[indices] rows) over CSR offsets; shape
    [K] + DATA.shape[1:]. Indices and weights must already be checked."""
    rows = as_rows(data)
    k = offsets.size - 1
    out = np.empty((k, rows.shape[1]), rows.dtype)
    src = _NONE_INT if indices is None else int_vector(indices)
    w = np.empty(0, rows.dtype) if weights is None else np.ascontiguousarray(weights, rows.dtype).reshape(-1)
    if k:
        lowest = np.finfo(rows.dtype).min
        bounds = _blocks_by_entries(offsets, rows.shape[1])
        if bounds.size == 2:           # one block: no parallel region (its start and join cost more)
            REDUCE_SEGMENTS(rows, offsets, src, w, mode, lowest, out, 0, k)
        else:
            _reduce_runs(rows, offsets, src, w, mode, lowest, out, bounds)
    return out.reshape((k,) + data.shape[1:])


def scatter_reduce(data, segment_ids, k, mean=False, indices=None, weights=None):
    """Unsorted segment sum / mean / weighted sum into k rows; ids must be checked."""
    rows = as_rows(data)
    d = rows.shape[1]
    seg = int_vector(segment_ids)
    out = np.zeros((k, d), rows.dtype)
    src = _NONE_INT if indices is None else int_vector(indices)
    w = np.empty(0, rows.dtype) if weights is None else np.ascontiguousarray(weights, rows.dtype).reshape(-1)
    if not seg.size or not d:
        pass
    elif d >= _WIDE_ROW and team_blocks(d, seg.size) > 1:
        _scatter_wide(rows, src, seg, w, out, team_blocks(d, seg.size))
    else:
        blocks = team_blocks(seg.size, d) if d < _WIDE_ROW else 1
        if blocks > 1 and k * blocks > seg.size:       # per-thread partials would cost more than they save
            blocks = 1
        if blocks == 1:
            SCATTER_ENTRIES(rows, src, seg, w, out, 0, seg.size)
        else:
            partial = np.zeros((blocks, k, d), rows.dtype)
            _scatter_narrow(rows, src, seg, w, partial)
            np.sum(partial, axis=0, out=out)
    if mean:
        counts = np.bincount(seg, minlength=k)[:k]
        nonempty = counts > 0
        out[nonempty] *= (1.0 / counts[nonempty]).astype(rows.dtype)[:, None]
    return out.reshape((k,) + data.shape[1:])


def reduce_front_weighted_sum(data, scalars, num_reduce_dim=1):
    """sum over the first num_reduce_dim dims of DATA of scalars * slice."""
    lead = math.prod(data.shape[:num_reduce_dim])
    rows = as_rows(data.reshape((lead,) + data.shape[num_reduce_dim:]))
    offsets = np.array([0, lead], np.int64)
    out = reduce_runs(rows, offsets, SUM, weights=np.asarray(scalars).reshape(-1))
    return out.reshape(data.shape[num_reduce_dim:])


def lengths_top_k(values, offsets, k):
    """Per segment the k largest values (ties: lower position first), padded with 0
    and index -1: (values (S, k), positions in the segment (S, k) int32)."""
    s = offsets.size - 1
    counts = np.diff(offsets)
    seg = np.repeat(np.arange(s, dtype=np.int64), counts)
    pos = np.arange(values.size, dtype=np.int64) - offsets[seg]
    order = np.lexsort((pos, -values, seg))          # by segment, value descending, position
    rank = np.arange(values.size, dtype=np.int64) - offsets[seg[order]]
    keep = order[rank < k]
    out_v = np.zeros((s, k), values.dtype)
    out_i = np.full((s, k), -1, np.int32)
    out_v[seg[keep], rank[rank < k]] = values[keep]
    out_i[seg[keep], rank[rank < k]] = pos[keep]
    return out_v, out_i
