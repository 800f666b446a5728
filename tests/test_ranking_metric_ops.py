"""Ranking losses, distances and metrics against NumPy references written here (plain
loops over the definitions), their gradients against finite differences."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


def session_lengths(draw_sizes):
    return np.array(draw_sizes, np.int32)


class TestRankingLosses(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=3), ndcg=st.booleans(), norm=st.booleans(),
           exp_gain=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_lambda_rank_ndcg(self, sizes, ndcg, norm, exp_gain, seed):
        rng = np.random.default_rng(seed)
        n = sum(sizes)
        y = rng.permutation(n).astype(np.float32) / 3            # distinct scores
        r = rng.permutation(n).astype(np.float32) % 4             # distinct ranks not needed for labels
        r = np.round(rng.uniform(0, 3, n)).astype(np.float32) if seed % 2 else r
        lengths = session_lengths(sizes)

        def reference(y, r, lengths):
            loss, dy, start = [], np.zeros(n), 0
            for size in lengths:
                ys, rs = y[start:start + size].astype(np.float64), r[start:start + size].astype(np.float64)
                if size == 0 or np.abs(rs).sum() < 1e-6:
                    loss.append(0.0)
                    start += size
                    continue
                gain = rs if (ndcg and not exp_gain) else 2.0 ** rs
                rank_of = lambda v: np.argsort(np.argsort(-v, kind="stable"), kind="stable")  # noqa: E731
                disc = 1.0 / np.log2(rank_of(ys) + 2.0)
                ideal = 1.0 / np.log2(rank_of(rs) + 2.0)
                idcg, dcg = (gain * ideal).sum(), (gain * disc).sum()
                total, g = 0.0, np.zeros(size)
                for i in range(size):
                    for j in range(size):
                        lam = abs((disc[i] - disc[j]) * (gain[i] - gain[j]))
                        s = 1.0 if rs[i] > rs[j] else -1.0
                        g[i] -= lam * s / (1 + math.exp(s * (ys[i] - ys[j])))
                        total -= lam * math.log(1 / (1 + math.exp(-s * (ys[i] - ys[j]))))
                value = idcg - dcg if ndcg else total
                if norm:
                    value, g = value / max(idcg, 1e-5), g / max(idcg, 1e-5)
                loss.append(value)
                dy[start:start + size] = g
                start += size
            return [np.array(loss, np.float32), dy.astype(np.float32)]
        op = core.CreateOperator("LambdaRankNdcg", ["y", "r", "l"], ["loss", "dy"], use_ndcg_as_loss=int(ndcg),
                                 use_idcg_normalization=int(norm), use_exp_gain=int(exp_gain))
        self.assertReferenceChecks(hu.cpu_do, op, [y, r, lengths], reference, threshold=1e-4, atol=1e-5)

    def test_lambda_rank_gradient_scales_the_cached_gradient(self):
        y = np.array([0.3, 0.1, 0.9, 0.5, 0.2], np.float32)
        r = np.array([1, 0, 2, 0, 1], np.float32)
        lengths = np.array([3, 2], np.int32)
        op = core.CreateOperator("LambdaRankNdcg", ["y", "r", "l"], ["loss", "dy"])
        loss, dy = run_op(op, [y, r, lengths])
        from caffe2py.gradients import get_gradient_for_op
        grad_ops, g_in = get_gradient_for_op(op, ["loss_grad", None])
        workspace.FeedBlob("loss_grad", np.array([2.0, -1.0], np.float32))
        workspace.RunOperatorsOnce(grad_ops)
        np.testing.assert_allclose(workspace.FetchBlob(g_in[0]), dy * np.array([2, 2, 2, -1, -1], np.float32))

    @given(sizes=st.lists(st.integers(0, 6), min_size=0, max_size=3), with_lengths=st.booleans(),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_pairwise_loss(self, sizes, with_lengths, seed):
        rng = np.random.default_rng(seed)
        n = sum(sizes)
        x = rng.standard_normal((n, 1)).astype(np.float32)
        label = rng.integers(0, 3, (n, 1)).astype(np.float32)
        if not with_lengths:
            sizes = [n]

        def reference(x, label, *rest):
            if n == 0:
                return [np.zeros(0, np.float32)]
            out, start = [], 0
            for size in sizes:
                total, pairs = 0.0, 0
                for i in range(start, start + size):
                    for j in range(start, i):
                        if label[i, 0] == label[j, 0]:
                            continue
                        s = 1.0 if label[i, 0] > label[j, 0] else -1.0
                        total += math.log1p(math.exp(s * (x[j, 0] - x[i, 0])))
                        pairs += 1
                out.append(total / pairs if pairs else 0.0)
                start += size
            return [np.array(out, np.float32)]
        ins = ["X", "label"] + (["lengths"] if with_lengths else [])
        op = core.CreateOperator("PairWiseLoss", ins, ["Y"])
        inputs = [x, label] + ([np.array(sizes, np.int32)] if with_lengths else [])
        self.assertReferenceChecks(hu.cpu_do, op, inputs, reference)
        if n > 1:
            self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [0], stepsize=1e-2, threshold=1e-2)

    @given(n=st.integers(0, 8), margin=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 99))
    @SETTINGS
    def test_margin_ranking_and_cosine_embedding(self, n, margin, seed):
        rng = np.random.default_rng(seed)
        x1, x2 = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        y = rng.choice([-1, 1], n).astype(np.int32)
        op = core.CreateOperator("MarginRankingCriterion", ["X1", "X2", "Y"], ["loss"], margin=margin)
        self.assertReferenceChecks(hu.cpu_do, op, [x1, x2, y],
                                   lambda a, b, y: [np.maximum(0.0, -y * (a - b) + margin).astype(np.float32)])
        s = rng.uniform(-1, 1, n).astype(np.float32)
        op = core.CreateOperator("CosineEmbeddingCriterion", ["S", "Y"], ["loss"], margin=margin)
        self.assertReferenceChecks(hu.cpu_do, op, [s, y],
                                   lambda s, y: [np.where(y == 1, 1 - s, np.maximum(0.0, s - margin))])
        # kinks at the margin: keep the finite-difference points away from them
        if n:
            keep = (np.abs(-y * (x1 - x2) + margin) > 0.1) & (np.abs(s - margin) > 0.1)
            if keep.any():
                x1, x2, y, s = x1[keep], x2[keep], y[keep], s[keep]
                op = core.CreateOperator("MarginRankingCriterion", ["X1", "X2", "Y"], ["loss"], margin=margin)
                for i in (0, 1):
                    self.assertGradientChecks(hu.cpu_do, op, [x1, x2, y], i, [0], stepsize=1e-2)
                op = core.CreateOperator("CosineEmbeddingCriterion", ["S", "Y"], ["loss"], margin=margin)
                self.assertGradientChecks(hu.cpu_do, op, [s, y], 0, [0], stepsize=1e-2)

    @given(n=st.integers(0, 10), seed=st.integers(0, 99))
    @SETTINGS
    def test_bernoulli_jsd(self, n, seed):
        rng = np.random.default_rng(seed)
        p, t = rng.uniform(0.05, 0.95, n).astype(np.float32), rng.uniform(0.05, 0.95, n).astype(np.float32)

        def reference(p, t):
            def kl(a, m):
                return a * np.log(a / m) + (1 - a) * np.log((1 - a) / (1 - m))
            m = (p.astype(np.float64) + t) / 2
            return [(0.5 * kl(p.astype(np.float64), m) + 0.5 * kl(t.astype(np.float64), m)).astype(np.float32)]
        op = core.CreateOperator("BernoulliJSD", ["X", "T"], ["L"])
        self.assertReferenceChecks(hu.cpu_do, op, [p, t], reference, atol=1e-6)
        if n:
            self.assertGradientChecks(hu.cpu_do, op, [p, t], 0, [0], stepsize=1e-3, threshold=1e-2)

    @given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=3), seed=st.integers(0, 99))
    @SETTINGS
    def test_l1_distance(self, shape, seed):
        rng = np.random.default_rng(seed)
        x, y = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        op = core.CreateOperator("L1Distance", ["X", "Y"], ["Z"])
        self.assertReferenceChecks(
            hu.cpu_do, op, [x, y],
            lambda x, y: [np.array([np.abs(x[i] - y[i]).sum() for i in range(x.shape[0])], np.float32)])
        if x.size:
            for i in (0, 1):
                self.assertGradientChecks(hu.cpu_do, op, [x, y], i, [0], stepsize=1e-3)

    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 99))
    @SETTINGS
    def test_weighted_sigmoid_cross_entropy(self, shape, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        t = rng.uniform(0, 1, shape).astype(np.float32)
        w = rng.uniform(0, 2, shape).astype(np.float32)

        def reference(x, t, w):
            sig = 1 / (1 + np.exp(-x.astype(np.float64)))
            terms = w * (t * np.log(sig) + (1 - t) * np.log(1 - sig))
            return [(-terms.mean(axis=-1)).astype(np.float32)]
        op = core.CreateOperator("WeightedSigmoidCrossEntropyWithLogits", ["x", "t", "w"], ["y"])
        self.assertReferenceChecks(hu.cpu_do, op, [x, t, w], reference, atol=1e-5)
        self.assertGradientChecks(hu.cpu_do, op, [x, t, w], 0, [0], stepsize=1e-2)

    @given(n=st.integers(1, 2), d=st.integers(1, 4), h=st.integers(1, 3), w=st.integers(1, 3),
           weighted=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_spatial_softmax_with_loss(self, n, d, h, w, weighted, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, d, h, w)).astype(np.float32)
        labels = rng.integers(-1, d, (n, h, w)).astype(np.int32)
        weights = rng.uniform(0.5, 2, (n, h, w)).astype(np.float32)

        def reference(x, labels, *rest):
            wt = rest[0] if rest else np.ones(labels.shape)
            e = np.exp(x.astype(np.float64))
            p = e / e.sum(axis=1, keepdims=True)
            total, num = 0.0, 0.0
            for i, y, z in np.ndindex(labels.shape):
                if labels[i, y, z] >= 0:
                    total -= np.log(p[i, labels[i, y, z], y, z]) * wt[i, y, z]
                    num += wt[i, y, z]
            return [p.astype(np.float32), np.array(total / num if num else 0.0, np.float32)]
        ins = ["X", "L"] + (["W"] if weighted else [])
        op = core.CreateOperator("SpatialSoftmaxWithLoss", ins, ["P", "loss"])
        inputs = [x, labels] + ([weights] if weighted else [])
        self.assertReferenceChecks(hu.cpu_do, op, inputs, reference, atol=1e-5)
        self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [1], stepsize=1e-2)

    def test_bad_labels_are_refused(self):
        op = core.CreateOperator("SpatialSoftmaxWithLoss", ["X", "L"], ["P", "loss"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((1, 2, 1, 1), np.float32), np.array([[[2]]], np.int32)],
                               exception=Caffe2Error, regexp="Label seems incorrect")
        op = core.CreateOperator("PairWiseLoss", ["X", "label", "lengths"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((3, 1), np.float32), np.zeros((3, 1), np.float32),
                                               np.array([1, 1], np.int32)], exception=Caffe2Error, regexp="sum to 2")


class TestMetrics(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 12), d=st.integers(1, 4), seed=st.integers(0, 99))
    @SETTINGS
    def test_multi_class_accuracy(self, n, d, seed):
        rng = np.random.default_rng(seed)
        pred = rng.standard_normal((n, d)).astype(np.float32)
        labels = rng.integers(0, d, n).astype(np.int32)

        def reference(pred, labels):
            acc, amount = np.zeros(d, np.float32), np.zeros(d, np.int32)
            for i in range(n):
                amount[labels[i]] += 1
                acc[labels[i]] += int(np.argmax(pred[i]) == labels[i])
            return [np.where(amount > 0, acc / np.maximum(amount, 1), 0).astype(np.float32), amount]
        op = core.CreateOperator("MultiClassAccuracy", ["P", "L"], ["acc", "amount"])
        self.assertReferenceChecks(hu.cpu_do, op, [pred, labels], reference)

    @given(n=st.integers(0, 10), seed=st.integers(0, 99))
    @SETTINGS
    def test_perplexity(self, n, seed):
        p = np.random.default_rng(seed).uniform(0.05, 1, n).astype(np.float32)
        op = core.CreateOperator("Perplexity", ["p"], ["y"])
        self.assertReferenceChecks(hu.cpu_do, op, [p],
                                   lambda p: [np.array(np.prod(1 / p.astype(np.float64)) ** (1 / max(n, 1)),
                                                       np.float32)])

    def test_ap_meter_over_runs_of_a_net(self):
        """The buffer persists across runs of one net (Caffe2 keeps it in the op)."""
        rng = np.random.default_rng(0)
        net = core.Net("ap")
        net.APMeter(["P", "L"], ["AP"], buffer_size=8)
        workspace.ResetWorkspace()
        workspace.FeedBlob("P", np.zeros((1, 2), np.float32))
        workspace.FeedBlob("L", np.zeros((1, 2), np.int32))
        workspace.CreateNet(net)
        buffered = [[], []]       # per class: (score, label), kept as Caffe2 keeps it

        def average_precision(pairs):
            pairs.sort(key=lambda p: -p[0])          # stable: Python's sort
            tp, precisions = 0, []
            for k, (_, lab) in enumerate(pairs):
                tp += lab
                if lab == 1:
                    precisions.append(tp / (k + 1))
            return sum(precisions) / max(1, len(precisions))
        for _ in range(4):
            p = rng.uniform(0, 1, (3, 2)).astype(np.float32)
            lab = rng.integers(0, 2, (3, 2)).astype(np.int32)
            workspace.FeedBlob("P", p)
            workspace.FeedBlob("L", lab)
            workspace.RunNet(net.Name())
            want = []
            for c in range(2):
                pairs = buffered[c]
                drop = len(pairs) + 3 - 8
                if drop > 0:
                    del pairs[:drop]
                pairs += [(float(p[i, c]), int(lab[i, c])) for i in range(3)]
                want.append(average_precision(pairs))
            np.testing.assert_allclose(workspace.FetchBlob("AP"), want, rtol=1e-6)
