"""SpatialBN's multi-batch form (num_batches > 1): the statistics of several batches
come in as per-channel sums (SpatialBN inputs 5 / 6: sum and sum of squares of X;
SpatialBNGradient inputs 5 / 6: summed dscale and dbias), against NumPy formulas."""
import numpy as np
import pytest

from caffe2py import core, gradients, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(9)
N, C, H, W, K = 3, 4, 2, 5, 3          # K batches of this one's size
EPS, MOMENTUM = 1e-3, 0.8


def _per_channel(v, order):
    return v.reshape(1, C, 1, 1) if order == "NCHW" else v.reshape(1, 1, 1, C)


def _axes(order):
    return (0, 2, 3) if order == "NCHW" else (0, 1, 2)


def _x(order):
    shape = (N, C, H, W) if order == "NCHW" else (N, H, W, C)
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_forward_takes_the_statistics_from_the_sums(order):
    x = _x(order)
    batches = [x] + [_x(order) for _ in range(K - 1)]
    sums = sum(b.astype(np.float64).sum(axis=_axes(order)) for b in batches).astype(np.float32)
    sums_sq = sum(np.square(b.astype(np.float64)).sum(axis=_axes(order)) for b in batches).astype(np.float32)
    scale, bias = RNG.standard_normal(C).astype(np.float32), RNG.standard_normal(C).astype(np.float32)
    rm, rv = RNG.standard_normal(C).astype(np.float32), RNG.random(C).astype(np.float32)
    op = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "rm", "rv", "sums", "sums_sq"],
                             ["Y", "rm", "rv", "saved_mean", "saved_rstd"], is_test=0, order=order,
                             epsilon=EPS, momentum=MOMENTUM, num_batches=K)
    for name, value in dict(X=x, scale=scale, bias=bias, rm=rm, rv=rv, sums=sums, sums_sq=sums_sq).items():
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    # the mean and (biased) variance of all K batches together
    everything = np.concatenate(batches, axis=0).astype(np.float64)
    mean, var = everything.mean(axis=_axes(order)), everything.var(axis=_axes(order))
    size = K * N * H * W
    rstd = 1 / np.sqrt(var + EPS)
    y = (x - _per_channel(mean, order)) * _per_channel(rstd * scale, order) + _per_channel(bias, order)
    np.testing.assert_allclose(workspace.FetchBlob("Y"), y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob("saved_mean"), mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("saved_rstd"), rstd, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("rm"), MOMENTUM * rm + (1 - MOMENTUM) * mean,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("rv"),
                               MOMENTUM * rv + (1 - MOMENTUM) * var * size / (size - 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_gradient_divides_the_summed_scale_and_bias_gradients(order):
    x, dy = _x(order), _x(order)
    scale, mean = RNG.standard_normal(C).astype(np.float32), RNG.standard_normal(C).astype(np.float32)
    rstd = (RNG.random(C) + 0.5).astype(np.float32)
    dscale_sum, dbias_sum = RNG.standard_normal(C).astype(np.float32), RNG.standard_normal(C).astype(np.float32)
    op = core.CreateOperator("SpatialBNGradient", ["X", "scale", "dY", "mean", "rstd", "dscale_sum", "dbias_sum"],
                             ["dX", "dscale", "dbias"], order=order, epsilon=EPS, num_batches=K)
    for name, value in dict(X=x, scale=scale, dY=dy, mean=mean, rstd=rstd, dscale_sum=dscale_sum,
                            dbias_sum=dbias_sum).items():
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    dscale, dbias = dscale_sum / K, dbias_sum / K
    m = N * H * W
    # dX of y = (x - mu) * rstd * scale + bias through this batch's share of the statistics
    xhat = (x - _per_channel(mean, order)) * _per_channel(rstd, order)
    dx = _per_channel(scale * rstd / m, order) * (m * dy - _per_channel(dbias, order)
                                                  - xhat * _per_channel(dscale, order))
    np.testing.assert_allclose(workspace.FetchBlob("dX"), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob("dscale"), dscale, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("dbias"), dbias, rtol=1e-6)


def test_the_maker_reads_the_summed_gradients_in_place():
    # Caffe2's maker: the summed dscale / dbias are read from the gradient blobs
    # themselves (filled across batches by the caller, e.g. data-parallel training)
    op = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "rm", "rv", "sums", "sums_sq"],
                             ["Y", "rm", "rv", "sm", "srstd"], is_test=0, num_batches=2)
    grad_ops, g_input = gradients.get_gradient_for_op(op, ["dY", None, None, None, None])
    assert [g.type for g in grad_ops] == ["SpatialBNGradient"]
    assert list(grad_ops[0].input) == ["X", "scale", "dY", "sm", "srstd", "scale_grad", "bias_grad"]
    assert list(grad_ops[0].output) == ["X_grad", "scale_grad", "bias_grad"]
    assert g_input[:3] == ["X_grad", "scale_grad", "bias_grad"]
    # as in Caffe2's backward pass builder, a whole net cannot differentiate it: the
    # gradient op reads gradients nothing in the net made
    net = core.Net("bn_multi")
    net.Proto().op.add().CopyFrom(op)
    with pytest.raises(Caffe2Error, match="reads 'scale_grad'"):
        net.AddGradientOperators({"Y": "dY"})


def test_num_batches_without_the_sums_is_a_named_error():
    op = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "rm", "rv"],
                             ["Y", "rm", "rv", "sm", "srstd"], is_test=0, num_batches=2)
    for name, value in dict(X=_x("NCHW"), scale=np.ones(C, np.float32), bias=np.zeros(C, np.float32),
                            rm=np.zeros(C, np.float32), rv=np.ones(C, np.float32)).items():
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match="num_batches > 1 needs 7 inputs"):
        workspace.RunOperatorOnce(op)
