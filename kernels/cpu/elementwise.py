"""Elementwise arithmetic and activations."""
import numpy as np

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def sigmoid(x):
    # exp of -|x| never overflows, and both branches keep full relative precision
    # (0.5 * tanh(0.5 x) + 0.5 loses it for very negative x).
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def relu(x):
    return np.maximum(x, 0).astype(x.dtype, copy=False)


def softmax_2d(x2):
    """Softmax over the last axis of a 2-D array, max-subtracted."""
    out = x2 - x2.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def softmax(x, axis):
    """Caffe2/ONNX-1 semantics: coerce to 2-D at axis, softmax over the second part."""
    axis = axis % x.ndim if x.ndim else 0
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return softmax_2d(x.reshape(rows, -1)).reshape(x.shape)
