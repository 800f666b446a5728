"""Transposed convolution (the adjoint of a convolution) and its gradient, NCHW.

Forward: per group one GEMM on the team (team_gemm.gemm_into) turns the input into
columns, cols[n, (m, tap), pixel] = sum_c W[c, m, tap] * X[n, c, pixel], then col2im
adds each tap's column plane into the output at its offset. col2im is a compiled loop
over output planes (N * M over the team) that starts each plane from its bias and
adds the taps' rows in place; its NumPy twin adds one strided slice per tap. 1-D and
2-D float32 / float64 inputs take the compiled loop (1-D as height 1), others the twin.

Gradient: dX is the convolution of dY (placed in the uncropped output) with W,
dW the correlation of X with dY's windows, db the sum of dY; one im2col of dY
serves both products.

The callers check shapes and geometry: pads >= 0, strides and dilations >= 1, a
positive output size, W of shape (C, M / group, *kernel).
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from ..math.team_gemm import gemm_into
from .conv import windows


def output_size(size, kernel, stride, pad_begin, pad_end, dilation, adj):
    """(size - 1) * stride + (kernel - 1) * dilation + 1 + adj - pads."""
    return (size - 1) * stride + (kernel - 1) * dilation + 1 + adj - pad_begin - pad_end


@compiled(parallel=True)
def _col2im(cols, out, bias, has_bias, sh, sw, dh, dw, pt, pl, blocks):
    """out[n, m] = bias[m] + the sum over taps (ki, kj) of cols[g, n, mg, ki, kj] placed
    at rows ih * sh + ki * dh - pt and columns iw * sw + kj * dw - pl (cropped to the
    plane); cols (G, N, M / G, kh, kw, H, W), out (N, M, Ho, Wo); planes over the team."""
    groups, n_count, mg_count, kh, kw, h, w = cols.shape
    m_count, ho, wo = out.shape[1], out.shape[2], out.shape[3]
    planes = n_count * m_count
    for t in prange(blocks):
        for p in range(planes * t // blocks, planes * (t + 1) // blocks):
            n = p // m_count
            m = p % m_count
            g = m // mg_count
            mg = m % mg_count
            plane = out[n, m]
            start = bias[m] if has_bias else 0.0
            for r in range(ho):
                row = plane[r]
                for c in range(wo):
                    row[c] = start
            for ki in range(kh):
                # input rows whose output row ih * sh + ki * dh - pt lies in [0, ho)
                first = pt - ki * dh
                ih0 = 0 if first <= 0 else (first + sh - 1) // sh
                ih1 = min(h, (ho - 1 + pt - ki * dh) // sh + 1) if ho - 1 + pt - ki * dh >= 0 else 0
                for kj in range(kw):
                    firstc = pl - kj * dw
                    iw0 = 0 if firstc <= 0 else (firstc + sw - 1) // sw
                    iw1 = min(w, (wo - 1 + pl - kj * dw) // sw + 1) if wo - 1 + pl - kj * dw >= 0 else 0
                    if iw1 <= iw0:
                        continue
                    src = cols[g, n, mg, ki, kj]
                    count = iw1 - iw0
                    c0 = iw0 * sw + kj * dw - pl
                    for ih in range(ih0, ih1):
                        orow = plane[ih * sh + ki * dh - pt]
                        srow = src[ih, iw0:iw1]
                        if sw == 1:
                            dst = orow[c0:c0 + count]
                            for i in range(count):
                                dst[i] += srow[i]
                        else:
                            for i in range(count):
                                orow[c0 + i * sw] += srow[i]


@_col2im.numpy_twin
def _col2im_numpy(cols, out, bias, has_bias, sh, sw, dh, dw, pt, pl, blocks):
    groups, n_count, mg_count, kh, kw, h, w = cols.shape
    _col2im_nd(cols.reshape(groups, n_count, mg_count, kh * kw, h, w), out, bias if has_bias else None,
               (kh, kw), (sh, sw), (dh, dw), (pt, pl))


def _col2im_nd(cols, out, bias, kernel, strides, dilations, pads_begin):
    """The N-d col2im with NumPy: cols (G, N, M / G, taps, *in), out (N, M, *out)."""
    groups, n_count, mg_count = cols.shape[:3]
    spatial = cols.shape[4:]
    k = len(kernel)
    # an uncropped output so every tap's slice fits, then the crop
    full_shape = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    ends = [max(full_shape[i], pads_begin[i] + out.shape[2 + i]) for i in range(k)]
    full = np.zeros((n_count, groups * mg_count) + tuple(ends), out.dtype)
    for tap_index, tap in enumerate(np.ndindex(*kernel)):
        index = tuple(slice(tap[i] * dilations[i], tap[i] * dilations[i] + (spatial[i] - 1) * strides[i] + 1,
                            strides[i]) for i in range(k))
        plane = cols[:, :, :, tap_index].transpose(1, 0, 2, *range(3, 3 + k))
        full[(slice(None), slice(None)) + index] += plane.reshape((n_count, groups * mg_count) + tuple(spatial))
    crop = tuple(slice(pads_begin[i], pads_begin[i] + out.shape[2 + i]) for i in range(k))
    out[...] = full[(slice(None), slice(None)) + crop]
    if bias is not None:
        out += bias.reshape((1, -1) + (1,) * k).astype(out.dtype, copy=False)


def _columns(x, w, group):
    """cols (G, N, M / G * taps, pixels): per group W_g^T (M/G * taps, C/G) @ X_g."""
    n, c = x.shape[:2]
    cg = c // group
    pixels = int(np.prod(x.shape[2:]))
    rows = int(np.prod(w.shape[1:]))
    dtype = np.result_type(x.dtype, w.dtype)
    x3 = x.reshape(n, c, pixels)
    w2 = w.reshape(c, rows)
    cols = np.empty((group, n, rows, pixels), dtype)
    for g in range(group):
        a = np.broadcast_to(w2[g * cg:(g + 1) * cg].T, (n, rows, cg))
        gemm_into(a.astype(dtype, copy=False), x3[:, g * cg:(g + 1) * cg].astype(dtype, copy=False), cols[g])
    return cols


def conv_transpose(x, w, b, strides, pads, dilations, group, adjs):
    """y (N, M, *out) for x (N, C, *in), w (C, M / group, *kernel), b (M,) or None;
    pads = begins + ends; adjs add rows at the end of each spatial dim."""
    n = x.shape[0]
    kernel = w.shape[2:]
    k = len(kernel)
    spatial = x.shape[2:]
    out_spatial = tuple(output_size(spatial[i], kernel[i], strides[i], pads[i], pads[k + i], dilations[i], adjs[i])
                        for i in range(k))
    mg = w.shape[1]
    cols = _columns(x, w, group)
    dtype = cols.dtype
    out = np.empty((n, mg * group) + out_spatial, dtype)
    bias = np.zeros(mg * group, dtype) if b is None else b.astype(dtype, copy=False).reshape(-1)
    if k in (1, 2) and dtype in (np.float32, np.float64) and min(pads) >= 0:
        # 1-D runs as 2-D with height 1
        kh, kw = (1, kernel[0]) if k == 1 else kernel
        sh, sw = (1, strides[0]) if k == 1 else strides
        dh, dw = (1, dilations[0]) if k == 1 else dilations
        pt, pl = (0, pads[0]) if k == 1 else (pads[0], pads[1])
        h, wd = (1, spatial[0]) if k == 1 else spatial
        out4 = out.reshape(n, mg * group, 1, out_spatial[0]) if k == 1 else out
        cols7 = cols.reshape(group, n, mg, kh, kw, h, wd)
        _col2im(cols7, out4, bias, b is not None, sh, sw, dh, dw, pt, pl,
                team_blocks(n * mg * group, kh * kw * h * wd))
    else:
        _col2im_nd(cols.reshape((group, n, mg, int(np.prod(kernel))) + tuple(spatial)), out,
                   None if b is None else bias, kernel, strides, dilations, pads[:k])
    return out


def conv_transpose_gradient(x, w, dy, strides, pads, dilations, group, need_dx, need_db):
    """(dw, db or None, dx or None) of conv_transpose for output gradient dy."""
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    k = len(kernel)
    spatial = x.shape[2:]
    mg = w.shape[1]
    cg = c // group
    dtype = np.result_type(x.dtype, w.dtype, dy.dtype)
    # dy placed in the uncropped output; windows of it line up with the input pixels
    full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    ends = [max(full[i], pads[i] + dy.shape[2 + i]) for i in range(k)]
    dyf = np.zeros(dy.shape[:2] + tuple(ends), dtype)
    dyf[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + dy.shape[2 + i]) for i in range(k))] = dy
    win = windows(dyf, kernel, strides, dilations)[(slice(None), slice(None)) + tuple(slice(0, s) for s in spatial)]
    # (N, M, *in, *kernel) -> (N, G, M/G * taps, pixels)
    order = (0, 1) + tuple(range(2 + k, 2 + 2 * k)) + tuple(range(2, 2 + k))
    taps = int(np.prod(kernel))
    pixels = int(np.prod(spatial))
    cols = np.ascontiguousarray(win.transpose(order)).reshape(n, group, mg * taps, pixels)
    x3 = x.reshape(n, c, pixels).astype(dtype, copy=False)
    dw = np.empty((c, mg * taps), dtype)
    dx = np.empty((n, c, pixels), dtype) if need_dx else None
    w2 = w.reshape(c, mg * taps).astype(dtype, copy=False)
    for g in range(group):
        xg = x3[:, g * cg:(g + 1) * cg]
        cg_cols = cols[:, g]
        dw[g * cg:(g + 1) * cg] = np.tensordot(xg, cg_cols, axes=([0, 2], [0, 2]))
        if need_dx:
            dx[:, g * cg:(g + 1) * cg] = np.matmul(w2[g * cg:(g + 1) * cg], cg_cols)
    db = dy.reshape(dy.shape[0], dy.shape[1], -1).sum(axis=(0, 2)).astype(dtype) if need_db else None
    return dw.reshape(w.shape), db, None if dx is None else dx.reshape(x.shape)
