"""Pointwise kernels of Caffe2 ops that have no ONNX twin (Logit, Swish, StumpFunc,
ReplaceNaN, Mod, PRelu with a channel axis, ElementwiseLinear, SquareRootDivide).
Each takes and returns NumPy arrays; callers have checked dtypes and shapes.
float16 inputs are computed in float32 and rounded once at the end."""
import numpy as np

from .elementwise import sigmoid


def _via_float32(fn):
    def run(x, *args):
        if x.dtype == np.float16:
            return fn(x.astype(np.float32), *args).astype(np.float16)
        return fn(x, *args)
    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


@_via_float32
def logit(x, eps):
    """log(p / (1 - p)) with p = x clamped to [eps, 1 - eps] (in x's precision)."""
    t = x.dtype.type
    p = np.clip(x, t(eps), t(1) - t(eps))
    return np.log(p / (t(1) - p)).astype(x.dtype, copy=False)


@_via_float32
def swish(x):
    """x * sigmoid(x) (sigmoid of -|x|, so exp never overflows)."""
    return (x * sigmoid(x)).astype(x.dtype, copy=False)


@_via_float32
def softsign(x):
    """x / (1 + |x|)."""
    return (x / (x.dtype.type(1) + np.abs(x))).astype(x.dtype, copy=False)


def stump(x, threshold, low, high):
    """low where x <= threshold, else high (float32, Caffe2's StumpFunc)."""
    return np.where(x <= threshold, np.float32(low), np.float32(high))


def replace_nan(x, value):
    """x with every NaN replaced by value."""
    return np.where(np.isnan(x), x.dtype.type(value), x)


def c_mod(x, divisor, sign_follow_divisor):
    """x % divisor with C's truncation (the result takes x's sign); with
    sign_follow_divisor a nonzero result takes the divisor's sign instead."""
    r = np.fmod(x, x.dtype.type(divisor))
    if sign_follow_divisor:
        flip = (r != 0) & ((r > 0) != (divisor > 0))
        r = np.where(flip, r + x.dtype.type(divisor), r)
    return r


def prelu(x, slope, channel_axis):
    """x where x > 0, else slope * x; slope holds one value, or one per channel
    along channel_axis."""
    if slope.size == 1:
        w = slope.reshape(())
    else:
        shape = [1] * x.ndim
        shape[channel_axis] = slope.size
        w = slope.reshape(shape)
    return np.where(x > 0, x, x * w).astype(x.dtype, copy=False)


def elementwise_linear(x, a, b, axis):
    """a * x + b with x viewed as (prod(dims[:axis]), D) and a, b of length D."""
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    x2 = x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))    # -1 is ambiguous with 0 rows
    return (x2 * a + b).astype(x.dtype, copy=False).reshape(x.shape)


def square_root_divide(x, scale):
    """Row i of x divided by sqrt(scale[i]); rows with scale 0 are copied."""
    s = scale.astype(np.float64)
    multiplier = np.where(s == 0, 1.0, 1.0 / np.sqrt(np.where(s == 0, 1.0, s))).astype(x.dtype)
    row = int(np.prod(x.shape[1:], dtype=np.int64))     # explicit: -1 is ambiguous with 0 rows
    return (x.reshape(len(scale), row) * multiplier[:, None]).reshape(x.shape)
