"""Fused and unfused plans give identical training (issue #38's done-when, training
side): MLP and CNN training nets built the way the training tests build them
(brew layers, AddGradientOperators, caffe2py.optimizer's SGD / Adam), run a few steps
with CAFFE2PY_FUSION on and off, and every blob (parameters, optimizer state, loss,
gradients) compared. Exact mode (1, the default) must be bitwise; mode 2 (also
Sigmoid / Tanh / Exp / Log, numba's libm) within a few ulp. The tests also check that
the gradient nets' backward chains (ReluGradient, SigmoidGradient, TanhGradient,
Add/MulGradient, the gradient-accumulating Sum, Scale) were fused and that the fused code ran, so a plan
that fused nothing, or fused the backward wrongly, fails here."""
import numpy as np
import pytest

from caffe2py import brew, fusion, model_helper, optimizer, workspace
from caffe2py.executor import compile_net

BACKWARD = {"ReluGradient", "SigmoidGradient", "TanhGradient", "MulGradient", "AddGradient"}


@pytest.fixture(autouse=True)
def every_group_runs_fused(monkeypatch):
    # these nets are small: without this the groups would fall back (too few elements)
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _gated_residual_mlp(model, rs):
    """fc -> relu -> sigmoid(.) * tanh(.) -> fc -> + relu1 -> relu -> scale -> fc: its
    backward has Scale + ReluGradient and TanhGradient + SigmoidGradient + Sum +
    ReluGradient chains."""
    workspace.FeedBlob("data", rs.standard_normal((64, 32)).astype(np.float32))
    h1 = brew.relu(model, brew.fc(model, "data", "fc1", 32, 48), "relu1")
    gated = model.net.Mul([model.net.Sigmoid(h1, "sig"), model.net.Tanh(h1, "th")], "gated")
    res = model.net.Add([h1, brew.fc(model, gated, "fc2", 48, 48)], "res")
    out = model.net.Scale(brew.relu(model, res, "relu2"), "scaled", scale=0.5)
    return brew.fc(model, out, "pred", 48, 10), 64


def _residual_cnn(model, rs):
    """conv -> relu -> conv -> + (residual) -> relu -> pool -> fc (LeNet-sized)."""
    workspace.FeedBlob("data", rs.standard_normal((4, 3, 12, 12)).astype(np.float32))
    c1 = brew.relu(model, brew.conv(model, "data", "conv1", dim_in=3, dim_out=8, kernel=3, pad=1), "r1")
    c2 = brew.conv(model, c1, "conv2", dim_in=8, dim_out=8, kernel=3, pad=1)
    r2 = brew.relu(model, model.net.Add([c1, c2], "res"), "r2")
    s = model.net.Sigmoid(r2, "gate")
    pool = brew.max_pool(model, s, "pool", kernel=2, stride=2)
    return brew.fc(model, pool, "pred", 8 * 6 * 6, 10), 4


def _train(build, opt, mode, monkeypatch, steps=3):
    """Every blob after `steps` training iterations with CAFFE2PY_FUSION=mode, and the
    training net's plan (compiled as the workspace compiles it)."""
    monkeypatch.setenv("CAFFE2PY_FUSION", str(mode))
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()      # the same blob names in both runs
    rs = np.random.RandomState(11)
    model = model_helper.ModelHelper(name="train_%s" % build.__name__)
    pred, batch = build(model, rs)
    workspace.FeedBlob("label", rs.randint(0, 10, size=batch).astype(np.int32))
    _, loss = model.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    getattr(optimizer, "build_" + opt)(model, base_learning_rate=0.05)
    workspace.RunNetOnce(model.param_init_net)
    for param in model.params:      # the fillers are random: the same start for both runs
        shape = workspace.FetchBlob(param).shape
        workspace.FeedBlob(param, (rs.standard_normal(shape) * 0.2).astype(np.float32))
    workspace.CreateNet(model.net)
    losses = []
    for _ in range(steps):
        workspace.RunNet(model.net.Proto().name)
        losses.append(float(workspace.FetchBlob("loss")))
    blobs = {}
    for b in workspace.Blobs():
        value = workspace.FetchBlob(b)
        if isinstance(value, np.ndarray) or np.isscalar(value):   # not the iteration mutex
            blobs[b] = np.array(value)
    plan = compile_net(model.net.Proto(), workspace.Blobs())
    return blobs, losses, plan, model.params


def _fused_types(plan):
    return [[m.op_def.type for m in s.members] for s in plan.steps if getattr(s, "members", None)]


@pytest.mark.parametrize("build", [_gated_residual_mlp, _residual_cnn])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_training_fused_and_unfused_are_bitwise_equal(build, opt, monkeypatch):
    before = fusion.stats["fused_runs"]
    fused, fused_losses, plan, params = _train(build, opt, 1, monkeypatch)
    ran = fusion.stats["fused_runs"] - before
    plain, plain_losses, plain_plan, _ = _train(build, opt, 0, monkeypatch)
    groups = _fused_types(plan)
    # the backward fused: some group holds an activation gradient, and ran fused every step
    assert plan.fused_groups > 0 and plain_plan.fused_groups == 0
    assert any(BACKWARD & set(g) for g in groups), groups
    assert ran >= 3 * plan.fused_groups
    assert sorted(fused) == sorted(plain)
    for name in plain:
        assert fused[name].dtype == plain[name].dtype, name
        np.testing.assert_array_equal(fused[name], plain[name], err_msg=name)
    assert fused_losses == plain_losses
    # and it trained: the parameters moved from their start, the loss is finite
    assert all(np.isfinite(v) for v in fused_losses)
    assert all(np.any(fused[p + "_grad"] != 0) for p in params if p + "_grad" in fused)


def test_the_mlps_backward_chains_fuse_whole():
    """Which groups the exact mode forms in the MLP's gradient net: the chains of
    activation gradients, the two-output Add/MulGradient and the Sum that accumulates
    relu1's three gradients."""
    plan = _train(_gated_residual_mlp, "sgd", 1, pytest.MonkeyPatch(), steps=1)[2]
    groups = _fused_types(plan)
    assert ["Scale", "ReluGradient", "AddGradient"] in groups
    assert ["MulGradient", "TanhGradient", "SigmoidGradient", "Sum", "ReluGradient"] in groups


@pytest.mark.parametrize("build", [_gated_residual_mlp, _residual_cnn])
def test_training_in_mode_2_stays_within_ulps(build, monkeypatch):
    """Mode 2 also fuses Sigmoid and Tanh (numba's libm: an ulp or so from NumPy's),
    so three steps of training agree closely, not bitwise."""
    fused, fused_losses, plan, _ = _train(build, "sgd", 2, monkeypatch)
    plain, plain_losses, _, _ = _train(build, "sgd", 0, monkeypatch)
    assert any({"Sigmoid"} & set(g) for g in _fused_types(plan)) or build is _residual_cnn
    for name in plain:
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5)


# ----------------------------------------------------------------- two-output gradients

def _binary_gradient_net(op_type, n_inputs, mode):
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    net = caffe2_pb2.NetDef(name="grad_" + op_type)
    ins = ["dc", "a", "b", "c"][:n_inputs]
    net.op.extend([core.CreateOperator("Relu", ["g"], ["dc"]),
                   core.CreateOperator(op_type, ins, ["da", "db"]),
                   core.CreateOperator("Mul", ["da", "db"], ["y"])])
    net.arg.add(name="fusion", i=mode)
    return net


@pytest.mark.parametrize("op_type,n_inputs,formula", [
    ("AddGradient", 3, lambda dc, a, b, c: (dc, dc)),
    ("SubGradient", 3, lambda dc, a, b, c: (dc, -dc)),
    ("MulGradient", 3, lambda dc, a, b, c: (dc * b, dc * a)),
    ("DivGradient", 4, lambda dc, a, b, c: (dc / b, -dc * c / b)),
])
def test_binary_gradients_fuse_with_both_outputs(op_type, n_inputs, formula):
    """Relu -> XGradient -> Mul(dA, dB): one group, both outputs from the loop, bitwise
    the unfused ops' and NumPy's formulas."""
    rs = np.random.RandomState(5)
    feeds = {k: rs.standard_normal((6, 33)).astype(np.float32) for k in ("g", "a", "b", "c")}
    feeds["b"] += np.sign(feeds["b"]) * 0.5          # Div: away from 0
    results = []
    for mode in (1, 0):
        blobs = dict(feeds)
        plan = compile_net(_binary_gradient_net(op_type, n_inputs, mode), list(blobs))
        before = fusion.stats["fused_runs"]
        plan.run(blobs)
        assert plan.fused_groups == fusion.stats["fused_runs"] - before == mode
        results.append(blobs)
    dc = np.maximum(feeds["g"], 0)
    da, db = formula(dc, feeds["a"], feeds["b"], feeds["c"])
    for name, want in (("da", da), ("db", db), ("y", da * db)):
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)
        np.testing.assert_array_equal(results[0][name], want, err_msg=name)


def test_a_broadcast_operands_gradient_is_not_fused():
    """B broadcast along rows: its gradient sums dC over them, no elementwise op: the
    group declines at run time and the op's own kernel runs."""
    rs = np.random.RandomState(6)
    feeds = {"g": rs.standard_normal((6, 33)).astype(np.float32), "a": rs.standard_normal((6, 33)).astype(np.float32),
             "b": rs.standard_normal(33).astype(np.float32)}
    blobs = dict(feeds)
    plan = compile_net(_binary_gradient_net("MulGradient", 3, 1), list(blobs))
    before = dict(fusion.stats)
    plan.run(blobs)
    assert fusion.stats["fused_runs"] == before["fused_runs"] and fusion.stats["fallback_runs"] > before["fallback_runs"]
    dc = np.maximum(feeds["g"], 0)
    np.testing.assert_allclose(blobs["db"], (dc * feeds["a"]).sum(0), rtol=1e-5)
    np.testing.assert_array_equal(blobs["da"], dc * feeds["b"])
