"""Losses and metrics: forward values against the formulas written out in NumPy,
gradients against finite differences and torch.autograd, and the named errors for
bad labels."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _grad_util import compare_with_torch, finite_difference_check, outputs_of, run_gradient, torch

FEW = settings(max_examples=5, deadline=None)


def probabilities(rng, n, d):
    p = rng.uniform(0.05, 1.0, (n, d))
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def run(op, inputs):
    return outputs_of(op, inputs)


# ----------------------------------------------------------------- SoftmaxWithLoss

def _np_log_softmax(x2):
    x2 = x2.astype(np.float64)
    s = x2 - x2.max(axis=1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=1, keepdims=True))


@FEW
@given(st.data())
def test_softmax_with_loss_class_ids(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    n, d = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 5))
    weighted = data.draw(st.booleans())
    scale = data.draw(st.sampled_from([1.0, 2.5]))
    x = rng.standard_normal((n, d)).astype(np.float32)
    labels = rng.integers(0, d, n).astype(np.int32)
    w = rng.uniform(0.2, 2.0, n).astype(np.float32)
    names = ["X", "L"] + (["W"] if weighted else [])
    inputs = [x, labels] + ([w] if weighted else [])
    op = core.CreateOperator("SoftmaxWithLoss", names, ["P", "loss"], scale=scale)
    p, loss = run(op, inputs)
    logp = _np_log_softmax(x)
    ww = w.astype(np.float64) if weighted else np.ones(n)
    want = -(logp[np.arange(n), labels] * ww).sum() / ww.sum() * scale
    assert loss.shape == () and loss.dtype == np.float32
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(p, np.exp(logp), rtol=1e-5, atol=1e-7)
    finite_difference_check(op, inputs, [0], outputs_with_grads=[1], stepsize=1e-2, threshold=1e-2)
    if torch is not None:
        import torch.nn.functional as F

        def torch_loss(X, L, W=None):
            rows = F.cross_entropy(X, L.long(), reduction="none")
            return [(rows * W).sum() / W.sum() * scale if W is not None else rows.mean() * scale]
        compare_with_torch(op, inputs, [0], torch_loss, outputs=(1,))


@FEW
@given(st.data())
def test_softmax_with_loss_label_probabilities_and_axis(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    n, a, b = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), data.draw(st.integers(2, 3))
    x = rng.standard_normal((n, a, b)).astype(np.float32)
    labels = probabilities(rng, n, a * b).reshape(n, a, b)
    op = core.CreateOperator("SoftmaxWithLoss", ["X", "L"], ["P", "loss"], label_prob=1)
    _, loss = run(op, [x, labels])
    logp = np.log(np.exp(_np_log_softmax(x.reshape(n, -1))))
    np.testing.assert_allclose(loss, -(labels.reshape(n, -1) * logp).sum() / n, rtol=1e-5)
    finite_difference_check(op, [x, labels], [0], outputs_with_grads=[1])
    if torch is not None:
        import torch.nn.functional as F
        compare_with_torch(op, [x, labels], [0], lambda X, L: [
            -(L.reshape(n, -1) * F.log_softmax(X.reshape(n, -1), -1)).sum() / n], outputs=(1,))


def test_softmax_with_loss_errors():
    x = np.zeros((3, 4), np.float32)
    op = core.CreateOperator("SoftmaxWithLoss", ["X", "L"], ["P", "loss"])
    with pytest.raises(Caffe2Error, match="labels of shape \\[2\\] do not match 3 rows"):
        run(op, [x, np.zeros(2, np.int32)])
    with pytest.raises(Caffe2Error, match="label 4 at row 1 is out of range"):
        run(op, [x, np.array([0, 4, 1], np.int32)])
    prob = core.CreateOperator("SoftmaxWithLoss", ["X", "L"], ["P", "loss"], label_prob=1)
    with pytest.raises(Caffe2Error, match="sum to"):
        run(prob, [x, np.full((3, 4), 0.5, np.float32)])
    weighted = core.CreateOperator("SoftmaxWithLoss", ["X", "L", "W"], ["P", "loss"])
    with pytest.raises(Caffe2Error, match="blob 'W'"):
        run(weighted, [x, np.zeros(3, np.int32), np.ones(4, np.float32)])


def test_softmax_with_loss_gradient_needs_a_scalar_loss_gradient():
    x, labels = np.zeros((2, 3), np.float32), np.zeros(2, np.int32)
    op = core.CreateOperator("SoftmaxWithLoss", ["X", "L"], ["P", "loss"])
    with pytest.raises(Caffe2Error, match="must be one value"):
        run_gradient(op, [x, labels], {1: np.ones(2, np.float32)})


# ----------------------------------------------------------------- LabelCrossEntropy / CrossEntropy

@FEW
@given(st.data())
def test_label_cross_entropy(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    n, d = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 5))
    x = probabilities(rng, n, d)
    labels = rng.integers(0, d, n).astype(np.int32)
    if data.draw(st.booleans()):
        labels = labels.reshape(n, 1)
    op = core.CreateOperator("LabelCrossEntropy", ["X", "L"], ["Y"])
    (y,) = run(op, [x, labels])
    np.testing.assert_allclose(y, -np.log(x[np.arange(n), labels.reshape(-1)]), rtol=1e-6)
    finite_difference_check(op, [x, labels], [0], stepsize=1e-3, threshold=1e-2)
    if torch is not None:
        compare_with_torch(op, [x, labels], [0], lambda X, L: [-torch.log(X[torch.arange(n), L.reshape(-1).long()])])


@FEW
@given(st.data())
def test_cross_entropy(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    n, d = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 5))
    x, labels = probabilities(rng, n, d), probabilities(rng, n, d)
    op = core.CreateOperator("CrossEntropy", ["X", "L"], ["Y"])
    (y,) = run(op, [x, labels])
    np.testing.assert_allclose(y, -(labels * np.log(x)).sum(axis=1), rtol=1e-5)
    finite_difference_check(op, [x, labels], [0], stepsize=1e-3, threshold=1e-2)
    if torch is not None:
        compare_with_torch(op, [x, labels], [0], lambda X, L: [-(L * torch.log(X)).sum(1)])


def test_cross_entropy_label_errors():
    x = np.full((3, 4), 0.25, np.float32)
    lce = core.CreateOperator("LabelCrossEntropy", ["X", "L"], ["Y"])
    with pytest.raises(Caffe2Error, match="one per row of X"):
        run(lce, [x, np.zeros(2, np.int32)])
    with pytest.raises(Caffe2Error, match="outside of supported range"):
        run(lce, [x, np.array([0, 1, 9], np.int32)])
    with pytest.raises(Caffe2Error, match="int32 class ids"):
        run(lce, [x, np.zeros(3, np.float32)])
    ce = core.CreateOperator("CrossEntropy", ["X", "L"], ["Y"])
    with pytest.raises(Caffe2Error, match="X's shape"):
        run(ce, [x, np.full((3, 3), 0.3, np.float32)])
    with pytest.raises(Caffe2Error, match="probability"):
        run(ce, [x, np.full((3, 4), 2.0, np.float32)])
    grad = core.CreateOperator("LabelCrossEntropyGradient", ["X", "L", "dY"], ["dX"])
    with pytest.raises(Caffe2Error, match="one per row"):
        run(grad, [x, np.zeros(3, np.int32), np.ones(2, np.float32)])


def test_label_cross_entropy_clamps_zero_probabilities():
    x = np.array([[0.0, 1.0]], np.float32)
    op = core.CreateOperator("LabelCrossEntropy", ["X", "L"], ["Y"])
    (y,) = run(op, [x, np.array([0], np.int32)])
    np.testing.assert_allclose(y, [-np.log(1e-20)], rtol=1e-6)
    grads, _ = run_gradient(op, [x, np.array([0], np.int32)], {0: np.ones(1, np.float32)})
    np.testing.assert_allclose(grads[0], [[-1e20, 0.0]], rtol=1e-6)


# ----------------------------------------------------------------- SigmoidCrossEntropyWithLogits

def _np_sigmoid_xent(x, t, log_d_trick=False, unjoined=False):
    x, t = x.astype(np.float64), t.astype(np.float64)
    log_sig, log_one_minus = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    if unjoined:          # positives count their logit, negatives log(1 - sigmoid)
        value = t * x + (1 - t) * log_one_minus
    elif log_d_trick:
        value = (2 * t - 1) * log_sig
    else:
        value = t * log_sig + (1 - t) * log_one_minus
    return -value.mean(axis=-1)


@FEW
@given(st.data())
def test_sigmoid_cross_entropy_with_logits(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    variant = data.draw(st.sampled_from(["plain", "log_D_trick", "unjoined_lr_loss"]))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    t = rng.integers(0, 2, shape).astype(np.float32) if variant != "plain" else rng.uniform(0, 1, shape).astype(
        np.float32)
    args = {variant: 1} if variant != "plain" else {}
    op = core.CreateOperator("SigmoidCrossEntropyWithLogits", ["X", "T"], ["Y"], **args)
    (y,) = run(op, [x, t])
    assert y.shape == shape[:-1]
    np.testing.assert_allclose(y, _np_sigmoid_xent(x, t, variant == "log_D_trick", variant == "unjoined_lr_loss"),
                               rtol=1e-5, atol=1e-6)
    finite_difference_check(op, [x, t], [0])
    if torch is not None and variant == "plain":
        import torch.nn.functional as F
        compare_with_torch(op, [x, t], [0], lambda X, T: [
            F.binary_cross_entropy_with_logits(X, T, reduction="none").mean(-1)])


def test_sigmoid_cross_entropy_errors():
    x = np.zeros((2, 3), np.float32)
    op = core.CreateOperator("SigmoidCrossEntropyWithLogits", ["X", "T"], ["Y"])
    with pytest.raises(Caffe2Error, match="targets of shape \\[2, 2\\] do not match"):
        run(op, [x, np.zeros((2, 2), np.float32)])
    both = core.CreateOperator("SigmoidCrossEntropyWithLogits", ["X", "T"], ["Y"], log_D_trick=1, unjoined_lr_loss=1)
    with pytest.raises(Caffe2Error, match="cannot both be set"):
        run(both, [x, x])


# ----------------------------------------------------------------- MakeTwoClass / SquaredL2Distance / AveragedLoss

def test_make_two_class():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (3, 2)).astype(np.float32)
    op = core.CreateOperator("MakeTwoClass", ["X"], ["Y"])
    (y,) = run(op, [x])
    np.testing.assert_allclose(y, np.stack([1 - x, x], axis=-1))
    finite_difference_check(op, [x], [0])
    if torch is not None:
        compare_with_torch(op, [x], [0], lambda X: [torch.stack([1 - X, X], -1)])


@FEW
@given(st.data())
def test_squared_l2_distance(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    x, y = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    op = core.CreateOperator("SquaredL2Distance", ["X", "Y"], ["D"])
    (d,) = run(op, [x, y])
    rows = shape[0] if len(shape) > 1 else shape[0]
    np.testing.assert_allclose(d, 0.5 * ((x - y).reshape(rows, -1) ** 2).sum(axis=1), rtol=1e-5)
    finite_difference_check(op, [x, y], [0, 1])
    if torch is not None:
        compare_with_torch(op, [x, y], [0, 1], lambda X, Y: [0.5 * ((X - Y) ** 2).reshape(rows, -1).sum(1)])
    with pytest.raises(Caffe2Error, match="differs from X's"):
        run(op, [x, np.zeros(shape + (1,), np.float32)])


def test_averaged_loss():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    op = core.CreateOperator("AveragedLoss", ["X"], ["loss"])
    (loss,) = run(op, [x])
    assert loss.shape == ()
    np.testing.assert_allclose(loss, x.astype(np.float64).mean(), rtol=1e-6)
    finite_difference_check(op, [x], [0])
    grads, _ = run_gradient(op, [x], {0: np.array(3.0, np.float32)})
    np.testing.assert_allclose(grads[0], np.full((3, 4), 0.25))
    with pytest.raises(Caffe2Error, match="must be one value"):
        run_gradient(op, [x], {0: np.ones(2, np.float32)})


# ----------------------------------------------------------------- Accuracy

def test_accuracy_top_k_with_ties():
    pred = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.2, 0.2, 0.6]], np.float32)
    labels = np.array([1, 1, 0, 1], np.int32)
    # ranks 1, 2, 2, 3: a tie puts the lower class first (Caffe2's stable order)
    for k, want in ((1, 0.25), (2, 0.75), (3, 1.0)):
        (acc,) = run(core.CreateOperator("Accuracy", ["P", "L"], ["A"], top_k=k), [pred, labels])
        assert acc.shape == () and acc.dtype == np.float32
        assert acc == np.float32(want)
    with pytest.raises(Caffe2Error, match="one per row"):
        run(core.CreateOperator("Accuracy", ["P", "L"], ["A"]), [pred, labels[:2]])


def test_accuracy_has_no_gradient():
    net = core.Net("acc")
    net.Accuracy(["P", "L"], "A")
    with pytest.raises(Caffe2Error, match="should not ask for the gradient of operator type 'Accuracy'"):
        net.AddGradientOperators(["A"])
