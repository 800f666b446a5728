"""Stride-1 2-D max pools (pool.py's separable `_stride1_max2d`, and `_same_pool2d` for
output-sized ones) against direct loops over every window: kernel sizes, dilations,
asymmetric pads, NaN, two threads."""
import itertools

import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import pool as pool_k

RNG = np.random.default_rng(20261129)


def ref_max_pool_s1(x, kernel, pads, dil):
    """float64 loops; cells outside the input are skipped (NaN propagates)."""
    n, c, h, w = x.shape
    (kh, kw), (dh, dw) = kernel, dil
    oh = h + pads[0] + pads[2] - (kh - 1) * dh
    ow = w + pads[1] + pads[3] - (kw - 1) * dw
    y = np.full((n, c, oh, ow), -np.inf)
    for nn, cc, oy, ox in itertools.product(range(n), range(c), range(oh), range(ow)):
        cells = [x[nn, cc, iy, ix] for iy in (oy - pads[0] + ky * dh for ky in range(kh))
                 for ix in (ox - pads[1] + kx * dw for kx in range(kw)) if 0 <= iy < h and 0 <= ix < w]
        if any(np.isnan(cells)):
            y[nn, cc, oy, ox] = np.nan
        elif cells:
            y[nn, cc, oy, ox] = max(cells)
    return y


def _spy(monkeypatch, name, calls):
    kernel_fn = getattr(pool_k, name)
    monkeypatch.setattr(pool_k, name, lambda *a: calls.append(a) or kernel_fn(*a))


CASES = [
    # x shape, kernel, pads (begins, ends), dilations
    ((1, 3, 9, 8), (3, 3), (1, 1, 1, 1), (1, 1)),       # Inception's pool branches
    ((2, 2, 7, 6), (3, 3), (0, 0, 0, 0), (1, 1)),       # no padding: a smaller output
    ((1, 2, 6, 7), (2, 4), (0, 2, 1, 1), (1, 1)),       # even / wide kernels, asymmetric pads
    ((1, 2, 9, 10), (3, 3), (2, 1, 2, 0), (2, 3)),      # dilated 3x3
    ((1, 2, 8, 8), (5, 2), (2, 0, 2, 1), (1, 2)),       # tall kernel, dilated columns
    ((1, 2, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),       # a map as small as the window
    ((1, 1, 5, 1), (3, 1), (1, 0, 1, 0), (1, 1)),       # one column
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, kernel, pads, dil", CASES)
def test_stride1_max_pool_matches_loops(monkeypatch, xs, kernel, pads, dil, dtype):
    calls = []
    for name in ("_stride1_max2d_serial", "_same_pool2d_serial"):
        _spy(monkeypatch, name, calls)
    x = RNG.standard_normal(xs).astype(dtype)
    y = pool_k.max_pool(x, kernel, (1, 1), pads, dil, False)
    assert calls, "the separable kernel did not run"
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref_max_pool_s1(x, kernel, pads, dil).astype(dtype))


def test_stride1_max_pool_keeps_nan_and_runs_on_two_blocks(monkeypatch):
    monkeypatch.setattr(pool_k, "team_blocks", lambda count, work: min(count, 2))
    calls = []
    for name in ("_stride1_max2d", "_same_pool2d"):
        _spy(monkeypatch, name, calls)
    x = RNG.standard_normal((2, 3, 7, 7)).astype(np.float32)
    x[0, 1, 3, 3] = np.nan
    x[1, 2, 0, 6] = np.nan
    y = pool_k.max_pool(x, (3, 3), (1, 1), (1, 1, 1, 1), None, False)
    assert [a[-1] for a in calls] == [2]
    np.testing.assert_array_equal(y, ref_max_pool_s1(x, (3, 3), (1, 1, 1, 1), (1, 1)).astype(np.float32))
    assert np.isnan(y[0, 1, 2:5, 2:5]).all() and np.isnan(y).sum() == 9 + 4


def test_stride1_average_pool_keeps_its_own_kernel(monkeypatch):
    """Stride-1 average pools that shrink the map keep the tap-order kernel (no max kernel)."""
    for name in ("_stride1_max2d_serial", "_stride1_max2d", "_same_pool2d_serial", "_same_pool2d"):
        monkeypatch.setattr(pool_k, name, None)
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    y = pool_k.average_pool(x, (3, 3), (1, 1), (1, 0, 0, 0), True, False)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 0), (0, 0)))
    want = sum(xp[:, :, a:a + 5, b:b + 4] for a in range(3) for b in range(3)) / 9
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
