"""Detectron's ops (modules/detectron, and AffineChannel): PSRoIPool, RoIPoolF,
SmoothL1Loss, SelectSmoothL1Loss, SigmoidCrossEntropyLoss, SigmoidFocalLoss,
SoftmaxFocalLoss, GroupSpatialSoftmax, BatchPermutation, SampleAs, SpatialNarrowAs,
UpsampleNearest, AffineChannel. Each against a NumPy reference written here (and
torchvision's ps_roi_pool / roi_pool / sigmoid_focal_loss where torchvision loads),
with numerical gradient checks of its gradient op, named errors for indices the
compiled loops would otherwise read out of bounds, and a RetinaNet-style head
trained for a few steps."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.runtime import jit

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
F32 = np.float32
FLT_MIN = float(np.finfo(np.float32).tiny)


def torchvision_ops():
    """(torch, torchvision.ops) or (None, reason): the CPU torchvision that matches the
    installed torch is not always installable (PyPI's wheel for torch 2.13 is a CUDA
    build that cannot load without CUDA's libraries)."""
    try:
        import torch
        import torchvision.ops as tv_ops
        tv_ops.roi_pool(torch.zeros(1, 1, 2, 2), torch.zeros(1, 5), 1)
        return torch, tv_ops
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not available"
        return None, "torchvision's ops do not load here (%s: %s)" % (type(exc).__name__, str(exc)[:120])


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


def random_rois(rng, n, n_images, height, width):
    xy = np.stack([rng.uniform(-2, width + 1, n), rng.uniform(-2, height + 1, n)], axis=1)
    wh = rng.uniform(0, max(height, width), (n, 2))
    return np.concatenate([rng.integers(0, n_images, (n, 1)), xy, xy + wh], axis=1).astype(F32)


def c_round(v):
    return float(np.sign(v) * np.floor(abs(v) + 0.5))


# ----------------------------------------------------------------- PSRoIPool

def ps_roi_pool_reference(x, rois, scale, g, d):
    """R-FCN's position-sensitive average pooling, loop by loop, in float32."""
    R, (_, _, H, W) = rois.shape[0], x.shape
    y = np.zeros((R, d, g, g), F32)
    mapping = np.zeros((R, d, g, g), np.int32)
    s = F32(scale)
    for r in range(R):
        b = int(rois[r, 0])
        x1, y1 = F32(c_round(rois[r, 1])) * s, F32(c_round(rois[r, 2])) * s
        x2, y2 = F32(c_round(rois[r, 3]) + 1) * s, F32(c_round(rois[r, 4]) + 1) * s
        bw, bh = F32(max(x2 - x1, F32(0.1))) / F32(g), F32(max(y2 - y1, F32(0.1))) / F32(g)
        for c in range(d):
            for i in range(g):
                for j in range(g):
                    hs = min(max(int(np.floor(F32(i) * bh + y1)), 0), H)
                    he = min(max(int(np.ceil(F32(i + 1) * bh + y1)), 0), H)
                    ws = min(max(int(np.floor(F32(j) * bw + x1)), 0), W)
                    we = min(max(int(np.ceil(F32(j + 1) * bw + x1)), 0), W)
                    channel = (c * g + i) * g + j
                    mapping[r, c, i, j] = channel
                    if he > hs and we > ws:
                        y[r, c, i, j] = x[b, channel, hs:he, ws:we].mean(dtype=np.float64)
    return y, mapping


class TestPSRoIPool(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(g=st.integers(1, 3), d=st.integers(1, 3), extra=st.integers(0, 2), h=st.integers(1, 9),
           w=st.integers(1, 9), rois=st.integers(0, 5), scale=st.sampled_from([1.0, 0.5, 0.25]),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_matches_reference(self, g, d, extra, h, w, rois, scale, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((2, d * g * g + extra, h, w)).astype(F32)
        r = random_rois(rng, rois, 2, h / scale, w / scale)
        op = core.CreateOperator("PSRoIPool", ["X", "R"], ["Y", "M"], group_size=g, output_dim=d,
                                 spatial_scale=scale)
        self.assertReferenceChecks(hu.cpu_do, op, [x, r], lambda x, r: ps_roi_pool_reference(x, r, scale, g, d),
                                   threshold=1e-5)

    @given(g=st.integers(1, 2), d=st.integers(1, 2), hw=st.integers(2, 6), seed=st.integers(0, 99))
    @FEW
    def test_gradient(self, g, d, hw, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((2, d * g * g, hw, hw)).astype(F32)
        op = core.CreateOperator("PSRoIPool", ["X", "R"], ["Y", "M"], group_size=g, output_dim=d)
        # Y is linear in X: finite differences are exact up to rounding
        self.assertGradientChecks(hu.cpu_do, op, [x, random_rois(rng, 3, 2, hw, hw)], 0, [0])

    def test_matches_torchvision(self):
        torch, tv = torchvision_ops()
        if torch is None:
            self.skipTest(tv)
        rng = np.random.default_rng(5)
        x = rng.standard_normal((2, 2 * 9, 12, 10)).astype(F32)
        # where the two agree: scale 1, whole-pixel corners and windows clear of the bottom and
        # right edges (torchvision rounds after scaling, has no +1 on the end corner, and clips
        # its forward windows to H - 1, W - 1); hand torchvision the end corner + 1
        corners = np.sort(rng.integers(0, 8, (7, 2, 2)), axis=1)          # x1 <= x2, y1 <= y2 in [0, 7]
        r = np.concatenate([rng.integers(0, 2, (7, 1)), corners[:, 0], corners[:, 1]], axis=1).astype(F32)
        (y, _) = run_op(core.CreateOperator("PSRoIPool", ["X", "R"], ["Y", "M"], group_size=3, output_dim=2),
                        [x, r])
        shifted = r + np.array([0, 0, 0, 1, 1], F32)
        expected = tv.ps_roi_pool(torch.from_numpy(x), torch.from_numpy(shifted), 3, 1.0).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)

    def test_bad_inputs_are_named_before_the_compiled_loop(self):
        x = np.ones((2, 8, 4, 4), F32)
        op = core.CreateOperator("PSRoIPool", ["X", "R"], ["Y", "M"], group_size=2, output_dim=3)
        self.assertRunOpRaises(hu.cpu_do, op, [x, np.zeros((1, 5), F32)], exception=Caffe2Error,
                               regexp="at least group_size\\^2 \\* output_dim = 12 channels")
        op = core.CreateOperator("PSRoIPool", ["X", "R"], ["Y", "M"], group_size=2, output_dim=2)
        self.assertRunOpRaises(hu.cpu_do, op, [x, np.array([[2, 0, 0, 1, 1]], F32)], exception=Caffe2Error,
                               regexp="outside \\[0, 2\\)")
        grad = core.CreateOperator("PSRoIPoolGradient", ["X", "R", "M", "dY"], ["dX"], group_size=2, output_dim=2)
        r = np.array([[0, 0, 0, 3, 3]], F32)
        bad = np.full((1, 2, 2, 2), 8, np.int32)
        self.assertRunOpRaises(hu.cpu_do, grad, [x, r, bad, np.ones((1, 2, 2, 2), F32)], exception=Caffe2Error,
                               regexp="mapping channels\\) must lie in \\[0, 8\\)")


# ----------------------------------------------------------------- RoIPoolF

def roi_pool_f_reference(x, rois, scale, ph, pw):
    R, (_, C, H, W) = rois.shape[0], x.shape
    y, arg = np.zeros((R, C, ph, pw), F32), np.full((R, C, ph, pw), -1, np.int32)
    for r in range(R):
        b = int(rois[r, 0])
        sw, sh, ew, eh = (int(c_round(F32(v) * F32(scale))) for v in rois[r, 1:])
        bh, bw = F32(max(eh - sh + 1, 1)) / F32(ph), F32(max(ew - sw + 1, 1)) / F32(pw)
        for i in range(ph):
            hs = min(max(int(np.floor(F32(i) * bh)) + sh, 0), H)
            he = min(max(int(np.ceil(F32(i + 1) * bh)) + sh, 0), H)
            for j in range(pw):
                ws = min(max(int(np.floor(F32(j) * bw)) + sw, 0), W)
                we = min(max(int(np.ceil(F32(j + 1) * bw)) + sw, 0), W)
                if he <= hs or we <= ws:
                    continue
                for c in range(C):
                    window = x[b, c, hs:he, ws:we]
                    k = int(np.argmax(window))
                    y[r, c, i, j] = window.reshape(-1)[k]
                    arg[r, c, i, j] = (hs + k // (we - ws)) * W + ws + k % (we - ws)
    return y, arg


class TestRoIPoolF(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(c=st.integers(1, 3), h=st.integers(1, 8), w=st.integers(1, 8), rois=st.integers(0, 4),
           ph=st.integers(1, 3), pw=st.integers(1, 3), scale=st.sampled_from([1.0, 0.5]), seed=st.integers(0, 99))
    @SETTINGS
    def test_matches_reference(self, c, h, w, rois, ph, pw, scale, seed):
        rng = np.random.default_rng(seed)
        x = rng.permutation(2 * c * h * w).reshape(2, c, h, w).astype(F32)     # distinct: one argmax
        r = random_rois(rng, rois, 2, h / scale, w / scale)
        op = core.CreateOperator("RoIPoolF", ["X", "R"], ["Y", "A"], pooled_h=ph, pooled_w=pw, spatial_scale=scale)
        self.assertReferenceChecks(hu.cpu_do, op, [x, r], lambda x, r: roi_pool_f_reference(x, r, scale, ph, pw))

    @given(c=st.integers(1, 3), hw=st.integers(3, 6), seed=st.integers(0, 99))
    @FEW
    def test_gradient(self, c, hw, seed):
        rng = np.random.default_rng(seed)
        # values 0.1 apart: the finite-difference step moves no maximum
        x = (rng.permutation(2 * c * hw * hw).reshape(2, c, hw, hw) * 0.1).astype(F32)
        op = core.CreateOperator("RoIPoolF", ["X", "R"], ["Y", "A"], pooled_h=2, pooled_w=2)
        self.assertGradientChecks(hu.cpu_do, op, [x, random_rois(rng, 3, 2, hw, hw)], 0, [0], stepsize=0.01)

    def test_overlapping_regions_add_their_gradients(self):
        x = np.arange(2 * 3 * 5 * 5, dtype=F32).reshape(2, 3, 5, 5)
        r = np.array([[0, 0, 0, 4, 4], [0, 1, 1, 4, 4], [1, 0, 0, 2, 2]], F32)
        y, a = run_op(core.CreateOperator("RoIPoolF", ["X", "R"], ["Y", "A"], pooled_h=2, pooled_w=2), [x, r])
        dy = np.random.default_rng(0).standard_normal(y.shape).astype(F32)
        (dx,) = run_op(core.CreateOperator("RoIPoolFGradient", ["X", "R", "A", "dY"], ["dX"], pooled_h=2,
                                           pooled_w=2), [x, r, a, dy])
        expected = np.zeros_like(x)
        for k in range(3):
            for c in range(3):
                for p in range(4):
                    expected[int(r[k, 0]), c].reshape(-1)[a[k, c].reshape(-1)[p]] += dy[k, c].reshape(-1)[p]
        np.testing.assert_allclose(dx, expected, rtol=1e-6, atol=1e-6)

    def test_matches_torchvision(self):
        torch, tv = torchvision_ops()
        if torch is None:
            self.skipTest(tv)
        rng = np.random.default_rng(6)
        x = rng.standard_normal((2, 3, 11, 9)).astype(F32)
        corners = np.sort(rng.uniform(0, 14, (8, 2, 2)), axis=1)          # regions inside the map
        r = np.concatenate([rng.integers(0, 2, (8, 1)), corners[:, 0], corners[:, 1]], axis=1).astype(F32)
        (y, _) = run_op(core.CreateOperator("RoIPoolF", ["X", "R"], ["Y", "A"], pooled_h=3, pooled_w=2,
                                            spatial_scale=0.5), [x, r])
        expected = tv.roi_pool(torch.from_numpy(x), torch.from_numpy(r), (3, 2), 0.5).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)

    def test_batch_indices_outside_the_input_are_named(self):
        # RoIPool shares the check (it skipped the batch column's range before)
        for op_type, outputs in (("RoIPoolF", ["Y", "A"]), ("RoIPool", ["Y", "A"])):
            op = core.CreateOperator(op_type, ["X", "R"], outputs)
            self.assertRunOpRaises(hu.cpu_do, op, [np.ones((2, 1, 3, 3), F32), np.array([[2, 0, 0, 1, 1]], F32)],
                                   exception=Caffe2Error, regexp="batch index 2, outside \\[0, 2\\)")

    def test_bad_argmaxes_are_named(self):
        x = np.ones((1, 2, 3, 3), F32)
        r = np.array([[0, 0, 0, 2, 2]], F32)
        op = core.CreateOperator("RoIPoolFGradient", ["X", "R", "A", "dY"], ["dX"], pooled_h=1, pooled_w=1)
        dy = np.ones((1, 2, 1, 1), F32)
        self.assertRunOpRaises(hu.cpu_do, op, [x, r, np.full((1, 2, 1, 1), 9, np.int32), dy],
                               exception=Caffe2Error, regexp="argmaxes must lie in \\[-1, 9\\)")
        self.assertRunOpRaises(hu.cpu_do, op, [x, r, np.zeros((1, 2, 2, 1), np.int32), dy],
                               exception=Caffe2Error, regexp="shaped \\[1, 2, 1, 1\\]")


def test_pooling_twins_agree_with_the_compiled_kernels():
    from caffe2py.kernels.cpu.detection import ps_roi_pool, roi_pool
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 12, 9, 8)).astype(F32)
    r = random_rois(rng, 6, 2, 9, 8)

    def everything():
        y, m = ps_roi_pool.ps_roi_pool(x, r, 1.0, 2, 3)
        dx = ps_roi_pool.ps_roi_pool_gradient(x.shape, r, m, y, 1.0, 2)
        yp, a = roi_pool.roi_pool(x, r, 1.0, 2, 2)
        return [y, m, dx, yp, a, roi_pool.roi_pool_gradient(x.shape, r, a, yp)]
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("inline")
        compiled = everything()
        jit.set_jit_mode("numpy")
        twins = everything()
    finally:
        jit.set_jit_mode(before)
    for a, b in zip(compiled, twins):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- smooth L1 losses

def smooth_l1(d, beta):
    a = np.abs(d)
    return np.where(a < beta, 0.5 * d * d / beta, a - 0.5 * beta)


def away_from(values, points, gap):
    """values nudged so that none lies within `gap` of any of `points` (the kinks)."""
    out = values.copy()
    for p in points:
        near = np.abs(out - p) < gap
        out[near] = p + np.where(out[near] >= p, gap, -gap)
    return out


class TestSmoothL1Losses(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(1, 4), d=st.integers(1, 6), beta=st.sampled_from([1.0, 0.5, 1.0 / 9]),
           scale=st.sampled_from([1.0, 2.5]), seed=st.integers(0, 99))
    @SETTINGS
    def test_smooth_l1_loss(self, n, d, beta, scale, seed):
        rng = np.random.default_rng(seed)
        y = rng.standard_normal((n, d)).astype(F32)
        a_in = rng.integers(0, 2, (n, d)).astype(F32)
        a_out = rng.uniform(0.5, 2, (n, d)).astype(F32)
        diff = away_from(rng.standard_normal((n, d)) * 2, [-beta, 0, beta], 0.05)
        y_hat = (y + diff).astype(F32)
        op = core.CreateOperator("SmoothL1Loss", ["Yh", "Y", "Ai", "Ao"], ["L"], beta=beta, scale=scale)

        def reference(y_hat, y, a_in, a_out):
            d64 = a_in.astype(np.float64) * (y_hat.astype(np.float64) - y)
            return [np.array(scale / n * np.sum(a_out * smooth_l1(d64, beta)), F32)]
        inputs = [y_hat, y, a_in, a_out]
        self.assertReferenceChecks(hu.cpu_do, op, inputs, reference)
        self.assertGradientChecks(hu.cpu_do, op, inputs, 0, [0], stepsize=0.01, threshold=0.01)

    @given(m=st.integers(0, 5), beta=st.sampled_from([1.0, 0.11]), normalizer=st.sampled_from([0.0, 3.0]),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_select_smooth_l1_loss(self, m, beta, normalizer, seed):
        rng = np.random.default_rng(seed)
        N, D, H, W = 2, 8, 3, 4
        y_hat = rng.standard_normal((N, D, H, W)).astype(F32)
        loc = np.stack([rng.integers(0, N, m), rng.choice([0, 4], m), rng.integers(0, H, m),
                        rng.integers(0, W, m)], axis=1).astype(F32)
        y = rng.standard_normal((m, 4)).astype(F32)
        s = np.array([normalizer], F32)
        op = core.CreateOperator("SelectSmoothL1Loss", ["Yh", "Y", "L", "S"], ["loss"], beta=beta, scale=0.5)

        def reference(y_hat, y, loc, s):
            total = 0.0
            for i in range(len(y)):
                n, c, yy, xx = (int(v) for v in loc[i])
                for j in range(4):
                    total += smooth_l1(float(y_hat[n, c + j, yy, xx]) - float(y[i, j]), beta)
            return [np.array(0.5 * total / max(float(s[0]), 1.0), F32)]
        self.assertReferenceChecks(hu.cpu_do, op, [y_hat, y, loc, s], reference)
        if m:
            y = (y_hat.reshape(-1)[0] * 0 + y)        # keep Y; move Y_hat's selected values off the kinks
            for i in range(m):
                n, c, yy, xx = (int(v) for v in loc[i])
                for j in range(4):
                    diff = away_from(np.array([y_hat[n, c + j, yy, xx] - y[i, j]]), [-beta, 0, beta], 0.05)[0]
                    y_hat[n, c + j, yy, xx] = y[i, j] + diff
            self.assertGradientChecks(hu.cpu_do, op, [y_hat, y, loc, s], 0, [0], stepsize=0.01, threshold=0.01)

    def test_select_smooth_l1_refuses_locations_outside_y_hat(self):
        y_hat = np.zeros((1, 8, 2, 2), F32)
        op = core.CreateOperator("SelectSmoothL1Loss", ["Yh", "Y", "L", "S"], ["loss"])
        for loc, pattern in ((np.array([[0, 5, 0, 0]], F32), "c = 5 outside \\[0, 5\\)"),
                             (np.array([[1, 0, 0, 0]], F32), "n = 1 outside \\[0, 1\\)"),
                             (np.array([[0, 0, 0, 0.5]], F32), "whole numbers")):
            self.assertRunOpRaises(hu.cpu_do, op, [y_hat, np.zeros((1, 4), F32), loc, np.ones(1, F32)],
                                   exception=Caffe2Error, regexp=pattern)


# ----------------------------------------------------------------- sigmoid / softmax losses

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class TestSigmoidLosses(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(shape=st.sampled_from([(5,), (2, 3), (2, 3, 2)]), normalize=st.booleans(),
           scale=st.sampled_from([1.0, 0.3]), seed=st.integers(0, 99))
    @SETTINGS
    def test_sigmoid_cross_entropy_loss(self, shape, normalize, scale, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(shape) * 3).astype(F32)
        t = rng.integers(-1, 2, shape).astype(np.int32)
        op = core.CreateOperator("SigmoidCrossEntropyLoss", ["X", "T"], ["L"], scale=scale, normalize=int(normalize))

        def reference(x, t):
            p = sigmoid(x.astype(np.float64))
            ce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
            keep = t != -1
            total = ce[keep].sum()
            if normalize:
                total /= max(keep.sum(), 1e-5)
            return [np.array(total * scale, F32)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, t], reference, threshold=1e-4)
        self.assertGradientChecks(hu.cpu_do, op, [x, t], 0, [0])

    @staticmethod
    def sigmoid_focal_reference(x, labels, normalizer, gamma, alpha, num_classes, scale):
        N, D, H, W = x.shape
        p = sigmoid(x.astype(np.float64)).reshape(N, D // num_classes, num_classes, H, W)
        t = labels[:, :, None]
        cls = np.arange(1, num_classes + 1)[None, None, :, None, None]
        onehot = (t == cls)
        keep = np.broadcast_to(t != -1, p.shape)
        pos = -alpha * (1 - p) ** gamma * np.log(p)
        neg = -(1 - alpha) * p ** gamma * np.log(1 - p)
        loss = np.where(onehot, pos, np.where(keep, neg, 0.0)).sum() / max(normalizer, 1.0)
        return np.array(loss * scale, F32)

    @given(a=st.integers(1, 2), nc=st.integers(1, 3), hw=st.integers(1, 3), gamma=st.sampled_from([0.0, 1.0, 2.0]),
           alpha=st.sampled_from([0.25, 0.5]), normalizer=st.sampled_from([0.0, 4.0]), seed=st.integers(0, 99))
    @SETTINGS
    def test_sigmoid_focal_loss(self, a, nc, hw, gamma, alpha, normalizer, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((2, a * nc, hw, hw)) * 2).astype(F32)
        labels = rng.integers(-1, nc + 1, (2, a, hw, hw)).astype(np.int32)
        s = np.array([normalizer], F32)
        op = core.CreateOperator("SigmoidFocalLoss", ["X", "T", "S"], ["L"], num_classes=nc, gamma=gamma,
                                 alpha=alpha, scale=2.0)
        self.assertReferenceChecks(
            hu.cpu_do, op, [x, labels, s],
            lambda x, t, s: [self.sigmoid_focal_reference(x, t, float(s[0]), gamma, alpha, nc, 2.0)])
        self.assertGradientChecks(hu.cpu_do, op, [x, labels, s], 0, [0], stepsize=0.01, threshold=0.01)

    def test_sigmoid_focal_loss_matches_torchvision(self):
        torch, tv = torchvision_ops()
        if torch is None:
            self.skipTest(tv)
        rng = np.random.default_rng(8)
        nc, a = 3, 2
        x = rng.standard_normal((2, a * nc, 4, 5)).astype(F32)
        labels = rng.integers(0, nc + 1, (2, a, 4, 5)).astype(np.int32)      # no ignored anchors here
        (loss,) = run_op(core.CreateOperator("SigmoidFocalLoss", ["X", "T", "S"], ["L"], num_classes=nc, gamma=2.0,
                                             alpha=0.25), [x, labels, np.array([6.0], F32)])
        onehot = (labels[:, :, None] == np.arange(1, nc + 1)[None, None, :, None, None]).astype(F32)
        expected = tv.sigmoid_focal_loss(torch.from_numpy(x.reshape(2, a, nc, 4, 5)), torch.from_numpy(onehot),
                                         alpha=0.25, gamma=2.0, reduction="sum").item() / 6.0
        np.testing.assert_allclose(loss, expected, rtol=1e-5)

    def test_labels_beyond_num_classes_are_named(self):
        x = np.zeros((1, 4, 2, 2), F32)
        op = core.CreateOperator("SigmoidFocalLoss", ["X", "T", "S"], ["L"], num_classes=2)
        self.assertRunOpRaises(hu.cpu_do, op, [x, np.full((1, 2, 2, 2), 3, np.int32), np.ones(1, F32)],
                               exception=Caffe2Error, regexp="at most 2")
        op = core.CreateOperator("SigmoidFocalLoss", ["X", "T", "S"], ["L"], num_classes=3)
        self.assertRunOpRaises(hu.cpu_do, op, [x, np.zeros((1, 1, 2, 2), np.int32), np.ones(1, F32)],
                               exception=Caffe2Error, regexp="not a multiple of num_classes = 3")


def group_softmax_reference(x, nc):
    N, D, H, W = x.shape
    g = x.astype(np.float64).reshape(N, D // nc, nc, H, W)
    e = np.exp(g - g.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)).reshape(x.shape)


class TestSoftmaxLosses(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(a=st.integers(1, 3), nc=st.integers(1, 4), hw=st.integers(1, 3), seed=st.integers(0, 99))
    @SETTINGS
    def test_group_spatial_softmax(self, a, nc, hw, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((2, a * nc, hw, hw)) * 3).astype(F32)
        op = core.CreateOperator("GroupSpatialSoftmax", ["X"], ["P"], num_classes=nc)
        self.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: [group_softmax_reference(x, nc).astype(F32)])
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])

    @given(a=st.integers(1, 2), nc=st.integers(2, 4), hw=st.integers(1, 3), gamma=st.sampled_from([0.0, 1.0, 2.0]),
           normalizer=st.sampled_from([0.0, 5.0]), seed=st.integers(0, 99))
    @SETTINGS
    def test_softmax_focal_loss(self, a, nc, hw, gamma, normalizer, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((2, a * nc, hw, hw)) * 2).astype(F32)
        labels = rng.integers(-1, nc, (2, a, hw, hw)).astype(np.int32)
        s = np.array([normalizer], F32)
        alpha = 0.25
        op = core.CreateOperator("SoftmaxFocalLoss", ["X", "T", "S"], ["L", "P"], num_classes=nc, gamma=gamma,
                                 alpha=alpha, scale=1.5)

        def reference(x, t, s):
            p = group_softmax_reference(x, nc)
            pg = p.reshape(2, a, nc, hw, hw)
            pt = np.take_along_axis(pg, np.maximum(t, 0)[:, :, None], axis=2)[:, :, 0]
            z = np.where(t == 0, 1 - alpha, alpha) / max(float(s[0]), 1.0)
            loss = np.where(t >= 0, -(1 - pt) ** gamma * np.log(pt) * z, 0.0).sum() * 1.5
            return [np.array(loss, F32), p.astype(F32)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, labels, s], reference)
        self.assertGradientChecks(hu.cpu_do, op, [x, labels, s], 0, [0], stepsize=0.01, threshold=0.01)

    def test_softmax_focal_labels_outside_the_classes_are_named(self):
        op = core.CreateOperator("SoftmaxFocalLoss", ["X", "T", "S"], ["L", "P"], num_classes=3)
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((1, 3, 2, 2), F32), np.full((1, 1, 2, 2), 3, np.int32),
                                               np.ones(1, F32)], exception=Caffe2Error, regexp="at most 2")


# ----------------------------------------------------------------- data movement

class TestDetectronLayoutOps(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(1, 5), d=st.integers(1, 4), seed=st.integers(0, 99))
    @SETTINGS
    def test_batch_permutation(self, n, d, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, d, 2)).astype(F32)
        perm = rng.permutation(n).astype(np.int32)
        op = core.CreateOperator("BatchPermutation", ["X", "I"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [x, perm], lambda x, p: [np.stack([x[i] for i in p])])
        self.assertGradientChecks(hu.cpu_do, op, [x, perm], 0, [0])

    def test_batch_permutation_refuses_indices_outside_the_batch(self):
        op = core.CreateOperator("BatchPermutation", ["X", "I"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((3, 2), F32), np.array([0, 3, 1], np.int32)],
                               exception=Caffe2Error, regexp="indices must lie in \\[0, 3\\), got 3")
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((3, 2), F32), np.array([0, 1], np.int32)],
                               exception=Caffe2Error, regexp="vector of 3 values")

    @given(n=st.integers(1, 6), seed=st.integers(0, 99))
    @SETTINGS
    def test_sample_as(self, n, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, 3, 2)).astype(F32)
        labels = rng.integers(-1, 3, n).astype(np.int32)
        labels[0] = 1
        op = core.CreateOperator("SampleAs", ["X", "L"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [x, labels],
                                   lambda x, lab: [np.array([x[i] for i in range(n) if lab[i] > 0])])
        self.assertGradientChecks(hu.cpu_do, op, [x, labels], 0, [0])

    @given(h=st.integers(1, 5), w=st.integers(1, 5), dh=st.integers(0, 2), dw=st.integers(0, 2),
           three_d=st.booleans(), dtype=st.sampled_from([np.float32, np.int32]), seed=st.integers(0, 99))
    @SETTINGS
    def test_spatial_narrow_as(self, h, w, dh, dw, three_d, dtype, seed):
        rng = np.random.default_rng(seed)
        a = (rng.standard_normal((2, 3, h + dh, w + dw)) * 10).astype(dtype)
        b = np.zeros((2, h, w) if three_d else (2, 3, h, w), F32)
        op = core.CreateOperator("SpatialNarrowAs", ["A", "B"], ["C"])
        self.assertReferenceChecks(hu.cpu_do, op, [a, b], lambda a, b: [a[:, :, :h, :w]])
        if dtype == np.float32:
            self.assertGradientChecks(hu.cpu_do, op, [a, b], 0, [0])

    def test_spatial_narrow_as_refuses_a_larger_b(self):
        op = core.CreateOperator("SpatialNarrowAs", ["A", "B"], ["C"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((1, 2, 3, 3), F32), np.zeros((1, 2, 4, 3), F32)],
                               exception=Caffe2Error, regexp="H1 <= H0")

    @given(shape=st.sampled_from([(2, 3, 4, 5), (3, 2, 2), (1, 1, 1, 1)]), scale=st.integers(1, 3),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_upsample_nearest(self, shape, scale, seed):
        x = np.random.default_rng(seed).standard_normal(shape).astype(F32)
        op = core.CreateOperator("UpsampleNearest", ["X"], ["Y"], scale=scale)

        def reference(x):
            h, w = x.shape[-2] * scale, x.shape[-1] * scale
            rows, cols = np.arange(h) // scale, np.arange(w) // scale
            return [x[..., rows[:, None], cols[None, :]]]
        self.assertReferenceChecks(hu.cpu_do, op, [x], reference)
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])

    @given(n=st.integers(1, 3), c=st.integers(1, 4), hw=st.integers(1, 3), order=st.sampled_from(["NCHW", "NHWC"]),
           is_learnable=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_affine_channel(self, n, c, hw, order, is_learnable, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, c, hw, hw) if order == "NCHW" else (n, hw, hw, c)).astype(F32)
        scale, bias = rng.standard_normal(c).astype(F32), rng.standard_normal(c).astype(F32)
        op = core.CreateOperator("AffineChannel", ["X", "s", "b"], ["Y"], order=order, is_learnable=is_learnable)

        def reference(x, s, b):
            view = (1, c, 1, 1) if order == "NCHW" else (1, 1, 1, c)
            return [x * s.reshape(view) + b.reshape(view)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, scale, bias], reference)
        for i in range(3 if is_learnable else 1):
            self.assertGradientChecks(hu.cpu_do, op, [x, scale, bias], i, [0])

    def test_affine_channel_in_place(self):
        x = np.arange(12, dtype=F32).reshape(1, 3, 2, 2)
        op = core.CreateOperator("AffineChannel", ["X", "s", "b"], ["X"])
        (y,) = run_op(op, [x, np.array([1, 2, 3], F32), np.array([0, 1, 0], F32)])
        np.testing.assert_array_equal(y, x * np.array([1, 2, 3], F32)[None, :, None, None]
                                      + np.array([0, 1, 0], F32)[None, :, None, None])


# ----------------------------------------------------------------- a head trained with them

def test_a_retinanet_style_head_learns_with_the_detectron_ops():
    """conv -> UpsampleNearest -> SpatialNarrowAs -> AffineChannel -> (conv ->) SigmoidFocalLoss
    and SelectSmoothL1Loss, gradients by AddGradientOperators, plain SGD: the loss falls."""
    from caffe2.python import model_helper, brew
    rng = np.random.default_rng(9)
    workspace.ResetWorkspace()
    nc, a = 2, 1
    workspace.FeedBlob("data", rng.standard_normal((2, 3, 3, 3)).astype(F32))
    workspace.FeedBlob("like", np.zeros((2, 4, 5, 5), F32))
    workspace.FeedBlob("labels", rng.integers(0, nc + 1, (2, a, 5, 5)).astype(np.int32))
    workspace.FeedBlob("num_fg", np.array([10.0], F32))
    workspace.FeedBlob("box_targets", rng.standard_normal((3, 4)).astype(F32))
    workspace.FeedBlob("box_locations", np.array([[0, 0, 1, 1], [1, 0, 4, 4], [0, 0, 2, 3]], F32))
    model = model_helper.ModelHelper(name="retina_head")
    feat = brew.conv(model, "data", "feat", 3, 4, kernel=1)
    up = model.net.UpsampleNearest(feat, "up", scale=2)
    narrow = model.net.SpatialNarrowAs([up, "like"], "narrow")
    scale = model.param_init_net.ConstantFill([], "ac_scale", shape=[4], value=1.0)
    bias = model.param_init_net.ConstantFill([], "ac_bias", shape=[4], value=0.0)
    model.params.extend([core.BlobReference("ac_scale"), core.BlobReference("ac_bias")])
    affine = model.net.AffineChannel([narrow, scale, bias], "affine", is_learnable=1)
    cls = brew.conv(model, affine, "cls_logits", 4, nc * a, kernel=1)
    cls_loss = model.net.SigmoidFocalLoss([cls, "labels", "num_fg"], "cls_loss", num_classes=nc, gamma=2.0)
    box_loss = model.net.SelectSmoothL1Loss([affine, "box_targets", "box_locations", "num_fg"], "box_loss",
                                            beta=0.11)
    loss = model.net.Sum([cls_loss, box_loss], "loss")
    model.AddGradientOperators([loss])
    for p in model.params:
        model.net.WeightedSum([p, "one", model.param_to_grad[p], "minus_lr"], p)
    workspace.FeedBlob("one", np.array([1.0], F32))
    workspace.FeedBlob("minus_lr", np.array([-0.5], F32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    losses = []
    for _ in range(15):
        workspace.RunNet(model.net.Proto().name)
        losses.append(float(workspace.FetchBlob("loss")))
    assert losses[-1] < 0.7 * losses[0], losses
