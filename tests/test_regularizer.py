"""caffe2py.regularizer, regularizer_context and the EnsureClipped op (Caffe2's
modules and op): each regularization term against its NumPy formula, the
after-optimizer projections on dense and sparse parameters, the context."""
import numpy as np
import pytest

from caffe2py import core, regularizer as R, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.regularizer_context import RegularizerContext, UseRegularizer

W = np.array([[0.5, -1.5, 2.0, 0.25], [-0.75, 1.0, -0.1, 3.0]], np.float32)


@pytest.fixture(autouse=True)
def fresh():
    workspace.ResetWorkspace()
    workspace.FeedBlob("w", W)
    yield
    workspace.ResetWorkspace()


def _term(reg):
    net, init = core.Net("reg"), core.Net("reg_init")
    out = reg(net, init, core.BlobReference("w"), by=R.RegularizationBy.ON_LOSS)
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    return float(np.asarray(workspace.FetchBlob(str(out))).reshape(-1)[0])


def test_on_loss_terms_match_their_formulas():
    a = np.abs(W.astype(np.float64))
    assert _term(R.L1Norm(0.3)) == pytest.approx(0.3 * a.sum(), rel=1e-5)
    assert _term(R.L2Norm(0.2)) == pytest.approx(0.2 * (a ** 2).sum(), rel=1e-5)
    assert _term(R.ElasticNet(0.1, 0.4)) == pytest.approx(0.1 * a.sum() + 0.4 * (a ** 2).sum(), rel=1e-5)
    top3 = np.sort(a, axis=-1)[:, -3:].sum()         # TopK works along the last axis: per row
    assert _term(R.L1NormTrimmed(0.5, 3)) == pytest.approx(0.5 * (a.sum() - top3), rel=1e-5)
    assert _term(R.ElasticNetL1NormTrimmed(0.5, 0.2, 3)) == pytest.approx(
        0.5 * (a.sum() - top3) + 0.2 * (a ** 2).sum(), rel=1e-5)
    columns = np.sqrt((a ** 2).sum(axis=0))
    p = 0.5
    assert _term(R.FCInputLpNorm(0.7, p_value=p)) == pytest.approx(0.7 * (columns ** p).sum() ** (1 / p), rel=1e-4)
    groups = [1, 3]
    group_norms = [np.sqrt((a[:, :1] ** 2).sum()), np.sqrt((a[:, 1:] ** 2).sum())]
    expected = 0.6 * sum(np.sqrt(g) * n for g, n in zip(groups, group_norms))
    assert _term(R.GroupL1Norm(0.6, groups)) == pytest.approx(expected, rel=1e-5)


def test_log_barrier_term_follows_the_inv_policy():
    workspace.FeedBlob("w", np.array([0.5, 2.0, -1.0], np.float32))
    value = _term(R.LogBarrier(2.0))
    # first run: iteration 1 (AtomicIter ran), inv policy lr = base * (1 + gamma * iter) ^ -power
    discount = -2.0 * (1 + 1.0 * 1) ** -1.0
    logs = np.log(np.maximum([0.5, 2.0, -1.0], 1e-9)).sum()
    assert value == pytest.approx(discount * logs, rel=1e-4)


def _after(reg, grad=None):
    net, init = core.Net("after"), core.Net("after_init")
    reg(net, init, core.BlobReference("w"), grad, by=R.RegularizationBy.AFTER_OPTIMIZER)
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    return workspace.FetchBlob("w")


def test_bounded_projection_clips_dense_and_only_the_updated_rows_of_sparse():
    got = _after(R.BoundedGradientProjection(lb=-1.0, ub=1.0, right_open=True, epsilon=0.01))
    np.testing.assert_allclose(got, np.clip(W, -1.0, 0.99), rtol=1e-6)
    workspace.FeedBlob("w", W)
    workspace.FeedBlob("idx", np.array([1], np.int64))
    workspace.FeedBlob("g", np.zeros((1, 4), np.float32))
    got = _after(R.BoundedGradientProjection(lb=0.0, ub=1.0),
                 core.GradientSlice(core.BlobReference("idx"), core.BlobReference("g")))
    np.testing.assert_allclose(got[0], W[0])
    np.testing.assert_allclose(got[1], np.clip(W[1], 0.0, 1.0))


def test_log_barrier_keeps_the_parameter_positive_after_the_update():
    got = _after(R.LogBarrier(1.0))
    np.testing.assert_allclose(got, np.maximum(W, 1e-9), rtol=1e-6)


def test_max_and_constant_norm_rescale_sparse_rows():
    workspace.FeedBlob("idx", np.array([0, 1], np.int32))
    workspace.FeedBlob("g", np.zeros((2, 4), np.float32))
    grad = core.GradientSlice(core.BlobReference("idx"), core.BlobReference("g"))
    norms = np.linalg.norm(W, axis=1)
    got = _after(R.ConstantNorm(2.0), grad)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), [2.0, 2.0], rtol=1e-5)
    workspace.FeedBlob("w", W)
    got = _after(R.MaxNorm(3.0), grad)
    np.testing.assert_allclose(got, W * np.minimum(1.0, 3.0 / norms)[:, None], rtol=1e-5)
    with pytest.raises(NotImplementedError):
        _after(R.MaxNorm(1.0))


def test_nothing_to_do_returns_none_and_bad_arguments_are_refused():
    net, init = core.Net("n"), core.Net("i")
    assert R.L1Norm(1.0)(net, init, core.BlobReference("w"), by=R.RegularizationBy.AFTER_OPTIMIZER) is None
    assert len(net.Proto().op) == 0
    with pytest.raises(AssertionError, match="invalid by"):
        R.L1Norm(1.0)(net, init, core.BlobReference("w"), by="sometime")
    with pytest.raises(AssertionError):
        R.L1Norm(-1.0)
    with pytest.raises(AssertionError, match="invalid"):
        R.BoundedGradientProjection(lb=1.0, ub=0.5)


def test_ensure_clipped_refuses_a_sparse_update_out_of_place_and_bad_indices():
    workspace.FeedBlob("idx", np.array([5], np.int64))
    workspace.FeedBlob("g", np.zeros((1, 4), np.float32))
    with pytest.raises(Caffe2Error, match="in place"):
        workspace.RunOperatorOnce(core.CreateOperator("EnsureClipped", ["w", "idx", "g"], ["other"], min=0.0))
    with pytest.raises(Caffe2Error, match="out of range"):
        workspace.RunOperatorOnce(core.CreateOperator("EnsureClipped", ["w", "idx", "g"], ["w"], min=0.0))
    np.testing.assert_array_equal(workspace.FetchBlob("w"), W)


def test_regularizer_context_nests_and_overrides():
    l1, l2, other = R.L1Norm(0.1), R.L2Norm(0.2), R.L1Norm(0.5)
    with UseRegularizer({"WEIGHT": l1, "BIAS": l2}):
        assert RegularizerContext.current().get_regularizer("WEIGHT") is l1
        with UseRegularizer({"WEIGHT": other}):
            assert RegularizerContext.current().get_regularizer("WEIGHT") is other
            assert RegularizerContext.current().get_regularizer("BIAS") is l2
        assert RegularizerContext.current().get_regularizer("WEIGHT") is l1
        with UseRegularizer(other):
            assert RegularizerContext.current().get_regularizer("DEFAULT") is other
    assert not RegularizerContext.current().has_regularizer("WEIGHT")
    with pytest.raises(AssertionError, match="not provided"):
        RegularizerContext.current().get_regularizer("WEIGHT")
