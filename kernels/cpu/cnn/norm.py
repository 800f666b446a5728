"""Normalisation kernels (inference).

Public:
    batch_norm(x, scale, bias, mean, var, epsilon=1e-5, axis=1) -> y
        y = (x - mean) / sqrt(var + epsilon) * scale + bias per channel on `axis`
        (axis=1 for NCHW, -1 for NHWC); float NCHW input with float statistics runs
        one compiled pass (epilogue.channel_affine) after a compiled loop works out
        the per-channel factors (_bn_factors).
    bn_affine(scale, bias, mean, var, epsilon, dtype) -> (mul, add)
        the per-channel factors batch_norm applies: y = x * mul + add (also used to
        fold a BN into the preceding convolution).
    instance_norm(x, scale, bias, epsilon=1e-5, return_stats=False) -> y [, mean, inv_std]
        per (n, c) over the spatial dims, NCHW: (x - mean) / sqrt(var + eps) * scale + bias;
        the stats have shape (N, C).
    lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0, return_scale=False) -> y [, scale]
        across channels (axis 1): y = x / scale ** beta with scale = bias + alpha / size *
        (sum of x^2 over the channels c - (size-1)//2 .. c + size//2 that exist);
        ONNX and Caffe2 agree.
"""
import math
import numpy as np

from ..math.elementwise import relu as relu_into
from ..math.elementwise import row_scalars
from ..math.epilogue import channel_affine
from ..runtime.jit import compiled, prange, serial_variant, team, team_blocks
from ..runtime.output_pool import output_array


def bn_affine(scale, bias, mean, var, epsilon, dtype=np.float32):
    """Per-channel multiplier and offset of inference batch norm, computed in float64."""
    mul = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + epsilon)
    add = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * mul
    return mul.astype(dtype).ravel(), add.astype(dtype).ravel()


def _channel_shape(x, axis, c):
    shape = [1] * x.ndim
    shape[axis] = c
    return shape


def batch_norm(x, scale, bias, mean, var, epsilon=1e-5, axis=1, relu=False):
    """Inference batch norm; relu=True clamps at zero in place on the fresh result
    (the fused BN + Relu that caffe2py.optimize makes of a pre-activation pair)."""
    if x.ndim >= 2 and (axis == 1 or axis == 1 - x.ndim) and x.dtype in _FLOATS and x.size:
        y = _nchw_batch_norm(x, (scale, bias, mean, var), epsilon, relu)
        if y is not None:
            return y
    axis = axis % x.ndim if x.ndim else 0
    c = x.shape[axis] if x.ndim > 1 else x.size
    for name, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        if np.size(v) != c:
            raise ValueError("%s has %d elements, expected %d channels" % (name, np.size(v), c))
    dtype = x.dtype if x.dtype.kind == "f" else np.float32
    if x.size == 0:                  # an empty batch (Caffe2 returns the empty Y at once)
        return np.empty(x.shape, dtype)
    mul, add = bn_affine(scale, bias, mean, var, epsilon, dtype)
    if x.ndim < 2:
        y = (x * mul + add).astype(dtype, copy=False)
        return relu_into(y, out=y) if relu else y
    if axis == 1 and x.dtype in (np.float32, np.float64):
        return channel_affine(x, mul, add, relu)
    shape = _channel_shape(x, axis, c)
    with row_scalars(math.prod(x.shape[axis + 1:])):
        y = np.multiply(x, mul.reshape(shape), dtype=dtype)
        y += add.reshape(shape)
    if relu:
        relu_into(y, out=y)
    return y


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@compiled
def _bn_factors(scale, bias, mean, var, eps, factors):
    """factors[0] = scale / sqrt(var + eps), factors[1] = bias - mean * factors[0],
    worked out in float64 and rounded to factors' dtype (bn_affine's numbers exactly,
    without its six NumPy calls per op). factors: (2, C); the statistics are 1-D
    float arrays of C values (the caller checked)."""
    for c in range(scale.shape[0]):
        m = np.float64(scale[c]) / np.sqrt(np.float64(var[c]) + eps)
        factors[0, c] = m
        factors[1, c] = np.float64(bias[c]) - np.float64(mean[c]) * m


@_bn_factors.numpy_twin
def _bn_factors_numpy(scale, bias, mean, var, eps, factors):
    factors[0], factors[1] = bn_affine(scale, bias, mean, var, eps, factors.dtype)


def _nchw_batch_norm(x, stats, epsilon, relu):
    """batch_norm on (N, C, ...) float input in one compiled pass, or None when the
    statistics are not float32/float64 vectors of C values (the general path then
    reports or handles them)."""
    c = x.shape[1]
    vectors = []
    for v in stats:
        if not isinstance(v, np.ndarray) or v.size != c or v.dtype not in _FLOATS:
            return None
        vectors.append(v.reshape(-1) if v.flags.c_contiguous else np.ascontiguousarray(v).reshape(-1))
    factors = np.empty((2, c), x.dtype)
    _bn_factors(*vectors, float(epsilon), factors)
    with team():
        return channel_affine(x, factors[0], factors[1], relu)


def instance_norm(x, scale, bias, epsilon=1e-5, return_stats=False):
    n, c = x.shape[:2]
    if np.size(scale) != c or np.size(bias) != c:
        raise ValueError("scale and bias need %d elements (channels), got %d and %d"
                         % (c, np.size(scale), np.size(bias)))
    spatial = int(np.prod(x.shape[2:], dtype=np.int64))     # explicit: -1 is ambiguous when n * c == 0
    flat = x.reshape(n, c, spatial).astype(np.float64 if x.dtype == np.float64 else np.float32, copy=False)
    count = flat.shape[2]
    with np.errstate(invalid="ignore", divide="ignore"):   # no spatial values: NaN stats, as Caffe2's 0 / 0
        mean = flat.sum(axis=2, keepdims=True) / flat.dtype.type(count)
        centered = flat - mean
        var = np.square(centered).sum(axis=2, keepdims=True) / flat.dtype.type(count)
        inv_std = 1.0 / np.sqrt(var + epsilon)
    y = centered * (np.asarray(scale, centered.dtype).reshape(1, c, 1) * inv_std)
    y += np.asarray(bias, centered.dtype).reshape(1, c, 1)
    y = y.reshape(x.shape).astype(x.dtype, copy=False)
    if return_stats:
        return y, mean.reshape(n, c).astype(x.dtype), inv_std.reshape(n, c).astype(x.dtype)
    return y


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0, return_scale=False):
    if size <= 0:
        raise ValueError("LRN size must be positive, got %d" % size)
    if x.dtype in _FLOATS and x.ndim >= 2 and x.size:
        # one compiled pass per channel row (_lrn_planes) into pool outputs: the NumPy
        # form below makes six full-size temporaries (alexnet's 96x54x54 LRN 5.4 ms
        # against 0.27 compiled, 1 thread)
        planes = np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], -1)
        y = output_array(x.shape, x.dtype)
        scale = output_array(x.shape, x.dtype) if return_scale else _NO_SCALE[x.dtype.char]
        n, c, p = planes.shape
        blocks = team_blocks(n * c, p * (size + 8))
        kind = x.dtype.type           # scalars of x's type: float32 rows stay float32 lanes
        with team():
            (_lrn_planes if blocks > 1 else _lrn_planes_serial)(
                planes, y.reshape(planes.shape), scale.reshape(planes.shape) if return_scale else scale,
                return_scale, size, kind(alpha / size), kind(bias), kind(beta), blocks)
        return (y, scale) if return_scale else y
    return _lrn_numpy(x, size, alpha, beta, bias, return_scale)


_NO_SCALE = {np.dtype(t).char: np.zeros((1, 1, 1), t) for t in _FLOATS}


@compiled(parallel=True, error_model="numpy")    # x / 0 as NumPy: no check that stops vectorising
def _lrn_planes(x, y, scale, has_scale, size, coef, bias, beta, blocks):
    """x, y (N, C, P) C-contiguous float32 / float64 (scale too when has_scale): for each
    channel row, s = the sum of x^2 over the channels c - (size-1)//2 .. c + size//2 that
    exist, in channel order; d = bias + coef * s (the scale); y = x * d ** -beta (beta
    0.75: x / (sqrt(d) sqrt(sqrt(d))), as the NumPy form). Rows split over the team."""
    n, c, p = x.shape
    before, after = (size - 1) // 2, size // 2
    items = n * c
    for t in prange(blocks):
        acc = np.empty(p, x.dtype)
        for item in range(items * t // blocks, items * (t + 1) // blocks):
            i = item // c
            ch = item - i * c
            lo, hi = max(0, ch - before), min(c - 1, ch + after)
            first = x[i, lo]
            for q in range(p):
                acc[q] = first[q] * first[q]
            for j in range(lo + 1, hi + 1):
                row = x[i, j]
                for q in range(p):
                    acc[q] += row[q] * row[q]
            for q in range(p):
                acc[q] = bias + coef * acc[q]
            if has_scale:
                srow = scale[i, ch]
                for q in range(p):
                    srow[q] = acc[q]
            xr, yr = x[i, ch], y[i, ch]
            if beta == 0.75:
                for q in range(p):
                    root = np.sqrt(acc[q])
                    yr[q] = xr[q] / (root * np.sqrt(root))
            else:
                for q in range(p):
                    yr[q] = xr[q] / acc[q] ** beta


@_lrn_planes.numpy_twin
def _lrn_planes_numpy(x, y, scale, has_scale, size, coef, bias, beta, blocks):
    out = _lrn_numpy(x, size, coef * size, beta, bias, has_scale)
    if has_scale:
        y[...], scale[...] = out
    else:
        y[...] = out


def _lrn_numpy(x, size, alpha, beta, bias, return_scale):
    c = x.shape[1]
    before, after = (size - 1) // 2, size // 2
    sq = np.square(x, dtype=np.float32 if x.dtype != np.float64 else np.float64)
    # Window sums over channels from a running sum along axis 1 with zero channels around it.
    csum = np.zeros((x.shape[0], c + size) + x.shape[2:], dtype=sq.dtype)
    np.cumsum(sq, axis=1, out=csum[:, 1:c + 1])
    csum[:, c + 1:] = csum[:, c:c + 1]
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    denom = csum[:, hi] - csum[:, lo]
    denom *= alpha / size
    denom += bias
    scale = denom.astype(x.dtype, copy=True) if return_scale else None
    if beta == 0.75:
        # d ** 0.75 = sqrt(d) * sqrt(sqrt(d)): far cheaper than a general power.
        root = np.sqrt(denom)
        denom = root * np.sqrt(root)
    else:
        denom = np.power(denom, beta)
    y = (x / denom).astype(x.dtype, copy=False)
    return (y, scale) if return_scale else y


_lrn_planes_serial = serial_variant(_lrn_planes, "_lrn_planes_serial")
