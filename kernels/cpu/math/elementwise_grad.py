"""Gradients of the elementwise ops and activations.

Public:
    relu_grad(y, dy), sigmoid_grad(y, dy), tanh_grad(y, dy)    from the forward output
    softmax_grad(y, dy, axis)     y * (dy - sum(dy * y)) per row of the 2-D coercion at axis
    reduce_to_shape(g, shape)     sum g over the axes broadcasting added or stretched to
                                  reach `shape` (NumPy broadcasting, trailing alignment)
    binary_grads(op, dc, a, b, c, b_view_shape=None) -> (da, db)
        Add, Sub, Mul, Div; b_view_shape: how B was viewed in the forward (Caffe2's
        legacy broadcast=1 places B's dims at `axis`); None for NumPy broadcasting
"""
import math

import numpy as np


def relu_grad(y, dy):
    return np.where(y > 0, dy, dy.dtype.type(0))


def sigmoid_grad(y, dy):
    return dy * y * (1 - y)


def tanh_grad(y, dy):
    return dy * (1 - y * y)


def softmax_grad(y, dy, axis):
    axis = axis % y.ndim if y.ndim else 0
    rows, cols = math.prod(y.shape[:axis]), math.prod(y.shape[axis:])
    y2, dy2 = y.reshape(rows, cols), dy.reshape(rows, cols)
    dot = np.einsum("ij,ij->i", dy2, y2, dtype=np.float64).astype(y.dtype)
    return (y2 * (dy2 - dot[:, None])).reshape(y.shape)


def reduce_to_shape(g, shape):
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes, dtype=np.float64 if g.dtype == np.float64 else None).reshape(shape).astype(g.dtype,
                                                                                                       copy=False)


def binary_grads(op, dc, a, b, c=None, b_view_shape=None):
    bv = b if b_view_shape is None else b.reshape(b_view_shape)
    if op == "Add":
        da, dbv = dc, dc
    elif op == "Sub":
        da, dbv = dc, -dc
    elif op == "Mul":
        da, dbv = dc * bv, dc * a
    elif op == "Div":
        da = dc / bv
        dbv = -dc * c / bv
    else:
        raise ValueError("no gradient rule for %s" % op)
    # outputs may share dC's memory (Add's dA is dC): kernels never write into inputs
    da = reduce_to_shape(np.asarray(da, dtype=dc.dtype), a.shape)
    dbv = reduce_to_shape(np.asarray(dbv, dtype=dc.dtype), bv.shape)
    return da, dbv.reshape(b.shape)
