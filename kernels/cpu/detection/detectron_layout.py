"""Detectron's data-movement ops and their gradients: BatchPermutation, SampleAs,
SpatialNarrowAs, UpsampleNearest, AffineChannel. Each is one or two NumPy passes;
callers check shapes and indices first."""
import numpy as np

F32 = np.float32


def batch_permutation(x, indices):
    """Y[i] = X[indices[i]]."""
    return np.ascontiguousarray(x[indices])


def batch_permutation_gradient(indices, dy):
    """dX[indices[i]] += dY[i] (for a permutation, as the op requires, a plain
    scatter; a repeated index adds up, which is the gradient of the gather)."""
    dx = np.zeros(dy.shape, dy.dtype)
    np.add.at(dx, indices, dy)
    return dx


def sample_as(x, labels):
    """The rows of X whose label is > 0, in order."""
    return np.ascontiguousarray(x[labels > 0])


def sample_as_gradient(x_shape, labels, dy, dtype):
    dx = np.zeros(x_shape, dtype)
    dx[labels > 0] = dy
    return dx


def spatial_narrow_as(a, height, width):
    """A's top-left height x width window of every (n, c) plane."""
    return np.ascontiguousarray(a[:, :, :height, :width])


def spatial_narrow_as_gradient(a_shape, dc, dtype):
    da = np.zeros(a_shape, dtype)
    da[:, :, :dc.shape[2], :dc.shape[3]] = dc
    return da


def upsample_nearest(x, scale):
    """Each of X's last two dims repeated `scale` times."""
    return np.repeat(np.repeat(x, scale, axis=-2), scale, axis=-1)


def upsample_nearest_gradient(dy, scale):
    """dX: the sum of each scale x scale block of dY."""
    lead, h, w = dy.shape[:-2], dy.shape[-2] // scale, dy.shape[-1] // scale
    blocks = dy.reshape(lead + (h, scale, w, scale))
    return blocks.sum(axis=(-3, -1), dtype=np.float64).astype(dy.dtype)


def _channel_view(shape, nhwc):
    """Shape that broadcasts a per-channel [C] vector against an NCHW / NHWC tensor."""
    if nhwc:
        return (shape[-1],)
    return (shape[1],) + (1,) * (len(shape) - 2)


def affine_channel(x, scale, bias, nhwc):
    view = _channel_view(x.shape, nhwc)
    return (x * scale.reshape(view) + bias.reshape(view)).astype(F32)


def affine_channel_gradient(dy, x, scale, nhwc):
    """(dX, dscale, dbias); dscale and dbias only with x (is_learnable)."""
    view = _channel_view(dy.shape, nhwc)
    dx = (dy * scale.reshape(view)).astype(F32)
    if x is None:
        return dx, None, None
    axes = tuple(range(dy.ndim - 1)) if nhwc else (0,) + tuple(range(2, dy.ndim))
    dscale = np.sum(dy * x, axis=axes, dtype=np.float64).astype(F32)
    dbias = np.sum(dy, axis=axes, dtype=np.float64).astype(F32)
    return dx, dscale, dbias
