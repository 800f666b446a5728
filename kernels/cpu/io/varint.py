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


def encode(values):
    """bytes: the varints of `values` (any integer dtype) one after another."""
    v = np.ascontiguousarray(values).astype(np.int64, copy=False).view(np.uint64)
    if v.size == 0:
        return b""
    out = np.empty(v.size * 10, dtype=np.uint8)
    n = _encode(v, out)
    return out[:n].tobytes()
