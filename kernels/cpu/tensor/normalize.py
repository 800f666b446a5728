"""Normalisations over the trailing part of a tensor or along one axis: layer norm
(statistics per row of an (M, N) view) and L2 / L1 normalisation, with gradients.
float16 input is computed in float32 and returned as float16. Callers check shapes."""
import numpy as np

L2_EPS = 1e-12     # Caffe2's Normalize: the norm is at least this


def _wide(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x


def layer_norm(x2, epsilon, gamma=None, beta=None):
    """(y, mean, sigma) for the (M, N) matrix x2: each row normalised by its mean and
    sigma = sqrt(population variance + epsilon), then y * gamma + beta (N values each)
    when given. mean and sigma are (M, 1)."""
    xs = _wide(x2)
    mean = xs.mean(axis=1, keepdims=True) if xs.shape[1] else np.zeros((xs.shape[0], 1), xs.dtype)
    centered = xs - mean
    var = (centered * centered).mean(axis=1, keepdims=True) if xs.shape[1] else np.zeros_like(mean)
    sigma = np.sqrt(var + xs.dtype.type(epsilon))
    y = centered / sigma
    if gamma is not None:
        y = y * _wide(gamma).reshape(1, -1) + _wide(beta).reshape(1, -1)
    return (y.astype(x2.dtype, copy=False), mean.astype(x2.dtype, copy=False),
            sigma.astype(x2.dtype, copy=False))


def layer_norm_gradient(dy2, x2, mean, sigma, gamma=None):
    """(dx, dgamma, dbeta) of layer_norm over (M, N) rows; dgamma / dbeta are None
    without gamma."""
    dys, xs = _wide(dy2), _wide(x2)
    mean, sigma = _wide(mean).reshape(-1, 1), _wide(sigma).reshape(-1, 1)
    xhat = (xs - mean) / sigma
    g = dys * _wide(gamma).reshape(1, -1) if gamma is not None else dys
    n = max(xs.shape[1], 1)
    dx = (g - g.sum(axis=1, keepdims=True) / n - xhat * (g * xhat).sum(axis=1, keepdims=True) / n) / sigma
    dgamma = dbeta = None
    if gamma is not None:
        dgamma = (dys * xhat).sum(axis=0).astype(gamma.dtype).reshape(gamma.shape)
        dbeta = dys.sum(axis=0).astype(gamma.dtype).reshape(gamma.shape)
    return dx.astype(x2.dtype, copy=False), dgamma, dbeta


def l2_normalize(x, axis):
    """x / max(||x||_2, 1e-12) along axis."""
    xs = _wide(x)
    norm = np.maximum(np.sqrt((xs * xs).sum(axis=axis, keepdims=True)), xs.dtype.type(L2_EPS))
    return (xs / norm).astype(x.dtype, copy=False)


def l2_normalize_gradient(x, dy, axis):
    """dX of l2_normalize: dy / n - x * (x . dy) / n^3 with n = max(||x||, 1e-12)."""
    xs, dys = _wide(x), _wide(dy)
    norm = np.maximum(np.sqrt((xs * xs).sum(axis=axis, keepdims=True)), xs.dtype.type(L2_EPS))
    dot = (xs * dys).sum(axis=axis, keepdims=True)
    return (dys / norm - xs * (dot / norm ** 3)).astype(x.dtype, copy=False)


def l1_normalize(x, axis):
    """x / sum(|x|) along axis; rows whose L1 norm is 0 (all zeros) stay as they are."""
    xs = _wide(x)
    norm = np.abs(xs).sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, xs, xs / np.where(norm == 0, 1, norm))
    return y.astype(x.dtype, copy=False)


def channel_affine_nchw(x, mean, std):
    """(x - mean[c]) / std[c] for NCHW x (Caffe2's NormalizePlanarYUV)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xs = _wide(x)
    return ((xs - _wide(mean).reshape(shape)) / _wide(std).reshape(shape)).astype(x.dtype, copy=False)
