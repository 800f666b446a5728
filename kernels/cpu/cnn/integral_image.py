"""Caffe2's IntegralImage and IntegralImageGradient as cumulative sums over H and W."""
import numpy as np


def integral_image(x):
    """(N, C, H, W) -> (N, C, H + 1, W + 1): y[h, w] = sum of x[:h, :w]."""
    n, c, h, w = x.shape
    y = np.zeros((n, c, h + 1, w + 1), dtype=np.float64)
    y[:, :, 1:, 1:] = x.astype(np.float64).cumsum(axis=2).cumsum(axis=3)
    return y.astype(x.dtype)


def integral_image_gradient(dy, h, w):
    """Caffe2's rule: dX[h, w] = sum of dY[:h + 1, :w + 1] (prefix sums of dY's first H rows and
    W columns; what Caffe2 computes, not the adjoint of integral_image)."""
    d = dy[:, :, :h, :w].astype(np.float64)
    return d.cumsum(axis=3).cumsum(axis=2).astype(dy.dtype)
