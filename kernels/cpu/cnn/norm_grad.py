"""Backward passes of InstanceNorm and LRN (NCHW arrays; callers move NHWC's channel
axis to 1). Both compute in float64 for float64 input and float32 otherwise, and
return arrays of the input's dtype.

Public:
    instance_norm_gradient(x, scale, dy, epsilon, mean=None, inv_std=None) -> (dx, dscale, dbias)
        x, dy (N, C, *S); scale (C,); mean, inv_std (N, C) from the forward, or
        recomputed from x when None (inv_std from the given mean, as Caffe2 does).
    lrn_gradient(x, y, dy, size, alpha, beta, bias) -> dx
        x, y, dy (N, C, *S): y the forward output; the scale is recomputed from x.
"""
import math

import numpy as np


def _work_dtype(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def instance_norm_gradient(x, scale, dy, epsilon, mean=None, inv_std=None):
    n, c = x.shape[:2]
    spatial = math.prod(x.shape[2:])
    wt = _work_dtype(x)
    xs = x.reshape(n, c, spatial).astype(wt, copy=False)
    g = dy.reshape(n, c, spatial).astype(wt, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):   # no spatial values: NaN stats, as the forward
        mu = xs.mean(axis=2) if mean is None else np.asarray(mean, wt).reshape(n, c)
        centered = xs - mu[:, :, None]
        if inv_std is None:
            inv_std = 1.0 / np.sqrt(np.square(centered).mean(axis=2) + epsilon)
        rstd = np.asarray(inv_std, wt).reshape(n, c)[:, :, None]
        dbias = g.sum(axis=(0, 2))
        dscale = (centered * rstd * g).sum(axis=(0, 2))
        # d/dx of s * (x - mu) * rstd with mu and rstd functions of x: with
        # t = -rstd^3 * mean(centered * dy) and c = t * centered + rstd * dy,
        # dx = s * (c - mean(c)) (mean over the spatial positions)
        t = -rstd ** 3 * (centered * g).mean(axis=2, keepdims=True)
        inner = t * centered + rstd * g
        if spatial:
            inner -= inner.mean(axis=2, keepdims=True)
        dx = inner * np.asarray(scale, wt).reshape(1, c, 1)
    return dx.reshape(x.shape).astype(x.dtype, copy=False), dscale.astype(x.dtype), dbias.astype(x.dtype)


def _channel_window_sums(v, before, after):
    """out[:, c] = sum of v[:, c - before : c + after + 1] (channels outside [0, C) are zero)."""
    c = v.shape[1]
    csum = np.zeros((v.shape[0], c + 1) + v.shape[2:], v.dtype)
    np.cumsum(v, axis=1, out=csum[:, 1:])
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    return csum[:, hi] - csum[:, lo]


def lrn_gradient(x, y, dy, size, alpha, beta, bias):
    wt = _work_dtype(x)
    xw, yw, gw = (a.astype(wt, copy=False) for a in (x, y, dy))
    before, after = (size - 1) // 2, size // 2          # the forward's window around each channel
    scale = bias + (alpha / size) * _channel_window_sums(np.square(xw), before, after)
    # y[c] = x[c] * scale[c]^-beta and scale[c] sums x^2 over c's window, so x[c] reaches
    # the channels whose windows hold c: the window mirrored (after before, before after)
    ratio = gw * yw / scale
    dx = gw * np.power(scale, -beta) - (2.0 * alpha * beta / size) * xw * _channel_window_sums(ratio, after, before)
    return dx.astype(x.dtype, copy=False)
