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


def _scale_bias(xmin, xmax, bits):
    """float16-rounded (scale, bias, inverse scale) of a range, Caffe2's rules."""
    top = F32((1 << bits) - 1)
    bias = F32(np.float16(xmin))
    span = F32(xmax) - bias
    scale = F32(np.float16(span / top if span != 0 else F32(1)))
    with np.errstate(divide="ignore"):
        inv = F32(1) / scale if scale != 0 else F32(1)
    if scale == 0 or np.isinf(inv):
        scale, inv = F32(1), F32(1)
    return scale, bias, inv


def _quantize_row(x, bits, xmin, xmax):
    scale, bias, inv = _scale_bias(xmin, xmax, bits)
    q = np.clip(np.rint((x - bias) * inv), 0, (1 << bits) - 1).astype(np.uint8)
    return q, scale, bias


def _loss(x, bits, xmin, xmax):
    q, scale, bias = _quantize_row(x, bits, xmin, xmax)
    err = x - (q.astype(F32) * scale + bias)
    return F32(np.sqrt(np.dot(err, err)))


def greedy_range(x, bits, n_bins=200, ratio=0.16):
    """The clipping range [xmin, xmax] of one float32 row (see the module doc)."""
    xmin, xmax = F32(x.min()), F32(x.max())
    step = (xmax - xmin) / F32(n_bins)
    threshold = F32(n_bins) * (F32(1) - F32(ratio)) * step
    lo, hi, loss = xmin, xmax, _loss(x, bits, xmin, xmax)
    best = None
    while lo + threshold < hi:
        loss_lo = _loss(x, bits, lo + step, hi)
        loss_hi = _loss(x, bits, lo, hi - step)
        if loss < loss_lo and loss < loss_hi and (best is None or loss < best[2]):
            best = (lo, hi, loss)
        if loss_lo < loss_hi:
            lo, loss = lo + step, loss_lo
        else:
            hi, loss = hi - step, loss_hi
    return (best[0], best[1]) if best is not None else (xmin, xmax)


def _greedy_rows(rows, bits):
    n, d = rows.shape
    values = np.zeros((n, d), np.uint8)
    scale, bias = np.ones(n, F32), np.zeros(n, F32)
    if d:
        for r in range(n):
            x = rows[r]
            values[r], scale[r], bias[r] = _quantize_row(x, bits, *greedy_range(x, bits))
    return values, scale, bias


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
