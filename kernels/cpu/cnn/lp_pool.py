"""Lp pooling, N-d NCHW: y = (sum over the window of |x|^p)^(1/p), padding counting
as zeros, and its gradient. One strided view per kernel tap; NumPy. Callers check
the geometry (positive kernel and strides, pads >= 0, p > 0) and pass the output
size (pool.pool_output_shape)."""
import numpy as np


def _placed(x, pads, out_spatial, kernel, strides):
    """x inside a zero buffer just large enough for every window (begin pads in
    front; the end padded or cut to what the last window reaches)."""
    k = len(kernel)
    extent = [(out_spatial[i] - 1) * strides[i] + kernel[i] for i in range(k)]
    buf = np.zeros(x.shape[:2] + tuple(extent), x.dtype)
    src = tuple(slice(0, max(0, min(x.shape[2 + i], extent[i] - pads[i]))) for i in range(k))
    dst = tuple(slice(pads[i], pads[i] + s.stop) for i, s in enumerate(src))
    buf[(slice(None), slice(None)) + dst] = x[(slice(None), slice(None)) + src]
    return buf, dst


def _tap(buf, tap, strides, out_spatial):
    return buf[(slice(None), slice(None)) + tuple(
        slice(t, t + (n - 1) * s + 1, s) for t, s, n in zip(tap, strides, out_spatial))]


def lp_pool(x, kernel, strides, pads, p, out_spatial):
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    buf, _ = _placed(wide, pads, out_spatial, kernel, strides)
    total = np.zeros(x.shape[:2] + tuple(out_spatial), wide.dtype)
    powered = np.abs(buf) ** wide.dtype.type(p)
    for tap in np.ndindex(*kernel):
        total += _tap(powered, tap, strides, out_spatial)
    return (total ** wide.dtype.type(1.0 / p)).astype(x.dtype, copy=False)


def lp_pool_gradient(x, y, dy, kernel, strides, pads, p, out_spatial):
    """dX: each window adds dy * x * |x|^(p - 2) / y^(p - 1) to its inputs (0 where x
    or the window's norm is 0)."""
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    buf, inside = _placed(wide, pads, out_spatial, kernel, strides)
    grad = np.zeros_like(buf)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(y != 0, dy / np.abs(y).astype(wide.dtype) ** wide.dtype.type(p - 1), 0).astype(wide.dtype)
        factor = np.where(buf != 0, buf * np.abs(buf) ** wide.dtype.type(p - 2), 0).astype(wide.dtype)
    for tap in np.ndindex(*kernel):
        _tap(grad, tap, strides, out_spatial)[...] += _tap(factor, tap, strides, out_spatial) * scale
    dx = np.zeros(x.shape, wide.dtype)
    dx[(slice(None), slice(None)) + tuple(slice(0, s.stop - s.start) for s in inside)] = \
        grad[(slice(None), slice(None)) + inside]
    return dx.astype(x.dtype, copy=False)
