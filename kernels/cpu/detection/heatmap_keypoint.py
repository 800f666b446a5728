"""HeatmapMaxKeypoint: each keypoint heatmap's maximum, refined to sub-pixel precision by
one Newton step on the quadratic fitted to its 3x3 neighbourhood (mirrored at the border),
mapped into its box. Vectorised over boxes and keypoints; float32 as Caffe2."""
import numpy as np

F32 = np.float32


def heatmap_max_keypoint(maps, boxes, output_softmax):
    """maps [N, K, S, S], boxes [N, >= 4] = x0, y0, x1, y1, ... -> [N, 4, K] rows x, y, score, prob
    (prob: the softmax over the heatmap at the maximum, 0 without softmax)."""
    n, k, s, _ = maps.shape
    flat = maps.reshape(n, k, s * s).astype(F32)
    best = flat.argmax(axis=2)                                       # first maximum, row-major
    max_y, max_x = best // s, best % s
    max_score = np.take_along_axis(flat, best[..., None], axis=2)[..., 0]
    if output_softmax:
        shifted = np.exp(flat - flat.max(axis=2, keepdims=True))
        prob = (np.take_along_axis(shifted, best[..., None], axis=2)[..., 0] / shifted.sum(axis=2)).astype(F32)
    else:
        prob = np.zeros_like(max_score)                             # Caffe2 leaves it 0
    offs = np.arange(3) - 1

    def mirror(i):
        return i - 2 * (i >= s) + 2 * (i < 0)

    ys = mirror(max_y[..., None] + offs)                            # [N, K, 3]
    xs = mirror(max_x[..., None] + offs)
    f = np.take_along_axis(flat, (ys[..., :, None] * s + xs[..., None, :]).reshape(n, k, 9), axis=2)
    f = f.reshape(n, k, 3, 3)                                       # f[..., y, x]
    half, quarter = F32(2), F32(4)
    b0 = -(f[..., 1, 2] - f[..., 1, 0]) / half
    b1 = -(f[..., 2, 1] - f[..., 0, 1]) / half
    a00 = f[..., 1, 0] - F32(2) * f[..., 1, 1] + f[..., 1, 2]
    a01 = (f[..., 2, 2] - f[..., 2, 0] - f[..., 0, 2] + f[..., 0, 0]) / quarter
    a11 = f[..., 0, 1] - F32(2) * f[..., 1, 1] + f[..., 2, 1]
    div = a11 * a00 - a01 * a01
    flat_fit = np.abs(div) < F32(1e-4)
    safe = np.where(flat_fit, F32(1), div)
    dy = np.where(flat_fit, F32(0), (b1 * a00 - b0 * a01) / safe)
    dx = np.where(flat_fit, F32(0), (b0 * a11 - b1 * a01) / safe)
    big = np.maximum(np.abs(dx), np.abs(dy))
    shrink = np.where(big > F32(1.5), F32(1.5) / np.where(big > 0, big, F32(1)), F32(1))
    dx, dy = dx * shrink, dy * shrink
    score = f[..., 1, 1] - (b0 * dx + b1 * dy) + F32(0.5) * (dx * dx * a00 + F32(2) * dx * dy * a01
                                                              + dy * dy * a11)
    score = np.where(flat_fit, max_score, score)
    b = boxes.astype(F32)
    x_len = np.maximum(b[:, 2] - b[:, 0], F32(1))[:, None]
    y_len = np.maximum(b[:, 3] - b[:, 1], F32(1))[:, None]
    x = b[:, :1] + (max_x + dx + F32(0.5)) * x_len / F32(s)
    y = b[:, 1:2] + (max_y + dy + F32(0.5)) * y_len / F32(s)
    return np.stack([x, y, score, prob], axis=1).astype(F32)
