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
in an average. 2-D float pools run a compiled loop over the planes (one pass over
each window, planes split over the team: 64 x 20 x 24 x 24 2x2/s2 max 8.0 -> 2.2 ms
of CPU time at one thread); other ranks and dtypes accumulate in a padded buffer
with one strided NumPy add per kernel tap, then crop. Shapes are checked by the
caller; the compiled loops check every window cell against the plane's bounds.
"""
import itertools

import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from .conv import offset_view, pad_input
from .pool import _ceil_extra_pads, _inverse_counts


@compiled(inline=True)
def _cell_range(o, stride, pad, kernel, dilation, size):
    """Kernel taps j of output o whose cell o * stride - pad + j * dilation is inside [0, size)."""
    start = o * stride - pad
    lo = 0
    while lo < kernel and start + lo * dilation < 0:
        lo += 1
    hi = kernel
    while hi > lo and start + (hi - 1) * dilation >= size:
        hi -= 1
    return start, lo, hi


def _tap_outputs(tap, stride, pad, dilation, size, n_out):
    """(outputs, cells): the slice of outputs whose window tap `tap` lies inside
    [0, size) (a contiguous run, as in _cell_range) and the slice of those cells."""
    offset = tap * dilation - pad
    lo = max(0, -(offset // stride))
    hi = min(n_out, -((offset - size) // stride))
    if hi <= lo:
        return None
    first = lo * stride + offset
    return slice(lo, hi), slice(first, first + (hi - lo - 1) * stride + 1, stride)


@compiled(parallel=True)
def _max_pool2d_backward(x, y, dy, dx, zero, kh, kw, sh, sw, dh, dw, pt, pl, blocks):
    """dx (P, H, W), zeroed, gets dy at every window cell equal to the window's max.
    The add is a select (zero: the dtype's 0), not a branch: a data-dependent branch
    mispredicts about every other cell (64 x 20 x 24 x 24, 2x2/s2: 4.5 -> 2.0 ms)."""
    planes, height, width = x.shape
    oh, ow = y.shape[1], y.shape[2]
    for t in prange(blocks):
        for p in range(planes * t // blocks, planes * (t + 1) // blocks):
            for oy in range(oh):
                y0, i_lo, i_hi = _cell_range(oy, sh, pt, kh, dh, height)
                yrow, grow = y[p, oy], dy[p, oy]
                for i in range(i_lo, i_hi):
                    xrow, drow = x[p, y0 + i * dh], dx[p, y0 + i * dh]
                    for ox in range(ow):
                        x0, j_lo, j_hi = _cell_range(ox, sw, pl, kw, dw, width)
                        m, g = yrow[ox], grow[ox]
                        for j in range(j_lo, j_hi):
                            drow[x0 + j * dw] += g if xrow[x0 + j * dw] == m else zero


@_max_pool2d_backward.numpy_twin
def _max_pool2d_backward_numpy(x, y, dy, dx, zero, kh, kw, sh, sw, dh, dw, pt, pl, blocks):
    # one strided add per kernel tap; a tap's cells are distinct, so `+=` on the view is safe
    oh, ow = y.shape[1], y.shape[2]
    for i in range(kh):
        rows = _tap_outputs(i, sh, pt, dh, x.shape[1], oh)
        for j in range(kw):
            cols = _tap_outputs(j, sw, pl, dw, x.shape[2], ow)
            if rows is None or cols is None:
                continue
            out = (slice(None), rows[0], cols[0])
            cells = (slice(None), rows[1], cols[1])
            dx[cells] += np.where(x[cells] == y[out], dy[out], zero)


@compiled(parallel=True)
def _average_pool2d_backward(dy, inv, dx, kh, kw, sh, sw, pt, pl, blocks):
    """dx (P, H, W), zeroed, gets dy * inv (1 / divisor) at every window cell inside."""
    planes, height, width = dx.shape
    oh, ow = dy.shape[1], dy.shape[2]
    for t in prange(blocks):
        for p in range(planes * t // blocks, planes * (t + 1) // blocks):
            for oy in range(oh):
                y0, i_lo, i_hi = _cell_range(oy, sh, pt, kh, 1, height)
                grow, irow = dy[p, oy], inv[oy]
                for i in range(i_lo, i_hi):
                    drow = dx[p, y0 + i]
                    for ox in range(ow):
                        x0, j_lo, j_hi = _cell_range(ox, sw, pl, kw, 1, width)
                        g = grow[ox] * irow[ox]
                        for j in range(j_lo, j_hi):
                            drow[x0 + j] += g


@_average_pool2d_backward.numpy_twin
def _average_pool2d_backward_numpy(dy, inv, dx, kh, kw, sh, sw, pt, pl, blocks):
    oh, ow = dy.shape[1], dy.shape[2]
    share = dy * inv
    for i in range(kh):
        rows = _tap_outputs(i, sh, pt, 1, dx.shape[1], oh)
        for j in range(kw):
            cols = _tap_outputs(j, sw, pl, 1, dx.shape[2], ow)
            if rows is not None and cols is not None:
                dx[:, rows[1], cols[1]] += share[:, rows[0], cols[0]]


def _planes(a, dtype):
    return np.ascontiguousarray(a, dtype=dtype).reshape((-1,) + a.shape[2:])


def _compiled_ok(x, kernel):
    return len(kernel) == 2 and x.dtype in (np.float32, np.float64)


def _padded_geometry(spatial, kernel, strides, pads, dilations, ceil_mode):
    k = len(kernel)
    extra = _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode)
    return list(pads[:k]) + [pads[k + i] + extra[i] for i in range(k)]


def _crop(dxp, pads, spatial):
    k = len(spatial)
    interior = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + spatial[i]) for i in range(k))
    return np.ascontiguousarray(dxp[interior])


def max_pool_backward(x, y, dy, kernel, strides, pads, dilations, ceil_mode):
    if _compiled_ok(x, kernel):
        dx = np.zeros(x.shape, x.dtype)
        planes = x.shape[0] * x.shape[1]
        work = dy.shape[2] * dy.shape[3] * kernel[0] * kernel[1]
        _max_pool2d_backward(_planes(x, x.dtype), _planes(y, x.dtype), _planes(dy, x.dtype),
                             dx.reshape((planes,) + x.shape[2:]), x.dtype.type(0), kernel[0], kernel[1],
                             strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1],
                             team_blocks(planes, work))
        return dx.astype(dy.dtype, copy=False)
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
    if len(kernel) == 2 and dtype in (np.float32, np.float64):
        dx = np.zeros(tuple(x_shape), dtype)
        planes = x_shape[0] * x_shape[1]
        work = out_spatial[0] * out_spatial[1] * kernel[0] * kernel[1]
        _average_pool2d_backward(_planes(dy, dtype), inv, dx.reshape((planes,) + spatial), kernel[0], kernel[1],
                                 strides[0], strides[1], pads[0], pads[1], team_blocks(planes, work))
        return dx.astype(dy.dtype, copy=False)
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
