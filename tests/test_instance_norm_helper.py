"""brew.instance_norm / CNNModelHelper.InstanceNorm (Caffe2's helper: scale ones and bias
zeros named <out>_s / _b, saved statistics <out>_sm / _siv in training) and InstanceNorm
in place on its input, checked against the formula written out in NumPy."""
import numpy as np
import pytest

from caffe2py import brew, cnn, core, model_helper, workspace


def _reference(x, scale, bias, eps):
    mean = x.mean(axis=(2, 3), keepdims=True)
    var = x.var(axis=(2, 3), keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale[None, :, None, None] + bias[None, :, None, None]


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("is_test", [False, True])
def test_cnn_helper_adds_parameters_and_normalises(order, is_test):
    workspace.ResetWorkspace()
    model = cnn.CNNModelHelper(order=order)
    out = model.InstanceNorm("input", "output", 3, epsilon=1e-5, is_test=is_test)
    assert str(out) == "output"
    assert [str(p) for p in model.params] == ["output_s", "output_b"]
    op = model.net.Proto().op[-1]
    assert op.type == "InstanceNorm" and list(op.input) == ["input", "output_s", "output_b"]
    assert list(op.output) == (["output"] if is_test else ["output", "output_sm", "output_siv"])
    x = np.random.default_rng(1).normal(size=(2, 3, 4, 5)).astype(np.float32)
    workspace.FeedBlob("input", x if order == "NCHW" else x.transpose(0, 2, 3, 1))
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    y = workspace.FetchBlob("output")
    y = y if order == "NCHW" else y.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(y, _reference(x, np.ones(3), np.zeros(3), 1e-5), rtol=1e-4, atol=1e-4)


def test_brew_instance_norm_and_in_place_op():
    workspace.ResetWorkspace()
    model = model_helper.ModelHelper(name="inorm")
    brew.instance_norm(model, "x", "y", 2, epsilon=1e-3)
    assert [op.type for op in model.param_init_net.Proto().op] == ["ConstantFill", "ConstantFill"]
    x = np.random.default_rng(2).normal(size=(3, 2, 3, 3)).astype(np.float32)
    scale, bias = np.array([2.0, -1.0], np.float32), np.array([0.5, 0.0], np.float32)
    for name, value in (("x", x), ("s", scale), ("b", bias)):
        workspace.FeedBlob(name, value)
    # in place on its input, as Caffe2's schema allows
    workspace.RunOperatorOnce(core.CreateOperator("InstanceNorm", ["x", "s", "b"], ["x"], epsilon=1e-3))
    np.testing.assert_allclose(workspace.FetchBlob("x"), _reference(x, scale, bias, 1e-3), rtol=1e-4, atol=1e-4)
