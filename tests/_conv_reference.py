"""Float64 2-D convolution written out in NumPy (group 1, zero padding): the reference
the convolution kernels' tests compare against, with their shared shape and data helpers."""
import numpy as np


def reference(x, w, b, strides, pads, dilations, residual=None, relu=False):
    """float64: zero-padded input, one strided window slice per kernel tap."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    for a in range(kh):
        for bb in range(kw):
            window = xp[:, :, a * dh:a * dh + (oh - 1) * sh + 1:sh, bb * dw:bb * dw + (ow - 1) * sw + 1:sw]
            y += np.einsum("nchw,mc->nmhw", window, w[:, :, a, bb])
    if b is not None:
        y += b.astype(np.float64).reshape(1, m, 1, 1)
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


def out_shape(x_shape, w_shape, strides, pads, dilations):
    """(N, M, OH, OW) of a 2-D convolution (pads: top, left, bottom, right)."""
    return (x_shape[0], w_shape[0]) + tuple(
        (x_shape[2 + i] + pads[i] + pads[2 + i] - (w_shape[2 + i] - 1) * dilations[i] - 1) // strides[i] + 1
        for i in range(2))


def data(x_shape, w_shape, seed):
    """(x, w, bias) float32 standard normals."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[0]).astype(np.float32))
