"""Moving runs of values: the gathers and (un)packing of Caffe2's sparse features.

GatherRanges, LengthsGather, PackSegments, UnpackSegments and AddPadding all copy
runs `src[start:start + n] -> dst[to:to + n]` of a flat array. `copy_runs` does that
in one compiled loop on the team (runs split into blocks of about equal size), on
the data viewed as unsigned words of its item size, so one machine-code version
serves every numeric dtype; object arrays (strings) take a NumPy index path.

Callers check every start, length and destination first (the loop has no bounds
checks); errors are LookupInputError(role, message).
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from .sparse_lengths import LookupInputError, check_lengths_sum

_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@compiled
def _copy_run_range(src, starts, lens, dst, to, first, last):
    """dst[to[r]:to[r] + lens[r]] = src[starts[r]:starts[r] + lens[r]] for runs
    first .. last-1."""
    for r in range(first, last):
        n = lens[r]
        a = src[starts[r]:starts[r] + n]
        b = dst[to[r]:to[r] + n]
        for i in range(n):
            b[i] = a[i]


@_copy_run_range.numpy_twin
def _copy_run_range_numpy(src, starts, lens, dst, to, first, last):
    lens = lens[first:last]
    run = np.repeat(np.arange(first, last), lens)
    inner = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    dst[to[run] + inner] = src[starts[run] + inner]


# the CompiledKernel, for Python callers: compiling a parallel caller rebinds _copy_run_range to numba's
# dispatcher (no twin, no background compile behind that name)
COPY_RUN_RANGE = _copy_run_range


@compiled(parallel=True)
def _copy_runs(src, starts, lens, dst, to, bounds):
    """_copy_run_range for the runs bounds[t] .. bounds[t+1] on team block t."""
    for t in prange(bounds.size - 1):
        _copy_run_range(src, starts, lens, dst, to, bounds[t], bounds[t + 1])


@_copy_runs.numpy_twin
def _copy_runs_numpy(src, starts, lens, dst, to, bounds):
    _copy_run_range_numpy(src, starts, lens, dst, to, int(bounds[0]), int(bounds[-1]))


def _words(a):
    """A flat unsigned-word view of a contiguous array (None when there is none)."""
    word = _WORDS.get(a.dtype.itemsize)
    if a.dtype == object or word is None:
        return None
    return a.reshape(-1).view(word)


def _run_bounds(lens):
    total = int(lens.sum())
    blocks = team_blocks(lens.size, max(1, total // max(lens.size, 1)))
    if blocks <= 1:
        return np.array([0, lens.size], np.int64)
    ends = np.cumsum(lens)
    targets = (np.arange(1, blocks, dtype=np.int64) * total) // blocks
    inner = np.searchsorted(ends, targets, side="left") + 1
    return np.concatenate(([0], np.minimum(inner, lens.size), [lens.size])).astype(np.int64)


def copy_runs(src, starts, lens, dst, to):
    """Copy runs between the flat contiguous arrays src and dst (same dtype); the
    runs must lie inside both (checked by the caller)."""
    starts = np.asarray(starts, np.int64).reshape(-1)
    lens = np.asarray(lens, np.int64).reshape(-1)
    to = np.asarray(to, np.int64).reshape(-1)
    if not lens.size or not lens.any():
        return dst
    s, d = _words(src), _words(dst)
    if s is None or d is None:
        total = int(lens.sum())
        run = np.repeat(np.arange(lens.size), lens)
        inner = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
        dst.reshape(-1)[to[run] + inner] = src.reshape(-1)[starts[run] + inner]
        return dst
    bounds = _run_bounds(lens)
    if bounds.size == 2:               # one block: no parallel region (its start and join cost more)
        COPY_RUN_RANGE(s, starts, lens, d, to, 0, lens.size)
    else:
        _copy_runs(s, starts, lens, d, to, bounds)
    return dst


def exclusive_cumsum(lens):
    out = np.zeros(lens.size, np.int64)
    if lens.size:
        np.cumsum(lens[:-1], out=out[1:])
    return out


# --------------------------------------------------------------------------- gathers

def check_ranges(ranges, size):
    """RANGES (..., 2) of (start, length): non-negative, inside DATA of `size`."""
    r = np.asarray(ranges).reshape(-1, 2).astype(np.int64, copy=False)
    starts, lens = r[:, 0], r[:, 1]
    bad = (starts < 0) | (lens < 0) | (starts + lens > size)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise LookupInputError("ranges", "range %d (start %d, length %d) is outside DATA of %d values"
                               % (k, starts[k], lens[k], size))
    return starts, lens


def gather_ranges(data, ranges):
    """Caffe2 GatherRanges: (concatenated ranges of 1-D DATA, per-example lengths int32)."""
    starts, lens = check_ranges(ranges, data.shape[0])
    out = np.empty(int(lens.sum()), data.dtype)
    copy_runs(np.ascontiguousarray(data), starts, lens, out, exclusive_cumsum(lens))
    per_example = lens.reshape(ranges.shape[0], -1).sum(axis=1).astype(np.int32) if ranges.shape[0] else \
        np.zeros(0, np.int32)
    return out, per_example


def gather_ranges_to_dense(data, ranges, lengths, key=None):
    """Caffe2 GatherRangesToDense: one (N, lengths[j]) output per feature j; a range of
    another length (or empty) leaves zeros. Returns (outputs, empty counts, mismatch
    counts) per feature. With KEY, each range's values are ordered by their keys."""
    n, m = ranges.shape[0], ranges.shape[1]
    starts, lens = check_ranges(ranges, data.shape[0])
    starts, lens = starts.reshape(n, m), lens.reshape(n, m)
    outs, empty, mismatched = [], [], []
    for j, width in enumerate(lengths):
        out = np.zeros((n, width), data.dtype)
        ok = lens[:, j] == width
        empty.append(int((lens[:, j] == 0).sum()))
        mismatched.append(int(((lens[:, j] != 0) & ~ok).sum()))
        rows = np.flatnonzero(ok)
        if rows.size:
            idx = starts[rows, j][:, None] + np.arange(width)
            if key is not None:
                order = np.argsort(key[idx], axis=1, kind="stable")
                idx = np.take_along_axis(idx, order, axis=1)
            out[rows] = data[idx]
        outs.append(out)
    return outs, empty, mismatched


def lengths_gather(items, lengths, indices):
    """Caffe2 LengthsGather: the ITEMS rows of the segments chosen by INDICES, concatenated."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    check_lengths_sum(lengths)
    if int(lengths.sum()) != items.shape[0]:
        raise LookupInputError("lengths", "LENGTHS must match the first dimension of ITEMS")
    idx = np.asarray(indices, np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= lengths.size):
        bad = int(idx[(idx < 0) | (idx >= lengths.size)][0])
        raise LookupInputError("indices", "index %d is out of range [0, %d) of LENGTHS" % (bad, lengths.size))
    block = int(np.prod(items.shape[1:], dtype=np.int64))
    sel = lengths[idx]
    out = np.empty((int(sel.sum()),) + items.shape[1:], items.dtype)
    copy_runs(np.ascontiguousarray(items), exclusive_cumsum(lengths)[idx] * block, sel * block,
              out, exclusive_cumsum(sel) * block)
    return out


# --------------------------------------------------------------------------- packing

def pack_segments(data, lengths, max_length=-1, pad_minf=False, presence_mask=False):
    """Caffe2 PackSegments: DATA (sum(lengths), ...) -> (B, T, ...), T = max(lengths)
    or max_length (longer segments are cut); padding 0, or -inf for float with pad_minf."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    check_lengths_sum(lengths)
    total = int(lengths.sum())
    if total != data.shape[0]:
        raise LookupInputError("lengths", " PackSegments requires that the sum of the lengths %d is equal to "
                                          "the first data dimension %d" % (total, data.shape[0]))
    t = int(lengths.max(initial=0)) if max_length < 0 else max_length
    b = lengths.size
    fill = -np.inf if pad_minf and data.dtype == np.float32 else (0 if data.dtype != object else "")
    out = np.full((b, t) + data.shape[1:], fill, data.dtype)
    kept = np.minimum(lengths, t)
    block = int(np.prod(data.shape[1:], dtype=np.int64))
    if data.shape[0]:
        copy_runs(np.ascontiguousarray(data), exclusive_cumsum(lengths) * block, kept * block,
                  out, np.arange(b, dtype=np.int64) * t * block)
    if not presence_mask:
        return out, None
    return out, np.arange(t)[None, :] < kept[:, None]


def unpack_segments(data, lengths, max_length=-1):
    """Caffe2 UnpackSegments: (B, T, ...) -> (sum(min(lengths, T)), ...)."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    if data.shape[0] != lengths.size:
        raise LookupInputError("data", "LENGTH should match DATA in dimension 0")
    t = data.shape[1]
    if max_length >= 0:
        if max_length != t:
            raise LookupInputError("data", "max_length should be equal to the second dimension of the "
                                           "packed segments")
        lengths = np.minimum(lengths, max_length)
    elif lengths.size and lengths.max() > t:
        raise LookupInputError("lengths", "a length (%d) is larger than the packed dimension %d"
                               % (int(lengths.max()), t))
    block = int(np.prod(data.shape[2:], dtype=np.int64))
    out = np.empty((int(lengths.sum()),) + data.shape[2:], data.dtype)
    copy_runs(np.ascontiguousarray(data), np.arange(lengths.size, dtype=np.int64) * t * block,
              lengths * block, out, exclusive_cumsum(lengths) * block)
    return out


def add_padding(data, lengths, start_pad, end_pad, start_width, end_width):
    """Caffe2 AddPadding: start_width copies of start_pad (zeros when None) before and
    end_width copies of end_pad after each range of DATA rows (lengths None: one range)."""
    n = data.shape[0]
    lengths = np.array([n], np.int64) if lengths is None else np.asarray(lengths, np.int64).reshape(-1)
    _check_lengths_cover(lengths, n)
    block_shape = data.shape[1:]
    block = int(np.prod(block_shape, dtype=np.int64))
    width = start_width + end_width
    out = np.zeros((n + width * lengths.size,) + block_shape, data.dtype)
    seg_start = exclusive_cumsum(lengths) + np.arange(lengths.size, dtype=np.int64) * width
    copy_runs(np.ascontiguousarray(data), exclusive_cumsum(lengths) * block, lengths * block,
              out, (seg_start + start_width) * block)
    if start_pad is not None and start_width:
        out[(seg_start[:, None] + np.arange(start_width)).reshape(-1)] = start_pad.reshape(block_shape)
    if end_pad is not None and end_width:
        ends = seg_start + start_width + lengths
        out[(ends[:, None] + np.arange(end_width)).reshape(-1)] = end_pad.reshape(block_shape)
    return out, (lengths + width).astype(np.int32)


def remove_padding(data, lengths, start_width, end_width):
    """Caffe2 RemovePadding: drops start_width rows before and end_width after each range."""
    n = data.shape[0]
    lengths = np.array([n], np.int64) if lengths is None else np.asarray(lengths, np.int64).reshape(-1)
    _check_lengths_cover(lengths, n)
    width = start_width + end_width
    if lengths.size and lengths.min() < width:
        k = int(np.flatnonzero(lengths < width)[0])
        raise LookupInputError("lengths", "range %d has length %d, shorter than its padding %d"
                               % (k, lengths[k], width))
    block = int(np.prod(data.shape[1:], dtype=np.int64))
    kept = lengths - width
    out = np.empty((int(kept.sum()),) + data.shape[1:], data.dtype)
    copy_runs(np.ascontiguousarray(data), (exclusive_cumsum(lengths) + start_width) * block, kept * block,
              out, exclusive_cumsum(kept) * block)
    return out, kept.astype(np.int32)


def gather_padding(data, lengths, start_width, end_width):
    """Caffe2 GatherPadding: sums of the start-padding rows and of the end-padding rows."""
    n = data.shape[0]
    lengths = np.array([n], np.int64) if lengths is None else np.asarray(lengths, np.int64).reshape(-1)
    _check_lengths_cover(lengths, n)
    width = start_width + end_width
    if lengths.size and lengths.min() < width:
        k = int(np.flatnonzero(lengths < width)[0])
        raise LookupInputError("lengths", "range %d has length %d, shorter than its padding %d"
                               % (k, lengths[k], width))
    begins = exclusive_cumsum(lengths)
    starts = (begins[:, None] + np.arange(start_width)).reshape(-1)
    ends = (begins[:, None] + lengths[:, None] - end_width + np.arange(end_width)).reshape(-1)
    return data[starts].sum(axis=0, dtype=data.dtype), data[ends].sum(axis=0, dtype=data.dtype)


def _check_lengths_cover(lengths, n):
    if lengths.size and lengths.min() < 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative")
    check_lengths_sum(lengths)
    if int(lengths.sum()) != n:
        raise LookupInputError("lengths", "LENGTHS sum to %d, but DATA has %d rows" % (int(lengths.sum()), n))
