"""The image ops of the detection heads: nearest-neighbour resize (Detectron's FPN
top-down path) and its gradient, im2col / col2im, and RMAC regions."""
import numpy as np

F32 = np.float32


def nearest_source(out_size, in_size, scale):
    """Source index of each output position: min(int(o / scale), in_size - 1), the
    division in float32 as Caffe2 computes it."""
    o = np.arange(out_size, dtype=F32)
    return np.minimum((o / F32(scale)).astype(np.int64), in_size - 1)


def resize_output_size(in_size, scale):
    """Caffe2's int(in_size * scale), the product in float32."""
    return int(F32(in_size) * F32(scale))


def resize_nearest(x, height_scale, width_scale, nhwc):
    ha, wa = (1, 2) if nhwc else (2, 3)
    H, W = x.shape[ha], x.shape[wa]
    iy = nearest_source(resize_output_size(H, height_scale), H, height_scale)
    ix = nearest_source(resize_output_size(W, width_scale), W, width_scale)
    return np.ascontiguousarray(np.take(np.take(x, iy, axis=ha), ix, axis=wa))


def _sum_into(dy, index, size, axis):
    """Sum the slices of dy along axis that map to the same source index (index is
    non-decreasing, so equal entries are runs) into an array with `size` there."""
    shape = list(dy.shape)
    shape[axis] = size
    out = np.zeros(shape, F32)
    if index.size == 0:
        return out
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    sums = np.add.reduceat(dy, starts, axis=axis)
    where = [slice(None)] * dy.ndim
    where[axis] = index[starts]
    out[tuple(where)] = sums
    return out


def resize_nearest_gradient(dy, x_shape, height_scale, width_scale, nhwc):
    """dX [x_shape]: every dY value added at the position it was copied from."""
    ha, wa = (1, 2) if nhwc else (2, 3)
    H, W = x_shape[ha], x_shape[wa]
    iy = nearest_source(dy.shape[ha], H, height_scale)
    ix = nearest_source(dy.shape[wa], W, width_scale)
    g = _sum_into(np.asarray(dy, F32), iy, H, ha)
    return _sum_into(g, ix, W, wa)


def conv_out_size(size, kernel, dilation, stride, pad):
    return (size + 2 * pad - (dilation * (kernel - 1) + 1)) // stride + 1


def im2col(x, kernel, dilation, stride, pad, nhwc):
    """Caffe2's Im2Col: NCHW x [N, C, H, W] -> [N, C*kh*kw, out_h, out_w] (rows c, i, j);
    NHWC x [N, H, W, C] -> [N, out_h, out_w, kh*kw*C] (columns i, j, c)."""
    (kh, kw), (dh, dw), (sh, sw) = kernel, dilation, stride
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    N, C, H, W = x.shape
    oh, ow = conv_out_size(H, kh, dh, sh, pad), conv_out_size(W, kw, dw, sw, pad)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((N, C, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
    if nhwc:
        return np.ascontiguousarray(cols.transpose(0, 4, 5, 2, 3, 1)).reshape(N, oh, ow, kh * kw * C)
    return cols.reshape(N, C * kh * kw, oh, ow)


def col2im(cols, image_shape, kernel, dilation, stride, pad, nhwc):
    """Caffe2's Col2Im: the adjoint of im2col (overlapping taps add up) into image_shape."""
    (kh, kw), (dh, dw), (sh, sw) = kernel, dilation, stride
    if nhwc:
        N, H, W, C = image_shape
    else:
        N, C, H, W = image_shape
    oh, ow = conv_out_size(H, kh, dh, sh, pad), conv_out_size(W, kw, dw, sw, pad)
    if nhwc:
        c6 = cols.reshape(N, oh, ow, kh, kw, C).transpose(0, 5, 3, 4, 1, 2)
    else:
        c6 = cols.reshape(N, C, kh, kw, oh, ow)
    xp = np.zeros((N, C, H + 2 * pad, W + 2 * pad), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += c6[:, :, i, j]
    out = xp[:, :, pad:pad + H, pad:pad + W]
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1) if nhwc else out)


def rmac_regions(batch_size, H, W, scales, overlap):
    """RMAC region grid ([batch, x1, y1, x2, y2] rows, float32) for an N x C x H x W map:
    square regions of side 2 * min(H, W) / (l + 1) at scales l = 1..scales, laid out with
    the step count (1..6) along the long side whose overlap is closest to `overlap`."""
    min_side = min(H, W)
    step = 0
    if W != H:
        # Caffe2 rounds b to float, then evaluates the error in double (int square,
        # float overlap widened) and rounds it to float: ties such as H=5, W=9 at
        # overlap 0.4 are decided by exactly these roundings, so keep them.
        best = F32(np.finfo(F32).max)
        sq = min_side * min_side
        for idx in range(1, 7):
            b = float(F32((max(H, W) - min_side) / (1.0 * idx)))
            val = F32(abs((sq - min_side * b) / sq - float(F32(overlap))))
            if val < best:
                step, best = idx, val
    wd = step if W > H else 0
    hd = step if H > W else 0
    rows = []
    for level in range(1, scales + 1):
        size = 2 * min_side // (level + 1)
        if size == 0:
            break
        bw = F32((W - size) / (1.0 * (level + wd - 1))) if level + wd - 1 > 0 else F32(0)
        bh = F32((H - size) / (1.0 * (level + hd - 1))) if level + hd - 1 > 0 else F32(0)
        for i in range(level + wd):
            for j in range(level + hd):
                x1 = int(bw * F32(i))
                y1 = int(bh * F32(j))
                if x1 + size > W:
                    x1 -= x1 + size - W
                if y1 + size > H:
                    y1 -= y1 + size - H
                rows.append((0, x1, y1, x1 + size - 1, y1 + size - 1))
    one = np.array(rows, F32).reshape(-1, 5)
    out = np.tile(one, (batch_size, 1))
    out[:, 0] = np.repeat(np.arange(batch_size, dtype=F32), one.shape[0])
    return out
