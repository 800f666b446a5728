"""caffe2py.modeling.gradient_clipping.GradientClipping in a real training step:
fc + squared-distance loss, AddGradientOperators, the modifier, build_sgd. The
clipped gradient and the updated weights are checked against torch autograd's
gradient clipped by the NumPy formula (and torch.nn.utils.clip_grad_norm_ /
clip_grad_value_ where they compute the same thing)."""
import numpy as np
import pytest

from caffe2py import brew, core, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.modeling.gradient_clipping import GradientClipping

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2601)
LR = 0.1


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()


def build(modifier, sparse=False):
    """fc(4 -> 3) on X, loss = mean over rows of 0.5 * ||fc - label||^2; optional
    sparse embedding path (Gather) whose gradient is a GradientSlice."""
    model = model_helper.ModelHelper(name="clip")
    x = RNG.standard_normal((5, 4)).astype(np.float32) * 3
    label = RNG.standard_normal((5, 3)).astype(np.float32)
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("label", label)
    fc = brew.fc(model, "X", "fc", 4, 3, weight_init=("GaussianFill", {"std": 2.0}),
                 bias_init=("GaussianFill", {"std": 1.0}))
    out = fc
    if sparse:
        emb = model.create_param("emb", [6, 3], ("GaussianFill", {"std": 1.0}))
        workspace.FeedBlob("ids", np.array([1, 4, 1, 0, 5], np.int32))
        rows = model.net.Gather([emb, "ids"], "rows")
        out = model.net.Add([fc, rows], "fc_plus")
    dist = model.net.SquaredL2Distance([out, "label"], "dist")
    loss = model.net.AveragedLoss(dist, "loss")
    grad_map = model.AddGradientOperators([loss])
    # with the sparse path, pass the params' map: it holds emb's GradientSlice
    modifier(model.net, grad_map=model.param_to_grad if sparse else grad_map)
    optimizer.build_sgd(model, base_learning_rate=LR)
    workspace.RunNetOnce(model.param_init_net)
    params = {p: workspace.FetchBlob(p).copy() for p in ("fc_w", "fc_b")}
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net)
    return model, x, label, params


def torch_grads(x, label, params):
    w = torch.tensor(params["fc_w"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(params["fc_b"], dtype=torch.float64, requires_grad=True)
    y = torch.tensor(x, dtype=torch.float64) @ w.T + b
    loss = (0.5 * ((y - torch.tensor(label, dtype=torch.float64)) ** 2).sum(1)).mean()
    loss.backward()
    return {"fc_w": w, "fc_b": b}


def check_step(params, expected_grads):
    for name, g in expected_grads.items():
        np.testing.assert_allclose(workspace.FetchBlob(name + "_grad"), g, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob(name), params[name] - LR * g, rtol=1e-4, atol=1e-6)


def scale(g, norm, threshold):
    return g * (threshold / norm) if norm > threshold else g


@pytest.mark.parametrize("norm_type,p", [("l2_norm", 2), ("l1_norm", 1)])
def test_by_norm_matches_formula_and_torch(norm_type, p):
    _, x, label, params = build(GradientClipping("by_norm", clip_norm_type=norm_type, clip_threshold=0.5))
    tensors = torch_grads(x, label, params)
    raw = {k: t.grad.numpy().copy() for k, t in tensors.items()}
    expected = {k: scale(g, np.sum(np.abs(g) ** p) ** (1.0 / p), 0.5) for k, g in raw.items()}
    assert all(np.sum(np.abs(g) ** p) ** (1.0 / p) > 0.5 for g in raw.values())   # clipping happens
    check_step(params, expected)
    # torch's per-tensor clip_grad_norm_ is the same map (eps aside)
    for name, t in tensors.items():
        torch.nn.utils.clip_grad_norm_([t], max_norm=0.5, norm_type=p)
        np.testing.assert_allclose(workspace.FetchBlob(name + "_grad"), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_below_threshold_leaves_gradient():
    _, x, label, params = build(GradientClipping("by_norm", clip_threshold=1e6))
    check_step(params, {k: t.grad.numpy() for k, t in torch_grads(x, label, params).items()})


@pytest.mark.parametrize("norm_type,p", [("l2_norm", 2), ("l1_norm", 1)])
def test_by_norm_relative_to_parameter_norm(norm_type, p):
    model, x, label, params = build(GradientClipping(
        "by_norm", clip_norm_type=norm_type, clip_threshold=0.1, use_parameter_norm=True,
        compute_norm_ratio=True))
    raw = {k: t.grad.numpy() for k, t in torch_grads(x, label, params).items()}
    norm = lambda a: np.sum(np.abs(a.astype(np.float64)) ** p) ** (1.0 / p)   # noqa: E731
    expected = {k: scale(g, norm(g), 0.1 * norm(params[k])) for k, g in raw.items()}
    check_step(params, expected)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w_norm_ratio").reshape(()),
                               norm(raw["fc_w"]) / norm(params["fc_w"]), rtol=1e-4)


def test_by_value_matches_numpy_clip():
    _, x, label, params = build(GradientClipping("by_value", clip_max=0.2, clip_min=-0.3))
    tensors = torch_grads(x, label, params)
    check_step(params, {k: np.clip(t.grad.numpy(), -0.3, 0.2) for k, t in tensors.items()})


def test_symmetric_by_value_matches_clip_grad_value():
    _, x, label, params = build(GradientClipping("by_value", clip_max=0.2, clip_min=-0.2))
    for name, t in torch_grads(x, label, params).items():
        torch.nn.utils.clip_grad_value_([t], 0.2)
        np.testing.assert_allclose(workspace.FetchBlob(name + "_grad"), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_include_exclude_and_sparse_skipped():
    model, x, label, params = build(GradientClipping("by_value", clip_max=1e-3, clip_min=-1e-3,
                                                     blobs_to_exclude=["fc_b"]), sparse=True)
    g_b = workspace.FetchBlob("fc_b_grad")
    assert np.abs(g_b).max() > 1e-3            # excluded: not clipped
    assert np.abs(workspace.FetchBlob("fc_w_grad")).max() <= 1e-3 + 1e-9
    # the embedding's gradient is a GradientSlice (values: rows_grad): left as it is
    assert isinstance(model.param_to_grad["emb"], core.GradientSlice)
    assert np.abs(workspace.FetchBlob("rows_grad")).max() > 1e-3
    assert not any(op.type == "Clip" and op.input[0] == "rows_grad" for op in model.net.Proto().op)
    workspace.ResetWorkspace()
    build(GradientClipping("by_value", clip_max=1e-3, clip_min=-1e-3, blobs_to_include=["fc_b"]))
    assert np.abs(workspace.FetchBlob("fc_b_grad")).max() <= 1e-3 + 1e-9
    assert np.abs(workspace.FetchBlob("fc_w_grad")).max() > 1e-3


def test_named_errors():
    with pytest.raises(Caffe2Error, match="grad_clip_method"):
        GradientClipping("by_magic")
    with pytest.raises(Caffe2Error, match="clip_norm_type"):
        GradientClipping("by_norm", clip_norm_type="l3_norm")
    with pytest.raises(Caffe2Error, match="not defined in net"):
        build(GradientClipping("by_norm", blobs_to_include=["no_such_param"]))
    net = core.Net("n")
    with pytest.raises(Caffe2Error, match="grad_map"):
        GradientClipping("by_norm")(net)


@pytest.mark.parametrize("kwargs,n_ops", [
    (dict(grad_clip_method="by_norm", clip_norm_type="l2_norm"), 17),        # LpNorm, Pow, ClipTensorByScaling
    (dict(grad_clip_method="by_norm", clip_norm_type="l1_norm"), 15),        # LpNorm, ClipTensorByScaling
    (dict(grad_clip_method="by_norm", use_parameter_norm=True), 21),          # + LpNorm, Pow of the param
    (dict(grad_clip_method="by_norm", use_parameter_norm=True, compute_norm_ratio=True), 23),   # + Div
    (dict(grad_clip_method="by_value", clip_max=1e-8, clip_min=0), 13),      # Clip
])
def test_op_counts_of_caffe2s_two_layer_net(kwargs, n_ops):
    """Caffe2's gradient_clipping_test net: 5 forward + 6 backward ops, then the
    clipping ops of fc1_w and fc2_w (the counts Caffe2's test asserts)."""
    model = model_helper.ModelHelper(name="test")
    data = model.net.AddExternalInput("data")
    fc1 = brew.fc(model, data, "fc1", dim_in=4, dim_out=2)
    fc2 = brew.fc(model, fc1, "fc2", dim_in=2, dim_out=1)
    sigm = model.net.Sigmoid(fc2, "sigm")
    sq = model.net.SquaredL2Distance([sigm, "label"], "sq")
    loss = model.net.SumElements(sq, "loss")
    grad_map = model.AddGradientOperators([loss])
    GradientClipping(clip_threshold=0.1, **kwargs)(model.net, grad_map={k: grad_map[k] for k in ["fc1_w", "fc2_w"]})
    workspace.FeedBlob("data", RNG.random((10, 4)).astype(np.float32))
    workspace.FeedBlob("label", RNG.random((10, 1)).astype(np.float32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    assert len(model.net.Proto().op) == n_ops
    if kwargs["grad_clip_method"] == "by_value":
        g = workspace.FetchBlob("fc1_w_grad")
        assert g.max() <= 1e-8 and g.min() >= 0
