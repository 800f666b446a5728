"""SinusoidPositionEncoding and GLU."""
import math

import numpy as np

F32 = np.float32


def sinusoid_position_encoding(positions, size, alpha, amplitude):
    """[M, K, size]: for row i the position p = positions[i, 0] (Caffe2 reads only
    column 0 and copies the row to all K), value k = amplitude * sin(p / alpha^(k /
    size)) for even k, amplitude * cos(...) for odd k. Computed directly rather than
    through log(p) as Caffe2 does, so position 0 gives sin 0 / cos 0 instead of NaN."""
    m, k = positions.shape
    if k == 0:                       # no column 0 to read: an empty [M, 0, size] result
        return np.zeros((m, 0, size), F32)
    p = positions[:, 0].astype(F32)[:, None]
    rates = np.exp(-F32(math.log(alpha)) * np.arange(size, dtype=F32) / F32(size)).astype(F32)
    angles = p * rates[None, :]
    angles[:, 1::2] += F32(math.pi / 2)
    row = (F32(amplitude) * np.sin(angles)).astype(F32)
    return np.ascontiguousarray(np.broadcast_to(row[:, None, :], (m, k, size)))


def glu(x, axis):
    """x split in two halves a, b along axis: a * sigmoid(b)."""
    a, b = np.split(x, 2, axis=axis)
    b64 = b.astype(np.float64)
    sig = 0.5 * (1.0 + np.tanh(0.5 * b64))
    return (a * sig).astype(x.dtype)
