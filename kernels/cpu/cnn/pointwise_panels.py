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
FORCE = False        # tests: take every float32 1x1 even where the CPU has 8-lane registers


def takes(c, m, pixels, dtype):
    if np.dtype(dtype) != np.float32 or min(c, m, pixels) < 1:
        return False
    if FORCE:
        return True
    if pixels > MAX_PIXELS or c < MIN_CHANNELS or m < MIN_OUTPUTS:
        return False
    from ..runtime import simd
    return simd.target_lanes() == 16


@compiled(parallel=True)
def _panel_blocks(xp, wpanel, bias, has_bias, residual, has_residual, relu, out, blocks, work, stride):
    """out (M, P) = [relu](W @ X + bias + residual). xp (C, Q) float32 with Q a multiple
    of 12 >= P, zero past P; wpanel (ceil(M/32), C, 32) float32, zero past M; residual
    (M, P) when has_residual. Items (panel, pixel block) are split over `blocks` team
    threads; each thread's (12, 32) tile is its region of `work` (from thread_id() *
    stride, 384 floats; buffers.team_work)."""
    m, p = out.shape
    n_cb = wpanel.shape[0]
    k_count = wpanel.shape[1]
    q = xp.shape[1]
    n_pb = q // 12
    items = n_cb * n_pb
    x0 = address(xp)
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
            xa = x0 + pb * 48
            for k in range(k_count):
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
                xa += q * 4
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
            p0 = pb * 12
            p1 = min(p, p0 + 12)
            for o in range(cb * 32, min(m, cb * 32 + 32)):
                b = bias[o] if has_bias else np.float32(0.0)
                row = out[o, p0:p1]
                col = o - cb * 32
                for j in range(p1 - p0):
                    y = tile[j, col] + b
                    if has_residual:
                        y += residual[o, p0 + j]
                    row[j] = y - y if relu and y < 0 else y    # NaN and -0.0 kept, as np.maximum(y, 0)


@_panel_blocks.numpy_twin
def _panel_blocks_numpy(xp, wpanel, bias, has_bias, residual, has_residual, relu, out, blocks, work, stride):
    m, p = out.shape
    w2 = wpanel.transpose(0, 2, 1).reshape(-1, wpanel.shape[1])[:m]
    y = w2 @ xp[:, :p]
    if has_bias:
        y = y + bias[:m, None]
    if has_residual:
        y = y + residual
    if relu:
        y = np.maximum(y, np.float32(0))
    out[...] = y


# One block runs without a parallel region (conv.py's _phase_copy_serial says why).
_panel_blocks_serial = serial_variant(_panel_blocks, "_panel_blocks_serial")


def pack_panels(w):
    """w (M, C, 1, 1) or (M, C) -> (ceil(M/32), C, 32) float32: the 32 weights of a
    channel panel for one input channel side by side (zeros past M)."""
    m = w.shape[0]
    c = int(np.prod(w.shape[1:]))
    n_cb = -(-m // CHANNELS)
    packed = np.zeros((n_cb * CHANNELS, c), np.float32)
    packed[:m] = w.reshape(m, c)
    return np.ascontiguousarray(packed.reshape(n_cb, CHANNELS, c).transpose(0, 2, 1))


_NO_RESIDUAL = np.zeros((1, 1), np.float32)


def panel_plan(x_shape, m, out_spatial, dtype):
    """See the module docstring; None where `takes` says no."""
    n, c = x_shape[:2]
    p = int(np.prod(out_spatial, dtype=np.int64))
    if len(x_shape) != 4 or tuple(x_shape[2:]) != tuple(out_spatial) or not takes(c, m, p, dtype):
        return None
    q = -(-p // PIXELS) * PIXELS
    n_cb = -(-m // CHANNELS)
    items = n_cb * (q // PIXELS)
    packed = DerivedWeights(pack_panels)
    key = ("panel_pixels", c, q)

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wpanel = packed(w)
        b = bias_values(bias, np.float32)
        if bias is not None and b.size != m:
            raise ValueError("bias of %d values for %d output channels" % (b.size, m))
        blocks = team_blocks(items, c * CHANNELS * PIXELS)
        work, stride = team_work(CHANNELS * PIXELS, np.float32)
        xp = scratch.zeros(key, (c, q), np.float32)        # zero past p; the pixels rewritten per image
        kernel = _panel_blocks if blocks > 1 else _panel_blocks_serial
        for i in range(n):
            xp[:, :p] = x[i].reshape(c, p)
            res = residual[i].reshape(m, p) if residual is not None else _NO_RESIDUAL
            oi = out[i].reshape(m, p)
            target = oi if np.shares_memory(oi, out) else np.empty((m, p), np.float32)
            kernel(xp, wpanel, b, bias is not None, res, residual is not None, relu, target, blocks, work, stride)
            if target is not oi:
                out[i] = target.reshape(out.shape[1:])
    return compute
