"""Max, average and global pooling (NCHW, N-d).

Public:
    max_pool(x, kernel, strides, pads, dilations=None, ceil_mode=False, *, scratch=None)
    average_pool(x, kernel, strides, pads, count_include_pad=False, ceil_mode=False, *, scratch=None)
    global_pool(x, kind)            kind "max" or "avg"/"average"
    pool_output_shape(spatial, kernel, strides, pads, dilations, ceil_mode)
    prepared_pool(shape, dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad) -> plan or None
    run_prepared(x, plan)           an op's pool for a shape it saw before, no set-up per call

2-D float32/float64 pools run compiled kernels:
  * strided in both dims (the downsampling pools of CNNs), `_strided_pool2d`: per
    output row the window's input rows are combined into one padded row (contiguous,
    vectorised), then each output combines its window's columns of that row; one
    pass, no padded copy of the input (3x3/s2 max on 64x111x111: 0.49 -> 0.24 ms);
    a 3-row window inside the map is combined in one pass, not three, and a constant
    column stride 2 lets LLVM vectorise the column loads (2 threads, alternating in one
    process: 3x3/s2 max on 64x111x111 0.22-0.26 -> 0.15-0.17 ms, average 0.17-0.23 ->
    0.14 ms);
  * 2x2 windows at stride 2 (DenseNet), `_pool2x2s2`: the same method with constant
    offsets, in a kernel of its own (128x56x56 average 0.30-0.33 -> 0.12 ms);
  * a stride-1 window covering the whole plane (and maybe padding), `_global_pool2d`:
    one fold of each plane (1024 x 6 x 6, 7x7 window with end pads: 0.33 -> 0.02 ms);
  * stride-1 pools whose output has the input's size (Inception's 3x3 pad-1 pool
    branches, max and average), `_same_pool2d`: separable with no padded copy, a run
    of planes read as one flat array; each row's kw-wide combines are kw shifted
    slices of it, then kh of those rows shifted by W; taps past a row or plane end
    are masked to the fill (-inf / 0) inside the same vectorised loop (a scalar
    clipped path per edge cell cost more than the rest on 7x7 maps), so there is no
    bounds test in the loops (3x3 on 1024x7x7, one thread: 0.24-0.41 -> 0.07-0.12 ms);
  * other stride-1 max, `_stride1_max2d`: separable, each
    padded row's kw-wide maxima, then the maximum of kh of those rows (3x3 on
    192x27x27: 1.0-1.4 -> 0.28 ms);
  * stride-1 average, `_stride1_pool2d`: each plane padded into
    a grid read as one flat array, every window cell one shifted slice of it, so the
    taps are long contiguous loops (3x3 average on 256x28x28: 0.36 -> 0.25 ms).
Other ranks, dtypes and mixed strides reduce one dim at a time (a box max or sum is
separable) with elementwise np.maximum / np.add over strided views of a padded copy
(a reused buffer when `scratch` is given); stride-1 pools there shift the padded
buffer read as one flat array, so each pass is a single contiguous call.
Max pooling propagates NaN (np.maximum's semantics) on both paths. Average divisors
are separable per dimension, so they are an outer product of 1-D counts rather than
a second pooling pass.
"""
import functools

import numpy as np

from .conv import check_window_sizes, default_scratch, padded_image
from ..runtime.buffers import team_work
from ..runtime.jit import LazyGlobal, compiled, prange, serial_variant, team_blocks, thread_id
from ..runtime.output_pool import output_array

LANES_16 = LazyGlobal(".simd", "LANES_16")
address = LazyGlobal(".simd", "address")
vadd = LazyGlobal(".simd", "vadd")
vmul = LazyGlobal(".simd", "vmul")
vmax_nan = LazyGlobal(".simd", "vmax_nan")
vload_f32_lanes = LazyGlobal(".simd", "vload_f32_lanes")
vload_f32_even = LazyGlobal(".simd", "vload_f32_even")
vload_f32_odd = LazyGlobal(".simd", "vload_f32_odd")
vstore_f32_lanes = LazyGlobal(".simd", "vstore_f32_lanes")


def _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode):
    """Extra end padding so a ceil-mode output size is reached."""
    k = len(kernel)
    extra = [0] * k
    if not ceil_mode:
        return extra
    for i in range(k):
        span = (kernel[i] - 1) * dilations[i] + 1
        total = spatial[i] + pads[i] + pads[i + k] - span
        out = -(-total // strides[i]) + 1
        # A last window must start inside the input or the begin padding.
        if (out - 1) * strides[i] >= spatial[i] + pads[i]:
            out -= 1
        extra[i] = max(0, (out - 1) * strides[i] + span - (spatial[i] + pads[i] + pads[i + k]))
    return extra


def pool_output_shape(spatial, kernel, strides, pads, dilations, ceil_mode):
    k = len(kernel)
    extra = _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode)
    return tuple((spatial[i] + pads[i] + pads[k + i] + extra[i] - ((kernel[i] - 1) * dilations[i] + 1))
                 // strides[i] + 1 for i in range(k))


def _check(shape, itemsize, kernel, strides, pads, dilations):
    k = len(kernel)
    if len(shape) != k + 2:
        raise ValueError("kernel %s needs a %d-D input, got shape %s" % (list(kernel), k + 2, list(shape)))
    if len(strides) != k or len(pads) != 2 * k or len(dilations) != k:
        raise ValueError("strides %s / pads %s / dilations %s do not match kernel %s"
                         % (list(strides), list(pads), list(dilations), list(kernel)))
    if any(v <= 0 for v in list(kernel) + list(strides) + list(dilations)):
        raise ValueError("kernel %s, strides %s and dilations %s must be positive"
                         % (list(kernel), list(strides), list(dilations)))
    out = pool_output_shape(shape[2:], kernel, strides, pads, dilations, False)
    check_window_sizes(shape, tuple(shape[:2]) + tuple(out), pads, itemsize, pads_input=False)


def _reduce_windows(x, kernel, strides, pads, dilations, ceil_mode, fill, combine, scratch):
    """Elementwise `combine` over kernel offsets; returns (out, extra end pads)."""
    k = len(kernel)
    spatial = x.shape[2:]
    extra = _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode)
    full = list(pads[:k]) + [pads[k + i] + extra[i] for i in range(k)]
    out_spatial = pool_output_shape(spatial, kernel, strides, pads, dilations, ceil_mode)
    if any(o <= 0 for o in out_spatial):
        raise ValueError("kernel %s does not fit the padded input %s"
                         % (list(kernel), [spatial[i] + full[i] + full[k + i] for i in range(k)]))
    lead = x.shape[0] * x.shape[1]
    flat = x.reshape((lead,) + tuple(spatial))
    xp = padded_image(scratch, "pool_pad", flat, full, fill)
    if all(s == 1 for s in strides):
        return _reduce_flat(xp, kernel, dilations, out_spatial, combine).reshape(x.shape[:2] + out_spatial), extra
    # Max and sum over a box are separable: reduce one dim at a time, sum(K_i - 1)
    # elementwise passes instead of prod(K_i) - 1. Outer dims first: their passes read
    # whole contiguous rows of the biggest array, and the strided pass along the last
    # dim then runs on an array already shrunk by the other strides.
    cur = xp
    for d in range(k):
        axis = 1 + d
        span = (out_spatial[d] - 1) * strides[d] + 1

        def along(o):
            index = [slice(None)] * cur.ndim
            index[axis] = slice(o * dilations[d], o * dilations[d] + span, strides[d])
            return cur[tuple(index)]
        if kernel[d] == 1:
            out = np.array(along(0), copy=True)
        else:
            out = combine(along(0), along(1))      # fresh array, no separate copy pass
            for o in range(2, kernel[d]):
                combine(out, along(o), out=out)
        cur = out
    return cur.reshape(x.shape[:2] + out_spatial), extra


def _reduce_flat(xp, kernel, dilations, out_spatial, combine):
    """Stride-1 windows on the padded buffer read as one flat array: the window offset
    along dim d is a shift by o * dilation * (elements per step of d), so every pass is
    one long contiguous combine (SIMD, one NumPy inner loop) instead of one call per
    output row, which dominates on small maps (576 x 14 x 14 average: 0.22 -> 0.155 ms).
    Positions whose window runs past a row, plane or image are computed on the way and
    dropped by the final crop; the flat length shrinks by each dim's reach, so no read
    goes past the buffer."""
    xp = np.ascontiguousarray(xp)
    shape = xp.shape
    steps = [int(np.prod(shape[2 + d:], dtype=np.int64)) for d in range(len(kernel))]
    cur = xp.reshape(-1)
    length = cur.size
    for d in range(len(kernel)):
        if kernel[d] == 1:
            continue
        shift = dilations[d] * steps[d]
        length -= (kernel[d] - 1) * shift
        out = combine(cur[:length], cur[shift:shift + length])
        for o in range(2, kernel[d]):
            combine(out, cur[o * shift:o * shift + length], out=out)
        cur = out
    # Valid outputs sit at the flat positions of their window's first element, laid
    # out like the padded buffer; the last of them is the last computed value.
    valid = np.lib.stride_tricks.as_strided(cur, (shape[0],) + tuple(out_spatial),
                                            tuple(n * cur.itemsize for n in [steps[0] * shape[1]] + steps),
                                            writeable=False)
    return np.array(valid, copy=True)


@compiled
def _nan_max(a, b):
    """The larger of a and b, NaN when either is NaN (np.maximum's semantics)."""
    return a if ((a > b) | (a != a)) else b


@compiled(inline=True)
def _combine_into(acc, src, first, is_max):
    """acc[i] = src[i] when first, else max(acc[i], src[i]) (NaN-propagating) when
    is_max, else acc[i] + src[i], over acc's length."""
    n = acc.shape[0]
    if first:
        for i in range(n):
            acc[i] = src[i]
    elif is_max:
        for i in range(n):
            acc[i] = _nan_max(acc[i], src[i])
    else:
        for i in range(n):
            acc[i] += src[i]


@compiled(inline=True)
def _combine3_into(acc, r0, r1, r2, is_max):
    """acc[i] = max (NaN-propagating) or sum of r0[i], r1[i], r2[i] over acc's length."""
    n = acc.shape[0]
    if is_max:
        for i in range(n):
            acc[i] = _nan_max(_nan_max(r0[i], r1[i]), r2[i])
    else:
        for i in range(n):
            acc[i] = r0[i] + r1[i] + r2[i]


@compiled(parallel=True)
def _strided_pool2d(x, out, inv, kh, kw, sh, sw, dh, pt, pl, is_max, blocks):
    """All planes (in `blocks` blocks on the team) of a 2-D max (is_max) or average pool with column dilation 1.
    x (P, H, W), out (P, OH, OW); inv (OH, OW): 1 / divisor per average window (unused
    for max). Windows start at (oy * sh - pt, ox * sw - pl); cells outside the input
    are skipped (max) or add nothing (average). The caller checked that pads >= 0."""
    h, w = x.shape[1], x.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    width = max(pl + w, (ow - 1) * sw + kw)
    fill = -np.inf if is_max else 0.0
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        grid = np.empty((1, width), x.dtype)     # a 2-D row: its loads vectorise, a 1-D slice's did not
        row = grid[0]
        for i in range(width):
            row[i] = fill
        inner = row[pl:pl + w]
        for p in range(lo, hi):
            for oy in range(oh):
                # vertical: the window's input rows into `inner` (NaN-propagating max)
                y0 = oy * sh - pt
                if kh == 3 and y0 >= 0 and y0 + 2 * dh < h:
                    # the common 3-row window inside the map: one pass, not three
                    _combine3_into(inner, x[p, y0], x[p, y0 + dh], x[p, y0 + 2 * dh], is_max)
                else:
                    first = True
                    for ky in range(kh):
                        y = y0 + ky * dh
                        if y < 0 or y >= h:
                            continue
                        _combine_into(inner, x[p, y], first, is_max)
                        first = False
                    if first:                           # the window covers padding only
                        for i in range(w):
                            inner[i] = fill
                # horizontal: each output's kw columns (constant offsets for kw 2 and 3,
                # and a constant stride 2, let LLVM vectorise the strided loads)
                dst = out[p, oy]
                if is_max and kw == 3 and sw == 2:
                    for ox in range(ow):
                        dst[ox] = _nan_max(_nan_max(row[2 * ox], row[2 * ox + 1]), row[2 * ox + 2])
                elif is_max and kw == 3:
                    for ox in range(ow):
                        j = ox * sw
                        dst[ox] = _nan_max(_nan_max(row[j], row[j + 1]), row[j + 2])
                elif is_max and kw == 2:
                    for ox in range(ow):
                        j = ox * sw
                        dst[ox] = _nan_max(row[j], row[j + 1])
                elif is_max:
                    for ox in range(ow):
                        j = ox * sw
                        m = row[j]
                        for kx in range(1, kw):
                            m = _nan_max(m, row[j + kx])
                        dst[ox] = m
                else:
                    scale = inv[oy]
                    if kw == 3 and sw == 2:
                        for ox in range(ow):
                            dst[ox] = (row[2 * ox] + row[2 * ox + 1] + row[2 * ox + 2]) * scale[ox]
                    elif kw == 3:
                        for ox in range(ow):
                            j = ox * sw
                            dst[ox] = (row[j] + row[j + 1] + row[j + 2]) * scale[ox]
                    elif kw == 2:
                        for ox in range(ow):
                            j = ox * sw
                            dst[ox] = (row[j] + row[j + 1]) * scale[ox]
                    else:
                        for ox in range(ow):
                            j = ox * sw
                            acc = row[j]
                            for kx in range(1, kw):
                                acc += row[j + kx]
                            dst[ox] = acc * scale[ox]


@compiled(parallel=True)
def _pool2x2s2(x, out, inv, pt, pl, is_max, blocks):
    """2x2 windows at stride 2 (DenseNet's transition pools), all planes in `blocks`
    blocks on the team: _strided_pool2d's method and order of operations (each output
    row's two input rows into one padded row, then pairs of its columns) with constant
    offsets everywhere. A kernel of its own: the same special case inside
    _strided_pool2d made LLVM compile that kernel's 3x3 loops 2x slower (measured).
    x (P, H, W), out (P, OH, OW), inv (OH, OW) as there; the caller checked pads >= 0."""
    h, w = x.shape[1], x.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    width = max(pl + w, 2 * ow)
    fill = -np.inf if is_max else 0.0
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        grid = np.empty((1, width), x.dtype)     # a 2-D row, as in _strided_pool2d
        row = grid[0]
        for i in range(width):
            row[i] = fill
        inner = row[pl:pl + w]
        for p in range(lo, hi):
            for oy in range(oh):
                y0 = 2 * oy - pt
                if y0 >= 0 and y0 + 1 < h:
                    a, b = x[p, y0], x[p, y0 + 1]
                    if is_max:
                        for i in range(w):
                            inner[i] = _nan_max(a[i], b[i])
                    else:
                        for i in range(w):
                            inner[i] = a[i] + b[i]
                else:                               # one row (or none) inside the map
                    y = y0 if y0 >= 0 else y0 + 1
                    if 0 <= y < h:
                        a = x[p, y]
                        for i in range(w):
                            inner[i] = a[i]
                    else:
                        for i in range(w):
                            inner[i] = fill
                dst = out[p, oy]
                if is_max:
                    for ox in range(ow):
                        dst[ox] = _nan_max(row[2 * ox], row[2 * ox + 1])
                else:
                    scale = inv[oy]
                    for ox in range(ow):
                        dst[ox] = (row[2 * ox] + row[2 * ox + 1]) * scale[ox]


@compiled(inline=True)
def _combine_vec(acc, v, is_max):
    return vmax_nan(acc, v) if is_max else vadd(acc, v)


def _pool3x3s2_width(w, ow, pl):
    """Floats of _pool3x3s2_f32's row buffer: pl fill columns, the combined row, fill
    past it; the last output vector reads up to 2 * (16 * ceil(ow / 16)) + 2 columns."""
    return max(pl + w, 32 * ((ow + 15) // 16) + 2)


@compiled(parallel=True)
def _pool3x3s2_f32(x, out, inv, pt, pl, is_max, width, work, stride, blocks):
    """3x3 windows at stride 2 on float32 (the downsampling max pools of ResNet,
    SqueezeNet, Inception), all planes in `blocks` blocks on the team: _strided_pool2d's
    method and order of operations in 16-lane vectors, masked at row ends (LLVM
    vectorised that kernel's loops with a scalar remainder, which on maps of 13-27
    outputs was most of the row). Per output row: the window's input rows combined into
    a padded row buffer, 16 columns a vector; then 16 outputs a step from the buffer's
    even, odd and next even columns (simd.vload_f32_even / _odd). Max pools skip the
    buffer where a vector's windows lie inside the map: the same maxima in the same
    order from the input rows (256x27x27 55 -> 45 us, 576x14x14 49 -> 47). x (P, H, W),
    out (P, OH, OW), inv (OH, OW) as in _strided_pool2d; the caller checked pads >= 0
    and that every window holds at least one input cell. A thread's row buffer is its
    region of `work` (from thread_id() * stride, `width` = _pool3x3s2_width floats)."""
    h, w = x.shape[1], x.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    fill = -np.inf if is_max else 0.0
    n = LANES_16
    x0 = address(x)
    o0 = address(out)
    plane_in, plane_out, row_in = h * w * 4, oh * ow * 4, w * 4
    # max pools: output vectors [d0, d1) of a row whose window rows are all inside the
    # map read their columns from the input rows themselves: every window of the vector
    # inside the row (no pad column); its lanes past the row's last output read on into
    # the next row and are not stored. The other vectors read the row buffer.
    d0 = 16 if pl > 0 else 0
    d1 = d0
    while is_max and d1 < ow and 2 * min(d1 + 15, ow - 1) - pl + 2 <= w - 1:
        d1 += 16
    if d1 == d0:
        d0 = d1 = ow
    left_to = min(w, 48) if d0 > 0 else 0             # input columns the left vector reads
    right_from = min(w, (2 * d1 - pl) // 16 * 16)     # ... and those from vector d1 on
    # the last direct vector reads 34 columns from 2 * (d1 - 16) - pl of the window's
    # last row: rows whose reads would pass the array's end take the buffer
    reach = 2 * (d1 - 16) - pl + 34
    total = x.shape[0] * h * w
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        row = work[thread_id() * stride:thread_id() * stride + width]      # this thread's region
        for i in range(width):
            row[i] = fill
        inner = address(row) + pl * 4
        r0 = address(row)
        for p in range(lo, hi):
            for oy in range(oh):
                y0 = 2 * oy - pt
                ya, yb = max(y0, 0), min(y0 + 3, h)       # the window's rows inside the map
                src = x0 + p * plane_in + ya * row_in
                dst = o0 + p * plane_out + oy * ow * 4
                if y0 >= 0 and yb - ya == 3 and d1 > d0 and p * h * w + (y0 + 2) * w + reach <= total:
                    _rows_into(src, row_in, ya, yb, inner, 0, left_to, w, is_max, n)
                    _rows_into(src, row_in, ya, yb, inner, right_from, w, w, is_max, n)
                    _buffered_outputs(r0, dst, address(inv) + oy * ow * 4, 0, d0, ow, is_max, n)
                    for c in range(d0, d1, 16):
                        a = src + (2 * c - pl) * 4
                        e, o, e2 = vload_f32_even(n, a), vload_f32_odd(n, a), vload_f32_even(n, a + 8)
                        for y in range(1, 3):           # rows first, then columns: the buffered order
                            b = a + y * row_in
                            e = vmax_nan(e, vload_f32_even(n, b))
                            o = vmax_nan(o, vload_f32_odd(n, b))
                            e2 = vmax_nan(e2, vload_f32_even(n, b + 8))
                        vstore_f32_lanes(dst + c * 4, vmax_nan(vmax_nan(e, o), e2), 0, min(16, ow - c))
                    _buffered_outputs(r0, dst, address(inv) + oy * ow * 4, d1, ow, ow, is_max, n)
                else:
                    _rows_into(src, row_in, ya, yb, inner, 0, w, w, is_max, n)
                    _buffered_outputs(r0, dst, address(inv) + oy * ow * 4, 0, ow, ow, is_max, n)


@compiled(inline=True)
def _rows_into(src, row_in, ya, yb, inner, c_from, c_to, w, is_max, n):
    """The window rows ya..yb-1 (from src, row ya) combined column by column into the
    row buffer at `inner`, columns [c_from, c_to) in 16-column vectors (c_from a
    multiple of 16; masked at the map's width w)."""
    for c in range(c_from, c_to, 16):
        k = min(16, w - c)
        acc = vload_f32_lanes(n, src + c * 4, 0, k)
        for y in range(ya + 1, yb):
            acc = _combine_vec(acc, vload_f32_lanes(n, src + (y - ya) * row_in + c * 4, 0, k), is_max)
        vstore_f32_lanes(inner + c * 4, acc, 0, k)


@compiled(inline=True)
def _buffered_outputs(r0, dst, inv_row, c_from, c_to, ow, is_max, n):
    """Outputs [c_from, c_to) of a row (16 a vector) from the row buffer at r0: its
    even, odd and next even columns; times inv for average pools."""
    for c in range(c_from, c_to, 16):
        a = r0 + c * 8
        v = _combine_vec(_combine_vec(vload_f32_even(n, a), vload_f32_odd(n, a), is_max),
                         vload_f32_even(n, a + 8), is_max)
        k = min(16, ow - c)
        if not is_max:
            v = vmul(v, vload_f32_lanes(n, inv_row + c * 4, 0, k))
        vstore_f32_lanes(dst + c * 4, v, 0, k)


def _padded_planes(x, top, left, rows, width, fill):
    """x (P, H, W) in a (P, rows, width) grid filled with `fill`, x at (top, left)."""
    grid = np.full((x.shape[0], rows, width), fill, x.dtype)
    grid[:, top:top + x.shape[1], left:left + x.shape[2]] = x
    return grid


def _window_cells(grid, oh, ow, sh, sw, dy, dx):
    """grid[:, oy * sh + dy, ox * sw + dx] for every output (oy, ox)."""
    return grid[:, dy:dy + (oh - 1) * sh + 1:sh, dx:dx + (ow - 1) * sw + 1:sw]


@_strided_pool2d.numpy_twin
def _strided_pool2d_numpy(x, out, inv, kh, kw, sh, sw, dh, pt, pl, is_max, blocks):
    oh, ow = out.shape[1], out.shape[2]
    fill = -np.inf if is_max else 0.0
    rows = max(pt + x.shape[1], (oh - 1) * sh + (kh - 1) * dh + 1)
    width = max(pl + x.shape[2], (ow - 1) * sw + kw)
    grid = _padded_planes(x, pt, pl, rows, width, fill)
    combine = np.maximum if is_max else np.add
    # rows of each window first, then its columns: the kernel's order of operations
    vertical = grid[:, 0:(oh - 1) * sh + 1:sh].copy()
    for ky in range(1, kh):
        combine(vertical, grid[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh], out=vertical)
    acc = _window_cells(vertical, oh, ow, 1, sw, 0, 0).copy()
    for kx in range(1, kw):
        combine(acc, _window_cells(vertical, oh, ow, 1, sw, 0, kx), out=acc)
    out[...] = acc if is_max else acc * inv


@_pool2x2s2.numpy_twin
def _pool2x2s2_numpy(x, out, inv, pt, pl, is_max, blocks):
    _strided_pool2d_numpy(x, out, inv, 2, 2, 2, 2, 1, pt, pl, is_max, blocks)


@_pool3x3s2_f32.numpy_twin
def _pool3x3s2_f32_numpy(x, out, inv, pt, pl, is_max, width, work, stride, blocks):
    _strided_pool2d_numpy(x, out, inv, 3, 3, 2, 2, 1, pt, pl, is_max, blocks)


@compiled(parallel=True)
def _stride1_pool2d(x, out, inv, kh, kw, dh, dw, pt, pl, is_max, blocks):
    """All planes (in `blocks` blocks on the team) of a stride-1 2-D pool: each plane is copied into a padded grid
    (fill -inf for max, 0 for average) whose rows are read as one flat array, so
    window cell (ky, kx) of every output is one shifted slice of it: the taps are
    combined in long contiguous loops (the columns past a row's end are computed and
    dropped), then the valid columns are written out (times inv for average)."""
    h, w = x.shape[1], x.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    wp = max(pl + w, ow + (kw - 1) * dw)
    rows = max(pt + h, oh + (kh - 1) * dh) + 1
    fill = -np.inf if is_max else 0.0
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        grid = np.empty((rows, wp), x.dtype)
        flat = grid.reshape(rows * wp)
        for i in range(rows * wp):
            flat[i] = fill
        length = oh * wp
        acc = np.empty(length, x.dtype)
        for p in range(lo, hi):
            for y in range(h):
                src = x[p, y]
                dst = grid[y + pt, pl:pl + w]
                for i in range(w):
                    dst[i] = src[i]
            first = True
            for ky in range(kh):
                for kx in range(kw):
                    start = ky * dh * wp + kx * dw
                    _combine_into(acc, flat[start:start + length], first, is_max)
                    first = False
            for oy in range(oh):
                src = acc[oy * wp:oy * wp + ow]
                dst = out[p, oy]
                if is_max:
                    for i in range(ow):
                        dst[i] = src[i]
                else:
                    scale = inv[oy]
                    for i in range(ow):
                        dst[i] = src[i] * scale[i]


@_stride1_pool2d.numpy_twin
def _stride1_pool2d_numpy(x, out, inv, kh, kw, dh, dw, pt, pl, is_max, blocks):
    oh, ow = out.shape[1], out.shape[2]
    fill = -np.inf if is_max else 0.0
    rows = max(pt + x.shape[1], oh + (kh - 1) * dh)
    width = max(pl + x.shape[2], ow + (kw - 1) * dw)
    grid = _padded_planes(x, pt, pl, rows, width, fill)
    combine = np.maximum if is_max else np.add
    acc = _window_cells(grid, oh, ow, 1, 1, 0, 0).copy()
    for ky in range(kh):
        for kx in range(kw):
            if ky or kx:
                combine(acc, _window_cells(grid, oh, ow, 1, 1, ky * dh, kx * dw), out=acc)
    out[...] = acc if is_max else acc * inv


@compiled(parallel=True)
def _stride1_max2d(x, out, kh, kw, dh, dw, pt, pl, blocks):
    """Stride-1 2-D max pools (Inception's pool branches), all planes in `blocks` blocks
    on the team, separably: each plane is copied into a -inf-bordered grid, every grid
    row's kw-wide maxima go into `wide` (rows, OW), then each output is the maximum of
    kh of those rows: kh + kw - 2 comparisons an output instead of kh * kw - 1 (3x3 on
    192x27x27: 1.0-1.4 -> 0.28 ms, one thread). NaN propagates (_nan_max); a maximum
    does not depend on the order of its operands, so the values are the 9-pass
    kernel's. The caller checked that pads >= 0 and the output fits the padded input."""
    h, w = x.shape[1], x.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    wp = max(pl + w, ow + (kw - 1) * dw)
    rows = max(pt + h, oh + (kh - 1) * dh)
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        grid = np.empty((rows, wp), x.dtype)
        for y in range(rows):
            g = grid[y]
            for i in range(wp):
                g[i] = -np.inf
        wide = np.empty((rows, ow), x.dtype)
        for p in range(lo, hi):
            for y in range(h):
                src = x[p, y]
                dst = grid[y + pt, pl:pl + w]
                for i in range(w):
                    dst[i] = src[i]
            for y in range(rows):           # across: kw cells of each grid row
                g = grid[y]
                d = wide[y]
                if kw == 3:
                    a, b, c = g[0:ow], g[dw:dw + ow], g[2 * dw:2 * dw + ow]
                    for i in range(ow):
                        d[i] = _nan_max(_nan_max(a[i], b[i]), c[i])
                else:
                    a = g[0:ow]
                    for i in range(ow):
                        d[i] = a[i]
                    for kx in range(1, kw):
                        b = g[kx * dw:kx * dw + ow]
                        for i in range(ow):
                            d[i] = _nan_max(d[i], b[i])
            for oy in range(oh):            # down: kh of those rows
                d = out[p, oy]
                if kh == 3:
                    a, b, c = wide[oy], wide[oy + dh], wide[oy + 2 * dh]
                    for i in range(ow):
                        d[i] = _nan_max(_nan_max(a[i], b[i]), c[i])
                else:
                    a = wide[oy]
                    for i in range(ow):
                        d[i] = a[i]
                    for ky in range(1, kh):
                        b = wide[oy + ky * dh]
                        for i in range(ow):
                            d[i] = _nan_max(d[i], b[i])


@_stride1_max2d.numpy_twin
def _stride1_max2d_numpy(x, out, kh, kw, dh, dw, pt, pl, blocks):
    _stride1_pool2d_numpy(x, out, None, kh, kw, dh, dw, pt, pl, True, blocks)


@compiled(inline=True)
def _masked_taps_into(dst, src, start, step, k, valid, vstart, fill, is_max):
    """dst[i] = the combine, in tap order j = 0..k-1, of src[start + i + j * step] where
    valid[j, vstart + i], else `fill` (NaN-propagating max when is_max, else sum), over
    dst's length: windows clipped at row or plane ends in the same vectorised loop as
    the rest (the taps and masks are plain slices)."""
    n = dst.shape[0]
    if k == 3:
        a = src[start:start + n]
        b = src[start + step:start + step + n]
        c = src[start + 2 * step:start + 2 * step + n]
        ma, mb, mc = valid[0, vstart:vstart + n], valid[1, vstart:vstart + n], valid[2, vstart:vstart + n]
        if is_max:
            for i in range(n):
                dst[i] = _nan_max(_nan_max(a[i] if ma[i] else fill, b[i] if mb[i] else fill),
                                  c[i] if mc[i] else fill)
        else:
            for i in range(n):
                dst[i] = ((a[i] if ma[i] else fill) + (b[i] if mb[i] else fill)) + (c[i] if mc[i] else fill)
    else:
        a = src[start:start + n]
        ma = valid[0, vstart:vstart + n]
        for i in range(n):
            dst[i] = a[i] if ma[i] else fill
        for j in range(1, k):
            b = src[start + j * step:start + j * step + n]
            mb = valid[j, vstart:vstart + n]
            if is_max:
                for i in range(n):
                    dst[i] = _nan_max(dst[i], b[i] if mb[i] else fill)
            else:
                for i in range(n):
                    dst[i] += b[i] if mb[i] else fill


@compiled(inline=True)
def _clipped_taps(src, base, step, first, last, is_max):
    """src[base + first * step] combined with the taps up to `last` (in order)."""
    acc = src[base + first * step]
    for j in range(first + 1, last + 1):
        if is_max:
            acc = _nan_max(acc, src[base + j * step])
        else:
            acc += src[base + j * step]
    return acc


@compiled(parallel=True)
def _same_pool2d(x, out, scale, col_valid, row_valid, h, w, kh, kw, pt, pl, is_max, blocks):
    """Stride-1 2-D pools whose output has the input's size (pt + pb = kh - 1, pl + pr =
    kw - 1, dilation 1: Inception's 3x3 pad-1 pool branches), planes in `blocks` blocks
    on the team. x and out are (P * H * W,) flat. A run of R planes (R from the masks'
    length) is read as one flat array with no padded copy: each row's kw-wide combines
    are kw slices of it shifted by one, then each output combines kh of those shifted
    by W. Taps that fall outside the plane (past a row or plane end) are masked to the
    fill (-inf for max, 0 for average): col_valid (kw, R * H * W) and row_valid (kh,
    R * H * W) say which are inside. scale (R * H * W,): 1 / divisor per position,
    tiled per plane (average). Max: _stride1_max2d's comparisons in its order with
    -inf padding, so the same values (NaN propagates); average: row sums, then the
    sum of kh of them (not _stride1_pool2d's 9-tap order: float32 rounding differs)."""
    n = h * w
    planes = x.shape[0] // n
    run = col_valid.shape[1] // n
    pr, pb = kw - 1 - pl, kh - 1 - pt
    box = np.empty(1, x.dtype)                   # the fill in x's dtype (a float64 fill
    box[0] = -np.inf if is_max else 0.0          # would widen every tap to float64)
    fill = box[0]
    for t in prange(blocks):
        lo, hi = planes * t // blocks, planes * (t + 1) // blocks
        rows = np.empty(run * n, x.dtype)
        for p0 in range(lo, hi, run):
            m = (min(hi, p0 + run) - p0) * n
            src = x[p0 * n:p0 * n + m]
            dst = out[p0 * n:p0 * n + m]
            # across: kw cells of every row; the run's first pl and last pr cells
            # (their windows reach past the run) clipped one by one
            if m > kw - 1:
                _masked_taps_into(rows[pl:m - pr], src, 0, 1, kw, col_valid, pl, fill, is_max)
            for q in range(min(pl, m)):
                c = q % w
                rows[q] = _clipped_taps(src, q - pl, 1, max(0, pl - c), min(kw - 1, w - 1 - c + pl), is_max)
            for q in range(max(pl, m - pr), m):
                c = q % w
                rows[q] = _clipped_taps(src, q - pl, 1, max(0, pl - c), min(kw - 1, w - 1 - c + pl), is_max)
            # down: kh of those rows, the same way
            if m > (kh - 1) * w:
                _masked_taps_into(dst[pt * w:m - pb * w], rows, 0, w, kh, row_valid, pt * w, fill, is_max)
            for q in range(min(pt * w, m)):
                y = q % n // w
                dst[q] = _clipped_taps(rows, q - pt * w, w, max(0, pt - y), min(kh - 1, h - 1 - y + pt), is_max)
            for q in range(max(pt * w, m - pb * w), m):
                y = q % n // w
                dst[q] = _clipped_taps(rows, q - pt * w, w, max(0, pt - y), min(kh - 1, h - 1 - y + pt), is_max)
            if not is_max:
                sc = scale[0:m]
                for i in range(m):
                    dst[i] *= sc[i]


@_same_pool2d.numpy_twin
def _same_pool2d_numpy(x, out, scale, col_valid, row_valid, h, w, kh, kw, pt, pl, is_max, blocks):
    planes = x.shape[0] // (h * w)
    fill = -np.inf if is_max else 0.0
    grid = _padded_planes(x.reshape(planes, h, w), pt, pl, h + kh - 1, w + kw - 1, fill)
    combine = np.maximum if is_max else np.add
    # each row's kw cells, then kh of those rows: the kernel's order of operations
    rows = grid[:, :, 0:w].copy()
    for kx in range(1, kw):
        combine(rows, grid[:, :, kx:kx + w], out=rows)
    acc = rows[:, 0:h].copy()
    for ky in range(1, kh):
        combine(acc, rows[:, ky:ky + h], out=acc)
    out[...] = (acc if is_max else acc * scale[:h * w].reshape(h, w)).reshape(-1)


@compiled(parallel=True)
def _global_pool2d(x, out, inv, is_max, blocks):
    """Global pools (the window is the whole plane, no padding, one output per plane) of
    x (planes, H * W), `blocks` blocks on the team: each plane folded in row-major order
    from its first cell, in x's dtype, then times inv for average: the order and
    roundings of _stride1_pool2d's taps for this shape, with H * W steps a plane instead
    of its H * W taps times a padded row of W."""
    n = x.shape[1]
    for t in prange(blocks):
        lo, hi = x.shape[0] * t // blocks, x.shape[0] * (t + 1) // blocks
        for p in range(lo, hi):
            row = x[p]
            acc = row[0]
            if is_max:
                for i in range(1, n):
                    acc = _nan_max(acc, row[i])
                out[p] = acc
            else:
                for i in range(1, n):
                    acc += row[i]
                out[p] = acc * inv


@_global_pool2d.numpy_twin
def _global_pool2d_numpy(x, out, inv, is_max, blocks):
    acc = x[:, 0].copy()
    combine = np.maximum if is_max else np.add
    for i in range(1, x.shape[1]):
        combine(acc, x[:, i], out=acc)
    out[...] = acc if is_max else acc * inv


# one-block calls run without a parallel region: on a loaded machine starting one waits
# for every team thread to be scheduled (global 10x10 average pools of 12 planes: ~11 ms
# a call under the conformance run's load, ~50 us serial)
_stride1_pool2d_serial = serial_variant(_stride1_pool2d, "_stride1_pool2d_serial")
_stride1_max2d_serial = serial_variant(_stride1_max2d, "_stride1_max2d_serial")
_strided_pool2d_serial = serial_variant(_strided_pool2d, "_strided_pool2d_serial")
_global_pool2d_serial = serial_variant(_global_pool2d, "_global_pool2d_serial")
_same_pool2d_serial = serial_variant(_same_pool2d, "_same_pool2d_serial")
_pool2x2s2_serial = serial_variant(_pool2x2s2, "_pool2x2s2_serial")
_pool3x3s2_f32_serial = serial_variant(_pool3x3s2_f32, "_pool3x3s2_f32_serial")


# kernels that take their threads' row buffers from _run_plan; the plan's last argument
# is the floats a thread needs
_ROW_BUFFER_KERNELS = {"_pool3x3s2_f32"}

# planes a run of _same_pool2d combines at once: its row combines stay in the L1 cache
_SAME_RUN_VALUES = 4096


@functools.lru_cache(maxsize=64)
def _same_pool_tables(spatial, kernel, pads, include_pad, dtype):
    """_same_pool2d's per-run tables (read-only): inv tiled over a run of planes, and which
    column / row taps of each position lie inside its plane."""
    h, w = spatial
    pt, pl = pads[0], pads[1]
    n = h * w
    run = max(1, _SAME_RUN_VALUES // n)
    cols = np.tile(np.arange(w), run * h)
    rows = np.tile(np.repeat(np.arange(h), w), run)
    col_valid = np.array([(cols - pl + j >= 0) & (cols - pl + j < w) for j in range(kernel[1])])
    row_valid = np.array([(rows - pt + j >= 0) & (rows - pt + j < h) for j in range(kernel[0])])
    scale = np.tile(_inverse_counts(spatial, kernel, (1, 1), pads, spatial, include_pad, dtype).reshape(-1), run)
    for a in (scale, col_valid, row_valid):
        a.flags.writeable = False
    return scale, col_valid, row_valid


def _compiled_plan(shape, dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad):
    """How a 2-D float pool runs compiled: (the kernel's name (its serial copy's is
    name + "_serial"; looked up per call, so tests can wrap them), the kernel's input
    shape, output buffer shape, the kernel's view of it, the arguments between output
    and blocks, planes, work per plane, result shape), or None when no compiled kernel
    takes it: `_strided_pool2d` (strided in both dims), `_same_pool2d` (stride 1, the
    input's size), `_stride1_max2d` / `_stride1_pool2d` (other stride-1 pools, no
    ceil-mode padding), `_global_pool2d` (the window is the whole plane)."""
    stride1 = tuple(strides) == (1, 1) and not ceil_mode
    if (dtype not in (np.float32, np.float64) or len(kernel) != 2 or min(pads) < 0
            or not (stride1 or (min(strides) >= 2 and dilations[1] == 1))):
        return None
    spatial = tuple(shape[2:])
    out_spatial = pool_output_shape(spatial, kernel, strides, pads, dilations, ceil_mode)
    if min(out_spatial) <= 0:
        return None                              # _reduce_windows words the error
    planes = shape[0] * shape[1]
    n, out_n = spatial[0] * spatial[1], out_spatial[0] * out_spatial[1]
    out_shape = (planes,) + out_spatial
    inv = _inverse_counts(spatial, tuple(kernel), tuple(strides), tuple(pads), out_spatial,
                          bool(include_pad), dtype.str)
    result = tuple(shape[:2]) + out_spatial
    if (stride1 and out_spatial == (1, 1) and tuple(dilations) == (1, 1)
            and all(kernel[i] - pads[i] >= spatial[i] for i in range(2))):
        # the one window covers the whole plane (and padding: Inception v1's 7x7 average
        # on 6x6 with end pads; its zeros or -infs change no sum or maximum)
        return ("_global_pool2d", (planes, n), out_shape, (planes,), (inv[0, 0], is_max),
                planes, n, result)
    if (stride1 and tuple(dilations) == (1, 1) and pads[0] + pads[2] == kernel[0] - 1
            and pads[1] + pads[3] == kernel[1] - 1):
        # "same"-size windows: separable, no padded copy, clipped taps masked in the
        # vectorised loops (3x3 pad 1, one thread, load ~5: 1024 x 7 x 7 average
        # 0.24-0.41 -> 0.07-0.12 ms, max 0.23-0.41 -> 0.07-0.10; 576 x 14 x 14 average
        # 0.38-0.41 -> 0.11-0.19; 256 x 28 x 28 average 0.31-0.33 -> 0.20-0.29)
        tables = _same_pool_tables(spatial, tuple(kernel), tuple(pads), bool(include_pad), dtype.str)
        return ("_same_pool2d", (planes * n,), out_shape, (planes * out_n,),
                tables + spatial + tuple(kernel) + (pads[0], pads[1], is_max), planes, n * (kernel[0] + kernel[1]),
                result)
    if stride1 and is_max:
        return ("_stride1_max2d", (planes,) + spatial, out_shape, out_shape,
                tuple(kernel) + tuple(dilations) + (pads[0], pads[1]), planes,
                (out_spatial[0] + spatial[0]) * out_spatial[1] * (kernel[0] + kernel[1]), result)
    if stride1:
        return ("_stride1_pool2d", (planes,) + spatial, out_shape, out_shape,
                (inv,) + tuple(kernel) + tuple(dilations) + (pads[0], pads[1], is_max), planes,
                out_spatial[0] * spatial[1] * kernel[0] * kernel[1], result)
    if tuple(kernel) == (2, 2) and tuple(strides) == (2, 2) and tuple(dilations) == (1, 1):
        return ("_pool2x2s2", (planes,) + spatial, out_shape, out_shape, (inv, pads[0], pads[1], is_max), planes,
                out_spatial[0] * (spatial[1] + out_spatial[1]) * 2, result)
    if (tuple(kernel) == (3, 3) and tuple(strides) == (2, 2) and tuple(dilations) == (1, 1) and dtype == np.float32
            and pads[0] < 3 and 2 * (out_spatial[0] - 1) - pads[0] < spatial[0]):
        # every window holds an input row (the kernel does not fill all-padding rows)
        return ("_pool3x3s2_f32", (planes,) + spatial, out_shape, out_shape,
                (inv, pads[0], pads[1], is_max, _pool3x3s2_width(spatial[1], out_spatial[1], pads[1])), planes,
                out_spatial[0] * (spatial[1] + out_spatial[1]) * 2, result)
    return ("_strided_pool2d", (planes,) + spatial, out_shape, out_shape,
            (inv,) + tuple(kernel) + tuple(strides) + (dilations[0], pads[0], pads[1], is_max), planes,
            out_spatial[0] * (spatial[1] + out_spatial[1]) * 2, result)


def _run_plan(x, plan):
    """The pool `plan` (_compiled_plan's) describes, on x. A kernel named in
    _ROW_BUFFER_KERNELS also gets its threads' row buffers (buffers.team_work: a kernel
    must not take the address of an array it allocates itself)."""
    name, src_shape, out_shape, out_view, args, planes, work, result = plan
    src = np.ascontiguousarray(x).reshape(src_shape)
    out = output_array(out_shape, x.dtype)
    blocks = team_blocks(planes, work)          # per call: the team's size depends on the thread
    if name in _ROW_BUFFER_KERNELS:
        args = args + team_work(args[-1], np.float32)
    globals()[name if blocks > 1 else name + "_serial"](src, out.reshape(out_view), *args, blocks)
    return out.reshape(result)


def _compiled_pool(x, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad=False):
    """x pooled by a compiled kernel (_compiled_plan), else None."""
    plan = _compiled_plan(x.shape, x.dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad)
    return None if plan is None else _run_plan(x, plan)


# Outputs above this size check the process's memory limit on every call, as the first
# one did (a process may lower its limit after the plan was made).
_PLAN_RECHECK_BYTES = 1 << 26


@functools.lru_cache(maxsize=512)
def _checked_plan(shape, dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad):
    """_compiled_plan after the checks max_pool / average_pool make (their ValueErrors
    raised, not cached), or None where they take another path: a pool's set-up in
    Python costs more than a small pool's kernel (1 x 1 x 4 x 4 average, 3x3/s2: ~59 us
    a call, the kernel 1.4), so repeated shapes reuse it."""
    _check(shape, dtype.itemsize, kernel, strides, pads, dilations)
    if not all(shape) or _far_reaching(shape[2:], kernel, pads, dilations):
        return None
    return _compiled_plan(shape, dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad)


def _fast_pool(x, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad):
    """The pool through a cached plan, or None (then the caller's full path runs)."""
    try:
        plan = _checked_plan(x.shape, x.dtype, tuple(kernel), tuple(strides), tuple(pads), tuple(dilations),
                             bool(ceil_mode), is_max, bool(include_pad))
    except TypeError:                            # unhashable arguments: the full path checks them
        return None
    if plan is None:
        return None
    if x.itemsize * _values(plan[2]) > _PLAN_RECHECK_BYTES:
        _check(x.shape, x.itemsize, kernel, strides, pads, dilations)
    return _run_plan(x, plan)


def prepared_pool(shape, dtype, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad):
    """For an op that calls max_pool / average_pool with fixed arguments: the compiled
    plan those calls take for inputs of this shape and dtype, which run_prepared(x, plan)
    then runs with no per-call set-up at all; None where they take another path (or
    where the plan must not be reused: an output big enough to recheck the memory
    limit per call). Call it only after the pool ran once with these arguments (its
    checks passed)."""
    plan = _checked_plan(tuple(shape), np.dtype(dtype), tuple(kernel), tuple(strides), tuple(pads),
                         tuple(dilations), bool(ceil_mode), is_max, bool(include_pad))
    if plan is None or np.dtype(dtype).itemsize * _values(plan[2]) > _PLAN_RECHECK_BYTES:
        return None
    return plan


run_prepared = _run_plan


def _values(shape):
    count = 1
    for d in shape:
        count *= d
    return count


def _far_reaching(spatial, kernel, pads, dilations):
    """Whether windows reach far past the input (a kernel or pads much larger than
    the map): padding it would cost more than the input itself, by any margin."""
    k = len(kernel)
    return any((kernel[d] - 1) * dilations[d] + 1 > 2 * spatial[d] + 16
               or max(pads[d], pads[k + d]) > spatial[d] + 16 for d in range(k))


def _clipped_pool(x, kernel, strides, pads, dilations, ceil_mode, is_max, include_pad):
    """Pools whose windows reach far past the input: each dim is reduced in turn over
    the cells of each window that lie inside the input (a window entirely in the
    padding gives the fill: -inf or the int minimum for max, 0 for the sum), so the
    work is outputs x input size, never the padded extent or the kernel area."""
    k = len(kernel)
    spatial = x.shape[2:]
    out_spatial = pool_output_shape(spatial, kernel, strides, pads, dilations, ceil_mode)
    work = x if (is_max or x.dtype.kind == "f") else x.astype(np.float32)
    fill = (-np.inf if work.dtype.kind == "f" else np.iinfo(work.dtype).min) if is_max else 0
    reduce = np.max if is_max else np.sum
    cur = work
    for d in range(k):
        axis = 2 + d
        size, dil = spatial[d], dilations[d]
        shape = list(cur.shape)
        shape[axis] = out_spatial[d]
        out = np.full(shape, fill, cur.dtype)
        for o in range(out_spatial[d]):
            start = o * strides[d] - pads[d]
            first = 0 if start >= 0 else (-start + dil - 1) // dil
            last = min(kernel[d] - 1, (size - 1 - start) // dil) if start <= size - 1 else -1
            if first > last:
                continue
            index = [slice(None)] * cur.ndim
            index[axis] = slice(start + first * dil, start + last * dil + 1, dil)
            index_out = [slice(None)] * cur.ndim
            index_out[axis] = o
            out[tuple(index_out)] = reduce(cur[tuple(index)], axis=axis)
        cur = out
    if not is_max:
        cur = cur * _inverse_counts(spatial, tuple(kernel), tuple(strides), tuple(pads), tuple(out_spatial),
                                    bool(include_pad), cur.dtype.str)
    return cur.astype(x.dtype, copy=False)


def _empty_output(x, kernel, strides, pads, dilations, ceil_mode):
    """The (empty) output when there is nothing to compute, else None: work that does
    not depend on the input's size must not run for an empty batch."""
    if x.size and all(x.shape[2:]):
        return None
    out_spatial = pool_output_shape(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
    if min(out_spatial, default=1) <= 0:
        return None                     # the regular path words the error
    return np.empty(x.shape[:2] + tuple(out_spatial), x.dtype)


def max_pool(x, kernel, strides, pads, dilations=None, ceil_mode=False, *, scratch=None):
    k = len(kernel)
    dilations = list(dilations or [1] * k)
    out = _fast_pool(x, kernel, strides, pads, dilations, ceil_mode, True, False)
    if out is not None:
        return out
    _check(x.shape, x.itemsize, kernel, strides, pads, dilations)
    out = _empty_output(x, kernel, strides, pads, dilations, ceil_mode)
    if out is not None:
        return out
    if _far_reaching(x.shape[2:], kernel, pads, dilations) and min(
            pool_output_shape(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)) > 0:
        return _clipped_pool(x, kernel, strides, pads, dilations, ceil_mode, True, False)
    out = _compiled_pool(x, kernel, strides, pads, dilations, ceil_mode, True)
    if out is not None:
        return out
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    out, _ = _reduce_windows(x, kernel, strides, pads, dilations, ceil_mode, fill, np.maximum,
                             scratch or default_scratch())
    return out


def _window_counts(size, kernel, stride, pad_begin, pad_end, out_size, include_pad):
    """Per output position along one dim: how many window cells count in the divisor."""
    starts = np.arange(out_size) * stride - pad_begin
    lo, hi = (-pad_begin, size + pad_end) if include_pad else (0, size)
    return (np.minimum(starts + kernel, hi) - np.maximum(starts, lo)).astype(np.float64)


@functools.lru_cache(maxsize=256)
def _inverse_counts(spatial, kernel, strides, pads, out_spatial, include_pad, dtype):
    """1 / divisor per output position: an outer product of 1-D window counts (read-only)."""
    k = len(kernel)
    counts = np.ones((), dtype=np.float64)
    for i in range(k):
        # Padding added only to reach a ceil-mode size never counts.
        c = _window_counts(spatial[i], kernel[i], strides[i], pads[i], pads[k + i], out_spatial[i], include_pad)
        counts = np.multiply.outer(counts, c)
    inv = (1.0 / counts).astype(dtype)
    inv.flags.writeable = False
    return inv


def average_pool(x, kernel, strides, pads, count_include_pad=False, ceil_mode=False, *, scratch=None):
    k = len(kernel)
    ones = [1] * k
    out = _fast_pool(x, kernel, strides, pads, ones, ceil_mode, False, count_include_pad)
    if out is not None:
        return out
    _check(x.shape, x.itemsize, kernel, strides, pads, ones)
    out = _empty_output(x, kernel, strides, pads, ones, ceil_mode)
    if out is not None:
        return out
    if _far_reaching(x.shape[2:], kernel, pads, ones) and min(
            pool_output_shape(x.shape[2:], kernel, strides, pads, ones, ceil_mode)) > 0:
        return _clipped_pool(x, kernel, strides, pads, ones, ceil_mode, False, count_include_pad)
    out = _compiled_pool(x, kernel, strides, pads, ones, ceil_mode, False, count_include_pad)
    if out is not None:
        return out
    work = x if x.dtype.kind == "f" else x.astype(np.float32)
    sums, _ = _reduce_windows(work, kernel, strides, pads, ones, ceil_mode, 0.0, np.add, scratch or default_scratch())
    sums *= _inverse_counts(x.shape[2:], tuple(kernel), tuple(strides), tuple(pads), sums.shape[2:],
                            bool(count_include_pad), sums.dtype.str)
    return sums.astype(x.dtype, copy=False)


# Below this many values NumPy's mean is as fast as a compiled call.
_COMPILED_MEAN_MIN = 4096


@compiled(parallel=True, fastmath=("contract", "reassoc"))
def _row_means(rows, out, blocks):
    """out[r] = mean of rows[r] (R, S), summed in float64 (reassociated, so vectorised);
    rows in `blocks` blocks on the team."""
    count = rows.shape[0]
    size = rows.shape[1]
    for t in prange(blocks):
        for r in range(count * t // blocks, count * (t + 1) // blocks):
            row = rows[r]
            total = 0.0
            for i in range(size):
                total += np.float64(row[i])
            out[r] = total / size


@_row_means.numpy_twin
def _row_means_numpy(rows, out, blocks):
    out[...] = rows.sum(axis=1, dtype=np.float64) / rows.shape[1]


_row_means_serial = serial_variant(_row_means, "_row_means_serial")


def global_pool(x, kind):
    """(N, C, *S) -> (N, C, 1, ...): max or mean over all spatial dims."""
    n, c = x.shape[:2]
    if n * c == 0:
        return np.empty((n, c) + (1,) * (x.ndim - 2), x.dtype)
    if not all(x.shape[2:]):
        raise ValueError("global %s pooling needs a non-empty spatial extent, got shape %s"
                         % (kind, list(x.shape)))
    flat = x.reshape(n, c, -1)
    if kind == "max":
        y = flat.max(axis=2)
    elif kind in ("avg", "average", "mean"):
        if x.dtype in (np.float32, np.float64) and flat.size >= _COMPILED_MEAN_MIN:
            # NumPy's mean over short rows pays a reduction set-up per row: 2 threads,
            # alternating in one process, 1000 x 13 x 13 50 -> 14 us, 2048 x 7 x 7 59 -> 11 us
            rows = np.ascontiguousarray(flat).reshape(n * c, -1)
            y = np.empty(n * c, x.dtype)
            blocks = team_blocks(n * c, rows.shape[1])
            (_row_means if blocks > 1 else _row_means_serial)(rows, y, blocks)
        else:
            y = flat.mean(axis=2, dtype=np.float64 if x.dtype == np.float64 else np.float32).astype(x.dtype,
                                                                                                 copy=False)
    else:
        raise ValueError("global pool kind must be 'max' or 'avg', got '%s'" % kind)
    return y.reshape((n, c) + (1,) * (x.ndim - 2))

