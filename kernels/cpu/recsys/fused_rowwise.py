"""Fused rowwise quantisation: float/half rows <-> uint8 rows that carry their own
scale and bias at the end (Caffe2's fused_{8bit,nbit}_rowwise_conversion).

Rounding: round half to even (`np.rint`), computed in float32 like the late Caffe2
base kernels (`lrintf` under the default rounding mode). The 2018 Eigen op rounded
half away from zero; the two differ only on exact ties. See docs/perfkernels.md.

Layouts (little-endian, scale first, then bias, both after the values):
- 8-bit:             D uint8 values, float32 scale, float32 bias   (D + 8 bytes)
- 8-bit half s/b:    D uint8 values, float16 scale, float16 bias   (D + 4 bytes)
- 4/2-bit:           ceil(D / k) bytes, value j in byte j // k at bit (j % k) * bits
                     (low bits first), float16 scale, float16 bias (k = 8 / bits)
"""
import math

import numpy as np

EPSILON = np.float32(1e-8)


def _rows(x):
    """View an N-D array as 2-D rows (leading dims flattened), float32."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("input must have at least one dimension")
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).astype(np.float32, copy=False)


def float_to_fused8(x):
    """float32/float16 [..., D] -> uint8 [..., D + 8] with float32 scale and bias."""
    shape = np.shape(x)
    rows = _rows(x)
    n, d = rows.shape
    out = np.empty((n, d + 8), dtype=np.uint8)
    if d == 0:
        lo = hi = np.zeros(n, np.float32)
    else:
        lo, hi = rows.min(axis=1), rows.max(axis=1)
    span = hi - lo
    inv = np.float32(255.0) / (span + EPSILON)
    q = np.rint((rows - lo[:, None]) * inv[:, None])
    out[:, :d] = np.clip(q, 0, 255)
    sb = np.stack([span / np.float32(255.0), lo], axis=1).astype("<f4")
    out[:, d:] = sb.view(np.uint8)
    return out.reshape(shape[:-1] + (d + 8,))


def fused8_to_float(q, out_dtype=np.float32):
    """uint8 [..., D + 8] -> float [..., D]: value * scale + bias (in float32)."""
    q = np.asarray(q)
    rows = q.reshape(math.prod(q.shape[:-1]), q.shape[-1])
    d = rows.shape[1] - 8
    sb = np.ascontiguousarray(rows[:, d:]).view("<f4").astype(np.float32)
    vals = rows[:, :d].astype(np.float32) * sb[:, :1] + sb[:, 1:]
    return vals.astype(out_dtype, copy=False).reshape(q.shape[:-1] + (d,))


def float_to_fused_nbit(x, bit_rate):
    """float32/float16 [..., D] -> uint8 [..., ceil(D/k) + 4] with float16 scale/bias.

    bit_rate 8 gives the "HalfScaleBias" 8-bit layout (D + 4 bytes)."""
    shape = np.shape(x)
    rows = _rows(x)
    n, d = rows.shape
    k = 8 // bit_rate
    qmax = (1 << bit_rate) - 1
    nbytes = (d + k - 1) // k
    if d == 0:
        lo = hi = np.zeros(n, np.float32)
    else:
        lo, hi = rows.min(axis=1), rows.max(axis=1)
    bias16 = lo.astype(np.float16)
    bias = bias16.astype(np.float32)
    span = hi - bias
    scale16 = np.where(span == 0, np.float32(1), span / np.float32(qmax)).astype(np.float16)
    scale = scale16.astype(np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(scale == 0, np.float32(1), np.float32(1) / np.where(scale == 0, 1, scale))
    bad = (scale == 0) | np.isinf(inv)
    scale16 = np.where(bad, np.float16(1), scale16)
    inv = np.where(bad, np.float32(1), inv).astype(np.float32)
    q = np.clip(np.rint((rows - bias[:, None]) * inv[:, None]), 0, qmax).astype(np.uint8)
    if d % k:
        q = np.concatenate([q, np.zeros((n, nbytes * k - d), np.uint8)], axis=1)
    q = q.reshape(n, nbytes, k)
    packed = np.zeros((n, nbytes), dtype=np.uint8)
    for j in range(k):
        packed |= q[:, :, j] << np.uint8(j * bit_rate)
    sb = np.stack([scale16, bias16], axis=1).astype("<f2").view(np.uint8)
    out = np.concatenate([packed, sb], axis=1)
    return out.reshape(shape[:-1] + (nbytes + 4,))


def fused_nbit_to_float(q, bit_rate, out_dtype=np.float32):
    """uint8 [..., B + 4] -> float [..., B * k]: scale * value + bias (float32 math)."""
    q = np.asarray(q)
    rows = q.reshape(math.prod(q.shape[:-1]), q.shape[-1])
    nbytes = rows.shape[1] - 4
    k = 8 // bit_rate
    mask = np.uint8((1 << bit_rate) - 1)
    packed = rows[:, :nbytes]
    vals = np.stack([(packed >> np.uint8(j * bit_rate)) & mask for j in range(k)], axis=2)
    vals = vals.reshape(rows.shape[0], nbytes * k).astype(np.float32)
    sb = np.ascontiguousarray(rows[:, nbytes:]).view("<f2").astype(np.float32)
    out = vals * sb[:, :1] + sb[:, 1:]
    return out.astype(out_dtype, copy=False).reshape(q.shape[:-1] + (nbytes * k,))


def float_to_half(x):
    with np.errstate(over="ignore"):   # out-of-range values become inf, as in C++
        return np.asarray(x, dtype=np.float32).astype(np.float16)


def half_to_float(x):
    return np.asarray(x, dtype=np.float16).astype(np.float32)
