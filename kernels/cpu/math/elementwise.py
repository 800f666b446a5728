"""Elementwise arithmetic and activations.

Public:
    relu(x, out=None) -> max(x, 0), NaN kept (np.maximum's semantics), in x's dtype;
        out may be x (in place) or any array of x's shape, strided ones included.
    row_scalars(row_length)  context for ufuncs that broadcast one value per row
        (per-channel bias / scale over (C, H*W)): picks NumPy's faster loop.
    sigmoid(x), softmax(x, axis), softmax_2d(x2), divide(a, b), BINARY
"""
import math
import threading

import numpy as np

from ..runtime.output_pool import output_array
from .softmax_rows import softmax_rows



def divide(a, b):
    """Div as Caffe2's and ONNX's C++ kernels compute it: true division for floats,
    truncation toward zero for two integer operands (the integer dtype kept). An integer
    zero divisor raises ZeroDivisionError (C++ kernels trap on it)."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        if not np.all(b):
            raise ZeroDivisionError("integer division by zero")
        q = np.floor_divide(a, b)
        # floor_divide rounds toward -inf; C's integer division rounds toward zero
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return (q + fix).astype(np.result_type(a, b), copy=False)
    return np.divide(a, b)


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": divide}


def sigmoid(x):
    # exp of -|x| never overflows, and both branches keep full relative precision
    # (0.5 * tanh(0.5 x) + 0.5 loses it for very negative x).
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


# np.maximum against a scalar runs at about one element per cycle in NumPy 2.4 (its
# stride-0 operand misses the SIMD loop); against an array of zeros it is 3-3.5x
# faster (795k float32: 0.27 -> 0.08 ms), so ReLU reads a shared read-only zero
# buffer. Arrays below _RELU_MIN_SIZE gain nothing; above _RELU_MAX_ZEROS elements
# they go in slices rather than growing the buffer without bound.
_RELU_MIN_SIZE = 4096
_RELU_MAX_ZEROS = 1 << 22
_zeros = {}
_zeros_lock = threading.Lock()


def _zero_buffer(dtype, size):
    """A read-only flat zero array of at least `size` elements (shared)."""
    buf = _zeros.get(dtype)
    if buf is None or buf.size < size:
        with _zeros_lock:
            buf = _zeros.get(dtype)
            if buf is None or buf.size < size:
                buf = np.zeros(max(size, min(_RELU_MAX_ZEROS, 2 * (0 if buf is None else buf.size))), dtype)
                buf.flags.writeable = False
                _zeros[dtype] = buf
    return buf


class row_scalars:
    """Context for ufuncs broadcasting one value per row over rows of `row_length`
    (bias or BN factors per channel over (C, H*W)). While a whole row fits in NumPy's
    ufunc buffer (8192 elements by default) its iterator buffers the broadcast operand
    and runs the slow path; with a buffer shorter than the row it calls the
    vector-scalar loop on each row directly: 224 x 3136 float32 += column 0.10 ->
    0.036 ms, *= column 0.12 -> 0.063 ms. Shorter rows (196: 0.13 vs 0.19 ns per
    element) are faster buffered, so they are left alone. np.setbufsize is scoped to
    the current thread/context and is restored on exit; results do not change."""
    __slots__ = ("_active", "_before")

    def __init__(self, row_length):
        self._active = row_length >= _ROW_SCALARS_MIN_LENGTH

    def __enter__(self):
        if self._active:
            self._before = np.setbufsize(_ROW_SCALARS_BUFFER)
        return self

    def __exit__(self, *exc):
        if self._active:
            np.setbufsize(self._before)
        return False


_ROW_SCALARS_MIN_LENGTH = 512
_ROW_SCALARS_BUFFER = 256


def relu(x, out=None):
    x = np.asarray(x)
    if out is None:
        out = output_array(x.shape, x.dtype)
    n = x.size
    if n < _RELU_MIN_SIZE or x.dtype.kind not in "fi" or x.shape != out.shape:
        return np.maximum(x, x.dtype.type(0), out=out)
    if n <= _RELU_MAX_ZEROS:
        return np.maximum(x, _zero_buffer(x.dtype, n)[:n].reshape(x.shape), out=out)
    # Slices along the first axis with more than one element, each within the buffer.
    axis = next((a for a, d in enumerate(x.shape) if d > 1), 0)
    per = max(1, n // x.shape[axis])
    step = max(1, _RELU_MAX_ZEROS // per)
    if step * per > _RELU_MAX_ZEROS:     # one slice is bigger than the buffer
        return np.maximum(x, x.dtype.type(0), out=out)
    index = [slice(None)] * x.ndim
    for start in range(0, x.shape[axis], step):
        index[axis] = slice(start, start + step)
        part = x[tuple(index)]
        np.maximum(part, _zero_buffer(x.dtype, part.size)[:part.size].reshape(part.shape), out=out[tuple(index)])
    return out


def softmax_2d(x2):
    """Softmax over the last axis of a 2-D array, max-subtracted."""
    out = x2 - x2.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def softmax(x, axis):
    """Caffe2/ONNX-1 semantics: coerce to 2-D at axis, softmax over the second part."""
    if x.size == 0:                 # nothing to normalise (and no row to take a max of)
        return np.empty_like(x)
    axis = axis % x.ndim if x.ndim else 0
    rows = math.prod(x.shape[:axis])
    x2 = x.reshape(rows, -1)
    y = softmax_rows(x2)           # float rows: one compiled pass
    return (y if y is not None else softmax_2d(x2)).reshape(x.shape)
