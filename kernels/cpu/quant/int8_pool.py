"""Int8 pooling and the other Int8 image ops on NHWC uint8 (NumPy): QNNPACK's average
pooling (padding counts as the zero point, i.e. 0.0, and every window divides by the
full window size), max pooling over the window's pixels, nearest-neighbour resizing and
Caffe2's integer RoIAlign."""
import numpy as np

from . import requantize as rq


def _windows_sum(centered, kh, kw, sh, sw, pads, oh, ow):
    """int64 (N, OH, OW, C): window sums of `centered` (int64, N H W C) with zero padding."""
    n, h, w, c = centered.shape
    pt, pl = pads[0], pads[1]
    hp = max(h + pt, (oh - 1) * sh + kh)
    wp = max(w + pl, (ow - 1) * sw + kw)
    padded = np.zeros((n, hp, wp, c), np.int64)
    padded[:, pt:pt + h, pl:pl + w] = centered
    acc = np.zeros((n, oh, ow, c), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            acc += padded[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw]
    return acc


def average_pool(x, x_zp, kernel, strides, pads, out_hw, params, y_zp, lo, hi):
    """QNNPACK's q8 average pooling; params = requantize.avgpool_params(...)."""
    acc = _windows_sum(x.astype(np.int64) - x_zp, kernel[0], kernel[1], strides[0], strides[1], pads, *out_hw)
    return rq.avgpool_requantize(acc, params, y_zp, lo, hi)


def global_average_pool(x, x_zp, params, y_zp, lo, hi):
    acc = (x.astype(np.int64) - x_zp).sum(axis=(1, 2), keepdims=True)
    return rq.avgpool_requantize(acc, params, y_zp, lo, hi)


def max_pool(x, kernel, strides, pads, out_hw, lo, hi):
    n, h, w, c = x.shape
    kh, kw = kernel
    sh, sw = strides
    oh, ow = out_hw
    pt, pl = pads[0], pads[1]
    hp = max(h + pt, (oh - 1) * sh + kh)
    wp = max(w + pl, (ow - 1) * sw + kw)
    padded = np.full((n, hp, wp, c), -1, np.int16)          # below every byte: padding never wins
    padded[:, pt:pt + h, pl:pl + w] = x
    best = np.full((n, oh, ow, c), -1, np.int16)
    for ky in range(kh):
        for kx in range(kw):
            np.maximum(best, padded[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw], out=best)
    return np.clip(best, lo, hi).astype(np.uint8)


def resize_nearest(x, height_scale, width_scale):
    """Caffe2's Int8ResizeNearest: out size int(in * scale), source index
    min(int(out / scale), in - 1), in float32."""
    n, h, w, c = x.shape
    oh = int(np.float32(h) * np.float32(height_scale))
    ow = int(np.float32(w) * np.float32(width_scale))
    ys = np.minimum((np.arange(oh, dtype=np.float32) / np.float32(height_scale)).astype(np.int64), h - 1)
    xs = np.minimum((np.arange(ow, dtype=np.float32) / np.float32(width_scale)).astype(np.int64), w - 1)
    return np.ascontiguousarray(x[:, ys][:, :, xs])


def roi_align(x, x_scale, x_zp, rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, y_scale, y_zp):
    """Caffe2's Int8RoIAlign (NHWC): bilinear weights rounded to bytes (x 255), the zero
    point times 255 taken off per sample, a gemmlowp multiplier of x_scale / (y_scale *
    255 * samples) per RoI. rois float32 (R, 4 or 5); batch indices already checked."""
    n, h, w, c = x.shape
    r = rois.shape[0]
    out = np.empty((r, pooled_h, pooled_w, c), np.uint8)
    f32 = np.float32
    for i in range(r):
        row = rois[i]
        batch = int(row[0]) if rois.shape[1] == 5 else 0
        box = row[1:] if rois.shape[1] == 5 else row
        start_w, start_h = f32(box[0]) * f32(spatial_scale), f32(box[1]) * f32(spatial_scale)
        end_w, end_h = f32(box[2]) * f32(spatial_scale), f32(box[3]) * f32(spatial_scale)
        roi_w = max(f32(end_w - start_w), f32(1.0))
        roi_h = max(f32(end_h - start_h), f32(1.0))
        bin_h, bin_w = f32(roi_h / f32(pooled_h)), f32(roi_w / f32(pooled_w))
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(f32(roi_h / f32(pooled_h))))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(f32(roi_w / f32(pooled_w))))
        count = f32(grid_h * grid_w)
        real = float(np.float32(x_scale)) / (float(np.float32(y_scale)) * 255.0 * float(count))
        mult, shift = rq.gemmlowp_multiplier(real)
        image = x[batch].reshape(h * w, c).astype(np.int64)
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                acc = np.zeros(c, np.int64)
                for iy in range(grid_h):
                    yy = f32(start_h + f32(ph) * bin_h) + f32(f32(iy + f32(0.5)) * bin_h / f32(grid_h))
                    for ix in range(grid_w):
                        xx = f32(start_w + f32(pw) * bin_w) + f32(f32(ix + f32(0.5)) * bin_w / f32(grid_w))
                        acc += _bilinear(image, yy, xx, h, w)
                        acc -= x_zp * 255
                acc = ((acc + 2 ** 31) & (2 ** 32 - 1)) - 2 ** 31            # Caffe2's int32 sum
                y = rq.multiply_smaller_than_one(acc, mult, shift) + y_zp
                out[i, ph, pw] = np.clip(y, 0, 255)
    return out


def _bilinear(image, y, x, h, w):
    f32 = np.float32
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0
    y = max(y, f32(0))
    x = max(x, f32(0))
    y_low, x_low = int(y), int(x)
    if y_low >= h - 1:
        y_low = y_high = h - 1
        y = f32(y_low)
    else:
        y_high = y_low + 1
    if x_low >= w - 1:
        x_low = x_high = w - 1
        x = f32(x_low)
    else:
        x_high = x_low + 1
    ly, lx = f32(y - f32(y_low)), f32(x - f32(x_low))
    hy, hx = f32(f32(1.0) - ly), f32(f32(1.0) - lx)
    weights = [int(np.rint(f32(f32(a * b) * f32(255.0)))) for a, b in ((hy, hx), (hy, lx), (ly, hx), (ly, lx))]
    pos = (y_low * w + x_low, y_low * w + x_high, y_high * w + x_low, y_high * w + x_high)
    return sum(wt * image[p] for wt, p in zip(weights, pos))
