"""N-d convolution (NCHW) as one GEMM over sliding windows."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def pad_input(x, pads, value=0.0):
    """x: (N, C, *spatial); pads: begins then ends, one per spatial dim."""
    k = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)]
    return np.pad(x, width, mode="constant", constant_values=value)


def windows(x, kernel, strides, dilations):
    """View (N, C, *out, *kernel) of x (already padded)."""
    k = len(kernel)
    span = [(kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    v = sliding_window_view(x, span, axis=tuple(range(2, 2 + k)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    return v[index]


def conv_nchw(x, w, b, strides, pads, dilations, group):
    """x (N, C, *S), w (M, C/group, *K), b (M,) or None -> (N, M, *out)."""
    kernel = w.shape[2:]
    k = len(kernel)
    n, c = x.shape[:2]
    m = w.shape[0]
    xp = pad_input(x, pads)
    out_spatial = [(xp.shape[2 + i] - ((kernel[i] - 1) * dilations[i] + 1)) // strides[i] + 1
                   for i in range(k)]
    if any(o <= 0 for o in out_spatial):
        raise ValueError("kernel %s does not fit the padded input %s" % (list(kernel), list(xp.shape[2:])))
    cg, mg = c // group, m // group
    out = np.empty((n, m) + tuple(out_spatial), dtype=np.result_type(x.dtype, w.dtype))
    is_pointwise = all(kk == 1 for kk in kernel) and all(s == 1 for s in strides) and not any(pads)
    for g in range(group):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * mg:(g + 1) * mg].reshape(mg, -1)
        if is_pointwise:
            cols = xg.reshape(n, cg, -1)                      # (N, C, P)
            out[:, g * mg:(g + 1) * mg] = (wg @ cols).reshape((n, mg) + tuple(out_spatial))
            continue
        win = windows(xg, kernel, strides, dilations)         # (N, Cg, *out, *K)
        axes = (0,) + tuple(range(2, 2 + k)) + (1,) + tuple(range(2 + k, 2 + 2 * k))
        cols = np.ascontiguousarray(win.transpose(axes)).reshape(n, int(np.prod(out_spatial)), -1)
        res = cols @ wg.T                                     # (N, P, Mg)
        out[:, g * mg:(g + 1) * mg] = res.transpose(0, 2, 1).reshape((n, mg) + tuple(out_spatial))
    if b is not None:
        out += b.reshape((1, m) + (1,) * k)
    return out


def conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation):
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1
