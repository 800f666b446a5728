"""NumPy-style tiling and broadcasting expansion (NumpyTile, Expand) and Expand's
gradient (a sum over the broadcast axes)."""
import numpy as np


def expanded_shape(x_shape, shape):
    """Broadcast of x_shape with |shape| (Caffe2 treats -1 as 'keep X's size'), or
    None when the two do not broadcast."""
    try:
        return np.broadcast_shapes(tuple(x_shape), tuple(int(abs(s)) for s in shape))
    except ValueError:
        return None


def expand(x, out_shape):
    return np.array(np.broadcast_to(x, out_shape))


def expand_grad(dy, x_shape):
    """dY summed back to X's shape: over dY's leading axes, then over X's size-1 axes."""
    lead = dy.ndim - len(x_shape)
    dx = dy.sum(axis=tuple(range(lead))) if lead > 0 else dy
    ones = tuple(i for i, d in enumerate(x_shape) if d == 1 and dx.shape[i] != 1)
    if ones:
        dx = dx.sum(axis=ones, keepdims=True)
    return dx.astype(dy.dtype, copy=False).reshape(x_shape)
