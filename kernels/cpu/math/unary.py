"""Forward kernels of Caffe2's later unary ops that are more than one NumPy call
(Gelu, Mish, RSqrt, Cube). Callers have checked dtypes; float16 is computed in
float32 by the caller's wrapper.

Public:
    normal_cdf(x)      P(Z <= x) for a standard normal Z (float64 erf, x's dtype)
    gelu(x, fast)      x * P(Z <= x); fast: Caffe2's tanh approximation
    mish(x)            x * tanh(softplus(x)), stable for large |x|
    rsqrt(x)           1 / sqrt(x)
    cube(x)            x ** 3 (integers wrap as C++'s do)
"""
import math

import numpy as np

from .onnx_math import erf, softplus

GELU_FAST_COEFF = 0.044715           # Caffe2's gelu_utils::kFastCoeff
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def normal_cdf(x):
    return (0.5 * (1.0 + erf(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def gelu(x, fast):
    if fast:
        inner = SQRT_2_OVER_PI * (x + GELU_FAST_COEFF * x * x * x)
        return (0.5 * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
    return (x * normal_cdf(x)).astype(x.dtype, copy=False)


def mish(x):
    # Caffe2 writes tanh(softplus(x)) as a ratio of 1 + e^x terms, which is inf / inf
    # (NaN) once e^x overflows; softplus through logaddexp never overflows.
    return (x * np.tanh(softplus(x))).astype(x.dtype, copy=False)


def rsqrt(x):
    return (x.dtype.type(1) / np.sqrt(x)).astype(x.dtype, copy=False)


def cube(x):
    return x * x * x
