"""Kernels of Caffe2's fill, range and scatter ops: DiagonalFill, Range,
ScatterAssign, UnsafeCoalesce. Callers have validated shapes and indices."""
import math

import numpy as np


def diagonal_step(shape):
    """Flat distance between consecutive diagonal elements (i, i, ..., i)."""
    return sum(math.prod(shape[k + 1:]) for k in range(len(shape)))


def diagonal_fill(shape, value, dtype):
    """Zeros of `shape` with `value` every diagonal_step(shape) elements from the
    first one (Caffe2's walk: a tall 2-D matrix wraps around, as
    numpy.fill_diagonal(wrap=True) does)."""
    out = np.zeros(shape, dtype=dtype)
    if out.size:
        out.reshape(-1)[::diagonal_step(shape)] = value
    return out


def range_length(start, stop, step, dtype):
    """How many values [start, stop) holds with step: ceil((stop - start) / step),
    in dtype's arithmetic as Caffe2 computes it (numpy.arange's count), never < 0."""
    t = np.dtype(dtype).type
    if np.dtype(dtype).kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            n = np.ceil((t(stop) - t(start)) / t(step))
        return max(0, int(n)) if np.isfinite(n) else 0
    return max(0, -((int(start) - int(stop)) // int(step)))


def range_values(start, stop, step, dtype):
    """start + i * step for i < range_length(...), computed in dtype."""
    t = np.dtype(dtype).type
    n = range_length(start, stop, step, dtype)
    return (np.arange(n, dtype=dtype) * t(step) + t(start)).astype(dtype, copy=False)


def scatter_assign(data, indices, slices):
    """A copy of data whose rows indices[k] are replaced by slices' k-th block (the
    last write of a repeated index wins)."""
    out = data.copy()
    block = math.prod(data.shape[1:])
    rows = out.reshape(data.shape[0], block)
    rows[indices.reshape(-1)] = slices.reshape(indices.size, block)
    return out


def coalesce(xs):
    """One flat array holding every x in order, and views of it shaped like each x."""
    flat = np.concatenate([x.reshape(-1) for x in xs]) if xs else np.zeros(0, np.float32)
    views, offset = [], 0
    for x in xs:
        views.append(flat[offset:offset + x.size].reshape(x.shape))
        offset += x.size
    return views, flat
