"""Caffe2's FloatToFusedRandRowwiseQuantized / FusedRandRowwiseQuantizedToFloat layout:
each row of a float32 matrix [N, D] becomes 10 + ceil(D / k) bytes (k = 8 / bitwidth):
byte 0 bitwidth, byte 1 tail (k * segment - D, the unused slots), bytes 2..5 the row's
min and 6..9 its max (float32, little-endian), then `segment` bytes where value c sits
in byte c % segment at bit (c // segment) * bitwidth. A value is stored as the number
of gaps (gap = (max - min) / (2^bitwidth - 1)) above min: rounded to nearest (half to
even), or stochastically (floor plus one with probability equal to the fraction) so
that the expectation is the value."""
import numpy as np

F32 = np.float32
_EPS = F32(1e-8)


def quantize(x, bitwidth, rng=None):
    """float32 [N, D] -> uint8 [N, 10 + ceil(D / k)]; rng None: round to nearest."""
    n, d = x.shape
    k = 8 // bitwidth
    segment = (d + k - 1) // k
    out = np.zeros((n, 10 + segment), np.uint8)
    out[:, 0] = bitwidth
    out[:, 1] = k * segment - d
    if n == 0:
        return out
    lo = x.min(axis=1) if d else np.zeros(n, F32)
    hi = x.max(axis=1) if d else np.zeros(n, F32)
    out[:, 2:10] = np.stack([lo, hi], axis=1).astype("<f4").view(np.uint8).reshape(n, 8)
    if d == 0:
        return out
    top = F32((1 << bitwidth) - 1)
    gap = (hi - lo) / top
    with np.errstate(all="ignore"):
        times = (x - lo[:, None]) / (gap[:, None] + _EPS)
    if rng is None:
        q = np.rint(times)
    else:
        base = np.floor(times)
        q = base + (rng.random(times.shape, dtype=F32) < (times - base))
    q = np.clip(np.nan_to_num(q), 0, top).astype(np.uint8)
    padded = np.zeros((n, k * segment), np.uint8)
    padded[:, :d] = q
    slots = padded.reshape(n, k, segment)          # slot s of byte b holds value s * segment + b
    body = out[:, 10:]
    for s in range(k):
        body |= (slots[:, s, :] << np.uint8(s * bitwidth)).astype(np.uint8)
    return out


def dequantize(y):
    """uint8 [N, 10 + segment] -> float32 [N, segment * k - tail]; bitwidth and tail are
    read from the first row (the caller checks the rows agree)."""
    n, width = y.shape
    segment = width - 10
    bitwidth, tail = int(y[0, 0]), int(y[0, 1])
    k = 8 // bitwidth
    cols = segment * k - tail
    minmax = np.ascontiguousarray(y[:, 2:10]).view("<f4").reshape(n, 2).astype(F32)
    lo, hi = minmax[:, 0], minmax[:, 1]
    gap = (hi - lo) / F32((1 << bitwidth) - 1) + _EPS
    mask = np.uint8((1 << bitwidth) - 1)
    body = y[:, 10:]
    values = np.concatenate([(body >> np.uint8(s * bitwidth)) & mask for s in range(k)], axis=1)[:, :cols]
    return (lo[:, None] + gap[:, None] * values.astype(F32)).astype(F32)
