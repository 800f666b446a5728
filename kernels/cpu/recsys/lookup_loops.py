"""Compiled loops of the embedding lookups (sparse_lengths.py calls them; it checks
every shape, length and index and prepares every argument first: nothing here
checks bounds).

    bags(width, kind, table, row_stride, sb_at, indices, weights, wmode, mean, out,
         tiles, tile_bytes, offsets, dist, parts, part_rows, part_bags)
        out[b] = sum over j in [offsets[b], offsets[b+1]) of w_j * value(row indices[j]),
        over `parts` parts of the index positions on the team (see _part); bags cut by a
        part boundary are summed in part_rows and finished by merge_partials.
    merge_partials(out, offsets, mean, part_rows, part_bags)
    lookup_one_part(..., longest, dist, part_rows, part_bags) -> DONE, or the check
        that failed: the index and weight checks and one part of bags, one call
    address_of(a) -> a.ctypes.data, cheaply
    first_bad_index(indices, n_rows, parts, found) -> first position with an index
        outside [0, n_rows), or -1
    offsets_of_lengths(lengths, offsets) -> (first negative length or -1, max length)
    relative_offsets(raw, offsets) -> (first position where raw decreases or -1, max step)

Numba compiles a parallel kernel in seconds, and once per combination of argument
types, so what varies from call to call is a run-time value: the table is an address
and a row stride (row r starts at table + r * row_stride: any dtype, strides, or
sliced view), the indices an address (int64), the value encoding `kind` (a code of
simd.KINDS) and the tile `width`. The row loop itself (_tile) is compiled once per
(width, kind) of simd.LOOKUP_LANES, each copy with its encoding's loads and no
per-row branches, and _part picks the copy once per part (_part_of, _piece, _tile
are compiled per copy). _tile takes no arrays: numba
reference-counts array arguments on every call (~0.4 us per bag, measured).
"""
import numpy as np

from ..runtime.jit import LazyGlobal, compiled, prange, serial_variant

vzeros = LazyGlobal(".simd", "vzeros")
vload = LazyGlobal(".simd", "vload")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vmuls = LazyGlobal(".simd", "vmuls")
vstore_lanes_at = LazyGlobal(".simd", "vstore_lanes_at")
has_scale_bias = LazyGlobal(".simd", "has_scale_bias")
row_scale = LazyGlobal(".simd", "row_scale")
row_bias = LazyGlobal(".simd", "row_bias")
lanes_are = LazyGlobal(".simd", "lanes_are")
prefetch = LazyGlobal(".simd", "prefetch")
load_f32 = LazyGlobal(".simd", "load_f32")
load_index = LazyGlobal(".simd", "load_index")
LOOKUP_LANES = LazyGlobal(".simd", "LOOKUP_LANES")
literal_unroll = LazyGlobal("numba", "literal_unroll")

# Tile widths (lanes) and value encodings, as in simd.LOOKUP_WIDTHS and simd.KINDS
# (simd imports numba; this module must not).
WIDTHS = (64, 32, 16, 8, 4, 2, 1)
FLOAT32, FLOAT16, FUSED8, FUSED4, FUSED2 = 0, 1, 2, 3, 4
NO_WEIGHTS, PER_INDEX, POSITIONAL = 0, 1, 2


@compiled(inline=True)
def _add_row(lanes, acc, bias, table, row_stride, sb_at, indices, weights, woff, weighted, j, at):
    """acc, bias after row position j (weight 1 when not weighted)."""
    row = table + load_index(indices, j, True) * row_stride
    w = load_f32(weights + 4 * (j - woff)) if weighted else np.float32(1.0)
    if has_scale_bias(lanes):
        bias += w * row_bias(lanes, row + sb_at)
        w = w * row_scale(lanes, row + sb_at)
    return vfma(acc, w, vload(lanes, row + at)), bias


@compiled
def _tile(lanes, table, row_stride, sb_at, indices, weights, woff, weighted, a, z, scale, dest, at, next_at, dist,
          limit, warm):
    """dest (address of lanes.n float32) = scale * sum over positions j in [a, z) of
    weight[j - woff] (1 when not weighted) * (the lanes.n values at byte `at` of row
    indices[j]) (scale and bias applied for fused rows), summed in registers. Rows are
    prefetched `dist` positions ahead, up to `limit`: at byte `at` inside [a, z), at
    `next_at` past z (the next bags' first tile: the stream runs on across bag
    boundaries); warm: prefetch the first `dist` rows first (a tile after the first).
    The row loop is cut where its prefetch target changes, so that the loops test
    nothing per row."""
    one = np.float32(1.0)
    if warm:
        for j in range(a, min(a + dist, z)):
            prefetch(table + load_index(indices, j, True) * row_stride + at)
    acc = vzeros(lanes)
    bias = np.float32(0.0)
    inside = max(a, min(z, limit) - dist)         # j + dist < z and < limit: this tile's rows
    beyond = max(inside, min(z, limit - dist))    # z <= j + dist < limit: the next bags'
    for j in range(a, inside):
        prefetch(table + load_index(indices, j + dist, True) * row_stride + at)
        acc, bias = _add_row(lanes, acc, bias, table, row_stride, sb_at, indices, weights, woff, weighted, j, at)
    for j in range(inside, beyond):
        prefetch(table + load_index(indices, j + dist, True) * row_stride + next_at)
        acc, bias = _add_row(lanes, acc, bias, table, row_stride, sb_at, indices, weights, woff, weighted, j, at)
    for j in range(beyond, z):
        acc, bias = _add_row(lanes, acc, bias, table, row_stride, sb_at, indices, weights, woff, weighted, j, at)
    if has_scale_bias(lanes):
        acc = vadds(acc, bias)
    if scale != one:
        acc = vmuls(acc, scale)
    vstore_lanes_at(lanes, dest, acc)


@compiled
def _piece(lanes, table, row_stride, sb_at, indices, weights, woff, weighted, a, z, scale, dest, ntiles, tiles,
           tile_bytes, dist, hi):
    """Positions [a, z) of one bag into the float32 row at address `dest`, tile by tile
    (tiles, tile_bytes: addresses of ntiles int64 column / byte offsets); the last
    tile's prefetch stream runs on to hi."""
    first_at = load_index(tile_bytes, 0, True)
    for ti in range(ntiles):
        _tile(lanes, table, row_stride, sb_at, indices, weights, woff, weighted, a, z, scale,
              dest + 4 * load_index(tiles, ti, True), load_index(tile_bytes, ti, True), first_at, dist,
              hi if ti == ntiles - 1 else z, ti > 0)


@compiled
def _part_of(lanes, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes, offsets,
             dist, t, parts, part_rows, part_bags):
    """Part t of `parts`: index positions [lo, hi) with lo = total * t // parts. It writes
    the bags that start in [lo, hi) (the last part also the empty bags at the end);
    a bag that starts before lo (its head here) or runs past hi (its tail here) is
    summed into part_rows[2t] / [2t + 1] and named in part_bags[t, 0] / [t, 1].
    wmode: NO_WEIGHTS, PER_INDEX (weight j for position j) or POSITIONAL (weight
    j - the bag's start)."""
    weighted = wmode != NO_WEIGHTS
    per_index = wmode == PER_INDEX
    m = out.shape[0]
    total = offsets[m]
    lo = total * t // parts
    hi = total * (t + 1) // parts
    starts = offsets[:m]
    first = np.searchsorted(starts, lo)            # first bag starting at or after lo
    end = m if t == parts - 1 else np.searchsorted(starts, hi)
    out_at, out_step = out.ctypes.data, out.strides[0]
    part_at, part_step = part_rows.ctypes.data, part_rows.strides[0]
    ntiles, tiles_at, bytes_at = tiles.size, tiles.ctypes.data, tile_bytes.ctypes.data
    for j in range(lo, min(lo + dist, hi)):
        prefetch(table + load_index(indices, j, True) * row_stride + tile_bytes[0])
    one = np.float32(1.0)
    if lo < hi and first > 0 and (first == m or offsets[first] > lo):
        head = first - 1                           # a bag that began in an earlier part
        _piece(lanes, table, row_stride, sb_at, indices, weights, 0 if per_index else offsets[head], weighted, lo,
               min(offsets[head + 1], hi), one, part_at + 2 * t * part_step, ntiles, tiles_at, bytes_at, dist, hi)
        part_bags[t, 0] = head
    for b in range(first, end):
        s = offsets[b]
        e = offsets[b + 1]
        woff = 0 if per_index else s
        if e > hi:                                 # runs on into the next part
            _piece(lanes, table, row_stride, sb_at, indices, weights, woff, weighted, s, hi, one,
                   part_at + (2 * t + 1) * part_step, ntiles, tiles_at, bytes_at, dist, hi)
            part_bags[t, 1] = b
        else:
            scale = one / np.float32(e - s) if mean and e > s else one
            _piece(lanes, table, row_stride, sb_at, indices, weights, woff, weighted, s, e, scale,
                   out_at + b * out_step,
                   ntiles, tiles_at, bytes_at, dist, hi)


@compiled
def _part(width, kind, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes, offsets,
          dist, t, parts, part_rows, part_bags):
    """_part_of with the copy for `width` lanes of encoding `kind`, picked once per part
    (picking it per tile, a walk over every copy, cost ~0.15 us a tile: 10 of a
    small lookup's 17 us, measured)."""
    for lanes in literal_unroll(LOOKUP_LANES):
        if lanes_are(lanes, width, kind):
            _part_of(lanes, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes,
                     offsets, dist, t, parts, part_rows, part_bags)


@compiled(parallel=True)
def bags(width, kind, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes, offsets,
         dist, parts, part_rows, part_bags):
    """All bags, `parts` parts on the team (see _part); then merge_partials. weights is
    an address of float32 (unread with NO_WEIGHTS)."""
    for t in prange(parts):
        _part(width, kind, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes,
              offsets, dist, t, parts, part_rows, part_bags)


@compiled
def merge_partials(out, offsets, mean, part_rows, part_bags):
    """Finish the bags that part boundaries cut: their pieces lie in part order (head
    of part t, tail of part t, head of part t + 1, ...), so consecutive pieces of one
    bag are added up and the sum (divided by the length for mean) written once."""
    n = out.shape[1]
    acc = np.zeros(n, np.float32)
    current = -1
    for slot in range(part_bags.size + 1):
        bag = part_bags.reshape(-1)[slot] if slot < part_bags.size else -2
        if bag == -1:
            continue
        if bag != current:
            if current >= 0:
                length = offsets[current + 1] - offsets[current]
                scale = np.float32(1.0) / np.float32(length) if mean else np.float32(1.0)
                row = out[current]
                for k in range(n):
                    row[k] = acc[k] * scale
            acc[:] = 0
            current = bag
        if bag >= 0:
            piece = part_rows[slot]
            for k in range(n):
                acc[k] += piece[k]


# lookup_one_part's answers: done, or which check failed (nothing written then)
DONE, BAD_INDEX, BAD_WEIGHTS, BAD_LENGTHS = -1, 0, 1, 2


@compiled
def lookup_one_part(width, kind, table, row_stride, n_rows, sb_at, indices, weights, wmode, mean, out, tiles,
                    tile_bytes, segments, from_lengths, longest, dist, part_rows, part_bags):
    """A whole lookup as one part on the calling thread, its checks first, in one call
    (a small lookup's cost is mostly fixed: calls, addresses, allocations). table: the
    address of n_rows rows (as in bags); indices: int64; weights: float32 (any size with
    NO_WEIGHTS); segments: int64 LENGTHS when from_lengths (longest is then found
    here), else offsets relative to the first, checked by the caller. Returns
    BAD_LENGTHS (a negative length, or lengths that do not add up to the indices),
    BAD_INDEX (an index outside [0, n_rows)), BAD_WEIGHTS (fewer weights than the
    longest bag for POSITIONAL, not one per index for PER_INDEX), in that order and
    before anything is written; else DONE after _part(t=0, parts=1), which writes
    every bag into out and never touches part_rows / part_bags."""
    n = indices.size
    offsets = segments
    if from_lengths:
        offsets = np.empty(segments.size + 1, np.int64)
        bad, longest = _lengths_to_offsets(segments, offsets)
        if bad >= 0 or offsets[segments.size] != n:
            return BAD_LENGTHS
    if _count_bad(indices, 0, n, np.uint64(n_rows)):
        return BAD_INDEX
    if (wmode == POSITIONAL and weights.size < longest) or (wmode == PER_INDEX and weights.size != n):
        return BAD_WEIGHTS
    _part(width, kind, table, row_stride, sb_at, indices.ctypes.data, weights.ctypes.data, wmode, mean, out, tiles,
          tile_bytes, offsets, dist, 0, 1, part_rows, part_bags)
    return DONE


@compiled
def address_of(a):
    """The address of array a's first element (NumPy's a.ctypes.data costs ~3 us)."""
    return a.ctypes.data


# ------------------------------------------------------------------ NumPy twins
# (what first calls run while the kernels compile: jit.py). They read memory through
# the same addresses the kernels read, and only the bytes the kernels read.

_VALUE_BYTES = {FLOAT32: 4, FLOAT16: 2}
_PACKED_BITS = {FUSED4: 4, FUSED2: 2}


def _memory(address, count, dtype):
    """A NumPy view of `count` values of `dtype` at an address the caller keeps alive."""
    import ctypes
    if count <= 0:
        return np.empty(0, dtype)
    raw = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(address)
    return np.frombuffer(raw, dtype)


def _gathered_rows(table, row_stride, rows, row_bytes):
    """uint8 [len(rows), row_bytes]: the bytes of the named rows (row r at table + r * row_stride),
    through a strided view of the memory between the first and the last row named."""
    lo, hi = int(rows.min()), int(rows.max())
    if row_stride >= 0:
        first, step, at = lo, row_stride, rows - lo
    else:                                   # a reversed view: the highest row lies lowest
        first, step, at = hi, -row_stride, hi - rows
    span = _memory(table + first * row_stride, (hi - lo) * step + row_bytes, np.uint8)
    return np.lib.stride_tricks.as_strided(span, (hi - lo + 1, row_bytes), (step, 1), writeable=False)[at]


def _row_values(kind, rows, block, sb_at):
    """(values float32 [n, block], scale [n] or None, bias [n] or None) of gathered rows."""
    if kind in _VALUE_BYTES:
        dtype = np.float32 if kind == FLOAT32 else np.float16
        return np.ascontiguousarray(rows[:, :block * _VALUE_BYTES[kind]]).view(dtype).astype(np.float32), None, None
    if kind == FUSED8:
        pair = np.ascontiguousarray(rows[:, sb_at:sb_at + 8]).view(np.float32)
        return rows[:, :block].astype(np.float32), pair[:, 0], pair[:, 1]
    bits = _PACKED_BITS[kind]
    per_byte = 8 // bits
    packed = rows[:, :-(-block // per_byte)]
    fields = (packed[:, :, None] >> (np.arange(per_byte, dtype=np.uint8) * bits)) & np.uint8((1 << bits) - 1)
    pair = np.ascontiguousarray(rows[:, sb_at:sb_at + 4]).view(np.float16).astype(np.float32)
    return fields.reshape(len(rows), -1)[:, :block].astype(np.float32), pair[:, 0], pair[:, 1]


@bags.numpy_twin
def _bags_numpy(width, kind, table, row_stride, sb_at, indices, weights, wmode, mean, out, tiles, tile_bytes, offsets,
                dist, parts, part_rows, part_bags):
    """Every bag straight into out, as one weighted sum per bag (the kernel's pieces
    and merge_partials' additions give the same sums, in another order); part_bags
    is set to 'no cut bags' so that merge_partials, compiled or not, leaves out alone."""
    m, block = out.shape
    part_bags[...] = -1
    offsets = offsets[:m + 1]
    total = int(offsets[m])
    lengths = np.diff(offsets)
    out[...] = 0
    if total == 0 or block == 0:
        return
    idx = _memory(indices, total, np.int64)
    if kind in _VALUE_BYTES:
        row_bytes = block * _VALUE_BYTES[kind]
    else:
        row_bytes = sb_at + (8 if kind == FUSED8 else 4)
    values, scale, bias = _row_values(kind, _gathered_rows(table, row_stride, idx, row_bytes), block, sb_at)
    if wmode == NO_WEIGHTS:
        w = np.ones(total, np.float32)
    elif wmode == PER_INDEX:
        w = _memory(weights, total, np.float32)
    else:                                   # POSITIONAL: weight of the position inside its bag
        at_in_bag = np.arange(total) - np.repeat(offsets[:m], lengths)
        w = _memory(weights, int(lengths.max()), np.float32)[at_in_bag]
    full = lengths > 0
    starts = offsets[:m][full]
    with np.errstate(all="ignore"):        # non-finite rows: IEEE results, silently, as the kernel
        # per row: acc += (w * scale) * values, bias_sum += w * bias (the kernel's order)
        contributions = values * (w if scale is None else w * scale)[:, None]
        sums = np.add.reduceat(contributions, starts, axis=0)
        if bias is not None:
            sums += np.add.reduceat(w * bias, starts)[:, None]
        if mean:
            sums *= (np.float32(1.0) / lengths[full].astype(np.float32))[:, None]
    out[full] = sums


@lookup_one_part.numpy_twin
def _lookup_one_part_numpy(width, kind, table, row_stride, n_rows, sb_at, indices, weights, wmode, mean, out, tiles,
                           tile_bytes, segments, from_lengths, longest, dist, part_rows, part_bags):
    offsets = segments
    if from_lengths:
        offsets = np.empty(segments.size + 1, np.int64)
        bad, longest = _offsets_of_lengths_numpy(segments, offsets)
        if bad >= 0 or offsets[segments.size] != indices.size:
            return BAD_LENGTHS
    if indices.size and bool((indices.view(np.uint64) >= np.uint64(n_rows)).any()):
        return BAD_INDEX
    if (wmode == POSITIONAL and weights.size < longest) or (wmode == PER_INDEX and weights.size != indices.size):
        return BAD_WEIGHTS
    _bags_numpy(width, kind, table, row_stride, sb_at, indices.ctypes.data, weights.ctypes.data, wmode, mean, out,
                tiles, tile_bytes, offsets, dist, 1, part_rows, part_bags)
    return DONE


@address_of.numpy_twin
def _address_of_numpy(a):
    return a.ctypes.data


@merge_partials.numpy_twin
def _merge_partials_numpy(out, offsets, mean, part_rows, part_bags):
    # a handful of slots (two per part): the kernel's loop, with row adds in NumPy
    acc = np.zeros(out.shape[1], np.float32)
    current = -1
    slots = part_bags.reshape(-1)
    for slot in range(slots.size + 1):
        bag = int(slots[slot]) if slot < slots.size else -2
        if bag == -1:
            continue
        if bag != current:
            if current >= 0:
                length = offsets[current + 1] - offsets[current]
                scale = np.float32(1.0) / np.float32(length) if mean else np.float32(1.0)
                out[current] = acc * scale
            acc[:] = 0
            current = bag
        if bag >= 0:
            acc += part_rows[slot]


@compiled
def _count_bad(indices, lo, hi, limit):
    """How many of indices[lo:hi] are outside [0, limit) (vectorised: one unsigned
    compare, negatives wrap to huge)."""
    bad = 0
    for j in range(lo, hi):
        bad += np.uint64(indices[j]) >= limit
    return bad


@compiled(parallel=True)
def first_bad_index(indices, n_rows, parts, found):
    """First position of int64 `indices` whose value is outside [0, n_rows), or -1;
    `parts` parts on the team, each counting its bad indices in one vectorised pass
    and scanning for the first only when it has one. found: int64 scratch of `parts`."""
    n = indices.size
    limit = np.uint64(n_rows)
    for t in prange(parts):
        lo, hi = n * t // parts, n * (t + 1) // parts
        found[t] = -1
        if _count_bad(indices, lo, hi, limit):
            for j in range(lo, hi):
                if np.uint64(indices[j]) >= limit:
                    found[t] = j
                    break
    for t in range(parts):
        if found[t] >= 0:
            return found[t]
    return -1


@compiled
def offsets_of_lengths(lengths, offsets):
    """offsets[0] = 0, offsets[b + 1] = lengths[0] + ... + lengths[b]. Returns (first
    negative length's position or -1, the largest length)."""
    return _lengths_to_offsets(lengths, offsets)


@compiled
def _lengths_to_offsets(lengths, offsets):
    # offsets_of_lengths' loop, for lookup_one_part too (a kernel that calls a kernel
    # puts the callee's numba dispatcher in place of its name in this module, so public
    # kernels with twins are never called from compiled code)
    # the running total saturates at the int64 maximum instead of wrapping (LENGTHS
    # [2**63 - 1, 2**63 - 1, 4] wrapped to 2 and passed as two indices' lengths): the
    # last offset then never equals an index count, and the caller refuses the lengths
    top = np.int64(9223372036854775807)
    total = np.int64(0)
    longest = 0
    offsets[0] = 0
    for b in range(lengths.size):
        n = np.int64(lengths[b])
        if n < 0:
            return b, 0
        total = top if n > top - total else total + n
        offsets[b + 1] = total
        longest = max(longest, n)
    return -1, longest


@compiled
def relative_offsets(raw, offsets):
    """offsets[b] = raw[b] - raw[0] for the raw entries there are (offsets may have one
    more entry, filled by the caller). Returns (the first b with raw[b + 1] < raw[b]
    or -1, the largest difference)."""
    base = np.int64(raw[0])
    longest = 0
    offsets[0] = 0
    for b in range(1, raw.size):
        step = np.int64(raw[b]) - np.int64(raw[b - 1])
        if step < 0:
            return b - 1, 0
        offsets[b] = np.int64(raw[b]) - base
        longest = max(longest, step)
    return -1, longest


@first_bad_index.numpy_twin
def _first_bad_index_numpy(indices, n_rows, parts, found):
    n = indices.size
    bad = np.flatnonzero(indices.view(np.uint64) >= np.uint64(n_rows))   # negatives wrap to huge
    for t in range(parts):
        lo, hi = n * t // parts, n * (t + 1) // parts
        k = np.searchsorted(bad, lo)
        found[t] = bad[k] if k < bad.size and bad[k] < hi else -1
    return int(bad[0]) if bad.size else -1


@offsets_of_lengths.numpy_twin
def _offsets_of_lengths_numpy(lengths, offsets):
    n = lengths.astype(np.int64)
    offsets[0] = 0
    negative = np.flatnonzero(n < 0)
    if negative.size:
        b = int(negative[0])
        offsets[1:b + 1] = np.cumsum(n[:b])
        return b, 0
    sums = np.cumsum(n)
    wrapped = np.flatnonzero(sums < 0)          # non-negative terms: the first wrap turns negative
    if wrapped.size:
        sums[wrapped[0]:] = np.iinfo(np.int64).max       # saturate, as the kernel does
    offsets[1:n.size + 1] = sums
    return -1, int(max(0, n.max())) if n.size else 0


@relative_offsets.numpy_twin
def _relative_offsets_numpy(raw, offsets):
    r = raw.astype(np.int64)
    offsets[0] = 0
    steps = np.diff(r)
    down = np.flatnonzero(steps < 0)
    if down.size:
        b = int(down[0])
        offsets[1:b + 1] = r[1:b + 1] - r[0]
        return b, 0
    offsets[1:r.size] = r[1:] - r[0]
    return -1, int(max(0, steps.max())) if steps.size else 0


# one-part lookups (small bags, a one-thread team) run these copies: no parallel region,
# whose start and join cost more than a few hundred indices take to sum
first_bad_index_serial = serial_variant(first_bad_index, "first_bad_index_serial")
bags_serial = serial_variant(bags, "bags_serial")
