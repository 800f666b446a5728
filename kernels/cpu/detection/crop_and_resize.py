"""CropAndResize (TensorFlow's crop_and_resize in NCHW): every box [batch, x1, y1, x2, y2]
(coordinates normalised to [0, 1]) resampled to crop_h x crop_w, bilinearly or from the
nearest pixel; samples outside the image take extrapolation_value. Vectorised over all
boxes; the sample coordinates are computed in float32."""
import numpy as np

F32 = np.float32
BILINEAR, NEAREST = 0, 1


def _coords(lo, hi, in_len, out_len):
    """[R, out_len] source coordinates of one axis."""
    if out_len > 1:
        step = (hi - lo) * F32(in_len - 1) / F32(out_len - 1)
        return lo[:, None] * F32(in_len - 1) + np.arange(out_len, dtype=F32)[None, :] * step[:, None]
    return np.repeat((F32(0.5) * (lo + hi) * F32(in_len - 1))[:, None], out_len, axis=1)


def sample_plan(boxes, h, w, crop_h, crop_w, method):
    """Per box and output pixel: 4 (bilinear) or 1 (nearest) flat source positions and weights
    [R, crop_h, crop_w, taps], and the mask of pixels inside the image."""
    b = np.asarray(boxes, F32)
    ys = _coords(b[:, 2], b[:, 4], h, crop_h)[:, :, None]
    xs = _coords(b[:, 1], b[:, 3], w, crop_w)[:, None, :]
    ys, xs = np.broadcast_arrays(ys, xs)
    inside = (ys >= 0) & (ys <= h - 1) & (xs >= 0) & (xs <= w - 1)
    y = np.clip(np.where(inside, ys, 0), 0, h - 1)
    x = np.clip(np.where(inside, xs, 0), 0, w - 1)
    if method == NEAREST:
        # half away from zero; coordinates are non-negative here
        yi = np.minimum(np.floor(y + F32(0.5)), h - 1).astype(np.int64)
        xi = np.minimum(np.floor(x + F32(0.5)), w - 1).astype(np.int64)
        return (yi * w + xi)[..., None], np.ones(yi.shape + (1,), F32), inside
    top, left = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    bottom, right = np.ceil(y).astype(np.int64), np.ceil(x).astype(np.int64)
    dy, dx = y - top.astype(F32), x - left.astype(F32)
    pos = np.stack([top * w + left, top * w + right, bottom * w + left, bottom * w + right], axis=-1)
    wts = np.stack([(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx], axis=-1)
    return pos, wts, inside


def crop_and_resize(image, boxes, batch, keep, crop_h, crop_w, method, extrapolation):
    """image [N, C, H, W] -> [R, C, crop_h, crop_w]; boxes whose batch index is not kept stay 0."""
    n, c, h, w = image.shape
    out = np.zeros((boxes.shape[0], c, crop_h, crop_w), F32)
    if not keep.any():
        return out
    pos, wts, inside = sample_plan(boxes[keep], h, w, crop_h, crop_w, method)
    flat = image.reshape(n, c, h * w)[batch[keep]]                        # [R', C, HW]
    rows = np.arange(flat.shape[0])[:, None, None, None]
    vals = flat[rows, :, pos]                                             # [R', ch, cw, taps, C]
    y = (vals * wts[..., None]).sum(axis=3).transpose(0, 3, 1, 2)
    out[keep] = np.where(inside[:, None], y, F32(extrapolation))
    return out


def crop_and_resize_gradient(dy, image_shape, boxes, batch, keep, method):
    """dY [R, C, crop_h, crop_w] spread back onto the image [N, C, H, W]."""
    n, c, h, w = image_shape
    dx = np.zeros((n, c, h * w), np.float64)
    if not keep.any():
        return dx.reshape(image_shape).astype(F32)
    crop_h, crop_w = dy.shape[2], dy.shape[3]
    pos, wts, inside = sample_plan(boxes[keep], h, w, crop_h, crop_w, method)
    d = dy[keep].astype(np.float64).transpose(0, 2, 3, 1)                # [R', ch, cw, C]
    contrib = d[..., None, :] * (wts * inside[..., None])[..., None]      # [R', ch, cw, taps, C]
    flat_pos = (batch[keep][:, None, None, None] * (h * w) + pos)
    for ch in range(c):
        dx[:, ch] += np.bincount(flat_pos.reshape(-1), contrib[..., ch].reshape(-1),
                                 minlength=n * h * w).reshape(n, h * w)
    return dx.reshape(image_shape).astype(F32)
