"""Direct 2-D convolution (NCHW, float32, group 1): a register-blocked microkernel with
GotoBLAS/BLIS-style cache blocking, for short reductions and for the group-1 layers with
C_in >= 16 where it measured faster than the GEMM, shift-add and Winograd paths
(conv.py's blocked_direct_wins says which).

Public:
    direct_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None), or None
        when the kernel does not cover the case (other dtypes, groups, negative pads).
    blocking(k_count, n_cb, n_pb) -> (taps per chunk, channel blocks per tile, pixel
        blocks per tile)

How:
  * the input is copied once per image into its stride phases (one phase at stride 1,
    four at stride 2: even/odd rows and columns; only the phases some tap reads),
    zero-bordered buffers of width wq whose rows are flattened, so for every tap the
    pixels of consecutive outputs are consecutive floats (an implicit im2col: conv.py's
    _flat2d_plan uses the same layout for its tap stacks);
  * each tap (c, a, b) of the reduction K = C * kh * kw is one precomputed offset into
    the phase buffers (dilations and any kernel size come free); the weights are packed
    (M/4, K, 4), once per weight array (packed_weights.DerivedWeights: repacking 192 x 48 x 3 x 3
    cost ~0.14 ms a call);
  * a block of 4 output channels x 24 consecutive flat outputs (3 vectors of 8 lanes;
    48 outputs, 3 vectors of 16, where the CPU has AVX-512: register_lanes) is 12
    accumulators held in registers (runtime/simd.py's Vec): per tap, 3 vector loads of
    input, 4 broadcast weights, 12 FMAs;
  * cache blocking: the reduction runs in chunks of CHUNK_TAPS taps; the work items are
    tiles of pixel blocks x channel blocks. Per chunk, each pixel block's taps are packed
    contiguous (chunk x 24 floats, in L1) and every channel block of the tile passes over
    them, its chunk of weights read from L2 (the tile's weights are TILE_WEIGHT_BYTES);
    the partial sums wait in a per-call buffer between chunks. Without it every pixel
    block walked all M x K weights from memory (256 -> 256 3x3 at 14x14: 29 GFLOP/s,
    blocked ~60);
  * outputs of the flattened rows past the real width are computed and dropped; a
    block that lies inside one output row is finished (bias, residual, ReLU) and stored
    as vectors, the others lane by lane;
  * tiles are split over the team; every output's sum runs chunk by chunk and tap by
    tap whichever thread computes it, so results are bit-identical at any team size.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.buffers import team_work, temp_buffer
from ..runtime.packed_weights import DerivedWeights
from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks, thread_id
from .phases import TapLayout, gathered_product

lane_count = LazyGlobal(".simd", "lane_count")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vadd = LazyGlobal(".simd", "vadd")
vmax = LazyGlobal(".simd", "vmax")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vstore_f32_lanes = LazyGlobal(".simd", "vstore_f32_lanes")
vload_f32_lanes = LazyGlobal(".simd", "vload_f32_lanes")
address = LazyGlobal(".simd", "address")
load_f32 = LazyGlobal(".simd", "load_f32")
prefetch = LazyGlobal(".simd", "prefetch")
prefetch_w = LazyGlobal(".simd", "prefetch_w")

CHANNELS = 4         # output channels per register block
WIDE_CHANNELS = 8    # with 16-lane registers (_direct_blocks_wide): 24 accumulators of the 32
WIDE = True          # tests and benchmarks: False keeps 4-channel blocks at 16 lanes
PREFETCH_BYTES = 1024  # the 8-channel kernel fetches weights this far ahead (32 taps)
PIXELS = 24          # flat outputs per register block: 3 vectors of 8 (48 = 3 x 16 with AVX-512)
# None: the widest the CPU has (16 lanes with AVX-512, else 8); 8 or 16 forces a width
# (tests run both on any machine: LLVM splits 16 lanes into two AVX2 registers)
REGISTER_LANES = None


@compiled(inline=True)
def _load_row(lanes, at):
    """A row's 3 vectors of partial sums (or a block's packed taps) at address at."""
    vb = lane_count(lanes) * 4
    return vload_f32(lanes, at), vload_f32(lanes, at + vb), vload_f32(lanes, at + 2 * vb)


@compiled(inline=True)
def _store_row(at, u0, u1, u2, vb):
    """_load_row's inverse (vb: bytes of a vector)."""
    vstore_f32_at(at, u0)
    vstore_f32_at(at + vb, u1)
    vstore_f32_at(at + 2 * vb, u2)


@compiled(inline=True)
def _pack_taps(x0, offsets, p0, k0, k1, pk, lanes):
    """Taps k0..k1 of the pixel block at flat output p0 (3 vectors each, read at the
    phase buffers' address x0 + (p0 + offsets[k]) * 4) side by side from address pk."""
    vb = lane_count(lanes) * 4
    for k in range(k0, k1):
        at = x0 + (p0 + offsets[k]) * 4
        to = pk + (k - k0) * 3 * vb
        vstore_f32_at(to, vload_f32(lanes, at))
        vstore_f32_at(to + vb, vload_f32(lanes, at + vb))
        vstore_f32_at(to + 2 * vb, vload_f32(lanes, at + 2 * vb))


@compiled(parallel=True)
def _direct_blocks(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, chunk, tile_cb,
                   tile_pb, acc, blocks, work, stride, lanes):
    """out (M, OH, OW) = [relu](sum over taps k of wpack[., k, .] * flat[p + offsets[k]]
    + bias + residual) for output p = oy * wq + ox. flat: the phase buffers, long enough
    that p + offsets[k] < len(flat) for every p < ceil(OH * wq / px) * px (the caller
    checked; px = 3 * lanes, the flat outputs of a register block: 24 with 8 lanes,
    48 with 16); wpack (ceil(M/4), K, 4), zero past M; residual (M, OH * OW) when
    has_residual. Cache blocking: the work items are tiles of tile_pb pixel blocks x
    tile_cb channel blocks; a tile runs the reduction in chunks of `chunk` taps, and per
    chunk every pixel block (chunk x px input floats, in L1) passes over every channel
    block's chunk of weights (tile_cb * 4 * chunk floats, in L2). Partial sums wait in
    acc (ceil(M/4) * 4, ceil(OH * wq / px) * px) between chunks (unused with one chunk);
    each output's sum runs in tap order whatever the tiles and team: bit-identical
    results at every team size. Tiles are split over `blocks` team threads. Each team
    thread's packed chunk lives in its region of `work` (from
    thread_id() * stride, at least panel_floats(chunk) floats; buffers.team_work): the
    caller owns them, because an array made in here would be freed after its last use
    as an array while the loop still writes through its address (blas.py)."""
    m, oh, ow = out.shape
    vb = lane_count(lanes) * 4      # bytes of a vector
    px = 3 * lane_count(lanes)      # flat outputs of a register block
    pxb = px * 4
    n_cb = wpack.shape[0]
    k_count = wpack.shape[1]
    n_pb = (oh * wq + px - 1) // px
    n_pt = (n_pb + tile_pb - 1) // tile_pb
    n_ct = (n_cb + tile_cb - 1) // tile_cb
    items = n_pt * n_ct
    row = acc.shape[1]
    x0 = address(flat)
    o0 = address(out)
    r0 = address(residual)
    c0_ = address(acc)
    w0 = address(wpack)
    zero = vzeros(lanes)
    for t in prange(blocks):
        mine = work[thread_id() * stride:thread_id() * stride + stride]   # this thread's region
        pk = (address(mine) + 63) // 64 * 64    # a pixel block's chunk of input, packed, 64-byte aligned
        for item in range(items * t // blocks, items * (t + 1) // blocks):
            pt = item // n_ct
            ct = item - pt * n_ct
            pb_end = min(n_pb, (pt + 1) * tile_pb)
            cb_end = min(n_cb, (ct + 1) * tile_cb)
            for k0 in range(0, k_count, chunk):
                k1 = min(k_count, k0 + chunk)
                for pb in range(pt * tile_pb, pb_end):
                    p0 = pb * px
                    # the chunk's taps of this pixel block side by side, read by every channel block
                    _pack_taps(x0, offsets, p0, k0, k1, pk, lanes)
                    for cb in range(ct * tile_cb, cb_end):
                        if k0 == 0:
                            a00 = a01 = a02 = a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = zero
                        else:       # the earlier chunks' partial sums
                            ap = c0_ + (cb * 4 * row + p0) * 4
                            a00, a01, a02 = _load_row(lanes, ap)
                            a10, a11, a12 = _load_row(lanes, ap + row * 4)
                            a20, a21, a22 = _load_row(lanes, ap + row * 8)
                            a30, a31, a32 = _load_row(lanes, ap + row * 12)
                        wk = w0 + (cb * k_count + k0) * 16
                        for k in range(k1 - k0):
                            v0, v1, v2 = _load_row(lanes, pk + k * pxb)
                            wa = wk + k * 16
                            c0, c1, c2, c3 = load_f32(wa), load_f32(wa + 4), load_f32(wa + 8), load_f32(wa + 12)
                            a00 = vfma(a00, c0, v0)
                            a01 = vfma(a01, c0, v1)
                            a02 = vfma(a02, c0, v2)
                            a10 = vfma(a10, c1, v0)
                            a11 = vfma(a11, c1, v1)
                            a12 = vfma(a12, c1, v2)
                            a20 = vfma(a20, c2, v0)
                            a21 = vfma(a21, c2, v1)
                            a22 = vfma(a22, c2, v2)
                            a30 = vfma(a30, c3, v0)
                            a31 = vfma(a31, c3, v1)
                            a32 = vfma(a32, c3, v2)
                        if k1 < k_count:    # more chunks to come: park the partial sums
                            ap = c0_ + (cb * 4 * row + p0) * 4
                            _store_row(ap, a00, a01, a02, vb)
                            _store_row(ap + row * 4, a10, a11, a12, vb)
                            _store_row(ap + row * 8, a20, a21, a22, vb)
                            _store_row(ap + row * 12, a30, a31, a32, vb)
                            continue
                        _finish_block(a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, p0, cb, wq,
                                      bias, has_bias, residual, has_residual, relu, out, o0, r0, lanes)


@compiled(inline=True)
def _prefetch_block_out(o0, p0, c_first, m, oh, ow, wq, pxb):
    """prefetchw the output lines a block of 8 channels x pxb bytes from flat output p0
    will be stored to (its first output row's run), before its FMAs: inside a model the
    output is memory other layers evicted, and each store would wait for its line."""
    oy = min(p0 // wq, oh - 1)
    ox = min(p0 - (p0 // wq) * wq, ow - 1)
    for j in range(min(8, m - c_first)):
        at = o0 + (((c_first + j) * oh + oy) * ow + ox) * 4
        for line in range(0, pxb + 63, 64):
            prefetch_w(at + line)


@compiled(inline=True)
def row_of_four(j, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32):
    """Row j (0..3) of a 4-channel x 3-vector register block: its 3 accumulators
    (direct_conv's and stem_conv's finishes pick each channel's row this way)."""
    if j == 0:
        return a00, a01, a02
    if j == 1:
        return a10, a11, a12
    if j == 2:
        return a20, a21, a22
    return a30, a31, a32


@compiled(inline=True)
def _finish_block(a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, p0, cb, wq,
                  bias, has_bias, residual, has_residual, relu, out, o0, r0, lanes):
    """Bias, residual and ReLU on a finished 4 x px register block (px = 3 * lanes),
    stored into out (M, OH, OW) at flat outputs p0.. of channels cb * 4..: as vectors
    when the block lies inside one output row, else each output row's run of its lanes
    with lane-masked stores, columns past the real width dropped."""
    m, oh, ow = out.shape
    nl = lane_count(lanes)
    vb = nl * 4
    px = 3 * nl
    zero = vzeros(lanes)
    oy = p0 // wq
    ox = p0 - oy * wq
    inside = oy < oh and ox + px <= ow
    # a block straddling output rows stores each row's run of lanes from the registers
    # with masked stores (a lane-by-lane copy through a tile, which most blocks of maps
    # not a multiple of px wide took, cost ~0.6x the block's FMAs: 16 -> 64 3x3 at
    # 55x55 ran at 78 GFLOP/s; whole vectors read back from the tile stalled on store
    # forwarding and ran slower still)
    last = min(oh, (p0 + px - 1) // wq + 1)
    for j in range(min(4, m - cb * 4)):
        o = cb * 4 + j
        u0, u1, u2 = row_of_four(j, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32)
        if has_bias:
            b = bias[o]
            u0 = vadds(u0, b)
            u1 = vadds(u1, b)
            u2 = vadds(u2, b)
        if inside:
            at = (o * oh + oy) * ow + ox
            if has_residual:
                rr = r0 + at * 4
                u0 = vadd(u0, vload_f32(lanes, rr))
                u1 = vadd(u1, vload_f32(lanes, rr + vb))
                u2 = vadd(u2, vload_f32(lanes, rr + 2 * vb))
            if relu:            # max(0, v): NaN and -0.0 kept, as np.maximum(v, 0)
                u0 = vmax(zero, u0)
                u1 = vmax(zero, u1)
                u2 = vmax(zero, u2)
            vstore_f32_at(o0 + at * 4, u0)
            vstore_f32_at(o0 + at * 4 + vb, u1)
            vstore_f32_at(o0 + at * 4 + 2 * vb, u2)
            continue
        for y in range(oy, last):
            # the block's lanes l0..l1 are output row y's columns c0..c1
            c0 = max(0, p0 - y * wq)
            c1 = min(ow, p0 + px - y * wq)
            if c1 <= c0:
                continue
            l0 = y * wq + c0 - p0
            l1 = l0 + c1 - c0
            base = (o * oh + y) * ow + p0 - y * wq      # out's flat index of lane 0
            for i in range(3):
                lo = max(l0 - i * nl, 0)
                hi = min(l1 - i * nl, nl)
                if lo >= hi:
                    continue
                v = u0 if i == 0 else (u1 if i == 1 else u2)
                at = (base + i * nl) * 4
                if has_residual:
                    v = vadd(v, vload_f32_lanes(lanes, r0 + at, lo, hi))
                if relu:
                    v = vmax(zero, v)
                vstore_f32_lanes(o0 + at, v, lo, hi)


@compiled(inline=True)
def fma_8x3(wk, v0, v1, v2, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, a40, a41, a42, a50, a51,
            a52, a60, a61, a62, a70, a71, a72):
    """One step of an 8-channel x 3-vector register block (direct_conv, stem_conv and
    pointwise_conv's 24 accumulators): the 8 float32 weights side by side at address wk,
    each times v0, v1 and v2 into its channel's accumulators (24 FMAs); returns them."""
    c = load_f32(wk)
    a00 = vfma(a00, c, v0)
    a01 = vfma(a01, c, v1)
    a02 = vfma(a02, c, v2)
    c = load_f32(wk + 4)
    a10 = vfma(a10, c, v0)
    a11 = vfma(a11, c, v1)
    a12 = vfma(a12, c, v2)
    c = load_f32(wk + 8)
    a20 = vfma(a20, c, v0)
    a21 = vfma(a21, c, v1)
    a22 = vfma(a22, c, v2)
    c = load_f32(wk + 12)
    a30 = vfma(a30, c, v0)
    a31 = vfma(a31, c, v1)
    a32 = vfma(a32, c, v2)
    c = load_f32(wk + 16)
    a40 = vfma(a40, c, v0)
    a41 = vfma(a41, c, v1)
    a42 = vfma(a42, c, v2)
    c = load_f32(wk + 20)
    a50 = vfma(a50, c, v0)
    a51 = vfma(a51, c, v1)
    a52 = vfma(a52, c, v2)
    c = load_f32(wk + 24)
    a60 = vfma(a60, c, v0)
    a61 = vfma(a61, c, v1)
    a62 = vfma(a62, c, v2)
    c = load_f32(wk + 28)
    a70 = vfma(a70, c, v0)
    a71 = vfma(a71, c, v1)
    a72 = vfma(a72, c, v2)
    return (a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, a40, a41, a42, a50, a51, a52, a60, a61,
            a62, a70, a71, a72)


@compiled(inline=True)
def fma_8x1(wk, v, a0, a1, a2, a3, a4, a5, a6, a7):
    """fma_8x3 for one vector: 8 accumulators."""
    a0 = vfma(a0, load_f32(wk), v)
    a1 = vfma(a1, load_f32(wk + 4), v)
    a2 = vfma(a2, load_f32(wk + 8), v)
    a3 = vfma(a3, load_f32(wk + 12), v)
    a4 = vfma(a4, load_f32(wk + 16), v)
    a5 = vfma(a5, load_f32(wk + 20), v)
    a6 = vfma(a6, load_f32(wk + 24), v)
    a7 = vfma(a7, load_f32(wk + 28), v)
    return a0, a1, a2, a3, a4, a5, a6, a7


@compiled(parallel=True)
def _direct_blocks_wide(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, chunk, tile_cb,
                        tile_pb, acc, blocks, work, stride, lanes):
    """_direct_blocks with blocks of 8 output channels (wpack (ceil(M/8), K, 8), acc
    (ceil(M/8) * 8, ...)) for 16-lane registers: 24 accumulators of the 32, per tap 3
    vector loads, 8 broadcast weights, 24 FMAs (4 channels left 20 registers idle and
    spent 7 loads per 12 FMAs). Finished as two 4-channel halves."""
    m, oh, ow = out.shape
    vb = lane_count(lanes) * 4
    px = 3 * lane_count(lanes)
    pxb = px * 4
    n_cb = wpack.shape[0]
    k_count = wpack.shape[1]
    n_pb = (oh * wq + px - 1) // px
    n_pt = (n_pb + tile_pb - 1) // tile_pb
    n_ct = (n_cb + tile_cb - 1) // tile_cb
    items = n_pt * n_ct
    row = acc.shape[1]
    x0 = address(flat)
    o0 = address(out)
    r0 = address(residual)
    c0_ = address(acc)
    w0 = address(wpack)
    zero = vzeros(lanes)
    for t in prange(blocks):
        mine = work[thread_id() * stride:thread_id() * stride + stride]
        pk = (address(mine) + 63) // 64 * 64
        for item in range(items * t // blocks, items * (t + 1) // blocks):
            pt = item // n_ct
            ct = item - pt * n_ct
            pb_end = min(n_pb, (pt + 1) * tile_pb)
            cb_end = min(n_cb, (ct + 1) * tile_cb)
            for k0 in range(0, k_count, chunk):
                k1 = min(k_count, k0 + chunk)
                for pb in range(pt * tile_pb, pb_end):
                    p0 = pb * px
                    _pack_taps(x0, offsets, p0, k0, k1, pk, lanes)
                    for cb in range(ct * tile_cb, cb_end):
                        ap = c0_ + (cb * 8 * row + p0) * 4
                        if k0 == 0:
                            a00 = a01 = a02 = a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = zero
                            a40 = a41 = a42 = a50 = a51 = a52 = a60 = a61 = a62 = a70 = a71 = a72 = zero
                        else:
                            a00, a01, a02 = _load_row(lanes, ap)
                            a10, a11, a12 = _load_row(lanes, ap + row * 4)
                            a20, a21, a22 = _load_row(lanes, ap + row * 8)
                            a30, a31, a32 = _load_row(lanes, ap + row * 12)
                            a40, a41, a42 = _load_row(lanes, ap + row * 16)
                            a50, a51, a52 = _load_row(lanes, ap + row * 20)
                            a60, a61, a62 = _load_row(lanes, ap + row * 24)
                            a70, a71, a72 = _load_row(lanes, ap + row * 28)
                        wk = w0 + (cb * k_count + k0) * 32
                        if k1 == k_count:
                            _prefetch_block_out(o0, p0, cb * 8, m, oh, ow, wq, pxb)
                        for k in range(k1 - k0):
                            v0, v1, v2 = _load_row(lanes, pk + k * pxb)
                            prefetch(wk + PREFETCH_BYTES)
                            (a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, a40, a41, a42, a50, a51,
                             a52, a60, a61, a62, a70, a71, a72) = \
                                fma_8x3(wk, v0, v1, v2, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32,
                                        a40, a41, a42, a50, a51, a52, a60, a61, a62, a70, a71, a72)
                            wk += 32
                        if k1 < k_count:    # more chunks to come: park the partial sums
                            _store_row(ap, a00, a01, a02, vb)
                            _store_row(ap + row * 4, a10, a11, a12, vb)
                            _store_row(ap + row * 8, a20, a21, a22, vb)
                            _store_row(ap + row * 12, a30, a31, a32, vb)
                            _store_row(ap + row * 16, a40, a41, a42, vb)
                            _store_row(ap + row * 20, a50, a51, a52, vb)
                            _store_row(ap + row * 24, a60, a61, a62, vb)
                            _store_row(ap + row * 28, a70, a71, a72, vb)
                            continue
                        _finish_block(a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, p0, 2 * cb, wq,
                                      bias, has_bias, residual, has_residual, relu, out, o0, r0, lanes)
                        if 8 * cb + 4 < m:
                            _finish_block(a40, a41, a42, a50, a51, a52, a60, a61, a62, a70, a71, a72, p0, 2 * cb + 1,
                                          wq, bias, has_bias, residual, has_residual, relu, out, o0, r0,
                                          lanes)


@_direct_blocks.numpy_twin
def _direct_blocks_numpy(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, chunk, tile_cb,
                         tile_pb, acc, blocks, work, stride, lanes):
    """All outputs at once: the taps gathered (K, OH * wq), one product, the crop."""
    m, oh, _ = out.shape
    taps = flat[offsets[:, None] + np.arange(oh * wq)[None, :]]
    w2 = wpack.transpose(0, 2, 1).reshape(-1, wpack.shape[1])[:m]
    gathered_product(taps, w2, out, wq, bias, has_bias, residual, has_residual, relu)


# the twin does not depend on the block width: one serves both kernels
_direct_blocks_wide.numpy_twin(_direct_blocks_numpy)


# One block runs without a parallel region (conv.py's _phase_copy_serial says why).
_direct_blocks_serial = serial_variant(_direct_blocks, "_direct_blocks_serial")
_direct_blocks_wide_serial = serial_variant(_direct_blocks_wide, "_direct_blocks_wide_serial")


def panel_floats(chunk, pixels=PIXELS):
    """Floats of one team thread's work region: a chunk of taps of `pixels` floats and
    16 floats of slack for aligning it to 64 bytes."""
    return chunk * pixels + 16


def register_lanes():
    """The Lanes token the kernel is compiled for: 16 lanes (48-output blocks) where the
    CPU has AVX-512, else 8 (24-output blocks); REGISTER_LANES forces one. 1 thread,
    bias + ReLU, Intel Xeon AVX-512 VM, 8 -> 16 lanes: 512 -> 512 3x3 at 14x14 12.3 ->
    8.2 ms, 96 -> 256 5x5/s2 11.0 -> 7.8, 64 -> 64 3x3 at 56 2.84 -> 2.10, 16 -> 64 at 55
    0.81 -> 0.69; 7x7 maps gain least (512 at 7x7 3.88 -> 3.43: 63 flat outputs take two
    48-output blocks against three of 24)."""
    from ..runtime import simd
    return simd.LANES_16 if (REGISTER_LANES or simd.target_lanes()) == 16 else simd.LANES_8


def direct_is_wide(m):
    """Whether direct_plan runs a conv of m output channels in 8-channel blocks."""
    return register_lanes().n == 16 and WIDE and m > CHANNELS


def block_channels(m):
    """Output channels per register block for a conv of m output channels: WIDE_CHANNELS
    where direct_is_wide says so, else CHANNELS (the direct, stem and grouped 1x1 kernels)."""
    return WIDE_CHANNELS if direct_is_wide(m) else CHANNELS


def pack_weights(w, channels=CHANNELS):
    """w (M, C, kh, kw) -> (ceil(M/channels), C*kh*kw, channels) float32: the weights of
    a block of `channels` output channels for one tap side by side (zeros past M)."""
    m = w.shape[0]
    k = int(np.prod(w.shape[1:]))
    n_cb = -(-m // channels)
    packed = np.zeros((n_cb * channels, k), np.float32)
    packed[:m] = w.reshape(m, k)
    return np.ascontiguousarray(packed.reshape(n_cb, channels, k).transpose(0, 2, 1))


def unpack_weights(packed, shape):
    """pack_weights' inverse: the weights of `shape` (M, C, kh, kw) back, bit for bit."""
    n_cb, k, channels = packed.shape
    return packed.transpose(0, 2, 1).reshape(n_cb * channels, k)[:shape[0]].reshape(shape)


def direct_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """See the module docstring. Geometry is checked here, once: the compiled loop
    reads the phase buffers at precomputed offsets without bounds checks."""
    if np.dtype(dtype) != np.float32 or len(x_shape) != 4 or any(p < 0 for p in pads):
        return None
    n, c, h, wd = x_shape
    m, cw, kh, kw = w_shape
    if cw != c:
        return None
    oh, ow = out_spatial
    lanes = register_lanes()
    px = 3 * lanes.n
    channels = block_channels(m)
    taps = TapLayout(x_shape, w_shape, strides, pads, dilations, out_spatial, px)
    n_pb, wq, offsets = taps.blocks, taps.wq, taps.offsets
    n_cb = -(-m // channels)
    chunk, tile_cb, tile_pb = blocking(c * kh * kw, n_cb, n_pb, pixels=px, channels=channels)
    n_tiles = -(-n_pb // tile_pb) * -(-n_cb // tile_cb)
    chunks = -(-(c * kh * kw) // chunk)
    acc_shape = (n_cb * channels, n_pb * px) if chunks > 1 else (1, 1)
    packed = DerivedWeights(lambda w: pack_weights(w, channels), layout=("channel blocks", channels),
                            unpack=unpack_weights)

    def setup():
        blocks = team_blocks(n_tiles, c * kh * kw * channels * px * tile_cb * tile_pb)
        if channels == WIDE_CHANNELS:
            return blocks, _direct_blocks_wide if blocks > 1 else _direct_blocks_wide_serial
        return blocks, _direct_blocks if blocks > 1 else _direct_blocks_serial
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None, wpack=None):
        """wpack: pack_weights(w, compute.channels) made by the caller (grouped_direct_plan),
        else packed here."""
        if wpack is None:
            wpack = packed(w)
        b = bias_values(bias, np.float32)
        blocks, kernel = per_team(setups, setup)
        acc = temp_buffer("direct_acc", acc_shape, np.float32)
        work, stride = team_work(panel_floats(chunk, px), np.float32)
        for i in range(n):
            flat = taps.fill(x[i])
            res = residual[i].reshape(m, oh * ow) if residual is not None else _NO_RESIDUAL
            kernel(flat, offsets, wpack, b, bias is not None, res, residual is not None, relu, out[i], wq,
                   chunk, tile_cb, tile_pb, acc, blocks, work, stride, lanes)
    compute.channels = channels
    compute.blocking = (chunk, tile_cb, tile_pb)      # tests, benchmarks
    compute.pixels = px
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute


# Cache blocking (see _direct_blocks): a pixel block's chunk of input, chunk x 24
# floats read through the offsets, stays in L1 (32 KB); a tile's chunk of weights,
# tile_cb x 4 x chunk floats, in L2 (512 KB); the partial sums of a tile between
# chunks, tile_cb x 4 x tile_pb x 24 floats, in L2 too. With 48-output blocks (16
# lanes) a chunk has half the taps and a tile half the pixel blocks: the same bytes.
CHUNK_TAPS = 256
# a reduction whose packed taps fit this many bytes (L1) is one chunk: two chunks of 72
# taps parked and reloaded 811 KB of partial sums for squeezenet's 16 -> 64 3x3 at 55x55
# (0.62 -> 0.54 ms warm, 0.73 -> 0.66 cold with one chunk of 144)
ONE_CHUNK_BYTES = 32 << 10
TILE_WEIGHT_BYTES = 192 << 10
TILE_PIXEL_BLOCKS = 8


def blocking(k_count, n_cb, n_pb, chunk=None, weight_bytes=None, pixel_blocks=None, pixels=PIXELS,
             channels=CHANNELS):
    """(taps per chunk, channel blocks per tile, pixel blocks per tile) for a reduction of
    k_count taps, n_cb channel blocks and n_pb pixel blocks of `pixels` outputs. Depends
    on the geometry only (never on the team's size), so every output's sum runs in the
    same order."""
    chunk = chunk or max(1, CHUNK_TAPS * PIXELS // pixels)
    if k_count * pixels * 4 <= ONE_CHUNK_BYTES:
        chunk = max(chunk, k_count)
    chunks = -(-k_count // chunk)
    chunk = -(-k_count // chunks)                 # balanced chunks
    tile_cb = max(1, min(n_cb, (weight_bytes or TILE_WEIGHT_BYTES) // (chunk * channels * 4)))
    tile_cb = -(-n_cb // -(-n_cb // tile_cb))     # balanced channel tiles
    tile_pb = max(1, min(n_pb, pixel_blocks or max(1, TILE_PIXEL_BLOCKS * PIXELS // pixels)))
    tile_pb = -(-n_pb // -(-n_pb // tile_pb))
    return chunk, tile_cb, tile_pb


_NO_RESIDUAL = np.zeros((1, 1), np.float32)


def grouped_direct_plan(x_shape, w_shape, strides, pads, dilations, group, out_spatial, dtype):
    """A grouped conv as `group` runs of direct_plan's kernel, one per group (its channel
    slices of x, w, out, bias and residual), the weights packed once per weight array
    for every group; None where direct_plan is."""
    n, c = x_shape[:2]
    m = w_shape[0]
    cg, mg = c // group, m // group
    inner = direct_plan((n, cg) + tuple(x_shape[2:]), (mg,) + tuple(w_shape[1:]), strides, pads, dilations,
                        out_spatial, dtype)
    if inner is None:
        return None
    packed = DerivedWeights(lambda w: [pack_weights(w[g * mg:(g + 1) * mg], inner.channels) for g in range(group)])

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        packs = packed(w)
        for g in range(group):
            cs, ms = slice(g * cg, (g + 1) * cg), slice(g * mg, (g + 1) * mg)
            inner(x[:, cs], None, out[:, ms], scratch, None if bias is None else bias[ms], relu,
                  None if residual is None else residual[:, ms], wpack=packs[g])
    compute.blocking = inner.blocking
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute
