"""Max and average pooling (NCHW, N-d) over sliding windows."""
import numpy as np

from .conv import pad_input, windows


def _ceil_extra_pads(spatial, kernel, strides, pads, dilations, ceil_mode):
    """Extra end padding so a ceil-mode output size is reached."""
    k = len(kernel)
    extra = [0] * k
    if not ceil_mode:
        return extra
    for i in range(k):
        span = (kernel[i] - 1) * dilations[i] + 1
        total = spatial[i] + pads[i] + pads[i + k] - span
        out = -(-total // strides[i]) + 1
        # A last window must start inside the input or the begin padding.
        if (out - 1) * strides[i] >= spatial[i] + pads[i]:
            out -= 1
        extra[i] = max(0, (out - 1) * strides[i] + span - (spatial[i] + pads[i] + pads[i + k]))
    return extra


def max_pool(x, kernel, strides, pads, dilations=None, ceil_mode=False):
    k = len(kernel)
    dilations = dilations or [1] * k
    extra = _ceil_extra_pads(x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
    full = list(pads[:k]) + [pads[k + i] + extra[i] for i in range(k)]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = pad_input(x, full, value=fill)
    win = windows(xp, kernel, strides, dilations)
    return win.max(axis=tuple(range(-k, 0)))


def average_pool(x, kernel, strides, pads, count_include_pad=False, ceil_mode=False):
    k = len(kernel)
    ones = [1] * k
    extra = _ceil_extra_pads(x.shape[2:], kernel, strides, pads, ones, ceil_mode)
    full = list(pads[:k]) + [pads[k + i] + extra[i] for i in range(k)]
    xp = pad_input(x, full)
    axes = tuple(range(-k, 0))
    sums = windows(xp, kernel, strides, ones).sum(axis=axes, dtype=np.float64 if x.dtype == np.float64 else np.float32)
    if count_include_pad:
        # Padding added only to reach ceil-mode size never counts.
        counted = np.ones(x.shape[2:], dtype=np.float32)
        counted = np.pad(counted, [(pads[i], pads[i + k]) for i in range(k)], constant_values=1.0)
        counted = np.pad(counted, [(0, extra[i]) for i in range(k)], constant_values=0.0)
    else:
        counted = np.pad(np.ones(x.shape[2:], dtype=np.float32), [(full[i], full[i + k]) for i in range(k)])
    counts = windows(counted[None, None], kernel, strides, ones).sum(axis=axes)
    return (sums / counts).astype(x.dtype, copy=False)


def global_pool(x, kind):
    axes = tuple(range(2, x.ndim))
    if kind == "max":
        return x.max(axis=axes, keepdims=True)
    return x.mean(axis=axes, keepdims=True, dtype=np.float32).astype(x.dtype, copy=False)
