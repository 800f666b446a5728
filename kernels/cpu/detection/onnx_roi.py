"""RoiAlign: average (or max) of bilinear samples on a regular grid inside
each bin of each region of interest."""
import numpy as np


def _bilinear_taps(coord, size):
    """(low index, high index, low weight, high weight, valid) per sample coordinate."""
    valid = (coord >= -1.0) & (coord <= size)
    c = np.maximum(coord, 0.0)
    low = np.floor(c).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    c = np.where(at_end, low.astype(np.float64), c)
    frac = c - low
    return low, high, 1 - frac, frac, valid


def roi_align(x, rois, batch_indices, out_h, out_w, sampling_ratio, spatial_scale, mode, half_pixel):
    n_rois = rois.shape[0]
    c, h, w = x.shape[1:]
    out = np.zeros((n_rois, c, out_h, out_w), np.float64)
    offset = 0.5 if half_pixel else 0.0
    for r in range(n_rois):
        x1, y1, x2, y2 = (rois[r].astype(np.float64) * spatial_scale) - offset
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half_pixel:   # the older convention forces at least one pixel
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_h / out_h))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_w / out_w))
        gh, gw = max(gh, 1), max(gw, 1)
        ys = y1 + (np.arange(out_h)[:, None] * bin_h + (np.arange(gh)[None, :] + 0.5) * bin_h / gh)  # (out_h, gh)
        xs = x1 + (np.arange(out_w)[:, None] * bin_w + (np.arange(gw)[None, :] + 0.5) * bin_w / gw)  # (out_w, gw)
        yl, yh, wyl, wyh, vy = _bilinear_taps(ys, h)
        xl, xh, wxl, wxh, vx = _bilinear_taps(xs, w)
        img = x[int(batch_indices[r])].astype(np.float64)           # (C, H, W)

        def corner(yi, xi):   # (C, out_h, gh, out_w, gw)
            return img[:, yi[:, :, None, None], xi[None, None, :, :]]
        valid = (vy[:, :, None, None] & vx[None, None, :, :])
        parts = [corner(yl, xl) * (wyl[:, :, None, None] * wxl[None, None, :, :]),
                 corner(yl, xh) * (wyl[:, :, None, None] * wxh[None, None, :, :]),
                 corner(yh, xl) * (wyh[:, :, None, None] * wxl[None, None, :, :]),
                 corner(yh, xh) * (wyh[:, :, None, None] * wxh[None, None, :, :])]
        if mode == "max":
            # onnxruntime's max mode: the largest weighted corner of each sample
            samples = np.where(valid, np.maximum.reduce(parts), 0.0)
            out[r] = samples.max(axis=(2, 4))
        else:
            samples = np.where(valid, sum(parts), 0.0)
            out[r] = samples.mean(axis=(2, 4))
    return out.astype(x.dtype)
