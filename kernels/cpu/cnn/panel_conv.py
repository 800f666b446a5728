"""2-D convolutions (float32, group 1) on small maps, on CPUs with 16-lane (AVX-512)
vector registers: a register-blocked product with the output channels in the vector
lanes and the inputs broadcast (onnxruntime's NCHWc kernels work this way).

Public:
    panel_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None), or None
        where this path does not take the conv (see `takes`).
    takes(c, m, taps, pixels, dtype)   whether it does (conv.py asks for 1x1s and for
        the kxk convs the direct kernel would take): float32, the CPU's registers hold
        16 lanes; 1x1s with pixels <= MAX_PIXELS, c >= MIN_CHANNELS, m >= MIN_OUTPUTS;
        kxk with pixels <= MAX_PIXELS_KXK, m >= MIN_OUTPUTS_KXK (FORCE: every float32
        conv asked about, for tests on any CPU).
    pack_panels(w) -> (ceil(M/32), C*kh*kw, 32) float32, zeros past M

Why: on late layers a map has 49-196 outputs. direct_conv.py's pixel-vector blocks (48
flat outputs at 16 lanes) compute 96 for a 7x7 map's 63 flat outputs, and OpenBLAS's
kernels (blocked for long rows) ran 7x7 1x1 products at 80-90 GFLOP/s. Here the
weights are packed once into panels of 32 output channels (two 16-lane vectors per
tap, read in order, prefetched PREFETCH_BYTES ahead), and a block of 32 channels x 14
pixels is 28 accumulators held in registers: per tap 2 vector loads of weights, 14
broadcast inputs, 28 FMAs. kxk convs read the direct kernel's stride-phase buffers at
its tap offsets (phases.TapLayout); 1x1s read their input in place, tap k one plane
further, the last block's columns from a zero-padded copy when the map is not a
multiple of 14.

  * a block's 14 pixels are two runs of 7 (row_blocks): on maps up to 7 wide, two
    output rows; on maps 12-14 wide, one row; else 14 consecutive flat outputs (the
    columns past a row's end, over the flattened rows' padding, computed and
    dropped). 1 thread, 12 flat outputs -> row blocks, ms: 512 -> 512 3x3 at 7x7
    2.28 -> 1.80 (56 outputs computed for 49, against 72), 192 -> 224 at 7x7 0.385 ->
    0.309, 256 -> 256 at 14x14 1.82 -> 1.52 (196 for 196, against 228), 64 -> 256 at
    13x13 0.47 -> 0.40, the 1x1s at 7x7 0.92-0.98x;
  * the blocks are (channel panel, pixel block) items, channel panel outer; a thread's
    items of one panel run the reduction in chunks of CHUNK_TAPS taps: a chunk of the
    panel's weights (192 x 32 floats, in L1) passes over all of them, their partial
    sums parked in the thread's work region between chunks (the same float32 sums in
    the same order: bit-identical to one pass; 512 -> 512 3x3 at 7x7 2.74-2.83 ->
    2.60-2.65 ms, 3x3/s2 at 14 2.60-2.79 -> 2.46-2.53, the short reductions unchanged);
  * a finished block (14 pixels x 32 channels, channels in the lanes) is transposed in
    registers (simd.vtranspose16_at, two 16 x 16s) into channel rows of 14 pixel lanes,
    and each row gets bias, residual and ReLU as one vector and is stored with a masked
    store per output row it touches (block_segments, made once per plan). The scalar
    finish it replaced (448 stores a block, one per pixel and channel) was 16-20% of
    the short-reduction layers: 48 -> 192 3x3 at 13x13 0.298 -> 0.269 ms, 64 -> 256
    0.493 -> 0.437 (1 thread, warm);
  * every output's sum runs over the input channels in order whichever thread computes
    it: results are the same at any team size.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.buffers import team_work
from ..runtime.packed_weights import DerivedWeights
from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks, thread_id
from .direct_conv import _NO_RESIDUAL, pack_weights, unpack_weights
from .phases import TapLayout, gathered_product

LANES_16 = LazyGlobal(".simd", "LANES_16")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vfma = LazyGlobal(".simd", "vfma")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vstore_f32_lanes = LazyGlobal(".simd", "vstore_f32_lanes")
vmerge_f32_lanes = LazyGlobal(".simd", "vmerge_f32_lanes")
vtranspose16_at = LazyGlobal(".simd", "vtranspose16_at")
vadds = LazyGlobal(".simd", "vadds")
vadd = LazyGlobal(".simd", "vadd")
vmax = LazyGlobal(".simd", "vmax")
address = LazyGlobal(".simd", "address")
load_f32 = LazyGlobal(".simd", "load_f32")
prefetch = LazyGlobal(".simd", "prefetch")
prefetch_w = LazyGlobal(".simd", "prefetch_w")

CHANNELS = 32        # output channels per register block: 2 vectors of 16 lanes
PIXELS = 14          # pixels per register block (28 accumulators of the 32 registers)
CHUNK_TAPS = 192     # taps per chunk of the reduction: a panel's chunk of weights, 24 KB, stays in L1
PREFETCH_BYTES = 2048  # weights fetched this far ahead of their use (16 taps)

# Where it takes the conv. Intel Xeon AVX-512 VM, 1 thread, bias + ReLU, hot caches, ms
# (benchmarks/RESULTS.md, "Issue 38 on an Intel Xeon AVX-512 VM"):
#   kxk convs, against the direct kernel at 16 lanes: 512 -> 512 3x3 at 7x7 3.02-3.41 ->
#   2.60-2.65, 3x3/s2 at 14 3.40-3.68 -> 2.46-2.53, 192 -> 224 at 7x7 0.65 -> 0.47-0.49,
#   128 -> 32 0.110 -> 0.08, at 14x14 outputs 0.87-0.97x, at 28x28 even (so <= 196
#   outputs); conv.py asks only about what its blocked branch takes, which on 16-lane
#   CPUs includes the stride-1 3x3s up to 14x14 (with row blocks the panels beat
#   Winograd there inside the models: conv.WIDE_MAX_WINOGRAD_PIXELS; at 28x28 they lost
#   1.12-1.73x alone, so Winograd keeps those);
#   1x1s, against the OpenBLAS GEMM: 2048 -> 512 at 7x7 1.25-1.31 -> 1.09-1.13, 1024 ->
#   192 0.25 -> 0.21-0.23; they lost at 14x14 and up (1.0-1.9x: OpenBLAS's blocking wins
#   on long rows) and with few channels (832 -> 48 at 7x7 1.06x, squeezenet's 64 -> 16
#   at 55 1.6x: half a panel is padding).
# Whole models, panels off / on alternating in one process: resnet50 0.969x,
# inception_v2 0.929x, densenet121 0.977x, inception_v1 0.966x, squeezenet 0.956x.
MAX_PIXELS = 64
MIN_CHANNELS = 512
MIN_OUTPUTS = 128
MAX_PIXELS_KXK = 196
MIN_OUTPUTS_KXK = 32
FORCE = False        # tests: take every float32 conv asked about, also where the CPU has 8-lane registers


def takes(c, m, taps, pixels, dtype):
    """Whether a conv of c input channels, m outputs, taps = kh * kw and `pixels` outputs
    per image runs here (see the thresholds above). conv.py asks it for the 1x1s and for
    the kxk convs the direct kernel would take."""
    if np.dtype(dtype) != np.float32 or min(c, m, taps, pixels) < 1:
        return False
    if FORCE:
        return True
    if taps == 1:
        wanted = pixels <= MAX_PIXELS and c >= MIN_CHANNELS and m >= MIN_OUTPUTS
    else:
        wanted = pixels <= MAX_PIXELS_KXK and m >= MIN_OUTPUTS_KXK
    if not wanted:
        return False
    from ..runtime import simd
    return simd.target_lanes() == 16


@compiled(inline=True)
def _prefetch_block_out(o0, o_first, count, plane, segments, pb):
    """prefetchw the output lines pixel block pb's segments cover in channels o_first ..
    o_first + count - 1, before the last chunk's FMAs: inside a model the output is
    memory other layers evicted, and each masked store would wait for its line."""
    for c in range(count):
        oa = o0 + (o_first + c) * plane
        for g in range(segments.shape[1]):
            lo, hi = segments[pb, g, 1], segments[pb, g, 2]
            if lo < hi:
                prefetch_w(oa + (segments[pb, g, 0] + lo) * 4)
                prefetch_w(oa + (segments[pb, g, 0] + hi - 1) * 4)


@compiled(inline=True)
def _finish_rows(tile, o_first, count, bias, has_bias, r0, has_residual, relu, o0, plane, segments, pb):
    """Channels o_first .. o_first + count - 1 of pixel block pb, channel row c's 16
    pixel lanes at tile + 64 * c: bias, residual and ReLU, then each of the block's
    segments (lanes of one output row: block_segments) stored with a masked store."""
    zero = vzeros(LANES_16)
    n_seg = segments.shape[1]
    for c in range(count):
        o = o_first + c
        y = vload_f32(LANES_16, tile + c * 64)
        if has_bias:
            y = vadds(y, bias[o])
        if has_residual:
            ra = r0 + o * plane
            r = zero
            for g in range(n_seg):
                r = vmerge_f32_lanes(r, ra + segments[pb, g, 0] * 4, segments[pb, g, 1], segments[pb, g, 2])
            y = vadd(y, r)
        if relu:            # max(0, y): NaN and -0.0 kept, as np.maximum(y, 0)
            y = vmax(zero, y)
        oa = o0 + o * plane
        for g in range(n_seg):
            vstore_f32_lanes(oa + segments[pb, g, 0] * 4, y, segments[pb, g, 1], segments[pb, g, 2])


@compiled(parallel=True)
def _panel_blocks(flat, offsets, tap_step, tail, has_tail, wpanel, bias, has_bias, residual, has_residual, relu, out,
                  segments, wq, n_pb, block_step, second, chunk, blocks, work, stride):
    """out (M, OH, OW) = [relu](sum over taps k of wpanel[., k, .] * flat[p + offsets[k]]
    + bias + residual) for flat output p = oy * wq + ox. Block b's 14 pixels are the flat
    outputs p0 .. p0 + 6 and p0 + second .. p0 + second + 6, p0 = b * block_step (flat
    blocks: block_step 14, second 7; rows of 8-14 outputs: block_step wq, second 7; two
    rows of up to 7: block_step 2 * wq, second wq). flat: phases.TapLayout's buffers,
    long enough that p + offsets[k] < len(flat) for every pixel p of every block (the
    caller checked); wpanel (ceil(M/32), K, 32) float32, zero past M; residual
    (M, OH * OW) when has_residual. Items (panel, pixel block) are split over `blocks`
    team threads; a thread's items of one panel run the reduction in chunks of `chunk`
    taps, each chunk of the panel's weights passed over all of them, their (14, 32)
    partial sums parked in the thread's region of `work` (from thread_id() * stride,
    n_pb * 448 floats; buffers.team_work) between chunks; the last chunk finishes each
    block from the registers (_finish_rows; segments: block_segments' table). tap_step > 0: tap
    k's input is k * tap_step bytes after tap 0's (offsets unread). has_tail: the last pixel block reads
    `tail` (K, 14) instead, tap k at row k (a 1x1 conv reading its input in place, whose
    last block would run past the input's end)."""
    m, oh, ow = out.shape
    n_cb = wpanel.shape[0]
    k_count = wpanel.shape[1]
    items = n_cb * n_pb
    x0 = address(flat)
    w0 = address(wpanel)
    o0 = address(out)
    r0 = address(residual)
    plane = oh * ow * 4
    zero = vzeros(LANES_16)
    for t in prange(blocks):
        mine = work[thread_id() * stride:thread_id() * stride + stride]
        m0 = address(mine)
        i0 = items * t // blocks
        i1 = items * (t + 1) // blocks
        item = i0
        while item < i1:
            # a run of this thread's items in one panel: the reduction chunk by chunk, each
            # chunk of the panel's weights (in L1) passed over every pixel block of the run,
            # the partial sums parked in the thread's region between chunks
            cb = item // n_pb
            run_end = min(i1, (cb + 1) * n_pb)
            for k0 in range(0, k_count, chunk):
                k1 = min(k_count, k0 + chunk)
                for it in range(item, run_end):
                    pb = it - cb * n_pb
                    sp = m0 + (it - item) * 1792         # this block's 14 x 32 sums
                    if k0 == 0:
                        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = a60 = a61 = zero
                        a70 = a71 = a80 = a81 = a90 = a91 = aa0 = aa1 = ab0 = ab1 = ac0 = ac1 = ad0 = ad1 = zero
                    else:
                        a00 = vload_f32(LANES_16, sp + 0)
                        a01 = vload_f32(LANES_16, sp + 64)
                        a10 = vload_f32(LANES_16, sp + 128)
                        a11 = vload_f32(LANES_16, sp + 192)
                        a20 = vload_f32(LANES_16, sp + 256)
                        a21 = vload_f32(LANES_16, sp + 320)
                        a30 = vload_f32(LANES_16, sp + 384)
                        a31 = vload_f32(LANES_16, sp + 448)
                        a40 = vload_f32(LANES_16, sp + 512)
                        a41 = vload_f32(LANES_16, sp + 576)
                        a50 = vload_f32(LANES_16, sp + 640)
                        a51 = vload_f32(LANES_16, sp + 704)
                        a60 = vload_f32(LANES_16, sp + 768)
                        a61 = vload_f32(LANES_16, sp + 832)
                        a70 = vload_f32(LANES_16, sp + 896)
                        a71 = vload_f32(LANES_16, sp + 960)
                        a80 = vload_f32(LANES_16, sp + 1024)
                        a81 = vload_f32(LANES_16, sp + 1088)
                        a90 = vload_f32(LANES_16, sp + 1152)
                        a91 = vload_f32(LANES_16, sp + 1216)
                        aa0 = vload_f32(LANES_16, sp + 1280)
                        aa1 = vload_f32(LANES_16, sp + 1344)
                        ab0 = vload_f32(LANES_16, sp + 1408)
                        ab1 = vload_f32(LANES_16, sp + 1472)
                        ac0 = vload_f32(LANES_16, sp + 1536)
                        ac1 = vload_f32(LANES_16, sp + 1600)
                        ad0 = vload_f32(LANES_16, sp + 1664)
                        ad1 = vload_f32(LANES_16, sp + 1728)
                    if k1 == k_count:
                        _prefetch_block_out(o0, cb * 32, min(32, m - cb * 32), plane, segments, pb)
                    wk = w0 + (cb * k_count + k0) * 128
                    xs = x0 + pb * block_step * 4
                    step = tap_step
                    gap = second * 4
                    if has_tail and pb == n_pb - 1:
                        xs = address(tail)
                        step = 56
                        gap = 28
                    for k in range(k0, k1):
                        xa = xs + offsets[k] * 4 if step == 0 else xs + k * step
                        xb = xa + gap
                        u0 = vload_f32(LANES_16, wk)
                        u1 = vload_f32(LANES_16, wk + 64)
                        prefetch(wk + PREFETCH_BYTES)
                        prefetch(wk + PREFETCH_BYTES + 64)
                        s = load_f32(xa + 0)
                        a00 = vfma(a00, s, u0)
                        a01 = vfma(a01, s, u1)
                        s = load_f32(xa + 4)
                        a10 = vfma(a10, s, u0)
                        a11 = vfma(a11, s, u1)
                        s = load_f32(xa + 8)
                        a20 = vfma(a20, s, u0)
                        a21 = vfma(a21, s, u1)
                        s = load_f32(xa + 12)
                        a30 = vfma(a30, s, u0)
                        a31 = vfma(a31, s, u1)
                        s = load_f32(xa + 16)
                        a40 = vfma(a40, s, u0)
                        a41 = vfma(a41, s, u1)
                        s = load_f32(xa + 20)
                        a50 = vfma(a50, s, u0)
                        a51 = vfma(a51, s, u1)
                        s = load_f32(xa + 24)
                        a60 = vfma(a60, s, u0)
                        a61 = vfma(a61, s, u1)
                        s = load_f32(xb + 0)
                        a70 = vfma(a70, s, u0)
                        a71 = vfma(a71, s, u1)
                        s = load_f32(xb + 4)
                        a80 = vfma(a80, s, u0)
                        a81 = vfma(a81, s, u1)
                        s = load_f32(xb + 8)
                        a90 = vfma(a90, s, u0)
                        a91 = vfma(a91, s, u1)
                        s = load_f32(xb + 12)
                        aa0 = vfma(aa0, s, u0)
                        aa1 = vfma(aa1, s, u1)
                        s = load_f32(xb + 16)
                        ab0 = vfma(ab0, s, u0)
                        ab1 = vfma(ab1, s, u1)
                        s = load_f32(xb + 20)
                        ac0 = vfma(ac0, s, u0)
                        ac1 = vfma(ac1, s, u1)
                        s = load_f32(xb + 24)
                        ad0 = vfma(ad0, s, u0)
                        ad1 = vfma(ad1, s, u1)
                        wk += 128
                    if k1 < k_count:     # more chunks to come: park the partial sums
                        vstore_f32_at(sp + 0, a00)
                        vstore_f32_at(sp + 64, a01)
                        vstore_f32_at(sp + 128, a10)
                        vstore_f32_at(sp + 192, a11)
                        vstore_f32_at(sp + 256, a20)
                        vstore_f32_at(sp + 320, a21)
                        vstore_f32_at(sp + 384, a30)
                        vstore_f32_at(sp + 448, a31)
                        vstore_f32_at(sp + 512, a40)
                        vstore_f32_at(sp + 576, a41)
                        vstore_f32_at(sp + 640, a50)
                        vstore_f32_at(sp + 704, a51)
                        vstore_f32_at(sp + 768, a60)
                        vstore_f32_at(sp + 832, a61)
                        vstore_f32_at(sp + 896, a70)
                        vstore_f32_at(sp + 960, a71)
                        vstore_f32_at(sp + 1024, a80)
                        vstore_f32_at(sp + 1088, a81)
                        vstore_f32_at(sp + 1152, a90)
                        vstore_f32_at(sp + 1216, a91)
                        vstore_f32_at(sp + 1280, aa0)
                        vstore_f32_at(sp + 1344, aa1)
                        vstore_f32_at(sp + 1408, ab0)
                        vstore_f32_at(sp + 1472, ab1)
                        vstore_f32_at(sp + 1536, ac0)
                        vstore_f32_at(sp + 1600, ac1)
                        vstore_f32_at(sp + 1664, ad0)
                        vstore_f32_at(sp + 1728, ad1)
                        continue
                    # the last chunk: the block's 14 pixels x 32 channels, transposed in
                    # registers to channel rows of pixel lanes (over its parking place),
                    # finished a channel row at a time
                    c0 = cb * 32
                    vtranspose16_at(sp, a00, a10, a20, a30, a40, a50, a60, a70, a80, a90, aa0, ab0, ac0, ad0, zero, zero)
                    _finish_rows(sp, c0, min(16, m - c0), bias, has_bias, r0, has_residual, relu, o0, plane, segments,
                                 pb)
                    if m - c0 > 16:
                        vtranspose16_at(sp, a01, a11, a21, a31, a41, a51, a61, a71, a81, a91, aa1, ab1, ac1, ad1, zero,
                                        zero)
                        _finish_rows(sp, c0 + 16, min(16, m - c0 - 16), bias, has_bias, r0, has_residual, relu, o0,
                                     plane, segments, pb)
            item = run_end


@_panel_blocks.numpy_twin
def _panel_blocks_numpy(flat, offsets, tap_step, tail, has_tail, wpanel, bias, has_bias, residual, has_residual, relu,
                        out, segments, wq, n_pb, block_step, second, chunk, blocks, work, stride):
    """All outputs at once: the taps gathered (K, OH * wq), one product, the crop."""
    m, oh, _ = out.shape
    if tap_step:
        taps = flat.reshape(-1, oh * wq)       # a 1x1 conv's input, read in place
    else:
        taps = flat[offsets[:, None] + np.arange(oh * wq)[None, :]]
    w2 = wpanel.transpose(0, 2, 1).reshape(-1, wpanel.shape[1])[:m]
    gathered_product(taps, w2, out, wq, bias, has_bias, residual, has_residual, relu)


# One block runs without a parallel region (conv.py's _phase_copy_serial says why).
_panel_blocks_serial = serial_variant(_panel_blocks, "_panel_blocks_serial")


def block_segments(n_pb, block_step, second, wq, oh, ow):
    """(n_pb, S, 3) int64: per pixel block the runs of its 14 lanes that land in one
    output row, as (offset, lo, hi): lanes lo..hi-1 go to the output plane's floats
    offset + lo .. offset + hi - 1 (offset may be negative: lanes below lo are masked
    off). Lane j < 7 is flat output p0 + j, lane j >= 7 flat output p0 + second + j - 7
    (p0 = block * block_step); flat output f is output row f // wq, column f % wq,
    kept where the row is < oh and the column < ow. Unused slots are (0, 0, 0)."""
    blocks = []
    for b in range(n_pb):
        runs = []
        for first_lane, start in ((0, b * block_step), (7, b * block_step + second)):
            for row in range(start // wq, (start + 6) // wq + 1):
                if row >= oh:
                    break
                lo, hi = max(0, row * wq - start), min(7, row * wq + ow - start)
                if lo < hi:
                    runs.append((row * (ow - wq) + start - first_lane, first_lane + lo, first_lane + hi))
        blocks.append(runs)
    table = np.zeros((n_pb, max(1, max(len(r) for r in blocks)), 3), np.int64)
    for b, runs in enumerate(blocks):
        if runs:
            table[b, :len(runs)] = runs
    return table


def pack_panels(w):
    """w (M, C, kh, kw) -> (ceil(M/32), C*kh*kw, 32) float32: the 32 weights of a
    channel panel for one tap side by side (zeros past M)."""
    return pack_weights(w, CHANNELS)


_NO_TAIL = np.zeros((1, PIXELS), np.float32)


def row_blocks(oh, ow, wq, flat_blocks):
    """(blocks, block_step, second) of _panel_blocks for a kxk conv's OH x OW outputs on
    flattened rows wq wide, TapLayout's flat_blocks blocks of 14 guaranteed readable:
    two output rows of up to 7 per block (7x7 maps: 56 pixels computed for 49, against
    70 as flat blocks over 9-wide rows), one row of 12-14 (14x14: 196 for 196, against
    224), else flat blocks of 14 consecutive flat outputs."""
    if ow <= 7:
        blocks, step, second = -(-oh // 2), 2 * wq, wq
    elif 12 <= ow <= PIXELS:
        blocks, step, second = oh, wq, 7
    else:
        return flat_blocks, PIXELS, 7
    if (blocks - 1) * step + second + 6 >= flat_blocks * PIXELS:     # past what TapLayout made readable
        return flat_blocks, PIXELS, 7
    return blocks, step, second


def panel_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """See the module docstring; None where `takes` says no (or the geometry is not a
    plain 2-D group-1 one: negative pads, other ranks)."""
    if len(x_shape) != 4 or len(w_shape) != 4 or any(p < 0 for p in pads) or w_shape[1] != x_shape[1]:
        return None
    n = x_shape[0]
    m, c, kh, kw = w_shape
    oh, ow = out_spatial
    if not takes(c, m, kh * kw, oh * ow, dtype):
        return None
    k_count = c * kh * kw
    n_cb = -(-m // CHANNELS)
    packed = DerivedWeights(pack_panels, layout=("channel blocks", CHANNELS), unpack=unpack_weights)
    if kh == kw == 1 and tuple(strides) == (1, 1) and not any(pads):
        # a 1x1 conv reads its input in place: tap k is plane k; the last block, which
        # would read past the input's end, reads a zero-padded copy of its columns
        p = oh * ow
        n_pb = -(-p // PIXELS)
        wq, offsets, tap_step = ow, np.zeros(1, np.int64), p * 4
        tail_from = (n_pb - 1) * PIXELS if p % PIXELS else p
        fill = None
        block_step, second = PIXELS, 7
    else:
        taps = TapLayout(x_shape, w_shape, strides, pads, dilations, out_spatial, PIXELS)
        n_pb, wq, offsets, tap_step = taps.blocks, taps.wq, taps.offsets, 0
        p = tail_from = 0
        fill = taps.fill
        n_pb, block_step, second = row_blocks(oh, ow, wq, taps.blocks)
    segments = block_segments(n_pb, block_step, second, wq, oh, ow)
    items = n_cb * n_pb
    chunk = -(-k_count // -(-k_count // CHUNK_TAPS))     # balanced chunks

    def setup():
        """(blocks, kernel, tail): a 1x1's last block's columns, zero past the map (this thread's)."""
        blocks = team_blocks(items, k_count * CHANNELS * PIXELS)
        tail = np.zeros((k_count, PIXELS), np.float32) if fill is None and tail_from < p else _NO_TAIL
        return blocks, _panel_blocks if blocks > 1 else _panel_blocks_serial, tail
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wpanel = packed(w)
        b = bias_values(bias, np.float32)
        if bias is not None and b.size != m:
            raise ValueError("bias of %d values for %d output channels" % (b.size, m))
        blocks, kernel, tail = per_team(setups, setup)
        work, stride = team_work(n_pb * CHANNELS * PIXELS, np.float32)
        for i in range(n):
            if fill is None:
                flat = np.ascontiguousarray(x[i], dtype=np.float32).reshape(-1)
                if tail is not _NO_TAIL:
                    tail[:, :p - tail_from] = flat.reshape(k_count, p)[:, tail_from:]
            else:
                flat = fill(x[i])
            res = residual[i].reshape(m, oh * ow) if residual is not None else _NO_RESIDUAL
            kernel(flat, offsets, tap_step, tail, tail is not _NO_TAIL, wpanel, b, bias is not None, res,
                   residual is not None, relu, out[i], segments, wq, n_pb, block_step, second, chunk, blocks, work,
                   stride)
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute
