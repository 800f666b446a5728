"""2-D depthwise convolution (one input channel per group), compiled.

Public:
    depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None, channel_map=None)
        or None when the compiled kernel does not cover the case (only float32/float64,
        non-negative pads). channel_map (C ints): output channel o convolves input plane
        channel_map[o // multiplier] instead of o // multiplier, so a channel shuffle
        before the convolution costs nothing (caffe2py.optimize's shuffle fold).
    channel_map_problem(channel_map, channels) -> why a map is unusable, or None.

A depthwise output is kh*kw multiply-adds of one channel's pixels. As NumPy calls
that is a pass per tap (or a tap stack and a batched matmul of tiny matrices); here
each channel is padded into a small row buffer and every output is computed once,
in registers, with bias and ReLU on the way out (one thread: 272 channels at 14x14,
3x3: 0.19 -> 0.056 ms; 112 channels 56x56 stride 2: 0.38 -> 0.19 ms).
  * stride 1: one long loop over the padded plane read as a flat array (each tap is a
    shifted slice of it; the columns past the row end are computed and dropped);
  * strided 3x3: per output row, the nine taps read at the output columns (scalar
    strided loads, vectorised by LLVM when the dilation is 1);
  * other strided kernels: each output row at stride 1 (contiguous, vectorised), then
    every sw-th column is kept.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.jit import compiled, prange, team_blocks


@compiled(fastmath=("contract", "reassoc"), parallel=True)
def _depthwise(x, w, bias, out, cmap, kh, kw, sh, sw, dh, dw, pt, pl, relu, blocks):
    """All output channels, in `blocks` contiguous blocks on the team. x (C, H, W);
    w (M, kh*kw) with M = C * multiplier; bias (M,) (zeros when there is none);
    out (M, OH, OW); output channel o reads input plane cmap[o // multiplier]. Windows
    start at (oy * sh - pt, ox * sw - pl); pads are >= 0 and the caller checked the
    shapes and that cmap holds C channel indices in range."""
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    mult = m // c_in
    span = (ow - 1) * sw + 1                        # padded columns one output row covers
    wp = max(pl + wd, span + (kw - 1) * dw)         # padded row length
    hp = max(pt + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    flat = sh == 1 and sw == 1
    rows = hp + 1 if flat else hp                   # flat taps of the last row run one row on
    for t in prange(blocks):
        lo, hi = m * t // blocks, m * (t + 1) // blocks
        grid = np.zeros((rows, wp), x.dtype)            # zero border, interior rewritten per channel
        buf = grid.reshape(rows * wp)
        length = oh * wp if flat else span
        acc = np.empty(length, x.dtype)
        loaded = -1
        for o in range(lo, hi):
            c = cmap[o // mult]
            if c != loaded:
                for y in range(h):
                    src = x[c, y]
                    dst = grid[y + pt, pl:pl + wd]
                    for j in range(wd):
                        dst[j] = src[j]
                loaded = c
            wo = w[o]
            b = bias[o]
            if not flat and kh == 3 and kw == 3:
                # strided 3x3: nine taps read straight at each output's columns (strided
                # loads stay scalar, but only the outputs are computed)
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = wo[0], wo[1], wo[2], wo[3], wo[4], wo[5], wo[6], wo[7], wo[8]
                for oy in range(oh):
                    # rows of the 2-D grid, not slices of the flat buffer: 2x faster here
                    r0, r1, r2 = grid[oy * sh], grid[oy * sh + dh], grid[oy * sh + 2 * dh]
                    dst = out[o, oy]
                    if dw == 1:     # constant offsets: LLVM vectorises the strided loads (2.7x)
                        for ox in range(ow):
                            j = ox * sw
                            v = (b + w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2]
                                 + w3 * r1[j] + w4 * r1[j + 1] + w5 * r1[j + 2]
                                 + w6 * r2[j] + w7 * r2[j + 1] + w8 * r2[j + 2])
                            dst[ox] = 0.0 if relu and v < 0 else v
                    else:
                        for ox in range(ow):
                            j = ox * sw
                            v = (b + w0 * r0[j] + w1 * r0[j + dw] + w2 * r0[j + 2 * dw]
                                 + w3 * r1[j] + w4 * r1[j + dw] + w5 * r1[j + 2 * dw]
                                 + w6 * r2[j] + w7 * r2[j + dw] + w8 * r2[j + 2 * dw])
                            dst[ox] = 0.0 if relu and v < 0 else v
                continue
            # Flat: one segment, the whole plane. Strided: one segment per output row.
            for seg in range(1 if flat else oh):
                base = seg * sh * wp
                if kh == 3 and kw == 3:
                    # the common case in one pass: nine taps per output, acc written once
                    r1, r2 = base + dh * wp, base + 2 * dh * wp
                    t0, t1, t2 = buf[base:base + length], buf[base + dw:base + dw + length], \
                        buf[base + 2 * dw:base + 2 * dw + length]
                    t3, t4, t5 = buf[r1:r1 + length], buf[r1 + dw:r1 + dw + length], buf[r1 + 2 * dw:r1 + 2 * dw + length]
                    t6, t7, t8 = buf[r2:r2 + length], buf[r2 + dw:r2 + dw + length], buf[r2 + 2 * dw:r2 + 2 * dw + length]
                    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wo[0], wo[1], wo[2], wo[3], wo[4], wo[5], wo[6], wo[7], wo[8]
                    for i in range(length):
                        acc[i] = (b + w0 * t0[i] + w1 * t1[i] + w2 * t2[i] + w3 * t3[i] + w4 * t4[i]
                                  + w5 * t5[i] + w6 * t6[i] + w7 * t7[i] + w8 * t8[i])
                else:
                    for i in range(length):
                        acc[i] = b
                    for ky in range(kh):
                        for kx in range(kw):
                            start = base + ky * dh * wp + kx * dw
                            tap = buf[start:start + length]
                            wt = wo[ky * kw + kx]
                            for i in range(length):
                                acc[i] += wt * tap[i]
                if flat:
                    for oy in range(oh):
                        src = acc[oy * wp:oy * wp + ow]
                        dst = out[o, oy]
                        for i in range(ow):
                            v = src[i]
                            dst[i] = 0.0 if relu and v < 0 else v
                else:
                    dst = out[o, seg]
                    for i in range(ow):
                        v = acc[i * sw]
                        dst[i] = 0.0 if relu and v < 0 else v


@_depthwise.numpy_twin
def _depthwise_numpy(x, w, bias, out, cmap, kh, kw, sh, sw, dh, dw, pt, pl, relu, blocks):
    c_in, h, wd = x.shape
    m, oh, ow = out.shape
    rows = max(pt + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    width = max(pl + wd, (ow - 1) * sw + (kw - 1) * dw + 1)
    grid = np.zeros((c_in, rows, width), x.dtype)
    grid[:, pt:pt + h, pl:pl + wd] = x
    planes = grid[cmap[np.arange(m) // (m // c_in)]]    # the input plane of every output
    acc = np.repeat(bias.reshape(m, 1, 1), oh, axis=1).repeat(ow, axis=2)
    for ky in range(kh):
        for kx in range(kw):
            cells = planes[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
            acc += w[:, ky * kw + kx].reshape(m, 1, 1) * cells
    if relu:
        np.maximum(acc, acc.dtype.type(0), out=acc)
    out[...] = acc


@compiled
def _outside(cmap, channels):
    """How many of cmap's values lie outside [0, channels)."""
    bad = 0
    for i in range(cmap.shape[0]):
        if cmap[i] < 0 or cmap[i] >= channels:
            bad += 1
    return bad


@_outside.numpy_twin
def _outside_numpy(cmap, channels):
    return int(np.count_nonzero((cmap < 0) | (cmap >= channels)))


def channel_map_problem(channel_map, channels):
    """Why `channel_map` cannot say which of `channels` input planes each channel
    reads (the compiled loop indexes with it unchecked), or None. A compiled range
    check: NumPy's min and max cost ~6 us a map, more than some convolutions save."""
    cmap = np.asarray(channel_map)
    if cmap.shape != (channels,) or cmap.dtype.kind not in "iu":
        return "the channel map must be %d integers, got %s of shape %s" % (channels, cmap.dtype, list(cmap.shape))
    if cmap.dtype != np.intp:
        cmap = cmap.astype(np.intp)       # unsigned values past intp's range wrap negative: refused below
    if _outside(cmap, channels):
        return "the channel map's values must lie in [0, %d), got %d..%d" % (channels, cmap.min(), cmap.max())
    return None


def depthwise_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """The compiled depthwise path for this geometry, or None (see the module docstring)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64) or len(out_spatial) != 2 or min(pads) < 0:
        return None
    n, c = x_shape[:2]
    m = w_shape[0]
    kh, kw = w_shape[2:]
    geometry = (kh, kw) + tuple(strides) + tuple(dilations) + (pads[0], pads[1])
    work = int(np.prod(out_spatial)) * kh * kw * max(strides)

    identity = np.arange(c, dtype=np.intp)

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None, channel_map=None):
        if channel_map is None:
            cmap = identity
        else:
            problem = channel_map_problem(channel_map, c)
            if problem:
                raise ValueError(problem)
            cmap = np.ascontiguousarray(channel_map, dtype=np.intp)
        w2 = w.reshape(m, kh * kw)
        b = np.zeros(m, dtype) if bias is None else bias_values(bias, dtype)
        for i in range(n):
            xi = np.ascontiguousarray(x[i])
            _depthwise(xi, w2, b, out[i], cmap, *geometry, relu, team_blocks(m, work))
    compute.takes_channel_map = True
    return compute
