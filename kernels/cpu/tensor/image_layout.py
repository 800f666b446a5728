"""Image layout moves for NCHW tensors: space-to-batch and back, and padding with
its gradient. Each is one NumPy reshape / transpose copy (or np.pad). Callers check
shapes, block sizes and pads."""
import numpy as np


def space_to_batch(x, pads, block):
    """(N, C, H, W) -> (block * block * N, C, (H + pt + pb) / block, (W + pl + pr) / block);
    pads = (pt, pl, pb, pr), zero padding. Output batch (oh * block + ow) * N + n holds
    the pixels at offset (oh, ow) of each block."""
    pt, pl, pb, pr = pads
    n, c = x.shape[:2]
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho, wo = padded.shape[2] // block, padded.shape[3] // block
    blocks = padded.reshape(n, c, ho, block, wo, block).transpose(3, 5, 0, 1, 2, 4)
    return np.ascontiguousarray(blocks).reshape(block * block * n, c, ho, wo)


def batch_to_space(x, pads, block):
    """The inverse of space_to_batch: (block * block * N, C, H, W) -> (N, C, H * block - pt
    - pb, W * block - pl - pr)."""
    pt, pl, pb, pr = pads
    nb, c, h, w = x.shape
    n = nb // (block * block)
    full = x.reshape(block, block, n, c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * block, w * block)
    return np.ascontiguousarray(full[:, :, pt:h * block - pb, pl:w * block - pr])


def source_index(size, before, after, mode):
    """For each padded position along one axis, the input position it copies (-1:
    the constant value), by Caffe2's PadImage formulas. A negative pad crops: the
    positions start inside the input (before < 0) or stop short of its end (after < 0).
    Reflect and edge may give positions outside [0, size) (pads too large for the
    size, an empty axis): callers refuse those."""
    pos = np.arange(-before, size + after)
    if mode == "constant":
        return np.where((pos >= 0) & (pos < size), pos, -1)
    if mode == "edge":
        return np.minimum(np.maximum(pos, 0), size - 1)
    pos = np.abs(pos)                                    # reflect about 0 ...
    return np.minimum(pos, 2 * size - pos - 2)           # ... and about size - 1


def pad_image(x, pads, mode, value, spatial_axes):
    """x padded on its two spatial axes (pads = (top, left, bottom, right); a negative
    pad crops that side); modes constant (value), reflect (mirror without repeating
    the edge), edge (repeat the edge)."""
    (ha, wa), (pt, pl, pb, pr) = spatial_axes, pads
    if min(pads) >= 0 and (mode != "reflect" or max(pt, pb) < x.shape[ha] and max(pl, pr) < x.shape[wa]):
        width = [(0, 0)] * x.ndim        # np.pad agrees with Caffe2's formulas here
        width[ha], width[wa] = (pt, pb), (pl, pr)
        if mode == "constant":
            return np.pad(x, width, mode="constant", constant_values=x.dtype.type(value))
        return np.pad(x, width, mode="reflect" if mode == "reflect" else "edge")
    y = x
    for axis, before, after in ((ha, pt, pb), (wa, pl, pr)):
        src = source_index(y.shape[axis], before, after, mode)
        shape = list(y.shape)
        shape[axis] = len(src)
        out = np.full(shape, value, x.dtype) if mode == "constant" else np.empty(shape, x.dtype)
        copied = np.nonzero(src >= 0)[0]
        index = [slice(None)] * y.ndim
        index[axis] = copied
        out[tuple(index)] = np.take(y, src[copied], axis=axis)
        y = out
    return y


def pad_image_gradient(dy, pads, mode, spatial_axes):
    """dX of pad_image: each output gradient added to the input pixel it copied
    (pixels a negative pad cropped get 0)."""
    (ha, wa), (pt, pl, pb, pr) = spatial_axes, pads
    h, w = dy.shape[ha] - pt - pb, dy.shape[wa] - pl - pr
    out = dy
    for axis, size, before, after in ((ha, h, pt, pb), (wa, w, pl, pr)):
        src = source_index(size, before, after, mode)
        keep = src >= 0
        shape = list(out.shape)
        shape[axis] = size
        acc = np.zeros(shape, dy.dtype)
        index = [slice(None)] * out.ndim
        index[axis] = src[keep]
        taken = np.compress(keep, out, axis=axis)
        np.add.at(acc, tuple(index), taken)
        out = acc
    return out
