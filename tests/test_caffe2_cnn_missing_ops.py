"""Caffe2's GroupNorm, RMSNorm, C10LayerNorm_DontUseThisOpYet, UpsampleBilinear,
IntegralImage, CropAndResize, RoIAlignRotated and the CTC decoders, against references
written out here (torch's group_norm, rms_norm and corner-aligned bilinear interpolate,
and torch autograd for the gradients, where torch is installed)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import hypothesis
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.python import core
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

torch = pytest.importorskip("torch")
F = torch.nn.functional
CPU = hu.cpu_do


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True

    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(CPU, op, inputs, exception=Caffe2Error, regexp=regexp)


def _torch_grads(fn, inputs, dy):
    """Gradients of sum(fn(*inputs) * dy) with respect to every input (float64)."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inputs]
    (fn(*ts) * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    return [t.grad.numpy() for t in ts]


# ----------------------------------------------------------------- GroupNorm

def _gn_torch(x, gamma, beta, group, eps, nhwc):
    """torch's group_norm on NCHW, with the layout moved around it."""
    if nhwc:
        x = x.movedim(-1, 1)
    y = F.group_norm(x, group, gamma, beta, eps)
    return y.movedim(1, -1) if nhwc else y


class TestGroupNorm(OpTest):
    @settings(max_examples=15, deadline=None)
    @given(n=st.integers(1, 3), g=st.integers(1, 3), d=st.integers(1, 3), hw=st.sampled_from([(3,), (2, 3), ()]),
           nhwc=st.booleans())
    def test_forward_and_gradient_match_torch(self, n, g, d, hw, nhwc):
        # torch's group_norm refuses groups of one value (no variance to normalise by)
        hypothesis.assume(d * int(np.prod(hw)) > 1)
        c, eps = g * d, 1e-5
        shape = (n,) + hw + (c,) if nhwc else (n, c) + hw
        x = np.random.randn(*shape).astype(np.float32) + 1
        gamma, beta = np.random.randn(c).astype(np.float32), np.random.randn(c).astype(np.float32)
        op = core.CreateOperator("GroupNorm", ["X", "gamma", "beta"], ["Y", "mean", "inv_std"], group=g,
                                 epsilon=eps, order="NHWC" if nhwc else "NCHW")

        def ref(x, gamma, beta):
            xt = torch.tensor(x, dtype=torch.float64)
            y = _gn_torch(xt, torch.tensor(gamma, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64),
                          g, eps, nhwc)
            grouped = (xt.movedim(-1, 1) if nhwc else xt).reshape(n, g, -1)
            mean = grouped.mean(-1)
            inv_std = 1 / torch.sqrt(grouped.var(-1, unbiased=False) + eps)
            return [y.numpy().astype(np.float32), mean.numpy().astype(np.float32),
                    inv_std.numpy().astype(np.float32)]

        self.assertReferenceChecks(CPU, op, [x, gamma, beta], ref, threshold=1e-4)
        dy = np.random.randn(*shape).astype(np.float32)
        want = _torch_grads(lambda a, b, c_: _gn_torch(a, b, c_, g, eps, nhwc), [x, gamma, beta], dy)
        ys = ref(x, gamma, beta)
        grad = core.CreateOperator("GroupNormGradient", ["dY", "X", "gamma", "beta", "mean", "inv_std"],
                                   ["dX", "dgamma", "dbeta"], group=g, order="NHWC" if nhwc else "NCHW")
        self.assertReferenceChecks(CPU, grad, [dy, x, gamma, beta, ys[1], ys[2]],
                                   lambda *a: [w.astype(np.float32) for w in want], threshold=1e-3)

    def test_gradient_maker_checks(self):
        x = np.random.randn(2, 4, 3, 3).astype(np.float32)
        gamma, beta = np.random.randn(4).astype(np.float32), np.random.randn(4).astype(np.float32)
        op = core.CreateOperator("GroupNorm", ["X", "gamma", "beta"], ["Y", "mean", "inv_std"], group=2)
        for i in range(3):
            self.assertGradientChecks(CPU, op, [x, gamma, beta], i, [0], threshold=0.01)

    def test_channels_not_a_multiple_of_group_raise(self):
        op = core.CreateOperator("GroupNorm", ["X", "gamma", "beta"], ["Y", "mean", "inv_std"], group=2)
        x = np.zeros((1, 3, 2, 2), np.float32)
        self._raises(op, [x, np.ones(3, np.float32), np.zeros(3, np.float32)], "not a multiple of group")


# ----------------------------------------------------------------- RMSNorm

class TestRMSNorm(OpTest):
    @settings(max_examples=15, deadline=None)
    @given(shape=st.sampled_from([(0, 4), (3, 5), (2, 3, 4)]), axis=st.sampled_from([1, -1]),
           eps=st.sampled_from([0.0, 1e-4]))
    def test_forward_and_gradient_match_torch(self, shape, axis, eps):
        x = np.random.randn(*shape).astype(np.float32) * 2 + 1
        norm_shape = shape[axis % len(shape):]
        gamma = np.random.randn(*norm_shape).astype(np.float32)
        beta = np.random.randn(*norm_shape).astype(np.float32)
        op = core.CreateOperator("RMSNorm", ["X", "gamma", "beta"], ["Y", "rrms"], axis=axis, eps=eps)

        def fn(x, gamma, beta):
            return F.rms_norm(x, norm_shape, gamma, eps) + beta

        def ref(x, gamma, beta):
            xt = torch.tensor(x, dtype=torch.float64)
            y = fn(xt, torch.tensor(gamma, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64))
            dims = tuple(range(axis % len(shape), len(shape)))
            rrms = 1 / torch.sqrt((xt * xt).mean(dims) + eps) if xt.numel() else torch.zeros(shape[:dims[0]])
            return [y.numpy().astype(np.float32), rrms.numpy().astype(np.float32)]

        self.assertReferenceChecks(CPU, op, [x, gamma, beta], ref, threshold=1e-4)
        if x.size:
            dy = np.random.randn(*shape).astype(np.float32)
            want = _torch_grads(fn, [x, gamma, beta], dy)
            grad = core.CreateOperator("RMSNormGradient", ["dY", "X", "gamma", "rrms"], ["dX", "dgamma", "dbeta"],
                                       axis=axis)
            rrms = ref(x, gamma, beta)[1]
            self.assertReferenceChecks(CPU, grad, [dy, x, gamma, rrms],
                                       lambda *a: [w.astype(np.float32) for w in want], threshold=1e-3)

    def test_gamma_of_wrong_size_raises(self):
        op = core.CreateOperator("RMSNorm", ["X", "gamma", "beta"], ["Y", "rrms"])
        self._raises(op, [np.ones((2, 3), np.float32), np.ones(2, np.float32), np.ones(3, np.float32)],
                     "one per normalised element")


# ----------------------------------------------------------------- C10LayerNorm alias

class TestC10LayerNorm(OpTest):
    def test_alias_matches_the_layer_norm_formula(self):
        x = np.random.randn(2, 3, 4).astype(np.float32)
        op = core.CreateOperator("C10LayerNorm_DontUseThisOpYet", ["X"], ["Y", "mean", "std"], axis=1,
                                 epsilon=1e-4)

        def ref(x):
            rows = x.reshape(2, -1).astype(np.float64)
            mean = rows.mean(1, keepdims=True)
            std = np.sqrt(rows.var(1, keepdims=True) + 1e-4)
            return [((rows - mean) / std).reshape(x.shape), mean, std]

        self.assertReferenceChecks(CPU, op, [x], ref, threshold=1e-4)


# ----------------------------------------------------------------- UpsampleBilinear

class TestUpsampleBilinear(OpTest):
    @settings(max_examples=15, deadline=None)
    @given(h=st.integers(1, 6), w=st.integers(1, 6), hs=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
           ws=st.sampled_from([1.0, 2.5, 4.0]), scales_input=st.booleans())
    def test_matches_torch_corner_aligned_interpolate(self, h, w, hs, ws, scales_input):
        x = np.random.rand(2, 3, h, w).astype(np.float32)
        oh, ow = int(h * hs), int(w * ws)
        if scales_input:
            op = core.CreateOperator("UpsampleBilinear", ["X", "scales"], ["Y"])
            inputs = [x, np.array([hs, ws], np.float32)]
        else:
            op = core.CreateOperator("UpsampleBilinear", ["X"], ["Y"], height_scale=hs, width_scale=ws)
            inputs = [x]

        def fn(t):
            return F.interpolate(t, size=(oh, ow), mode="bilinear", align_corners=True)

        self.assertReferenceChecks(CPU, op, inputs, lambda x, *s: [fn(torch.tensor(x)).numpy()], threshold=1e-4)
        dy = np.random.rand(2, 3, oh, ow).astype(np.float32)
        grad = core.CreateOperator("UpsampleBilinearGradient", ["dY", "X"], ["dX"], height_scale=hs,
                                   width_scale=ws)
        want = _torch_grads(fn, [x], dy)[0].astype(np.float32)
        self.assertReferenceChecks(CPU, grad, [dy, x], lambda *a: [want], threshold=1e-4)

    def test_three_d_input_raises(self):
        op = core.CreateOperator("UpsampleBilinear", ["X"], ["Y"], height_scale=2.0, width_scale=2.0)
        self._raises(op, [np.zeros((1, 2, 3), np.float32)], "4-D")


# ----------------------------------------------------------------- IntegralImage

class TestIntegralImage(OpTest):
    def test_prefix_sums_and_caffe2_gradient_rule(self):
        x = np.random.rand(2, 3, 4, 5).astype(np.float32)
        op = core.CreateOperator("IntegralImage", ["X"], ["Y"])

        def ref(x):
            y = np.zeros((2, 3, 5, 6), np.float32)
            for i in range(1, 5):
                for j in range(1, 6):
                    y[:, :, i, j] = x[:, :, :i, :j].sum(axis=(2, 3))
            return [y]

        self.assertReferenceChecks(CPU, op, [x], ref, threshold=1e-4)
        dy = np.random.rand(2, 3, 5, 6).astype(np.float32)

        def grad_ref(x, dy):
            dx = np.zeros_like(x)
            for i in range(4):
                for j in range(5):
                    dx[:, :, i, j] = dy[:, :, :i + 1, :j + 1].sum(axis=(2, 3))
            return [dx]

        grad = core.CreateOperator("IntegralImageGradient", ["X", "dY"], ["dX"])
        self.assertReferenceChecks(CPU, grad, [x, dy], grad_ref, threshold=1e-4)

    def test_mis_shaped_gradient_raises(self):
        grad = core.CreateOperator("IntegralImageGradient", ["X", "dY"], ["dX"])
        self._raises(grad, [np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), np.float32)],
                     "integral image")


# ----------------------------------------------------------------- CropAndResize

def _crop_ref(image, rois, ch, cw, method, extrapolation):
    """Per box and output pixel, written out from the formula in the op's doc."""
    n, c, h, w = image.shape
    out = np.zeros((rois.shape[0], c, ch, cw), np.float32)
    for k, (b, x1, y1, x2, y2) in enumerate(rois):
        for i in range(ch):
            sy = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (ch - 1) if ch > 1 else 0.5 * (y1 + y2) * (h - 1)
            for j in range(cw):
                sx = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (cw - 1) if cw > 1 else 0.5 * (x1 + x2) * (w - 1)
                if not (0 <= sy <= h - 1 and 0 <= sx <= w - 1):
                    out[k, :, i, j] = extrapolation
                elif method == 1:
                    out[k, :, i, j] = image[int(b), :, int(np.floor(sy + 0.5)), int(np.floor(sx + 0.5))]
                else:
                    y0, x0 = int(np.floor(sy)), int(np.floor(sx))
                    y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                    fy, fx = sy - y0, sx - x0
                    img = image[int(b)]
                    out[k, :, i, j] = ((1 - fy) * ((1 - fx) * img[:, y0, x0] + fx * img[:, y0, x1_])
                                       + fy * ((1 - fx) * img[:, y1_, x0] + fx * img[:, y1_, x1_]))
    return [out]


class TestCropAndResize(OpTest):
    @settings(max_examples=10, deadline=None)
    @given(ch=st.integers(1, 5), cw=st.integers(1, 5), method=st.sampled_from([0, 1]),
           extrapolation=st.sampled_from([0.0, -0.5]))
    def test_matches_formula_and_gradient(self, ch, cw, method, extrapolation):
        image = np.random.rand(2, 2, 5, 6).astype(np.float32)
        rois = np.random.uniform(-0.2, 1.2, size=(4, 5)).astype(np.float32)
        rois[:, 0] = [0, 1, 1, 0]
        op = core.CreateOperator("CropAndResize", ["image", "rois"], ["crops"], crop_height=ch, crop_width=cw,
                                 method=method, extrapolation_value=extrapolation)
        self.assertReferenceChecks(CPU, op, [image, rois],
                                   lambda i, r: _crop_ref(i, r, ch, cw, method, extrapolation), threshold=1e-4)
        if method == 0:
            self.assertGradientChecks(CPU, op, [image, rois], 0, [0], threshold=0.01)

    def test_rois_without_batch_column_raise(self):
        op = core.CreateOperator("CropAndResize", ["image", "rois"], ["crops"], crop_height=2, crop_width=2)
        self._raises(op, [np.zeros((1, 1, 3, 3), np.float32), np.zeros((1, 4), np.float32)], r"\[R, 5\]")


# ----------------------------------------------------------------- RoIAlignRotated

class TestRoIAlignRotated(OpTest):
    def test_zero_angle_equals_roi_align_and_quarter_turn_equals_rotated_map(self):
        x = np.random.randn(1, 2, 12, 12).astype(np.float32)
        rot = np.array([[0, 6.0, 5.5, 4.0, 3.0, 0.0]], np.float32)
        op = core.CreateOperator("RoIAlignRotated", ["X", "R"], ["Y"], pooled_h=3, pooled_w=3, sampling_ratio=2)
        ref = core.CreateOperator("RoIAlign", ["X", "R"], ["Y"], pooled_h=3, pooled_w=3, sampling_ratio=2)
        axis = np.array([[0, 4.0, 4.0, 8.0, 7.0]], np.float32)
        self.assertReferenceChecks(CPU, op, [x, rot], lambda x, r: self._run(ref, [x, axis]), threshold=1e-4)
        # a 90-degree counter-clockwise box on X reads the box unrotated on X turned clockwise
        turned = np.ascontiguousarray(np.rot90(x, k=-1, axes=(2, 3)))
        rot[0, 5] = 90.0
        cx, cy = rot[0, 1], rot[0, 2]
        ncx, ncy = 12 - cy - 1, cx
        axis = np.array([[0, ncx - 2.0, ncy - 1.5, ncx + 2.0, ncy + 1.5]], np.float32)
        self.assertReferenceChecks(CPU, op, [x, rot], lambda x, r: self._run(ref, [turned, axis]),
                                   threshold=1e-4)

    def _run(self, op, inputs):
        from caffe2.python import workspace
        for name, value in zip(op.input, inputs):
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(op)
        return [workspace.FetchBlob(op.output[0])]

    def test_gradient(self):
        x = np.random.randn(1, 1, 8, 8).astype(np.float32)
        r = np.array([[0, 4.0, 4.0, 4.0, 3.0, 30.0]], np.float32)
        op = core.CreateOperator("RoIAlignRotated", ["X", "R"], ["Y"], pooled_h=2, pooled_w=2, sampling_ratio=2)
        self.assertGradientChecks(CPU, op, [x, r], 0, [0], threshold=0.01)

    def test_batch_index_out_of_range_raises(self):
        op = core.CreateOperator("RoIAlignRotated", ["X", "R"], ["Y"], pooled_h=2, pooled_w=2)
        self._raises(op, [np.zeros((1, 1, 4, 4), np.float32), np.array([[3, 1, 1, 2, 2, 0]], np.float32)],
                     "batch index")


# ----------------------------------------------------------------- CTC decoders

def _greedy_ref(scores, lengths, merge):
    out_len, values = [], []
    for b in range(scores.shape[1]):
        prev, count = 0, 0
        for t in range(lengths[b]):
            k = int(np.argmax(scores[t, b]))
            if k != 0 and not (merge and k == prev):
                values.append(k)
                count += 1
            prev = k
        out_len.append(count)
    return [np.array(out_len, np.int32), np.array(values, np.int32)]


class TestCTCDecoders(OpTest):
    assert_shape_inference = False

    @settings(max_examples=10, deadline=None)
    @given(merge=st.booleans(), t=st.integers(1, 6), b=st.integers(1, 4), k=st.integers(2, 5))
    def test_greedy(self, merge, t, b, k):
        scores = np.random.rand(t, b, k).astype(np.float32)
        lengths = np.random.randint(0, t + 1, size=b).astype(np.int32)
        op = core.CreateOperator("CTCGreedyDecoder", ["X", "L"], ["len", "values"], merge_repeated=merge)
        self.assertReferenceChecks(CPU, op, [scores, lengths], lambda s, l: _greedy_ref(s, l, merge))

    def test_beam_search_best_path_of_two_steps(self):
        # p(a) over two steps, labels: "a" from aa, a-, -a; "" from --; "aa" impossible without a blank
        p = np.array([[[0.4, 0.6]], [[0.3, 0.7]]], np.float32)
        op = core.CreateOperator("CTCBeamSearchDecoder", ["X"], ["len", "values", "prob"], beam_width=4,
                                 num_candidates=2)
        pa = 0.6 * 0.7 + 0.6 * 0.3 + 0.4 * 0.7
        self.assertReferenceChecks(
            CPU, op, [p], lambda s: [np.array([1, 0], np.int32), np.array([1], np.int32),
                                     np.array([pa, 0.4 * 0.3], np.float32)])

    def test_lengths_beyond_max_time_raise(self):
        op = core.CreateOperator("CTCGreedyDecoder", ["X", "L"], ["len", "values"])
        self._raises(op, [np.zeros((2, 1, 3), np.float32), np.array([3], np.int32)], "lengths must lie")


def test_is_gpu_device_type_names_cuda_and_hip_only():
    # Caffe2's roi_align_rotated test asks core.IsGPUDeviceType before its GPU-only gradient check
    from caffe2.python import core as c2core
    from caffe2py.proto import caffe2_pb2
    assert c2core.IsGPUDeviceType(caffe2_pb2.PROTO_CUDA) and c2core.IsGPUDeviceType(caffe2_pb2.PROTO_HIP)
    assert not c2core.IsGPUDeviceType(caffe2_pb2.PROTO_CPU)


# ----------------------------------------------------------------- HeatmapMaxKeypoint

def _keypoint_ref(maps, boxes, softmax):
    """Per heatmap: argmax, a Newton step on the 3x3 quadratic fit (mirrored border, step
    clipped to 1.5, none when the Hessian's determinant is below 1e-4), mapped into the box."""
    n, k, s, _ = maps.shape
    out = np.zeros((n, 4, k))
    for i in range(n):
        x0, y0, x1, y1 = boxes[i].astype(np.float64)
        for j in range(k):
            f = maps[i, j].astype(np.float64)
            my, mx = divmod(int(np.argmax(f)), s)
            m = lambda v: v - 2 if v >= s else (v + 2 if v < 0 else v)  # noqa: E731
            g = np.array([[f[m(my + dy), m(mx + dx)] for dx in (-1, 0, 1)] for dy in (-1, 0, 1)])
            grad = np.array([(g[1, 2] - g[1, 0]) / 2, (g[2, 1] - g[0, 1]) / 2])
            hess = np.array([[g[1, 0] - 2 * g[1, 1] + g[1, 2], (g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / 4],
                             [(g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / 4, g[0, 1] - 2 * g[1, 1] + g[2, 1]]])
            if abs(np.linalg.det(hess)) < 1e-4:
                step, score = np.zeros(2), f.max()
            else:
                step = -np.linalg.solve(hess, grad)
                if np.abs(step).max() > 1.5:
                    step *= 1.5 / np.abs(step).max()
                score = g[1, 1] + grad @ step + 0.5 * step @ hess @ step
            p = np.exp(f - f.max())
            prob = (p.max() / p.sum()) if softmax else 0.0
            out[i, :, j] = [x0 + (mx + step[0] + 0.5) * max(x1 - x0, 1) / s,
                            y0 + (my + step[1] + 0.5) * max(y1 - y0, 1) / s, score, prob]
    return [out.astype(np.float32)]


class TestHeatmapMaxKeypoint(OpTest):
    @settings(max_examples=10, deadline=None)
    @given(softmax=st.booleans(), s=st.integers(2, 6), seed=st.integers(0, 1000))
    def test_matches_newton_refinement(self, softmax, s, seed):
        rng = np.random.RandomState(seed)
        maps = rng.randn(3, 2, s, s).astype(np.float32)
        boxes = np.sort((50 * rng.rand(3, 2, 2)).astype(np.float32), axis=1).transpose(0, 2, 1).reshape(3, 4)
        boxes = boxes[:, [0, 2, 1, 3]]
        op = core.CreateOperator("HeatmapMaxKeypoint", ["maps", "boxes"], ["kp"], should_output_softmax=softmax)
        self.assertReferenceChecks(CPU, op, [maps, boxes], lambda m, b: _keypoint_ref(m, b, softmax),
                                   threshold=1e-3)

    def test_non_square_heatmap_raises(self):
        op = core.CreateOperator("HeatmapMaxKeypoint", ["maps", "boxes"], ["kp"])
        self._raises(op, [np.zeros((1, 1, 3, 4), np.float32), np.zeros((1, 4), np.float32)], "square")
