"""caffe2py.optimizer (build_sgd, build_adagrad, build_adam, ...) and ModelHelper's
parameter bookkeeping, on tiny models whose param_to_grad is filled by hand (the
gradient blobs are fed), checked step by step against the update formulas, plus
brew's training helpers, GlobalInit and the net_drawer stub."""
import logging
from collections import namedtuple

import numpy as np
import pytest

from caffe2py import brew, core, model_helper, optimizer, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.modeling import initializers
from caffe2py.modeling.parameter_info import ParameterInfo, ParameterTags
from caffe2py.optimizer_context import UseOptimizer

# core.GradientSlice comes with the gradient machinery; any (indices, values) pair works
GradientSlice = getattr(core, "GradientSlice", None) or namedtuple("GradientSlice", ["indices", "values"])

RNG = np.random.default_rng(160)
STEPS = 4


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    optimizer.reset_optimizer_instance_count()


def dense_model(**kwargs):
    """fc (3 -> 2) with gradients fc_w_grad / fc_b_grad fed by the test."""
    model = model_helper.ModelHelper(name="dense", **kwargs)
    brew.fc(model, "x", "y", dim_in=3, dim_out=2)
    w, b = model.params
    model.param_to_grad = {w: core.BlobReference("fc_w_grad"), b: core.BlobReference("fc_b_grad")}
    workspace.FeedBlob("x", f32(5, 3))
    return model


def sparse_model(rows=10, dim=4):
    """An embedding table `emb` with a GradientSlice (emb_idx, emb_vals) gradient."""
    model = model_helper.ModelHelper(name="sparse")
    emb = model.create_param("emb", [rows, dim], ("GaussianFill", {"std": 0.1}), tags=ParameterTags.WEIGHT)
    model.param_to_grad = {emb: GradientSlice(core.BlobReference("emb_idx"), core.BlobReference("emb_vals"))}
    model.net.Gather([emb, "emb_idx"], "looked_up")       # the forward use of the table
    return model


def train(model, feeds_per_step):
    """Run the init net, then model.net once per entry of feeds_per_step; returns the
    parameters' values before training."""
    workspace.RunNetOnce(model.param_init_net)
    before = {str(p): workspace.FetchBlob(p) for p in model.params}
    for feeds in feeds_per_step:
        for name, value in feeds.items():
            workspace.FeedBlob(name, value)
        if not workspace.HasBlob("__created_" + model.net.Name()):
            workspace.CreateNet(model.net, overwrite=True)
            workspace.FeedBlob("__created_" + model.net.Name(), np.zeros(1, np.float32))
        workspace.RunNet(model.net.Name())
    return before


# ----------------------------------------------------------------- build_sgd

def test_build_sgd_dense_with_a_step_schedule():
    model = dense_model()
    optimizer.build_sgd(model, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.5)
    grads = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2)} for _ in range(STEPS)]
    before = train(model, grads)
    w, b = before["y_w"].astype(np.float64), before["y_b"].astype(np.float64)
    for t, g in enumerate(grads, start=1):        # AtomicIter runs first: iterations 1, 2, ...
        lr = 0.1 * 0.5 ** t
        w -= lr * g["fc_w_grad"]
        b -= lr * g["fc_b_grad"]
    close(workspace.FetchBlob("y_w"), w)
    close(workspace.FetchBlob("y_b"), b)
    assert workspace.FetchBlob("optimizer_iteration").tolist() == [STEPS]
    close(workspace.FetchBlob("SgdOptimizer_0_lr_cpu"), -0.1 * 0.5 ** STEPS)
    ops = [op.type for op in model.net.Proto().op]
    assert ops == ["FC", "AtomicIter", "LearningRate", "WeightedSum", "WeightedSum"]


@pytest.mark.parametrize("build", ["sgd", "adagrad"])
def test_lars_scales_each_dense_learning_rate(build):
    model = dense_model()
    if build == "sgd":
        optimizer.build_sgd(model, base_learning_rate=0.1, lars=0.5)
    else:
        optimizer.build_adagrad(model, base_learning_rate=0.1, lars=0.5)
    grads = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2)} for _ in range(STEPS)]
    before = train(model, grads)
    w, h = before["y_w"].astype(np.float64), np.zeros((2, 3))
    for g in grads:
        g = g["fc_w_grad"].astype(np.float64)
        rate = 0.1 / (np.linalg.norm(g) / np.linalg.norm(w) + 0.5)     # trust 1, wd 0, offset 0.5
        if build == "sgd":
            w -= rate * g
        else:
            h += g * g
            w -= rate * g / (np.sqrt(h) + 1e-4)
    close(workspace.FetchBlob("y_w"), w, rtol=1e-4)
    assert [op.type for op in model.net.Proto().op].count("Lars") == 2


@pytest.mark.parametrize("nesterov", [False, True])
def test_build_sgd_with_momentum(nesterov):
    model = dense_model()
    optimizer.build_sgd(model, base_learning_rate=0.2, momentum=0.9, nesterov=nesterov)
    grads = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2)} for _ in range(STEPS)]
    before = train(model, grads)
    w, m = before["y_w"].astype(np.float64), np.zeros((2, 3))
    for g in grads:
        g = g["fc_w_grad"]
        if nesterov:
            new = 0.9 * m + 0.2 * g
            w -= 1.9 * new - 0.9 * m
            m = new
        else:
            m = 0.2 * g + 0.9 * m
            w -= m
    close(workspace.FetchBlob("y_w"), w)
    close(workspace.FetchBlob("y_w_momentum"), m)


def test_build_sgd_sparse_uses_scatter_weighted_sum():
    model = sparse_model()
    optimizer.build_sgd(model, base_learning_rate=0.5)
    steps = [{"emb_idx": np.array([3, 1, 3], np.int64), "emb_vals": f32(3, 4)} for _ in range(STEPS)]
    before = train(model, steps)
    want = before["emb"].astype(np.float64)
    for s in steps:
        for i, r in enumerate(s["emb_idx"]):
            want[r] -= 0.5 * s["emb_vals"][i]
    close(workspace.FetchBlob("emb"), want)
    assert "ScatterWeightedSum" in [op.type for op in model.net.Proto().op]


def test_build_sgd_sparse_with_momentum():
    model = sparse_model()
    optimizer.build_sgd(model, base_learning_rate=0.5, momentum=0.5, nesterov=False)
    steps = [{"emb_idx": np.array([2, 5], np.int64), "emb_vals": f32(2, 4)} for _ in range(STEPS)]
    before = train(model, steps)
    want, m = before["emb"].astype(np.float64), np.zeros((10, 4))
    for s in steps:
        for i, r in enumerate(s["emb_idx"]):
            m[r] = 0.5 * s["emb_vals"][i] + 0.5 * m[r]
            want[r] -= m[r]
    close(workspace.FetchBlob("emb"), want)


def test_lr_injection_scales_every_update():
    model = dense_model()
    optimizer.build_sgd(model, base_learning_rate=0.1, allow_lr_injection=True)
    workspace.RunNetOnce(model.param_init_net)
    optimizer.set_lr_injection(0.25)
    before = workspace.FetchBlob("y_w")
    g = f32(2, 3)
    for name, value in (("fc_w_grad", g), ("fc_b_grad", f32(2))):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.net)
    close(workspace.FetchBlob("y_w"), before - 0.025 * g.astype(np.float64))
    assert optimizer.get_lr_injection().tolist() == [0.25]


# ----------------------------------------------------------------- build_adagrad / build_adam

def test_build_adagrad_dense_and_sparse():
    model = dense_model()
    emb = model.create_param("emb", [10, 4], ("GaussianFill", {}))
    model.param_to_grad[emb] = GradientSlice(core.BlobReference("emb_idx"), core.BlobReference("emb_vals"))
    optimizer.build_adagrad(model, base_learning_rate=0.3, epsilon=1e-4)
    steps = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2), "emb_idx": np.array([1, 7, 1], np.int64),
              "emb_vals": f32(3, 4)} for _ in range(STEPS)]
    before = train(model, steps)
    w, hw = before["y_w"].astype(np.float64), np.zeros((2, 3))
    e, he = before["emb"].astype(np.float64), np.zeros((10, 4))
    for s in steps:
        hw += s["fc_w_grad"] ** 2
        w -= 0.3 * s["fc_w_grad"] / (np.sqrt(hw) + 1e-4)
        for i, r in enumerate(s["emb_idx"]):
            he[r] += s["emb_vals"][i] ** 2
            e[r] -= 0.3 * s["emb_vals"][i] / (np.sqrt(he[r]) + 1e-4)
    close(workspace.FetchBlob("y_w"), w)
    close(workspace.FetchBlob("y_w_squared_sum"), hw)
    close(workspace.FetchBlob("emb"), e)
    assert {"Adagrad", "SparseAdagrad"} <= {op.type for op in model.net.Proto().op}


def test_build_adagrad_row_wise_keeps_one_moment_per_row():
    model = sparse_model(rows=6, dim=3)
    optimizer.build_adagrad(model, base_learning_rate=0.1, rowWise=True)
    steps = [{"emb_idx": np.array([0, 5], np.int64), "emb_vals": f32(2, 3)} for _ in range(STEPS)]
    before = train(model, steps)
    e, h = before["emb"].astype(np.float64), np.zeros(6)
    for s in steps:
        for i, r in enumerate(s["emb_idx"]):
            h[r] += np.mean(s["emb_vals"][i] ** 2)
            e[r] -= 0.1 * s["emb_vals"][i] / (np.sqrt(h[r]) + 1e-4)
    assert workspace.FetchBlob("emb_avg_squared_sum").shape == (6,)
    close(workspace.FetchBlob("emb"), e)
    close(workspace.FetchBlob("emb_avg_squared_sum"), h)


def test_build_adagrad_weight_decay_skips_one_d_params():
    model = dense_model()
    optimizer.build_adagrad(model, base_learning_rate=0.1, weight_decay=0.5)
    kinds = {op.output[0]: {a.name: a.f for a in op.arg} for op in model.net.Proto().op if op.type == "Adagrad"}
    assert kinds["y_w"]["weight_decay"] == 0.5 and "weight_decay" not in kinds["y_b"]


def test_build_adam_dense_and_sparse():
    model = dense_model()
    emb = model.create_param("emb", [8, 2], ("GaussianFill", {}))
    model.param_to_grad[emb] = GradientSlice(core.BlobReference("emb_idx"), core.BlobReference("emb_vals"))
    optimizer.build_adam(model, base_learning_rate=0.01)
    steps = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2), "emb_idx": np.array([6, 2], np.int64),
              "emb_vals": f32(2, 2)} for _ in range(STEPS)]
    before = train(model, steps)
    w, m1, m2 = before["y_w"].astype(np.float64), np.zeros((2, 3)), np.zeros((2, 3))
    e, e1, e2 = before["emb"].astype(np.float64), np.zeros((8, 2)), np.zeros((8, 2))
    for t, s in enumerate(steps, start=1):
        c = np.sqrt(1 - 0.999 ** (t + 1)) / (1 - 0.9 ** (t + 1))      # the op sees iteration t
        g = s["fc_w_grad"]
        m1, m2 = 0.9 * m1 + 0.1 * g, 0.999 * m2 + 0.001 * g * g
        w -= 0.01 * c * m1 / (np.sqrt(m2) + 1e-8)
        for i, r in enumerate(s["emb_idx"]):
            g = s["emb_vals"][i]
            e1[r], e2[r] = 0.9 * e1[r] + 0.1 * g, 0.999 * e2[r] + 0.001 * g * g
            e[r] -= 0.01 * c * e1[r] / (np.sqrt(e2[r]) + 1e-8)
    close(workspace.FetchBlob("y_w"), w, rtol=1e-4)
    close(workspace.FetchBlob("y_w_first_moment"), m1)
    close(workspace.FetchBlob("y_w_second_moment"), m2)
    close(workspace.FetchBlob("emb"), e, rtol=1e-4)
    assert {"Adam", "SparseAdam"} <= {op.type for op in model.net.Proto().op}


def test_build_adam_row_wise():
    model = sparse_model(rows=5, dim=2)
    optimizer.build_adam(model, base_learning_rate=0.01, rowWise=True)
    assert "RowWiseSparseAdam" in [op.type for op in model.net.Proto().op]
    train(model, [{"emb_idx": np.array([4], np.int64), "emb_vals": f32(1, 2)}])
    assert workspace.FetchBlob("emb_avg_second_moment").shape == (5,)


def test_auxiliary_parameters():
    model = dense_model()
    adam = optimizer.build_adam(model, base_learning_rate=0.01)
    aux = adam.get_auxiliary_parameters()
    assert [str(b) for b in aux.local] == ["y_w_first_moment", "y_w_second_moment",
                                           "y_b_first_moment", "y_b_second_moment"]
    assert {str(b) for b in aux.shared} == {"optimizer_iteration"}


@pytest.mark.parametrize("injection", [None, 0.25])
def test_max_gradient_norm_scales_the_step_by_the_global_norm(injection):
    # Caffe2's clipping: lr times clip / max(global norm of every gradient, clip)
    model = dense_model()
    optimizer.build_sgd(model, base_learning_rate=0.1, max_gradient_norm=0.5,
                        allow_lr_injection=injection is not None)
    grads = [{"fc_w_grad": f32(2, 3) * scale, "fc_b_grad": f32(2) * scale} for scale in (0.01, 3.0)]
    # the init net sets lr_injection to 1; a value fed before a step multiplies that step
    extra = {} if injection is None else {"lr_injection": np.array([injection], np.float32)}
    before = train(model, [dict(g, **extra) for g in grads])
    w = before["y_w"].astype(np.float64)
    for g in grads:                      # the first step is below the clip, the second above
        norm = np.sqrt(sum((v.astype(np.float64) ** 2).sum() for v in g.values()))
        w = w - 0.1 * (injection or 1.0) * 0.5 / max(norm, 0.5) * g["fc_w_grad"]
    close(workspace.FetchBlob("y_w"), w)
    close(workspace.FetchBlob("norm_clipped_grad_update/global_norm"), norm)


@pytest.mark.parametrize("build, kwargs, text", [
    (optimizer.build_sgd, dict(sparse_dedup_aggregator="sum"), "sparse_dedup_aggregator"),
    (optimizer.build_adagrad, dict(rowWise=True), "rowWise=True needs a sparse gradient"),
    (optimizer.build_adagrad, dict(swa_options={"swa_avg_start_it": 1}), "swa_options"),
    (optimizer.build_adam, dict(enableRAdam=True), "enableRAdam"),
])
def test_unsupported_options_are_named(build, kwargs, text):
    model = sparse_model() if "dedup" in text else dense_model()
    with pytest.raises(Caffe2Error, match=text):
        build(model, 0.1, **kwargs)


def _ftrl_reference(w, nz, g, alpha, beta, l1, l2):
    """FTRL-proximal, written out: nz[..., 0] = n (squared gradients), nz[..., 1] = z."""
    n, z = nz[..., 0], nz[..., 1]
    n_new = n + g * g
    z = z + g - (np.sqrt(n_new) - np.sqrt(n)) / alpha * w
    w = np.where(np.abs(z) <= l1, 0.0, (np.sign(z) * l1 - z) / ((beta + np.sqrt(n_new)) / alpha + l2))
    return w, np.stack([n_new, z], axis=-1)


def test_build_ftrl_dense_and_sparse():
    model = dense_model()
    emb = model.create_param("emb", [6, 2], ("GaussianFill", {}))
    model.param_to_grad[emb] = GradientSlice(core.BlobReference("emb_idx"), core.BlobReference("emb_vals"))
    hyper = dict(alpha=0.05, beta=0.5, lambda1=0.01, lambda2=0.02)
    optimizer.build_ftrl(model, **hyper)
    steps = [{"fc_w_grad": f32(2, 3), "fc_b_grad": f32(2), "emb_idx": np.array([5, 1], np.int64),
              "emb_vals": f32(2, 2)} for _ in range(STEPS)]
    before = train(model, steps)
    args = (hyper["alpha"], hyper["beta"], hyper["lambda1"], hyper["lambda2"])
    w, wnz = before["y_w"].astype(np.float64), np.zeros((2, 3, 2))
    e, enz = before["emb"].astype(np.float64), np.zeros((6, 2, 2))
    for s in steps:
        w, wnz = _ftrl_reference(w, wnz, s["fc_w_grad"].astype(np.float64), *args)
        rows = s["emb_idx"]
        e[rows], enz[rows] = _ftrl_reference(e[rows], enz[rows], s["emb_vals"].astype(np.float64), *args)
    close(workspace.FetchBlob("y_w"), w, rtol=1e-4, atol=1e-6)
    close(workspace.FetchBlob("y_w_ftrl_nz"), wnz, rtol=1e-4, atol=1e-6)
    close(workspace.FetchBlob("emb"), e, rtol=1e-4, atol=1e-6)
    assert workspace.FetchBlob("emb_ftrl_nz").shape == (6, 2, 2)
    assert {"Ftrl", "SparseFtrl"} <= {op.type for op in model.net.Proto().op}


def test_optimizer_needs_gradients():
    model = model_helper.ModelHelper(name="no_grads")
    brew.fc(model, "x", "y", dim_in=2, dim_out=2)
    with pytest.raises(Caffe2Error, match="AddGradientOperators"):
        optimizer.build_sgd(model, 0.1)


# ----------------------------------------------------------------- ModelHelper bookkeeping

def test_params_weights_biases_and_computed_params():
    model = model_helper.ModelHelper(name="book")
    with core.NameScope("block"):
        brew.conv(model, "data", "conv", dim_in=3, dim_out=4, kernel=3)
        brew.spatial_bn(model, "conv", "bn", dim_in=4)
    brew.fc(model, "bn", "fc", dim_in=4, dim_out=2)
    names = lambda blobs: [str(b) for b in blobs]   # noqa: E731
    assert names(model.params) == ["block/conv_w", "block/conv_b", "block/bn_s", "block/bn_b", "fc_w", "fc_b"]
    assert names(model.weights) == ["block/conv_w", "block/bn_s", "fc_w"]
    assert names(model.biases) == ["block/conv_b", "block/bn_b", "fc_b"]
    assert names(model.GetComputedParams()) == ["block/bn_rm", "block/bn_riv"]
    assert names(model.GetParams("block")) == names(model.params)[:4]
    with core.NameScope("block"):
        assert names(model.GetParams()) == names(model.params)[:4]
    assert names(model.GetAllParams("block/")) == names(model.params)[:4] + ["block/bn_rm", "block/bn_riv"]
    info = model.get_param_info("fc_w")
    assert isinstance(info, ParameterInfo) and info.shape == [2, 4] and info.size == 8
    assert model.GetParamInfo(core.BlobReference("fc_w")) is info


def test_create_param_returns_the_existing_param_and_checks_its_shape():
    model = model_helper.ModelHelper(name="shared")
    a = model.create_param("w", [2, 2], initializers.Initializer("ConstantFill", value=1.0))
    assert model.create_param("w", [2, 2], ("XavierFill", {})) == a
    assert len(model.param_init_net.Proto().op) == 1 and len(model.params) == 1
    with pytest.raises(Caffe2Error, match="'w' exists with shape \\[2, 2\\]"):
        model.create_param("w", [3], ("XavierFill", {}))


def test_validate_reports_duplicate_params():
    model = model_helper.ModelHelper(name="dupes")
    model.AddParameter(core.BlobReference("w"))
    model.AddParameter(core.BlobReference("w"))
    with pytest.raises(Caffe2Error, match="Duplicate params: \\['w'\\]"):
        model.Validate()


def test_optimization_param_info_carries_the_gradients():
    model = dense_model()
    infos = model.GetOptimizationParamInfo()
    assert [(i.name, str(i.grad)) for i in infos] == [("y_w", "fc_w_grad"), ("y_b", "fc_b_grad")]
    only = model.GetOptimizationParamInfo([model.params[1]])
    assert [i.name for i in only] == ["y_b"]


def test_skip_sparse_optim_leaves_gradient_slices_out():
    model = model_helper.ModelHelper(name="skip", skip_sparse_optim=True)
    emb = model.create_param("emb", [4, 2], ("ConstantFill", {}))
    dense = model.create_param("w", [2], ("ConstantFill", {}))
    model.param_to_grad = {emb: GradientSlice("i", "v"), dense: core.BlobReference("w_grad")}
    assert [i.name for i in model.GetOptimizationParamInfo()] == ["w"]


def test_external_initializer_when_init_params_is_off():
    model = model_helper.ModelHelper(name="external", init_params=False)
    brew.fc(model, "x", "y", dim_in=3, dim_out=2)
    assert len(model.param_init_net.Proto().op) == 0
    assert [str(p) for p in model.params] == ["y_w", "y_b"]


def test_pseudo_fp16_initializer_and_multi_precision_sgd():
    model = model_helper.ModelHelper(name="fp16")
    brew.fc(model, "x", "y", dim_in=3, dim_out=2, WeightInitializer=initializers.PseudoFP16Initializer,
            BiasInitializer=initializers.PseudoFP16Initializer)
    info = model.get_param_info("y_w")
    assert str(info.blob_copy[core.DataType.FLOAT]) == "y_w_fp32"
    w, b = model.params
    model.param_to_grad = {w: core.BlobReference("w_grad"), b: core.BlobReference("b_grad")}
    optimizer.build_multi_precision_sgd(model, base_learning_rate=0.5)
    workspace.RunNetOnce(model.param_init_net)
    assert workspace.FetchBlob("y_w").dtype == np.float16
    master = workspace.FetchBlob("y_w_fp32").astype(np.float64)
    g = f32(2, 3).astype(np.float16)
    workspace.FeedBlob("w_grad", g)
    workspace.FeedBlob("b_grad", f32(2).astype(np.float16))
    workspace.FeedBlob("x", f32(4, 3).astype(np.float16))
    net = core.Net(model.net.Proto())
    del net.Proto().op[0]                         # the fp16 FC is beside the point here
    workspace.RunNetOnce(net)
    close(workspace.FetchBlob("y_w_fp32"), master - 0.5 * g.astype(np.float64))
    close(workspace.FetchBlob("y_w"), (master - 0.5 * g.astype(np.float64)).astype(np.float16), rtol=1e-3)


def test_use_optimizer_picks_optimizers_by_tag():
    model = model_helper.ModelHelper(name="per_tag")
    with UseOptimizer({"WEIGHT": optimizer.AdagradOptimizer(alpha=0.1)}):
        brew.fc(model, "x", "y", dim_in=3, dim_out=2)
    w, b = model.params
    model.param_to_grad = {w: core.BlobReference("w_grad"), b: core.BlobReference("b_grad")}
    optimizer.build_sgd(model, base_learning_rate=0.1)
    updates = {op.output[0]: op.type for op in model.net.Proto().op if op.type in ("Adagrad", "WeightedSum")}
    assert updates == {"y_w": "Adagrad", "y_b": "WeightedSum"}


# ----------------------------------------------------------------- brew helpers and the rest

def test_brew_iter_counts_on_the_cpu():
    model = model_helper.ModelHelper(name="it")
    brew.iter(model, "ITER")
    init_op = model.param_init_net.Proto().op[0]
    assert init_op.type == "ConstantFill" and init_op.device_option.device_type == 0
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net.Name(), num_iter=3)
    assert workspace.FetchBlob("ITER").dtype == np.int64 and workspace.FetchBlob("ITER").tolist() == [3]


@pytest.mark.parametrize("via", ["brew", "optimizer"])
def test_weight_decay_adds_to_weight_gradients_only(via):
    model = dense_model()
    if via == "brew":
        brew.add_weight_decay(model, 0.1)
    else:
        optimizer.add_weight_decay(model, 0.1)
    workspace.RunNetOnce(model.param_init_net)
    w = workspace.FetchBlob("y_w").astype(np.float64)
    gw, gb = f32(2, 3), f32(2)
    workspace.FeedBlob("fc_w_grad", gw)
    workspace.FeedBlob("fc_b_grad", gb)
    workspace.RunNetOnce(model.net)
    close(workspace.FetchBlob("fc_w_grad"), gw + 0.1 * w)
    close(workspace.FetchBlob("fc_b_grad"), gb)


def test_global_init_sets_the_log_level():
    logger = logging.getLogger("caffe2py")
    old = logger.level
    try:
        assert workspace.GlobalInit(["caffe2", "--caffe2_log_level=2", "--caffe2_print_blob_sizes_at_exit=0"])
        assert logger.level == logging.ERROR
        assert core.GlobalInit(["caffe2", "--caffe2_log_level=-1"]) and logger.level == logging.DEBUG
    finally:
        logger.setLevel(old)
    with pytest.raises(Caffe2Error, match="GlobalInit expects a list of strings"):
        workspace.GlobalInit("--caffe2_log_level=0")
    with pytest.raises(Caffe2Error, match="caffe2_log_level must be an integer"):
        workspace.GlobalInit(["caffe2", "--caffe2_log_level=loud"])


def test_caffe2_module_paths_resolve():
    import importlib
    import caffe2py.compat  # noqa: F401 - installs the caffe2.python aliases
    assert importlib.import_module("caffe2.python.optimizer") is optimizer
    assert importlib.import_module("caffe2.python.modeling.initializers") is initializers
    assert importlib.import_module("caffe2.python.net_drawer").GetPlanGraph.__name__ == "GetPlanGraph"
    assert hasattr(importlib.import_module("caffe2.python.modeling.parameter_info"), "ParameterTags")
