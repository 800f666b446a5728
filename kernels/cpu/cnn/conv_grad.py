"""Gradient of the N-d grouped convolution (NCHW), Caffe2's ConvGradient.

Public:
    conv_backward(x, w, dy, strides, pads, dilations, group, need_dx=True, need_db=True)
        -> (dw, db or None, dx or None)

One im2col buffer holds every input value each output position reads, laid out
(C, taps, N, P) so a group's block is one (Cg*taps, N*P) matrix: the filter
gradient is one GEMM per group (dY of the group times that block transposed), and
the input gradient is the filter transposed times dY (one GEMM per group) scattered
back tap by tap (col2im: one strided add per kernel tap). GEMMs run on the team
(tensor/team_gemm). Shapes and arguments are checked by the caller.
"""
import itertools
import math

import numpy as np

from ..math.team_gemm import gemm_into
from .conv import offset_view, pad_input


def _taps(kernel):
    return list(itertools.product(*[range(k) for k in kernel]))


def conv_backward(x, w, dy, strides, pads, dilations, group, need_dx=True, need_db=True):
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    out_spatial = tuple(dy.shape[2:])
    p = math.prod(out_spatial)
    taps = _taps(kernel)
    t = len(taps)
    cg, mg = c // group, m // group
    dtype = np.result_type(x.dtype, w.dtype, dy.dtype)
    if dtype.kind != "f":
        dtype = np.dtype(np.float32)

    xp = pad_input(x.astype(dtype, copy=False), pads)
    cols = np.empty((c, t, n) + out_spatial, dtype)
    for j, offset in enumerate(taps):
        view = offset_view(xp, offset, dilations, strides, out_spatial, lead=2)   # (N, C, *out)
        cols[:, j] = np.moveaxis(view, 1, 0)
    cols_g = cols.reshape(group, cg * t, n * p)

    # dY as (G, Mg, N*P): the batch joins the spatial positions of each output channel
    dy_g = np.ascontiguousarray(np.moveaxis(dy.astype(dtype, copy=False).reshape(n, m, p), 1, 0)).reshape(
        group, mg, n * p)
    dw = gemm_into(dy_g, cols_g.transpose(0, 2, 1), np.empty((group, mg, cg * t), dtype))
    dw = dw.reshape(w.shape)
    db = dy_g.sum(axis=2, dtype=np.float64).astype(dtype).reshape(m) if need_db else None
    if not need_dx:
        return dw, db, None

    w_g = np.ascontiguousarray(w.astype(dtype, copy=False)).reshape(group, mg, cg * t)
    dcols = gemm_into(w_g.transpose(0, 2, 1), dy_g, np.empty((group, cg * t, n * p), dtype))
    dcols = dcols.reshape((c, t, n) + out_spatial)
    dxp = np.zeros(xp.shape, dtype)
    for j, offset in enumerate(taps):
        view = offset_view(dxp, offset, dilations, strides, out_spatial, lead=2)
        view += np.moveaxis(dcols[:, j], 0, 1)
    interior = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(k))
    dx = np.ascontiguousarray(dxp[interior]) if any(pads) else dxp
    return dw, db, dx.astype(x.dtype, copy=False)
