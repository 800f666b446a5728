"""RoIPool (Fast R-CNN max pooling over regions; Caffe2's RoIPool and Detectron's
RoIPoolF, NCHW) and its gradient.

Region corners are rounded to the feature map (half away from zero, C's round);
each of pooled_h x pooled_w bins covers floor(p * size / pooled) .. ceil((p + 1) *
size / pooled) of the region, clipped to the map; an empty bin is 0 with argmax -1.
The argmax is the flat position within the H x W plane. The forward pass spreads
regions over the team, the backward pass channels; callers check batch indices,
finiteness and argmaxes first. Detectron's RoIPoolF is the same computation.
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks

F32 = np.float32


def region_corners(rois, spatial_scale):
    """(batch int64 [R], corners int64 [R, 4] = start_w, start_h, end_w, end_h)."""
    r = np.asarray(rois, F32)
    v = r[:, 1:5] * F32(spatial_scale)
    rounded = np.sign(v) * np.floor(np.abs(v) + F32(0.5))        # C's round()
    return r[:, 0].astype(np.int64), np.ascontiguousarray(rounded.astype(np.int64))


@compiled(parallel=True)
def _roi_pool(x, batch, corners, out, argmax, blocks):
    """x [N, C, H, W]; out / argmax [R, C, PH, PW]."""
    R, C, PH, PW = out.shape
    H = x.shape[2]
    W = x.shape[3]
    for t in prange(blocks):
        for r in range(t, R, blocks):
            sw, sh, ew, eh = corners[r, 0], corners[r, 1], corners[r, 2], corners[r, 3]
            roi_h = max(eh - sh + 1, 1)
            roi_w = max(ew - sw + 1, 1)
            bin_h = np.float32(roi_h) / np.float32(PH)
            bin_w = np.float32(roi_w) / np.float32(PW)
            img = x[batch[r]]
            for ph in range(PH):
                hs = min(max(int(np.floor(np.float32(ph) * bin_h)) + sh, 0), H)
                he = min(max(int(np.ceil(np.float32(ph + 1) * bin_h)) + sh, 0), H)
                for pw in range(PW):
                    ws = min(max(int(np.floor(np.float32(pw) * bin_w)) + sw, 0), W)
                    we = min(max(int(np.ceil(np.float32(pw + 1) * bin_w)) + sw, 0), W)
                    empty = he <= hs or we <= ws
                    for c in range(C):
                        plane = img[c]
                        best = np.float32(0) if empty else np.float32(-3.4028234663852886e38)
                        where = -1
                        for h in range(hs, he):
                            for w in range(ws, we):
                                if plane[h, w] > best:
                                    best = plane[h, w]
                                    where = h * W + w
                        out[r, c, ph, pw] = best
                        argmax[r, c, ph, pw] = where


@_roi_pool.numpy_twin
def _roi_pool_numpy(x, batch, corners, out, argmax, blocks):
    R, C, PH, PW = out.shape
    H, W = x.shape[2], x.shape[3]
    for r in range(R):
        sw, sh, ew, eh = (int(v) for v in corners[r])
        bin_h = F32(max(eh - sh + 1, 1)) / F32(PH)
        bin_w = F32(max(ew - sw + 1, 1)) / F32(PW)
        for ph in range(PH):
            hs = min(max(int(np.floor(F32(ph) * bin_h)) + sh, 0), H)
            he = min(max(int(np.ceil(F32(ph + 1) * bin_h)) + sh, 0), H)
            for pw in range(PW):
                ws = min(max(int(np.floor(F32(pw) * bin_w)) + sw, 0), W)
                we = min(max(int(np.ceil(F32(pw + 1) * bin_w)) + sw, 0), W)
                if he <= hs or we <= ws:
                    out[r, :, ph, pw] = 0
                    argmax[r, :, ph, pw] = -1
                    continue
                window = x[batch[r], :, hs:he, ws:we].reshape(C, -1)
                window = np.where(np.isnan(window), -np.inf, window)      # '>' never picks NaN
                # first position of the maximum, as the strict '>' scan finds it
                at = np.argmax(window, axis=1)
                best = window[np.arange(C), at]
                hh, ww = np.divmod(at, we - ws)
                where = (hh + hs) * W + (ww + ws)
                low = ~(best > F32(-3.4028234663852886e38))       # everything at -FLT_MAX or NaN
                out[r, :, ph, pw] = np.where(low, F32(-3.4028234663852886e38), best)
                argmax[r, :, ph, pw] = np.where(low, -1, where)


def roi_pool(x, rois, spatial_scale, pooled_h, pooled_w):
    """(Y [R, C, pooled_h, pooled_w], argmax int32 same shape) from x [N, C, H, W]
    and rois [R, 5]."""
    R, C = rois.shape[0], x.shape[1]
    out = np.empty((R, C, pooled_h, pooled_w), F32)
    argmax = np.empty((R, C, pooled_h, pooled_w), np.int32)
    if R and C:
        batch, corners = region_corners(rois, spatial_scale)
        _roi_pool(np.ascontiguousarray(x, F32), batch, corners, out, argmax,
                  team_blocks(R, C * pooled_h * pooled_w * 4))
    return out, argmax


@compiled(parallel=True)
def _roi_pool_backward(dy, argmax, batch, dx, blocks):
    """dy / argmax [R, C, PH * PW] (argmax in [-1, H * W)) added into dx [N, C, H * W].
    Thread t owns a slice of the channels, so no two threads add into one plane."""
    R, C, P = dy.shape
    for t in prange(blocks):
        c0 = t * C // blocks
        c1 = (t + 1) * C // blocks
        for r in range(R):
            img = dx[batch[r]]
            for c in range(c0, c1):
                plane = img[c]
                g = dy[r, c]
                a = argmax[r, c]
                for k in range(P):
                    if a[k] >= 0:
                        plane[a[k]] += g[k]


@_roi_pool_backward.numpy_twin
def _roi_pool_backward_numpy(dy, argmax, batch, dx, blocks):
    R, C, P = dy.shape
    N, _, HW = dx.shape
    plane = (batch[:, None] * C + np.arange(C)[None, :]) * HW
    flat = (plane[:, :, None] + argmax).reshape(-1)
    g = dy.reshape(-1)
    hit = argmax.reshape(-1) >= 0
    dx += np.bincount(flat[hit], weights=g[hit], minlength=dx.size).astype(F32).reshape(dx.shape)


def roi_pool_gradient(x_shape, rois, argmax, dy):
    """dX: each dY value added at its bin's argmax (bins with argmax -1 add nothing).
    Callers check argmax values lie in [-1, H * W) and batch indices in [0, N)."""
    N, C, H, W = x_shape
    dx = np.zeros((N, C, H * W), F32)
    R = rois.shape[0]
    if R and C:
        batch = np.asarray(rois, F32)[:, 0].astype(np.int64)
        a = np.ascontiguousarray(argmax, np.int64).reshape(R, C, -1)
        g = np.ascontiguousarray(dy, F32).reshape(R, C, -1)
        _roi_pool_backward(g, a, batch, dx, team_blocks(C, R * g.shape[2]))
    return dx.reshape(x_shape)
