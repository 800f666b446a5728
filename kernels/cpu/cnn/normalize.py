"""Normalisations over the trailing part of a tensor or along one axis: layer norm
(statistics per row of an (M, N) view) and L2 / L1 normalisation, with gradients.
float16 input is computed in float32 and returned as float16. Callers check shapes.

Layer norm of float32 / float64 rows is a compiled loop (rows over the team): each
row's mean and variance while the row is in cache, then one pass writing the
normalised row; NumPy needs five passes and three temporaries for the same."""
import numpy as np

from ..runtime.jit import compiled, prange, team, team_blocks

L2_EPS = 1e-12     # Caffe2's Normalize: the norm is at least this


def _wide(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x


@compiled(parallel=True, fastmath=("contract", "reassoc"))     # reassoc: vectorised row sums
def _layer_norm_rows(x2, gamma, beta, affine, consts, y, mean, sigma, blocks):
    """y[i] = (x2[i] - mean[i]) / sigma[i] (* gamma + beta), sigma = sqrt(var + eps),
    two passes for the statistics (the variance from deviations, which stays accurate),
    summed in x2's type, so float32 sums run 8 lanes wide. consts = [0, N (1 when 0),
    1, epsilon] in that type: a Python int or float in the arithmetic would widen every
    operation to float64 (measured 1.8x slower). x2, y (M, N) C-contiguous; mean,
    sigma (M,)."""
    m, n = x2.shape
    zero, count, one, epsilon = consts[0], consts[1], consts[2], consts[3]
    for t in prange(blocks):
        for i in range(m * t // blocks, m * (t + 1) // blocks):
            row = x2[i]
            out = y[i]
            total = zero
            for j in range(n):
                total += row[j]
            mu = total / count
            square = zero
            for j in range(n):
                d = row[j] - mu
                square += d * d
            s = np.sqrt(square / count + epsilon)
            mean[i] = mu
            sigma[i] = s
            inv = one / s
            if affine:
                for j in range(n):
                    out[j] = (row[j] - mu) * inv * gamma[j] + beta[j]
            else:
                for j in range(n):
                    out[j] = (row[j] - mu) * inv


@_layer_norm_rows.numpy_twin
def _layer_norm_rows_numpy(x2, gamma, beta, affine, consts, y, mean, sigma, blocks):
    y_, mean_, sigma_ = _layer_norm_numpy(x2, consts[3], gamma if affine else None, beta if affine else None)
    y[...] = y_
    mean[:] = mean_.reshape(-1)
    sigma[:] = sigma_.reshape(-1)


def layer_norm(x2, epsilon, gamma=None, beta=None):
    """(y, mean, sigma) for the (M, N) matrix x2: each row normalised by its mean and
    sigma = sqrt(population variance + epsilon), then y * gamma + beta (N values each)
    when given. mean and sigma are (M, 1)."""
    if x2.dtype not in (np.float32, np.float64):
        return _layer_norm_numpy(x2, epsilon, gamma, beta)
    m, n = x2.shape
    x2 = np.ascontiguousarray(x2)
    y = np.empty_like(x2)
    mean, sigma = np.empty(m, x2.dtype), np.empty(m, x2.dtype)
    affine = gamma is not None
    g = np.ascontiguousarray(gamma.reshape(-1)) if affine else np.empty(0, x2.dtype)
    b = np.ascontiguousarray(beta.reshape(-1)) if affine else np.empty(0, x2.dtype)
    with team():
        consts = np.array([0, max(n, 1), 1, epsilon], x2.dtype)
        _layer_norm_rows(x2, g, b, affine, consts, y, mean, sigma, team_blocks(m, 3 * n))
    return y, mean.reshape(m, 1), sigma.reshape(m, 1)


def _layer_norm_numpy(x2, epsilon, gamma=None, beta=None):
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
