"""Caffe2's selection, normalisation and row-similarity ops (operators/math/caffe2_select.py,
caffe2_norm.py, caffe2_distance.py) with hypothesis_test_util, against NumPy references
written out here (and torch where it is installed), through the caffe2.python aliases."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

from _caffe2_op_helpers import floats_tensor, spread


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)


# ----------------------------------------------------------------- ArgMax / ArgMin / TopK

def _topk_ref(X, k, axis):
    """Per line along axis: indices sorted by value descending, then index ascending."""
    Xm = np.moveaxis(X, axis, -1)
    n = Xm.shape[-1]
    values = np.zeros(Xm.shape[:-1] + (k,), X.dtype)
    indices = -np.ones(Xm.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(*Xm.shape[:-1]):
        line = Xm[pos]
        order = sorted(range(n), key=lambda i: (-line[i], i))[:k]
        values[pos][:len(order)] = line[order]
        indices[pos][:len(order)] = order
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


class TestSelect(OpTest):
    @given(X=hu.tensor(min_dim=1, max_dim=3, elements=st.integers(-3, 3).map(float)), largest=st.booleans(),
           keepdims=st.booleans(), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_arg_max_min(self, X, largest, keepdims, data, gc, dc):
        axis = data.draw(st.integers(-1, X.ndim - 1))
        op = core.CreateOperator("ArgMax" if largest else "ArgMin", ["X"], ["I"], axis=axis, keepdims=keepdims)

        def ref(X):
            a = X.ndim - 1 if axis == -1 else axis
            Xm = np.moveaxis(X, a, -1)
            best = np.zeros(Xm.shape[:-1], np.int64)
            for pos in np.ndindex(*Xm.shape[:-1]):          # first index of the extreme value
                line = list(Xm[pos])
                best[pos] = line.index(max(line) if largest else min(line))
            return (np.expand_dims(best, a) if keepdims else best,)
        self.assertReferenceChecks(gc, op, [X], ref)

    @given(X=hu.tensor(min_dim=1, max_dim=3, elements=st.integers(-3, 3).map(float)), data=st.data(),
           flat=st.booleans(), k_input=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_top_k(self, X, data, flat, k_input, gc, dc):
        axis = data.draw(st.integers(-1, X.ndim - 1))
        a = X.ndim - 1 if axis == -1 else axis
        k = data.draw(st.integers(1, X.shape[a] + 2))          # past the dim: padded
        outputs = ["V", "I", "F"] if flat else ["V", "I"]
        if k_input:
            op = core.CreateOperator("TopK", ["X", "k"], outputs, axis=axis)
            inputs = [X, np.array(k, np.int64)]
        else:
            op = core.CreateOperator("TopK", ["X"], outputs, k=k, axis=axis)
            inputs = [X]
        self.assert_shape_inference = not k_input       # k from an input: values, not known statically

        def ref(X, *unused):
            values, indices = _topk_ref(X, k, a)
            if not flat:
                return values, indices
            positions = np.full(indices.shape, -1, np.int64)
            for pos in np.ndindex(*indices.shape):
                if indices[pos] >= 0:
                    src = list(pos)
                    src[a] = indices[pos]
                    positions[pos] = np.ravel_multi_index(src, X.shape)
            return values, indices, positions.reshape(-1)
        self.assertReferenceChecks(gc, op, inputs, ref)

    def test_top_k_of_long_rows_with_ties(self):
        # k well below the row length takes the partition path: ties at the k-th value by index
        X = np.random.RandomState(5).randint(-4, 5, size=(6, 200)).astype(np.float32)
        X[1] = 1.0
        for k in (1, 7, 30):
            op = core.CreateOperator("TopK", ["X"], ["V", "I"], k=k)
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: _topk_ref(X, k, 1))
        X[2, 3] = np.nan                                          # NaN ranks highest
        op = core.CreateOperator("TopK", ["X"], ["V", "I"], k=3)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (_topk_ref(np.nan_to_num(X, nan=99), 3, 1)[1],),
                                   outputs_to_check=[1])

    def test_top_k_gradient(self):
        X = np.array([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0]], np.float32)
        dV = np.array([[10.0, 20.0, 30.0, 40.0], [50.0, 60.0, 70.0, 80.0]], np.float32)
        I = np.array([[2, 0, 1, -1], [2, 1, 0, -1]], np.int64)          # -1: TopK's padding
        op = core.CreateOperator("TopKGradient", ["dV", "I", "X"], ["dX"])
        self.assertReferenceChecks(hu.cpu_do, op, [dV, I, X],
                                   lambda dV, I, X: (np.array([[20, 30, 10], [70, 60, 50]], np.float32),))

    def test_top_k_gradient_checks(self):
        X = spread(3, 5, seed=4)
        for k, axis in ((1, -1), (3, 1), (2, 0), (7, 1)):             # k past the dim: padded entries
            op = core.CreateOperator("TopK", ["X"], ["V", "I"], k=k, axis=axis)
            self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        self._raises(core.CreateOperator("ArgMax", ["X"], ["I"], axis=2), [X],
                     r"blob 'X': axis 2 is out of range for a 2-D input \(valid: -1 and \[0, 1\]\)")
        self._raises(core.CreateOperator("ArgMin", ["X"], ["I"], axis=-2), [X], "axis -2 is out of range")
        self._raises(core.CreateOperator("TopK", ["X"], ["V", "I"], k=0), [X], "k must be >= 1")
        self._raises(core.CreateOperator("TopK", ["X"], ["V", "I"]), [X], "k must be >= 1")
        self._raises(core.CreateOperator("TopK", ["X", "k"], ["V", "I"], k=2), [X, np.array(2)],
                     "k is given both as argument")
        self._raises(core.CreateOperator("TopK", ["X", "k"], ["V", "I"]), [X, np.array([1, 2])],
                     "blob 'k': k must be one integer")
        self._raises(core.CreateOperator("TopK", ["X"], ["V", "I"], k=1, axis=5), [X], "axis 5 is out of range")
        self._raises(core.CreateOperator("TopKGradient", ["dV", "I", "X"], ["dX"]),
                     [np.ones((2, 1), np.float32), np.array([[3], [0]]), X], "index 3 is out of range")


# ----------------------------------------------------------------- LayerNorm

def _layer_norm_ref(X, axis, eps, gamma=None, beta=None):
    a = axis % X.ndim
    M = X.reshape(int(np.prod(X.shape[:a])), -1).astype(np.float64)
    mean = M.mean(axis=1, keepdims=True)
    std = np.sqrt(((M - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    Y = (M - mean) / std
    if gamma is not None:
        Y = Y * gamma.reshape(1, -1) + beta.reshape(1, -1)
    stats = X.shape[:a] + (1,)
    return (Y.reshape(X.shape).astype(X.dtype), mean.reshape(stats).astype(X.dtype),
            std.reshape(stats).astype(X.dtype))


class TestLayerNorm(OpTest):
    @given(X=floats_tensor(min_dim=2, max_dim=4), affine=st.booleans(), eps=st.sampled_from([None, 1e-3]),
           data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_layer_norm(self, X, affine, eps, data, gc, dc):
        axis = data.draw(st.integers(-X.ndim, X.ndim - 1))
        args = {"axis": axis, "elementwise_affine": affine}
        if eps is not None:
            args["epsilon"] = eps
        n = int(np.prod(X.shape[axis % X.ndim:]))
        rng = np.random.RandomState(n)
        inputs = [X] + ([rng.randn(n).astype(np.float32), rng.randn(n).astype(np.float32)] if affine else [])
        op = core.CreateOperator("LayerNorm", ["X", "g", "b"][:len(inputs)], ["Y", "mean", "std"], **args)
        self.assertReferenceChecks(gc, op, inputs, lambda X, *gb: _layer_norm_ref(X, axis, eps or 1e-5, *gb),
                                   threshold=1e-3)

    def test_matches_torch(self):
        torch = pytest.importorskip("torch")
        X = np.random.RandomState(0).randn(3, 4, 5).astype(np.float32)
        g, b = np.random.RandomState(1).randn(2, 20).astype(np.float32)
        op = core.CreateOperator("LayerNorm", ["X", "g", "b"], ["Y", "m", "s"], elementwise_affine=1)
        want = torch.nn.functional.layer_norm(torch.tensor(X), (4, 5), torch.tensor(g).reshape(4, 5),
                                              torch.tensor(b).reshape(4, 5), eps=1e-5).numpy()
        self.assertReferenceChecks(hu.cpu_do, op, [X, g, b], lambda *a: (want,), outputs_to_check=[0])

    @given(X=floats_tensor(min_dim=2, max_dim=3), affine=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_gradient_op_matches_torch(self, X, affine, gc, dc):
        torch = pytest.importorskip("torch")
        n = int(np.prod(X.shape[1:]))
        rng = np.random.RandomState(n)
        gamma = rng.randn(n).astype(np.float32)
        beta = rng.randn(n).astype(np.float32)
        dY = rng.randn(*X.shape).astype(np.float32)
        Y, mean, std = _layer_norm_ref(X, 1, 1e-5, *((gamma, beta) if affine else ()))
        xt = torch.tensor(X.astype(np.float64), requires_grad=True)
        gt = torch.tensor(gamma.astype(np.float64), requires_grad=True)
        bt = torch.tensor(beta.astype(np.float64), requires_grad=True)
        out = torch.nn.functional.layer_norm(xt, X.shape[1:], gt.reshape(X.shape[1:]) if affine else None,
                                             bt.reshape(X.shape[1:]) if affine else None, eps=1e-5)
        out.backward(torch.tensor(dY.astype(np.float64)))
        names = ["dY", "Y", "mean", "std", "X"] + (["g"] if affine else [])
        inputs = [dY, Y, mean, std, X] + ([gamma] if affine else [])
        want = [xt.grad.numpy()] + ([gt.grad.numpy(), bt.grad.numpy()] if affine else [])
        op = core.CreateOperator("LayerNormGradient", names, ["dX", "dg", "db"][:len(want)], elementwise_affine=affine)
        self.assertReferenceChecks(gc, op, inputs, lambda *a: tuple(w.astype(np.float32) for w in want),
                                   threshold=1e-3, atol=1e-3)

    def test_gradient_checks(self):
        X = np.random.RandomState(5).randn(3, 4).astype(np.float32)      # rows far from constant
        g, b = np.random.RandomState(6).randn(2, 4).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("LayerNorm", ["X"], ["Y", "m", "s"]), [X], 0, [0])
        op = core.CreateOperator("LayerNorm", ["X", "g", "b"], ["Y", "m", "s"], elementwise_affine=1)
        for i in range(3):
            self.assertGradientChecks(hu.cpu_do, op, [X, g, b], i, [0], threshold=0.01)

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        self._raises(core.CreateOperator("LayerNorm", ["X"], ["Y", "m", "s"]), [np.ones(3, np.float32)],
                     "LayerNorm needs an input of at least 2 dims")
        self._raises(core.CreateOperator("LayerNorm", ["X"], ["Y", "m", "s"], axis=2), [X],
                     r"axis 2 is out of range for a 2-D input \(valid: \[-2, 1\]\)")
        self._raises(core.CreateOperator("LayerNorm", ["X"], ["Y", "m", "s"], elementwise_affine=1), [X],
                     "with elementwise_affine=1 this op takes 3 inputs, got 1")
        self._raises(core.CreateOperator("LayerNorm", ["X", "g", "b"], ["Y", "m", "s"], elementwise_affine=1),
                     [X, np.ones(2, np.float32), np.ones(3, np.float32)],
                     r"blob 'g': has 2 values; elementwise_affine needs one per normalised element \(3")


# ----------------------------------------------------------------- Normalize / NormalizeL1 / YUV / Clip

class TestNormalize(OpTest):
    @given(X=floats_tensor(min_dim=1, max_dim=3), l1=st.booleans(), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_normalize(self, X, l1, data, gc, dc):
        axis = data.draw(st.integers(-X.ndim, X.ndim - 1))
        X = X.copy()
        X.reshape(-1)[::3] = 0                                    # some all-zero vectors, too
        op = core.CreateOperator("NormalizeL1" if l1 else "Normalize", ["X"], ["Y"], axis=axis)

        def ref(X):
            X64 = X.astype(np.float64)
            if l1:
                norm = np.abs(X64).sum(axis=axis, keepdims=True)
                return (np.where(norm == 0, 0, X64 / np.where(norm == 0, 1, norm)).astype(X.dtype),)
            norm = np.maximum(np.sqrt((X64 ** 2).sum(axis=axis, keepdims=True)), 1e-12)
            return ((X64 / norm).astype(X.dtype),)
        self.assertReferenceChecks(gc, op, [X], ref)

    @given(X=floats_tensor(0.5, 2, min_dim=2, max_dim=3), **hu.gcs_cpu_only)
    @settings(max_examples=8)
    def test_normalize_gradient(self, X, gc, dc):
        dY = np.random.RandomState(1).randn(*X.shape).astype(np.float32)
        op = core.CreateOperator("NormalizeGradient", ["X", "dY"], ["dX"], axis=1)

        def ref(X, dY):       # d(x / |x|) = dy / |x| - x (x . dy) / |x|^3
            X64, d = X.astype(np.float64), dY.astype(np.float64)
            n = np.sqrt((X64 ** 2).sum(axis=1, keepdims=True))
            return ((d / n - X64 * (X64 * d).sum(axis=1, keepdims=True) / n ** 3).astype(np.float32),)
        self.assertReferenceChecks(gc, op, [X, dY], ref, threshold=1e-3)

    def test_normalize_gradient_checks(self):
        X = spread(3, 4, seed=7)
        for axis in (-1, 0):
            op = core.CreateOperator("Normalize", ["X"], ["Y"], axis=axis)
            self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])

    @given(X=floats_tensor(min_dim=4, max_dim=4), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_normalize_planar_yuv(self, X, inplace, gc, dc):
        c = X.shape[1]
        M = np.arange(c, dtype=np.float32).reshape(1, c)
        S = (np.arange(c, dtype=np.float32) + 0.5).reshape(1, c)
        op = core.CreateOperator("NormalizePlanarYUV", ["X", "M", "S"], ["X" if inplace else "Y"])
        self.assertReferenceChecks(gc, op, [X, M, S], lambda X, M, S: (
            ((X - M.reshape(1, c, 1, 1)) / S.reshape(1, c, 1, 1)).astype(np.float32),))

    @given(X=floats_tensor(min_dim=1, max_dim=3), val=st.floats(0.1, 10), threshold=st.floats(0.1, 10),
           extra=st.sampled_from([None, 0.5, 2.0]), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_clip_tensor_by_scaling(self, X, val, threshold, extra, gc, dc):
        inputs = [X, np.array([val], np.float32)] + ([np.array([extra], np.float32)] if extra else [])
        op = core.CreateOperator("ClipTensorByScaling", ["X", "v", "e"][:len(inputs)], ["Y"], threshold=threshold)

        def ref(X, v, *e):
            limit = np.float32(threshold) * (np.float32(extra) if extra else 1)
            v = np.float32(val)
            return ((X * (limit / v)).astype(np.float32) if v > limit else X,)
        self.assertReferenceChecks(gc, op, inputs, ref)

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        self._raises(core.CreateOperator("Normalize", ["X"], ["Y"], axis=2), [X], "axis 2 is out of range")
        self._raises(core.CreateOperator("NormalizePlanarYUV", ["X", "M", "S"], ["Y"]),
                     [np.ones((1, 2, 2, 2), np.float32), np.ones((1, 3), np.float32), np.ones((1, 2), np.float32)],
                     r"blob 'M': must have shape \[1, C\] = \[1, 2\], got \[1, 3\]")
        self._raises(core.CreateOperator("ClipTensorByScaling", ["X", "v"], ["Y"]), [X, np.ones(1, np.float32)],
                     "threshold must be greater than 0")
        self._raises(core.CreateOperator("ClipTensorByScaling", ["X", "v"], ["Y"], threshold=1.0),
                     [X, np.ones(2, np.float32)], "blob 'v': must hold one value")


# ----------------------------------------------------------------- DotProduct / CosineSimilarity / padding

class TestRowSimilarity(OpTest):
    @given(XY=hu.tensors(n=2, min_dim=0, max_dim=3), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_dot_and_cosine(self, XY, gc, dc):
        X, Y = XY

        def rows(A):
            n = A.shape[0] if A.ndim else 1
            return A.reshape(n, -1).astype(np.float64)

        def dot(X, Y):
            return ((rows(X) * rows(Y)).sum(axis=1).astype(np.float32),)

        def cosine(X, Y):
            x, y = rows(X), rows(Y)
            den = np.sqrt(np.maximum((x * x).sum(1), 1e-12) * np.maximum((y * y).sum(1), 1e-12))
            return (((x * y).sum(1) / den).astype(np.float32),)
        self.assertReferenceChecks(gc, core.CreateOperator("DotProduct", ["X", "Y"], ["Z"]), [X, Y], dot)
        self.assertReferenceChecks(gc, core.CreateOperator("CosineSimilarity", ["X", "Y"], ["Z"]), [X, Y], cosine)
        dZ = np.linspace(-1, 1, rows(X).shape[0]).astype(np.float32)
        self.assertReferenceChecks(gc, core.CreateOperator("DotProductGradient", ["X", "Y", "dZ"], ["dX", "dY"]),
                                   [X, Y, dZ], lambda X, Y, dZ: ((dZ[:, None] * rows(Y)).reshape(X.shape)
                                                                 .astype(np.float32),
                                                                 (dZ[:, None] * rows(X)).reshape(X.shape)
                                                                 .astype(np.float32)))

    def test_gradient_checks(self):
        X, Y = spread(3, 4, seed=8), spread(3, 4, seed=9)
        for op_type in ("DotProduct", "CosineSimilarity"):
            op = core.CreateOperator(op_type, ["X", "Y"], ["Z"])
            self.assertGradientChecks(hu.cpu_do, op, [X, Y], 0, [0])
            self.assertGradientChecks(hu.cpu_do, op, [X, Y], 1, [0])
        for args in ({"pad_value": 0.5}, {"replicate": 1}):
            op = core.CreateOperator("DotProductWithPadding", ["X", "Y"], ["Z"], **args)
            for i in (0, 1):
                self.assertGradientChecks(hu.cpu_do, op, [X, spread(3, 2, seed=10)], i, [0])

    def test_cosine_gradient_matches_torch(self):
        torch = pytest.importorskip("torch")
        rng = np.random.RandomState(3)
        X, Y = rng.randn(2, 4, 5).astype(np.float32)
        dZ = rng.randn(4).astype(np.float32)
        xt = torch.tensor(X.astype(np.float64), requires_grad=True)
        yt = torch.tensor(Y.astype(np.float64), requires_grad=True)
        torch.nn.functional.cosine_similarity(xt, yt, dim=1, eps=0).backward(torch.tensor(dZ.astype(np.float64)))
        op = core.CreateOperator("CosineSimilarityGradient", ["X", "Y", "dZ"], ["dX", "dY"])
        self.assertReferenceChecks(hu.cpu_do, op, [X, Y, dZ], lambda *a: (xt.grad.numpy().astype(np.float32),
                                                                          yt.grad.numpy().astype(np.float32)))

    @given(n=st.integers(1, 4), dx=st.integers(1, 3), times=st.integers(1, 3), swap=st.booleans(),
           replicate=st.booleans(), pad_value=st.sampled_from([0.0, 1.5]), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_dot_with_padding(self, n, dx, times, swap, replicate, pad_value, gc, dc):
        rng = np.random.RandomState(n * 7 + dx)
        short, long_ = rng.randn(n, dx).astype(np.float32), rng.randn(n, dx * times).astype(np.float32)
        X, Y = (long_, short) if swap else (short, long_)
        op = core.CreateOperator("DotProductWithPadding", ["X", "Y"], ["Z"], pad_value=pad_value, replicate=replicate)

        def padded(A, B):            # B (the shorter) written out to A's length
            if replicate:
                return np.concatenate([B] * (A.shape[1] // B.shape[1]), axis=1)
            return np.concatenate([B, np.full((B.shape[0], A.shape[1] - B.shape[1]), pad_value, np.float32)], axis=1)

        def ref(X, Y):
            A, B = (X, Y) if X.shape[1] >= Y.shape[1] else (Y, X)
            return ((A.astype(np.float64) * padded(A, B)).sum(axis=1).astype(np.float32),)
        self.assertReferenceChecks(gc, op, [X, Y], ref)
        dZ = np.arange(1, n + 1, dtype=np.float32)
        grad = core.CreateOperator("DotProductWithPaddingGradient", ["X", "Y", "dZ"], ["dX", "dY"],
                                   pad_value=pad_value, replicate=replicate)

        def grad_ref(X, Y, dZ):      # finite differences of the written-out forward (it is linear)
            out = []
            for which in (0, 1):
                base = [X.astype(np.float64), Y.astype(np.float64)]
                g = np.zeros_like(base[which])
                for pos in np.ndindex(*g.shape):
                    bumped = [b.copy() for b in base]
                    bumped[which][pos] += 1.0
                    A, B = (bumped if bumped[0].shape[1] >= bumped[1].shape[1] else bumped[::-1])
                    A0, B0 = (base if base[0].shape[1] >= base[1].shape[1] else base[::-1])
                    f1 = (A * (np.concatenate([B] * (A.shape[1] // B.shape[1]), 1) if replicate else
                               np.concatenate([B, np.full((n, A.shape[1] - B.shape[1]), pad_value)], 1))).sum(1)
                    f0 = (A0 * (np.concatenate([B0] * (A0.shape[1] // B0.shape[1]), 1) if replicate else
                                np.concatenate([B0, np.full((n, A0.shape[1] - B0.shape[1]), pad_value)], 1))).sum(1)
                    g[pos] = ((f1 - f0) * dZ).sum()
                out.append(g.astype(np.float32))
            return tuple(out)
        self.assertReferenceChecks(gc, grad, [X, Y, dZ], grad_ref, threshold=1e-3)

    def test_errors(self):
        self._raises(core.CreateOperator("DotProduct", ["X", "Y"], ["Z"]),
                     [np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)],
                     r"blob 'Y': shape \[2, 4\] differs from X's \[2, 3\]; DotProduct needs equal shapes")
        self._raises(core.CreateOperator("DotProductWithPadding", ["X", "Y"], ["Z"], replicate=1),
                     [np.ones((2, 3), np.float32), np.ones((2, 2), np.float32)],
                     r"replicate=1 needs the longer row \(3\) to be a multiple of the shorter \(2\)")
        self._raises(core.CreateOperator("DotProductWithPadding", ["X", "Y"], ["Z"]),
                     [np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)], "must have X's rank and first dim")
        self._raises(core.CreateOperator("CosineSimilarityGradient", ["X", "Y", "dZ"], ["dX", "dY"]),
                     [np.ones((2, 3), np.float32)] * 2 + [np.ones(3, np.float32)],
                     r"blob 'dZ': must be 1-D with one value per row \(2\)")
