"""Layout copies, compiled and split over the team.

Public:
    concat(xs, axis) -> y        np.concatenate(xs, axis) for arrays of one dtype; the
                                 copies split over the team (small ones: NumPy's copy)
    copy_planes(src, dst)        dst[...] = src for 3-D arrays of one shape (dst may be the
                                 interior of a padded buffer); rows over the team
    channel_shuffle(x, group) -> y
        x (N, C, *S) with C = group * K: y[:, k * group + g] = x[:, g * K + k]
        (ShuffleNet's channel shuffle, Caffe2's ChannelShuffle in NCHW). Float and
        integer arrays of any layout.

As NumPy this is one transposed copy on one thread; here the team's threads each copy
whole channel planes (contiguous runs of H*W values). Alone the two take the same time
(136 x 28 x 28 float32: 0.011 ms); in ShuffleNet's net, where each shuffle reads a
map the previous conv just wrote, its 16 shuffles took 0.33-0.45 ms instead of
0.64-0.69 (2-CPU Zen 5 VM).
"""
import math
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks
from ..runtime.output_pool import output_array


@compiled(parallel=True)
def _shuffle_planes(x, y, group, blocks):
    """x, y (N, C, P); output channel k * group + g takes input channel g * K + k."""
    n, c, plane = x.shape
    per = c // group
    total = n * c
    for t in prange(blocks):
        for job in range(total * t // blocks, total * (t + 1) // blocks):
            i, out_c = job // c, job % c
            src = x[i, (out_c % group) * per + out_c // group]
            dst = y[i, out_c]
            for k in range(plane):
                dst[k] = src[k]


@_shuffle_planes.numpy_twin
def _shuffle_planes_numpy(x, y, group, blocks):
    n, c, plane = x.shape
    y[...] = x.reshape(n, group, c // group, plane).transpose(0, 2, 1, 3).reshape(n, c, plane)


def channel_shuffle(x, group):
    """See the module docstring; the caller checked that the channels split into groups."""
    n, c = x.shape[:2]
    plane = math.prod(x.shape[2:])            # explicit: -1 is ambiguous for empty tensors
    src = np.ascontiguousarray(x).reshape(n, c, plane)
    y = np.empty(x.shape, x.dtype)
    if x.dtype.kind not in "biuf" or x.dtype == np.float16:     # types the compiled loop does not take
        _shuffle_planes_numpy(src, y.reshape(n, c, plane), group, 1)
    elif y.size:
        _shuffle_planes(src, y.reshape(n, c, plane), group, team_blocks(n * c, plane))
    return y


@compiled(parallel=True)
def _copy_into(src, dst, blocks):
    """dst[:] = src for 2-D arrays of one shape (dst may be a column range of a wider
    array): rows split over the team, or column ranges when there are few rows."""
    rows, width = src.shape
    if rows >= blocks:
        for t in prange(blocks):
            for r in range(rows * t // blocks, rows * (t + 1) // blocks):
                a, b = src[r], dst[r]
                for k in range(width):
                    b[k] = a[k]
    else:
        for t in prange(blocks):
            lo, hi = width * t // blocks, width * (t + 1) // blocks
            for r in range(rows):
                a, b = src[r, lo:hi], dst[r, lo:hi]
                for k in range(hi - lo):
                    b[k] = a[k]


@_copy_into.numpy_twin
def _copy_into_numpy(src, dst, blocks):
    dst[...] = src


def concat(xs, axis):
    """See the module docstring (NumPy's errors for inputs that do not fit)."""
    first = xs[0]
    if len(xs) < 2 or first.dtype not in (np.float32, np.float64) or any(x.dtype != first.dtype for x in xs) \
            or any(x.ndim != first.ndim or x.shape[:axis] != first.shape[:axis]
                   or x.shape[axis + 1:] != first.shape[axis + 1:] for x in xs):
        return np.concatenate(xs, axis=axis)
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    y = output_array(shape, first.dtype)
    if y.size == 0:
        return y
    lead = math.prod(shape[:axis])
    y2 = y.reshape(lead, y.size // lead)
    at = 0
    for x in xs:
        width = x.size // lead if lead else 0
        blocks = team_blocks(lead * width, 1)
        if blocks > 1:
            _copy_into(np.ascontiguousarray(x).reshape(lead, width), y2[:, at:at + width], blocks)
        elif width:
            # too small to split: NumPy's copy, no parallel region (one costs ~3 us on
            # an idle machine; on a loaded one it waits for every team thread to be
            # scheduled: a training step's 256 x 68 Concat took 0.6-150 ms, measured)
            y2[:, at:at + width] = x.reshape(lead, width)
        at += width
    return y


@compiled(parallel=True)
def _copy_rows3(src, dst, blocks):
    planes, rows, width = src.shape
    for t in prange(blocks):
        for job in range(planes * rows * t // blocks, planes * rows * (t + 1) // blocks):
            a = src[job // rows, job % rows]
            b = dst[job // rows, job % rows]
            for k in range(width):
                b[k] = a[k]


@_copy_rows3.numpy_twin
def _copy_rows3_numpy(src, dst, blocks):
    dst[...] = src


def copy_planes(src, dst):
    """See the module docstring (NumPy's assignment for other dtypes)."""
    if src.dtype != dst.dtype or src.dtype not in (np.float32, np.float64) or src.shape != dst.shape \
            or src.ndim != 3 or src.strides[2] != src.itemsize or dst.strides[2] != dst.itemsize:
        dst[...] = src
        return
    _copy_rows3(src, dst, team_blocks(src.shape[0] * src.shape[1], src.shape[2]))
