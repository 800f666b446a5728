"""GroupNorm and RMSNorm, forward and backward, vectorised NumPy. Statistics are
accumulated in float64 and results cast back to the input's dtype."""
import numpy as np


def _nchw_view(x, group, nhwc):
    """X as (N, G, D, S): S spatial positions, D channels per group."""
    n = x.shape[0]
    if nhwc:
        c = x.shape[-1]
        return x.reshape(n, -1, group, c // group).transpose(0, 2, 3, 1)
    return x.reshape(n, group, x.shape[1] // group, -1)


def _back(v, shape, nhwc):
    if nhwc:
        v = v.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(v).reshape(shape)


def group_norm(x, gamma, beta, group, eps, nhwc):
    """Returns Y, mean (N, G), inv_std (N, G)."""
    v = _nchw_view(x, group, nhwc).astype(np.float64)
    mu = v.mean(axis=(2, 3), keepdims=True)
    rsig = 1.0 / np.sqrt(v.var(axis=(2, 3), keepdims=True) + eps)
    g = gamma.astype(np.float64).reshape(1, group, -1, 1)
    b = beta.astype(np.float64).reshape(1, group, -1, 1)
    y = (v - mu) * rsig * g + b
    n = x.shape[0]
    return (_back(y, x.shape, nhwc).astype(x.dtype), mu.reshape(n, group).astype(x.dtype),
            rsig.reshape(n, group).astype(x.dtype))


def group_norm_gradient(dy, x, gamma, mu, rsig, group, nhwc):
    """dX, dgamma, dbeta of GroupNorm from the forward's mean and inv_std."""
    n = x.shape[0]
    v = _nchw_view(x, group, nhwc).astype(np.float64)
    d = _nchw_view(dy, group, nhwc).astype(np.float64)
    mu = mu.astype(np.float64).reshape(n, group, 1, 1)
    rsig = rsig.astype(np.float64).reshape(n, group, 1, 1)
    xhat = (v - mu) * rsig
    dgamma = (d * xhat).sum(axis=(0, 3)).reshape(-1)
    dbeta = d.sum(axis=(0, 3)).reshape(-1)
    dxhat = d * gamma.astype(np.float64).reshape(1, group, -1, 1)
    dx = rsig * (dxhat - dxhat.mean(axis=(2, 3), keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=(2, 3), keepdims=True))
    return _back(dx, x.shape, nhwc).astype(x.dtype), dgamma.astype(x.dtype), dbeta.astype(x.dtype)


def rms_norm(x2, gamma, beta, eps):
    """x2 is (M, N); returns Y (M, N) and rrms (M,)."""
    v = x2.astype(np.float64)
    rrms = 1.0 / np.sqrt(np.square(v).mean(axis=1) + eps) if v.shape[1] else np.zeros(v.shape[0])
    y = v * rrms[:, None] * gamma.astype(np.float64) + beta.astype(np.float64)
    return y.astype(x2.dtype), rrms.astype(x2.dtype)


def rms_norm_gradient(dy2, x2, gamma, rrms):
    """dX (M, N), dgamma (N,), dbeta (N,)."""
    v = x2.astype(np.float64)
    d = dy2.astype(np.float64)
    r = rrms.astype(np.float64)[:, None]
    g = d * gamma.astype(np.float64)
    n = max(v.shape[1], 1)
    dx = r * g - v * r ** 3 * (g * v).sum(axis=1, keepdims=True) / n
    dt = x2.dtype
    return dx.astype(dt), (d * v * r).sum(axis=0).astype(dt), d.sum(axis=0).astype(dt)
