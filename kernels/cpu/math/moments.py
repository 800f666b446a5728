"""Mean / variance reductions (Moments, BatchMoments) and their gradients, in NumPy.
Sums run in float64 and are cast back, so float16/float32 inputs keep their accuracy."""
import math

import numpy as np


def moments(x, axes, keepdims):
    """Mean and population variance of x over axes (all axes when None)."""
    x64 = x.astype(np.float64)
    mean = np.mean(x64, axis=axes, keepdims=keepdims)
    var = np.var(x64, axis=axes, keepdims=keepdims)
    return mean.astype(x.dtype), var.astype(x.dtype)


def moments_grad(dmean, dvar, x, mean, axes):
    """dX = (dmean + 2 (X - mean) dvar) / n, n the count reduced over; dmean, dvar and
    mean are broadcast back over the reduced axes."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    n = math.prod(x.shape[i] for i in axes)
    dm, dv, m = (np.reshape(a, kept).astype(np.float64) for a in (dmean, dvar, mean))
    dx = (dm + 2.0 * (x.astype(np.float64) - m) * dv) / max(n, 1)
    return dx.astype(x.dtype)


def batch_moments(x3):
    """x3 is (N, C, S): per channel the mean of X and the mean of X^2."""
    x64 = x3.astype(np.float64)
    return (np.mean(x64, axis=(0, 2)).astype(x3.dtype),
            np.mean(np.square(x64), axis=(0, 2)).astype(x3.dtype))


def batch_moments_grad(dmu, dvar, x3):
    """dX for x3 (N, C, S): (dmu + 2 X dvar) / (N S), per channel."""
    n = x3.shape[0] * x3.shape[2]
    dm = dmu.astype(np.float64).reshape(1, -1, 1)
    dv = dvar.astype(np.float64).reshape(1, -1, 1)
    return ((dm + 2.0 * x3.astype(np.float64) * dv) / max(n, 1)).astype(x3.dtype)
