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
- bags are processed in chunks small enough for the gathered rows to stay in cache,
  and the chunks are split across a few threads (NumPy releases the GIL).
"""
import threading

import numpy as np

from .threads import num_threads, run_split


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
        return int(np.prod(data.shape[1:], dtype=np.int64))


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
        k, mask = self.values_per_byte, (1 << bit_rate) - 1
        codes = np.arange(256, dtype=np.uint16)
        # lut[byte] = the k values packed in that byte, as float32
        self.lut = np.stack([((codes >> (bit_rate * j)) & mask) for j in range(k)], axis=1).astype(np.float32)

    def block_size(self, data):
        return (data.shape[1] - 4) * self.values_per_byte


FUSED4 = FusedNBit(4)
FUSED2 = FusedNBit(2)
LAYOUTS = {"float": FLOAT, "fused8": Fused8Bit(), "fused4": FUSED4, "fused2": FUSED2}


# --------------------------------------------------------------------------- threads

_scratch = threading.local()
# Below this many gathered values a single thread wins (thread hand-off costs ~20 us).
_PARALLEL_MIN_VALUES = 1 << 16
# Bytes of float32 rows per chunk: small enough to stay in L2 between gather and matmul.
_CHUNK_BYTES = 1 << 19


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

def _gather_values(layout, data, idx, block, out_f32):
    """Gathered rows as float32 (n, block) in out_f32, plus (scale, bias) or None."""
    n = idx.size
    if layout is FLOAT:
        flat = data.reshape(data.shape[0], block)
        if flat.dtype == np.float32:
            return np.take(flat, idx, axis=0, mode="clip", out=out_f32), None
        raw = np.take(flat, idx, axis=0, mode="clip", out=_buffer("raw16", n * block, flat.dtype).reshape(n, block))
        out_f32[...] = raw
        return out_f32, None
    width = data.shape[1]
    raw = np.take(data, idx, axis=0, mode="clip", out=_buffer("raw8", n * width, np.uint8).reshape(n, width))
    if layout.name == "fused8":
        out_f32[...] = raw[:, :block]
        sb = np.ascontiguousarray(raw[:, block:]).view(np.float32)
        return out_f32, (sb[:, 0], sb[:, 1])
    nbytes = width - 4
    k = layout.values_per_byte
    packed = raw[:, :nbytes]
    # block == nbytes * k (padding values included): unpack straight into the values buffer
    np.take(layout.lut, packed, axis=0, mode="clip", out=out_f32.reshape(n, nbytes, k))
    sb = np.ascontiguousarray(raw[:, nbytes:]).view(np.float16).astype(np.float32)
    return out_f32, (sb[:, 0], sb[:, 1])


def _reduce_chunk(layout, data, block, idx_mat, w_mat, out_rows):
    """out_rows[b] = sum_j w_mat[b, j] * value(idx_mat[b, j]) for one chunk of bags."""
    c, L = idx_mat.shape
    vals, sb = _gather_values(layout, data, idx_mat.reshape(-1), block,
                              _buffer("vals", c * L * block, np.float32).reshape(c * L, block))
    vals = vals.reshape(c, L, block)
    if sb is None:
        np.matmul(w_mat[:, None, :], vals, out=out_rows[:, None, :])
        return
    scale, bias = sb
    w_scaled = w_mat * scale.reshape(c, L)
    np.matmul(w_scaled[:, None, :], vals, out=out_rows[:, None, :])
    out_rows += (w_mat * bias.reshape(c, L)).sum(axis=1, dtype=np.float32)[:, None]


def _plan_chunks(lengths, block):
    """Yield (bag positions, max length) groups; bags sorted by length when uneven
    so that zero padding stays small."""
    m = lengths.size
    nonempty = np.flatnonzero(lengths > 0)
    if nonempty.size == 0:
        return []
    lens = lengths[nonempty]
    uniform = lens.min() == lens.max()
    order = nonempty if uniform else nonempty[np.argsort(-lens, kind="stable")]
    sorted_lens = lengths[order]
    chunks = []
    i = 0
    while i < order.size:
        lmax = int(sorted_lens[i])
        per = max(1, _CHUNK_BYTES // (4 * block * lmax))
        j = min(order.size, i + per)
        chunks.append((order[i:j], lmax))
        i = j
    return chunks


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
    out = np.zeros((m, block), dtype=np.float32)
    if indices.size == 0:
        return out  # Caffe2 zero-fills and does not check LENGTHS here
    _check_lengths(lengths, indices.size)
    check_indices(indices, data.shape[0])
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32)
        if positional and weights.size < int(lengths.max(initial=0)):
            raise LookupInputError("weights", "WEIGHT must have at least as many entries (%d) as the "
                                   "longest segment (%d)" % (weights.size, int(lengths.max())))
    if block == 0 or m == 0:
        return out
    lengths = lengths.astype(np.int64, copy=False)
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    chunks = _plan_chunks(lengths, block)

    def run_chunk(chunk):
        bags, lmax = chunk
        lens = lengths[bags]
        j = np.arange(lmax, dtype=np.int64)
        if lens.min() == lmax:     # all bags of the chunk are full: no padding
            pos = starts[bags, None] + j
            idx_mat = indices[pos]
            if weights is None:
                w_mat = np.ones((bags.size, lmax), dtype=np.float32)
            elif positional:
                w_mat = np.broadcast_to(weights[:lmax], (bags.size, lmax))
            else:
                w_mat = weights[pos]
        else:
            valid = j < lens[:, None]
            pos = np.where(valid, starts[bags, None] + j, 0)
            idx_mat = np.where(valid, indices[pos], 0)
            if weights is None:
                w_mat = valid.astype(np.float32)
            elif positional:
                w_mat = np.where(valid, weights[np.minimum(j, weights.size - 1)], np.float32(0))
            else:
                w_mat = np.where(valid, weights[pos], np.float32(0))
        if mean:
            w_mat = w_mat * (np.float32(1) / lens.astype(np.float32))[:, None]
        w_mat = np.ascontiguousarray(w_mat, dtype=np.float32)
        contiguous = bags[-1] - bags[0] == bags.size - 1 and bool((np.diff(bags) == 1).all())
        if contiguous:
            _reduce_chunk(layout, data, block, idx_mat, w_mat, out[bags[0]:bags[-1] + 1])
        else:
            rows = np.empty((bags.size, block), dtype=np.float32)
            _reduce_chunk(layout, data, block, idx_mat, w_mat, rows)
            out[bags] = rows

    threads = num_threads() if threads is None else threads
    if indices.size * block < _PARALLEL_MIN_VALUES:
        threads = 1
    # chunks are interleaved over threads so skewed (long, sorted-first) bags spread out
    run_split(run_chunk, chunks, threads)
    return out


def offsets_reduce(data, indices, offsets, include_last_offset=True, **kwargs):
    """Caffe2's EmbeddingLookupIdx: segments from offsets (see lengths_from_offsets)."""
    lengths = lengths_from_offsets(offsets, indices.size, include_last_offset)
    if indices.size and int(lengths.sum()) != indices.size:
        raise LookupInputError("lengths", SUM_MESSAGE)
    return segment_reduce(data, indices, lengths, **kwargs)
