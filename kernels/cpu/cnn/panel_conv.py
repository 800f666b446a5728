"""1x1 convolutions (stride 1, group 1, float32) on small maps, on CPUs with 16-lane
(AVX-512) vector registers: a register-blocked product with the output channels in the
vector lanes and the pixels broadcast.

Public:
    panel_plan(x_shape, m, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None), or None
        where this path does not take the conv (see `takes`).
    takes(c, m, pixels, dtype)   whether it does: float32, the CPU's registers hold 16
        lanes, pixels <= MAX_PIXELS, c >= MIN_CHANNELS, m >= MIN_OUTPUTS (FORCE: every
        float32 1x1, for tests on any CPU).
    pack_panels(w) -> (ceil(M/32), C, 32) float32, zeros past M

Why: a 1x1 conv is W (M, C) @ X (C, P). On late layers P is 49-196 pixels, and
OpenBLAS's kernels (blocked for long rows) ran those products at 80-90 GFLOP/s on an
Intel Xeon AVX-512 VM where the peak is ~145. Here the weights are packed once into
panels of 32 output channels (two 16-lane vectors per input channel, read in order),
and a block of 32 channels x 12 pixels is 24 accumulators held in registers: per input
channel, 2 vector loads of weights, 12 broadcast pixels, 24 FMAs. The pixels are read
from a zero-padded copy of X (C, P rounded up to 12), so every block is whole.

  * the blocks are (channel panel, pixel block) items, channel panel outer: a thread's
    consecutive items share a weight panel (C x 32 floats, in L2); X stays in L2 too
    (C x P: 2048 x 60 floats at the sizes taken);
  * a finished block goes through a (12, 32) tile in the team thread's work region and
    is written out channel row by channel row with bias, residual and ReLU;
  * every output's sum runs over the input channels in order whichever thread computes
    it: results are the same at any team size.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.buffers import DerivedWeights, team_work
from ..runtime.jit import LazyGlobal, compiled, prange, serial_variant, team_blocks, thread_id
from .phases import tap_layout

LANES_16 = LazyGlobal(".simd", "LANES_16")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vfma = LazyGlobal(".simd", "vfma")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
address = LazyGlobal(".simd", "address")
load_f32 = LazyGlobal(".simd", "load_f32")

CHANNELS = 32        # output channels per register block: 2 vectors of 16 lanes
PIXELS = 12          # pixels per register block (24 accumulators of the 32 registers)

# Where it takes the conv: maps of at most MAX_PIXELS pixels, at least MIN_CHANNELS input
# and MIN_OUTPUTS output channels. Intel Xeon AVX-512 VM, 1 thread, bias + ReLU, hot
# caches, OpenBLAS GEMM -> panels ms: 2048 -> 512 at 7x7 1.185 -> 1.033, 512 -> 2048
# 1.211 -> 1.092, 1024 -> 192 0.247 -> 0.225, 832 -> 256 0.252 -> 0.243; they lost at
# 14x14 and up (1024 -> 256 0.882 -> 0.968, 256 -> 1024 at 14 1.17x, at 28x28 1.3-1.5x:
# OpenBLAS's blocking wins on long rows) and with few channels (832 -> 48 at 7x7 1.11x:
# half the second panel is padding). Whole models, alternating processes, 1 thread:
# resnet50 96.1 / 99.3 -> 94.9 / 96.5 ms, densenet121 80.7 / 82.3 -> 79.2 / 78.1,
# inception_v2 53.5 / 53.4 -> 52.5 / 52.5; taking 14x14 maps too lost (resnet50 97-102).
MAX_PIXELS = 64
MIN_CHANNELS = 512
MIN_OUTPUTS = 128
MAX_PIXELS_KXK = 196
MIN_OUTPUTS_KXK = 32
FORCE = False        # tests: take every float32 1x1 even where the CPU has 8-lane registers


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


@compiled(parallel=True)
def _panel_blocks(flat, offsets, tap_step, tail, has_tail, wpanel, bias, has_bias, residual, has_residual, relu, out,
                  wq, n_pb, blocks, work, stride):
    """out (M, OH, OW) = [relu](sum over taps k of wpanel[., k, .] * flat[p + offsets[k]]
    + bias + residual) for flat output p = oy * wq + ox. flat: phases.TapLayout's
    buffers, long enough that p + offsets[k] < len(flat) for every p < n_pb * 12 (the
    caller checked); wpanel (ceil(M/32), K, 32) float32, zero past M; residual
    (M, OH * OW) when has_residual. Items (panel, pixel block) are split over `blocks`
    team threads; each thread's (12, 32) tile is its region of `work` (from thread_id()
    * stride, 384 floats; buffers.team_work). tap_step > 0: tap k's input is k *
    tap_step bytes after tap 0's (offsets unread). has_tail: the last pixel block reads
    `tail` (K, 12) instead, tap k at row k (a 1x1 conv reading its input in place, whose
    last block would run past the input's end)."""
    m, oh, ow = out.shape
    n_cb = wpanel.shape[0]
    k_count = wpanel.shape[1]
    items = n_cb * n_pb
    x0 = address(flat)
    w0 = address(wpanel)
    zero = vzeros(LANES_16)
    for t in prange(blocks):
        mine = work[thread_id() * stride:thread_id() * stride + 384]
        tile = mine.reshape(12, 32)
        t0 = address(mine)
        for item in range(items * t // blocks, items * (t + 1) // blocks):
            cb = item // n_pb
            pb = item - cb * n_pb
            a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = zero
            a60 = a61 = a70 = a71 = a80 = a81 = a90 = a91 = aa0 = aa1 = ab0 = ab1 = zero
            wk = w0 + cb * k_count * 128
            p0 = pb * 12
            xs = x0 + p0 * 4
            step = tap_step
            if has_tail and pb == n_pb - 1:
                xs = address(tail)
                step = 48
            for k in range(k_count):
                xa = xs + offsets[k] * 4 if step == 0 else xs + k * step
                u0 = vload_f32(LANES_16, wk)
                u1 = vload_f32(LANES_16, wk + 64)
                s = load_f32(xa)
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
                s = load_f32(xa + 28)
                a70 = vfma(a70, s, u0)
                a71 = vfma(a71, s, u1)
                s = load_f32(xa + 32)
                a80 = vfma(a80, s, u0)
                a81 = vfma(a81, s, u1)
                s = load_f32(xa + 36)
                a90 = vfma(a90, s, u0)
                a91 = vfma(a91, s, u1)
                s = load_f32(xa + 40)
                aa0 = vfma(aa0, s, u0)
                aa1 = vfma(aa1, s, u1)
                s = load_f32(xa + 44)
                ab0 = vfma(ab0, s, u0)
                ab1 = vfma(ab1, s, u1)
                wk += 128
            # tile[j, :] = pixel j's 32 channel sums
            vstore_f32_at(t0, a00)
            vstore_f32_at(t0 + 64, a01)
            vstore_f32_at(t0 + 128, a10)
            vstore_f32_at(t0 + 192, a11)
            vstore_f32_at(t0 + 256, a20)
            vstore_f32_at(t0 + 320, a21)
            vstore_f32_at(t0 + 384, a30)
            vstore_f32_at(t0 + 448, a31)
            vstore_f32_at(t0 + 512, a40)
            vstore_f32_at(t0 + 576, a41)
            vstore_f32_at(t0 + 640, a50)
            vstore_f32_at(t0 + 704, a51)
            vstore_f32_at(t0 + 768, a60)
            vstore_f32_at(t0 + 832, a61)
            vstore_f32_at(t0 + 896, a70)
            vstore_f32_at(t0 + 960, a71)
            vstore_f32_at(t0 + 1024, a80)
            vstore_f32_at(t0 + 1088, a81)
            vstore_f32_at(t0 + 1152, a90)
            vstore_f32_at(t0 + 1216, a91)
            vstore_f32_at(t0 + 1280, aa0)
            vstore_f32_at(t0 + 1344, aa1)
            vstore_f32_at(t0 + 1408, ab0)
            vstore_f32_at(t0 + 1472, ab1)
            c0 = cb * 32
            c1 = min(m, c0 + 32)
            for j in range(12):
                oy = (p0 + j) // wq
                ox = p0 + j - oy * wq
                if oy >= oh or ox >= ow:        # a column past the row's end, or past the map
                    continue
                sums = tile[j]
                for o in range(c0, c1):
                    y = sums[o - c0] + (bias[o] if has_bias else np.float32(0.0))
                    if has_residual:
                        y += residual[o, oy * ow + ox]
                    out[o, oy, ox] = y - y if relu and y < 0 else y    # NaN and -0.0 kept, as np.maximum(y, 0)


@_panel_blocks.numpy_twin
def _panel_blocks_numpy(flat, offsets, tap_step, tail, has_tail, wpanel, bias, has_bias, residual, has_residual, relu,
                        out, wq, n_pb, blocks, work, stride):
    """All outputs at once: the taps gathered (K, OH * wq), one product, the crop."""
    m, oh, ow = out.shape
    if tap_step:
        taps = flat.reshape(-1, oh * wq)       # a 1x1 conv's input, read in place
    else:
        taps = flat[offsets[:, None] + np.arange(oh * wq)[None, :]]
    w2 = wpanel.transpose(0, 2, 1).reshape(-1, wpanel.shape[1])[:m]
    y = (w2 @ taps).reshape(m, oh, wq)[:, :, :ow]
    if has_bias:
        y = y + bias[:m].reshape(m, 1, 1)
    if has_residual:
        y = y + residual.reshape(m, oh, ow)
    if relu:
        y = np.maximum(y, np.float32(0))
    out[...] = y


# One block runs without a parallel region (conv.py's _phase_copy_serial says why).
_panel_blocks_serial = serial_variant(_panel_blocks, "_panel_blocks_serial")


def pack_panels(w):
    """w (M, C, kh, kw) -> (ceil(M/32), C*kh*kw, 32) float32: the 32 weights of a
    channel panel for one tap side by side (zeros past M)."""
    m = w.shape[0]
    c = int(np.prod(w.shape[1:]))
    n_cb = -(-m // CHANNELS)
    packed = np.zeros((n_cb * CHANNELS, c), np.float32)
    packed[:m] = w.reshape(m, c)
    return np.ascontiguousarray(packed.reshape(n_cb, CHANNELS, c).transpose(0, 2, 1))


_NO_RESIDUAL = np.zeros((1, 1), np.float32)
_NO_TAIL = np.zeros((1, PIXELS), np.float32)


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
    packed = DerivedWeights(pack_panels)
    if kh == kw == 1 and tuple(strides) == (1, 1) and not any(pads):
        # a 1x1 conv reads its input in place: tap k is plane k; the last block, which
        # would read past the input's end, reads a zero-padded copy of its columns
        p = oh * ow
        n_pb = -(-p // PIXELS)
        wq, offsets, tap_step = ow, np.zeros(1, np.int64), p * 4
        tail_from = (n_pb - 1) * PIXELS if p % PIXELS else p
        fill = None
    else:
        taps = tap_layout(x_shape, w_shape, strides, pads, dilations, out_spatial, PIXELS)
        n_pb, wq, offsets, tap_step = taps.blocks, taps.wq, taps.offsets, 0
        p = tail_from = 0
        fill = taps.fill
    items = n_cb * n_pb

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wpanel = packed(w)
        b = bias_values(bias, np.float32)
        if bias is not None and b.size != m:
            raise ValueError("bias of %d values for %d output channels" % (b.size, m))
        blocks = team_blocks(items, k_count * CHANNELS * PIXELS)
        work, stride = team_work(CHANNELS * PIXELS, np.float32)
        kernel = _panel_blocks if blocks > 1 else _panel_blocks_serial
        tail = _NO_TAIL
        for i in range(n):
            if fill is None:
                flat = np.ascontiguousarray(x[i], dtype=np.float32).reshape(-1)
                if tail_from < p:
                    tail = scratch.zeros(("panel_tail", p - tail_from), (k_count, PIXELS), np.float32)
                    tail[:, :p - tail_from] = flat.reshape(k_count, p)[:, tail_from:]
            else:
                flat = fill(x[i], scratch)
            res = residual[i].reshape(m, oh * ow) if residual is not None else _NO_RESIDUAL
            kernel(flat, offsets, tap_step, tail, tail is not _NO_TAIL, wpanel, b, bias is not None, res,
                   residual is not None, relu, out[i], wq, n_pb, blocks, work, stride)
    return compute
