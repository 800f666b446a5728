"""ResizeNearest, Im2Col / Col2Im and RMACRegions against loop references written here,
and the NumPy twins of the detection kernels against the compiled kernels."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.runtime import jit

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


def resize_reference(x, hs, ws, nhwc):
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    oh, ow = int(np.float32(h) * np.float32(hs)), int(np.float32(w) * np.float32(ws))
    y = np.zeros((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = x[:, :, min(int(np.float32(i) / np.float32(hs)), h - 1),
                              min(int(np.float32(j) / np.float32(ws)), w - 1)]
    return y.transpose(0, 2, 3, 1) if nhwc else y


def im2col_reference(x, k, d, s, p, nhwc):
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - (d[0] * (k[0] - 1) + 1)) // s[0] + 1, (w + 2 * p - (d[1] * (k[1] - 1) + 1)) // s[1] + 1
    cols = np.zeros((n, c, k[0], k[1], oh, ow), x.dtype)
    for ci in range(c):
        for i in range(k[0]):
            for j in range(k[1]):
                for y in range(oh):
                    for z in range(ow):
                        yy, zz = y * s[0] - p + i * d[0], z * s[1] - p + j * d[1]
                        if 0 <= yy < h and 0 <= zz < w:
                            cols[:, ci, i, j, y, z] = x[:, ci, yy, zz]
    if nhwc:
        return cols.transpose(0, 4, 5, 2, 3, 1).reshape(n, oh, ow, -1)
    return cols.reshape(n, c * k[0] * k[1], oh, ow)


class TestImageOps(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 6), w=st.integers(1, 6),
           hs=st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]), ws=st.sampled_from([0.6, 1.0, 2.0, 2.5]),
           nhwc=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_resize_nearest(self, n, c, h, w, hs, ws, nhwc, seed):
        x = np.random.default_rng(seed).standard_normal((n, h, w, c) if nhwc else (n, c, h, w)).astype(np.float32)
        op = core.CreateOperator("ResizeNearest", ["X"], ["Y"], height_scale=hs, width_scale=ws,
                                 order="NHWC" if nhwc else "NCHW")
        self.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: [resize_reference(x, hs, ws, nhwc)])
        op2 = core.CreateOperator("ResizeNearest", ["X", "scales"], ["Y"], order="NHWC" if nhwc else "NCHW")
        (y,) = run_op(op2, [x, np.array([hs, ws], np.float32)])
        np.testing.assert_array_equal(y, resize_reference(x, hs, ws, nhwc))

    @given(hs=st.sampled_from([0.5, 1.0, 2.0, 3.0]), ws=st.sampled_from([0.5, 2.0, 2.5]), nhwc=st.booleans())
    @settings(max_examples=5, deadline=None, derandomize=True)
    def test_resize_nearest_gradient(self, hs, ws, nhwc):
        x = np.random.default_rng(1).standard_normal((1, 3, 4, 2) if nhwc else (1, 2, 3, 4)).astype(np.float32)
        op = core.CreateOperator("ResizeNearest", ["X"], ["Y"], height_scale=hs, width_scale=ws,
                                 order="NHWC" if nhwc else "NCHW")
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])

    @given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(3, 6), w=st.integers(3, 6),
           k=st.tuples(st.integers(1, 3), st.integers(1, 3)), d=st.tuples(st.integers(1, 2), st.integers(1, 2)),
           s=st.tuples(st.integers(1, 2), st.integers(1, 2)), p=st.integers(0, 1), nhwc=st.booleans(),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_im2col_and_col2im(self, n, c, h, w, k, d, s, p, nhwc, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, h, w, c) if nhwc else (n, c, h, w)).astype(np.float32)
        if h < d[0] * (k[0] - 1) + 1 or w < d[1] * (k[1] - 1) + 1:
            return
        args = dict(kernel_h=k[0], kernel_w=k[1], dilation_h=d[0], dilation_w=d[1], stride_h=s[0],
                    stride_w=s[1], pad=p, order="NHWC" if nhwc else "NCHW")
        op = core.CreateOperator("Im2Col", ["X"], ["Y"], **args)
        (cols,) = self.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: [im2col_reference(x, k, d, s, p, nhwc)])
        # Col2Im is Im2Col's adjoint: <im2col(x), y> == <x, col2im(y)>
        y = rng.standard_normal(cols.shape).astype(np.float32)
        back = core.CreateOperator("Col2Im", ["C", "X"], ["Z"], **args)
        (z,) = run_op(back, [y, x])
        self.assertEqual(z.shape, x.shape)
        np.testing.assert_allclose(np.vdot(cols.astype(np.float64), y), np.vdot(x.astype(np.float64), z),
                                   rtol=1e-4, atol=1e-3)

    def test_im2col_gradient_is_col2im(self):
        x = np.random.default_rng(2).standard_normal((1, 2, 4, 5)).astype(np.float32)
        op = core.CreateOperator("Im2Col", ["X"], ["Y"], kernel=2, stride=1, pad=1)
        self.assertGradientChecks(hu.cpu_do, op, [x], 0, [0])

    def test_im2col_refuses_a_kernel_larger_than_the_image(self):
        op = core.CreateOperator("Im2Col", ["X"], ["Y"], kernel=4)
        self.assertRunOpRaises(hu.cpu_do, op, [np.ones((1, 1, 3, 3), np.float32)], exception=Caffe2Error,
                               regexp="does not fit")
        with self.assertRaisesRegex(Caffe2Error, "kernel must be positive"):
            run_op(core.CreateOperator("Im2Col", ["X"], ["Y"]), [np.ones((1, 1, 3, 3), np.float32)])

    @given(n=st.integers(1, 2), h=st.integers(1, 40), w=st.integers(1, 40), scales=st.integers(1, 4),
           overlap=st.sampled_from([0.4, 0.2, 0.6]))
    @SETTINGS
    def test_rmac_regions(self, n, h, w, scales, overlap):
        def reference(x):
            _, _, H, W = x.shape
            m = min(H, W)
            step = 0
            if H != W:
                # as Caffe2: b rounded to float32, the error in double with the float32 overlap,
                # then rounded to float32; the first smallest wins
                bs = np.float32((max(H, W) - m) / np.arange(1.0, 7.0)).astype(np.float64)
                errors = np.float32(np.abs((m * m - m * bs) / (m * m) - np.float64(np.float32(overlap))))
                step = 1 + int(np.argmin(errors))
            wd, hd = (step, 0) if W > H else ((0, step) if H > W else (0, 0))
            regions = []
            for lvl in range(1, scales + 1):
                size = 2 * m // (lvl + 1)
                if size == 0:
                    break
                bw = (W - size) / (lvl + wd - 1) if lvl + wd > 1 else 0.0
                bh = (H - size) / (lvl + hd - 1) if lvl + hd > 1 else 0.0
                for i in range(lvl + wd):
                    for j in range(lvl + hd):
                        x1, y1 = min(int(bw * i), W - size), min(int(bh * j), H - size)
                        regions.append([x1, y1, x1 + size - 1, y1 + size - 1])
            regions = np.array(regions, np.float32).reshape(-1, 4)
            return [np.concatenate([np.repeat(np.arange(n), len(regions))[:, None],
                                    np.tile(regions, (n, 1))], 1).astype(np.float32)]
        op = core.CreateOperator("RMACRegions", ["X"], ["R"], scales=scales, overlap=overlap)
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros((n, 2, h, w), np.float32)], reference)

    def test_rmac_regions_breaks_a_float_tie_as_caffe2(self):
        # H=5, W=9, overlap 0.4: 1 and 2 steps are equally good in exact arithmetic (error 0.2);
        # Caffe2's double-then-float rounding picks 2 steps, so 3 regions along W at x = 0, 2, 4
        op = core.CreateOperator("RMACRegions", ["X"], ["R"], scales=1, overlap=0.4)
        (r,) = run_op(op, [np.zeros((1, 1, 5, 9), np.float32)])
        np.testing.assert_array_equal(r, np.float32([[0, 0, 0, 4, 4], [0, 2, 0, 6, 4], [0, 4, 0, 8, 4]]))

    def test_rmac_regions_of_an_empty_input(self):
        (r,) = run_op(core.CreateOperator("RMACRegions", ["X"], ["R"]), [np.zeros((0, 3, 4, 4), np.float32)])
        self.assertEqual(r.shape, (0, 5))


@pytest.fixture
def numpy_then_inline():
    before = jit.jit_mode()
    yield
    jit.set_jit_mode(before)


def test_detection_twins_agree_with_the_compiled_kernels(numpy_then_inline):
    """Every detection kernel's NumPy twin (what first runs use while the kernel
    compiles) gives the compiled kernel's results."""
    from caffe2py.kernels.cpu.detection import nms, roi_align, roi_pool
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    xy = rng.uniform(-3, 10, (6, 2))
    rois = np.concatenate([rng.integers(0, 2, (6, 1)), xy, xy + rng.uniform(0, 8, (6, 2))], 1).astype(np.float32)
    up = np.concatenate([xy, xy + rng.uniform(1, 8, (6, 2))], 1).astype(np.float32)
    rot = np.concatenate([xy, rng.uniform(2, 8, (6, 2)), rng.uniform(-90, 90, (6, 1))], 1).astype(np.float32)
    scores = rng.uniform(0, 1, 6).astype(np.float32)
    starts = np.array([0, 4, 6])

    def everything():
        out = []
        for aligned in (False, True):
            for nhwc in (False, True):
                xi = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc else x
                y = roi_align.roi_align(xi, rois, 0.5, 2, 3, 0, aligned, nhwc)
                out += [y, roi_align.roi_align_gradient(xi.shape, rois, y, 0.5, 2, 3, 0, aligned, nhwc)]
        out += list(roi_pool.roi_pool(x, rois, 0.5, 2, 2))
        for b in (up, rot):
            out += list(nms.nms_segments(b, starts, 0.3, 1.0))
            out += list(nms.soft_nms_segments(b, scores, starts, 0.5, 0.3, 0.01, 1, 1.0))
            out += list(nms.soft_nms_segments(b, scores, starts, 0.5, 0.3, 0.01, 2, 1.0))
        return out
    jit.set_jit_mode("inline")
    compiled = everything()
    jit.set_jit_mode("numpy")
    twins = everything()
    for a, b in zip(compiled, twins):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
