"""Gradients of max and average pooling (NCHW, N-d), Caffe2's MaxPoolGradient and
AveragePoolGradient.

Public:
    max_pool_backward(x, y, dy, kernel, strides, pads, dilations, ceil_mode) -> dx
        every input equal to its window's maximum receives that window's gradient
        (Caffe2's CPU rule: ties all receive it)
    average_pool_backward(x_shape, dy, kernel, strides, pads, count_include_pad, ceil_mode) -> dx
        each window's gradient spread over the cells its divisor counted
    global_pool_backward(x, y, dy, kind) -> dx

The windows are the forward's (pool.py): ceil-mode padding at the end never counts
in an average. The gradient is accumulated in a padded buffer with one strided add
per kernel tap, then cropped. Shapes are checked by the caller.
"""
import itertools

import numpy as np

from .conv import offset_view, pad_input
from .pool import _ceil_extra_pads, _inverse_counts


def _padded_geometry(spatial, kernel, strides, pads, dilations, ceil_mode):
    k = len(kernel)
    extra = _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode)
    return list(pads[:k]) + [pads[k + i] + extra[i] for i in range(k)]


def _crop(dxp, pads, spatial):
    k = len(spatial)
    interior = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + spatial[i]) for i in range(k))
    return np.ascontiguousarray(dxp[interior])


def max_pool_backward(x, y, dy, kernel, strides, pads, dilations, ceil_mode):
    spatial = x.shape[2:]
    full = _padded_geometry(spatial, kernel, strides, pads, dilations, ceil_mode)
    out_spatial = dy.shape[2:]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = pad_input(x, full, value=fill)
    dxp = np.zeros(xp.shape, np.result_type(dy.dtype, np.float32))
    for offset in itertools.product(*[range(kk) for kk in kernel]):
        cells = offset_view(xp, offset, dilations, strides, out_spatial, lead=2)
        target = offset_view(dxp, offset, dilations, strides, out_spatial, lead=2)
        target += np.where(cells == y, dy, 0)
    return _crop(dxp, full, spatial).astype(dy.dtype, copy=False)


def average_pool_backward(x_shape, dy, kernel, strides, pads, count_include_pad, ceil_mode):
    spatial = tuple(x_shape[2:])
    ones = [1] * len(kernel)
    full = _padded_geometry(spatial, kernel, strides, pads, ones, ceil_mode)
    out_spatial = tuple(dy.shape[2:])
    dtype = np.result_type(dy.dtype, np.float32)
    inv = _inverse_counts(spatial, tuple(kernel), tuple(strides), tuple(pads), out_spatial,
                          bool(count_include_pad), np.dtype(dtype).str)
    share = dy * inv
    padded = tuple(spatial[i] + full[i] + full[len(kernel) + i] for i in range(len(kernel)))
    dxp = np.zeros(tuple(x_shape[:2]) + padded, dtype)
    for offset in itertools.product(*[range(kk) for kk in kernel]):
        offset_view(dxp, offset, ones, strides, out_spatial, lead=2)[...] += share
    return _crop(dxp, full, spatial).astype(dy.dtype, copy=False)


def global_pool_backward(x, y, dy, kind):
    axes = tuple(range(2, x.ndim))
    if kind == "max":
        return np.where(x == y, dy, 0).astype(dy.dtype, copy=False)
    count = int(np.prod([x.shape[a] for a in axes]))
    return np.broadcast_to(dy / count, x.shape).astype(dy.dtype)
