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
