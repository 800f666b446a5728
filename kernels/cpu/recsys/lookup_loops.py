"""Compiled loops of the embedding lookups (sparse_lengths.py calls them; it checks
every shape, length and index and prepares every argument first: nothing here
checks bounds).

    bags(width, table, row_stride, kind, sb_at, indices, wide, offsets, weights, wmode, mean,
         out, tiles, tile_bytes, dist, parts, part_rows, part_bags)
        out[b] = sum over j in [offsets[b], offsets[b+1]) of w_j * value(row indices[j]),
        over `parts` parts of the index positions on the team (see _part); bags cut by a
        part boundary are summed in part_rows and finished by merge_partials.
    merge_partials(out, offsets, mean, part_rows, part_bags)
    first_bad_index(indices, wide, n, n_rows, parts, found) -> first position with an
        index outside [0, n_rows), or -1
    offsets_of_lengths(lengths, offsets) -> (first negative length or -1, max length)
    relative_offsets(raw, offsets) -> (first position where raw decreases or -1, max step)

The table and the indices are passed as addresses (row r of the table starts at
table + r * row_stride; indices are int64 when `wide`, else int32) and the value
encoding as `kind`, and the lane width (of WIDTHS) picks one of the copies of
_segment compiled into the kernel, so one compiled kernel serves every table dtype,
layout, row width and index dtype: numba needs seconds to compile a parallel kernel,
and would compile one for every combination of argument types.
"""
import numpy as np

from ..runtime.jit import LazyGlobal, compiled, prange

vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vload_f16 = LazyGlobal(".simd", "vload_f16")
vload_u8 = LazyGlobal(".simd", "vload_u8")
vload_u4 = LazyGlobal(".simd", "vload_u4")
vload_u2 = LazyGlobal(".simd", "vload_u2")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vmuls = LazyGlobal(".simd", "vmuls")
vstore = LazyGlobal(".simd", "vstore")
vstore_fields = LazyGlobal(".simd", "vstore_fields")
prefetch = LazyGlobal(".simd", "prefetch")
load_f32 = LazyGlobal(".simd", "load_f32")
load_f16 = LazyGlobal(".simd", "load_f16")
load_index = LazyGlobal(".simd", "load_index")
LANES_64 = LazyGlobal(".simd", "LANES_64")
LANES_32 = LazyGlobal(".simd", "LANES_32")
LANES_16 = LazyGlobal(".simd", "LANES_16")
LANES_8 = LazyGlobal(".simd", "LANES_8")
LANES_4 = LazyGlobal(".simd", "LANES_4")
LANES_2 = LazyGlobal(".simd", "LANES_2")
LANES_1 = LazyGlobal(".simd", "LANES_1")
WIDTHS = (64, 32, 16, 8, 4, 2, 1)

# kind: how a row holds its values. The fused kinds keep scale and bias after the values
# (FUSED8: float32 at byte sb_at and sb_at + 4; FUSED4/FUSED2: float16 at sb_at, sb_at + 2).
FLOAT32, FLOAT16, FUSED8, FUSED4, FUSED2 = 0, 1, 2, 3, 4
# wmode: how each row is weighted
NO_WEIGHTS, PER_INDEX, POSITIONAL = 0, 1, 2


@compiled
def _segment(lanes, table, row_stride, kind, sb_at, indices, wide, weights, wmode, a, z, bag_start, scale,
             dest, dest_row, tiles, tile_bytes, dist, ahead_limit):
    """dest[dest_row] = scale * sum of the weighted rows of positions [a, z), one column
    tile at a time with its sums in registers (lanes). Rows are prefetched `dist`
    positions ahead: within [a, z) for the tile being summed, and during the last tile
    on past z up to ahead_limit (the next bags' first tile), so the prefetch stream runs
    on across bag boundaries."""
    one = np.float32(1.0)
    for ti in range(tiles.size):
        col = tiles[ti]
        at = tile_bytes[ti]
        if ti > 0:                     # this tile's columns of the first rows
            for j in range(a, min(a + dist, z)):
                prefetch(table + load_index(indices, j, wide) * row_stride + at)
        limit = ahead_limit if ti == tiles.size - 1 else z
        acc = vzeros(lanes)
        bias_sum = np.float32(0.0)
        for j in range(a, z):
            p = j + dist
            if p < limit:
                prefetch(table + load_index(indices, p, wide) * row_stride + (at if p < z else tile_bytes[0]))
            row = table + load_index(indices, j, wide) * row_stride
            w = one
            if wmode == PER_INDEX:
                w = weights[j]
            elif wmode == POSITIONAL:
                w = weights[j - bag_start]
            if kind == FLOAT32:            # each kind its own FMA: LLVM folds the loads into it
                acc = vfma(acc, w, vload_f32(lanes, row + at))
            elif kind == FLOAT16:
                acc = vfma(acc, w, vload_f16(lanes, row + at))
            elif kind == FUSED8:
                bias_sum += w * load_f32(row + sb_at + 4)
                acc = vfma(acc, w * load_f32(row + sb_at), vload_u8(lanes, row + at))
            else:
                bias_sum += w * load_f16(row + sb_at + 2)
                w = w * load_f16(row + sb_at)
                if kind == FUSED4:
                    acc = vfma(acc, w, vload_u4(lanes, row + at))
                else:
                    acc = vfma(acc, w, vload_u2(lanes, row + at))
        if kind >= FUSED8:
            acc = vadds(acc, bias_sum)
        if scale != one:
            acc = vmuls(acc, scale)
        if kind == FUSED4:
            vstore_fields(dest, dest_row, col, acc, 2)
        elif kind == FUSED2:
            vstore_fields(dest, dest_row, col, acc, 4)
        else:
            vstore(dest, dest_row, col, acc)


@compiled
def _segment_of_width(width, table, row_stride, kind, sb_at, indices, wide, weights, wmode, a, z, bag_start, scale,
                      dest, dest_row, tiles, tile_bytes, dist, ahead_limit):
    """_segment with `width` (one of WIDTHS) lanes."""
    args = (table, row_stride, kind, sb_at, indices, wide, weights, wmode, a, z, bag_start, scale, dest, dest_row,
            tiles, tile_bytes, dist, ahead_limit)
    if width == 64:
        _segment(LANES_64, *args)
    elif width == 32:
        _segment(LANES_32, *args)
    elif width == 16:
        _segment(LANES_16, *args)
    elif width == 8:
        _segment(LANES_8, *args)
    elif width == 4:
        _segment(LANES_4, *args)
    elif width == 2:
        _segment(LANES_2, *args)
    else:
        _segment(LANES_1, *args)


@compiled
def _part(width, table, row_stride, kind, sb_at, indices, wide, offsets, weights, wmode, mean, out, tiles,
          tile_bytes, dist, t, parts, part_rows, part_bags):
    """Part t of `parts`: index positions [lo, hi) with lo = total * t // parts. It writes
    the bags that start in [lo, hi) (the last part also the empty bags at the end);
    a bag that starts before lo (its head here) or runs past hi (its tail here) is
    summed into part_rows[2t] / [2t + 1] and named in part_bags[t, 0] / [t, 1]."""
    m = out.shape[0]
    total = offsets[m]
    lo = total * t // parts
    hi = total * (t + 1) // parts
    starts = offsets[:m]
    first = np.searchsorted(starts, lo)            # first bag starting at or after lo
    end = m if t == parts - 1 else np.searchsorted(starts, hi)
    for j in range(lo, min(lo + dist, hi)):
        prefetch(table + load_index(indices, j, wide) * row_stride + tile_bytes[0])
    one = np.float32(1.0)
    if lo < hi and first > 0 and (first == m or offsets[first] > lo):
        head = first - 1                           # a bag that began in an earlier part
        _segment_of_width(width, table, row_stride, kind, sb_at, indices, wide, weights, wmode, lo,
                 min(offsets[head + 1], hi), offsets[head], one, part_rows, 2 * t, tiles, tile_bytes, dist, hi)
        part_bags[t, 0] = head
    for b in range(first, end):
        s = offsets[b]
        e = offsets[b + 1]
        if e > hi:                                 # runs on into the next part
            _segment_of_width(width, table, row_stride, kind, sb_at, indices, wide, weights, wmode, s, hi, s, one,
                     part_rows, 2 * t + 1, tiles, tile_bytes, dist, hi)
            part_bags[t, 1] = b
        else:
            scale = one / np.float32(e - s) if mean and e > s else one
            _segment_of_width(width, table, row_stride, kind, sb_at, indices, wide, weights, wmode, s, e, s, scale,
                     out, b, tiles, tile_bytes, dist, hi)


@compiled(parallel=True)
def bags(width, table, row_stride, kind, sb_at, indices, wide, offsets, weights, wmode, mean, out, tiles,
         tile_bytes, dist, parts, part_rows, part_bags):
    """All bags, `parts` parts on the team (see _part); then merge_partials."""
    for t in prange(parts):
        _part(width, table, row_stride, kind, sb_at, indices, wide, offsets, weights, wmode, mean, out, tiles,
              tile_bytes, dist, t, parts, part_rows, part_bags)


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


@compiled(parallel=True)
def first_bad_index(indices, wide, n, n_rows, parts, found):
    """First position of the n indices at address `indices` whose value is outside
    [0, n_rows), or -1; `parts` parts on the team, each counting bad indices per 1024
    (a vectorised pass) and scanning only a block that has one. found: int64 scratch
    of `parts` entries."""
    limit = np.uint64(n_rows)
    for t in prange(parts):
        lo, hi = n * t // parts, n * (t + 1) // parts
        found[t] = -1
        for b0 in range(lo, hi, 1024):
            b1 = min(hi, b0 + 1024)
            bad = 0
            for j in range(b0, b1):
                bad += np.uint64(load_index(indices, j, wide)) >= limit     # negatives wrap to huge
            if bad:
                for j in range(b0, b1):
                    if np.uint64(load_index(indices, j, wide)) >= limit:
                        found[t] = j
                        break
                break
    for t in range(parts):
        if found[t] >= 0:
            return found[t]
    return -1


@compiled
def offsets_of_lengths(lengths, offsets):
    """offsets[0] = 0, offsets[b + 1] = lengths[0] + ... + lengths[b]. Returns (first
    negative length's position or -1, the largest length)."""
    total = 0
    longest = 0
    offsets[0] = 0
    for b in range(lengths.size):
        n = np.int64(lengths[b])
        if n < 0:
            return b, 0
        total += n
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
