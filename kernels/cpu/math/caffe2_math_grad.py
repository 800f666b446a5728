"""Gradients of Caffe2's Max / Min, PRelu and ElementwiseLinear (Caffe2's
MaxGradient, MinGradient, PReluGradient, ElementwiseLinearGradient).

Public:
    select_grad(y, dy, xs) -> list of dx_i
        dx_i = dy where x_i equals y, else 0: every input tied with the result gets
        the whole gradient (Caffe2's SelectGradientOpBase)
    prelu_grad(dy, x, slope, channel_axis) -> (dx, dslope)
        dx = dy where x > 0, else slope * dy; dslope = sum of dy * x where x <= 0,
        per channel or over everything for a shared slope
    elementwise_linear_grad(dy, x, w, axis) -> (dx, dw, db)
        x viewed as (prod(dims[:axis]), D): dx = dy * w, dw = column sums of dy * x,
        db = column sums of dy

Sums are taken in float64 and returned in the input's dtype.
"""
import math

import numpy as np


def select_grad(y, dy, xs):
    zero = dy.dtype.type(0)
    return [np.where(x == y, dy, zero) for x in xs]


def _channel_view(slope, ndim, channel_axis):
    if slope.size == 1:
        return slope.reshape(())
    shape = [1] * ndim
    shape[channel_axis] = slope.size
    return slope.reshape(shape)


def prelu_grad(dy, x, slope, channel_axis):
    positive = x > 0
    w = _channel_view(slope, x.ndim, channel_axis)
    dx = np.where(positive, dy, dy * w).astype(x.dtype, copy=False)
    contribution = np.where(positive, 0.0, dy.astype(np.float64) * x)
    if slope.size == 1:
        dslope = np.asarray(contribution.sum()).reshape(slope.shape)
    else:
        axes = tuple(a for a in range(x.ndim) if a != channel_axis)
        dslope = contribution.sum(axis=axes).reshape(slope.shape)
    return dx, dslope.astype(slope.dtype)


def elementwise_linear_grad(dy, x, w, axis):
    rows, cols = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    dy2, x2 = dy.reshape(rows, cols), x.reshape(rows, cols)
    dx = (dy2 * w).astype(x.dtype, copy=False).reshape(x.shape)
    dw = np.einsum("ij,ij->j", dy2, x2, dtype=np.float64).astype(w.dtype)
    db = dy2.sum(axis=0, dtype=np.float64).astype(w.dtype)
    return dx, dw, db
