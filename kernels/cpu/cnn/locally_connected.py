"""Locally connected layers (Caffe2's LC / LC1D / LC2D / LC3D): a convolution whose
filter differs at every output position. filter [*out, M, C, *kernel] (NCHW) or
[out_h, out_w, M, kh, kw, C] (NHWC), bias [*out, M].

Every output position p is one small GEMM, Y[:, :, p] = filter[p] @ patches[p], so
the whole layer is one batched matmul over positions of the patch matrix (the im2col
of the input, positions first). The backward pass is the same products transposed;
the input gradient adds the patch gradients back with the adjoint of im2col."""
import itertools

import numpy as np


def out_sizes(spatial, kernel, strides, pads, dilations):
    k = len(kernel)
    return [(spatial[i] + pads[i] + pads[k + i] - (dilations[i] * (kernel[i] - 1) + 1)) // strides[i] + 1
            for i in range(k)]


def _window(start, count, stride):
    return slice(start, start + stride * (count - 1) + 1, stride)


def patches(x, kernel, strides, pads, dilations):
    """x [N, C, *S] -> [P, C * prod(kernel), N] (rows ordered c, kernel offsets)."""
    n, c = x.shape[:2]
    k = len(kernel)
    out = out_sizes(x.shape[2:], kernel, strides, pads, dilations)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[k + i]) for i in range(k)])
    cols = np.empty((n, c) + tuple(kernel) + tuple(out), x.dtype)
    for offs in itertools.product(*(range(kk) for kk in kernel)):
        view = xp[(slice(None), slice(None)) + tuple(_window(offs[i] * dilations[i], out[i], strides[i])
                                                     for i in range(k))]
        cols[(slice(None), slice(None)) + offs] = view
    p = int(np.prod(out))
    return np.ascontiguousarray(cols.reshape(n, -1, p).transpose(2, 1, 0)), out


def unpatch(dcols, x_shape, kernel, strides, pads, dilations):
    """The adjoint of patches: [P, C * prod(kernel), N] summed back into x_shape."""
    n, c = x_shape[:2]
    k = len(kernel)
    out = out_sizes(x_shape[2:], kernel, strides, pads, dilations)
    cols = dcols.transpose(2, 1, 0).reshape((n, c) + tuple(kernel) + tuple(out))
    xp = np.zeros((n, c) + tuple(x_shape[2 + i] + pads[i] + pads[k + i] for i in range(k)), dcols.dtype)
    for offs in itertools.product(*(range(kk) for kk in kernel)):
        where = (slice(None), slice(None)) + tuple(_window(offs[i] * dilations[i], out[i], strides[i])
                                                   for i in range(k))
        xp[where] += cols[(slice(None), slice(None)) + offs]
    return xp[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x_shape[2 + i]) for i in range(k))]


def _nchw_filter(w, nhwc, positions, m):
    """filter as [P, M, C * prod(kernel)] in the patches' row order."""
    if nhwc:                                   # [*out, M, kh, kw, C] -> [*out, M, C, kh, kw]
        w = np.moveaxis(w, -1, 3)
    return w.reshape(positions, m, -1)


def forward(x, w, b, kernel, strides, pads, dilations, nhwc):
    if nhwc:
        x = np.moveaxis(x, -1, 1)
    cols, out = patches(x, kernel, strides, pads, dilations)
    p, m = cols.shape[0], w.shape[len(out)]
    y = np.matmul(_nchw_filter(w, nhwc, p, m), cols)            # [P, M, N]
    if b is not None:
        y += b.reshape(p, m, 1)
    y = y.transpose(2, 1, 0).reshape((x.shape[0], m) + tuple(out))
    return np.ascontiguousarray(np.moveaxis(y, 1, -1) if nhwc else y).astype(x.dtype, copy=False)


def backward(x, w, dy, kernel, strides, pads, dilations, nhwc, need_dx):
    """(dfilter, dbias, dX or None)."""
    x_nchw = np.moveaxis(x, -1, 1) if nhwc else x
    dy_nchw = np.moveaxis(dy, -1, 1) if nhwc else dy
    cols, out = patches(x_nchw, kernel, strides, pads, dilations)
    p, m, n = cols.shape[0], w.shape[len(out)], x.shape[0]
    g = np.ascontiguousarray(dy_nchw.reshape(n, m, p).transpose(2, 1, 0))        # [P, M, N]
    dw = np.matmul(g, cols.transpose(0, 2, 1))                                     # [P, M, CK]
    if nhwc:
        c = x.shape[-1]
        dw = np.moveaxis(dw.reshape(w.shape[:len(out) + 1] + (c,) + tuple(kernel)), len(out) + 1, -1)
    dw = np.ascontiguousarray(dw).reshape(w.shape).astype(w.dtype, copy=False)
    db = g.sum(axis=2).reshape(tuple(out) + (m,)).astype(w.dtype, copy=False)
    dx = None
    if need_dx:
        dcols = np.matmul(_nchw_filter(w, nhwc, p, m).transpose(0, 2, 1), g)       # [P, CK, N]
        dx = unpatch(dcols, x_nchw.shape, kernel, strides, pads, dilations)
        dx = np.ascontiguousarray(np.moveaxis(dx, 1, -1) if nhwc else dx).astype(x.dtype, copy=False)
    return dw, db, dx
