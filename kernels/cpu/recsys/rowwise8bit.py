"""Caffe2's older 8-bit row-wise quantisation, with scale and bias in a separate
(rows, 2) float32 tensor (FloatToRowwiseQuantized8Bits, Rowwise8BitQuantizedToFloat,
SparseLengths{Sum,WeightedSum,Mean,WeightedMean}8BitsRowwise), and the gather of
fused 8-bit rows (GatherFused8BitRowwise; scale and bias in each row's last 8 bytes).

Quantisation per row: bias = min, scale = (max - min) / 255 (rows with
max - min < 1e-10 get scale 1 and all-zero codes), q = round((x - bias) / scale)
with halves rounded away from zero (Eigen's round), computed in float32.
"""
import math

import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from .segments import offsets_from_lengths
from .sparse_lengths import LookupInputError, check_indices

_EQUALITY_THRESHOLD = np.float32(1e-10)


def quantize(x):
    """float32 (N, ...) -> (uint8 codes of x's shape, scale_bias (N, 2) float32)."""
    n = x.shape[0]
    rows = np.ascontiguousarray(x, np.float32).reshape(n, math.prod(x.shape[1:]))
    scale_bias = np.empty((n, 2), np.float32)
    if rows.size == 0:
        scale_bias[:, 0] = 1.0
        scale_bias[:, 1] = 0.0
        return np.zeros(x.shape, np.uint8), scale_bias
    lo, hi = rows.min(axis=1), rows.max(axis=1)
    flat = (hi - lo) < _EQUALITY_THRESHOLD
    scale = np.where(flat, np.float32(1.0), (hi - lo) / np.float32(255.0)).astype(np.float32)
    inv = (np.float32(1.0) / scale).astype(np.float32)
    scaled = (rows - lo[:, None]) * inv[:, None]
    codes = np.floor(scaled)
    codes += (scaled - codes) >= np.float32(0.5)       # halves away from zero (values are >= 0)
    codes[flat] = 0
    scale_bias[:, 0], scale_bias[:, 1] = scale, lo
    return np.clip(codes, 0, 255).astype(np.uint8).reshape(x.shape), scale_bias


def dequantize(codes, scale_bias):
    n = codes.shape[0]
    rows = codes.reshape(n, math.prod(codes.shape[1:])).astype(np.float32)
    return (rows * scale_bias[:, :1] + scale_bias[:, 1:]).reshape(codes.shape)


@compiled
def _lookup_segments(data, scale_bias, src, weights, offsets, mean, out, first, last):
    """out[k] for segments first .. last-1: the sum over the entries e of segment k of
    w_e * (scale * q + bias) of row src[e] (w_e = weights[e], 1 when weights is
    empty), divided by the segment's length when `mean`. The caller checked src and
    offsets."""
    d = data.shape[1]
    use_w = weights.size > 0
    for k in range(first, last):
        acc = out[k]
        for i in range(d):
            acc[i] = 0
        a, b = offsets[k], offsets[k + 1]
        for e in range(a, b):
            r = src[e]
            w = weights[e] if use_w else np.float32(1)
            s = w * scale_bias[r, 0]
            c = w * scale_bias[r, 1]
            row = data[r]
            for i in range(d):
                acc[i] += s * row[i] + c
        if mean and b > a:
            inv = np.float32(1.0) / np.float32(b - a)
            for i in range(d):
                acc[i] *= inv


@_lookup_segments.numpy_twin
def _lookup_segments_numpy(data, scale_bias, src, weights, offsets, mean, out, first, last):
    if last <= first:
        return
    a, b = int(offsets[first]), int(offsets[last])
    r = src[a:b]
    w = weights[a:b] if weights.size else np.ones(b - a, np.float32)
    rows = data[r].astype(np.float32) * (w * scale_bias[r, 0])[:, None] + (w * scale_bias[r, 1])[:, None]
    counts = np.diff(offsets[first:last + 1])
    seg = np.repeat(np.arange(last - first), counts)
    res = np.zeros((last - first, data.shape[1]), np.float32)
    np.add.at(res, seg, rows)
    if mean:
        nz = counts > 0
        res[nz] *= (np.float32(1) / counts[nz].astype(np.float32))[:, None]
    out[first:last] = res


# the CompiledKernel, for Python callers: compiling a parallel caller rebinds _lookup_segments to numba's
# dispatcher (no twin, no background compile behind that name)
LOOKUP_SEGMENTS = _lookup_segments


@compiled(parallel=True)
def _lengths_rowwise8(data, scale_bias, src, weights, offsets, mean, out, bounds):
    """_lookup_segments for the segments bounds[t] .. bounds[t+1] on team block t."""
    for t in prange(bounds.size - 1):
        _lookup_segments(data, scale_bias, src, weights, offsets, mean, out, bounds[t], bounds[t + 1])


@_lengths_rowwise8.numpy_twin
def _lengths_rowwise8_numpy(data, scale_bias, src, weights, offsets, mean, out, bounds):
    _lookup_segments_numpy(data, scale_bias, src, weights, offsets, mean, out, int(bounds[0]), int(bounds[-1]))


def sparse_lengths_rowwise8(data, indices, lengths, scale_bias, weights=None, mean=False):
    """SparseLengths*8BitsRowwise: [len(lengths)] + data.shape[1:] float32."""
    n = data.shape[0]
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    check_indices(idx, n)
    offsets = offsets_from_lengths(lengths, idx.size)
    rows = np.ascontiguousarray(data).reshape(n, math.prod(data.shape[1:]))
    k = offsets.size - 1
    out = np.empty((k, rows.shape[1]), np.float32)
    w = np.empty(0, np.float32) if weights is None else np.ascontiguousarray(weights, np.float32).reshape(-1)
    if k:
        blocks = team_blocks(k, max(1, idx.size * rows.shape[1] // k))
        sb = np.ascontiguousarray(scale_bias, np.float32)
        if blocks == 1:                # no parallel region (its start and join cost more)
            LOOKUP_SEGMENTS(rows, sb, idx, w, offsets, bool(mean), out, 0, k)
        else:
            bounds = (np.arange(blocks + 1, dtype=np.int64) * k) // blocks
            _lengths_rowwise8(rows, sb, idx, w, offsets, bool(mean), out, bounds)
    return out.reshape((k,) + data.shape[1:])


def gather_fused8(data, indices):
    """GatherFused8BitRowwise: rows of fused 8-bit DATA (N, D + 8) dequantised, (len, D)."""
    idx = np.asarray(indices).reshape(-1).astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[0]):
        bad = int(idx[(idx < 0) | (idx >= data.shape[0])][0])
        raise LookupInputError("indices", "INDICES element is out of DATA bounds, id=%d data_dim=%d"
                               % (bad, data.shape[0]))
    d = data.shape[1] - 8
    rows = np.ascontiguousarray(data[idx])
    scale = rows[:, d:d + 4].copy().view(np.float32)
    bias = rows[:, d + 4:d + 8].copy().view(np.float32)
    return rows[:, :d].astype(np.float32) * scale + bias
