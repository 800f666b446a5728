"""2-D depthwise convolution (one input channel per group), compiled.

Public:
    depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None, channel_map=None)
        or None when the compiled kernel does not cover the case (only float32/float64,
        non-negative pads). channel_map (C ints): output channel o convolves input plane
        channel_map[o // multiplier] instead of o // multiplier, so a channel shuffle
        before the convolution costs nothing (caffe2py.optimize's shuffle fold).
    channel_map_problem(channel_map, channels) -> why a map is unusable, or None.

A depthwise output is kh*kw multiply-adds of one channel's pixels. As NumPy calls
that is a pass per tap (or a tap stack and a batched matmul of tiny matrices); here
each channel is padded into a small row buffer and every output is computed once,
in registers, with bias and ReLU on the way out (one thread: 272 channels at 14x14,
3x3: 0.19 -> 0.056 ms; 112 channels 56x56 stride 2: 0.38 -> 0.19 ms).
  * stride 1: one long loop over the padded plane read as a flat array (each tap is a
    shifted slice of it; the columns past the row end are computed and dropped);
  * strided 3x3: per output row, the nine taps read at the output columns (scalar
    strided loads, vectorised by LLVM when the dilation is 1);
  * other strided kernels: each output row at stride 1 (contiguous, vectorised), then
    every sw-th column is kept.
Strided float32 layers whose rows hold 8+ outputs take _depthwise_phased instead: each
plane split once into its stride phases, so every tap of 8 consecutive outputs is one
vector load (PHASED says when, and why not elsewhere). Float32 3x3s at stride 1 and 2
take _depthwise3x3_rows first: 16-lane vectors per output row, masked copies in and
stores out (ROWS_3X3, ROWS_3X3_STRIDE2; ShuffleNet 7.57 -> 6.92 ms at one thread).
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.buffers import team_work
from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks, thread_id
from .phases import copy_floats

LANES_8 = LazyGlobal(".simd", "LANES_8")
LANES_16 = LazyGlobal(".simd", "LANES_16")
vsplat = LazyGlobal(".simd", "vsplat")
vstore_f32_lanes = LazyGlobal(".simd", "vstore_f32_lanes")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vload_f32_even = LazyGlobal(".simd", "vload_f32_even")
vload_f32_odd = LazyGlobal(".simd", "vload_f32_odd")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vmax = LazyGlobal(".simd", "vmax")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
address = LazyGlobal(".simd", "address")


@compiled(fastmath=("contract", "reassoc"), parallel=True)
def _depthwise(x, w, bias, out, cmap, kh, kw, sh, sw, dh, dw, pt, pl, relu, blocks):
    """All output channels, in `blocks` contiguous blocks on the team. x (C, H, W);
    w (M, kh*kw) with M = C * multiplier; bias (M,) (zeros when there is none);
    out (M, OH, OW); output channel o reads input plane cmap[o // multiplier]. Windows
    start at (oy * sh - pt, ox * sw - pl); pads are >= 0 and the caller checked the
    shapes and that cmap holds C channel indices in range."""
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    mult = m // c_in
    span = (ow - 1) * sw + 1                        # padded columns one output row covers
    wp = max(pl + wd, span + (kw - 1) * dw)         # padded row length
    hp = max(pt + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    flat = sh == 1 and sw == 1
    rows = hp + 1 if flat else hp                   # flat taps of the last row run one row on
    for t in prange(blocks):
        lo, hi = m * t // blocks, m * (t + 1) // blocks
        grid = np.zeros((rows, wp), x.dtype)            # zero border, interior rewritten per channel
        buf = grid.reshape(rows * wp)
        length = oh * wp if flat else span
        acc = np.empty(length, x.dtype)
        loaded = -1
        for o in range(lo, hi):
            c = cmap[o // mult]
            if c != loaded:
                for y in range(h):
                    src = x[c, y]
                    dst = grid[y + pt, pl:pl + wd]
                    for j in range(wd):
                        dst[j] = src[j]
                loaded = c
            wo = w[o]
            b = bias[o]
            if not flat and kh == 3 and kw == 3:
                # strided 3x3: nine taps read straight at each output's columns (strided
                # loads stay scalar, but only the outputs are computed)
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = wo[0], wo[1], wo[2], wo[3], wo[4], wo[5], wo[6], wo[7], wo[8]
                for oy in range(oh):
                    # rows of the 2-D grid, not slices of the flat buffer: 2x faster here
                    r0, r1, r2 = grid[oy * sh], grid[oy * sh + dh], grid[oy * sh + 2 * dh]
                    dst = out[o, oy]
                    if dw == 1:     # constant offsets: LLVM vectorises the strided loads (2.7x)
                        for ox in range(ow):
                            j = ox * sw
                            v = (b + w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2]
                                 + w3 * r1[j] + w4 * r1[j + 1] + w5 * r1[j + 2]
                                 + w6 * r2[j] + w7 * r2[j + 1] + w8 * r2[j + 2])
                            dst[ox] = 0.0 if relu and v < 0 else v
                    else:
                        for ox in range(ow):
                            j = ox * sw
                            v = (b + w0 * r0[j] + w1 * r0[j + dw] + w2 * r0[j + 2 * dw]
                                 + w3 * r1[j] + w4 * r1[j + dw] + w5 * r1[j + 2 * dw]
                                 + w6 * r2[j] + w7 * r2[j + dw] + w8 * r2[j + 2 * dw])
                            dst[ox] = 0.0 if relu and v < 0 else v
                continue
            # Flat: one segment, the whole plane. Strided: one segment per output row.
            for seg in range(1 if flat else oh):
                base = seg * sh * wp
                if kh == 3 and kw == 3:
                    # the common case in one pass: nine taps per output, acc written once
                    r1, r2 = base + dh * wp, base + 2 * dh * wp
                    t0, t1, t2 = buf[base:base + length], buf[base + dw:base + dw + length], \
                        buf[base + 2 * dw:base + 2 * dw + length]
                    t3, t4, t5 = buf[r1:r1 + length], buf[r1 + dw:r1 + dw + length], buf[r1 + 2 * dw:r1 + 2 * dw + length]
                    t6, t7, t8 = buf[r2:r2 + length], buf[r2 + dw:r2 + dw + length], buf[r2 + 2 * dw:r2 + 2 * dw + length]
                    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wo[0], wo[1], wo[2], wo[3], wo[4], wo[5], wo[6], wo[7], wo[8]
                    for i in range(length):
                        acc[i] = (b + w0 * t0[i] + w1 * t1[i] + w2 * t2[i] + w3 * t3[i] + w4 * t4[i]
                                  + w5 * t5[i] + w6 * t6[i] + w7 * t7[i] + w8 * t8[i])
                else:
                    for i in range(length):
                        acc[i] = b
                    for ky in range(kh):
                        for kx in range(kw):
                            start = base + ky * dh * wp + kx * dw
                            tap = buf[start:start + length]
                            wt = wo[ky * kw + kx]
                            for i in range(length):
                                acc[i] += wt * tap[i]
                if flat:
                    for oy in range(oh):
                        src = acc[oy * wp:oy * wp + ow]
                        dst = out[o, oy]
                        for i in range(ow):
                            v = src[i]
                            dst[i] = 0.0 if relu and v < 0 else v
                else:
                    dst = out[o, seg]
                    for i in range(ow):
                        v = acc[i * sw]
                        dst[i] = 0.0 if relu and v < 0 else v


@compiled
def rows3x3_grid(h, wd, oh, ow, stride, pt, pl):
    """(rows, columns) of _depthwise3x3_rows' zero-bordered grid: every input row and
    column at (pt, pl) on, and every vector's last tap inside a row."""
    return max(pt + h, stride * (oh - 1) + 3), max(pl + wd, stride * 16 * ((ow + 15) // 16) + 2)


@compiled(parallel=True)
def _depthwise3x3_rows(x, w, bias, out, cmap, stride, pt, pl, relu, blocks, work, wstride):
    """_depthwise for float32 3x3 windows at stride 1 or 2 (both dims) and dilation 1,
    in 16-lane vectors: each channel's plane copied into a zero-bordered grid a masked
    vector at a time, then per output row and block of 16 columns the nine taps as 9
    loads (at stride 2 the even and odd columns of a 32-float load: simd.vload_f32_even
    / _odd) and 9 FMAs in registers (bias first, then the taps row by row), ReLU, and one
    masked store straight into the output. The flat loop of _depthwise spent most of its
    time in its scalar copies in and out (rows of 7-28 are shorter than LLVM's vectors).
    Same arguments as _depthwise; the caller checked pads >= 0 and the output size. A
    thread's grid is its region of `work` (from thread_id() * wstride, at least
    rows3x3_grid(...) floats; buffers.team_work): caller-owned, as _depthwise_phased's."""
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    mult = m // c_in
    n = LANES_16
    hp, wp = rows3x3_grid(h, wd, oh, ow, stride, pt, pl)
    nvec = (ow + 15) // 16
    x0 = address(x)
    o0 = address(out)
    row_in, row_bytes = wd * 4, wp * 4
    step = stride * row_bytes                       # grid bytes from one output row's window to the next
    for t in prange(blocks):
        lo, hi = m * t // blocks, m * (t + 1) // blocks
        grid = work[thread_id() * wstride:thread_id() * wstride + hp * wp]     # this thread's region
        grid[:] = 0                             # zero border, interior rewritten per channel
        g0 = address(grid)
        loaded = -1
        for o in range(lo, hi):
            c = cmap[o // mult]
            if c != loaded:
                for y in range(h):
                    copy_floats(g0 + (y + pt) * row_bytes + pl * 4, x0 + (c * h + y) * row_in, wd)
                loaded = c
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = w[o, 0], w[o, 1], w[o, 2], w[o, 3], w[o, 4], w[o, 5], w[o, 6], \
                w[o, 7], w[o, 8]
            start = vsplat(n, bias[o])
            zero = vzeros(n)
            for oy in range(oh):
                r0 = g0 + oy * step
                r1 = r0 + row_bytes
                r2 = r1 + row_bytes
                at = o0 + ((o * oh + oy) * ow) * 4
                for v in range(nvec):
                    if stride == 1:
                        j = v * 64
                        acc = vfma(start, w0, vload_f32(n, r0 + j))
                        acc = vfma(acc, w1, vload_f32(n, r0 + j + 4))
                        acc = vfma(acc, w2, vload_f32(n, r0 + j + 8))
                        acc = vfma(acc, w3, vload_f32(n, r1 + j))
                        acc = vfma(acc, w4, vload_f32(n, r1 + j + 4))
                        acc = vfma(acc, w5, vload_f32(n, r1 + j + 8))
                        acc = vfma(acc, w6, vload_f32(n, r2 + j))
                        acc = vfma(acc, w7, vload_f32(n, r2 + j + 4))
                        acc = vfma(acc, w8, vload_f32(n, r2 + j + 8))
                    else:
                        j = v * 128
                        acc = vfma(start, w0, vload_f32_even(n, r0 + j))
                        acc = vfma(acc, w1, vload_f32_odd(n, r0 + j))
                        acc = vfma(acc, w2, vload_f32_even(n, r0 + j + 8))
                        acc = vfma(acc, w3, vload_f32_even(n, r1 + j))
                        acc = vfma(acc, w4, vload_f32_odd(n, r1 + j))
                        acc = vfma(acc, w5, vload_f32_even(n, r1 + j + 8))
                        acc = vfma(acc, w6, vload_f32_even(n, r2 + j))
                        acc = vfma(acc, w7, vload_f32_odd(n, r2 + j))
                        acc = vfma(acc, w8, vload_f32_even(n, r2 + j + 8))
                    if relu:
                        acc = vmax(zero, acc)
                    vstore_f32_lanes(at + v * 64, acc, 0, min(16, ow - v * 16))


@_depthwise3x3_rows.numpy_twin
def _depthwise3x3_rows_numpy(x, w, bias, out, cmap, stride, pt, pl, relu, blocks, work, wstride):
    _depthwise_numpy(x, w, bias, out, cmap, 3, 3, stride, stride, 1, 1, pt, pl, relu, blocks)


@_depthwise.numpy_twin
def _depthwise_numpy(x, w, bias, out, cmap, kh, kw, sh, sw, dh, dw, pt, pl, relu, blocks):
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    rows = max(pt + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    width = max(pl + wd, (ow - 1) * sw + (kw - 1) * dw + 1)
    grid = np.zeros((c_in, rows, width), x.dtype)
    grid[:, pt:pt + h, pl:pl + wd] = x
    planes = grid[cmap[np.arange(m) // (m // c_in)]]    # the input plane of every output
    acc = np.repeat(bias.reshape(m, 1, 1), oh, axis=1).repeat(ow, axis=2)
    for ky in range(kh):
        for kx in range(kw):
            cells = planes[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
            acc += w[:, ky * kw + kx].reshape(m, 1, 1) * cells
    if relu:
        np.maximum(acc, acc.dtype.type(0), out=acc)
    out[...] = acc


@compiled(fastmath=("contract", "reassoc"), parallel=True)
def _depthwise_phased(x, w, bias, out, cmap, offsets, sh, sw, pt, pl, rows, wq, starts, relu, blocks, work, stride):
    """The same result as _depthwise, computed from the input's stride phases with
    vector loads. Each input plane is split once into its sh * sw stride phases
    (zero-bordered planes of rows x wq in one flat per-thread buffer; one plane at
    stride 1), so for every tap the inputs of consecutive outputs of a row are
    consecutive floats: output (oy, ox) reads oy * wq + ox + offsets[k]. The outputs
    are computed 8 at a time, 4 vectors per step (4 independent FMA chains) and stored
    straight into out: starts (V, 2) holds (oy * wq + ox, oy * ow + ox) of every vector
    of 8 outputs inside a row (ox = 0, 8, ..., the last moved back to ow - 8; V a
    multiple of 4, padded by repeating the last). The caller checked ow >= 8, x
    C-contiguous, that every input pixel lands inside the buffer and that every read
    (oh * wq - 1 + max(offsets) + 8 lanes) lies below sh * sw * rows * wq + wq. Each team
    thread's phase buffer is its region of `work` (from thread_id() * stride, at least
    sh * sw * rows * wq + wq floats; buffers.team_work): caller-owned, because an array
    made in here is freed after its last use as an array, not its address's (blas.py)."""
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    mult = m // c_in
    k_count = offsets.shape[0]
    plane = rows * wq
    size = sh * sw * plane + wq
    steps = starts.shape[0] // 4
    zero = vzeros(LANES_8)
    o_base = address(out)
    x_base = address(x)
    for t in prange(blocks):
        lo, hi = m * t // blocks, m * (t + 1) // blocks
        grid = work[thread_id() * stride:thread_id() * stride + size]   # this thread's region
        grid[:] = 0                             # zero border, interior rewritten per channel
        g0 = address(grid)
        loaded = -1
        for o in range(lo, hi):
            c = cmap[o // mult]
            if c != loaded:
                if sw == 1 and wd >= 8:
                    # rows as vectors (the last moved back): no slices, no scalar tail
                    for i in range(h):
                        src = x_base + ((c * h + i) * wd) * 4
                        dst = g0 + (((i + pt) % sh) * plane + ((i + pt) // sh) * wq + pl) * 4
                        for j in range(0, wd, 8):
                            j = min(j, wd - 8) * 4
                            vstore_f32_at(dst + j, vload_f32(LANES_8, src + j))
                elif sw == 2 and wd >= 16:
                    # columns 2u, 2u + 1 go to phase pl % 2 at u + pl // 2 and to the other
                    # at u + (pl + 1) // 2: 16 floats -> 8 even + 8 odd, the last 16 moved
                    # back; addresses, not row views (a view costs a reference count pair)
                    half = wd // 2
                    for i in range(h):
                        src = x_base + ((c * h + i) * wd) * 4
                        base = ((i + pt) % sh) * sw * plane + ((i + pt) // sh) * wq
                        e0 = g0 + (base + (pl % 2) * plane + pl // 2) * 4
                        d0 = g0 + (base + ((pl + 1) % 2) * plane + (pl + 1) // 2) * 4
                        for u in range(0, half, 8):
                            u = min(u, half - 8)
                            vstore_f32_at(e0 + u * 4, vload_f32_even(LANES_8, src + u * 8))
                            vstore_f32_at(d0 + u * 4, vload_f32_odd(LANES_8, src + u * 8))
                        if wd % 2:
                            grid[base + (pl % 2) * plane + (wd - 1 + pl) // 2] = x[c, i, wd - 1]
                else:
                    for i in range(h):
                        src = x[c, i]
                        base = ((i + pt) % sh) * sw * plane + ((i + pt) // sh) * wq
                        if sw == 1:
                            dst = grid[base + pl:base + pl + wd]
                            for j in range(wd):
                                dst[j] = src[j]
                        elif sw == 2:
                            # columns 2u, 2u + 1 go to phase pl % 2 at u + pl // 2 and to the
                            # other phase at u + (pl + 1) // 2: one interleaved load, two stores
                            half = wd // 2
                            e0 = base + (pl % 2) * plane + pl // 2
                            o0 = base + ((pl + 1) % 2) * plane + (pl + 1) // 2
                            even = grid[e0:e0 + half]
                            odd = grid[o0:o0 + half]
                            pairs = src[0:2 * half]
                            for u in range(half):
                                even[u] = pairs[2 * u]
                                odd[u] = pairs[2 * u + 1]
                            if wd % 2:
                                grid[base + (pl % 2) * plane + (wd - 1 + pl) // 2] = src[wd - 1]
                        else:
                            for j in range(wd):
                                grid[base + ((j + pl) % sw) * plane + (j + pl) // sw] = src[j]
                loaded = c
            bv = vadds(zero, bias[o])
            out_o = o_base + o * oh * ow * 4
            for step in range(steps):
                q = step * 4
                i0, i1, i2, i3 = g0 + starts[q, 0] * 4, g0 + starts[q + 1, 0] * 4, \
                    g0 + starts[q + 2, 0] * 4, g0 + starts[q + 3, 0] * 4
                u0 = u1 = u2 = u3 = bv
                for k in range(k_count):
                    at = offsets[k] * 4
                    wk = w[o, k]
                    u0 = vfma(u0, wk, vload_f32(LANES_8, i0 + at))
                    u1 = vfma(u1, wk, vload_f32(LANES_8, i1 + at))
                    u2 = vfma(u2, wk, vload_f32(LANES_8, i2 + at))
                    u3 = vfma(u3, wk, vload_f32(LANES_8, i3 + at))
                if relu:            # max(0, v): NaN kept, as np.maximum(v, 0)
                    u0 = vmax(zero, u0)
                    u1 = vmax(zero, u1)
                    u2 = vmax(zero, u2)
                    u3 = vmax(zero, u3)
                vstore_f32_at(out_o + starts[q, 1] * 4, u0)
                vstore_f32_at(out_o + starts[q + 1, 1] * 4, u1)
                vstore_f32_at(out_o + starts[q + 2, 1] * 4, u2)
                vstore_f32_at(out_o + starts[q + 3, 1] * 4, u3)


@_depthwise_phased.numpy_twin
def _depthwise_phased_numpy(x, w, bias, out, cmap, offsets, sh, sw, pt, pl, rows, wq, starts, relu, blocks, work,
                            stride):
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    plane = rows * wq
    grid = np.zeros((c_in, sh * sw * plane + wq), x.dtype)
    for i in range(min(sh, h)):
        for j in range(min(sw, wd)):
            phase = ((i + pt) % sh) * sw + (j + pl) % sw
            cells = grid[:, phase * plane:(phase + 1) * plane].reshape(c_in, rows, wq)
            q0, r0 = (i + pt) // sh, (j + pl) // sw
            part = x[:, i::sh, j::sw]
            cells[:, q0:q0 + part.shape[1], r0:r0 + part.shape[2]] = part
    planes = grid[cmap[np.arange(m) // (m // c_in)]]
    length = oh * wq
    acc = np.repeat(bias.reshape(m, 1), length, axis=1)
    for k in range(offsets.shape[0]):
        acc += w[:, k:k + 1] * planes[:, offsets[k]:offsets[k] + length]
    if relu:
        np.maximum(acc, acc.dtype.type(0), out=acc)
    out[...] = acc.reshape(m, oh, wq)[:, :, :ow]


_depthwise_phased_serial = serial_variant(_depthwise_phased, "_depthwise_phased_serial")
_depthwise3x3_rows_serial = serial_variant(_depthwise3x3_rows, "_depthwise3x3_rows_serial")


@compiled
def _outside(cmap, channels):
    """How many of cmap's values lie outside [0, channels)."""
    bad = 0
    for i in range(cmap.shape[0]):
        if cmap[i] < 0 or cmap[i] >= channels:
            bad += 1
    return bad


@_outside.numpy_twin
def _outside_numpy(cmap, channels):
    return int(np.count_nonzero((cmap < 0) | (cmap >= channels)))


def channel_map_problem(channel_map, channels):
    """Why `channel_map` cannot say which of `channels` input planes each channel
    reads (the compiled loop indexes with it unchecked), or None. A compiled range
    check: NumPy's min and max cost ~6 us a map, more than some convolutions save."""
    cmap = np.asarray(channel_map)
    if cmap.shape != (channels,) or cmap.dtype.kind not in "iu":
        return "the channel map must be %d integers, got %s of shape %s" % (channels, cmap.dtype, list(cmap.shape))
    if cmap.dtype != np.intp:
        cmap = cmap.astype(np.intp)       # unsigned values past intp's range wrap negative: refused below
    if _outside(cmap, channels):
        return "the channel map's values must lie in [0, %d), got %d..%d" % (channels, cmap.min(), cmap.max())
    return None


# Strided float32 depthwise convs with rows of at least 8 outputs take the phase-split
# kernel (_depthwise_phased); PHASED = False switches it off (benchmarks/
# small_conv_bench.py times both). ShuffleNet's 3x3 layers, one thread, CPU time,
# fastest of 300 calls on the loaded 2-CPU Zen 3 VM, ms before -> after (onnxruntime):
# 112 ch 56x56/s2 0.28-0.33 -> 0.15-0.16 (0.11), 136 ch 28x28/s2 0.11-0.12 -> 0.076-0.092
# (0.05-0.07). Not taken: stride 1 (272 ch 14x14: 0.078-0.080 -> 0.084-0.099, 136 ch
# 28x28 even) and rows under 8 outputs (7x7 maps; a variant storing 8 lanes a row,
# the spill overwritten by the next row: 272 ch 14x14/s2 0.081 -> 0.087, 544 ch 7x7
# 0.082 -> 0.090). PHASED_MAX_STRIDE1_WIDTH admits stride-1 rows up to that width
# (tests run the kernel there).
ROWS_3X3 = True     # float32 stride-1 3x3s take _depthwise3x3_rows
ROWS_3X3_STRIDE2 = True     # and the stride-2 ones
PHASED = True
PHASED_MAX_STRIDE1_WIDTH = 0


def _phased_layout(x_shape, kh, kw, strides, pads, dilations, out_spatial, dtype):
    """(offsets, sh, sw, pt, pl, rows, wq, starts) for _depthwise_phased, or None where
    it is not used. Checks what its loops assume."""
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = out_spatial
    if (not PHASED or np.dtype(dtype) != np.float32 or ow < 8
            or (max(sh, sw) == 1 and ow > PHASED_MAX_STRIDE1_WIDTH)):
        return None
    h, wd = x_shape[2:]
    pt, pl = pads[0], pads[1]
    hp = max(pt + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(pl + wd, (ow - 1) * sw + (kw - 1) * dw + 1)
    rows, wq = -(-hp // sh), -(-wp // sw)
    plane = rows * wq
    offsets = np.array([(((a * dh) % sh) * sw + (b * dw) % sw) * plane + (a * dh // sh) * wq + b * dw // sw
                        for a in range(kh) for b in range(kw)], np.int64)
    # every vector of 8 outputs inside a row (the last moved back), in groups of 4
    columns = list(range(0, ow - 7, 8)) + ([ow - 8] if ow % 8 else [])
    vectors = [(oy * wq + ox, oy * ow + ox) for oy in range(oh) for ox in columns]
    vectors += [vectors[-1]] * (-len(vectors) % 4)
    starts = np.array(vectors, np.int64)
    # input pixels inside the buffer; the last lane any vector reads inside it too
    if ((h - 1 + pt) // sh >= rows or (wd - 1 + pl) // sw >= wq
            or int(starts[:, 0].max()) + 7 + int(offsets.max()) >= sh * sw * plane + wq):
        raise AssertionError("depthwise phase buffer too short")     # the layout above guarantees it
    return offsets, sh, sw, pt, pl, rows, wq, starts


def depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """The compiled depthwise path for this geometry, or None (see the module docstring)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64) or len(out_spatial) != 2 or min(pads) < 0:
        return None
    n, c = x_shape[:2]
    m = w_shape[0]
    kh, kw = w_shape[2:]
    geometry = (kh, kw) + tuple(strides) + tuple(dilations) + (pads[0], pads[1])
    work = int(np.prod(out_spatial)) * kh * kw * max(strides)

    identity = np.arange(c, dtype=np.intp)
    zero_bias = np.zeros(m, dtype)
    rows3x3 = (ROWS_3X3 and dtype == np.float32 and (kh, kw) == (3, 3) and tuple(dilations) == (1, 1)
               and (tuple(strides) == (1, 1) or (ROWS_3X3_STRIDE2 and tuple(strides) == (2, 2))))
    phased = None if rows3x3 else _phased_layout(x_shape, kh, kw, strides, pads, dilations, out_spatial, dtype)
    if rows3x3:
        grid_rows, grid_cols = rows3x3_grid.py_func(*x_shape[2:], *out_spatial, strides[0], pads[0], pads[1])
        rows_grid = grid_rows * grid_cols
    if phased is not None:
        _, sh, sw, _, _, rows, wq, _ = phased
        phased_size = sh * sw * rows * wq + wq     # one thread's phase buffer (its last row's spill)
    checked = {}      # id -> (read-only map checked, its intp form): one per op sharing this plan

    def setup():
        blocks = team_blocks(m, work)
        if phased is not None:
            return blocks, _depthwise_phased if blocks > 1 else _depthwise_phased_serial
        if rows3x3:
            return blocks, _depthwise3x3_rows if blocks > 1 else _depthwise3x3_rows_serial
        return blocks, _depthwise
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None, channel_map=None):
        if channel_map is None:
            cmap = identity
        elif (seen := checked.get(id(channel_map))) is not None and seen[0] is channel_map:
            cmap = seen[1]      # read-only (below): unchanged since it was checked
        else:
            problem = channel_map_problem(channel_map, c)
            if problem:
                raise ValueError(problem)
            cmap = np.ascontiguousarray(channel_map, dtype=np.intp)
            if isinstance(channel_map, np.ndarray) and not channel_map.flags.writeable and channel_map.base is None:
                if len(checked) >= 64:
                    checked.clear()
                checked[id(channel_map)] = channel_map, cmap
        w2 = w.reshape(m, kh * kw)
        b = zero_bias if bias is None else bias_values(bias, dtype)
        blocks, kernel = per_team(setups, setup)
        for i in range(n):
            xi = np.ascontiguousarray(x[i])
            if phased is not None:
                region, stride = team_work(phased_size, np.float32)
                kernel(xi, w2, b, out[i], cmap, *phased, relu, blocks, region, stride)
            elif rows3x3:
                region, wstride = team_work(rows_grid, np.float32)
                kernel(xi, w2, b, out[i], cmap, strides[0], pads[0], pads[1], relu, blocks, region, wstride)
            else:
                _depthwise(xi, w2, b, out[i], cmap, *geometry, relu, blocks)
    compute.takes_channel_map = True
    return compute
