"""PSRoIPool (R-FCN's position-sensitive RoI pooling; Detectron's PSRoIPool, which
Caffe2 ran on GPUs only) and its gradient, compiled on the team.

Output bin (ctop, ph, pw) of a region averages input channel (ctop * G + ph) * G + pw
(G = group_size = pooled size) over the bin's window. Region corners are rounded
(C's roundf) before spatial_scale, the end corner is exclusive (+1), and a region is
at least 0.1 x 0.1 on the map; bin windows are floor / ceil of the bin edges,
clipped to the map, and an empty window gives 0. All geometry is worked out with
NumPy first in float32, as Caffe2's kernel does (`bin_windows`), so the compiled
loops only read windows already clipped to the map and channels already checked.
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks

F32 = np.float32


def _c_round(v):
    """roundf: half away from zero."""
    return np.sign(v) * np.floor(np.abs(v) + F32(0.5))


def bin_windows(rois, spatial_scale, pooled, H, W):
    """(batch int64 [R], rows int64 [R, pooled, 2] = start, end, cols int64 [R, pooled, 2])
    of every bin, clipped to the H x W map."""
    r = np.asarray(rois, F32)
    scale = F32(spatial_scale)
    x1, y1 = _c_round(r[:, 1]) * scale, _c_round(r[:, 2]) * scale
    x2 = (_c_round(r[:, 3]) + F32(1)) * scale
    y2 = (_c_round(r[:, 4]) + F32(1)) * scale
    roi_w = np.maximum(x2 - x1, F32(0.1))
    roi_h = np.maximum(y2 - y1, F32(0.1))
    p = np.arange(pooled, dtype=F32)[None, :]

    def edges(start, size, limit):
        bin_size = (size / F32(pooled))[:, None]
        lo = np.floor(p * bin_size + start[:, None])
        hi = np.ceil((p + F32(1)) * bin_size + start[:, None])
        both = np.stack([lo, hi], axis=2)
        # clip in float first: a huge region must not overflow the int conversion
        return np.clip(both, 0, limit).astype(np.int64)
    return r[:, 0].astype(np.int64), np.ascontiguousarray(edges(y1, roi_h, H)), \
        np.ascontiguousarray(edges(x1, roi_w, W))


@compiled(parallel=True)
def _forward(x, batch, rows, cols, out, mapping, blocks):
    """x [N, C, H, W]; out / mapping [R, D, G, G] with D * G * G <= C."""
    R, D, G = out.shape[0], out.shape[1], out.shape[2]
    for t in prange(blocks):
        for r in range(t, R, blocks):
            img = x[batch[r]]
            for ctop in range(D):
                for ph in range(G):
                    hs, he = rows[r, ph, 0], rows[r, ph, 1]
                    for pw in range(G):
                        ws, we = cols[r, pw, 0], cols[r, pw, 1]
                        c = (ctop * G + ph) * G + pw
                        mapping[r, ctop, ph, pw] = c
                        if he <= hs or we <= ws:
                            out[r, ctop, ph, pw] = 0
                            continue
                        plane = img[c]
                        s = np.float32(0)
                        for h in range(hs, he):
                            row = plane[h]
                            for w in range(ws, we):
                                s += row[w]
                        out[r, ctop, ph, pw] = s / np.float32((he - hs) * (we - ws))


@_forward.numpy_twin
def _forward_numpy(x, batch, rows, cols, out, mapping, blocks):
    R, D, G = out.shape[0], out.shape[1], out.shape[2]
    for r in range(R):
        for ctop in range(D):
            for ph in range(G):
                hs, he = rows[r, ph]
                for pw in range(G):
                    ws, we = cols[r, pw]
                    c = (ctop * G + ph) * G + pw
                    mapping[r, ctop, ph, pw] = c
                    if he <= hs or we <= ws:
                        out[r, ctop, ph, pw] = 0
                        continue
                    window = x[batch[r], c, hs:he, ws:we]
                    out[r, ctop, ph, pw] = window.sum(dtype=F32) / F32((he - hs) * (we - ws))


@compiled(parallel=True)
def _backward(dy, mapping, batch, rows, cols, dx, blocks):
    """dy / mapping [R, D, G, G] (mapping values in [0, C)) added into dx [N, C, H, W].
    Thread t owns channels [t * C / blocks, (t + 1) * C / blocks): no two threads add
    into one plane, though regions of an image overlap."""
    R, D, G = dy.shape[0], dy.shape[1], dy.shape[2]
    C = dx.shape[1]
    for t in prange(blocks):
        c0 = t * C // blocks
        c1 = (t + 1) * C // blocks
        for r in range(R):
            img = dx[batch[r]]
            for ctop in range(D):
                for ph in range(G):
                    hs, he = rows[r, ph, 0], rows[r, ph, 1]
                    for pw in range(G):
                        c = mapping[r, ctop, ph, pw]
                        if c < c0 or c >= c1:
                            continue
                        ws, we = cols[r, pw, 0], cols[r, pw, 1]
                        if he <= hs or we <= ws:
                            continue
                        g = dy[r, ctop, ph, pw] / np.float32((he - hs) * (we - ws))
                        plane = img[c]
                        for h in range(hs, he):
                            row = plane[h, ws:we]
                            for w in range(we - ws):
                                row[w] += g


@_backward.numpy_twin
def _backward_numpy(dy, mapping, batch, rows, cols, dx, blocks):
    R, D, G = dy.shape[0], dy.shape[1], dy.shape[2]
    for r in range(R):
        for ctop in range(D):
            for ph in range(G):
                hs, he = rows[r, ph]
                for pw in range(G):
                    ws, we = cols[r, pw]
                    if he <= hs or we <= ws:
                        continue
                    g = dy[r, ctop, ph, pw] / F32((he - hs) * (we - ws))
                    dx[batch[r], mapping[r, ctop, ph, pw], hs:he, ws:we] += g


def ps_roi_pool(x, rois, spatial_scale, group_size, output_dim):
    """(Y [R, output_dim, G, G], mapping int32 same shape) from float32 x [N, C, H, W]
    (C >= output_dim * G * G) and rois [R, 5] with batch indices in range."""
    R, G = rois.shape[0], group_size
    out = np.zeros((R, output_dim, G, G), F32)
    mapping = np.zeros((R, output_dim, G, G), np.int32)
    if R and output_dim:
        batch, rows, cols = bin_windows(rois, spatial_scale, G, x.shape[2], x.shape[3])
        work = output_dim * G * G * max(1, x.shape[2] * x.shape[3] // (G * G))
        _forward(np.ascontiguousarray(x, F32), batch, rows, cols, out, mapping, team_blocks(R, work))
    return out, mapping


def ps_roi_pool_gradient(x_shape, rois, mapping, dy, spatial_scale, group_size):
    """dX shaped x_shape: each dY value spread evenly over its bin's window of the
    channel `mapping` names (checked by the caller to lie in [0, C))."""
    dx = np.zeros(tuple(x_shape), F32)
    R, C = rois.shape[0], x_shape[1]
    if R and C and dy.size:
        batch, rows, cols = bin_windows(rois, spatial_scale, group_size, x_shape[2], x_shape[3])
        _backward(np.ascontiguousarray(dy, F32), np.ascontiguousarray(mapping, np.int64), batch, rows, cols,
                  dx, team_blocks(C, dy.size * 4))
    return dx
