"""N-d convolution (NCHW) on BLAS.

Public:
    conv_nchw(x, w, b, strides, pads, dilations, group, *, scratch=None, activation=None)
        x (N, C, *S), w (M, C/group, *K), b (M,) or None -> (N, M, *out).
        pads: begins then ends, one per spatial dim. activation: None or "relu"
        (applied in the output pass). scratch: a Scratch owned by the caller
        (one per op) so im2col and padding buffers are allocated once, not per run.
    conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation)
    pad_input(x, pads, value=0.0), windows(x, kernel, strides, dilations)

Strategy (fastest first):
  * 1x1, no padding: a plain matmul W (M, C) @ X (C, H*W) per image and group
    (strided 1x1 subsamples first);
  * depthwise (one input channel per group): a multiply-add over kernel offsets
    on strided views, no GEMM;
  * otherwise im2col into a reused buffer, in row tiles small enough to stay in
    cache, then one GEMM per tile (batched over groups) written straight into the
    output.
Padding goes into a zero-bordered buffer that is allocated once: only the
interior is rewritten per run.
"""
import itertools
import threading
from collections import OrderedDict

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# im2col tiles are kept around this size so they stay in L2/L3 while the GEMM reads them.
_TILE_BYTES = 2 << 20


class Scratch:
    """Buffers reused across runs, keyed by role, shape and dtype; the least recently
    used go once more than `max_entries` are held. Never shared between threads."""

    def __init__(self, max_entries=None):
        self._buffers = OrderedDict()
        self.max_entries = max_entries

    def _get(self, key, make):
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = make()
            if self.max_entries is not None and len(self._buffers) > self.max_entries:
                self._buffers.popitem(last=False)
        elif self.max_entries is not None:
            self._buffers.move_to_end(key)
        return buf

    def empty(self, role, shape, dtype):
        return self._get((role, tuple(shape), np.dtype(dtype).str), lambda: np.empty(shape, dtype))

    def zeros(self, role, shape, dtype, fill=0.0):
        """A buffer whose border is `fill`; callers only ever rewrite its interior."""
        return self._get((role, tuple(shape), np.dtype(dtype).str, fill), lambda: np.full(shape, fill, dtype))


_thread_scratch = threading.local()


def default_scratch():
    """Per-thread buffers for callers that pass no Scratch (bounded, so shapes seen
    once do not pile up)."""
    scratch = getattr(_thread_scratch, "value", None)
    if scratch is None:
        scratch = _thread_scratch.value = Scratch(max_entries=64)
    return scratch


def pad_input(x, pads, value=0.0):
    """x: (N, C, *spatial); pads: begins then ends, one per spatial dim."""
    k = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + k]) for i in range(k)]
    return np.pad(x, width, mode="constant", constant_values=value)


def padded_image(scratch, role, img, pads, fill=0.0):
    """img (C, *S) copied into a reused buffer bordered with `fill` (img itself without pads).
    Negative pads crop."""
    k = img.ndim - 1
    if not any(pads):
        return img
    if any(p < 0 for p in pads):
        crop = (slice(None),) + tuple(slice(max(0, -pads[i]), img.shape[1 + i] - max(0, -pads[k + i]))
                                      for i in range(k))
        img = img[crop]
        pads = [max(0, p) for p in pads]
        if not any(pads):
            return img
    shape = (img.shape[0],) + tuple(img.shape[1 + i] + pads[i] + pads[k + i] for i in range(k))
    buf = (scratch or default_scratch()).zeros(role, shape, img.dtype, fill)
    interior = (slice(None),) + tuple(slice(pads[i], pads[i] + img.shape[1 + i]) for i in range(k))
    buf[interior] = img
    return buf


def windows(x, kernel, strides, dilations):
    """View (N, C, *out, *kernel) of x (already padded)."""
    k = len(kernel)
    span = [(kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    v = sliding_window_view(x, span, axis=tuple(range(2, 2 + k)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    return v[index]


def conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation):
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1


def offset_view(xp, offset, dilations, strides, out_spatial, lead=1):
    """Strided view of xp (lead dims, *padded) holding the input each output position
    reads at kernel offset `offset`."""
    index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                  for o, d, s, n in zip(offset, dilations, strides, out_spatial))
    return xp[(slice(None),) * lead + index]


def _finish(out, b, activation):
    """Bias and activation in place on the (N, M, *out) result."""
    if b is not None:
        out += b.reshape((1, -1) + (1,) * (out.ndim - 2)).astype(out.dtype, copy=False)
    if activation == "relu":
        np.maximum(out, 0, out=out)
    elif activation is not None:
        raise ValueError("unsupported fused activation '%s'" % activation)
    return out


def conv_nchw(x, w, b, strides, pads, dilations, group, *, scratch=None, activation=None):
    """x (N, C, *S), w (M, C/group, *K), b (M,) or None -> (N, M, *out)."""
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    n, c = x.shape[:2]
    m = w.shape[0]
    strides, dilations, pads = list(strides), list(dilations), list(pads)
    out_spatial = tuple(conv_output_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[k + i],
                                         dilations[i]) for i in range(k))
    if any(o <= 0 for o in out_spatial):
        padded = [x.shape[2 + i] + pads[i] + pads[k + i] for i in range(k)]
        raise ValueError("kernel %s does not fit the padded input %s" % (list(kernel), padded))
    if c != w.shape[1] * group or m % group:
        raise ValueError("filter of shape %s with group %d does not fit %d input channels"
                         % (list(w.shape), group, c))
    dtype = np.result_type(x.dtype, w.dtype)
    x = x.astype(dtype, copy=False)
    w = np.ascontiguousarray(w, dtype=dtype)
    scratch = scratch or default_scratch()
    out = np.empty((n, m) + out_spatial, dtype=dtype)
    if all(kk == 1 for kk in kernel) and not any(pads):
        _pointwise(x, w, strides, group, out)
    elif group == c and group > 1:
        _depthwise(x, w, strides, pads, dilations, out, scratch)
    else:
        _im2col_gemm(x, w, strides, pads, dilations, group, out, scratch)
    return _finish(out, b, activation)


def _pointwise(x, w, strides, group, out):
    n, c = x.shape[:2]
    m = w.shape[0]
    if any(s != 1 for s in strides):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    p = int(np.prod(out.shape[2:], dtype=np.int64))
    wg = w.reshape(group, m // group, c // group)
    for i in range(n):
        xi = np.ascontiguousarray(x[i]).reshape(group, c // group, p)
        np.matmul(wg, xi, out=out[i].reshape(group, m // group, p))


def _depthwise(x, w, strides, pads, dilations, out, scratch):
    """One input channel per group: sum over kernel offsets of weight * shifted input."""
    n, c = x.shape[:2]
    m = w.shape[0]
    mult = m // c
    kernel = w.shape[2:]
    k = len(kernel)
    out_spatial = out.shape[2:]
    wk = w.reshape((c, mult) + tuple(kernel))
    tmp = scratch.empty("dw_tmp", (c, mult) + tuple(out_spatial), out.dtype)
    for i in range(n):
        xp = padded_image(scratch, "dw_pad", x[i], pads)
        acc = out[i].reshape((c, mult) + tuple(out_spatial))
        first = True
        for offset in itertools.product(*(range(kk) for kk in kernel)):
            src = offset_view(xp, offset, dilations, strides, out_spatial)[:, None]
            wt = wk[(slice(None), slice(None)) + offset].reshape((c, mult) + (1,) * k)
            if first:
                np.multiply(src, wt, out=acc)
                first = False
            else:
                np.multiply(src, wt, out=tmp)
                acc += tmp


def _im2col_gemm(x, w, strides, pads, dilations, group, out, scratch):
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    kprod = int(np.prod(kernel, dtype=np.int64))
    out_spatial = out.shape[2:]
    cg, mg = c // group, m // group
    wg = w.reshape(group, mg, cg * kprod)
    # Tile over the outermost output dim so a column tile stays cache-sized.
    inner = int(np.prod(out_spatial[1:], dtype=np.int64))
    row_bytes = c * kprod * inner * out.dtype.itemsize
    rows_per_tile = max(1, min(out_spatial[0], _TILE_BYTES // max(1, row_bytes)))
    offsets = list(itertools.product(*(range(kk) for kk in kernel)))
    s0, d0 = strides[0], dilations[0]
    for i in range(n):
        xp = padded_image(scratch, "pad", x[i], pads)
        yi = out[i].reshape(group, mg, out_spatial[0] * inner)
        for r0 in range(0, out_spatial[0], rows_per_tile):
            rows = min(rows_per_tile, out_spatial[0] - r0)
            tile_spatial = (rows,) + tuple(out_spatial[1:])
            cols = scratch.empty("cols", (c,) + kernel + tile_spatial, out.dtype)
            # Rows of this tile start r0 * stride further along the first padded dim.
            xt = xp[:, r0 * s0: r0 * s0 + (rows - 1) * s0 + (kernel[0] - 1) * d0 + 1]
            for offset in offsets:
                cols[(slice(None),) + offset] = offset_view(xt, offset, dilations, strides, tile_spatial)
            np.matmul(wg, cols.reshape(group, cg * kprod, rows * inner),
                      out=yi[:, :, r0 * inner:(r0 + rows) * inner])
