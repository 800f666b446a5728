"""Integer convolution and fully connected layers (NHWC, uint8 in and out), compiled,
on the thread team.

Public:
    pack_weights(w, w_zero_point, groups) -> packed int16 weights (pack once per W)
    conv_nhwc(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, kernel, strides,
              pads, dilations, groups, out_shape) -> uint8 (N, OH, OW, M)
    depthwise_nhwc(...)    the same for group == C == M (one channel per group)
    fc(x2d, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi) -> uint8 (rows, N)

Arithmetic (QNNPACK's, which Caffe2's Int8Conv / Int8FC run): the zero points are
subtracted from the bytes as they are packed (int16 values in [-255, 255]), so each
output is the int32 sum of (x - x_zp) * (w - w_zp) over its window plus the int32 bias,
wrapping modulo 2**32 as C's int32 does; the output pass requantizes it
(requantize.requantize_q31's Q31 multiply and rounding shift), adds the output zero
point and clamps to [lo, hi] (lo = the zero point for the fused ReLU). Padding reads as
the input zero point, i.e. as 0.0.

How: the output pixels are split into blocks of ROWS on the team; per block and group
the windows are packed into int16 rows (im2col) and multiplied with the packed weights
by qgemm_simd's vpmaddwd micro-kernel (4 rows x 16 channels), then one pass over the
int32 sums writes the uint8 outputs (qgemm_simd.requantize_rows, 8 int32 lanes at a
time, when a group's channels are a multiple of 8). Depthwise layers (9 products per
output) skip the GEMM: one loop per output pixel over the channels (vectorised across
them). 3x3 stride-1 layers mostly run int8_winograd.py instead.
Callers check every shape and index before calling (compiled loops have no bounds
checks); the kernels assume contiguous arrays.
"""
import numpy as np

from ..runtime.buffers import team_work
from ..runtime.jit import LazyGlobal, compiled, prange, team_blocks, thread_id

qgemm_4x16 = LazyGlobal("..quant.qgemm_simd", "qgemm_4x16")
requantize_rows = LazyGlobal("..quant.qgemm_simd", "requantize_rows")
MR, NR = 4, 16
ROWS = 64            # output pixels per packed block (a multiple of MR)


def pack_weights(w, w_zero_point, groups):
    """w: uint8 or int8 (M, KH, KW, CG); -> int16 (groups, column blocks, K/2, 16, 2) of
    w - w_zero_point (one value, or one per output channel M), zero-padded to whole
    column blocks and an even K."""
    m = w.shape[0]
    mg = m // groups
    k = int(np.prod(w.shape[1:]))
    zero = np.asarray(w_zero_point, np.int16).reshape(-1)
    zero = zero.reshape(groups, mg, 1) if zero.size == m and m > 1 else zero.reshape(())
    return pack_int16(w.reshape(groups, mg, k).astype(np.int16) - zero)


def pack_int16(values):
    """int16 (groups, mg, k) -> the micro-kernel's layout (groups, column blocks, K/2, 16, 2),
    zero-padded to whole column blocks and an even K."""
    groups, mg, k = values.shape
    kpairs = (k + 1) // 2
    nblk = (mg + NR - 1) // NR
    flat = np.zeros((groups, nblk * NR, 2 * kpairs), np.int16)
    flat[:, :mg, :k] = values
    # (g, nblk, NR, kpairs, 2) -> (g, nblk, kpairs, NR, 2)
    packed = flat.reshape(groups, nblk, NR, kpairs, 2).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(packed)


class PackedWeights:
    """pack_weights' result for one weight array, kept while the same array (and zero
    points) comes back: the array stays referenced, so an identity test cannot mistake a
    new array for it."""

    def __init__(self):
        self._key = None
        self._value = None

    def get(self, w, zero_point, groups, pack=None):
        zero = tuple(np.asarray(zero_point).reshape(-1).tolist())
        if self._key is None or self._key[0] is not w or self._key[1:] != (zero, groups):
            self._value = (pack or pack_weights)(w, zero_point, groups)
            self._key = (w, zero, groups)
        return self._value


def _unpack(packed, mg, k):
    """int16 (groups, mg, k) back from pack_weights' layout (the NumPy twins)."""
    groups, nblk, kpairs = packed.shape[:3]
    flat = packed.transpose(0, 1, 3, 2, 4).reshape(groups, nblk * NR, 2 * kpairs)
    return flat[:, :mg, :k]


@compiled(parallel=True)
def _conv_gemm(x, x_zp, wp, bias, mult, shift, y_zp, lo, hi, out, raw, sums,
               kh, kw, sh, sw, dh, dw, pt, pl, groups, mg, blocks, a_work, a_stride, c_work, c_stride):
    """x uint8 or int8 (N, H, W, C); wp = pack_weights(...) (groups, nblk, kpairs, 16, 2);
    bias int32 (M,); out uint8 (N, OH, OW, M) with M = groups * mg; C % groups == 0;
    2 * kpairs >= kh * kw * C / groups; nblk * 16 >= mg; shift in [0, 31]. With `raw`
    the int32 sums + bias go to sums (N * OH * OW, M) and out is not written. Each team
    thread's packed rows (ROWS x 2 * kpairs int16) and sums (ROWS x nblk * 16 int32) are
    its regions of a_work / c_work (from thread_id() * stride; buffers.team_work):
    caller-owned, since the micro-kernels reach them through addresses (blas.py)."""
    n, h, wd, c = x.shape
    oh, ow, m = out.shape[1], out.shape[2], out.shape[3]
    cg = c // groups
    nblk, kpairs = wp.shape[1], wp.shape[2]
    kdim = 2 * kpairs
    pixels = n * oh * ow
    plane = oh * ow
    flat_out = out.reshape(pixels, m)
    rows_of_x = x.reshape(n * h, wd * c)
    chunks = (pixels + ROWS - 1) // ROWS
    # the multiplier fits int32: LLVM multiplies sign-extended 32-bit lanes (vpmuldq)
    m32 = np.int64(np.int32(mult))
    mask = (np.int64(1) << shift) - 1
    threshold = mask >> 1
    lo_n, hi_n = np.int64(lo - y_zp), np.int64(hi - y_zp)
    out_base = np.int64(out.ctypes.data)
    for t in prange(blocks):
        first, last = chunks * t // blocks, chunks * (t + 1) // blocks
        tid = thread_id()
        apack = a_work[tid * a_stride:tid * a_stride + ROWS * kdim].reshape(ROWS, kdim)
        acc = c_work[tid * c_stride:tid * c_stride + ROWS * nblk * NR].reshape(ROWS, nblk * NR)
        for chunk in range(first, last):
            m0 = chunk * ROWS
            rows = min(ROWS, pixels - m0)
            rows4 = (rows + MR - 1) // MR * MR
            for g in range(groups):
                c0 = g * cg
                for r in range(rows4):
                    arow = apack[r]
                    if r >= rows:
                        for j in range(kdim):
                            arow[j] = 0
                        continue
                    p = m0 + r
                    img = p // plane
                    oy = (p % plane) // ow
                    ox = p % ow
                    col = 0
                    ix0 = ox * sw - pl
                    whole_rows = groups == 1 and dw == 1 and ix0 >= 0 and ix0 + kw <= wd
                    for ky in range(kh):
                        iy = oy * sh - pt + ky * dh
                        if whole_rows and iy >= 0 and iy < h:
                            # the window's row is one run of kw * C bytes: one copy, not kw
                            src = rows_of_x[img * h + iy, ix0 * c:(ix0 + kw) * c]
                            dst = arow[col:col + kw * c]
                            for j in range(kw * c):
                                dst[j] = np.int16(src[j]) - x_zp
                            col += kw * c
                            continue
                        for kx in range(kw):
                            ix = ox * sw - pl + kx * dw
                            dst = arow[col:col + cg]
                            if iy >= 0 and iy < h and ix >= 0 and ix < wd:
                                src = x[img, iy, ix, c0:c0 + cg]
                                for j in range(cg):
                                    dst[j] = np.int16(src[j]) - x_zp
                            else:
                                for j in range(cg):
                                    dst[j] = 0
                            col += cg
                    for j in range(col, kdim):
                        arow[j] = 0
                a_base = apack.ctypes.data
                a_step = apack.strides[0]
                c_base = acc.ctypes.data
                c_step = acc.strides[0]
                for b in range(nblk):
                    w_addr = wp[g, b].ctypes.data
                    for r in range(0, rows4, MR):
                        qgemm_4x16(a_base + r * a_step, a_step, w_addr, kpairs, c_base + r * c_step + b * 64, c_step)
                if raw:
                    for r in range(rows):
                        srow = sums[m0 + r, g * mg:(g + 1) * mg]
                        arow = acc[r]
                        brow = bias[g * mg:(g + 1) * mg]
                        for j in range(mg):
                            srow[j] = np.int32(np.int64(arow[j]) + np.int64(brow[j]))
                    continue
                if mg % 8 == 0:
                    # 8 int32 lanes at a time, straight into the output rows
                    requantize_rows(c_base, c_step, rows, mg // 8, bias.ctypes.data + g * mg * 4,
                                    out_base + m0 * m + g * mg, m, mult, shift, y_zp, lo, hi)
                    continue
                for r in range(rows):
                    orow = flat_out[m0 + r, g * mg:(g + 1) * mg]
                    arow = acc[r]
                    brow = bias[g * mg:(g + 1) * mg]
                    for j in range(mg):
                        v = np.int64(arow[j]) + np.int64(brow[j])
                        v = ((v + 2147483648) & 4294967295) - 2147483648        # int32 wrap, as in C
                        q31 = (v * m32 + 1073741824) >> 31
                        rem = (q31 & mask) + (v >> 63)                   # - 1 when v < 0
                        y = (q31 >> shift) - ((threshold - rem) >> 63)  # + 1 when rem > threshold
                        y = min(max(y, lo_n), hi_n)
                        orow[j] = np.uint8(y + y_zp)


def _requantize_numpy(v, mult, shift, y_zp, lo, hi):
    v = ((v + 2 ** 31) & (2 ** 32 - 1)) - 2 ** 31
    q31 = (v * mult + (1 << 30)) >> 31
    mask = (1 << shift) - 1
    y = (q31 >> shift) + (((q31 & mask) - (v < 0)) > (mask >> 1))
    return (np.clip(y, lo - y_zp, hi - y_zp) + y_zp).astype(np.uint8)


def _windows(x, x_zp, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow):
    """int64 (N, OH, OW, KH, KW, C) of x - x_zp with zero padding."""
    n, h, w, c = x.shape
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(w + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    padded = np.zeros((n, hp, wp, c), np.int64)
    padded[:, pt:pt + h, pl:pl + w] = x.astype(np.int64) - x_zp
    out = np.empty((n, oh, ow, kh, kw, c), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            out[:, :, :, ky, kx] = padded[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh,
                                          kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
    return out


@_conv_gemm.numpy_twin
def _conv_gemm_numpy(x, x_zp, wp, bias, mult, shift, y_zp, lo, hi, out, raw, sums,
                     kh, kw, sh, sw, dh, dw, pt, pl, groups, mg, blocks, a_work, a_stride, c_work, c_stride):
    n, oh, ow, m = out.shape
    cg = x.shape[3] // groups
    win = _windows(x, x_zp, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow)
    w = _unpack(wp, mg, kh * kw * cg).astype(np.int64)
    for g in range(groups):
        cols = win[..., g * cg:(g + 1) * cg].reshape(n * oh * ow, -1)
        acc = cols @ w[g].T + bias[g * mg:(g + 1) * mg]
        if raw:
            sums[:, g * mg:(g + 1) * mg] = ((acc + 2 ** 31) & (2 ** 32 - 1)) - 2 ** 31
        else:
            out.reshape(-1, m)[:, g * mg:(g + 1) * mg] = _requantize_numpy(acc, mult, shift, y_zp, lo, hi)


@compiled(parallel=True)
def _depthwise(x, x_zp, w16, bias, mult, shift, y_zp, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, blocks):
    """x uint8 (N, H, W, C); w16 int16 (KH * KW, C) of w - w_zp; bias int32 (C,);
    out uint8 (N, OH, OW, C); shift in [0, 31]."""
    n, h, wd, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    lines = n * oh
    m32 = np.int64(np.int32(mult))
    mask = (np.int64(1) << shift) - 1
    threshold = mask >> 1
    lo_n, hi_n = np.int64(lo - y_zp), np.int64(hi - y_zp)
    for t in prange(blocks):
        first, last = lines * t // blocks, lines * (t + 1) // blocks
        acc = np.empty(c, np.int32)
        for line in range(first, last):
            img = line // oh
            oy = line % oh
            for ox in range(ow):
                for j in range(c):
                    acc[j] = bias[j]
                for ky in range(kh):
                    iy = oy * sh - pt + ky * dh
                    if iy < 0 or iy >= h:
                        continue
                    for kx in range(kw):
                        ix = ox * sw - pl + kx * dw
                        if ix < 0 or ix >= wd:
                            continue
                        src = x[img, iy, ix]
                        wt = w16[ky * kw + kx]
                        for j in range(c):
                            acc[j] = acc[j] + np.int32((np.int32(src[j]) - x_zp) * np.int32(wt[j]))
                orow = out[img, oy, ox]
                for j in range(c):
                    v = np.int64(acc[j])
                    q31 = (v * m32 + 1073741824) >> 31
                    rem = (q31 & mask) + (v >> 63)
                    y = (q31 >> shift) - ((threshold - rem) >> 63)
                    y = min(max(y, lo_n), hi_n)
                    orow[j] = np.uint8(y + y_zp)


@_depthwise.numpy_twin
def _depthwise_numpy(x, x_zp, w16, bias, mult, shift, y_zp, lo, hi, out, kh, kw, sh, sw, dh, dw, pt, pl, blocks):
    oh, ow = out.shape[1], out.shape[2]
    win = _windows(x, x_zp, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow)
    acc = (win * w16.reshape(kh, kw, -1).astype(np.int64)).sum(axis=(3, 4)) + bias
    out[...] = _requantize_numpy(acc, mult, shift, y_zp, lo, hi)


def conv_nhwc(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, kernel, strides, pads, dilations,
              groups, out_shape):
    """The GEMM path; see the module docstring."""
    out = np.empty(out_shape, np.uint8)
    if out.size:
        _run_gemm(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, out, False, np.empty((1, 1), np.int32),
                  kernel, strides, pads, dilations, groups)
    return out


def conv_sums_nhwc(x, x_zp, packed, bias, kernel, strides, pads, dilations, groups, out_shape):
    """int32 (N, OH, OW, M): the sums of (x - x_zp) * (w - w_zp) + bias, before any
    requantization (what ONNX's QLinearConv / ConvInteger requantize their own way)."""
    sums = np.empty(out_shape, np.int32)
    if sums.size:
        _run_gemm(x, x_zp, packed, bias, 1 << 30, 0, 0, 0, 255, np.empty(out_shape, np.uint8), True,
                  sums.reshape(-1, out_shape[3]), kernel, strides, pads, dilations, groups)
    return sums


def _run_gemm(x, x_zp, packed, bias, multiplier, shift, y_zp, lo, hi, out, raw, sums, kernel, strides, pads,
              dilations, groups):
    kh, kw = kernel
    out_shape = out.shape
    mg = out_shape[3] // groups
    pixels = out_shape[0] * out_shape[1] * out_shape[2]
    chunks = -(-pixels // ROWS)
    work = ROWS * kh * kw * (x.shape[3] // groups) * out_shape[3]
    a_work, a_stride = team_work(ROWS * 2 * packed.shape[2], np.int16)
    c_work, c_stride = team_work(ROWS * packed.shape[1] * NR, np.int32)
    _conv_gemm(np.ascontiguousarray(x), np.int64(x_zp), packed, bias, np.int64(multiplier), np.int64(shift),
               np.int64(y_zp), np.int64(lo), np.int64(hi), out, raw, sums, kh, kw, strides[0], strides[1],
               dilations[0], dilations[1], pads[0], pads[1], groups, mg, team_blocks(chunks, work), a_work, a_stride,
               c_work, c_stride)


def depthwise_weights(w, w_zero_point):
    """w uint8 (C, KH, KW, 1) -> int16 (KH * KW, C) of w - w_zero_point."""
    c = w.shape[0]
    return np.ascontiguousarray((w.reshape(c, -1).astype(np.int16) - np.int16(w_zero_point)).T)


def depthwise_nhwc(x, x_zp, w16, bias, multiplier, shift, y_zp, lo, hi, kernel, strides, pads, dilations,
                   out_shape):
    out = np.empty(out_shape, np.uint8)
    if out.size == 0:
        return out
    kh, kw = kernel
    lines = out_shape[0] * out_shape[1]
    work = out_shape[2] * out_shape[3] * kh * kw
    _depthwise(np.ascontiguousarray(x), np.int64(x_zp), w16, bias, np.int64(multiplier), np.int64(shift),
               np.int64(y_zp), np.int64(lo), np.int64(hi), out, kh, kw, strides[0], strides[1],
               dilations[0], dilations[1], pads[0], pads[1], team_blocks(lines, work))
    return out


def fc_sums(x2d, x_zp, packed, bias):
    """int32 (rows, N) sums of a 1x1 convolution of the rows of x2d."""
    rows, k = x2d.shape
    n = bias.shape[0]
    return conv_sums_nhwc(x2d.reshape(rows, 1, 1, k), x_zp, packed, bias, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1,
                          (rows, 1, 1, n)).reshape(rows, n)


def fc(x2d, x_zp, packed, bias, multiplier, shift, y_zp, lo=0, hi=255):
    """uint8 (rows, N) of the rows of x2d (uint8, K values each): a 1x1 convolution."""
    rows, k = x2d.shape
    n = bias.shape[0]
    out = conv_nhwc(x2d.reshape(rows, 1, 1, k), x_zp, packed, bias, multiplier, shift, y_zp, lo, hi,
                    (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, (rows, 1, 1, n))
    return out.reshape(rows, n)


def conv_transpose_nhwc(x, x_zp, w, w_zp, bias, multiplier, shift, y_zp, strides, pads, adjs):
    """Int8ConvTranspose (QNNPACK's deconvolution: group 1, no dilation) in NumPy int64:
    x uint8 (N, H, W, IC), w uint8 (IC, KH, KW, OC), bias int32 (OC,); each input pixel
    scatters (x - x_zp) * (w - w_zp) over its window, the sums (+ bias, wrapped to int32)
    are requantized. pads (t, l, b, r); output (N, OH, OW, OC) uint8."""
    n, h, wd, ic = x.shape
    _, kh, kw, oc = w.shape
    sh, sw = strides
    full_h = (h - 1) * sh + kh + adjs[0]
    full_w = (wd - 1) * sw + kw + adjs[1]
    cols = (x.reshape(-1, ic).astype(np.int64) - x_zp) @ (w.reshape(ic, -1).astype(np.int64) - w_zp)
    cols = cols.reshape(n, h, wd, kh, kw, oc)
    acc = np.zeros((n, full_h, full_w, oc), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            acc[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (wd - 1) * sw + 1:sw] += cols[:, :, :, ky, kx]
    acc = acc[:, pads[0]:full_h - pads[2], pads[1]:full_w - pads[3]] + bias.astype(np.int64)
    return _requantize_numpy(acc, multiplier, shift, y_zp, 0, 255)
