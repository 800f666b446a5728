"""Gradients of the unary elementwise ops: the compute of Caffe2's <Op>Gradient
kernels. Each takes its arrays in the order of the Caffe2 gradient op's inputs
(X, Y = forward input and output, dY = output gradient), all of one shape and dtype
(the caller checks), and returns dX in dY's dtype; float16 is computed in float32
and rounded once.

Where Caffe2's formula works from the output Y, so does the function here (its
gradient op receives Y, not X): EluGradient, SeluGradient, LeakyReluGradient,
ThresholdedReluGradient, HardSigmoidGradient, SoftplusGradient, RSqrtGradient,
CbrtGradient, ReciprocalGradient.
"""
import math

import numpy as np

from .elementwise import sigmoid
from .onnx_math import softplus
from .unary import GELU_FAST_COEFF, SQRT_2_OVER_PI, normal_cdf


def _half_in_float32(fn):
    """fn on float32 copies of float16 arrays; the result in the arrays' (shared) dtype."""
    def run(*arrays, **args):
        dtype = arrays[0].dtype
        if dtype == np.float16:
            arrays = [a.astype(np.float32) for a in arrays]
        return np.asarray(fn(*arrays, **args)).astype(dtype, copy=False)
    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def _zero(a):
    return a.dtype.type(0)


# ----------------------------------------------------------------- from X

@_half_in_float32
def abs_grad(x, dy):
    """sign(X) dY (0 where X == 0)."""
    return np.sign(x) * dy


@_half_in_float32
def sin_grad(x, dy):
    return dy * np.cos(x)


@_half_in_float32
def cos_grad(x, dy):
    return -dy * np.sin(x)


@_half_in_float32
def tan_grad(x, dy):
    c = np.cos(x)
    return dy / (c * c)


@_half_in_float32
def asin_grad(dy, x):
    return dy / np.sqrt(1 - x * x)


@_half_in_float32
def acos_grad(x, dy):
    return -dy / np.sqrt(1 - x * x)


@_half_in_float32
def atan_grad(x, dy):
    return dy / (1 + x * x)


@_half_in_float32
def sinh_grad(dy, x):
    return dy * np.cosh(x)


@_half_in_float32
def cosh_grad(dy, x):
    return dy * np.sinh(x)


@_half_in_float32
def log1p_grad(x, dy):
    return dy / (1 + x)


@_half_in_float32
def cube_grad(dy, x):
    return 3 * dy * x * x


@_half_in_float32
def erf_grad(x, dy):
    return (2 / math.sqrt(math.pi)) * np.exp(-x * x) * dy


@_half_in_float32
def softsign_grad(x, dy):
    d = 1 + np.abs(x)
    return dy / (d * d)


@_half_in_float32
def logit_grad(x, dy, eps):
    """dY / (X (1 - X)) inside [eps, 1 - eps], 0 outside (where Logit clamps)."""
    t = x.dtype.type
    inside = (x >= t(eps)) & (x <= t(1) - t(eps))
    safe = np.where(inside, x, t(0.5))          # no division by 0 where the result is 0 anyway
    return np.where(inside, dy / (safe * (1 - safe)), _zero(dy))


@_half_in_float32
def gelu_grad(dy, x, fast_gelu):
    if fast_gelu:
        t = np.tanh(SQRT_2_OVER_PI * (x + GELU_FAST_COEFF * x * x * x))
        slope = SQRT_2_OVER_PI * (1 + 3 * GELU_FAST_COEFF * x * x)
        return 0.5 * dy * (1 + t + x * (1 - t * t) * slope)
    density = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return dy * (normal_cdf(x) + x * density)


# ----------------------------------------------------------------- from X and Y

@_half_in_float32
def swish_grad(x, y, dy):
    return dy * (y + sigmoid(x) * (1 - y))


@_half_in_float32
def mish_grad(x, y, dy):
    """Caffe2 takes Y but its formula needs only X; written with tanh(softplus(X))
    instead of Caffe2's powers of e^X, which overflow to NaN for X above ~29."""
    t = np.tanh(softplus(x))
    return dy * (t + x * sigmoid(x) * (1 - t * t))


# ----------------------------------------------------------------- from Y

@_half_in_float32
def softplus_grad(y, dy):
    return dy * -np.expm1(-y)                    # 1 - exp(-Y) = sigmoid(X)


@_half_in_float32
def elu_grad(y, dy, alpha):
    return np.where(y < 0, dy * (y + y.dtype.type(alpha)), dy)


@_half_in_float32
def selu_grad(y, dy, alpha, scale):
    t = y.dtype.type
    return np.where(y > 0, t(scale) * dy, dy * (y + t(scale) * t(alpha)))


@_half_in_float32
def leaky_relu_grad(y, dy, alpha):
    return np.where(y >= 0, dy, dy * dy.dtype.type(alpha))


@_half_in_float32
def thresholded_relu_grad(y, dy):
    """dY where Y != 0 (X was above alpha), else 0. Caffe2 multiplies by sign(Y),
    which is the same for alpha >= 0 but negates the gradient of inputs in
    (alpha, 0) when alpha < 0."""
    return np.where(y != 0, dy, _zero(dy))


@_half_in_float32
def hard_sigmoid_grad(y, dy, alpha):
    return np.where((y > 0) & (y < 1), dy * dy.dtype.type(alpha), _zero(dy))


@_half_in_float32
def rsqrt_grad(dy, y):
    return dy * y * y * y * dy.dtype.type(-0.5)


@_half_in_float32
def cbrt_grad(dy, y):
    return dy / (y * y) / 3


@_half_in_float32
def reciprocal_grad(y, dy):
    return -dy * y * y
