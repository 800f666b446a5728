"""1x1 convolutions (float32, group 1) on maps of 48+ pixels, on CPUs with 16-lane
(AVX-512) vector registers: a register-blocked product with the pixels in the vector
lanes, the input read in place and the weights packed once.

Public:
    pointwise_plan(x_shape, w_shape, strides, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None), or None
        where this path does not take the conv (see `takes`). Strided 1x1s subsample
        first.
    takes(c, m, pixels, dtype)   float32, m a multiple of ROWS, pixels >= MIN_PIXELS (or
        >= PIXELS with m >= SMALL_MAP_MIN_OUTPUTS), the CPU's registers hold 16 lanes
        (FORCE: any CPU, for tests)
    split_by_rows(m, p, team), chunk_channels(c), pack_rows(w), unpack_rows(wpack, chunk)

Why: a 1x1 conv is the product W (M, C) @ X (C, P) of its weights and its input, whose
channels are rows of P contiguous pixels. Through OpenBLAS each call packed both
operands (the weights, 0.25-4 MB, read cold from memory inside a model) and the
bias / residual / ReLU pass ran after the product; OpenBLAS's SkylakeX kernels ran
resnet50's 1x1s at 94-125 GFLOP/s on one thread, onnxruntime's ~133. Here:
  * the weights are packed once per weight array (packed_weights.DerivedWeights) in the order
    a pass reads them: chunk by chunk of the reduction, row block by row block, per
    input channel the 8 output channels' weights side by side (one sequential stream,
    also prefetched PREFETCH_BYTES ahead);
  * a block of 8 output channels x 48 pixels (3 vectors of 16) is 24 accumulators held
    in registers: per input channel 3 vector loads of its row (in place: no packing of
    the input), 8 broadcast weights, 24 FMAs;
  * each of those row reads also asks for the same row two pixel blocks on
    (INPUT_PREFETCH_BYTES) into L2 (prefetcht1): a block reads one short run from each
    of C channel rows, hundreds of streams the hardware prefetchers do not follow, so
    an input not in L2 was read at memory latency (256 -> 64 at 56x56, 1 thread: 1.00
    ms with the input in cache, 1.63-1.71 without; with the prefetch 0.93 / 1.15-1.22).
    Whole models alternating in one process, no prefetch / prefetch: resnet50 89.2 ->
    86.5 ms (2 threads 54.6 -> 52.1), inception_v2 48.3 -> 47.3, squeezenet 10.24 ->
    10.09; prefetching into L1 (prefetcht0) one block on had made every layer alone
    slower (0.98-1.13x);
  * the reduction runs in chunks of at most CHUNK_CHANNELS channels, so a pixel block's
    chunk of input (128 x 48 floats, 24 KB) stays in L1 while every row block passes
    over it; the partial sums wait in the output between chunks and the last chunk
    adds bias and residual and applies ReLU to the registers before they are stored;
  * pixel blocks are outer, in tiles: one block at a time, or TILE_PIXEL_BLOCKS for
    single-chunk reductions with large outputs (each output row then written 3 KB at a
    time), or the whole map when it is one or two blocks (each chunk of weights read
    once);
  * the pixels past the last full block (P mod 48) are copied into a zero-padded
    (C, 48) buffer and computed in 16-pixel vectors (as many as they need) into a
    (M, 48) one, then written out lane by lane;
  * the team splits the pixel blocks where the input is larger than the weights, the
    row blocks otherwise (split_by_rows); every output's sum runs over the channels in
    order whoever computes it: results are the same at any team size.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.packed_weights import DerivedWeights
from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks, team_size
from .direct_conv import _NO_RESIDUAL, fma_8x1, fma_8x3
from .phases import gathered_product, subsample

LANES_16 = LazyGlobal(".simd", "LANES_16")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vadd = LazyGlobal(".simd", "vadd")
vmax = LazyGlobal(".simd", "vmax")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
address = LazyGlobal(".simd", "address")
prefetch = LazyGlobal(".simd", "prefetch")
prefetch_l2 = LazyGlobal(".simd", "prefetch_l2")
prefetch_w = LazyGlobal(".simd", "prefetch_w")

ROWS = 8               # output channels per register block
PIXELS = 48            # pixels per register block: 3 vectors of 16 lanes
CHUNK_CHANNELS = 128   # input channels per chunk of the reduction: 24 KB of input, in L1
TILE_PIXEL_BLOCKS = 16
TILE_MIN_OUTPUT_BYTES = 512 << 10
TILE_ALL_BLOCKS = 2
PREFETCH_BYTES = 1024  # weights fetched this far ahead of their use (32 input channels)
INPUT_PREFETCH_BYTES = 384     # each input row fetched into L2 this far ahead: 2 pixel blocks

# Where it takes the conv. Intel Xeon AVX-512 VM, 1 thread (benchmarks/RESULTS.md, "Issue
# 38: 1x1 convolutions with the pixels in the lanes"). Per layer, bias + ReLU, hot
# caches, OpenBLAS GEMM -> here, ms: 256 -> 64 at 56x56 1.21-1.25 -> 0.94-0.97, 64 -> 256
# 1.15 -> 0.91-0.96, 512 -> 128 at 28 0.92-0.93 -> 0.83-0.88, 1024 -> 256 at 14 0.94-0.95
# -> 0.88-0.90, squeezenet's 64 -> 16 at 55 0.142 -> 0.106. Inside the models (all
# 1x1s, per-op times of whole runs): resnet50 50.7 -> 46.3 ms; whole models 0.92-0.98x.
# Maps under 96 pixels (7x7) only with >= 512 outputs: resnet50's 512 -> 2048 at 7x7
# 4.9-5.2 -> 3.7-4.0 ms (x3) against the channel panels, but inception_v2's 1024 -> 160
# .. 352 lost there (1.09-1.6x: 49 pixels are a block of 48 and a tail of one).
MIN_PIXELS = 96
SMALL_MAP_MIN_OUTPUTS = 512
FORCE = False          # tests: take every float32 conv asked about, also where the CPU has 8-lane registers


def takes(c, m, pixels, dtype):
    """Whether a 1x1 conv of c input channels, m outputs and `pixels` outputs per image
    runs here (see the thresholds above)."""
    if np.dtype(dtype) != np.float32 or min(c, m) < 1 or m % ROWS or pixels < PIXELS:
        return False
    if FORCE:
        return True
    if pixels < MIN_PIXELS and m < SMALL_MAP_MIN_OUTPUTS:
        return False
    from ..runtime import simd
    return simd.target_lanes() == 16


@compiled(inline=True)
def _load3(at):
    return vload_f32(LANES_16, at), vload_f32(LANES_16, at + 64), vload_f32(LANES_16, at + 128)


@compiled(inline=True)
def _store3(at, u0, u1, u2):
    vstore_f32_at(at, u0)
    vstore_f32_at(at + 64, u1)
    vstore_f32_at(at + 128, u2)


@compiled(inline=True)
def _finish3(at, u0, u1, u2, b, has_bias, ra, has_residual, relu):
    """Bias, residual (3 vectors at address ra) and ReLU on one row of a finished
    block, stored at `at`."""
    if has_bias:
        u0 = vadds(u0, b)
        u1 = vadds(u1, b)
        u2 = vadds(u2, b)
    if has_residual:
        u0 = vadd(u0, vload_f32(LANES_16, ra))
        u1 = vadd(u1, vload_f32(LANES_16, ra + 64))
        u2 = vadd(u2, vload_f32(LANES_16, ra + 128))
    if relu:            # max(0, v): NaN and -0.0 kept, as np.maximum(v, 0)
        zero = vzeros(LANES_16)
        u0 = vmax(zero, u0)
        u1 = vmax(zero, u1)
        u2 = vmax(zero, u2)
    _store3(at, u0, u1, u2)


@compiled(parallel=True)
def _pointwise_blocks(x, wpack, bias, has_bias, residual, has_residual, relu, out, chunk, tile_pb, tail,
                      tail_out, split_rows, blocks, ahead):
    """out (M, P) = [relu](W @ x + bias + residual) for x (C, P) and out (M, P), both
    C-contiguous float32, M a multiple of 8 (the caller checked); wpack (M/8, C, 8) the
    packed W; residual (M, P) C-contiguous when has_residual (not sharing memory with
    out: partial sums wait in out). tail (C, 48) and tail_out (M, 48): the caller's
    buffers for the pixels past the last full block of 48, tail's columns past them
    zero. Row blocks (split_rows) or pixel blocks are split over `blocks` team threads."""
    c_count, p = x.shape
    n_rb = wpack.shape[0]
    n_full = p // 48
    rem = p - n_full * 48
    n_pb = n_full + (1 if rem else 0)
    for c in range(c_count if rem else 0):
        src = x[c, n_full * 48:p]
        dst = tail[c, 0:rem]
        for j in range(rem):
            dst[j] = src[j]
    x0 = address(x)
    o0 = address(out)
    r0 = address(residual)
    w0 = address(wpack)
    zero = vzeros(LANES_16)
    row_bytes = p * 4
    for t in prange(blocks):
        rb0, rb1, pb0, pb1 = 0, n_rb, 0, n_pb
        if split_rows:
            rb0, rb1 = n_rb * t // blocks, n_rb * (t + 1) // blocks
        else:
            pb0, pb1 = n_pb * t // blocks, n_pb * (t + 1) // blocks
        for pt in range(pb0, pb1, tile_pb):
            # a tile of pixel blocks: each row block's chunk of weights (in L1) passes
            # over all of them, and its rows of output are written tile_pb * 48 apart
            for k0 in range(0, c_count, chunk):
                k1 = min(c_count, k0 + chunk)
                for rb in range(rb0, rb1):
                    for pb in range(pt, min(pb1, pt + tile_pb)):
                        if pb == n_full:        # the last rem < 48 pixels
                            _tail_rows(wpack, bias, has_bias, residual, has_residual, relu, out, tail, tail_out, rb,
                                       k0, k1, n_full * 48, rem)
                            continue
                        xb, ob, xrow, orow = x0 + pb * 192, o0 + pb * 192, row_bytes, row_bytes
                        at = ob + rb * 8 * orow
                        if k0 == 0:
                            # the block's 8 output rows of 192 bytes, fetched for writing
                            # ahead of the stores (in a model, memory other layers evicted)
                            for r in range(8):
                                prefetch_w(at + r * orow)
                                prefetch_w(at + r * orow + 64)
                                prefetch_w(at + r * orow + 128)
                                prefetch_w(at + r * orow + 191)
                            a00 = a01 = a02 = a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = zero
                            a40 = a41 = a42 = a50 = a51 = a52 = a60 = a61 = a62 = a70 = a71 = a72 = zero
                        else:       # the earlier chunks' partial sums
                            a00, a01, a02 = _load3(at)
                            a10, a11, a12 = _load3(at + orow)
                            a20, a21, a22 = _load3(at + 2 * orow)
                            a30, a31, a32 = _load3(at + 3 * orow)
                            a40, a41, a42 = _load3(at + 4 * orow)
                            a50, a51, a52 = _load3(at + 5 * orow)
                            a60, a61, a62 = _load3(at + 6 * orow)
                            a70, a71, a72 = _load3(at + 7 * orow)
                        wk = w0 + (k0 * n_rb * 8 + rb * (k1 - k0) * 8) * 4
                        xa = xb + k0 * xrow
                        for _ in range(k0, k1):
                            u0, u1, u2 = _load3(xa)
                            prefetch(wk + PREFETCH_BYTES)
                            prefetch_l2(xa + ahead)
                            prefetch_l2(xa + ahead + 64)
                            prefetch_l2(xa + ahead + 128)
                            (a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, a40, a41, a42, a50, a51,
                             a52, a60, a61, a62, a70, a71, a72) = \
                                fma_8x3(wk, u0, u1, u2, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32,
                                        a40, a41, a42, a50, a51, a52, a60, a61, a62, a70, a71, a72)
                            wk += 32
                            xa += xrow
                        if k1 < c_count:    # more chunks to come: park the partial sums
                            _store3(at, a00, a01, a02)
                            _store3(at + orow, a10, a11, a12)
                            _store3(at + 2 * orow, a20, a21, a22)
                            _store3(at + 3 * orow, a30, a31, a32)
                            _store3(at + 4 * orow, a40, a41, a42)
                            _store3(at + 5 * orow, a50, a51, a52)
                            _store3(at + 6 * orow, a60, a61, a62)
                            _store3(at + 7 * orow, a70, a71, a72)
                            continue
                        o = rb * 8
                        ra = r0 + (o * p + pb * 48) * 4
                        _finish3(at, a00, a01, a02, bias[o] if has_bias else np.float32(0.0), has_bias, ra,
                                 has_residual, relu)
                        _finish3(at + orow, a10, a11, a12, bias[o + 1] if has_bias else np.float32(0.0), has_bias,
                                 ra + row_bytes, has_residual, relu)
                        _finish3(at + 2 * orow, a20, a21, a22, bias[o + 2] if has_bias else np.float32(0.0), has_bias,
                                 ra + 2 * row_bytes, has_residual, relu)
                        _finish3(at + 3 * orow, a30, a31, a32, bias[o + 3] if has_bias else np.float32(0.0), has_bias,
                                 ra + 3 * row_bytes, has_residual, relu)
                        _finish3(at + 4 * orow, a40, a41, a42, bias[o + 4] if has_bias else np.float32(0.0), has_bias,
                                 ra + 4 * row_bytes, has_residual, relu)
                        _finish3(at + 5 * orow, a50, a51, a52, bias[o + 5] if has_bias else np.float32(0.0), has_bias,
                                 ra + 5 * row_bytes, has_residual, relu)
                        _finish3(at + 6 * orow, a60, a61, a62, bias[o + 6] if has_bias else np.float32(0.0), has_bias,
                                 ra + 6 * row_bytes, has_residual, relu)
                        _finish3(at + 7 * orow, a70, a71, a72, bias[o + 7] if has_bias else np.float32(0.0), has_bias,
                                 ra + 7 * row_bytes, has_residual, relu)


@compiled
def _tail_rows(wpack, bias, has_bias, residual, has_residual, relu, out, tail, tail_out, rb, k0, k1, p0, rem):
    """Row block rb's sums over channels k0..k1 of the last rem < 48 pixels (from p0):
    their input from `tail` (C, 48), in vectors of 16 pixels as 8 x 16 register blocks
    (as many vectors as the pixels need: 14x14's 4 leftover pixels cost one, not three),
    the sums waiting in tail_out (M, 48); after the last chunk they go lane by lane,
    with bias, residual and ReLU, into out's last columns."""
    n_rb, c_count = wpack.shape[0], wpack.shape[1]
    x0 = address(tail)
    t0 = address(tail_out)
    w0 = address(wpack)
    zero = vzeros(LANES_16)
    for v in range((rem + 15) // 16):
        at = t0 + (rb * 8 * 48 + v * 16) * 4
        if k0 == 0:
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
        else:
            a0 = vload_f32(LANES_16, at)
            a1 = vload_f32(LANES_16, at + 192)
            a2 = vload_f32(LANES_16, at + 384)
            a3 = vload_f32(LANES_16, at + 576)
            a4 = vload_f32(LANES_16, at + 768)
            a5 = vload_f32(LANES_16, at + 960)
            a6 = vload_f32(LANES_16, at + 1152)
            a7 = vload_f32(LANES_16, at + 1344)
        wk = w0 + (k0 * n_rb * 8 + rb * (k1 - k0) * 8) * 4
        xa = x0 + (k0 * 48 + v * 16) * 4
        for _ in range(k0, k1):
            u = vload_f32(LANES_16, xa)
            a0, a1, a2, a3, a4, a5, a6, a7 = fma_8x1(wk, u, a0, a1, a2, a3, a4, a5, a6, a7)
            wk += 32
            xa += 192
        vstore_f32_at(at, a0)
        vstore_f32_at(at + 192, a1)
        vstore_f32_at(at + 384, a2)
        vstore_f32_at(at + 576, a3)
        vstore_f32_at(at + 768, a4)
        vstore_f32_at(at + 960, a5)
        vstore_f32_at(at + 1152, a6)
        vstore_f32_at(at + 1344, a7)
    if k1 < c_count:
        return
    for o in range(rb * 8, rb * 8 + 8):
        b = bias[o] if has_bias else np.float32(0.0)
        src = tail_out[o, 0:rem]
        dst = out[o, p0:p0 + rem]
        for j in range(rem):
            y = src[j] + b
            if has_residual:
                y += residual[o, p0 + j]
            dst[j] = np.float32(0.0) if relu and y < 0 else y


@_pointwise_blocks.numpy_twin
def _pointwise_blocks_numpy(x, wpack, bias, has_bias, residual, has_residual, relu, out, chunk, tile_pb, tail,
                            tail_out, split_rows, blocks, ahead):
    """All outputs at once: one product and the epilogue."""
    m, p = out.shape
    w2 = unpack_rows(wpack, chunk)
    gathered_product(x, w2, out.reshape(m, 1, p), p, bias, has_bias, residual, has_residual, relu)


# One block runs without a parallel region (conv.py's _phase_copy_serial says why).
_pointwise_blocks_serial = serial_variant(_pointwise_blocks, "_pointwise_blocks_serial")


def split_by_rows(m, p, team):
    """Whether the team splits the output rows (each thread reads all the input and its
    rows' weights) or the pixel blocks (each thread reads its pixels' input and all the
    weights): whichever reads less twice, the input (C x P) or the weights (M x C),
    unless there are too few pixel blocks to go round."""
    return (p <= m and m // ROWS >= team) or -(-p // PIXELS) < 2 * team


def chunk_channels(c):
    """Input channels per chunk of the reduction: C in balanced chunks of at most
    CHUNK_CHANNELS (all the same size but the last)."""
    return -(-c // -(-c // CHUNK_CHANNELS))


def pack_rows(w):
    """w (M, C, 1, 1) -> (M/8, C, 8) float32, in the order the kernel reads it: chunk
    by chunk of the reduction, row block by row block, per input channel the weights of
    the block's 8 output channels side by side (a pixel block's pass over the weights is
    one sequential stream, which the hardware prefetchers follow from memory)."""
    m, c = w.shape[:2]
    chunk = chunk_channels(c)
    w2 = np.asarray(w, np.float32).reshape(m // ROWS, ROWS, c)
    packed = np.empty(m * c, np.float32)
    for k0 in range(0, c, chunk):
        k1 = min(c, k0 + chunk)
        packed[k0 * m:k1 * m] = w2[:, :, k0:k1].transpose(0, 2, 1).reshape(-1)
    return packed.reshape(m // ROWS, c, ROWS)


def unpack_rows(wpack, chunk):
    """pack_rows' inverse: (M, C) float32."""
    n_rb, c, _ = wpack.shape
    m = n_rb * ROWS
    flat = wpack.reshape(-1)
    w2 = np.empty((m, c), np.float32)
    for k0 in range(0, c, chunk):
        k1 = min(c, k0 + chunk)
        w2[:, k0:k1] = flat[k0 * m:k1 * m].reshape(n_rb, k1 - k0, ROWS).transpose(0, 2, 1).reshape(m, k1 - k0)
    return w2


def pointwise_plan(x_shape, w_shape, strides, out_spatial, dtype):
    """See the module docstring; None where `takes` says no (or the conv is not a 2-D
    1x1 of group 1)."""
    if len(x_shape) != 4 or len(w_shape) != 4 or tuple(w_shape[2:]) != (1, 1) or w_shape[1] != x_shape[1]:
        return None
    n, c = x_shape[:2]
    m = w_shape[0]
    oh, ow = out_spatial
    p = oh * ow
    if not takes(c, m, p, dtype):
        return None
    strided = tuple(strides) != (1, 1)
    n_rb, n_pb = m // ROWS, -(-p // PIXELS)
    chunk = chunk_channels(c)
    rem = p % PIXELS
    packed = DerivedWeights(pack_rows, layout=("pointwise rows", ROWS),
                            unpack=lambda made, shape: unpack_rows(made, chunk_channels(shape[1])).reshape(shape))
    if n_pb <= TILE_ALL_BLOCKS:
        tile_pb = n_pb          # small maps: each chunk of weights read once, for every pixel block
    elif c <= CHUNK_CHANNELS and m * p * 4 > TILE_MIN_OUTPUT_BYTES:
        tile_pb = TILE_PIXEL_BLOCKS
    else:
        tile_pb = 1

    def setup():
        """(kernel, split_rows, blocks, tail, tail_out) for this thread's team."""
        split_rows = split_by_rows(m, p, team_size())
        blocks = team_blocks(n_rb if split_rows else n_pb, 2 * c * ROWS * PIXELS)
        kernel = _pointwise_blocks if blocks > 1 else _pointwise_blocks_serial
        tail = tail_out = _NO_RESIDUAL
        if rem:     # the last pixels' input, zero past them, and their sums
            tail, tail_out = np.zeros((c, PIXELS), np.float32), np.empty((m, PIXELS), np.float32)
        return kernel, split_rows, blocks, tail, tail_out
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wpack = packed(w)
        b = bias_values(bias, np.float32)
        if bias is not None and b.size != m:
            raise ValueError("bias of %d values for %d output channels" % (b.size, m))
        kernel, split_rows, blocks, tail, tail_out = per_team(setups, setup)
        for i in range(n):
            xi = subsample(x[i], strides, out_spatial) if strided else x[i]
            xi = np.ascontiguousarray(xi, dtype=np.float32).reshape(c, p)
            in_place = out[i].flags.c_contiguous       # else computed aside and copied in
            oi = out[i].reshape(m, p) if in_place else np.empty((m, p), np.float32)
            res = _NO_RESIDUAL
            if residual is not None:
                res = np.ascontiguousarray(residual[i], dtype=np.float32).reshape(m, p)
                if np.may_share_memory(res, oi):        # partial sums wait in the output
                    res = res.copy()
            kernel(xi, wpack, b, bias is not None, res, residual is not None, relu, oi, chunk, tile_pb, tail, tail_out,
                   split_rows, blocks, INPUT_PREFETCH_BYTES)
            if not in_place:
                out[i] = oi.reshape(out[i].shape)
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute
