"""N-bit (4/2) rowwise quantisation extras: the "fake" form (values quantised to n bits
but stored one per byte in the fused 8-bit layout: D uint8 values, float32 scale,
float32 bias, Caffe2's FloatToFused{2,4}BitFakeRowwiseQuantized) and the GREEDY engine
(a per-row search for the clipping range [xmin, xmax] that lowers the L2 error, as
fbgemm's param_search_greedy: from the full range, repeatedly move one end inwards by
(max - min) / 200, the end whose move loses less, until the range is under 84% of
the original; the best local minimum found wins, else the full range).

Scale and bias are rounded to float16 in both forms, so a fake table dequantises to
exactly the values of the packed table it mirrors."""
import math

import numpy as np

from .fused_rowwise import float_to_fused_nbit

F32 = np.float32
_HALF_ONE_ZERO = np.array([1.0, 0.0], "<f2").view(np.uint8)


def _as_rows(x):
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float16):
        x = x.astype(F32)
    return np.ascontiguousarray(x.reshape(math.prod(x.shape[:-1]), x.shape[-1])).astype(F32, copy=False)


def unpack_nbit(q, bits, d):
    """(values uint8 [n, d], scale float32 [n], bias float32 [n]) of packed n-bit rows."""
    k = 8 // bits
    nbytes = q.shape[1] - 4
    mask = np.uint8((1 << bits) - 1)
    values = np.stack([(q[:, :nbytes] >> np.uint8(s * bits)) & mask for s in range(k)], axis=-1)
    values = values.reshape(q.shape[0], nbytes * k)[:, :d]
    tail = np.ascontiguousarray(q[:, nbytes:])
    scale = tail[:, 0:2].copy().view("<f2").reshape(-1).astype(F32)
    bias = tail[:, 2:4].copy().view("<f2").reshape(-1).astype(F32)
    return values, scale, bias


def pack_nbit(values, scale, bias, bits):
    """Packed n-bit rows (values low bits first) with float16 scale and bias."""
    n, d = values.shape
    k = 8 // bits
    nbytes = (d + k - 1) // k
    padded = np.zeros((n, nbytes * k), np.uint8)
    padded[:, :d] = values
    lanes = padded.reshape(n, nbytes, k)
    packed = np.zeros((n, nbytes), np.uint8)
    for s in range(k):
        packed |= (lanes[:, :, s] << np.uint8(s * bits)).astype(np.uint8)
    sb = np.stack([scale.astype("<f2"), bias.astype("<f2")], axis=1).view(np.uint8).reshape(n, 4)
    return np.concatenate([packed, sb], axis=1)


def _scale_bias(lo, hi, bits):
    """float16-rounded (scale, bias, inverse scale) per row of ranges [lo, hi], Caffe2's
    rules: scale 1 when the span is 0 or its inverse is infinite."""
    top = F32((1 << bits) - 1)
    bias = lo.astype(np.float16).astype(F32)
    span = (hi - bias).astype(F32)
    with np.errstate(all="ignore"):
        scale = np.where(span != 0, span / top, F32(1)).astype(np.float16).astype(F32)
        inv = F32(1) / scale
    bad = (scale == 0) | np.isinf(inv)
    scale[bad], inv[bad] = F32(1), F32(1)
    return scale, bias, inv


def _quantize_rows(rows, bits, lo, hi):
    """(values uint8, scale, bias) of rows quantised over the ranges [lo, hi]."""
    scale, bias, inv = _scale_bias(lo, hi, bits)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint((rows - bias[:, None]) * inv[:, None]), 0, (1 << bits) - 1)
    return np.nan_to_num(q).astype(np.uint8), scale, bias


def _losses(rows, bits, lo, hi):
    q, scale, bias = _quantize_rows(rows, bits, lo, hi)
    err = rows - (q.astype(F32) * scale[:, None] + bias[:, None])
    return np.sqrt(np.einsum("ij,ij->i", err, err)).astype(F32)


def greedy_ranges(rows, bits, n_bins=200, ratio=0.16):
    """The clipping range (lo, hi) of every float32 row (see the module doc), all rows
    searched together: each step narrows every row still searching by one bin."""
    xmin, xmax = rows.min(axis=1), rows.max(axis=1)
    step = (xmax - xmin) / F32(n_bins)
    threshold = F32(n_bins) * (F32(1) - F32(ratio)) * step
    lo, hi, loss = xmin.copy(), xmax.copy(), _losses(rows, bits, xmin, xmax)
    best_lo, best_hi = xmin.copy(), xmax.copy()
    best_loss = np.full(rows.shape[0], np.inf, F32)
    with np.errstate(invalid="ignore"):
        active = lo + threshold < hi
    for _ in range(n_bins + 1):                  # every row stops within n_bins steps
        if not active.any():
            break
        loss_lo = _losses(rows, bits, lo + step, hi)
        loss_hi = _losses(rows, bits, lo, hi - step)
        local = active & (loss < loss_lo) & (loss < loss_hi) & (loss < best_loss)
        best_lo[local], best_hi[local], best_loss[local] = lo[local], hi[local], loss[local]
        move_lo = active & (loss_lo < loss_hi)
        move_hi = active & ~(loss_lo < loss_hi)
        lo[move_lo] += step[move_lo]
        loss[move_lo] = loss_lo[move_lo]
        hi[move_hi] -= step[move_hi]
        loss[move_hi] = loss_hi[move_hi]
        with np.errstate(invalid="ignore"):
            active &= lo + threshold < hi
    return best_lo, best_hi                      # the full range where no local minimum was found


def _greedy_rows(rows, bits):
    n, d = rows.shape
    if d == 0 or n == 0:
        return np.zeros((n, d), np.uint8), np.ones(n, F32), np.zeros(n, F32)
    return _quantize_rows(rows, bits, *greedy_ranges(rows, bits))


def float_to_fused_nbit_greedy(x, bits):
    """float [..., D] -> packed n-bit rows like float_to_fused_nbit, ranges chosen greedily."""
    shape = np.shape(x)
    rows = _as_rows(x)
    out = pack_nbit(*_greedy_rows(rows, bits), bits)
    return out.reshape(shape[:-1] + (out.shape[1],))


def _fake_layout(values, scale, bias):
    n = values.shape[0]
    sb = np.stack([scale, bias], axis=1).astype("<f4").view(np.uint8).reshape(n, 8)
    return np.concatenate([values, sb], axis=1)


def float_to_fused_nbit_fake(x, bits, greedy=False):
    """float [..., D] -> uint8 [..., D + 8]: n-bit values one per byte, float32 scale and
    bias (float16-rounded), readable by the fused 8-bit ops."""
    shape = np.shape(x)
    rows = _as_rows(x)
    d = rows.shape[1]
    if greedy:
        values, scale, bias = _greedy_rows(rows, bits)
    elif rows.shape[0] and d:
        values, scale, bias = unpack_nbit(float_to_fused_nbit(rows, bits), bits, d)
    else:
        values, scale, bias = np.zeros((rows.shape[0], d), np.uint8), np.ones(rows.shape[0], F32), \
            np.zeros(rows.shape[0], F32)
    out = _fake_layout(values, scale, bias)
    return out.reshape(shape[:-1] + (d + 8,))
