"""Integer Winograd F(2x2, 3x3) for Int8Conv's 3x3 stride-1 layers: the same int32 sums as
the direct GEMM (int8_conv.py), bit for bit, with 2.25x fewer multiplies.

Public:
    winograd_fits(kernel, strides, dilations, pads, groups) -> bool    3x3, stride 1, group 1
    winograd_exact(c, x_zp, w_absmax) -> bool        the bound below, for these zero points
    winograd_weights(w, w_zero_point) -> (packed transformed filters, max |w - w_zp|)
    conv_nhwc(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, pads, out_shape) -> uint8

Why it is exact. Each 4x4 input tile d (x - x_zp, 0 outside the image) and 3x3 filter g
(w - w_zp) give the 2x2 outputs Y = A^T [(G' g G'^T) * (B^T d B)] A / 4, with Lavin &
Gray's B^T and A^T (entries 0 and +-1) and G' = 2G (entries 0, +-1, 2: integers where G
has halves). Every step is integer: B^T d B is in [-1020, 1020] and G' g G'^T in
[-2295, 2295] (int16, for the vpmaddwd micro-kernel), and the sums over channels and the
output transform are computed modulo 2**32 (int32 wrapping). Modulo 2**32 they equal
4 * S, S the direct sum of (x - x_zp) * (w - w_zp) over the window; when
|4 * S| < 2**31 the int32 value is 4 * S itself, and S follows by an exact shift.
winograd_exact asks for that bound (9 * C * max|x - x_zp| * max|w - w_zp| < 2**29:
every 3x3 layer of ResNet-50 with 8-bit data), otherwise the direct GEMM runs. The bias
is added to S with int32 wrapping and the output requantized as the GEMM path does.

How: x - x_zp is copied once into a zero-bordered int16 map (channels padded to runs of
16); tiles (2x2 outputs each) go in chunks (chunk_tiles: about L2-sized, at least one per
team thread) to the team; per chunk the 16 transformed input planes (tiles x C, int16)
are built once, then per block of 16 output channels 16 products (tiles x C) @ (C x 16)
by qgemm_simd's 4x16 micro-kernel, and the output transform + requantization for those
channels, written straight into the output. conv_nhwc checks the shapes the compiled
loops assume.
"""
import numpy as np

from ..runtime.buffers import team_work
from ..runtime.jit import LazyGlobal, compiled, prange, team_blocks, team_size, thread_id
from .int8_conv import NR, _requantize_numpy, _unpack, pack_int16

qgemm_4x16 = LazyGlobal("..quant.qgemm_simd", "qgemm_4x16")
winograd_output_16 = LazyGlobal("..quant.qgemm_simd", "winograd_output_16")
winograd_input_16 = LazyGlobal("..quant.qgemm_simd", "winograd_input_16")
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.int64)
_G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)        # 2 * G
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.int64)
_V_BYTES = 1 << 18        # transformed input planes per chunk kept about L2-sized


def winograd_fits(kernel, strides, dilations, pads, groups):
    """Whether the layer's geometry is one this path computes: 3x3, stride 1, group 1."""
    return (tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1) and groups == 1
            and min(pads) >= 0)


def winograd_exact(c, x_zp, w_absmax):
    """Whether 4 * S fits int32 for every input (S a window's sum; see the module docstring)."""
    x_absmax = max(int(x_zp), 255 - int(x_zp))
    return 9 * c * x_absmax * int(w_absmax) < 1 << 29


def winograd_weights(w, w_zero_point):
    """w uint8 (M, 3, 3, C), w_zero_point one value or one per M -> (int16 packed
    G' g G'^T as 16 matrices (M, C) in pack_int16's layout, max |w - w_zp|)."""
    m = w.shape[0]
    zero = np.asarray(w_zero_point, np.int64).reshape(-1)
    g = w.astype(np.int64) - (zero.reshape(m, 1, 1, 1) if zero.size == m and m > 1 else zero.reshape(()))
    c = w.shape[3]
    u = np.zeros((16, m, channels16(c)), np.int16)                     # channels padded to runs of 16
    u[:, :, :c] = np.einsum("pi,qj,mijc->pqmc", _G2, _G2, g).reshape(16, m, c)
    return pack_int16(u), int(np.abs(g).max()) if g.size else 0


def channels16(c):
    return -(-c // 16) * 16


def chunk_tiles(c):
    kdim = channels16(c)
    return int(max(4, min(64, _V_BYTES // (32 * kdim) // 4 * 4)))


@compiled(parallel=True)
def _centered_padded(x, x_zp, xp, pt, pl, blocks):
    """xp int16 (N, HP, WP, C16) = x - x_zp placed at rows pt.., columns pl.., channels
    0..C-1, 0 elsewhere; x uint8 (N, H, W, C) with pt + H <= HP, pl + W <= WP, C <= C16."""
    n, h, wd, c = x.shape
    hp, wp, c16 = xp.shape[1], xp.shape[2], xp.shape[3]
    lines = n * hp
    for t in prange(blocks):
        for line in range(lines * t // blocks, lines * (t + 1) // blocks):
            img, row = line // hp, line % hp
            iy = row - pt
            for col in range(wp):
                dst = xp[img, row, col]
                ix = col - pl
                start = 0
                if iy >= 0 and iy < h and ix >= 0 and ix < wd:
                    src = x[img, iy, ix]
                    for j in range(c):
                        dst[j] = np.int16(src[j]) - x_zp
                    start = c
                for j in range(start, c16):
                    dst[j] = 0


@_centered_padded.numpy_twin
def _centered_padded_numpy(x, x_zp, xp, pt, pl, blocks):
    h, wd, c = x.shape[1:]
    xp[...] = 0
    xp[:, pt:pt + h, pl:pl + wd, :c] = x.astype(np.int16) - np.int16(x_zp)


@compiled(parallel=True)
def _winograd(xp, up, bias, mult, shift, y_zp, lo, hi, out, tiles, blocks, v_work, v_stride, acc_work, acc_stride,
              sink_work, sink_stride):
    """xp int16 (N, 2 * TH + 2, 2 * TW + 2, C16) from _centered_padded (TH, TW = OH, OW
    halved up; C16 a multiple of 16); up = winograd_weights(...)[0] (16, nblk, kpairs,
    16, 2) with 2 * kpairs == C16 and nblk * 16 >= M; bias int32 (nblk * 16,) (zero-padded); out uint8
    (N, OH, OW, M) C-contiguous; tiles a positive multiple of 4; shift in [0, 31]. Each
    team thread's planes v (16 x tiles x C16 int16), sums (tiles x 16 x 16 int32) and
    4 x 16-byte sink are its regions of v_work / acc_work / sink_work (from thread_id()
    * stride; buffers.team_work): caller-owned, since the micro-kernels reach them
    through addresses (blas.py)."""
    n, kdim = xp.shape[0], xp.shape[3]
    oh, ow, m = out.shape[1], out.shape[2], out.shape[3]
    nblk, kpairs = up.shape[1], up.shape[2]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    total = n * th * tw
    chunks = (total + tiles - 1) // tiles
    out_base = np.int64(out.ctypes.data)
    for t in prange(blocks):
        first, last = chunks * t // blocks, chunks * (t + 1) // blocks
        tid = thread_id()
        v = v_work[tid * v_stride:tid * v_stride + 16 * tiles * kdim].reshape(16, tiles, kdim)
        acc = acc_work[tid * acc_stride:tid * acc_stride + tiles * 16 * NR].reshape(tiles, 16, NR)
        sink = sink_work[tid * sink_stride:tid * sink_stride + 4 * NR].reshape(4, NR)
        for chunk in range(first, last):
            t0 = chunk * tiles
            count = min(tiles, total - t0)
            count4 = (count + 3) // 4 * 4
            # --- the transformed input planes v[p * 4 + q, r] = (B^T d B)[p, q] of tile r
            for r in range(count4):
                if r >= count:
                    for pq in range(16):
                        vr = v[pq, r]
                        for j in range(kdim):
                            vr[j] = 0
                    continue
                tile = t0 + r
                img = tile // (th * tw)
                y0 = 2 * ((tile // tw) % th)
                x0 = 2 * (tile % tw)
                winograd_input_16(xp[img, y0, x0].ctypes.data, xp.strides[1], xp.strides[2], kdim // 16,
                                  v[0, r].ctypes.data, v.strides[0])
            v_step = v.strides[1]
            acc_step = acc.strides[0]
            for b in range(nblk):
                # --- 16 products (tiles x C) @ (C x 16) for output channels b * 16 ...
                for pq in range(16):
                    w_addr = up[pq, b].ctypes.data
                    a_base = v[pq].ctypes.data
                    c_base = acc.ctypes.data + pq * NR * 4
                    for r in range(0, count4, 4):
                        qgemm_4x16(a_base + r * v_step, v_step, w_addr, kpairs, c_base + r * acc_step, acc_step)
                # --- per tile the output transform, / 4, + bias, requantization, for these 16 channels
                j0 = b * NR
                nj = min(NR, m - j0)
                for r in range(count):
                    tile = t0 + r
                    img = tile // (th * tw)
                    oy = 2 * ((tile // tw) % th)
                    ox = 2 * (tile % tw)
                    base = out_base + ((img * oh + oy) * ow + ox) * m + j0
                    sink0 = np.int64(sink.ctypes.data)
                    d00, d01, d10, d11 = sink0, sink0 + NR, sink0 + 2 * NR, sink0 + 3 * NR
                    if nj == NR:
                        d00 = base
                        if ox + 1 < ow:
                            d01 = base + m
                        if oy + 1 < oh:
                            d10 = base + ow * m
                            if ox + 1 < ow:
                                d11 = base + ow * m + m
                    winograd_output_16(acc[r].ctypes.data, bias.ctypes.data + j0 * 4, d00, d01, d10, d11, mult,
                                       shift, y_zp, lo, hi)
                    if nj < NR:                  # the last, partial channel block: through the sink
                        for s in range(4):
                            yy, xx = oy + s // 2, ox + s % 2
                            if yy < oh and xx < ow:
                                orow = out[img, yy, xx, j0:j0 + nj]
                                src = sink[s]
                                for j in range(nj):
                                    orow[j] = src[j]


@_winograd.numpy_twin
def _winograd_numpy(xp, up, bias, mult, shift, y_zp, lo, hi, out, tiles, blocks, v_work, v_stride, acc_work,
                    acc_stride, sink_work, sink_stride):
    n, c = xp.shape[0], xp.shape[3]
    oh, ow, m = out.shape[1:]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    padded = xp.astype(np.int64)
    d = np.empty((n, th, tw, 4, 4, c), np.int64)
    for i in range(4):
        for k in range(4):
            d[:, :, :, i, k] = padded[:, i:i + 2 * th:2, k:k + 2 * tw:2]
    v = np.einsum("pi,qk,ntsikc->pqntsc", _BT, _BT, d).reshape(16, -1, c)
    u = _unpack(up, m, c).astype(np.int64)                               # (16, M, C)
    prod = np.einsum("ztc,zmc->ztm", v, u).reshape(4, 4, n, th, tw, m)
    y4 = np.einsum("rp,sq,pqntym->ntrysm", _AT, _AT, prod)               # (n, th, 2, tw, 2, m)
    y4 = ((y4 + 2 ** 31) & (2 ** 32 - 1)) - 2 ** 31
    s = (y4 >> 2).reshape(n, 2 * th, 2 * tw, m)[:, :oh, :ow]
    out[...] = _requantize_numpy(s + bias[:m], mult, shift, y_zp, lo, hi)


def conv_nhwc(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, pads, out_shape):
    """See the module docstring: (N, OH, OW, M) uint8 of a 3x3 stride-1 group-1 conv."""
    out = np.empty(out_shape, np.uint8)
    if out.size == 0:
        return out
    n, h, wd, c = x.shape
    th, tw = -(-out_shape[1] // 2), -(-out_shape[2] // 2)
    # what the compiled loops assume (they check nothing)
    if (packed.shape != (16, -(-out_shape[3] // NR), channels16(c) // 2, NR, 2) or out_shape[0] != n
            or min(pads) < 0 or pads[0] + h > 2 * th + 2 or pads[1] + wd > 2 * tw + 2 or bias.shape != (out_shape[3],)):
        raise ValueError("Winograd Int8 conv: inconsistent shapes x %s, packed %s, bias %s, pads %s, out %s"
                         % (x.shape, packed.shape, bias.shape, pads, out_shape))
    count = out_shape[0] * th * tw
    # cache-sized chunks, but at least one per team thread (7x7 maps have 16 tiles)
    tiles = min(chunk_tiles(c), max(4, -(-count // (4 * team_size())) * 4))
    chunks = -(-count // tiles)
    work = tiles * 16 * c * out_shape[3]
    xp = np.empty((x.shape[0], 2 * th + 2, 2 * tw + 2, channels16(c)), np.int16)
    _centered_padded(np.ascontiguousarray(x), np.int64(x_zp), xp, pads[0], pads[1],
                     team_blocks(xp.shape[0] * xp.shape[1], xp.shape[2] * c))
    padded_bias = np.zeros(packed.shape[1] * NR, np.int32)
    padded_bias[:out_shape[3]] = bias
    v_work, v_stride = team_work(16 * tiles * xp.shape[3], np.int16)
    acc_work, acc_stride = team_work(tiles * 16 * NR, np.int32)
    sink_work, sink_stride = team_work(4 * NR, np.uint8)
    _winograd(xp, packed, padded_bias, np.int64(multiplier), np.int64(shift), np.int64(y_zp), np.int64(lo),
              np.int64(hi), out, tiles, team_blocks(chunks, work), v_work, v_stride, acc_work, acc_stride, sink_work,
              sink_stride)
    return out
