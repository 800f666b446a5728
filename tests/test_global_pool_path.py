"""Global 2-D pools (window = whole plane, stride 1, no padding) run their own loop
(kernels/cpu/cnn/pool.py `_global_pool2d`): one pass over each plane, with the
summation order and float roundings of the stride-1 kernel, so results are bit for bit
those of before; one-block calls run serially (no parallel region)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.kernels.cpu.cnn import pool
from caffe2py.kernels.cpu.runtime import jit


def _sequential_reference(x, is_max):
    """Row-major fold of each plane from its first cell, in x's dtype."""
    n, c, h, w = x.shape
    out = np.empty((n, c, 1, 1), x.dtype)
    inv = x.dtype.type(1.0 / (h * w))
    for i in range(n):
        for j in range(c):
            cells = x[i, j].reshape(-1)
            acc = cells[0]
            for v in cells[1:]:
                acc = (acc if (acc > v or acc != acc) else v) if is_max else x.dtype.type(acc + v)
            out[i, j, 0, 0] = acc if is_max else x.dtype.type(acc * inv)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4, 3, 20, 20), (2, 5, 7, 3), (3, 64, 13, 13), (1, 1, 1, 1)])
@pytest.mark.parametrize("is_max", [False, True])
def test_global_pools_fold_each_plane_in_order(dtype, shape, is_max):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    x.reshape(-1)[len(x.reshape(-1)) // 2] = np.nan if is_max and x.size > 4 else x.reshape(-1)[0]
    h, w = shape[2:]
    with jit.team():
        got = (pool.max_pool if is_max else pool.average_pool)(x, (h, w), (1, 1), (0, 0, 0, 0))
    np.testing.assert_array_equal(got, _sequential_reference(x, is_max))
    # the compiled loop (serial and parallel) and its NumPy twin agree bit for bit
    planes = shape[0] * shape[1]
    flat = x.reshape(planes, h * w)
    inv = dtype(1.0 / (h * w))
    outs = []
    for kernel, blocks in ((pool._global_pool2d_serial, 1), (pool._global_pool2d, 2),
                           (pool._global_pool2d.twin, 1)):
        out = np.empty(planes, dtype)
        with jit.team():
            kernel(flat, out, inv, is_max, blocks)
        outs.append(out)
    for out in outs:
        np.testing.assert_array_equal(out, got.reshape(-1))


def test_global_average_pool_op_uses_it():
    x = np.random.default_rng(3).random((2, 3, 6, 6)).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.RunOperatorOnce(core.CreateOperator("AveragePool", ["X"], ["Y"], kernel=6, stride=1, order="NCHW"))
    np.testing.assert_array_equal(workspace.FetchBlob("Y"), _sequential_reference(x, False))
    workspace.ResetWorkspace()


@pytest.mark.parametrize("kernel, pads", [((7, 7), (0, 0, 1, 1)),     # Inception v1's last average pool
                                          ((4, 5), (1, 0, 0, 1)), ((6, 6), (0, 0, 0, 0))])
@pytest.mark.parametrize("include_pad", [False, True])
def test_one_window_over_the_plane_and_its_pads_folds_the_plane(monkeypatch, kernel, pads, include_pad):
    """A stride-1 window that covers the whole plane and some padding is the global fold
    (padding adds no value to a sum or maximum); the divisor counts the pads only with
    count_include_pad."""
    calls = []
    fold = pool._global_pool2d_serial
    monkeypatch.setattr(pool, "_global_pool2d_serial", lambda *a: calls.append(a[-1]) or fold(*a))
    x = np.random.default_rng(4).standard_normal((2, 3, kernel[0] - pads[0] - pads[2],
                                                   kernel[1] - pads[1] - pads[3])).astype(np.float32)
    x[1, 2, 0, 0] = np.nan
    y = pool.average_pool(x, kernel, (1, 1), pads, include_pad)
    cells = kernel[0] * kernel[1] if include_pad else x.shape[2] * x.shape[3]
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=(2, 3), keepdims=True) / cells, rtol=1e-6)
    np.testing.assert_array_equal(pool.max_pool(x, kernel, (1, 1), pads), x.max(axis=(2, 3), keepdims=True))
    assert calls == [1, 1]
