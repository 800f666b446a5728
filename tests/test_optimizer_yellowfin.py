"""optimizer.build_yellowfin / YellowFinOptimizer (Caffe2's): the state blobs it
creates, and the first two steps of a linear model against momentum SGD written
in NumPy (YellowFin tunes its learning rate and momentum only after a step has
used them: steps 1 and 2 use the initial alpha and mu)."""
import numpy as np
import pytest

from caffe2py import brew, optimizer, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.model_helper import ModelHelper


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()
    yield
    workspace.ResetWorkspace()


def _linear_model():
    model = ModelHelper(name="yf")
    fc = brew.fc(model, "x", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.5}),
                 bias_init=("ConstantFill", {"value": 0.0}))
    dist = model.net.SquaredL2Distance([fc, "t"], "dist")
    loss = model.net.AveragedLoss(dist, "loss")
    model.AddGradientOperators([loss])
    return model


def test_first_two_steps_are_momentum_sgd_with_the_initial_alpha_and_mu():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 1)).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("t", t)
    model = _linear_model()
    alpha, mu = 0.05, 0.5
    optimizer.build_yellowfin(model, base_learning_rate=alpha, mu=mu)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)

    w, b = np.full((1, 3), 0.5), np.zeros(1)
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    for _ in range(2):
        workspace.RunNet(model.net.Name())
        g = ((x @ w.T + b) - t) / len(x)          # d(mean of 0.5 |fc - t|^2) / d fc
        gw, gb = g.T @ x, g.sum(axis=0)
        mw, mb = mu * mw + alpha * gw, mu * mb + alpha * gb
        w, b = w - mw, b - mb
        np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b, rtol=1e-5, atol=1e-6)
    assert workspace.FetchBlob("optimizer_iteration").tolist() == [2]


def test_state_blobs_and_auxiliary_parameters():
    model = _linear_model()
    opt = optimizer.build_yellowfin(model, base_learning_rate=0.1, curv_win_width=7)
    workspace.RunNetOnce(model.param_init_net)
    assert workspace.FetchBlob("fc_w_curv_win").shape == (7,)
    assert workspace.FetchBlob("fc_w_scalars_memory").shape == (5,)
    assert workspace.FetchBlob("fc_w_lr_avg").tolist() == pytest.approx([0.1])
    assert workspace.FetchBlob("fc_w_g_avg").shape == (1, 3)
    yf_ops = [op for op in model.net.Proto().op if op.type == "YellowFin"]
    assert len(yf_ops) == 2 and list(yf_ops[0].input)[-2:] == ["fc_w_grad", "optimizer_iteration"]
    aux = opt.get_auxiliary_parameters()
    assert [str(b) for b in aux.shared] == ["optimizer_iteration", "optimizer_iteration"]
    assert len(aux.local) == 14


def test_sparse_gradients_and_bad_alpha_are_refused():
    model = ModelHelper(name="sparse_yf")
    table = model.create_param("table", [5, 2], ("ConstantFill", {"value": 1.0}))
    gathered = model.net.Gather([table, "ids"], "gathered")
    loss = model.net.AveragedLoss(model.net.SumElements(gathered, "s"), "loss")
    model.AddGradientOperators([loss])
    with pytest.raises(Caffe2Error, match="sparse"):
        optimizer.build_yellowfin(model)
    with pytest.raises(Caffe2Error, match="positive"):
        optimizer.build_yellowfin(_linear_model(), base_learning_rate=0.0)
