"""Deformable convolution (2-D): each kernel tap reads the input at its regular
position plus a learned offset (bilinear, zero outside), optionally scaled by a
mask, and the sampled columns go through one GEMM per group."""
import numpy as np


def _bilinear(img, ys, xs):
    """img (C, H, W); ys, xs same shape S -> (C, *S), zero outside the image."""
    h, w = img.shape[1:]
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    out = np.zeros((img.shape[0],) + ys.shape, np.float64)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - np.abs(ys - yy)) * (1 - np.abs(xs - xx))
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            vals = img[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            out += vals * np.where(ok, weight, 0.0)
    return out


def deform_conv(x, w, offset, b, mask, strides, pads, dilations, group, offset_group):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    k = kh * kw
    base_y = (np.arange(oh) * strides[0] - pads[0])[None, :, None] + \
        (np.repeat(np.arange(kh), kw) * dilations[0])[:, None, None]          # (K, oh, 1)
    base_x = (np.arange(ow) * strides[1] - pads[1])[None, None, :] + \
        (np.tile(np.arange(kw), kh) * dilations[1])[:, None, None]            # (K, 1, ow)
    off = offset.reshape(n, offset_group, k, 2, oh, ow).astype(np.float64)
    msk = None if mask is None else mask.reshape(n, offset_group, k, oh, ow).astype(np.float64)
    cpo = c // offset_group
    cols = np.empty((n, c, k, oh, ow), np.float64)
    for i in range(n):
        for g in range(offset_group):
            ys = base_y + off[i, g, :, 0]
            xs = base_x + off[i, g, :, 1]
            sampled = _bilinear(x[i, g * cpo:(g + 1) * cpo].astype(np.float64), ys, xs)
            if msk is not None:
                sampled = sampled * msk[i, g]
            cols[i, g * cpo:(g + 1) * cpo] = sampled
    mg = m // group
    out = np.empty((n, m, oh, ow), np.float64)
    for g in range(group):
        wg = w[g * mg:(g + 1) * mg].reshape(mg, cg * k).astype(np.float64)
        cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * k, oh * ow)
        out[:, g * mg:(g + 1) * mg] = np.matmul(wg, cg_cols).reshape(n, mg, oh, ow)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)
