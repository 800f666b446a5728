"""Detectron's ops (RoIAlign, RoIPool, BBoxTransform, BoxWithNMSLimit, GenerateProposals,
CollectAndDistributeFpnRpnProposals) against the NumPy references of
tests/_detection_reference.py, in Caffe2's hypothesis_test_util style, and a
Detectron-style inference head run as one net against the reference chain."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _detection_reference as ref
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def random_rois(rng, n, n_images, height, width, with_batch=True, scale=1.0):
    corners = rng.uniform(-2, 1, (n, 2)) * 0 + rng.uniform(-2.0, width / scale + 2, (n, 2))
    corners[:, 1] = rng.uniform(-2.0, height / scale + 2, n)
    size = rng.uniform(0.0, max(height, width) / scale, (n, 2))
    boxes = np.concatenate([corners, corners + size], axis=1)
    if not with_batch:
        return boxes.astype(np.float32)
    return np.concatenate([rng.integers(0, n_images, (n, 1)), boxes], axis=1).astype(np.float32)


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


class TestRoIAlign(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 9), w=st.integers(1, 9),
           rois=st.integers(0, 5), pooled=st.tuples(st.integers(1, 3), st.integers(1, 3)),
           ratio=st.sampled_from([0, 1, 2]), aligned=st.booleans(), nhwc=st.booleans(),
           batch_col=st.booleans(), scale=st.sampled_from([1.0, 0.5, 0.25]), seed=st.integers(0, 99))
    @SETTINGS
    def test_matches_reference(self, n, c, h, w, rois, pooled, ratio, aligned, nhwc, batch_col, scale, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        r = random_rois(rng, rois, n if batch_col else 1, h, w, batch_col, scale)
        if nhwc:
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        op = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], spatial_scale=scale, pooled_h=pooled[0],
                                 pooled_w=pooled[1], sampling_ratio=ratio, aligned=int(aligned),
                                 order="NHWC" if nhwc else "NCHW")

        def reference(x, r):
            return [ref.roi_align(x, r, scale, pooled[0], pooled[1], ratio, aligned, nhwc)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, r], reference, threshold=1e-4)

    @given(c=st.integers(1, 2), hw=st.integers(2, 5), rois=st.integers(1, 3), aligned=st.booleans(),
           nhwc=st.booleans(), seed=st.integers(0, 99))
    @settings(max_examples=4, deadline=None, derandomize=True)
    def test_gradient(self, c, hw, rois, aligned, nhwc, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((2, hw, hw, c) if nhwc else (2, c, hw, hw)).astype(np.float32)
        r = random_rois(rng, rois, 2, hw, hw)
        op = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2,
                                 aligned=int(aligned), order="NHWC" if nhwc else "NCHW")
        # the output is linear in X: finite differences are exact up to rounding
        self.assertGradientChecks(hu.cpu_do, op, [x, r], 0, [0], stepsize=0.05, threshold=0.01)

    def test_empty_rois_give_an_empty_output(self):
        x = np.ones((1, 3, 4, 5), np.float32)
        op = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], pooled_h=2, pooled_w=3)
        (y,) = run_op(op, [x, np.zeros((0, 5), np.float32)])
        self.assertEqual(y.shape, (0, 3, 2, 3))
        op = core.CreateOperator("RoIAlignGradient", ["X", "R", "dY"], ["dX"], pooled_h=2, pooled_w=3)
        (dx,) = run_op(op, [x, np.zeros((0, 5), np.float32), y])
        np.testing.assert_array_equal(dx, np.zeros_like(x))

    def test_bad_regions_raise_before_the_compiled_loop(self):
        x = np.ones((2, 1, 4, 4), np.float32)
        op = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], pooled_h=2, pooled_w=2)
        cases = [(np.array([[2, 0, 0, 1, 1]], np.float32), "outside \\[0, 2\\)"),
                 (np.array([[-1, 0, 0, 1, 1]], np.float32), "outside"),
                 (np.array([[0, 0, np.nan, 1, 1]], np.float32), "non-finite"),
                 (np.array([[0, 0, 1]], np.float32), "\\[R, 4 or 5\\]"),
                 (np.array([[0, 0, 0, 1e12, 1e12]], np.float32), "sampling grid")]
        for rois, pattern in cases:
            self.assertRunOpRaises(hu.cpu_do, op, [x, rois], exception=Caffe2Error, regexp=pattern)
        aligned = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], aligned=1)
        self.assertRunOpRaises(hu.cpu_do, aligned, [x, np.array([[0, 3, 3, 1, 1]], np.float32)],
                               exception=Caffe2Error, regexp="non-negative size")


class TestRoIPool(hu.HypothesisTestCase):
    @staticmethod
    def reference(x, rois, scale, ph, pw):
        R, C, H, W = rois.shape[0], x.shape[1], x.shape[2], x.shape[3]
        y, arg = np.zeros((R, C, ph, pw), np.float32), np.full((R, C, ph, pw), -1, np.int32)

        def c_round(v):
            return int(np.sign(v) * np.floor(abs(v) + 0.5))
        for r in range(R):
            b = int(rois[r, 0])
            sw, sh, ew, eh = (c_round(float(np.float32(v) * np.float32(scale))) for v in rois[r, 1:])
            bh, bw = max(eh - sh + 1, 1) / ph, max(ew - sw + 1, 1) / pw
            for i in range(ph):
                for j in range(pw):
                    hs = min(max(int(np.floor(i * bh)) + sh, 0), H)
                    he = min(max(int(np.ceil((i + 1) * bh)) + sh, 0), H)
                    ws = min(max(int(np.floor(j * bw)) + sw, 0), W)
                    we = min(max(int(np.ceil((j + 1) * bw)) + sw, 0), W)
                    if he <= hs or we <= ws:
                        continue
                    for c in range(C):
                        win = x[b, c, hs:he, ws:we]
                        k = int(np.argmax(win))
                        y[r, c, i, j] = win.reshape(-1)[k]
                        arg[r, c, i, j] = (hs + k // (we - ws)) * W + ws + k % (we - ws)
        return y, arg

    @given(c=st.integers(1, 3), h=st.integers(1, 8), w=st.integers(1, 8), rois=st.integers(0, 4),
           ph=st.integers(1, 3), pw=st.integers(1, 3), scale=st.sampled_from([1.0, 0.5]), seed=st.integers(0, 99))
    @SETTINGS
    def test_matches_reference(self, c, h, w, rois, ph, pw, scale, seed):
        rng = np.random.default_rng(seed)
        x = rng.permutation(2 * c * h * w).reshape(2, c, h, w).astype(np.float32)    # distinct values
        r = random_rois(rng, rois, 2, h, w, scale=scale)
        op = core.CreateOperator("RoIPool", ["X", "R"], ["Y", "A"], pooled_h=ph, pooled_w=pw, spatial_scale=scale)
        self.assertReferenceChecks(hu.cpu_do, op, [x, r], lambda x, r: self.reference(x, r, scale, ph, pw))
        test_op = core.CreateOperator("RoIPool", ["X", "R"], ["Y"], pooled_h=ph, pooled_w=pw,
                                      spatial_scale=scale, is_test=1)
        self.assertReferenceChecks(hu.cpu_do, test_op, [x, r],
                                   lambda x, r: self.reference(x, r, scale, ph, pw)[:1])

    def test_gradient_routes_to_the_argmax(self):
        rng = np.random.default_rng(3)
        x = rng.permutation(2 * 2 * 6 * 6).reshape(2, 2, 6, 6).astype(np.float32)
        r = random_rois(rng, 3, 2, 6, 6)
        op = core.CreateOperator("RoIPool", ["X", "R"], ["Y", "A"], pooled_h=2, pooled_w=2)
        self.assertGradientChecks(hu.cpu_do, op, [x, r], 0, [0], stepsize=0.01, threshold=0.01)


class TestBoxOps(hu.HypothesisTestCase):
    @given(n=st.integers(0, 6), k=st.integers(1, 3), images=st.integers(1, 2), apply_scale=st.booleans(),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_bbox_transform(self, n, k, images, apply_scale, seed):
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, [1.0 / images] * images)
        batch = np.repeat(np.arange(images), counts)[:, None]
        boxes = random_rois(rng, n, 1, 60, 80, with_batch=False) * 1.5
        rois = np.concatenate([batch, boxes], 1).astype(np.float32)
        deltas = rng.normal(0, 0.3, (n, 4 * k)).astype(np.float32)
        im_info = np.stack([rng.uniform(40, 90, images), rng.uniform(40, 90, images),
                            rng.uniform(0.5, 2.0, images)], 1).astype(np.float32)
        weights = [10.0, 10.0, 5.0, 5.0]
        op = core.CreateOperator("BBoxTransform", ["R", "D", "I"], ["B", "S"], weights=weights,
                                 apply_scale=int(apply_scale))

        def reference(rois, deltas, im_info):
            out = np.zeros(deltas.shape)
            for i in range(images):
                rows = rois[:, 0] == i
                s = float(im_info[i, 2])
                hh, ww = int(im_info[i, 0] / s + 0.5), int(im_info[i, 1] / s + 0.5)
                for j in range(k):
                    t = ref.transform(rois[rows, 1:] / s, deltas[rows, 4 * j:4 * j + 4], weights)
                    out[rows, 4 * j:4 * j + 4] = ref.clip_boxes(t, hh, ww) * (s if apply_scale else 1.0)
            return [out, counts.astype(np.float32)]
        self.assertReferenceChecks(hu.cpu_do, op, [rois, deltas, im_info], reference, threshold=1e-4, atol=1e-3)

    def test_bbox_transform_rotated_wraps_angles(self):
        rois = np.array([[10, 10, 4, 2, 80], [5, 6, 3, 3, -85]], np.float32)
        deltas = np.array([[0.1, -0.1, 0.2, 0.0, 0.5], [0.0, 0.0, 0.0, 0.1, -0.2]], np.float32)
        op = core.CreateOperator("BBoxTransform", ["R", "D", "I"], ["B"], rotated=1, apply_scale=0)
        (out,) = run_op(op, [rois, deltas, np.array([[100, 100, 1]], np.float32)])
        angles = rois[:, 4] + deltas[:, 4] * 180 / np.pi
        angles = np.where(angles > 90, angles - 180, np.where(angles < -90, angles + 180, angles))
        np.testing.assert_allclose(out[:, 4], angles, rtol=1e-5)
        np.testing.assert_allclose(out[:, 2], rois[:, 2] * np.exp(deltas[:, 2]), rtol=1e-5)
        np.testing.assert_allclose(out[:, 0], rois[:, 0] + deltas[:, 0] * rois[:, 2], rtol=1e-5)

    @given(n=st.integers(0, 25), classes=st.integers(1, 4), per_image=st.sampled_from([0, 3, 100]),
           thresh=st.sampled_from([0.3, 0.5]), seed=st.integers(0, 999))
    @SETTINGS
    def test_box_with_nms_limit(self, n, classes, per_image, thresh, seed):
        rng = np.random.default_rng(seed)
        scores = rng.uniform(0, 1, (n, classes)).astype(np.float32)
        centers = rng.uniform(0, 40, (n, 2 * classes))
        sizes = rng.uniform(2, 20, (n, 2 * classes))
        boxes = np.zeros((n, 4 * classes), np.float32)
        boxes[:, 0::4], boxes[:, 1::4] = centers[:, 0::2], centers[:, 1::2]
        boxes[:, 2::4], boxes[:, 3::4] = centers[:, 0::2] + sizes[:, 0::2], centers[:, 1::2] + sizes[:, 1::2]
        op = core.CreateOperator("BoxWithNMSLimit", ["S", "B"], ["s", "b", "c", "bs", "k", "ks"],
                                 score_thresh=0.2, nms=thresh, detections_per_im=per_image)

        def reference(scores, boxes):
            s, bx, cls, rows = ref.box_with_nms_limit(scores, boxes, 0.2, thresh, per_image)
            sizes = np.array([[0] + [int((cls == j).sum()) for j in range(1, classes)]], np.int32)
            return [s, bx, cls, np.array([len(s)], np.float32), rows.astype(np.int32), sizes]
        self.assertReferenceChecks(hu.cpu_do, op, [scores, boxes], reference)

    def test_box_with_nms_limit_batches_and_class_options(self):
        rng = np.random.default_rng(5)
        n, classes = 12, 3
        scores = rng.uniform(0, 1, (n, classes)).astype(np.float32)
        xy = rng.uniform(0, 30, (n, 2))
        one = np.concatenate([xy, xy + rng.uniform(3, 15, (n, 2))], 1).astype(np.float32)
        splits = np.array([5, 7], np.float32)
        # class-agnostic boxes, background last in scores, classes counted without background
        op = core.CreateOperator("BoxWithNMSLimit", ["S", "B", "N"], ["s", "b", "c", "bs"], score_thresh=0.3,
                                 nms=0.4, cls_agnostic_bbox_reg=1, input_boxes_include_bg_cls=0,
                                 output_classes_include_bg_cls=0)
        s, b, c, bs = run_op(op, [scores, one, splits])
        want_s, want_b, want_c = [], [], []
        for lo, hi in ((0, 5), (5, 12)):
            for j in range(1, classes):
                col = scores[lo:hi, j - 1]
                idx = np.flatnonzero(col > 0.3)
                keep = ref.nms(one[lo:hi][idx], col[idx], 0.4, 1.0, 100)
                want_s += list(col[idx][keep])
                want_b += list(one[lo:hi][idx][keep])
                want_c += [j - 1] * len(keep)
        np.testing.assert_allclose(s, want_s)
        np.testing.assert_allclose(b, np.array(want_b).reshape(-1, 4))
        np.testing.assert_allclose(c, want_c)
        self.assertEqual(bs.sum(), len(want_s))

    def test_soft_nms_linear_rescores_overlaps(self):
        boxes = np.array([[0, 0, 0, 0, 0, 0, 10, 10], [0, 0, 0, 0, 1, 1, 10, 10],
                          [0, 0, 0, 0, 20, 20, 30, 30]], np.float32)
        scores = np.array([[0, 0.9], [0, 0.8], [0, 0.7]], np.float32)
        op = core.CreateOperator("BoxWithNMSLimit", ["S", "B"], ["s", "b", "c"], score_thresh=0.05, nms=0.3,
                                 soft_nms_enabled=1, soft_nms_method="linear", soft_nms_min_score_thres=0.01)
        s, b, c = run_op(op, [scores, boxes])
        o = ref.iou(boxes[0, 4:], boxes[1, 4:], 1.0)
        np.testing.assert_allclose(s, [0.9, 0.7, 0.8 * (1 - o)], rtol=1e-5)
        np.testing.assert_allclose(b[:, 0], [0, 20, 1])

    def test_rotated_nms_uses_the_rotated_overlap(self):
        """Pairs of rotated boxes: the lower-scored one is dropped exactly when the
        threshold is below their overlap, measured here on a fine grid of points."""
        rng = np.random.default_rng(8)
        grid = np.stack(np.meshgrid(np.linspace(0, 60, 1201), np.linspace(0, 60, 1201)), -1).reshape(-1, 2)

        def inside(box):
            # counter-clockwise as seen in an image (y axis pointing down)
            t = -np.deg2rad(box[4])
            d = grid - box[:2]
            u = d[:, 0] * np.cos(t) + d[:, 1] * np.sin(t)
            v = -d[:, 0] * np.sin(t) + d[:, 1] * np.cos(t)
            return (np.abs(u) <= box[2] / 2) & (np.abs(v) <= box[3] / 2)
        for _ in range(4):
            a = np.array([30, 30, *rng.uniform(8, 20, 2), rng.uniform(-90, 90)], np.float32)
            b = np.array([*(30 + rng.uniform(-5, 5, 2)), *rng.uniform(8, 20, 2), rng.uniform(-90, 90)], np.float32)
            ia, ib = inside(a), inside(b)
            overlap = (ia & ib).sum() / (ia | ib).sum()
            boxes = np.stack([np.r_[np.zeros(5), a], np.r_[np.zeros(5), b]]).astype(np.float32)
            scores = np.array([[0, 0.9], [0, 0.8]], np.float32)
            for thresh, kept in ((overlap - 0.02, 1), (overlap + 0.02, 2)):
                op = core.CreateOperator("BoxWithNMSLimit", ["S", "B"], ["s", "b", "c"], nms=float(thresh), rotated=1)
                s, b_out, _ = run_op(op, [scores, boxes])
                self.assertEqual(len(s), kept, "overlap %.3f, threshold %.3f" % (overlap, thresh))
                np.testing.assert_array_equal(b_out, boxes[:kept, 5:])

    @given(images=st.integers(1, 2), a=st.integers(1, 3), h=st.integers(1, 5), w=st.integers(1, 5),
           pre=st.sampled_from([0, 10]), post=st.sampled_from([0, 5]), seed=st.integers(0, 999))
    @SETTINGS
    def test_generate_proposals(self, images, a, h, w, pre, post, seed):
        rng = np.random.default_rng(seed)
        scores = rng.uniform(0, 1, (images, a, h, w)).astype(np.float32)
        deltas = rng.normal(0, 0.2, (images, 4 * a, h, w)).astype(np.float32)
        im_info = np.tile(np.array([[h * 16 - 3, w * 16 - 5, 1.0]], np.float32), (images, 1))
        anchors = np.array([[-8, -8, 23, 23], [-20, -10, 35, 25], [0, 0, 15, 15]], np.float32)[:a]
        for name in ("GenerateProposals", "GenerateProposalsCPP"):
            op = core.CreateOperator(name, ["s", "d", "i", "a"], ["r", "p"], spatial_scale=1.0 / 16,
                                     pre_nms_topN=pre, post_nms_topN=post, nms_thresh=0.6, min_size=4)
            self.assertReferenceChecks(
                hu.cpu_do, op, [scores, deltas, im_info, anchors],
                lambda *ins: ref.generate_proposals(*ins, 1.0 / 16, pre, post, 0.6, 4), threshold=1e-4, atol=1e-3)

    def test_collect_and_distribute(self):
        rng = np.random.default_rng(11)
        rois, probs = [], []
        for level in range(2, 7):
            n = int(rng.integers(0, 6))
            xy = rng.uniform(0, 500, (n, 2))
            side = rng.uniform(10, 2 ** (level + 5), (n, 2))
            rois.append(np.concatenate([rng.integers(0, 2, (n, 1)), xy, xy + side], 1).astype(np.float32))
            probs.append(rng.uniform(0, 1, n).astype(np.float32))
        outs = ["rois"] + ["rois_fpn%d" % k for k in range(2, 6)] + ["restore"]
        op = core.CreateOperator("CollectAndDistributeFpnRpnProposals",
                                 ["r%d" % k for k in range(5)] + ["p%d" % k for k in range(5)], outs,
                                 rpn_post_nms_topN=12)

        def reference(*ins):
            all_rois, all_p = np.concatenate(ins[:5]), np.concatenate(ins[5:])
            order = sorted(range(all_p.size), key=lambda k: (-all_p[k], k))[:12]
            top = all_rois[order]
            area = (top[:, 3] - top[:, 1] + 1) * (top[:, 4] - top[:, 2] + 1)
            lvl = np.clip(np.floor(4 + np.log2(np.sqrt(area) / 224 + 1e-6)), 2, 5)
            per_level = [top[lvl == k] for k in range(2, 6)]
            restore = np.argsort(np.concatenate([np.flatnonzero(lvl == k) for k in range(2, 6)]))
            return [top] + per_level + [restore.astype(np.int32)]
        self.assertReferenceChecks(hu.cpu_do, op, rois + probs, reference)


class TestDetectronHead(hu.HypothesisTestCase):
    def test_inference_head_matches_the_reference_chain(self):
        """GenerateProposals -> RoIAlign -> FC -> Softmax / FC -> BBoxTransform ->
        BoxWithNMSLimit on random inputs, as one net, against the NumPy chain."""
        rng = np.random.default_rng(2024)
        C, H, W, A, classes, pooled = 4, 6, 7, 3, 3, 3
        feat = rng.standard_normal((1, C, H, W)).astype(np.float32)
        rpn_scores = rng.uniform(0, 1, (1, A, H, W)).astype(np.float32)
        rpn_deltas = rng.normal(0, 0.2, (1, 4 * A, H, W)).astype(np.float32)
        im_info = np.array([[H * 16, W * 16, 1.0]], np.float32)
        anchors = np.array([[-8, -8, 23, 23], [-24, -12, 39, 27], [-12, -24, 27, 39]], np.float32)
        w_cls = rng.normal(0, 0.3, (classes, C * pooled * pooled)).astype(np.float32)
        b_cls = rng.normal(0, 0.1, classes).astype(np.float32)
        w_box = rng.normal(0, 0.05, (4 * classes, C * pooled * pooled)).astype(np.float32)
        b_box = np.zeros(4 * classes, np.float32)
        feeds = dict(feat=feat, rpn_scores=rpn_scores, rpn_deltas=rpn_deltas, im_info=im_info, anchors=anchors,
                     w_cls=w_cls, b_cls=b_cls, w_box=w_box, b_box=b_box)

        net = core.Net("detectron_head")
        net.GenerateProposals(["rpn_scores", "rpn_deltas", "im_info", "anchors"], ["rois", "rois_probs"],
                              spatial_scale=1.0 / 16, pre_nms_topN=60, post_nms_topN=12, nms_thresh=0.7, min_size=2)
        net.RoIAlign(["feat", "rois"], "pooled", spatial_scale=1.0 / 16, pooled_h=pooled, pooled_w=pooled,
                     sampling_ratio=2)
        net.FC(["pooled", "w_cls", "b_cls"], "cls_logits")
        net.Softmax("cls_logits", "cls_prob")
        net.FC(["pooled", "w_box", "b_box"], "box_deltas")
        net.BBoxTransform(["rois", "box_deltas", "im_info"], ["pred_boxes", "splits"], weights=[10.0, 10.0, 5.0, 5.0])
        net.BoxWithNMSLimit(["cls_prob", "pred_boxes", "splits"], ["det_scores", "det_boxes", "det_classes"],
                            score_thresh=0.05, nms=0.5, detections_per_im=20)
        workspace.ResetWorkspace()
        for name, value in feeds.items():
            workspace.FeedBlob(name, value)
        workspace.RunNetOnce(net)
        got = {b: workspace.FetchBlob(b) for b in ("rois", "pooled", "cls_prob", "pred_boxes", "det_scores",
                                                  "det_boxes", "det_classes")}

        rois, _ = ref.generate_proposals(rpn_scores, rpn_deltas, im_info, anchors, 1.0 / 16, 60, 12, 0.7, 2)
        self.assertGreater(rois.shape[0], 3)
        pooled_ref = ref.roi_align(feat, rois, 1.0 / 16, pooled, pooled, 2, False)
        flat = pooled_ref.reshape(rois.shape[0], -1)
        logits = flat @ w_cls.T.astype(np.float64) + b_cls
        prob = np.exp(logits - logits.max(1, keepdims=True))
        prob /= prob.sum(1, keepdims=True)
        deltas = flat @ w_box.T.astype(np.float64) + b_box
        boxes = np.concatenate([ref.clip_boxes(ref.transform(rois[:, 1:], deltas[:, 4 * j:4 * j + 4],
                                                             (10.0, 10.0, 5.0, 5.0)), H * 16, W * 16)
                                for j in range(classes)], 1)
        s, bx, cls, _ = ref.box_with_nms_limit(prob, boxes, 0.05, 0.5, 20)

        np.testing.assert_allclose(got["rois"], rois, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(got["pooled"], pooled_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["cls_prob"], prob, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got["pred_boxes"], boxes, rtol=1e-4, atol=1e-3)
        self.assertGreater(len(s), 2)
        np.testing.assert_allclose(got["det_scores"], s, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got["det_boxes"], bx, rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(got["det_classes"], cls)


@pytest.mark.parametrize("op_type", ["BBoxTransform", "BoxWithNMSLimit", "GenerateProposals",
                                     "CollectAndDistributeFpnRpnProposals", "RMACRegions"])
def test_inference_ops_refuse_gradients(op_type):
    from caffe2py.gradients import gradient_status
    assert gradient_status(op_type) == "should not do gradient"
