"""Embedding-bag reductions (Caffe2's EmbeddingLookup / EmbeddingLookupIdx).

A table of rows is gathered by INDICES and reduced per segment (bag); segments are
given by LENGTHS or by OFFSETS. Tables can be float32, float16 (accumulated in
float32), or fused rowwise-quantised uint8 rows (8-bit with float32 scale/bias,
4/2-bit with float16 scale/bias, all stored at the end of each row).

Public:
    segment_reduce(data, indices, lengths, weights=None, positional=False, mean=False,
                   layout="float", threads=None) -> float32 [len(lengths), block]
    offsets_reduce(data, indices, offsets, include_last_offset=True, **same) -> same
    LookupInputError (names the bad input), SUM_MESSAGE, check_indices, lengths_from_offsets

How (docs/perfkernels.md has the measurements): every shape, length and index is
checked first (compiled passes, the index pass on the team), then one compiled kernel
(lookup_loops.bags) sums each bag with its sums in registers, prefetching rows
PREFETCH_DISTANCE positions ahead, the index positions split over the team in equal
parts (bags cut by a part boundary are finished afterwards), each output row written
once. Tables are read in place through a uint8 view of their rows; strided rows are
fine, only a table whose values inside a row are not contiguous has its needed rows
gathered first.
"""
import math

import numpy as np

from ..runtime.jit import team, team_size
from . import lookup_loops as loops


class LookupInputError(ValueError):
    """Bad lookup input; `input` names which argument (data, weights, indices, lengths)."""

    def __init__(self, input, message):
        super().__init__(message)
        self.input = input


def check_lengths_sum(lengths, role="lengths"):
    """Raise unless non-negative int LENGTHS add up to at most the int64 maximum: past it
    their int64 sum and offsets wrap (LENGTHS [2**63 - 1, 2**63 - 1, 4] summed to 2),
    which passes a count check and sends compiled loops and np.repeat out of bounds.
    A float sum cannot wrap; near the limit the exact sum (Python ints) decides."""
    flat = np.asarray(lengths).reshape(-1)
    if flat.size > 1 and float(flat.sum(dtype=np.float64)) >= 2.0 ** 62:
        total = int(flat.astype(object).sum())
        if total > np.iinfo(np.int64).max:
            raise LookupInputError(role, "LENGTHS add up to %d, more than an int64 count holds" % total)


# --------------------------------------------------------------------------- layouts

class Layout:
    """How a table row holds its values (float layout: float32 or float16 DATA)."""
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

# --------------------------------------------------------------------------- tuning

# Rows are prefetched this many index positions ahead (prefetcht0 of the first cache
# line of the tile being summed): 8 for rows of more than 128 bytes, 16 for shorter
# ones (they take less time each, so more of them must be in flight). Measured on the
# 2-vCPU EPYC VM, 1 and 2 threads, hot and cold: docs/perfkernels.md.
PREFETCH_DISTANCE = 8
PREFETCH_DISTANCE_SHORT_ROWS = 16
# Below this many gathered values one part (no team): a parallel region costs ~5 us on
# an idle machine (far more on a loaded one), the split path ~20 us more Python than the
# one-call path (lookup_one_part), and hot rows of 64 floats sum at ~10 ns each, so the
# split pays from a few thousand rows. 64 bags x 10 (40,960 values) in 2 parts took
# ~0.10 ms against ~0.03 as one part on the loaded 2-vCPU VM (benchmarks/RESULTS.md).
_PARALLEL_MIN_VALUES = 1 << 16
# At most this many table bytes per part: larger lookups get more parts than threads
# (numba gives each thread a run of consecutive parts; every part boundary inside a
# bag costs one partial row, nothing else).
_CHUNK_BYTES = 1 << 26

SUM_MESSAGE = ("Your input seems to be incorrect: the sum of lengths values should be "
               "the size of the indices tensor, but it appears not.")
# --------------------------------------------------------------------------- checks

def check_indices(indices, n_rows):
    """Raise Caffe2's out-of-bounds error for the first bad index (NumPy; the lookup
    itself uses the compiled pass and calls this only to word the error)."""
    if indices.size == 0:
        return
    lo, hi = indices.min(), indices.max()
    if lo >= 0 and hi < n_rows:
        return
    bad = np.flatnonzero((indices < 0) | (indices >= n_rows))[0]
    raise LookupInputError("indices", "Index %d is out of bounds: %d, range 0 to %d"
                           % (bad, int(indices[bad]), n_rows))


def _decreasing_error(raw, bad):
    return LookupInputError("lengths", "OFFSETS must be non-decreasing: offsets[%d] = %d > offsets[%d] = %d"
                            % (bad, raw[bad], bad + 1, raw[bad + 1]))


def _offsets_from_raw(offsets, n_indices, include_last_offset):
    """(offsets relative to the first, int64 [output_size + 1], longest bag)."""
    raw = np.asarray(offsets)
    if raw.dtype.kind not in "iu":
        raw = raw.astype(np.int64)
    if raw.size == 0:
        if include_last_offset:
            raise LookupInputError("lengths", "OFFSETS must have at least one entry (output_size + 1)")
        return np.zeros(1, np.int64), 0
    m = raw.size - 1 if include_last_offset else raw.size
    rel = np.empty(m + 1, np.int64)
    bad, longest = loops.relative_offsets(raw, rel)
    if bad >= 0:
        raise _decreasing_error(raw, bad)
    if not include_last_offset:        # torch style: the last bag ends at the end of INDICES
        if int(rel[m - 1]) > n_indices:
            raise _decreasing_error(np.append(raw.astype(np.int64), np.int64(raw[0]) + n_indices), m - 1)
        rel[m] = n_indices
        longest = max(longest, n_indices - int(rel[m - 1]))
    return rel, longest


def lengths_from_offsets(offsets, n_indices, include_last_offset=True):
    """Segment lengths from offsets (embedding_lookup_idx: output_size + 1 entries,
    relative to offsets[0]; torch style without the last entry: the last bag ends at
    the end of INDICES)."""
    rel, _ = _offsets_from_raw(offsets, n_indices, include_last_offset)
    return np.diff(rel)


def _offsets_from_lengths(lengths, n_indices):
    lengths = np.asarray(lengths)
    if lengths.dtype.kind not in "iu":
        lengths = lengths.astype(np.int64)
    offsets = np.empty(lengths.size + 1, np.int64)
    bad, longest = loops.offsets_of_lengths(lengths.reshape(-1), offsets)
    if bad >= 0:
        raise LookupInputError("lengths", "LENGTHS must be non-negative, lengths[%d] = %d"
                               % (bad, int(lengths.reshape(-1)[bad])))
    if int(offsets[-1]) != n_indices:
        raise LookupInputError("lengths", SUM_MESSAGE)
    return offsets, longest


def check_lengths(lengths, n_indices):
    """Raises LookupInputError unless LENGTHS are non-negative and sum to n_indices."""
    _offsets_from_lengths(lengths, n_indices)


def _check_indices(indices, n_rows, parts):
    found = np.empty(parts, np.int64)
    first_bad = loops.first_bad_index if parts > 1 else loops.first_bad_index_serial
    if first_bad(indices, n_rows, parts, found) >= 0:
        check_indices(indices, n_rows)          # words the error (first bad position)


# --------------------------------------------------------------------------- tables

def _unit_stride_rows(data):
    """data as a 2-D (rows, values) view whose values inside a row are contiguous, or
    None when they are not (a transposed table)."""
    n, d = data.shape[0], math.prod(data.shape[1:])
    if data.flags.c_contiguous:
        return data.reshape(n, d)                 # a view, and much cheaper than as_strided
    expect = data.itemsize
    for size, stride in reversed(list(zip(data.shape[1:], data.strides[1:]))):
        if size != 1 and stride != expect:
            return None
        expect *= size
    return np.lib.stride_tricks.as_strided(data, (n, d), (data.strides[0], data.itemsize), writeable=False)


def _byte_rows(data, layout):
    """The table as uint8 rows (a view), or None when a row's bytes are not contiguous."""
    if layout is FLOAT:
        rows = _unit_stride_rows(data)
    else:
        rows = data if data.strides[1] == 1 or data.shape[1] <= 1 else None
    if rows is None:
        return None
    return rows if rows.dtype == np.uint8 else rows.view(np.uint8)


_TILES = {}


def _tile_plan(block, per_byte, value_bytes):
    """(lane width, tile columns, tile byte offsets) for rows of `block` values."""
    key = (block, per_byte, value_bytes)
    plan = _TILES.get(key)
    if plan is None:
        n = next(w for w in loops.WIDTHS if w <= block and w % per_byte == 0)
        cols = list(range(0, block - n + 1, n))
        if block % n:
            cols.append(block - n)             # overlaps the tile before: same sums, no tail loop
        cols = np.array(cols, np.int64)
        at = cols * value_bytes if per_byte == 1 else cols // per_byte
        plan = _TILES[key] = (n, cols, at.astype(np.int64))
    return plan


# --------------------------------------------------------------------------- lookups

# one-part lookups: part_rows / part_bags that _part never touches, no weights
_NO_PART_ROWS = np.zeros((2, 1), np.float32)
_NO_PART_BAGS = np.full((1, 2), -1, np.int64)
_NO_WEIGHTS = np.zeros(0, np.float32)
_ADDRESSED_DTYPES = (np.dtype(np.float32), np.dtype(np.uint8))     # native order: numba takes them


def _encoding(data, layout, block):
    """(kernel's value kind, values per byte, bytes per value, scale/bias byte offset)."""
    if layout is FLOAT:
        return (loops.FLOAT32 if data.dtype == np.float32 else loops.FLOAT16), 1, data.itemsize, 0
    if layout.name == "fused8":
        return loops.FUSED8, 1, 1, block
    return (loops.FUSED4 if layout.bit_rate == 4 else loops.FUSED2), layout.values_per_byte, 1, data.shape[1] - 4


_ROW_FACTS = {}


def _row_facts(data, layout):
    """What the one-call path needs to know of a table's rows: (values per row, bytes per
    row, value kind, scale/bias offset, lane width, tiles, tile byte offsets, prefetch
    distance). They depend only on the row shape, dtype and layout, which key them: the
    table itself may be replaced or rewritten between calls."""
    key = (data.shape[1:], data.dtype, layout)
    facts = _ROW_FACTS.get(key)
    if facts is None:
        block = layout.block_size(data)
        row_bytes = data.shape[1] if layout is not FLOAT else block * data.itemsize
        kind, per_byte, value_bytes, sb_at = _encoding(data, layout, block)
        width, tiles, tile_bytes = _tile_plan(block, per_byte, value_bytes) if block > 0 else (0, None, None)
        dist = PREFETCH_DISTANCE if row_bytes > 128 else PREFETCH_DISTANCE_SHORT_ROWS
        if len(_ROW_FACTS) > 1024:            # many row shapes (a fuzzer): start again
            _ROW_FACTS.clear()
        facts = _ROW_FACTS[key] = (block, row_bytes, kind, sb_at, width, tiles, tile_bytes, dist)
    return facts


def _small(data, indices, segments, from_lengths, longest, weights, positional, mean, layout, threads):
    """A lookup that runs as one part (see _split) of a non-empty output, in one compiled
    call on this thread, checks included (LENGTHS too when from_lengths); None when it
    is not such a lookup, when a check failed, or when the table's row bytes are not
    contiguous: the caller's checked path then words the error (or gathers the rows).
    segments: int64 LENGTHS, or offsets relative to the first."""
    n = indices.size
    m = segments.size - (0 if from_lengths else 1)
    if n == 0 or m <= 0:
        return None
    block, row_bytes, kind, sb_at, width, tiles, tile_bytes, dist = _row_facts(data, layout)
    if block <= 0 or ((team_size() if threads is None else threads) > 1 and n * block >= _PARALLEL_MIN_VALUES):
        return None
    # the table's address: a C-contiguous float32 / uint8 table's from a compiled call (~1 us;
    # NumPy's .ctypes.data costs ~3, as does a byte view); other tables' (float16: numba has
    # no float16 arrays; strided views; other byte orders) from their byte rows, which must
    # be contiguous
    if data.flags.c_contiguous and data.dtype in _ADDRESSED_DTYPES:
        table, address = data, loops.address_of(data)
    else:
        table = _byte_rows(data, layout)
        if table is None:
            return None
        address = table.ctypes.data
    if weights is None:
        weights, wmode = _NO_WEIGHTS, loops.NO_WEIGHTS
    else:
        weights = np.ascontiguousarray(weights, dtype=np.float32)
        wmode = loops.POSITIONAL if positional else loops.PER_INDEX
    out = np.empty((m, block), np.float32)
    done = loops.lookup_one_part(width, kind, address, table.strides[0], table.shape[0], sb_at,
                                 np.ascontiguousarray(indices, dtype=np.int64), weights, wmode, bool(mean), out,
                                 tiles, tile_bytes, segments, from_lengths, longest, dist, _NO_PART_ROWS,
                                 _NO_PART_BAGS)
    return out if done == loops.DONE else None


def _split(data, n_idx, layout, threads):
    """(values per row, bytes per row, parts to split n_idx index positions into)."""
    block = layout.block_size(data)
    if threads is None:
        threads = team_size()
    row_bytes = data.shape[1] if layout is not FLOAT else block * data.itemsize
    parts = 1
    if threads > 1 and n_idx * block >= _PARALLEL_MIN_VALUES:
        parts = threads * max(1, -(-n_idx * row_bytes // (threads * _CHUNK_BYTES)))
    return block, row_bytes, parts


def _reduce(data, indices, offsets, longest, weights, positional, mean, layout, threads):
    """The checked path: every check in NumPy-worded order, then the kernel on the team."""
    m = offsets.size - 1
    n_idx = indices.size
    block, row_bytes, parts = _split(data, n_idx, layout, threads)
    # int64, contiguous: the kernel reads indices through their address (int32 input costs
    # one conversion pass, ~0.02 ms for 81,920, less than a per-row width test did)
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    with team():
        _check_indices(indices, data.shape[0], parts)
        if weights is not None:
            weights = np.ascontiguousarray(weights, dtype=np.float32)
            if positional and weights.size < longest:
                raise LookupInputError("weights", "WEIGHT must have at least as many entries (%d) as the "
                                       "longest segment (%d)" % (weights.size, longest))
            if not positional and weights.size != n_idx:
                raise LookupInputError("weights", "Weight should have the same length as indices.")
        out = np.empty((m, block), np.float32)
        if block == 0 or m == 0:
            return out
        table = _byte_rows(data, layout)
        if table is None:        # values of a row not contiguous: gather the rows needed
            table = _byte_rows(np.ascontiguousarray(data[indices]), layout)
            indices = np.arange(n_idx, dtype=np.int64)
        kind, per_byte, value_bytes, sb_at = _encoding(data, layout, block)
        width, tiles, tile_bytes = _tile_plan(block, per_byte, value_bytes)
        part_rows = np.empty((2 * parts, block), np.float32)
        part_bags = np.full((parts, 2), -1, np.int64)
        wmode = loops.NO_WEIGHTS if weights is None else loops.POSITIONAL if positional else loops.PER_INDEX
        sum_bags = loops.bags if parts > 1 else loops.bags_serial
        sum_bags(width, kind, table.ctypes.data, table.strides[0], sb_at, indices.ctypes.data,
                 0 if weights is None else weights.ctypes.data, wmode, bool(mean), out, tiles, tile_bytes, offsets,
                 PREFETCH_DISTANCE if row_bytes > 128 else PREFETCH_DISTANCE_SHORT_ROWS, parts, part_rows,
                 part_bags)
        if parts > 1:
            loops.merge_partials(out, offsets, bool(mean), part_rows, part_bags)
    return out


_FLOAT_TABLES = (np.dtype(np.float32), np.dtype(np.float16))    # native byte order


def _check_table(data, layout):
    """DATA of a type the layout's compiled loops read: native float32/float16 for the float
    layout (a big-endian float32 table would otherwise be read as float16), uint8 rows for
    the fused ones."""
    if layout is FLOAT:
        if data.dtype not in _FLOAT_TABLES or data.ndim < 1:
            raise LookupInputError("data", "DATA must be a float32 or float16 table in native byte order, got %s %s"
                                   % (data.dtype.str, list(data.shape)))
    elif data.dtype != np.uint8 or data.ndim != 2:
        raise LookupInputError("data", "%s DATA must be 2-D uint8 rows, got %s %s"
                               % (layout.name, data.dtype.str, list(data.shape)))


def segment_reduce(data, indices, lengths, weights=None, positional=False, mean=False,
                   layout="float", threads=None):
    """Caffe2's EmbeddingLookup. Returns float32 [len(lengths), block].

    data: table (float32/float16 [N, ...], or uint8 fused rows for fused layouts);
    indices: int32/int64 [I]; lengths: int [M]; weights: float32 [I], or per-position
    weights when positional; mean divides each bag by its length (empty bags -> 0).
    threads: parts to split the work into (default: the team's size).
    Raises LookupInputError with Caffe2's messages, before anything is computed.
    """
    layout_obj = LAYOUTS[layout] if isinstance(layout, str) else layout
    _check_table(data, layout_obj)
    lengths = np.asarray(lengths)
    if lengths.dtype.kind in "iu":        # small lookups: LENGTHS are checked in the one call
        out = _small(data, indices, lengths.reshape(-1).astype(np.int64, copy=False), True, 0, weights, positional,
                     mean, layout_obj, threads)
        if out is not None:
            return out
    # LENGTHS is checked even when INDICES is empty (Caffe2 skipped the check there,
    # so LENGTHS [-5] or [5, 0] gave zeros that one index more would have refused)
    offsets, longest = _offsets_from_lengths(lengths, indices.size)
    if indices.size == 0:
        return np.zeros((lengths.size, layout_obj.block_size(data)), dtype=np.float32)
    return _reduce(data, indices, offsets, longest, weights, positional, mean, layout_obj, threads)


def offsets_reduce(data, indices, offsets, include_last_offset=True, weights=None, positional=False,
                   mean=False, layout="float", threads=None):
    """Caffe2's EmbeddingLookupIdx: bag m spans INDICES[offsets[m] - offsets[0] :
    offsets[m + 1] - offsets[0]] (output_size + 1 offsets), or with
    include_last_offset=False (torch style, output_size offsets) the last bag ends at
    the end of INDICES. OFFSETS must be non-decreasing."""
    layout_obj = LAYOUTS[layout] if isinstance(layout, str) else layout
    _check_table(data, layout_obj)
    rel, longest = _offsets_from_raw(offsets, indices.size, include_last_offset)
    if int(rel[-1]) != indices.size:
        raise LookupInputError("lengths", SUM_MESSAGE)
    if indices.size == 0:
        return np.zeros((rel.size - 1, layout_obj.block_size(data)), dtype=np.float32)
    out = _small(data, indices, rel, False, longest, weights, positional, mean, layout_obj, threads)
    if out is not None:
        return out
    return _reduce(data, indices, rel, longest, weights, positional, mean, layout_obj, threads)
