"""Clamping activations (Hardtanh, ReluN) and their gradients, in NumPy."""
import numpy as np


def clamp(x, low, high):
    """x limited to [low, high], in x's dtype (Caffe2 clamps to min first, then max)."""
    return np.minimum(np.maximum(x, x.dtype.type(low)), x.dtype.type(high))


def clamp_grad(y, dy, low, high):
    """dY where the output lies strictly inside (low, high), else 0: the clamp's
    derivative read from its output."""
    inside = (y > low) & (y < high)
    return np.where(inside, dy, dy.dtype.type(0))
