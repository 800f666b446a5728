"""Protobuf varints of an integer array, for writing packed repeated fields.

A varint is the value's 7-bit groups, low group first, each byte but the last with
its high bit set; negative numbers are their 64-bit two's complement (ten bytes).
"""
import numpy as np

from ..runtime.jit import compiled


@compiled
def _encode(v, out):
    """v: uint64 values; out: >= 10 bytes per value. Returns the bytes written."""
    low7 = np.uint64(0x7F)
    high = np.uint64(0x80)
    seven = np.uint64(7)
    k = 0
    for i in range(v.size):
        x = v[i]
        while x >= high:
            out[k] = np.uint8((x & low7) | high)
            x = x >> seven
            k += 1
        out[k] = np.uint8(x)
        k += 1
    return k


@_encode.numpy_twin
def _encode_numpy(v, out):
    # [values, 10] grid of 7-bit groups, continuation bit on all but each value's last
    shifts = np.arange(10, dtype=np.uint64) * np.uint64(7)
    groups = (v[:, None] >> shifts) & np.uint64(0x7F)
    length = 1 + ((v[:, None] >> shifts[1:]) != 0).sum(axis=1)
    used = np.arange(10) < length[:, None]
    more = np.arange(10) < (length - 1)[:, None]
    encoded = (groups | np.where(more, np.uint64(0x80), np.uint64(0))).astype(np.uint8)[used]
    out[:encoded.size] = encoded
    return int(encoded.size)


def encode(values):
    """bytes: the varints of `values` (any integer dtype) one after another."""
    v = np.ascontiguousarray(values).astype(np.int64, copy=False).view(np.uint64)
    if v.size == 0:
        return b""
    out = np.empty(v.size * 10, dtype=np.uint8)
    n = _encode(v, out)
    return out[:n].tobytes()
