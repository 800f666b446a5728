"""What fuzz campaign 11 (seed 13, docs/reliability.md) found, fixed at its source.

Its other finding (op:13:90242, LSTMUnit) is tested beside campaign 10's in test_fuzz_campaign10_findings.py.
"""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


def _run_front_mean_gradient(dy, x_or_shape, num_reduce_dim):
    workspace.ResetWorkspace()
    workspace.FeedBlob("dY", dy)
    workspace.FeedBlob("X", x_or_shape)
    net = core.Net("front_mean_grad")
    net.ReduceFrontMeanGradient(["dY", "X"], ["dX"], num_reduce_dim=num_reduce_dim)
    workspace.RunNetOnce(net)
    return workspace.FetchBlob("dX")


def test_front_mean_gradient_with_a_negative_dim_in_the_old_shape_input_is_a_named_error():
    # op:13:73477: input 1 as X's shape (old models) held -10; NumPy's broadcast said so in its own words
    with pytest.raises(Caffe2Error, match="holds X's shape \\[-10\\], which has a negative dim"):
        _run_front_mean_gradient(np.ones(1, np.float32), np.array([-10], np.int64), 0)
    assert not workspace.HasBlob("dX")


def test_front_mean_gradient_from_the_old_shape_input_spreads_dy_evenly():
    # the valid form of the same input: dX[i, j] = dY[j] / rows
    dy = np.array([3.0, 6.0, 9.0], np.float32)
    dx = _run_front_mean_gradient(dy, np.array([4, 3], np.int64), 1)
    np.testing.assert_allclose(dx, np.tile(dy / 4.0, (4, 1)))
