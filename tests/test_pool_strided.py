"""Strided 2-D max and average pools (pool.py's `_strided_pool2d`: 3x3/s2 windows with
their one-pass row combines and constant-stride column loops, and the general loops;
`_pool2x2s2` for 2x2/s2 windows; `_pool3x3s2_f32` for float32 3x3/s2 windows in
16-lane vectors) against float64 loops over every window: odd and even sizes, maps
narrower than the window, pads on one side only, ceil_mode, count_include_pad both
ways, one and many channels, batch > 1, NaN, float64."""
import itertools
import math

import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import pool as pool_k

RNG = np.random.default_rng(20261130)


def _out_size(size, k, s, pb, pe, ceil):
    span = size + pb + pe - k
    out = (math.ceil(span / s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pb:      # the last window must start inside
        out -= 1
    return out


def ref_pool(x, kernel, strides, pads, ceil, is_max, include_pad):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    oh = _out_size(h, kh, sh, pads[0], pads[2], ceil)
    ow = _out_size(w, kw, sw, pads[1], pads[3], ceil)
    y = np.empty((n, c, oh, ow))
    for nn, cc, oy, ox in itertools.product(range(n), range(c), range(oh), range(ow)):
        rows = range(oy * sh - pads[0], oy * sh - pads[0] + kh)
        cols = range(ox * sw - pads[1], ox * sw - pads[1] + kw)
        cells = [float(x[nn, cc, iy, ix]) for iy in rows for ix in cols if 0 <= iy < h and 0 <= ix < w]
        if is_max:
            y[nn, cc, oy, ox] = np.nan if any(np.isnan(cells)) else max(cells)
        else:
            # count_include_pad counts the pads, not the cells added to reach a ceil-mode size
            inside = (sum(-pads[0] <= iy < h + pads[2] for iy in rows) * sum(-pads[1] <= ix < w + pads[3] for ix in cols)
                      if include_pad else len(cells))
            y[nn, cc, oy, ox] = sum(cells) / inside
    return y


CASES = [
    # x shape, kernel, strides, pads (begins, ends), ceil_mode
    ((1, 3, 14, 14), (3, 3), (2, 2), (1, 1, 1, 1), False),    # ShuffleNet's average pools
    ((2, 4, 13, 11), (3, 3), (2, 2), (0, 0, 0, 0), False),    # SqueezeNet's max pools: odd sizes
    ((1, 5, 12, 9), (3, 3), (2, 2), (0, 0, 1, 1), False),     # Inception v2: pads at the end only
    ((1, 2, 10, 10), (3, 3), (2, 2), (1, 1, 0, 0), False),    # pads at the begin only
    ((1, 3, 10, 11), (3, 3), (2, 2), (0, 0, 0, 0), True),     # ceil_mode
    ((1, 3, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), True),
    ((1, 2, 2, 2), (3, 3), (2, 2), (1, 1, 1, 1), False),      # a map narrower than the window
    ((1, 2, 7, 1), (3, 3), (2, 2), (1, 1, 1, 1), False),      # one column
    ((2, 6, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), False),      # DenseNet's transition pools
    ((1, 3, 9, 7), (2, 2), (2, 2), (0, 0, 0, 0), True),       # 2x2/s2, odd sizes, ceil_mode
    ((1, 2, 7, 8), (2, 2), (2, 2), (1, 0, 0, 1), False),      # 2x2/s2 with one-sided pads
    ((1, 2, 1, 1), (2, 2), (2, 2), (1, 1, 1, 1), True),       # 2x2/s2: windows with one row inside
    ((1, 2, 3, 5), (2, 2), (2, 2), (1, 1, 0, 0), True),
    ((1, 2, 11, 12), (3, 2), (3, 2), (1, 1, 1, 0), False),    # mixed kernels / strides: the general loops
    ((1, 1, 16, 16), (5, 4), (2, 3), (2, 1, 2, 1), False),
    ((3, 1, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), False),      # one channel, batch 3
    ((1, 3, 37, 40), (3, 3), (2, 2), (1, 1, 1, 1), False),    # rows of 3 vectors, outputs of 2: masked tails
    ((1, 2, 34, 33), (3, 3), (2, 2), (0, 0, 0, 0), True),     # 16 outputs a row exactly (ceil_mode)
    ((1, 2, 5, 70), (3, 3), (2, 2), (2, 2, 2, 2), False),     # pads of 2: windows with one input row
]


def _spy(monkeypatch):
    """[(kernel, blocks)] of the strided kernels' calls (serial copies under their kernel's name)."""
    calls = []
    for kernel in ("_strided_pool2d", "_pool2x2s2", "_pool3x3s2_f32"):
        for name in (kernel, kernel + "_serial"):
            kernel_fn = getattr(pool_k, name)
            monkeypatch.setattr(pool_k, name, lambda *a, f=kernel_fn, k=kernel: calls.append((k, a[-1])) or f(*a))
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, kernel, strides, pads, ceil", CASES)
def test_strided_pools_match_loops(monkeypatch, xs, kernel, strides, pads, ceil, dtype):
    calls = _spy(monkeypatch)
    x = RNG.standard_normal(xs).astype(dtype)
    x.flat[::17] = np.nan
    y = pool_k.max_pool(x, kernel, strides, pads, None, ceil)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref_pool(x, kernel, strides, pads, ceil, True, False).astype(dtype))
    x = RNG.standard_normal(xs).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    for include_pad in (False, True):
        y = pool_k.average_pool(x, kernel, strides, pads, include_pad, ceil)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref_pool(x, kernel, strides, pads, ceil, False, include_pad), rtol=tol, atol=tol)
    want = "_pool2x2s2" if tuple(kernel) == tuple(strides) == (2, 2) else "_strided_pool2d"
    if tuple(kernel) == (3, 3) and tuple(strides) == (2, 2) and dtype == np.float32:
        want = "_pool3x3s2_f32"
    assert [name for name, _ in calls] == [want] * 3, "the strided kernel did not run"


# max pools read the input rows directly where a vector's windows lie in the row
# (37x40 pad 1: the left vector buffered, the next direct; 27x27: all direct but the
# last plane's bottom rows, whose reads would pass the array's end; 14x14 padded right:
# all buffered; 9x80 padded right: two direct vectors, then the buffer)
@pytest.mark.parametrize("xs, pads", [((2, 3, 37, 40), (1, 1, 1, 1)), ((1, 4, 27, 27), (0, 0, 0, 0)),
                                      ((1, 2, 14, 14), (0, 0, 1, 1)), ((1, 2, 9, 80), (0, 0, 0, 1))])
def test_the_vector_3x3s2_kernel_gives_the_scalar_kernels_bits(xs, pads):
    # the same operations in the same order, 16 lanes at a time: max NaN and -0.0
    # choices, and average sums, bit for bit
    x = RNG.standard_normal(xs).astype(np.float32)
    x.flat[::13] = np.nan
    x.flat[5::11] = -0.0
    x.flat[7::11] = 0.0
    planes = x.reshape((-1,) + xs[2:])
    oh, ow = (_out_size(xs[2], 3, 2, pads[0], pads[2], False), _out_size(xs[3], 3, 2, pads[1], pads[3], False))
    inv = (1.0 / RNG.integers(1, 10, (oh, ow))).astype(np.float32)
    for is_max in (True, False):
        vec = np.empty((planes.shape[0], oh, ow), np.float32)
        scalar = np.empty_like(vec)
        width = pool_k._pool3x3s2_width(xs[3], ow, pads[1])
        work, stride = pool_k.team_work(width, np.float32)
        work[:] = np.nan                    # the row buffer's earlier contents must not matter
        pool_k._pool3x3s2_f32(planes, vec, inv, pads[0], pads[1], is_max, width, work, stride, 1)
        pool_k._strided_pool2d(planes, scalar, inv, 3, 3, 2, 2, 1, pads[0], pads[1], is_max, 1)
        np.testing.assert_array_equal(vec.view(np.uint32), scalar.view(np.uint32))


@pytest.mark.parametrize("kernel, pads", [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0))])
def test_strided_pools_on_two_blocks(monkeypatch, kernel, pads):
    monkeypatch.setattr(pool_k, "team_blocks", lambda count, work: min(count, 2))
    calls = _spy(monkeypatch)
    x = RNG.standard_normal((2, 5, 12, 10)).astype(np.float32)
    x[1, 4, 5, 5] = np.nan
    y = pool_k.max_pool(x, kernel, (2, 2), pads)
    np.testing.assert_array_equal(y, ref_pool(x, kernel, (2, 2), pads, False, True, False).astype(np.float32))
    y = pool_k.average_pool(x, kernel, (2, 2), pads, False)
    np.testing.assert_allclose(y, ref_pool(x, kernel, (2, 2), pads, False, False, False), rtol=1e-6, atol=1e-6)
    assert [blocks for _, blocks in calls] == [2, 2]
