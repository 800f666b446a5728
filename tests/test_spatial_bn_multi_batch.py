"""SpatialBN / SpatialBNGradient with num_batches > 1 (the ops combine_spatial_bn
builds): batches normalised with statistics combined through ChannelStats /
ChannelBackpropStats equal one SpatialBN over the concatenated batch, checked
against the batch-norm formulas written here in NumPy."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

EPS, MOMENTUM = 1e-3, 0.9


def _reference(x, scale, bias, dy):
    """Whole-batch training batch norm (NCHW) and its gradient, in float64."""
    axes = (0, 2, 3)
    m = x.size // x.shape[1]
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    rstd = 1 / np.sqrt(var + EPS)
    xhat = (x - mean[None, :, None, None]) * rstd[None, :, None, None]
    y = xhat * scale[None, :, None, None] + bias[None, :, None, None]
    dbias = dy.sum(axis=axes)
    dscale = (dy * xhat).sum(axis=axes)
    dx = (scale * rstd / m)[None, :, None, None] * (m * dy - dbias[None, :, None, None]
                                                   - xhat * dscale[None, :, None, None])
    return y, mean, var * m / (m - 1), dx, dscale, dbias


def _run(op_type, inputs, outputs, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **kwargs))


@pytest.mark.parametrize("num_batches", [2, 3])
def test_combined_statistics_equal_the_whole_batch(num_batches):
    rng = np.random.default_rng(num_batches)
    workspace.ResetWorkspace()
    xs = [rng.normal(size=(2, 3, 4, 4)).astype(np.float32) * 2 + 1 for _ in range(num_batches)]
    dys = [rng.normal(size=(2, 3, 4, 4)).astype(np.float32) for _ in range(num_batches)]
    scale, bias = rng.normal(size=3).astype(np.float32), rng.normal(size=3).astype(np.float32)
    workspace.FeedBlob("scale", scale)
    workspace.FeedBlob("bias", bias)
    for b, x in enumerate(xs):
        workspace.FeedBlob("x%d" % b, x)
        workspace.FeedBlob("rm%d" % b, np.zeros(3, np.float32))
        workspace.FeedBlob("rv%d" % b, np.ones(3, np.float32))
        _run("ChannelStats", ["x%d" % b], ["s%d" % b, "ss%d" % b])
    _run("Sum", ["s%d" % b for b in range(num_batches)], ["sums"])
    _run("Sum", ["ss%d" % b for b in range(num_batches)], ["sumsqs"])
    for b in range(num_batches):
        _run("SpatialBN", ["x%d" % b, "scale", "bias", "rm%d" % b, "rv%d" % b, "sums", "sumsqs"],
             ["y%d" % b, "rm%d" % b, "rv%d" % b, "mean%d" % b, "rstd%d" % b],
             is_test=0, epsilon=EPS, momentum=MOMENTUM, num_batches=num_batches)
        workspace.FeedBlob("dy%d" % b, dys[b])
        _run("ChannelBackpropStats", ["x%d" % b, "mean%d" % b, "rstd%d" % b, "dy%d" % b], ["gs%d" % b, "gb%d" % b])
    _run("Sum", ["gs%d" % b for b in range(num_batches)], ["gscale"])
    _run("Sum", ["gb%d" % b for b in range(num_batches)], ["gbias"])
    x_all = np.concatenate(xs).astype(np.float64)
    y, mean, unbiased_var, dx, dscale, dbias = _reference(x_all, scale, bias, np.concatenate(dys))
    dscale_parts, dbias_parts = [], []
    for b in range(num_batches):
        _run("SpatialBNGradient", ["x%d" % b, "scale", "dy%d" % b, "mean%d" % b, "rstd%d" % b, "gscale", "gbias"],
             ["dx%d" % b, "dscale%d" % b, "dbias%d" % b], epsilon=EPS, num_batches=num_batches)
        rows = slice(2 * b, 2 * b + 2)
        np.testing.assert_allclose(workspace.FetchBlob("y%d" % b), y[rows], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("rm%d" % b), (1 - MOMENTUM) * mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob("rv%d" % b), MOMENTUM + (1 - MOMENTUM) * unbiased_var,
                                   rtol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("dx%d" % b), dx[rows], rtol=1e-4, atol=1e-5)
        dscale_parts.append(workspace.FetchBlob("dscale%d" % b))
        dbias_parts.append(workspace.FetchBlob("dbias%d" % b))
    # each batch's share sums to the whole gradient (data_parallel_model then sums them)
    np.testing.assert_allclose(np.sum(dscale_parts, axis=0), dscale, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.sum(dbias_parts, axis=0), dbias, rtol=1e-4, atol=1e-5)


def test_the_gradient_maker_feeds_the_summed_gradients_in_place():
    op = core.CreateOperator("SpatialBN", ["x", "s", "b", "rm", "rv", "sums", "sumsqs"],
                             ["y", "rm", "rv", "sm", "srstd"], is_test=0, num_batches=2)
    grad_ops, _ = core.GradientRegistry.GetGradientForOp(op, ["y_grad", None, None, None, None])
    assert grad_ops[0].type == "SpatialBNGradient"
    assert list(grad_ops[0].input) == ["x", "s", "y_grad", "sm", "srstd", "s_grad", "b_grad"]
    assert list(grad_ops[0].output) == ["x_grad", "s_grad", "b_grad"]


def test_multi_batch_without_the_sums_is_named():
    workspace.ResetWorkspace()
    for name, value in dict(x=np.ones((2, 3, 2, 2), np.float32), s=np.ones(3, np.float32),
                            b=np.zeros(3, np.float32), rm=np.zeros(3, np.float32), rv=np.ones(3, np.float32)).items():
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match="7 inputs"):
        _run("SpatialBN", ["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "sr"], is_test=0, num_batches=2)


def test_combine_spatial_bn_on_two_devices_trains_like_one_device_on_the_whole_batch():
    """data_parallel_model's combine_spatial_bn in one process: two CPU devices with
    the batch statistics combined equal one device on the concatenated batch (without
    combining, each device normalises with its own half's statistics and they differ)."""
    import os
    import sys
    from caffe2py import optimizer
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _multishard_worker as worker

    def trained(devices, combine, shared_model=False):
        workspace.ResetWorkspace()
        optimizer.reset_optimizer_instance_count()
        return worker.snapshot(worker.train("resnet", 2, devices=devices, combine_spatial_bn=combine,
                                            shared_model=shared_model))

    whole = trained(1, False)
    combined = trained(2, True)
    shared = trained(2, True, shared_model=True)     # resnet50_trainer.py's --use_cpu defaults
    separate = trained(2, False)
    for name, value in whole.items():
        np.testing.assert_allclose(combined[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
        if name in shared:      # a shared model's checkpoint blobs leave out the momentum
            np.testing.assert_allclose(shared[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
    assert "cpu_0/conv1_w" in shared and "cpu_0/bn1_s" in shared
    assert not np.allclose(separate["cpu_0/conv1_w"], whole["cpu_0/conv1_w"], rtol=1e-5, atol=1e-5)
    workspace.ResetWorkspace()


def test_an_empty_batch_in_the_multi_batch_form_keeps_the_running_statistics():
    """Caffe2 accepts N == 0 with num_batches > 1 (its own op test draws N from 0): Y is
    empty, the running statistics stay, the saved statistics and the gradients of scale
    and bias are zeros."""
    workspace.ResetWorkspace()
    rm, rv = np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.25, 3.0], np.float32)
    for name, value in (("x", np.zeros((0, 3, 2, 2), np.float32)), ("scale", np.ones(3, np.float32)),
                        ("bias", np.zeros(3, np.float32)), ("rm", rm), ("rv", rv),
                        ("sums", np.ones(3, np.float32)), ("sumsqs", np.ones(3, np.float32)),
                        ("dy", np.zeros((0, 3, 2, 2), np.float32))):
        workspace.FeedBlob(name, value)
    _run("SpatialBN", ["x", "scale", "bias", "rm", "rv", "sums", "sumsqs"], ["y", "rm", "rv", "mean", "rstd"],
         is_test=0, epsilon=EPS, momentum=MOMENTUM, num_batches=2)
    assert workspace.FetchBlob("y").shape == (0, 3, 2, 2)
    np.testing.assert_array_equal(workspace.FetchBlob("rm"), rm)
    np.testing.assert_array_equal(workspace.FetchBlob("rv"), rv)
    np.testing.assert_array_equal(workspace.FetchBlob("mean"), np.zeros(3))
    np.testing.assert_array_equal(workspace.FetchBlob("rstd"), np.zeros(3))
    _run("SpatialBNGradient", ["x", "scale", "dy", "mean", "rstd", "sums", "sumsqs"], ["dx", "dscale", "dbias"],
         epsilon=EPS, num_batches=2)
    assert workspace.FetchBlob("dx").shape == (0, 3, 2, 2)
    np.testing.assert_array_equal(workspace.FetchBlob("dscale"), np.zeros(3))
    np.testing.assert_array_equal(workspace.FetchBlob("dbias"), np.zeros(3))
