"""Linear quantisation with ONNX rounding (half to even) and saturation."""
import numpy as np


def _broadcast_param(param, x, axis, block_size):
    """Scale / zero point shaped to broadcast against x (per tensor, per axis or blocked)."""
    param = np.asarray(param)
    if param.size == 1 and block_size == 0:
        return param.reshape(())
    if block_size == 0:
        if param.ndim != 1 or param.size != x.shape[axis]:
            raise ValueError("a per-axis scale / zero point must be 1-D with %d values (input shape %s, "
                             "axis %d), got shape %s" % (x.shape[axis], list(x.shape), axis, list(param.shape)))
        shape = [1] * x.ndim
        shape[axis] = param.size
        return param.reshape(shape)
    # blocked: repeat each entry block_size times along axis, then crop to x
    if block_size < 0 or param.ndim != x.ndim or param.shape[axis] * block_size < x.shape[axis] or any(
            param.shape[d] != x.shape[d] for d in range(x.ndim) if d != axis):
        raise ValueError("a blocked scale / zero point of shape %s with block_size %d does not cover input "
                         "shape %s on axis %d" % (list(param.shape), block_size, list(x.shape), axis))
    rep = np.repeat(param, block_size, axis=axis)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, x.shape[axis])
    return rep[tuple(index)]


def quantize(x, scale, zero_point, dtype, axis=1, block_size=0, saturate=True):
    s = _broadcast_param(scale, x, axis, block_size)
    # Divide in the input's precision (float32 for float32 input), as ONNX does.
    ftype = np.result_type(np.asarray(x).dtype, np.asarray(s).dtype, np.float32)
    zp = 0 if zero_point is None else _broadcast_param(zero_point, x, axis, block_size).astype(
        np.float32).astype(np.float64)
    scaled = np.asarray(x, ftype) / np.asarray(s, ftype)
    dtype = np.dtype(dtype)
    if is_small_float(dtype):
        # float8 / float4 targets round by the cast itself, saturating at the range
        from ..math.onnx_math import cast
        return cast((scaled.astype(np.float64) + zp).astype(np.float32), dtype, saturate)
    q = np.rint(scaled).astype(np.float64) + zp
    info = integer_info(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def is_small_float(dtype):
    return dtype.name.startswith(("float8", "float4"))


def integer_info(dtype):
    """iinfo for NumPy integers and ml_dtypes' int4/uint4/int2/uint2."""
    if dtype.kind in "iu":
        return np.iinfo(dtype)
    import ml_dtypes
    return ml_dtypes.iinfo(dtype)


def is_quantized_type(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and dtype.itemsize <= 4:
        return True
    if is_small_float(dtype):
        return True
    try:
        integer_info(dtype)
        return True
    except (TypeError, ValueError, ImportError):
        return False


def dequantize(q, scale, zero_point, axis=1, block_size=0, out_dtype=None):
    s = _broadcast_param(scale, q, axis, block_size)
    zp = 0 if zero_point is None else _broadcast_param(zero_point, q, axis, block_size).astype(
        np.float32).astype(np.float64)
    y = (q.astype(np.float32).astype(np.float64) - zp) * s.astype(np.float64)
    return y.astype(out_dtype or np.asarray(scale).dtype)


def dynamic_quantize(x):
    """(y uint8, scale, zero point) covering [min(x, 0), max(x, 0)]."""
    lo = np.minimum(x.min(), np.float32(0)) if x.size else np.float32(0)
    hi = np.maximum(x.max(), np.float32(0)) if x.size else np.float32(0)
    scale = np.float32((hi - lo) / np.float32(255)) if hi > lo else np.float32(0.0)
    zp = np.uint8(np.clip(np.rint(np.float32(0) - lo / scale), 0, 255)) if scale else np.uint8(0)
    y = quantize(x, scale, zp, np.uint8) if scale else np.zeros(x.shape, np.uint8)
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)
