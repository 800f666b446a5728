"""Caffe2's rank-named conv / pool aliases (Conv1D, Conv3D, AveragePool1D, AveragePool3D,
MaxPool3D) and ReduceBackMax with hypothesis_test_util, against N-d NumPy loops written
out here from Caffe2's definitions (NCHW, pads = [begins..., ends...], dilation, group;
AveragePool divides by the window's in-image count unless count_include_pad)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import itertools

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core, workspace  # noqa: F401
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=12, deadline=None)


def _out_size(size, k, s, pb, pe, d):
    return (size + pb + pe - (d * (k - 1) + 1)) // s + 1


def conv_ref(X, W, b, strides, pads, dilations, group):
    """Direct convolution: every output position sums over its (dilated) window."""
    n, c = X.shape[:2]
    m = W.shape[0]
    rank = X.ndim - 2
    ks = W.shape[2:]
    Xp = np.pad(X.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[rank + i]) for i in range(rank)])
    outs = [_out_size(X.shape[2 + i], ks[i], strides[i], pads[i], pads[rank + i], dilations[i]) for i in range(rank)]
    Y = np.zeros([n, m] + outs)
    cg, mg = c // group, m // group
    for pos in itertools.product(*[range(o) for o in outs]):
        for g in range(group):
            for kpos in itertools.product(*[range(k) for k in ks]):
                idx = tuple(pos[i] * strides[i] + kpos[i] * dilations[i] for i in range(rank))
                x = Xp[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]           # [n, cg]
                w = W[(slice(g * mg, (g + 1) * mg), slice(None)) + kpos]           # [mg, cg]
                Y[(slice(None), slice(g * mg, (g + 1) * mg)) + pos] += x @ w.T
    if b is not None:
        Y += b.reshape([1, m] + [1] * rank)
    return Y.astype(np.float32)


def pool_ref(X, kind, kernels, strides, pads, count_include_pad=False):
    rank = X.ndim - 2
    outs = [_out_size(X.shape[2 + i], kernels[i], strides[i], pads[i], pads[rank + i], 1) for i in range(rank)]
    Y = np.zeros(list(X.shape[:2]) + outs, np.float64)
    for pos in itertools.product(*[range(o) for o in outs]):
        lo = [pos[i] * strides[i] - pads[i] for i in range(rank)]
        hi = [min(lo[i] + kernels[i], X.shape[2 + i] + pads[rank + i]) for i in range(rank)]
        padded_count = int(np.prod([hi[i] - lo[i] for i in range(rank)]))
        lo_in = [max(v, 0) for v in lo]
        hi_in = [min(hi[i], X.shape[2 + i]) for i in range(rank)]
        window = X[(slice(None), slice(None)) + tuple(slice(a, z) for a, z in zip(lo_in, hi_in))]
        window = window.reshape(X.shape[0], X.shape[1], -1).astype(np.float64)
        if kind == "max":
            Y[(slice(None), slice(None)) + pos] = window.max(axis=2)
        else:
            count = padded_count if count_include_pad else window.shape[2]
            Y[(slice(None), slice(None)) + pos] = window.sum(axis=2) / count
    return Y.astype(np.float32)


@st.composite
def _conv_case(draw, rank):
    group = draw(st.sampled_from([1, 2]))
    c = group * draw(st.integers(1, 2))
    m = group * draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(rank)]
    dil = [draw(st.integers(1, 2)) for _ in range(rank)]
    strides = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [draw(st.integers(0, 1)) for _ in range(2 * rank)]
    # every spatial dim at least as long as its dilated kernel (padding included)
    sizes = [draw(st.integers(max(1, dil[i] * (ks[i] - 1) + 1 - pads[i] - pads[rank + i]), 5)) for i in range(rank)]
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 999)))
    X = rng.standard_normal([n, c] + sizes).astype(np.float32)
    W = rng.standard_normal([m, c // group] + ks).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return X, W, b, strides, pads, dil, group


class TestConvAliases(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(case=_conv_case(1), bias=st.booleans(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_conv1d(self, case, bias, gc, dc):
        X, W, b, strides, pads, dil, group = case
        op = core.CreateOperator("Conv1D", ["X", "W", "b"] if bias else ["X", "W"], ["Y"],
                                 strides=strides, pads=pads, dilations=dil, group=group)
        inputs = [X, W, b] if bias else [X, W]
        self.assertReferenceChecks(gc, op, inputs,
                                   lambda X, W, *b: (conv_ref(X, W, b[0] if b else None, strides, pads, dil, group),),
                                   threshold=1e-3)

    @given(case=_conv_case(3), **hu.gcs_cpu_only)
    @SETTINGS
    def test_conv3d(self, case, gc, dc):
        X, W, b, strides, pads, dil, group = case
        op = core.CreateOperator("Conv3D", ["X", "W", "b"], ["Y"], strides=strides, pads=pads,
                                 dilations=dil, group=group)
        self.assertReferenceChecks(gc, op, [X, W, b],
                                   lambda X, W, b: (conv_ref(X, W, b, strides, pads, dil, group),),
                                   threshold=1e-3)

    def test_conv1d_nhwc(self):
        rng = np.random.default_rng(3)
        X = rng.standard_normal((2, 6, 3)).astype(np.float32)        # N, W, C
        W = rng.standard_normal((4, 2, 3)).astype(np.float32)        # M, kW, C
        op = core.CreateOperator("Conv1D", ["X", "W"], ["Y"], kernel=2, pad=1, order="NHWC")
        ref = conv_ref(X.transpose(0, 2, 1), W.transpose(0, 2, 1), None, [1], [1, 1], [1], 1).transpose(0, 2, 1)
        self.assertReferenceChecks(hu.cpu_do, op, [X, W], lambda X, W: (ref,), threshold=1e-3)

    def test_conv3d_gradient(self):
        rng = np.random.default_rng(4)
        X = rng.standard_normal((1, 2, 3, 3, 2)).astype(np.float32)
        W = rng.standard_normal((2, 2, 2, 2, 1)).astype(np.float32)
        b = rng.standard_normal(2).astype(np.float32)
        op = core.CreateOperator("Conv3D", ["X", "W", "b"], ["Y"], pads=[1, 0, 0, 0, 1, 0])
        for i in range(3):
            self.assertGradientChecks(hu.cpu_do, op, [X, W, b], i, [0])

    def test_conv1d_gradient(self):
        rng = np.random.default_rng(8)
        X = rng.standard_normal((2, 2, 5)).astype(np.float32)
        W = rng.standard_normal((4, 1, 2)).astype(np.float32)
        op = core.CreateOperator("Conv1D", ["X", "W"], ["Y"], kernel=2, stride=2, pads=[1, 0], group=2)
        for i in range(2):
            self.assertGradientChecks(hu.cpu_do, op, [X, W], i, [0])

    def test_conv1d_channel_mismatch_is_named(self):
        X = np.ones((1, 3, 5), np.float32)
        W = np.ones((2, 2, 2), np.float32)
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Conv1D", ["X", "W"], ["Y"]), [X, W],
                               exception=Caffe2Error, regexp="Conv1D")


@st.composite
def _pool_case(draw, rank):
    ks = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [draw(st.integers(0, k - 1)) for k in ks] + [draw(st.integers(0, k - 1)) for k in ks]
    sizes = [draw(st.integers(max(1, ks[i] - pads[i] - pads[rank + i]), 5)) for i in range(rank)]
    rng = np.random.default_rng(draw(st.integers(0, 999)))
    X = rng.standard_normal([draw(st.integers(1, 2)), draw(st.integers(1, 3))] + sizes).astype(np.float32)
    return X, ks, strides, pads


class TestPoolAliases(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(case=_pool_case(1), include=st.booleans(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_average_pool1d(self, case, include, gc, dc):
        X, ks, strides, pads = case
        op = core.CreateOperator("AveragePool1D", ["X"], ["Y"], kernels=ks, strides=strides, pads=pads,
                                 count_include_pad=int(include))
        self.assertReferenceChecks(gc, op, [X], lambda X: (pool_ref(X, "avg", ks, strides, pads, include),))

    @given(case=_pool_case(3), include=st.booleans(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_average_pool3d(self, case, include, gc, dc):
        X, ks, strides, pads = case
        op = core.CreateOperator("AveragePool3D", ["X"], ["Y"], kernels=ks, strides=strides, pads=pads,
                                 count_include_pad=int(include))
        self.assertReferenceChecks(gc, op, [X], lambda X: (pool_ref(X, "avg", ks, strides, pads, include),))

    @given(case=_pool_case(3), **hu.gcs_cpu_only)
    @SETTINGS
    def test_max_pool3d(self, case, gc, dc):
        X, ks, strides, pads = case
        op = core.CreateOperator("MaxPool3D", ["X"], ["Y"], kernels=ks, strides=strides, pads=pads)
        self.assertReferenceChecks(gc, op, [X], lambda X: (pool_ref(X, "max", ks, strides, pads),))

    def test_global_pool3d(self):
        X = np.random.default_rng(5).standard_normal((2, 3, 2, 3, 4)).astype(np.float32)
        for op_type, ref in (("MaxPool3D", X.max(axis=(2, 3, 4), keepdims=True)),
                             ("AveragePool3D", X.mean(axis=(2, 3, 4), keepdims=True))):
            op = core.CreateOperator(op_type, ["X"], ["Y"], global_pooling=1)
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X, ref=ref: (ref,))

    def test_pool_gradients(self):
        # values far apart so finite differences never move the max
        X = (np.random.default_rng(6).permutation(24).astype(np.float32) * 0.4).reshape(1, 2, 2, 3, 2)
        for op_type in ("MaxPool3D", "AveragePool3D"):
            op = core.CreateOperator(op_type, ["X"], ["Y"], kernel=2, stride=1, pads=[0, 1, 0, 0, 0, 1])
            self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])
        X1 = X.reshape(1, 2, 12)
        op = core.CreateOperator("AveragePool1D", ["X"], ["Y"], kernel=3, stride=2, pad=1)
        self.assertGradientChecks(hu.cpu_do, op, [X1], 0, [0])


class TestReduceBackMax(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), num=st.integers(0, 4), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_reduce_back_max(self, shape, num, seed, gc, dc):
        num = min(num, len(shape))
        X = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) - 2.0   # all-negative rows too
        op = core.CreateOperator("ReduceBackMax", ["X"], ["Y"], num_reduce_dim=num)
        axes = tuple(range(len(shape) - num, len(shape)))
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.max(X, axis=axes) if axes else X,))

    @given(rows=st.integers(1, 4), cols=st.integers(1, 5), seed=st.integers(0, 99), **hu.gcs_cpu_only)
    @SETTINGS
    def test_with_lengths(self, rows, cols, seed, gc, dc):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((rows, cols)).astype(np.float32)
        L = rng.integers(1, cols + 1, rows).astype(np.int32)
        op = core.CreateOperator("ReduceBackMax", ["X", "L"], ["Y"])
        self.assertReferenceChecks(gc, op, [X, L],
                                   lambda X, L: (np.array([X[i, :L[i]].max() for i in range(rows)], np.float32),))

    def test_gradient(self):
        X = (np.random.default_rng(7).permutation(12).astype(np.float32) * 0.3).reshape(3, 4)
        op = core.CreateOperator("ReduceBackMax", ["X"], ["Y"])
        self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])

    def test_too_many_dims_is_named(self):
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("ReduceBackMax", ["X"], ["Y"], num_reduce_dim=3),
                               [np.ones((2, 3), np.float32)], exception=Caffe2Error,
                               regexp="num_reduce_dim 3 is out of range")
