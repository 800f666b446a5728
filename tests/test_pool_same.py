"""Stride-1 2-D pools whose output has the input's size (pool.py's `_same_pool2d`:
Inception's 3x3 pad-1 branches) against float64 loops over every window: kernel
sizes, one-sided pads, maps smaller than the window, one row or column, planes in
several runs and on two blocks, count_include_pad both ways, NaN, float64."""
import itertools

import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import pool as pool_k

RNG = np.random.default_rng(20261129)


def ref_pool_same(x, kernel, pads, is_max, include_pad):
    """float64 loops over every output's window; cells outside the input are skipped
    (max: NaN propagates; average: divided by the cells inside, or by the window's
    area with include_pad)."""
    n, c, h, w = x.shape
    kh, kw = kernel
    y = np.empty((n, c, h, w))
    for nn, cc, oy, ox in itertools.product(range(n), range(c), range(h), range(w)):
        cells = [float(x[nn, cc, iy, ix]) for iy in range(oy - pads[0], oy - pads[0] + kh)
                 for ix in range(ox - pads[1], ox - pads[1] + kw) if 0 <= iy < h and 0 <= ix < w]
        if is_max:
            y[nn, cc, oy, ox] = np.nan if any(np.isnan(cells)) else max(cells)
        else:
            y[nn, cc, oy, ox] = sum(cells) / (kh * kw if include_pad else len(cells))
    return y


CASES = [
    # x shape, kernel, pads (begins, ends): pads sum to kernel - 1 in each dim
    ((1, 3, 7, 7), (3, 3), (1, 1, 1, 1)),        # Inception's pool branches
    ((2, 5, 9, 8), (3, 3), (1, 1, 1, 1)),        # batch > 1, odd / even sizes
    ((1, 2, 6, 7), (2, 4), (0, 2, 1, 1)),        # even / wide kernels, asymmetric pads
    ((1, 2, 5, 6), (3, 3), (2, 0, 0, 2)),        # pads on one side only
    ((1, 2, 3, 3), (3, 3), (1, 1, 1, 1)),        # a map as small as the window
    ((1, 2, 2, 2), (5, 5), (2, 2, 2, 2)),        # a map smaller than the window
    ((1, 1, 5, 1), (3, 1), (1, 0, 1, 0)),        # one column
    ((1, 2, 1, 5), (3, 3), (2, 1, 0, 1)),        # one row
    ((3, 4, 1, 2), (3, 3), (1, 1, 1, 1)),        # 1x2 maps (1x1 ones fold the plane: _global_pool2d)
    ((1, 150, 6, 5), (3, 3), (1, 1, 1, 1)),      # several runs of planes, the last one short
]


def _spy(monkeypatch, calls):
    for name in ("_same_pool2d", "_same_pool2d_serial"):
        kernel_fn = getattr(pool_k, name)
        monkeypatch.setattr(pool_k, name, lambda *a, f=kernel_fn: calls.append(a[-1]) or f(*a))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, kernel, pads", CASES)
def test_same_size_pools_match_loops(monkeypatch, xs, kernel, pads, dtype):
    calls = []
    _spy(monkeypatch, calls)
    x = RNG.standard_normal(xs).astype(dtype)
    x.flat[::23] = np.nan
    y = pool_k.max_pool(x, kernel, (1, 1), pads, None, False)
    assert calls, "the same-size kernel did not run"
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref_pool_same(x, kernel, pads, True, False).astype(dtype))
    x = RNG.standard_normal(xs).astype(dtype)
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    for include_pad in (False, True):
        y = pool_k.average_pool(x, kernel, (1, 1), pads, include_pad, False)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref_pool_same(x, kernel, pads, False, include_pad), rtol=rtol, atol=rtol)
    assert len(calls) == 3


@pytest.mark.parametrize("is_max", [True, False])
def test_same_size_pools_on_two_blocks(monkeypatch, is_max):
    monkeypatch.setattr(pool_k, "team_blocks", lambda count, work: min(count, 2))
    calls = []
    _spy(monkeypatch, calls)
    x = RNG.standard_normal((2, 301, 5, 4)).astype(np.float32)     # runs of 204 planes
    x[0, 1, 3, 3] = np.nan
    x[1, 300, 0, 0] = np.nan
    y = pool_k.max_pool(x, (3, 3), (1, 1), (1, 1, 1, 1)) if is_max else \
        pool_k.average_pool(x, (3, 3), (1, 1), (1, 1, 1, 1), False)
    assert calls == [2]
    want = ref_pool_same(x, (3, 3), (1, 1, 1, 1), is_max, False)
    np.testing.assert_allclose(y, want, rtol=0 if is_max else 1e-6, atol=0 if is_max else 1e-6)
    assert np.isnan(y).sum() == 6 + 4      # the windows holding (3, 3) and (0, 0) of a 5 x 4 map


def test_dilated_or_shrinking_stride1_pools_keep_the_other_kernels(monkeypatch):
    calls = []
    _spy(monkeypatch, calls)
    x = RNG.standard_normal((1, 2, 9, 9)).astype(np.float32)
    pool_k.max_pool(x, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), False)     # dilated: same size, other kernel
    pool_k.average_pool(x, (3, 3), (1, 1), (0, 0, 0, 0))
    pool_k.max_pool(x, (3, 3), (1, 1), (1, 1, 1, 1), None, True)        # ceil_mode: the tap kernel
    assert calls == []
