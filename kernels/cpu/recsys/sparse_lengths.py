"""Embedding-bag reductions (Caffe2's EmbeddingLookup / EmbeddingLookupIdx).

A table of rows is gathered by INDICES and reduced per segment (bag); segments are
given by LENGTHS or by OFFSETS. Tables can be float32, float16 (accumulated in
float32), or fused rowwise-quantised uint8 rows (8-bit with float32 scale/bias,
4/2-bit with float16 scale/bias, all stored at the end of each row).

Why it is shaped this way (see ../shared/reference/baselines.md §5):
- one bounds check up front, then `np.take(mode="clip", out=...)` into a reused
  per-thread scratch buffer (no per-call page faults, no "raise"-mode buffering);
- the segment sum is a batched matmul (bags, 1, L) @ (bags, L, D): BLAS reads each
  gathered row once; weights, means, positional weights and quantisation scales all
  fold into the (bags, 1, L) weight rows, zero-padded for shorter bags;
- when all bags have the same length (the common case) chunks are plain row slices of
  INDICES (and WEIGHTS): no index or weight matrices are built;
- float16 and 4/2-bit rows are widened with integer ops on contiguous arrays (NumPy's
  float16 cast is scalar, a lookup table costs a take per byte);
- bags are processed in a few large chunks split evenly across the kernel threads
  (NumPy releases the GIL, but every call hands it back and forth, which costs
  several microseconds when two threads contend, so calls per chunk are kept few).
"""
import math
import threading

import numpy as np

from ..runtime.threads import num_threads, run_split


class LookupInputError(ValueError):
    """Bad lookup input; `input` names which argument (data, weights, indices, lengths)."""

    def __init__(self, input, message):
        super().__init__(message)
        self.input = input


# --------------------------------------------------------------------------- layouts

class Layout:
    """How to turn gathered raw table rows into float32 values plus scale/bias."""
    name = "float"
    extra_bytes = 0
    values_per_byte = 1

    def block_size(self, data):
        return math.prod(data.shape[1:])


FLOAT = Layout()


class Fused8Bit(Layout):
    """uint8 values, then float32 scale, then float32 bias."""
    name = "fused8"
    extra_bytes = 8

    def block_size(self, data):
        return data.shape[1] - 8


class FusedNBit(Layout):
    """ceil(D/k) packed bytes (low bits first), then float16 scale, float16 bias."""
    extra_bytes = 4

    def __init__(self, bit_rate):
        self.bit_rate = bit_rate
        self.values_per_byte = 8 // bit_rate
        self.name = "fused%d" % bit_rate

    def block_size(self, data):
        return (data.shape[1] - 4) * self.values_per_byte


FUSED4 = FusedNBit(4)
FUSED2 = FusedNBit(2)
LAYOUTS = {"float": FLOAT, "fused8": Fused8Bit(), "fused4": FUSED4, "fused2": FUSED2}


# --------------------------------------------------------------------------- threads

_scratch = threading.local()
# Below this many gathered values one thread wins: waking a pool thread plus the GIL
# hand-offs cost ~0.1 ms on the 2-vCPU dev VM (tables 1M x 64, f32/fp16/8-bit/4-bit:
# one thread was faster at 655K values, two threads at 1.3M).
_PARALLEL_MIN_VALUES = 1 << 20
# Bytes of gathered float32 values per chunk. Each chunk costs ~5-15 NumPy calls and
# each call releases and re-takes the GIL (several microseconds when two threads
# contend), so chunks are large; 4 MB (and its raw bytes) still stays in L3. Measured on
# the 2-vCPU dev VM: 0.5-1 MB chunks were 10-60% slower with 2 threads, 8 MB no better.
_CHUNK_BYTES = 1 << 22


def _buffer(name, size, dtype):
    """A per-thread scratch array of at least `size` elements, reused across calls."""
    key = (name, np.dtype(dtype).str)
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = bufs[key] = np.empty(max(size, 1), dtype=dtype)
    return buf[:size]


# --------------------------------------------------------------------------- checks

SUM_MESSAGE = ("Your input seems to be incorrect: the sum of lengths values should be "
               "the size of the indices tensor, but it appears not.")


def check_indices(indices, n_rows):
    """Raise Caffe2's out-of-bounds error for the first bad index."""
    if indices.size == 0:
        return
    lo, hi = indices.min(), indices.max()
    if lo >= 0 and hi < n_rows:
        return
    bad = np.flatnonzero((indices < 0) | (indices >= n_rows))[0]
    raise LookupInputError("indices", "Index %d is out of bounds: %d, range 0 to %d"
                           % (bad, int(indices[bad]), n_rows))


def lengths_from_offsets(offsets, n_indices, include_last_offset=True):
    """Segment lengths from offsets (embedding_lookup_idx: output_size + 1 entries,
    relative to offsets[0]; torch style without the last entry: the last bag ends at
    the end of INDICES)."""
    offsets = np.asarray(offsets).astype(np.int64, copy=False)
    if not include_last_offset:
        offsets = np.append(offsets, np.int64(n_indices + (offsets[0] if offsets.size else 0)))
    if offsets.size == 0:
        raise LookupInputError("lengths", "OFFSETS must have at least one entry (output_size + 1)")
    lengths = np.diff(offsets)
    if lengths.size and lengths.min() < 0:
        bad = int(np.flatnonzero(lengths < 0)[0])
        raise LookupInputError("lengths", "OFFSETS must be non-decreasing: offsets[%d] = %d > offsets[%d] = %d"
                               % (bad, offsets[bad], bad + 1, offsets[bad + 1]))
    return lengths


def _check_lengths(lengths, n_indices):
    if lengths.size and lengths.min() < 0:
        bad = int(np.flatnonzero(lengths < 0)[0])
        raise LookupInputError("lengths", "LENGTHS must be non-negative, lengths[%d] = %d"
                               % (bad, int(lengths[bad])))
    if int(lengths.sum(dtype=np.int64)) != n_indices:
        raise LookupInputError("lengths", SUM_MESSAGE)


# --------------------------------------------------------------------------- compute

# float16 -> float32 without NumPy's half cast (scalar on x86 builds without F16C
# dispatch: ~1.3 ns a value): sign-extend the 16 bits to int32 and shift left by 13;
# the AND keeps the sign bit and clears the three copies of it that the sign extension
# shifted into the exponent. The result is the exact value times 2**-112 (half
# subnormals become float32 subnormals, also exact), and the 2**112 is folded into the
# matmul weights (a power of two: products and sums round exactly as with converted
# values). Only inf/nan (exponent all ones) would come out finite, so blocks holding
# them use NumPy's cast instead.
_HALF_MASK = np.int32(-0x70000001)       # 0x8FFFFFFF
_HALF_FACTOR = 2.0 ** 112
# |weight| below this keeps weight * 2**112 finite in float32
_HALF_WEIGHT_LIMIT = 2.0 ** 15


_SMALLEST_SUBNORMAL = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
_ONE = np.array([1.0], np.float32)


def subnormals_flushed():
    """True when this thread's FPU flushes float32 subnormals (FTZ/DAZ set, e.g. by
    torch.set_flush_denormal(True)): the bit trick's values for half subnormals are
    float32 subnormals, which would then read as zero."""
    return not np.multiply(_SMALLEST_SUBNORMAL, _ONE)[0]


def half_to_scaled_float(raw, out):
    """out (float32, raw's shape) = raw (float16) / factor; returns the factor:
    2**112 when raw holds no inf/nan and subnormals are not flushed (bit trick), else
    1 (exact NumPy cast)."""
    i16 = raw.view(np.int16)
    # inf/nan have bits 0x7c00..0x7fff (int16 max) or 0xfc00..0xffff (uint16 max)
    if i16.size and (i16.max() >= 0x7C00 or raw.view(np.uint16).max() >= 0xFC00 or subnormals_flushed()):
        np.copyto(out, raw.view(np.float16))
        return 1.0
    i32 = out.view(np.int32)
    np.copyto(i32, i16)
    np.left_shift(i32, 13, out=i32)
    np.bitwise_and(i32, _HALF_MASK, out=i32)
    return _HALF_FACTOR


def spread_packed(raw, bit_rate):
    """uint8 (n, W) packed bytes -> uint8 (n, W * 8/bit_rate) (a view into per-thread
    scratch): the values of each byte in order, low bits first. Integer ops on
    contiguous arrays, no lookup table."""
    n, width = raw.shape
    wide = np.uint16 if bit_rate == 4 else np.uint32
    x = _buffer("spread_x", n * width, wide).reshape(n, width)
    t = _buffer("spread_t", n * width, wide).reshape(n, width)
    np.copyto(x, raw)
    if bit_rate == 4:     # byte b -> 16-bit word (b & 15) | (b >> 4) << 8
        np.left_shift(x, 4, out=t)
        np.bitwise_or(x, t, out=x)
        np.bitwise_and(x, wide(0x0F0F), out=x)
    else:                 # byte b -> 32-bit word with its 2-bit field j in byte j
        np.left_shift(x, 6, out=t)
        np.bitwise_or(x, t, out=x)
        np.left_shift(x, 12, out=t)
        np.bitwise_or(x, t, out=x)
        np.bitwise_and(x, wide(0x03030303), out=x)
    if not np.little_endian:
        x.byteswap(inplace=True)
    return x.view(np.uint8).reshape(n, width * (8 // bit_rate))


def _column(raw, offset, dtype):
    """The `dtype` item at byte `offset` of every row of raw (n, W) uint8: a strided
    1-D view (one inner loop over n rows, unlike raw[:, a:b] slices)."""
    return np.ndarray((raw.shape[0],), dtype, buffer=raw, offset=offset, strides=(raw.shape[1],))


def _take_rows(data, idx, out):
    """out[...] = data[idx] along axis 0 (idx already bounds-checked). np.take copies
    a non-contiguous source whole before gathering, so strided tables (a transposed or
    sliced view) go through fancy indexing, which reads only the rows it needs."""
    if data.flags.c_contiguous:
        np.take(data, idx, axis=0, mode="clip", out=out)
    else:
        out[...] = data[idx]
    return out


def _gather_values(layout, data, idx, block):
    """Gathered rows as float32 (n, block) (a view into per-thread scratch), (scale,
    bias) float32 (n,) each or None, and the factor the values are divided by."""
    n = idx.size
    vals = _buffer("vals", n * block, np.float32).reshape(n, block)
    if layout is FLOAT:
        # Rows are taken from the table as it is: reshaping a non-contiguous N-d table
        # to (N, block) would copy all of it on every call.
        rows_shape = (n,) + data.shape[1:]
        if data.dtype == np.float32:
            _take_rows(data, idx, vals.reshape(rows_shape))
            return vals, None, 1.0
        raw = _buffer("raw16", n * block, data.dtype).reshape(n, block)
        _take_rows(data, idx, raw.reshape(rows_shape))
        return vals, None, half_to_scaled_float(raw, vals)
    width = data.shape[1]
    raw = _take_rows(data, idx, _buffer("raw8", n * width, np.uint8).reshape(n, width))
    if layout.name == "fused8":
        np.copyto(vals, raw[:, :block])
        return vals, (_column(raw, block, np.float32), _column(raw, block + 4, np.float32)), 1.0
    nbytes = width - 4
    # spread the whole rows (contiguous); block == nbytes * k: the padding values of the
    # last byte are included
    np.copyto(vals, spread_packed(raw, layout.bit_rate)[:, :block])
    half = _column(raw, nbytes, np.uint32).copy().view(np.float16)      # (scale, bias) pairs
    sb = _buffer("scale_bias", 2 * n, np.float32)
    factor = half_to_scaled_float(half, sb)
    if factor != 1.0:
        np.multiply(sb, np.float32(factor), out=sb)
    return vals, (sb[0::2], sb[1::2]), 1.0


def _reduce_chunk(layout, data, block, idx, w, w_factor, out_rows, padding=None):
    """out_rows[b] = sum_j w[b, j] / w_factor * value(idx[b*L + j]) for one chunk of c
    bags of (padded) length L; w is float32 (c, L), or (1, L) shared by all bags.
    padding (c, L) bool marks padded slots (weight 0): their gathered values, scales
    and biases are zeroed, so that a non-finite row behind the padding index cannot
    leak in as 0 * inf = nan."""
    c = out_rows.shape[0]
    L = idx.size // c
    vals, sb, factor = _gather_values(layout, data, idx, block)
    if padding is not None:
        vals.reshape(c, L, block)[padding] = 0
        if sb is not None:
            sb[0].reshape(c, L)[padding] = 0
            sb[1].reshape(c, L)[padding] = 0
    if factor != w_factor:
        if factor == 1.0:
            w = w * np.float32(1 / w_factor)           # exact: undoes a power of two
        else:
            np.multiply(vals, np.float32(factor), out=vals)
    wm = w if sb is None else w * sb[0].reshape(c, L)
    np.matmul(wm[:, None, :], vals.reshape(c, L, block), out=out_rows[:, None, :])
    if sb is not None:
        out_rows += (w * sb[1].reshape(c, L)).sum(axis=1, dtype=np.float32)[:, None]


def _split(n, per, threads):
    """Boundaries of about n/per equal parts (a multiple of `threads` of them, so that
    every thread gets the same work)."""
    parts = max(1, -(-n // per))
    if threads > 1:
        parts = min(n, -(-parts // threads) * threads)
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


def _row_is_finite(layout, data, block):
    """Whether row 0 (the padding row) dequantises to finite values only."""
    if layout is FLOAT:
        return bool(np.isfinite(data[0]).all())
    row = np.array(data[0])          # values are small integers: scale and bias decide
    if layout.name == "fused8":
        return bool(np.isfinite(row[block:block + 8].view(np.float32)).all())
    return bool(np.isfinite(row[-4:].view(np.float16)).all())


def _windows(a, width):
    """Read-only view v of shape (a.size + 1, width) with v[s] = a[s:s + width], over a
    copy of `a` padded with `width` zeros (rows near the end run into the padding)."""
    ext = np.zeros(a.size + width, dtype=a.dtype)
    ext[:a.size] = a
    step = ext.strides[0]
    return np.lib.stride_tricks.as_strided(ext, (a.size + 1, width), (step, step), writeable=False)


def _plan_chunks(lengths, block, threads):
    """Sort the non-empty bags by length (longest first, stable) and cut the order into
    chunks [(start, stop, padded length, full)] of about equal padded size (a multiple
    of `threads` of them); a chunk also ends where lengths drop below half of its
    first, so that zero padding stays small. Returns (order, chunks per thread)."""
    nonempty = np.flatnonzero(lengths > 0)
    order = nonempty[np.argsort(-lengths[nonempty], kind="stable")]
    sorted_lens = lengths[order]
    total = int(sorted_lens.sum())
    parts = max(1, -(-total * 4 * block // _CHUNK_BYTES))
    parts = -(-parts // threads) * threads
    target = max(1, -(-total // parts))                 # padded rows per chunk
    halves = -2 * sorted_lens                           # ascending
    chunks = []
    i = 0
    while i < order.size:
        lmax = int(sorted_lens[i])
        j = min(order.size, i + max(1, target // lmax),
                int(np.searchsorted(halves, -lmax, side="right")))
        chunks.append((i, j, lmax, int(sorted_lens[j - 1]) == lmax))
        i = j
    # longest-first greedy assignment of chunks to threads by padded rows
    groups = [[] for _ in range(threads)]
    load = [0] * threads
    for ch in sorted(chunks, key=lambda ch: -(ch[1] - ch[0]) * ch[2]):
        t = load.index(min(load))
        groups[t].append(ch)
        load[t] += (ch[1] - ch[0]) * ch[2]
    return order, [g for g in groups if g]


def segment_reduce(data, indices, lengths, weights=None, positional=False, mean=False,
                   layout="float", threads=None):
    """Caffe2's EmbeddingLookup. Returns float32 [len(lengths), block].

    data: table (float32/float16 [N, ...], or uint8 fused rows for fused layouts);
    indices: int32/int64 [I]; lengths: int [M]; weights: float32 [I], or per-position
    weights when positional; mean divides each bag by its length (empty bags -> 0).
    Raises LookupInputError with Caffe2's messages.
    """
    layout = LAYOUTS[layout] if isinstance(layout, str) else layout
    block = layout.block_size(data)
    lengths = np.asarray(lengths)
    m = lengths.size
    # LENGTHS is checked even when INDICES is empty (Caffe2 skipped the check there,
    # so LENGTHS [-5] or [5, 0] gave zeros that one index more would have refused)
    _check_lengths(lengths, indices.size)
    if indices.size == 0:
        return np.zeros((m, block), dtype=np.float32)
    check_indices(indices, data.shape[0])
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32)
        if positional and weights.size < int(lengths.max(initial=0)):
            raise LookupInputError("weights", "WEIGHT must have at least as many entries (%d) as the "
                                   "longest segment (%d)" % (weights.size, int(lengths.max())))
    if block == 0 or m == 0:
        return np.zeros((m, block), dtype=np.float32)
    lengths = lengths.astype(np.int64, copy=False)
    # np.take converts its indices to intp on every call: convert once
    idx = indices if indices.dtype == np.intp else indices.astype(np.intp)
    threads = num_threads() if threads is None else threads
    if indices.size * block < _PARALLEL_MIN_VALUES:
        threads = 1
    # float16 tables: the weights carry the 2**112 of the bit-trick conversion
    w_factor = 1.0
    if layout is FLOAT and data.dtype == np.float16:
        if weights is None or np.abs(weights[:int(lengths.max())] if positional else weights).max() \
                < _HALF_WEIGHT_LIMIT:
            w_factor = _HALF_FACTOR
    scale = np.float32(w_factor)
    if weights is not None and w_factor != 1.0:
        weights = weights * scale
    lmin, lmax = int(lengths.min()), int(lengths.max())
    if lmin == lmax:   # all bags of length L > 0 (L = 0 would mean no indices)
        out = np.empty((m, block), dtype=np.float32)
        _reduce_uniform(layout, data, block, idx, weights, positional, mean, w_factor, threads, out)
        return out
    out = np.zeros((m, block), dtype=np.float32)
    order, groups = _plan_chunks(lengths, block, threads)
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    sorted_starts, sorted_lens = starts[order], lengths[order]
    # windows[s] = the lmax entries from position s on (a strided view, tails padded):
    # windows[:, :L][starts of a chunk's bags] is its (c, L) matrix in one fancy index
    win_idx = _windows(idx, lmax)
    win_w = _windows(weights, lmax) if weights is not None and not positional else None
    ones = np.full((1, lmax), scale, dtype=np.float32)
    steps = np.arange(lmax, dtype=np.int64)
    row0_finite = _row_is_finite(layout, data, block)

    def run_chunk(chunk):
        a, b, L, full = chunk
        bags = order[a:b]
        c = b - a
        consecutive = full and bags[-1] - bags[0] == c - 1   # full chunks are ascending (stable sort)
        if consecutive:
            pos = slice(starts[bags[0]], starts[bags[0]] + c * L)
            idx_c = idx[pos]
        else:
            st = sorted_starts[a:b]
            idx_c = win_idx[:, :L][st]
        if full:      # every bag of the chunk has length L: no padding
            padding = None
            if weights is None:
                w = ones[:, :L]
            elif positional:
                w = weights[None, :L]
            else:
                w = weights[pos].reshape(c, L) if consecutive else win_w[:, :L][st]
            if mean:
                w = w * (np.float32(1) / np.float32(L))
        else:
            lens = sorted_lens[a:b]
            valid = steps[:L] < lens[:, None]
            pad = ~valid
            idx_c[pad] = 0              # padded slots gather row 0 (a cache hit), weight 0
            padding = None if row0_finite else pad   # 0 * finite = 0: nothing to clean up
            if weights is None:
                w = np.multiply(valid, scale, dtype=np.float32)
            elif positional:
                w = np.where(valid, weights[:L], np.float32(0))    # weights past a bag may be nan
            else:
                w = win_w[:, :L][st]
                w[pad] = 0
            if mean:
                w *= (np.float32(1) / lens.astype(np.float32))[:, None]
        if consecutive:
            _reduce_chunk(layout, data, block, idx_c, w, w_factor, out[bags[0]:bags[-1] + 1])
        else:
            rows = _buffer("rows", c * block, np.float32).reshape(c, block)
            _reduce_chunk(layout, data, block, idx_c.reshape(-1), w, w_factor, rows, padding)
            out[bags] = rows

    run_split(lambda group: [run_chunk(chunk) for chunk in group], groups, threads)
    return out


def _reduce_uniform(layout, data, block, idx, weights, positional, mean, w_factor, threads, out):
    """All bags have the same length L: chunks are row slices of indices.reshape(m, L)
    (and of weights); nothing is gathered or padded to build them."""
    m = out.shape[0]
    L = idx.size // m
    w_all = None
    if weights is None:
        w_all = np.full((1, L), w_factor, dtype=np.float32)
    elif positional:
        w_all = weights[None, :L]
    if mean:
        inv = np.float32(1) / np.float32(L)
        w_all = w_all * inv if w_all is not None else None
        weights = weights * inv if w_all is None else weights
    bounds = _split(m, max(1, _CHUNK_BYTES // (4 * block * L)), threads)

    def run_chunk(i):
        b0, b1 = int(bounds[i]), int(bounds[i + 1])
        w = w_all if w_all is not None else weights[b0 * L:b1 * L].reshape(b1 - b0, L)
        _reduce_chunk(layout, data, block, idx[b0 * L:b1 * L], w, w_factor, out[b0:b1])

    run_split(run_chunk, list(range(bounds.size - 1)), threads)


def offsets_reduce(data, indices, offsets, include_last_offset=True, **kwargs):
    """Caffe2's EmbeddingLookupIdx: segments from offsets (see lengths_from_offsets)."""
    lengths = lengths_from_offsets(offsets, indices.size, include_last_offset)
    if int(lengths.sum()) != indices.size:
        raise LookupInputError("lengths", SUM_MESSAGE)
    return segment_reduce(data, indices, lengths, **kwargs)
