"""Elementwise math and reductions with ONNX semantics (dtype-preserving)."""
import math

import numpy as np

from .elementwise import divide  # noqa: F401  (ONNX Div: the same C semantics as Caffe2's)


def power(a, b):
    """ONNX Pow: the output has the base's type, whatever the exponent's type."""
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    return np.power(a, b.astype(a.dtype, copy=False)).astype(a.dtype, copy=False)


def mod(a, b):
    """Mod with fmod=0: the result has the divisor's sign (integers)."""
    return np.mod(a, b)


def fmod(a, b):
    return np.fmod(a, b)


def via_float32(fn):
    """fn evaluated in float32 for float16 input: one rounding at the end instead
    of one per intermediate step."""
    def run(x):
        if x.dtype == np.float16:
            return fn(x.astype(np.float32)).astype(np.float16)
        return fn(x)
    return run


def softplus(x):
    return np.logaddexp(0, x)


def elu(x, alpha):
    return np.where(x < 0, alpha * np.expm1(np.minimum(x, 0)), x)


def selu(x, alpha, gamma):
    return gamma * np.where(x <= 0, alpha * np.expm1(np.minimum(x, 0)), x)


def celu(x, alpha):
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


def leaky_relu(x, alpha):
    return np.where(x < 0, x * np.asarray(alpha, x.dtype), x)


def thresholded_relu(x, alpha):
    return np.where(x > alpha, x, 0)


def hard_sigmoid(x, alpha, beta):
    return np.clip(x * alpha + beta, 0, 1)


def shrink(x, lambd, bias):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x)


def onnx_dtype(data_type):
    """numpy dtype for an ONNX TensorProto.DataType value (None when unsupported)."""
    from onnx import helper
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(data_type))
    except (KeyError, TypeError, ValueError):
        return None


def _saturate_float8(x, dtype):
    """Cast's saturate=1 for float8 targets: values beyond the range, infinities
    included, become the largest finite value of that sign; NaN stays NaN."""
    import ml_dtypes
    big = float(ml_dtypes.finfo(dtype).max)
    return np.clip(x.astype(np.float32), -big, big)


_E8M0_ROUND_MODES = ("up", "down", "nearest")


def to_float8e8m0(x, saturate=True, round_mode="up"):
    """Cast to float8e8m0 (2**(code-127), code 0..254, 255 = NaN) per onnx's Cast:
    the float32 exponent, rounded by round_mode on the fraction (`nearest`: ties
    up); with saturate, overflow and Inf give the largest code and values that
    round below 2**-127 (towards zero) the smallest, without it both give NaN. The sign is ignored (negative
    inputs are unspecified)."""
    import ml_dtypes
    bits = np.asarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)
    exponent = (bits >> 23).astype(np.int32)
    fraction = bits & np.uint32(0x7FFFFF)
    special = exponent == 0xFF
    nan = special & (fraction != 0)
    if round_mode == "up":
        code = exponent + (fraction != 0)
        # a subnormal at or below 2**-127 rounds up to the smallest code
        code = np.where((exponent == 0) & (fraction <= 0x400000), 0, code)
        underflow = bits == 0
    else:
        up = fraction >= 0x400000 if round_mode == "nearest" else np.zeros(bits.shape, bool)
        code = exponent + up
        # subnormals: below 2**-127 unless the fraction is at least one half
        code = np.where(exponent == 0, np.where(fraction >= 0x600000, 1, 0) if round_mode == "nearest" else 0,
                        code)
        underflow = (exponent == 0) & (fraction < (0x200000 if round_mode == "nearest" else 0x400000))
    overflow = ~special & (code > 0xFE)
    code = np.where(overflow | special, 0xFE if saturate else 0xFF, code)
    code = np.where(underflow, 0 if saturate else 0xFF, code)
    code = np.where(nan, 0xFF, code)
    return code.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def cast(x, dtype, saturate=True, round_mode="up"):
    dtype = np.dtype(dtype)
    if dtype.name == "float8_e8m0fnu" and x.dtype.kind == "f":
        return to_float8e8m0(x, saturate, round_mode)
    if saturate and dtype.name.startswith("float8") and dtype.name != "float8_e8m0fnu" and x.dtype.kind == "f":
        x = _saturate_float8(x, dtype)
    if dtype.kind == "O" or x.dtype.kind == "O":
        if dtype.kind == "O":
            return np.array([str(v) if not isinstance(v, (str, bytes)) else v for v in x.reshape(-1)],
                            dtype=object).reshape(x.shape)
        return np.array([_number(v) for v in x.reshape(-1)]).astype(dtype).reshape(x.shape)
    return x.astype(dtype)


def _number(text):
    """A string element read as a number (ValueError naming it when it is not one)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError("cannot read %r as a number" % (text,)) from None


def _keep_type(fn):
    def reduce(x, axes, keepdims):
        return np.asarray(fn(x, axes, keepdims)).astype(x.dtype, copy=False)
    return reduce


reduce_sum = _keep_type(lambda x, a, k: np.sum(x, axis=a, keepdims=k))
reduce_mean = _keep_type(lambda x, a, k: np.mean(x, axis=a, keepdims=k))
reduce_max = _keep_type(lambda x, a, k: np.max(x, axis=a, keepdims=k) if x.size else
                        np.full(_reduced_shape(x, a, k), _lowest(x.dtype)))
reduce_min = _keep_type(lambda x, a, k: np.min(x, axis=a, keepdims=k) if x.size else
                        np.full(_reduced_shape(x, a, k), _highest(x.dtype)))


def _lowest(dtype):
    """The identity of max over an empty set for dtype."""
    if dtype.kind == "b":
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    if dtype.kind == "b":
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
reduce_prod = _keep_type(lambda x, a, k: np.prod(x, axis=a, keepdims=k))
reduce_l1 = _keep_type(lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k))
reduce_l2 = _keep_type(lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)))
reduce_log_sum = _keep_type(lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)))
reduce_sum_square = _keep_type(lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k))


def _log_sum_exp(x, a, k):
    m = np.max(x, axis=a, keepdims=True) if x.size else np.zeros(_reduced_shape(x, a, True))
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=a, keepdims=True)) + m
    return out if k else np.squeeze(out, axis=a)


reduce_log_sum_exp = _keep_type(_log_sum_exp)


def _reduced_shape(x, axes, keepdims):
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)


def normalize_strings(x, action, case_sensitive, stopwords):
    """ONNX StringNormalizer on a 1-D or [1, C] object array of str."""
    words = [w.decode() if isinstance(w, bytes) else w for w in x.reshape(-1)]
    stop = set(stopwords) if case_sensitive else {w.lower() for w in stopwords}
    kept = [w for w in words if (w if case_sensitive else w.lower()) not in stop]
    if action == "LOWER":
        kept = [w.lower() for w in kept]
    elif action == "UPPER":
        kept = [w.upper() for w in kept]
    if not kept:
        kept = [""]   # the spec keeps one empty string when everything is removed
    out = np.empty(len(kept), dtype=object)
    out[:] = kept
    return out.reshape(1, -1) if x.ndim == 2 else out
