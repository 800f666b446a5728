"""Dense optimizer ops (WeightedSum, MomentumSGD, MomentumSGDUpdate, Adagrad, Adam,
Iter/AtomicIter) against their formulas written out in float64 NumPy here, and against
torch.optim where the update coincides (skipped without torch)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(16)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_op(op_type, inputs, outputs, **kwargs):
    """Feed {name: value}, run one op, fetch the outputs (names)."""
    workspace.ResetWorkspace()
    for name, value in inputs.items():
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, list(inputs), outputs, **kwargs))
    return [workspace.FetchBlob(o) for o in outputs]


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


# ----------------------------------------------------------------- WeightedSum

def test_weighted_sum_of_three_pairs():
    x0, x1, x2 = f32(3, 4), f32(3, 4), f32(12)
    (y,) = run_op("WeightedSum", {"x0": x0, "w0": np.array([0.5], np.float32), "x1": x1,
                                  "w1": np.array([-2.0], np.float32), "x2": x2, "w2": np.array([3.0], np.float32)},
                  ["y"])
    assert y.shape == (3, 4) and y.dtype == np.float32
    close(y, 0.5 * x0.astype(np.float64) - 2.0 * x1 + 3.0 * x2.reshape(3, 4))


def test_weighted_sum_in_place_and_single_pair():
    x0 = f32(5)
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x0)
    workspace.FeedBlob("w", np.array(3.0, np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("WeightedSum", ["x", "w"], ["x"]))
    close(workspace.FetchBlob("x"), 3.0 * x0)


def test_weighted_sum_float16():
    x0, x1 = f32(6).astype(np.float16), f32(6).astype(np.float16)
    (y,) = run_op("WeightedSum", {"a": x0, "wa": np.array([1.0], np.float32), "b": x1,
                                  "wb": np.array([0.25], np.float32)}, ["y"])
    assert y.dtype == np.float16
    close(y, x0.astype(np.float64) + 0.25 * x1, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("inputs, blob, text", [
    ({"a": np.zeros(3, np.float32), "wa": np.ones(2, np.float32)}, "wa", "weight_0 must hold one value"),
    ({"a": np.zeros(3, np.float32), "wa": np.ones(1, np.float32), "b": np.zeros(4, np.float32),
      "wb": np.ones(1, np.float32)}, "b", "has 4 elements"),
    ({"a": np.zeros(3, np.int32), "wa": np.ones(1, np.float32)}, "a", "float32 or float16"),
    ({"a": np.zeros(3, np.float32), "wa": np.ones(1, np.float32), "b": np.zeros(3, np.float64),
      "wb": np.ones(1, np.float32)}, "b", "must be float32"),
])
def test_weighted_sum_errors_name_the_blob(inputs, blob, text):
    with pytest.raises(Caffe2Error, match="WeightedSum.*'%s'.*%s" % (blob, text)):
        run_op("WeightedSum", inputs, ["y"])


def test_weighted_sum_refuses_a_later_input_in_place():
    with pytest.raises(Caffe2Error, match="cannot run in place"):
        run_op("WeightedSum", {"a": f32(2), "wa": np.ones(1, np.float32), "b": f32(2),
                               "wb": np.ones(1, np.float32)}, ["b"])


# ----------------------------------------------------------------- momentum

def ref_momentum(g, m, lr, mu, nesterov):
    g, m = g.astype(np.float64), m.astype(np.float64)
    if not nesterov:
        step = lr * g + mu * m
        return step, step
    new = mu * m + lr * g
    return (1 + mu) * new - mu * m, new


@pytest.mark.parametrize("nesterov", [0, 1])
def test_momentum_sgd_and_update(nesterov):
    g, m, p = f32(4, 3), f32(4, 3), f32(4, 3)
    lr = np.array([0.05], np.float32)
    step, new = ref_momentum(g, m, 0.05, 0.9, nesterov)
    out = run_op("MomentumSGD", {"g": g, "m": m, "lr": lr}, ["g", "m"], momentum=0.9, nesterov=nesterov)
    close(out[0], step)
    close(out[1], new)
    out = run_op("MomentumSGDUpdate", {"g": g, "m": m, "lr": lr, "p": p}, ["g", "m", "p"],
                 momentum=0.9, nesterov=nesterov)
    close(out[0], step)
    close(out[1], new)
    close(out[2], p.astype(np.float64) - step)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_sgd_update_matches_torch_sgd(nesterov):
    torch = pytest.importorskip("torch")
    p0 = f32(6, 5)
    grads = [f32(6, 5) for _ in range(5)]
    t = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.SGD([t], lr=0.1, momentum=0.8, nesterov=nesterov)
    workspace.ResetWorkspace()
    workspace.FeedBlob("p", p0)
    workspace.FeedBlob("m", np.zeros_like(p0))
    workspace.FeedBlob("lr", np.array([0.1], np.float32))
    net = core.Net("momentum_vs_torch")
    net.MomentumSGDUpdate(["g", "m", "lr", "p"], ["g", "m", "p"], momentum=0.8, nesterov=int(nesterov))
    for g in grads:
        workspace.FeedBlob("g", g)
        workspace.RunNetOnce(net)
        t.grad = torch.tensor(g)
        opt.step()
    close(workspace.FetchBlob("p"), t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_momentum_errors():
    with pytest.raises(Caffe2Error, match="MomentumSGD.*'m'.*has 5 elements"):
        run_op("MomentumSGD", {"g": f32(4), "m": f32(5), "lr": np.ones(1, np.float32)}, ["g", "m"])
    with pytest.raises(Caffe2Error, match="MomentumSGDUpdate.*'lr'.*lr must hold one value"):
        run_op("MomentumSGDUpdate", {"g": f32(4), "m": f32(4), "lr": np.ones(2, np.float32), "p": f32(4)},
               ["g", "m", "p"])


# ----------------------------------------------------------------- Adagrad

def ref_adagrad(p, h, g, lr, eps, decay=1.0, wd=0.0):
    p, h, g = (a.astype(np.float64) for a in (p, h, g))
    g = g + wd * p
    h = decay * h + g * g
    eff = lr / (np.sqrt(h) + eps)
    return p + eff * g, h, eff, eff * g


@pytest.mark.parametrize("n_out", [2, 3, 4])
def test_adagrad_outputs(n_out):
    p, h, g = f32(7, 3), np.abs(f32(7, 3)), f32(7, 3)
    outs = run_op("Adagrad", {"p": p, "h": h, "g": g, "lr": np.array([-0.2], np.float32)},
                  ["p", "h", "eff", "upd"][:n_out], epsilon=1e-3, decay=0.9, weight_decay=0.01)
    ref = ref_adagrad(p, h, g, -0.2, 1e-3, 0.9, 0.01)
    for got, want in zip(outs, ref):
        close(got, want)


def test_adagrad_defaults_are_caffe2s():
    p, h, g = f32(4), np.zeros(4, np.float32), f32(4)
    out = run_op("Adagrad", {"p": p, "h": h, "g": g, "lr": np.array([-0.1], np.float32)}, ["p", "h"])
    close(out[0], ref_adagrad(p, h, g, -0.1, 1e-5)[0])


def test_adagrad_matches_torch():
    torch = pytest.importorskip("torch")
    p0 = f32(5, 4)
    t = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.Adagrad([t], lr=0.3, eps=1e-6, weight_decay=0.05)
    workspace.ResetWorkspace()
    workspace.FeedBlob("p", p0)
    workspace.FeedBlob("h", np.zeros_like(p0))
    workspace.FeedBlob("lr", np.array([-0.3], np.float32))
    net = core.Net("adagrad_vs_torch")
    net.Adagrad(["p", "h", "g", "lr"], ["p", "h"], epsilon=1e-6, weight_decay=0.05)
    for _ in range(6):
        g = f32(5, 4)
        workspace.FeedBlob("g", g)
        workspace.RunNetOnce(net)
        t.grad = torch.tensor(g)
        opt.step()
    close(workspace.FetchBlob("p"), t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_adagrad_size_error():
    with pytest.raises(Caffe2Error, match="Adagrad.*'g'.*has 3 elements"):
        run_op("Adagrad", {"p": f32(4), "h": f32(4), "g": f32(3), "lr": np.ones(1, np.float32)}, ["p", "h"])


# ----------------------------------------------------------------- Adam

def ref_adam(p, m1, m2, g, lr, it, b1=0.9, b2=0.999, eps=1e-5):
    p, m1, m2, g = (a.astype(np.float64) for a in (p, m1, m2, g))
    t = it + 1
    c = np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    step = c * m1 / (np.sqrt(m2) + eps)
    return p + lr * step, m1, m2, step


@pytest.mark.parametrize("n_out", [3, 4])
def test_adam(n_out):
    p, m1, m2, g = f32(3, 5), f32(3, 5) * 0.1, np.abs(f32(3, 5)) * 0.1, f32(3, 5)
    outs = run_op("Adam", {"p": p, "m1": m1, "m2": m2, "g": g, "lr": np.array([-0.01], np.float32),
                           "it": np.array([4], np.int64)}, ["p", "m1", "m2", "go"][:n_out],
                  beta1=0.8, beta2=0.99, epsilon=1e-6)
    ref = ref_adam(p, m1, m2, g, -0.01, 4, 0.8, 0.99, 1e-6)
    for got, want in zip(outs, ref):
        close(got, want)


def test_adam_matches_torch():
    torch = pytest.importorskip("torch")
    p0 = f32(4, 6)
    t = torch.tensor(p0.copy(), requires_grad=True)
    opt = torch.optim.Adam([t], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    workspace.ResetWorkspace()
    for name, value in (("p", p0), ("m1", np.zeros_like(p0)), ("m2", np.zeros_like(p0)),
                        ("lr", np.array([-0.01], np.float32)), ("it", np.array([0], np.int64))):
        workspace.FeedBlob(name, value)
    net = core.Net("adam_vs_torch")
    net.Adam(["p", "m1", "m2", "g", "lr", "it"], ["p", "m1", "m2"], epsilon=1e-8)
    net.Iter("it", "it")
    for _ in range(5):
        g = f32(4, 6)
        workspace.FeedBlob("g", g)
        workspace.RunNetOnce(net)
        t.grad = torch.tensor(g)
        opt.step()
    # torch adds eps after dividing sqrt(v) by sqrt(1 - beta2^t); Caffe2 before: with
    # eps = 1e-8 and gradients of order 1 that moves the result by ~1e-7 relative
    close(workspace.FetchBlob("p"), t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_adam_iteration_must_be_an_integer():
    with pytest.raises(Caffe2Error, match="Adam.*'it'.*iteration must be one int64"):
        run_op("Adam", {"p": f32(2), "m1": f32(2), "m2": f32(2), "g": f32(2), "lr": np.ones(1, np.float32),
                        "it": np.array([1.0], np.float32)}, ["p", "m1", "m2"])


# ----------------------------------------------------------------- counters

def test_atomic_iter_counts_and_checks_its_mutex():
    workspace.ResetWorkspace()
    init = core.Net("counter_init")
    init.ConstantFill([], "it", shape=[1], value=5, dtype=core.DataType.INT64)
    init.CreateMutex([], "mu")
    workspace.RunNetOnce(init)
    train = core.Net("counter_train")
    train.AtomicIter(["mu", "it"], "it")
    workspace.CreateNet(train)
    workspace.RunNet(train.Name(), num_iter=3)
    assert workspace.FetchBlob("it").tolist() == [8]
    workspace.FeedBlob("not_a_mutex", np.zeros(1, np.float32))
    with pytest.raises(Caffe2Error, match="AtomicIter.*'not_a_mutex'.*CreateMutex"):
        workspace.RunOperatorOnce(core.CreateOperator("AtomicIter", ["not_a_mutex", "it"], "it"))
    workspace.FeedBlob("it", np.array([np.iinfo(np.int64).max], np.int64))
    with pytest.raises(Caffe2Error, match="maximum iterations reached"):
        workspace.RunOperatorOnce(core.CreateOperator("AtomicIter", ["mu", "it"], "it"))


def test_atomic_iter_is_undone_when_the_net_fails_later():
    workspace.ResetWorkspace()
    workspace.FeedBlob("it", np.array([3], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator("CreateMutex", [], "mu"))
    net = core.Net("counter_then_fail")
    net.AtomicIter(["mu", "it"], "it")
    net.Reshape("it", "bad", shape=[5])
    workspace.CreateNet(net)
    with pytest.raises(Caffe2Error, match="Reshape"):
        workspace.RunNet(net.Name())
    assert workspace.FetchBlob("it").tolist() == [3]
