"""Elementwise arithmetic and activations."""
import numpy as np

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def sigmoid(x):
    # 0.5 * tanh(0.5 x) + 0.5 is exact in float and never overflows, unlike 1 / (1 + exp(-x)).
    out = np.multiply(x, 0.5, dtype=x.dtype if x.dtype.kind == "f" else np.float32)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


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
