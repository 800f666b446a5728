"""NN compute for ONNX ops that conv.py/pool.py do not cover: auto_pad
arithmetic, transposed convolution, Lp pooling, LRN, normalisation in
inference form, softmax along one axis."""
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
    accumulated one kernel tap at a time (each tap is one matmul)."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    k = len(kernel)
    mg = w.shape[1]
    cg = c // group
    spatial = x.shape[2:]
    full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i]
            for i in range(k)]
    out = np.zeros((n, mg * group) + tuple(full), dtype=np.result_type(x.dtype, w.dtype))
    for g in range(group):
        xg = x[:, g * cg:(g + 1) * cg].reshape(n, cg, -1)            # (N, Cg, P)
        wg = w[g * cg:(g + 1) * cg]                                   # (Cg, Mg, *K)
        for tap in np.ndindex(*kernel):
            contrib = np.einsum("cm,ncp->nmp", wg[(slice(None), slice(None)) + tap], xg)
            contrib = contrib.reshape((n, mg) + tuple(spatial))
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
    """Pads (begins + ends) for ConvTranspose, honouring output_shape and auto_pad."""
    k = len(kernel)
    if not output_shape and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [spatial[i] * strides[i] for i in range(k)]
    if not output_shape:
        return list(pads) if pads else [0] * (2 * k)
    out = [0] * (2 * k)
    for i in range(k):
        total = (strides[i] * (spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                 - output_shape[i])
        total = max(total, 0)
        small, large = total // 2, total - total // 2
        out[i], out[i + k] = (large, small) if auto_pad == "SAME_LOWER" else (small, large)
    return out


def lp_pool(x, kernel, strides, pads, dilations, p):
    k = len(kernel)
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)]
    xp = np.pad(x, width)
    win = windows(np.abs(xp) ** p, kernel, strides, dilations)
    return (win.sum(axis=tuple(range(-k, 0))) ** (1.0 / p)).astype(x.dtype, copy=False)


def lrn(x, size, alpha, beta, bias):
    """Cross-channel local response normalisation (NCHW)."""
    sq = np.square(x)
    c = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    csum = np.cumsum(padded, axis=1, dtype=np.float64)
    csum = np.concatenate([np.zeros_like(csum[:, :1]), csum], axis=1)
    window = (csum[:, size:size + c] - csum[:, :c]).astype(x.dtype)
    return (x / (bias + (alpha / size) * window) ** beta).astype(x.dtype, copy=False)


def batch_norm_inference(x, scale, bias, mean, var, epsilon):
    """y = scale * (x - mean) / sqrt(var + eps) + bias, per channel (axis 1)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mult = (scale / np.sqrt(var + epsilon)).astype(x.dtype, copy=False)
    shift = (bias - mean * mult).astype(x.dtype, copy=False)
    return x * mult.reshape(shape) + shift.reshape(shape)


def instance_norm(x, scale, bias, epsilon):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean) / np.sqrt(var + epsilon) * scale.reshape(shape) + bias.reshape(shape)).astype(
        x.dtype, copy=False)


def softmax_axis(x, axis, log=False):
    """Softmax (or log-softmax) along one axis (ONNX opset 13 semantics)."""
    m = x.max(axis=axis, keepdims=True) if x.size else 0
    shifted = x - m
    e = np.exp(shifted)
    s = e.sum(axis=axis, keepdims=True)
    return (shifted - np.log(s)) if log else e / s


def hardmax_axis(x, axis):
    out = np.zeros_like(x)
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def coerce_2d(x, axis):
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, -1)
