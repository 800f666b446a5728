"""Gradients of Clip, Mean and LpNorm (Caffe2's ClipGradient, MeanGradient,
LpNormGradient).

Public:
    clip_grad(y, dy, lo, hi) -> dx        dy where lo < y < hi (strictly), else 0
    mean_grad(dy, n) -> dx                dy / n (each of the n inputs gets it)
    lp_norm_grad(x, dnorm, p, average) -> dx
        p=1: sign(x) * dnorm (0 where |x| <= 1e-12); p=2: 2 * x * dnorm;
        divided by x.size with average
"""
import numpy as np

_SIGN_DEAD_ZONE = 1e-12          # Caffe2's kEps: values this close to 0 get no L1 gradient


def clip_grad(y, dy, lo, hi):
    lo, hi = np.float64(lo), np.float64(hi)      # float32's bounds overflow float16
    inside = (y > lo) & (y < hi)
    return np.where(inside, dy, dy.dtype.type(0)).reshape(y.shape)


def mean_grad(dy, n):
    return (dy * dy.dtype.type(1.0 / n)).astype(dy.dtype, copy=False)


def lp_norm_grad(x, dnorm, p, average):
    scale = float(dnorm) / (x.size if average and x.size else 1.0)
    if p == 1:
        sign = np.where(x > _SIGN_DEAD_ZONE, 1.0, np.where(x < -_SIGN_DEAD_ZONE, -1.0, 0.0))
        return (sign * scale).astype(x.dtype)
    return (x.astype(np.float64) * (2.0 * scale)).astype(x.dtype)
