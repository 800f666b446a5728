"""What fuzz campaign 7 (seed 7, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


def _top_k_grad(x, k, grad, indices):
    workspace.ResetWorkspace()
    for name, value in (("x", x), ("k", k), ("grad", grad), ("indices", indices)):
        workspace.FeedBlob(name, value)
    net = core.Net("flexible_top_k_grad")
    net.FlexibleTopKGradient(["x", "k", "grad", "indices"], ["dx"])
    workspace.RunNetOnce(net)
    return workspace.FetchBlob("dx")


def test_flexible_top_k_gradient_needs_one_k_per_row():
    # op:7:45518: an empty K for a 60-row X reached NumPy's reshape error
    x = np.zeros((6, 5, 2, 2), np.float32)
    empty = np.zeros(0, np.int64)
    with pytest.raises(Caffe2Error, match=r"K must hold one count per row of X \[6, 5, 2, 2\] \(60 rows\), got 0"):
        _top_k_grad(x, empty, np.zeros(0, np.float32), empty)


def test_flexible_top_k_gradient_puts_each_value_back_at_its_index():
    x = np.zeros((2, 4), np.float32)
    k = np.array([2, 1], np.int64)
    grad = np.array([1.5, -2.0, 3.0], np.float32)
    indices = np.array([3, 0, 2], np.int64)
    want = np.zeros((2, 4), np.float32)
    want[0, 3], want[0, 0], want[1, 2] = 1.5, -2.0, 3.0
    np.testing.assert_array_equal(_top_k_grad(x, k, grad, indices), want)
