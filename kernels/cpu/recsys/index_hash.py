"""Caffe2's IndexHash: a seeded hash of integer ids into [0, modulo).

Per id, in the id's own integer type with wrap-around: h = seed * 0xDEADBEEF,
then for each byte b of the id (little-endian, as a signed byte)
h = h * 65537 + b; the result is h mod modulo (non-negative)."""
import numpy as np


def _wrap(value, dtype):
    """value reduced to dtype's two's-complement range."""
    bits = np.dtype(dtype).itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def index_hash(ids, seed, modulo):
    dtype = ids.dtype
    start = _wrap(_wrap(int(seed) * 0xDEADBEEF, np.int64), dtype)
    flat = np.ascontiguousarray(ids.reshape(-1)).astype(dtype.newbyteorder("<"), copy=False)
    as_bytes = flat.view(np.int8).reshape(flat.size, dtype.itemsize).astype(dtype)
    h = np.full(flat.size, start, dtype)
    multiplier = dtype.type(65537)
    with np.errstate(over="ignore"):
        for k in range(dtype.itemsize):
            h = h * multiplier + as_bytes[:, k]
    return (h.astype(np.int64) % np.int64(modulo)).astype(dtype).reshape(ids.shape)
