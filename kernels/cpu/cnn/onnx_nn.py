"""NN compute for ONNX ops that conv.py/pool.py/norm.py do not cover: auto_pad
arithmetic, transposed convolution, Lp pooling, dilated average pooling, max
pooling with indices, training-mode batch norm, layer/group/RMS norms,
softmax along one axis."""
import math
import numpy as np

from .conv import windows


def auto_pads(auto_pad, spatial, kernel, strides, dilations, pads):
    """Pads (begins + ends) for ONNX auto_pad; NOTSET keeps the explicit pads."""
    k = len(kernel)
    if auto_pad in ("", "NOTSET"):
        return list(pads) if pads else [0] * (2 * k)
    if auto_pad == "VALID":
        return [0] * (2 * k)
    out = [0] * (2 * k)
    for i in range(k):
        span = (kernel[i] - 1) * dilations[i] + 1
        target = -(-spatial[i] // strides[i])
        total = max(0, (target - 1) * strides[i] + span - spatial[i])
        small, large = total // 2, total - total // 2
        # SAME_UPPER puts the odd extra pixel at the end, SAME_LOWER at the start.
        out[i], out[i + k] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    return out


def conv_transpose(x, w, b, strides, pads, dilations, group, output_padding):
    """x (N, C, *S), w (C, M/group, *K) -> (N, M, *out): the adjoint of conv,
    one GEMM per group for all kernel taps, then a strided add per tap."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    k = len(kernel)
    mg = w.shape[1]
    cg = c // group
    spatial = x.shape[2:]
    full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i]
            for i in range(k)]
    out = np.zeros((n, mg * group) + tuple(full), dtype=np.result_type(x.dtype, w.dtype))
    taps = int(np.prod(kernel))
    for g in range(group):
        xg = x[:, g * cg:(g + 1) * cg].reshape(n, cg, -1)            # (N, Cg, P)
        wg = w[g * cg:(g + 1) * cg].reshape(cg, mg * taps)            # (Cg, Mg*K)
        # one GEMM for every tap at once, then each tap's plane is added in place
        cols = np.matmul(wg.T, xg).reshape((n, mg) + tuple(kernel) + tuple(spatial))
        for tap in np.ndindex(*kernel):
            contrib = cols[(slice(None), slice(None)) + tap]
            index = (slice(None), slice(g * mg, (g + 1) * mg)) + tuple(
                slice(tap[i] * dilations[i], tap[i] * dilations[i] + (spatial[i] - 1) * strides[i] + 1,
                      strides[i]) for i in range(k))
            out[index] += contrib
    crop = (slice(None), slice(None)) + tuple(slice(pads[i], full[i] - pads[i + k]) for i in range(k))
    out = out[crop]
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * k)
    return np.ascontiguousarray(out)


def conv_transpose_pads(auto_pad, spatial, kernel, strides, dilations, pads, output_padding, output_shape):
    """(pads begins + ends, output_padding) for ConvTranspose, honouring
    output_shape and auto_pad. An output_shape larger than the full result
    grows output_padding (extra zero-contribution rows at the end)."""
    k = len(kernel)
    output_padding = list(output_padding)
    if not output_shape and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [spatial[i] * strides[i] for i in range(k)]
    if not output_shape:
        return (list(pads) if pads else [0] * (2 * k)), output_padding
    out = [0] * (2 * k)
    for i in range(k):
        total = (strides[i] * (spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                 - output_shape[i])
        if total < 0:
            output_padding[i] -= total
            total = 0
        small, large = total // 2, total - total // 2
        out[i], out[i + k] = (large, small) if auto_pad == "SAME_LOWER" else (small, large)
    return out, output_padding


def lp_pool(x, kernel, strides, pads, dilations, p):
    k = len(kernel)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)]
    xp = np.pad(x, width)
    win = windows(np.abs(xp) ** p, kernel, strides, dilations)
    return (win.sum(axis=tuple(range(-k, 0))) ** (1.0 / p)).astype(x.dtype, copy=False)


def softmax_axis(x, axis, log=False):
    """Softmax (or log-softmax) along one axis (ONNX opset 13 semantics)."""
    m = x.max(axis=axis, keepdims=True) if x.size else 0
    shifted = x - m
    e = np.exp(shifted)
    s = e.sum(axis=axis, keepdims=True)
    return (shifted - np.log(s)) if log else e / s


def hardmax_axis(x, axis):
    out = np.zeros_like(x)
    if x.size == 0:
        return out
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def coerce_2d(x, axis):
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _ceil_extra(spatial, kernel, strides, pads, dilations, ceil_mode):
    """End padding needed to reach the ceil-mode output size (a last window must
    start inside the input or its begin padding)."""
    k = len(kernel)
    extra = [0] * k
    for i in range(k):
        span = (kernel[i] - 1) * dilations[i] + 1
        total = spatial[i] + pads[i] + pads[i + k] - span
        out = (-(-total // strides[i]) if ceil_mode else total // strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= spatial[i] + pads[i]:
            out -= 1
        extra[i] = max(0, (out - 1) * strides[i] + span - (spatial[i] + pads[i] + pads[i + k]))
    return extra


def average_pool_dilated(x, kernel, strides, pads, dilations, count_include_pad, ceil_mode):
    """Average pooling with dilated windows (pool.average_pool has none)."""
    k = len(kernel)
    extra = _ceil_extra(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k] + extra[i]) for i in range(k)]
    xp = np.pad(x, width)
    axes = tuple(range(-k, 0))
    sums = windows(xp, kernel, strides, dilations).sum(axis=axes)
    inside = np.ones(x.shape[2:], dtype=np.float64)
    if count_include_pad:   # explicit padding counts, ceil-mode extension does not
        inside = np.pad(inside, [(pads[i], pads[i + k]) for i in range(k)], constant_values=1.0)
        inside = np.pad(inside, [(0, extra[i]) for i in range(k)])
    else:
        inside = np.pad(inside, [w for w in width[2:]])
    counts = windows(inside[None, None], kernel, strides, dilations).sum(axis=axes)
    return (sums / counts).astype(x.dtype)


def max_pool_with_indices(x, kernel, strides, pads, dilations, ceil_mode, storage_order):
    """(values, flat indices into x) for MaxPool's optional Indices output;
    storage_order 1 numbers the spatial dims column-major."""
    k = len(kernel)
    extra = _ceil_extra(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k] + extra[i]) for i in range(k)]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, width, constant_values=fill)
    win = windows(xp, kernel, strides, dilations)
    out_shape = win.shape[:2 + k]
    flat = win.reshape(out_shape + (-1,))
    arg = flat.argmax(axis=-1)
    values = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    taps = np.unravel_index(arg, tuple(kernel))
    grids = np.indices(out_shape)
    coords = [grids[2 + i] * strides[i] - pads[i] + taps[i] * dilations[i] for i in range(k)]
    spatial = x.shape[2:]
    if storage_order:
        index, scale = np.zeros(out_shape, dtype=np.int64), 1
        for i in range(k):
            index += coords[i] * scale
            scale *= spatial[i]
    else:
        index = np.zeros(out_shape, dtype=np.int64)
        for i in range(k):
            index = index * spatial[i] + coords[i]
    plane = int(np.prod(spatial))
    index += (grids[0] * x.shape[1] + grids[1]) * plane
    return values, index


def batch_norm_training(x, scale, bias, mean, var, epsilon, momentum):
    """(y, running_mean, running_var) with batch statistics (population variance)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    bm = x.mean(axis=axes)
    bv = x.var(axis=axes)
    y = (x - bm.reshape(shape)) / np.sqrt(bv.reshape(shape) + epsilon) * scale.reshape(shape) + bias.reshape(shape)
    run_mean = (mean * momentum + bm * (1 - momentum)).astype(mean.dtype)
    run_var = (var * momentum + bv * (1 - momentum)).astype(var.dtype)
    return y.astype(x.dtype), run_mean, run_var


def layer_norm(x, scale, bias, axis, epsilon):
    """(y, mean, inv_std_dev) normalising over the axes from `axis` on (float32 stats
    for float16 input, as stash_type=1 asks)."""
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(np.float32) if x.dtype == np.float16 else x
    mean = xs.mean(axis=axes, keepdims=True)
    centered = xs - mean
    inv = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + epsilon)
    y = centered * inv * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype, copy=False), mean.astype(xs.dtype), inv.astype(xs.dtype)


def group_norm(x, scale, bias, num_groups, epsilon, per_channel):
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    normed = ((g - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if not per_channel:   # opset 18: one scale/bias per group
        scale, bias = np.repeat(scale, c // num_groups), np.repeat(bias, c // num_groups)
    return (normed * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype, copy=False)


def rms_norm(x, scale, axis, epsilon):
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(np.float32) if x.dtype == np.float16 else x
    rms = np.sqrt((xs * xs).mean(axis=axes, keepdims=True) + epsilon)
    return (xs / rms * scale).astype(x.dtype, copy=False)


def lp_normalize(x, axis, p):
    norm = np.abs(x).sum(axis=axis, keepdims=True) if p == 1 else np.sqrt((x * x).sum(axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0, x / norm).astype(x.dtype, copy=False)


def mean_variance_normalize(x, axes):
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
    return ((x - mean) / (std + 1e-9)).astype(x.dtype, copy=False)
