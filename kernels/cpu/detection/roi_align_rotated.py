"""RoIAlignRotated forward and backward, vectorised NumPy per region.

A region is [batch_index, center_x, center_y, width, height, angle (degrees,
counter-clockwise)]. Its pooled_h x pooled_w bins tile the unrotated box centred on
the origin; each bin averages a grid of samples, each sample rotated by the angle
and moved to the region's centre, then read bilinearly with RoIAlign's border rules
(outside [-1, H] x [-1, W]: nothing; inside: clamped to the map). Geometry in float32."""
import numpy as np

F32 = np.float32


def region_geometry(rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned):
    """Per region: batch index, centre (cy, cx), bin size (bin_h, bin_w), grid (gh, gw),
    cos and sin of the angle, and the raw scaled sizes (h, w) before the 1x1 forcing."""
    r = np.asarray(rois, F32)
    scale, offset = F32(spatial_scale), F32(0.5 if aligned else 0.0)
    cx, cy = r[:, 1] * scale - offset, r[:, 2] * scale - offset
    w, h = r[:, 3] * scale, r[:, 4] * scale
    sizes = np.stack([h, w], axis=1)
    if not aligned:
        w, h = np.maximum(w, F32(1)), np.maximum(h, F32(1))
    bin_h, bin_w = h / F32(pooled_h), w / F32(pooled_w)
    if sampling_ratio > 0:
        grid = np.full((r.shape[0], 2), sampling_ratio, np.int64)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            grid = np.stack([np.ceil(bin_h), np.ceil(bin_w)], axis=1)
        grid = np.where(np.isfinite(grid), grid, 0).astype(np.int64)
    theta = r[:, 5].astype(np.float64) * np.pi / 180.0
    return dict(batch=r[:, 0].astype(np.int64), cy=cy, cx=cx, bin_h=bin_h, bin_w=bin_w, grid=grid,
                cos=np.cos(theta).astype(F32), sin=np.sin(theta).astype(F32), sizes=sizes)


def _taps(g, k, H, W, PH, PW):
    """Flat positions [PH*PW, S, 4] (-1 where a sample is outside) and weights of region k."""
    gh, gw = int(g["grid"][k, 0]), int(g["grid"][k, 1])
    bh, bw = g["bin_h"][k], g["bin_w"][k]
    ph = np.arange(PH, dtype=F32)[:, None, None, None]
    pw = np.arange(PW, dtype=F32)[None, :, None, None]
    iy = np.arange(gh, dtype=F32)[None, None, :, None]
    ix = np.arange(gw, dtype=F32)[None, None, None, :]
    yy = -bh * F32(PH) / F32(2) + ph * bh + (iy + F32(0.5)) * bh / F32(max(gh, 1))
    xx = -bw * F32(PW) / F32(2) + pw * bw + (ix + F32(0.5)) * bw / F32(max(gw, 1))
    yy, xx = np.broadcast_arrays(yy, xx)
    c, s = g["cos"][k], g["sin"][k]
    y = (yy * c - xx * s + g["cy"][k]).reshape(PH * PW, gh * gw)
    x = (yy * s + xx * c + g["cx"][k]).reshape(PH * PW, gh * gw)
    outside = (y < -1.0) | (y > H) | (x < -1.0) | (x > W)
    y = np.clip(y, F32(0), F32(H - 1))
    x = np.clip(x, F32(0), F32(W - 1))
    yl, xl = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    yh, xh = np.minimum(yl + 1, H - 1), np.minimum(xl + 1, W - 1)
    py, px = y - yl.astype(F32), x - xl.astype(F32)
    qy, qx = F32(1) - py, F32(1) - px
    pos = np.stack([yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh], axis=-1)
    wts = np.stack([qy * qx, qy * px, py * qx, py * px], axis=-1)
    wts[outside] = 0
    pos[outside] = 0
    return pos, wts, F32(1) / F32(max(gh * gw, 1))


def forward(x, rois, spatial_scale, PH, PW, sampling_ratio, aligned):
    """x [N, C, H, W] -> [R, C, PH, PW]."""
    n, C, H, W = x.shape
    g = region_geometry(rois, spatial_scale, PH, PW, sampling_ratio, aligned)
    out = np.zeros((rois.shape[0], C, PH * PW), F32)
    flat = x.reshape(n, C, H * W).astype(F32)
    for k in range(rois.shape[0]):
        pos, wts, scale = _taps(g, k, H, W, PH, PW)
        vals = flat[g["batch"][k]][:, pos]                     # [C, bins, S, 4]
        out[k] = (vals * wts).sum(axis=(2, 3)) * scale
    return out.reshape(rois.shape[0], C, PH, PW)


def backward(x_shape, rois, dy, spatial_scale, PH, PW, sampling_ratio, aligned):
    """dY [R, C, PH, PW] spread back onto dX [N, C, H, W]."""
    n, C, H, W = x_shape
    g = region_geometry(rois, spatial_scale, PH, PW, sampling_ratio, aligned)
    dx = np.zeros((n, C, H * W), np.float64)
    d = dy.reshape(rois.shape[0], C, PH * PW).astype(np.float64)
    for k in range(rois.shape[0]):
        pos, wts, scale = _taps(g, k, H, W, PH, PW)
        contrib = d[k][:, :, None, None] * wts[None] * scale   # [C, bins, S, 4]
        for c in range(C):
            dx[g["batch"][k], c] += np.bincount(pos.reshape(-1), contrib[c].reshape(-1), minlength=H * W)
    return dx.reshape(x_shape).astype(F32)
