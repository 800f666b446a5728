"""ONNX Resize/Upsample as one interpolation matrix per resized axis.

For each axis, every output position maps to a coordinate in the input
(coordinate_transformation_mode); nearest, linear and cubic sampling (with
optional antialiasing when shrinking) become a (out, in) weight matrix, applied
with one matmul along that axis. tf_crop_and_resize marks positions outside
the input, which take extrapolation_value."""
import numpy as np


def source_coords(mode, out_len, in_len, scale, roi_start=0.0, roi_end=1.0):
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        offset = in_len / 2.0 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        # the resized length is in_len * scale, not rounded (matters when downscaling)
        span = in_len * scale - 1
        return x * (in_len - 1) / span if out_len > 1 and span > 0 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        if out_len > 1:
            return roi_start * (in_len - 1) + x * (roi_end - roi_start) * (in_len - 1) / (out_len - 1)
        return np.full(out_len, 0.5 * (roi_start + roi_end) * (in_len - 1))
    raise ValueError("unknown coordinate_transformation_mode '%s'" % mode)


def _nearest_index(coords, nearest_mode):
    if nearest_mode == "floor":
        return np.floor(coords)
    if nearest_mode == "ceil":
        return np.ceil(coords)
    frac = coords - np.floor(coords)
    if nearest_mode == "round_prefer_ceil":
        return np.where(frac == 0.5, np.ceil(coords), np.round(coords))
    if nearest_mode == "round_prefer_floor":
        return np.where(frac == 0.5, np.floor(coords), np.round(coords))
    raise ValueError("unknown nearest_mode '%s'" % nearest_mode)


def _cubic(t, a):
    t = np.abs(t)
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def weight_matrix(coords, in_len, mode, nearest_mode="round_prefer_floor", cubic_a=-0.75,
                  exclude_outside=False, antialias_scale=None):
    """(out, in) weights sampling the input at coords."""
    out_len = coords.shape[0]
    w = np.zeros((out_len, in_len), dtype=np.float64)
    rows = np.arange(out_len)
    if mode == "nearest":
        idx = np.clip(_nearest_index(coords, nearest_mode).astype(np.int64), 0, in_len - 1)
        w[rows, idx] = 1.0
        return w
    radius = 1 if mode == "linear" else 2
    kernel = (lambda t: np.maximum(0.0, 1.0 - np.abs(t))) if mode == "linear" else (lambda t: _cubic(t, cubic_a))
    if antialias_scale is not None and antialias_scale < 1:
        # The kernel is stretched by 1/scale; taps sit at whole offsets from
        # floor(coord), weights are normalised over all taps and taps beyond the
        # edges read the edge value.
        s = antialias_scale
        first = int(np.floor(-radius / s)) + 1
        taps = np.arange(first, first + 2 * radius - 2 * first)
        base = np.floor(coords).astype(np.int64)
        points = base[:, None] + taps[None, :]
        weights = kernel((points - coords[:, None]) * s)
        weights /= weights.sum(axis=1, keepdims=True)
        np.add.at(w, (np.repeat(rows, points.shape[1]), np.clip(points, 0, in_len - 1).reshape(-1)),
                  weights.reshape(-1))
        return w
    if mode == "linear":
        coords = np.clip(coords, 0, in_len - 1)
    base = np.floor(coords).astype(np.int64)
    points = base[:, None] + np.arange(-radius + 1, radius + 1)[None, :]
    weights = kernel(coords[:, None] - points)
    inside = (points >= 0) & (points < in_len)
    if exclude_outside:
        weights = np.where(inside, weights, 0.0)
        weights /= weights.sum(axis=1, keepdims=True)
    np.add.at(w, (np.repeat(rows, points.shape[1]), np.clip(points, 0, in_len - 1).reshape(-1)),
              weights.reshape(-1))
    return w


def resize(x, out_shape, scales, mode="nearest", coord_mode="half_pixel", nearest_mode="round_prefer_floor",
           cubic_a=-0.75, exclude_outside=False, extrapolation_value=0.0, roi=None, antialias=False):
    """x resized to out_shape; scales[i] is the factor used in the coordinate maps."""
    out = x.astype(np.float64) if mode != "nearest" else x
    outside = None
    for axis in range(x.ndim):
        in_len, out_len = x.shape[axis], out_shape[axis]
        if in_len == out_len and scales[axis] == 1.0 and coord_mode != "tf_crop_and_resize":
            continue
        start, end = (roi[axis], roi[axis + x.ndim]) if roi is not None else (0.0, 1.0)
        coords = source_coords(coord_mode, out_len, in_len, scales[axis], start, end)
        if coord_mode == "tf_crop_and_resize":
            off = (coords < 0) | (coords > in_len - 1)
            shape = [1] * x.ndim
            shape[axis] = out_len
            off = off.reshape(shape)
            outside = off if outside is None else (outside | off)
        w = weight_matrix(coords, in_len, mode, nearest_mode, cubic_a, exclude_outside,
                          scales[axis] if antialias else None)
        if mode == "nearest":
            out = np.take(out, w.argmax(axis=1), axis=axis)
        else:
            out = np.moveaxis(np.tensordot(w, np.moveaxis(out, axis, 0), axes=(1, 0)), 0, axis)
    if outside is not None:
        out = np.where(np.broadcast_to(outside, out.shape), extrapolation_value, out)
    return np.ascontiguousarray(out).astype(x.dtype, copy=False)
