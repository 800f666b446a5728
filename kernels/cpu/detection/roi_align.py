"""RoIAlign forward and backward (Mask R-CNN; Caffe2's RoIAlign / RoIAlignGradient).

Each output bin of a region averages grid_h x grid_w bilinear samples. Region
geometry is computed first, in float32 as Caffe2 does (`roi_geometry`): the start
corner, the bin size and the sampling grid of every region (sampling_ratio, or
ceil(region size / pooled size) when it is <= 0). The compiled kernels then
  * layout: NCHW inputs run the channels-last loops on transposed copies unless the
    input is much larger than the work (`_channels_last_pays`);
  * forward: spread the regions over the team (region r on thread r % blocks, so big
    and small regions mix); per region the sample taps (four flat positions and
    weights per sample) are worked out once into a per-thread buffer and reused by
    every channel, as Caffe2's pre-calculation does;
  * backward: split the channels over the team, so no two threads add into the same
    gradient plane (regions of one image overlap), each thread working out every
    region's taps once for its channels.
A sample outside [-1, H] x [-1, W] contributes nothing; one inside is clamped to the
map. A bin without samples (an empty region with aligned=1) is 0 (Caffe2 divides 0
by 0 there). Callers check the inputs first: finite regions, batch indices in
range, grids small enough (`samples_per_region`); the loops have no bounds checks.
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks

F32 = np.float32


def roi_geometry(rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned):
    """(batch index int64 [R], geometry float32 [R, 4] = start_h, start_w, bin_h, bin_w,
    grid int64 [R, 2] = grid_h, grid_w, region sizes float32 [R, 2] = h, w before the
    1x1 forcing). rois: [R, 4] (one image) or [R, 5] (batch index first)."""
    r = np.asarray(rois, F32)
    batch = r[:, 0].astype(np.int64) if r.shape[1] == 5 else np.zeros(r.shape[0], np.int64)
    c = r[:, r.shape[1] - 4:]
    offset, scale = F32(0.5 if aligned else 0.0), F32(spatial_scale)
    w1, h1 = c[:, 0] * scale - offset, c[:, 1] * scale - offset
    w2, h2 = c[:, 2] * scale - offset, c[:, 3] * scale - offset
    roi_w, roi_h = w2 - w1, h2 - h1
    sizes = np.stack([roi_h, roi_w], axis=1)
    if not aligned:
        roi_w, roi_h = np.maximum(roi_w, F32(1)), np.maximum(roi_h, F32(1))
    bin_h, bin_w = roi_h / F32(pooled_h), roi_w / F32(pooled_w)
    geom = np.ascontiguousarray(np.stack([h1, w1, bin_h, bin_w], axis=1), F32)
    if sampling_ratio > 0:
        grid = np.full((r.shape[0], 2), sampling_ratio, np.int64)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            grid = np.stack([np.ceil(bin_h), np.ceil(bin_w)], axis=1)
        grid = np.where(np.isfinite(grid), grid, 0).astype(np.int64)
    return batch, geom, np.ascontiguousarray(grid), sizes


def samples_per_region(grid, pooled_h, pooled_w):
    return grid[:, 0] * grid[:, 1] * (pooled_h * pooled_w)


@compiled(inline=True)
def _taps(H, W, PH, PW, start_h, start_w, bin_h, bin_w, gh, gw, pos, wts):
    """Sample taps of one region in (ph, pw, iy, ix) order: pos[k, 0:4] flat positions
    in an H x W plane (pos[k, 0] = -1 for a sample outside the map), wts[k, 0:4]."""
    ch = bin_h / np.float32(max(gh, 1))
    cw = bin_w / np.float32(max(gw, 1))
    hm1 = np.float32(H - 1)
    wm1 = np.float32(W - 1)
    k = 0
    for ph in range(PH):
        for pw in range(PW):
            for iy in range(gh):
                yy = start_h + np.float32(ph) * bin_h + (np.float32(iy) + np.float32(0.5)) * ch
                for ix in range(gw):
                    xx = start_w + np.float32(pw) * bin_w + (np.float32(ix) + np.float32(0.5)) * cw
                    if yy < -1.0 or yy > H or xx < -1.0 or xx > W:
                        pos[k, 0] = -1
                        k += 1
                        continue
                    y = min(max(yy, np.float32(0)), hm1)
                    x = min(max(xx, np.float32(0)), wm1)
                    yl = int(np.floor(y))
                    xl = int(np.floor(x))
                    yh = min(yl + 1, H - 1)
                    xh = min(xl + 1, W - 1)
                    py = y - np.float32(yl)
                    px = x - np.float32(xl)
                    qy = np.float32(1) - py
                    qx = np.float32(1) - px
                    pos[k, 0] = yl * W + xl
                    pos[k, 1] = yl * W + xh
                    pos[k, 2] = yh * W + xl
                    pos[k, 3] = yh * W + xh
                    wts[k, 0] = qy * qx
                    wts[k, 1] = qy * px
                    wts[k, 2] = py * qx
                    wts[k, 3] = py * px
                    k += 1


# layouts of the compiled kernels: image and RoI output planes (NCHW), channels last
# throughout (NHWC), or channels-last image with NCHW output / gradient
NCHW, NHWC, NHWC_IMAGE = 0, 1, 2


@compiled(parallel=True)
def _forward(x, batch, geom, grid, out, layout, max_samples, blocks):
    """x [N, C, H*W] (layout NCHW) or [N, H*W, C]; out [R, C, PH*PW] (NCHW, NHWC_IMAGE)
    or [R, PH*PW, C] (NHWC)."""
    R = out.shape[0]
    C = x.shape[1] if layout == 0 else x.shape[2]
    for t in prange(blocks):
        pos = np.empty((max_samples, 4), np.int64)
        wts = np.empty((max_samples, 4), np.float32)
        acc = np.empty(C, np.float32)
        for r in range(t, R, blocks):
            gh = grid[r, 0]
            gw = grid[r, 1]
            PH, PW, H, W = grid[r, 2], grid[r, 3], grid[r, 4], grid[r, 5]
            _taps(H, W, PH, PW, geom[r, 0], geom[r, 1], geom[r, 2], geom[r, 3], gh, gw, pos, wts)
            per_bin = gh * gw
            scale = np.float32(1.0) / np.float32(max(per_bin, 1))
            img = x[batch[r]]
            if layout == 0:
                for c in range(C):
                    plane = img[c]
                    o = out[r, c]
                    for b in range(PH * PW):
                        s = np.float32(0)
                        for k in range(b * per_bin, (b + 1) * per_bin):
                            if pos[k, 0] < 0:
                                continue
                            s += (wts[k, 0] * plane[pos[k, 0]] + wts[k, 1] * plane[pos[k, 1]]
                                  + wts[k, 2] * plane[pos[k, 2]] + wts[k, 3] * plane[pos[k, 3]])
                        o[b] = s * scale
                continue
            for b in range(PH * PW):
                for c in range(C):
                    acc[c] = 0
                for k in range(b * per_bin, (b + 1) * per_bin):
                    if pos[k, 0] < 0:
                        continue
                    r1 = img[pos[k, 0]]
                    r2 = img[pos[k, 1]]
                    r3 = img[pos[k, 2]]
                    r4 = img[pos[k, 3]]
                    w1, w2, w3, w4 = wts[k, 0], wts[k, 1], wts[k, 2], wts[k, 3]
                    for c in range(C):
                        acc[c] += w1 * r1[c] + w2 * r2[c] + w3 * r3[c] + w4 * r4[c]
                if layout == 1:
                    row = out[r, b]
                    for c in range(C):
                        row[c] = acc[c] * scale
                else:
                    for c in range(C):
                        out[r, c, b] = acc[c] * scale


@compiled(parallel=True)
def _backward(dy, batch, geom, grid, dx, layout, max_samples, blocks):
    """dy [R, C, PH*PW] (NCHW, NHWC_IMAGE) or [R, PH*PW, C] (NHWC) added into dx
    [N, C, H*W] (NCHW) or [N, H*W, C]."""
    R = dy.shape[0]
    C = dx.shape[1] if layout == 0 else dx.shape[2]
    for t in prange(blocks):
        c0 = t * C // blocks
        c1 = (t + 1) * C // blocks
        pos = np.empty((max_samples, 4), np.int64)
        wts = np.empty((max_samples, 4), np.float32)
        g = np.empty(C, np.float32)
        for r in range(R):
            gh = grid[r, 0]
            gw = grid[r, 1]
            PH, PW, H, W = grid[r, 2], grid[r, 3], grid[r, 4], grid[r, 5]
            _taps(H, W, PH, PW, geom[r, 0], geom[r, 1], geom[r, 2], geom[r, 3], gh, gw, pos, wts)
            per_bin = gh * gw
            scale = np.float32(1.0) / np.float32(max(per_bin, 1))
            img = dx[batch[r]]
            n = c1 - c0
            gs = g[c0:c1]
            for b in range(PH * PW):
                if layout == 1:
                    row = dy[r, b, c0:c1]
                    for c in range(n):
                        gs[c] = row[c] * scale
                else:
                    for c in range(n):
                        gs[c] = dy[r, c0 + c, b] * scale
                for k in range(b * per_bin, (b + 1) * per_bin):
                    if pos[k, 0] < 0:
                        continue
                    w1, w2, w3, w4 = wts[k, 0], wts[k, 1], wts[k, 2], wts[k, 3]
                    if layout == 0:
                        p1, p2, p3, p4 = pos[k, 0], pos[k, 1], pos[k, 2], pos[k, 3]
                        for c in range(n):
                            plane = img[c0 + c]
                            plane[p1] += gs[c] * w1
                            plane[p2] += gs[c] * w2
                            plane[p3] += gs[c] * w3
                            plane[p4] += gs[c] * w4
                    else:
                        # slices, so the loops vectorise (see jit.py); four separate passes
                        # because two taps may be one pixel (clamped at the border)
                        r1 = img[pos[k, 0], c0:c1]
                        r2 = img[pos[k, 1], c0:c1]
                        r3 = img[pos[k, 2], c0:c1]
                        r4 = img[pos[k, 3], c0:c1]
                        for c in range(n):
                            r1[c] += gs[c] * w1
                        for c in range(n):
                            r2[c] += gs[c] * w2
                        for c in range(n):
                            r3[c] += gs[c] * w3
                        for c in range(n):
                            r4[c] += gs[c] * w4


def _taps_numpy(H, W, PH, PW, geom_r, gh, gw):
    """(pos [S, 4], wts [S, 4], valid [S]) for one region, in _taps' order."""
    start_h, start_w, bin_h, bin_w = (F32(v) for v in geom_r)
    ch, cw = bin_h / F32(max(gh, 1)), bin_w / F32(max(gw, 1))
    ph = np.arange(PH, dtype=F32)[:, None, None, None]
    pw = np.arange(PW, dtype=F32)[None, :, None, None]
    iy = np.arange(gh, dtype=F32)[None, None, :, None]
    ix = np.arange(gw, dtype=F32)[None, None, None, :]
    shape = (PH, PW, gh, gw)
    yy = np.broadcast_to(start_h + ph * bin_h + (iy + F32(0.5)) * ch, shape).reshape(-1)
    xx = np.broadcast_to(start_w + pw * bin_w + (ix + F32(0.5)) * cw, shape).reshape(-1)
    valid = ~((yy < -1.0) | (yy > H) | (xx < -1.0) | (xx > W))
    y = np.minimum(np.maximum(yy, F32(0)), F32(H - 1))
    x = np.minimum(np.maximum(xx, F32(0)), F32(W - 1))
    yl, xl = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    yh, xh = np.minimum(yl + 1, H - 1), np.minimum(xl + 1, W - 1)
    py, px = y - yl.astype(F32), x - xl.astype(F32)
    qy, qx = F32(1) - py, F32(1) - px
    pos = np.stack([yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh], axis=1)
    wts = np.stack([qy * qx, qy * px, py * qx, py * px], axis=1).astype(F32)
    pos[~valid] = 0
    wts[~valid] = 0
    return pos, wts, valid


@_forward.numpy_twin
def _forward_numpy(x, batch, geom, grid, out, layout, max_samples, blocks):
    nhwc = layout != NCHW
    for r in range(out.shape[0]):
        gh, gw, PH, PW, H, W = (int(v) for v in grid[r])
        pos, wts, _ = _taps_numpy(H, W, PH, PW, geom[r], gh, gw)
        img = x[batch[r]]                          # [C, HW] or [HW, C]
        scale = F32(1) / F32(max(gh * gw, 1))
        if nhwc:
            taps = sum(img[pos[:, k]] * wts[:, k:k + 1] for k in range(4))        # [S, C]
            y = taps.reshape(PH * PW, gh * gw, -1).sum(axis=1) * scale
            out[r] = y if layout == NHWC else y.T
        else:
            taps = sum(img[:, pos[:, k]] * wts[None, :, k] for k in range(4))     # [C, S]
            out[r] = taps.reshape(-1, PH * PW, gh * gw).sum(axis=2) * scale


@_backward.numpy_twin
def _backward_numpy(dy, batch, geom, grid, dx, layout, max_samples, blocks):
    nhwc = layout != NCHW
    for r in range(dy.shape[0]):
        gh, gw, PH, PW, H, W = (int(v) for v in grid[r])
        pos, wts, _ = _taps_numpy(H, W, PH, PW, geom[r], gh, gw)
        scale = F32(1) / F32(max(gh * gw, 1))
        bins = np.repeat(np.arange(PH * PW), gh * gw)
        img = dx[batch[r]]
        for k in range(4):
            if nhwc:
                rows = dy[r] if layout == NHWC else dy[r].T
                g = rows[bins] * (wts[:, k:k + 1] * scale)            # [S, C]
                np.add.at(img, pos[:, k], g)
            else:
                g = dy[r][:, bins] * (wts[None, :, k] * scale)        # [C, S]
                for c in range(img.shape[0]):
                    img[c] += np.bincount(pos[:, k], weights=g[c], minlength=img.shape[1]).astype(F32)


def _grid_table(grid, pooled_h, pooled_w, H, W):
    """grid columns the kernels read: gh, gw, PH, PW, H, W (one row per region)."""
    R = grid.shape[0]
    extra = np.tile(np.array([pooled_h, pooled_w, H, W], np.int64), (R, 1))
    return np.ascontiguousarray(np.concatenate([grid, extra], axis=1))


def _channels_last_pays(x_size, samples_total, channels):
    """Whether an NCHW call should run the channels-last kernels on transposed copies:
    their inner loops run along the channels (contiguous, vectorised), about 10x
    faster per sample than gathering plane by plane (box head, 512 RoIs x 256
    channels: 472 -> 50 ms at one thread), and the two transposes cost about one pass
    over the input and one over the output. Worth it unless the input dwarfs the work."""
    return samples_total * channels >= x_size


def roi_align(x, rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned, nhwc=False):
    """Y [R, C, pooled_h, pooled_w] (nhwc: [R, pooled_h, pooled_w, C]) from float32 x
    [N, C, H, W] (nhwc: [N, H, W, C]) and rois [R, 4 or 5]."""
    N = x.shape[0]
    C, H, W = (x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape[1:]
    R = rois.shape[0]
    batch, geom, grid, _ = roi_geometry(rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned)
    if not (R and C):
        return np.zeros((R, pooled_h, pooled_w, C) if nhwc else (R, C, pooled_h, pooled_w), F32)
    samples = samples_per_region(grid, pooled_h, pooled_w)
    table = _grid_table(grid, pooled_h, pooled_w, H, W)
    layout = NHWC if nhwc else (NHWC_IMAGE if _channels_last_pays(x.size, int(samples.sum()), C) else NCHW)
    if layout == NCHW:
        flat = np.ascontiguousarray(x, F32).reshape(N, C, H * W)
    else:
        src = x if nhwc else x.transpose(0, 2, 3, 1)
        flat = np.ascontiguousarray(src, F32).reshape(N, H * W, C)
    out = np.empty((R, pooled_h * pooled_w, C) if nhwc else (R, C, pooled_h * pooled_w), F32)
    blocks = team_blocks(R, int(samples.mean()) * (C + 8))
    _forward(flat, batch, geom, table, out, layout, int(max(samples.max(), 1)), blocks)
    return out.reshape((R, pooled_h, pooled_w, C) if nhwc else (R, C, pooled_h, pooled_w))


def roi_align_gradient(x_shape, rois, dy, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned,
                       nhwc=False):
    """dX shaped x_shape from dY shaped like roi_align's output."""
    N = x_shape[0]
    C, H, W = (x_shape[3], x_shape[1], x_shape[2]) if nhwc else tuple(x_shape[1:])
    R = rois.shape[0]
    if not (R and C and N):
        return np.zeros(tuple(x_shape), F32)
    batch, geom, grid, _ = roi_geometry(rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned)
    samples = samples_per_region(grid, pooled_h, pooled_w)
    table = _grid_table(grid, pooled_h, pooled_w, H, W)
    x_size = int(np.prod(x_shape))
    layout = NHWC if nhwc else (NHWC_IMAGE if _channels_last_pays(x_size, int(samples.sum()), C) else NCHW)
    g = np.ascontiguousarray(dy, F32).reshape((R, pooled_h * pooled_w, C) if nhwc else (R, C, pooled_h * pooled_w))
    dx = np.zeros((N, C, H * W) if layout == NCHW else (N, H * W, C), F32)
    blocks = team_blocks(C, int(samples.sum()) * 4)
    _backward(g, batch, geom, table, dx, layout, int(max(samples.max(), 1)), blocks)
    if layout == NHWC_IMAGE:
        return np.ascontiguousarray(dx.reshape(N, H, W, C).transpose(0, 3, 1, 2))
    return dx.reshape(tuple(x_shape))
