"""Caffe2's later unary ops in the caffe2 domain (each with a gradient, in
unary_grad.py): Erf, Gelu (fast_gelu), Mish, HardSigmoid (alpha, beta), Log1p,
RSqrt, Tan, Atan, Acos, Asin, Cosh, Sinh, Cbrt, Cube, Reciprocal. float16/32/64
(Cube also int32/int64); float16 is computed in float32. Values outside a
function's domain give NaN or inf as in C++ (Acos(2), Log1p(-2), RSqrt(0))."""
import numpy as np

from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.kernels.cpu.math import unary as K
from caffe2py.registry import Arg

from .._caffe2_binary import FLOATS, NUMERIC
from .caffe2_math import keep_dtype, register_unary


def _numpy(fn):
    return lambda ctx: keep_dtype(fn)


for _op, _fn, _doc, _flops in (
        ("Erf", om.erf, "The error function erf(x).", 8),
        ("Log1p", np.log1p, "log(1 + x), accurate near 0.", 4),
        ("RSqrt", K.rsqrt, "1 / sqrt(x).", 2),
        ("Tan", np.tan, "Tangent of each element (radians).", 4),
        ("Atan", np.arctan, "Arctangent of each element.", 4),
        ("Acos", np.arccos, "Arccosine of each element (NaN outside [-1, 1]).", 4),
        ("Asin", np.arcsin, "Arcsine of each element (NaN outside [-1, 1]).", 4),
        ("Cosh", np.cosh, "Hyperbolic cosine of each element.", 4),
        ("Sinh", np.sinh, "Hyperbolic sine of each element.", 4),
        ("Cbrt", np.cbrt, "Cube root of each element.", 4),
        ("Reciprocal", np.reciprocal, "1 / x.", 1),
        ("Mish", K.mish, "x * tanh(softplus(x)).", 6)):
    register_unary(_op, _numpy(_fn), FLOATS, _doc, flops=_flops)

register_unary("Cube", lambda ctx: K.cube, NUMERIC, "x ** 3 (integers wrap as in C++).", flops=2)


def _gelu(ctx):
    fast = ctx.bool("fast_gelu")
    return keep_dtype(lambda x: K.gelu(x, fast))


def _hard_sigmoid(ctx):
    alpha, beta = ctx.float("alpha"), ctx.float("beta")
    return keep_dtype(lambda x: om.hard_sigmoid(x, x.dtype.type(alpha), x.dtype.type(beta)))


register_unary(
    "Gelu", _gelu, FLOATS,
    "x * P(Z <= x) for a standard normal Z; with fast_gelu, "
    "0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).",
    args=(Arg("fast_gelu", "bool", False, doc="use the tanh approximation"),), flops=8)
register_unary("HardSigmoid", _hard_sigmoid, FLOATS, "max(0, min(1, alpha * x + beta)).",
               args=(Arg("alpha", "float", 0.2, doc="slope"), Arg("beta", "float", 0.5, doc="offset")), flops=4)
