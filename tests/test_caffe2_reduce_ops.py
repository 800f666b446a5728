"""Caffe2's reductions (operators/math/caffe2_reduce.py) with hypothesis_test_util, against
NumPy references written out here from Caffe2's definitions, through the
caffe2.python aliases. Gradient ops are checked against their formulas directly, and the
makers through assertGradientChecks (finite differences)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

from _caffe2_op_helpers import floats_tensor, legacy_view, spread


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)


REDUCE_REFS = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=a, keepdims=k)),
}


@st.composite
def _axes(draw, ndim):
    """None (no argument: every dim) or a list of dims, some negative, maybe repeated."""
    if draw(st.booleans()):
        return None
    axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim))
    return [a - ndim if draw(st.booleans()) else a for a in axes]


class TestReduce(OpTest):
    @given(X=floats_tensor(min_dim=1, max_dim=4), op_type=st.sampled_from(sorted(REDUCE_REFS)),
           keepdims=st.sampled_from([None, 0, 1]), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=40)
    def test_reduce(self, X, op_type, keepdims, data, gc, dc):
        axes = data.draw(_axes(X.ndim))
        args = {} if axes is None else {"axes": axes}
        if keepdims is not None:
            args["keepdims"] = keepdims
        op = core.CreateOperator(op_type, ["X"], ["Y"], **args)
        dims = tuple(range(X.ndim)) if axes is None else tuple(sorted({a % X.ndim for a in axes}))
        keep = keepdims != 0

        def ref(X):
            return (np.asarray(REDUCE_REFS[op_type](X, dims, keep)).astype(X.dtype),)
        self.assertReferenceChecks(gc, op, [X], ref, threshold=1e-4)

    @given(X=hu.tensor(min_dim=1, max_dim=3, dtype=np.int32, elements=st.integers(-100, 100)),
           op_type=st.sampled_from(["ReduceSum", "ReduceMax", "ReduceMin"]), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_integer_reduce(self, X, op_type, gc, dc):
        op = core.CreateOperator(op_type, ["X"], ["Y"], axes=[0], keepdims=0)
        self.assertReferenceChecks(gc, op, [X], lambda X: (REDUCE_REFS[op_type](X, (0,), False).astype(np.int32),))

    def test_gradient_ops(self):
        X = np.array([[1.0, 5.0, 5.0], [-2.0, 0.0, 3.0]], np.float32)
        dY = np.array([[2.0, -1.0]], np.float32).T                   # axes=[1], keepdims=1
        for op_type, want in (
                ("ReduceSum", np.broadcast_to(dY, X.shape)),
                ("ReduceMean", np.broadcast_to(dY / 3, X.shape)),
                ("ReduceMax", np.where(X == X.max(1, keepdims=True), dY, 0)),       # ties both get dY
                ("ReduceMin", np.where(X == X.min(1, keepdims=True), dY, 0)),
                ("ReduceL1", np.sign(X) * dY),
                ("ReduceL2", X / np.sqrt((X ** 2).sum(1, keepdims=True)) * dY)):
            forward = core.CreateOperator(op_type, ["X"], ["Y"], axes=[1])
            workspace.FeedBlob("X", X)
            workspace.RunOperatorOnce(forward)
            grad = core.CreateOperator(op_type + "Gradient", ["dY", "X", "Y"], ["dX"], axes=[1])
            self.assertReferenceChecks(hu.cpu_do, grad, [dY, X, workspace.FetchBlob("Y")],
                                       lambda dY, X, Y: (np.asarray(want, np.float32),))

    def test_gradient_checks(self):
        X = spread(3, 4, seed=1)
        for op_type in sorted(REDUCE_REFS):
            for args in ({"axes": [0], "keepdims": 0}, {"axes": [-1]}):
                op = core.CreateOperator(op_type, ["X"], ["Y"], **args)
                self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        self._raises(core.CreateOperator("ReduceSum", ["X"], ["Y"], axes=[2]), [X],
                     r"ReduceSum #0 'Y': axes \[2\]: axis 2 is out of range for a 2-D input \(valid: \[-2, 1\]\)")
        self._raises(core.CreateOperator("ReduceMax", ["X"], ["Y"], axes=[-3]), [X], "axis -3 is out of range")
        self._raises(core.CreateOperator("ReduceMean", ["X"], ["Y"]), [X.astype(np.int32)],
                     "ReduceMean does not support dtype int32")
        self._raises(core.CreateOperator("ReduceSumGradient", ["dY", "X", "Y"], ["dX"], axes=[1]),
                     [np.ones(3, np.float32), X, np.ones(2, np.float32)], "blob 'dY': has 3 values")


def _front_back_ref(X, n, front, kind, lengths=None):
    """Loop reference from Caffe2's SumReduceDimsOp / MaxReduceDimsOp."""
    split = n if front else X.ndim - n
    rows, cols = int(np.prod(X.shape[:split])), int(np.prod(X.shape[split:]))
    M = X.reshape(rows, cols)
    out_shape = X.shape[split:] if front else X.shape[:split]
    count = cols if front else rows
    out = np.zeros(count, X.dtype)
    if rows == 0 or cols == 0:
        return out.reshape(out_shape)
    for i in range(count):
        full = rows if front else cols
        length = full if lengths is None else int(lengths[i])
        vals = [M[j, i] if front else M[i, j] for j in range(length)]
        if kind == "max":
            out[i] = max(vals)
        elif kind == "sum":
            out[i] = sum(vals, X.dtype.type(0))
        else:
            total = sum(vals, X.dtype.type(0))
            out[i] = int(total / length) if X.dtype.kind == "i" else total / length
    return out.reshape(out_shape)


FRONT_BACK = [(side + kind.capitalize(), side == "ReduceFront", kind)
              for side in ("ReduceFront", "ReduceBack") for kind in ("sum", "mean", "max")]


class TestFrontBack(OpTest):
    @given(X=floats_tensor(min_dim=1, max_dim=4), spec=st.sampled_from(FRONT_BACK), data=st.data(),
           **hu.gcs_cpu_only)
    @settings(max_examples=30)
    def test_reduce(self, X, spec, data, gc, dc):
        op_type, front, kind = spec
        n = data.draw(st.integers(0, X.ndim))
        op = core.CreateOperator(op_type, ["X"], ["Y"], num_reduce_dim=n)     # n = 0: each value alone
        self.assertReferenceChecks(gc, op, [X], lambda X: (_front_back_ref(X, n, front, kind),))

    @given(X=floats_tensor(min_dim=2, max_dim=3), spec=st.sampled_from(FRONT_BACK), data=st.data(),
           **hu.gcs_cpu_only)
    @settings(max_examples=30)
    def test_lengths(self, X, spec, data, gc, dc):
        op_type, front, kind = spec
        extent = X.shape[0] if front else X.shape[-1]
        count = int(np.prod(X.shape[1:])) if front else int(np.prod(X.shape[:-1]))
        low = 0 if kind == "sum" else 1
        lengths = np.array(data.draw(st.lists(st.integers(low, extent), min_size=count, max_size=count)), np.int32)
        op = core.CreateOperator(op_type, ["X", "L"], ["Y"])
        self.assertReferenceChecks(gc, op, [X, lengths], lambda X, L: (_front_back_ref(X, 1, front, kind, L),))

        # the gradient op against its definition: dY spread over the counted entries
        dY = np.random.RandomState(0).rand(*_front_back_ref(X, 1, front, kind, lengths).shape).astype(np.float32)
        workspace.FeedBlob("X", X)
        workspace.FeedBlob("L", lengths)
        workspace.RunOperatorOnce(op)
        Y = workspace.FetchBlob("Y")
        M = X.reshape(X.shape[0], -1) if front else X.reshape(-1, X.shape[-1])
        dX = np.zeros_like(M)
        for i in range(count):
            for j in range(int(lengths[i])):
                cell = (j, i) if front else (i, j)
                g = dY.reshape(-1)[i]
                if kind == "mean":
                    g = g / lengths[i]
                if kind == "max" and M[cell] != Y.reshape(-1)[i]:
                    g = 0.0
                dX[cell] = g
        inputs = ["dY", "X", "Y", "L"] if kind == "max" else ["dY", "X", "L"]
        values = [dY, X, Y, lengths] if kind == "max" else [dY, X, lengths]
        grad = core.CreateOperator(op_type + "Gradient", inputs, ["dX"])
        self.assertReferenceChecks(gc, grad, values, lambda *a: (dX.reshape(X.shape),))

    def test_integer_mean_truncates(self):
        X = np.array([[3, -3], [4, -4]], np.int32)
        op = core.CreateOperator("ReduceFrontMean", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([3, -3], np.int32),))

    def test_old_gradient_models_pass_the_shape(self):
        # models saved before Caffe2 changed input 1 pass X's shape as int64
        dY = np.array([1.0, 2.0], np.float32)
        op = core.CreateOperator("ReduceBackSumGradient", ["dY", "S"], ["dX"])
        self.assertReferenceChecks(hu.cpu_do, op, [dY, np.array([2, 3], np.int64)],
                                   lambda dY, S: (np.repeat(dY[:, None], 3, axis=1),))

    def test_gradient_checks(self):
        X = spread(3, 2, 4, seed=2)
        for op_type, front, _ in FRONT_BACK:
            lengths = np.array([3, 1, 2, 2, 1, 3, 2, 3] if front else [4, 1, 2, 3, 2, 4], np.int32)
            for inputs in (["X"], ["X", "L"]):
                op = core.CreateOperator(op_type, inputs, ["Y"])
                values = [X] if len(inputs) == 1 else [X, lengths]
                self.assertGradientChecks(hu.cpu_do, op, values, 0, [0])

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        self._raises(core.CreateOperator("ReduceFrontSum", ["X"], ["Y"], num_reduce_dim=3), [X],
                     r"blob 'X': num_reduce_dim 3 is out of range \[0, 2\] for a 2-D input")
        self._raises(core.CreateOperator("ReduceBackSum", ["X", "L"], ["Y"]), [X, np.array([1], np.int32)],
                     r"blob 'L': has 1 lengths; need one per output value \(2 rows\)")
        self._raises(core.CreateOperator("ReduceBackMean", ["X", "L"], ["Y"]), [X, np.array([0, 1], np.int32)],
                     r"length 0 is out of range \[1, 3\] \(mean of no elements is undefined\)")
        self._raises(core.CreateOperator("ReduceFrontMax", ["X", "L"], ["Y"]), [X, np.array([1, 3, 1], np.int32)],
                     r"length 3 is out of range \[1, 2\]")
        self._raises(core.CreateOperator("ReduceFrontSum", ["X", "L"], ["Y"], num_reduce_dim=2),
                     [X, np.array([1], np.int32)], "with a lengths input num_reduce_dim must be 1")
        # Caffe2's kernels read num_reduce_dim; the documented num_reduce_dims is refused when it disagrees
        self._raises(core.CreateOperator("ReduceFrontSum", ["X"], ["Y"], num_reduce_dims=2), [X],
                     "num_reduce_dims=2: Caffe2's kernels read the argument num_reduce_dim")
        self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("ReduceFrontSum", ["X"], ["Y"], num_reduce_dims=1),
                                   [X], lambda X: (X.sum(0),))


class TestSums(OpTest):
    @given(X=floats_tensor(min_dim=1, max_dim=3), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_reduce_tail_sum(self, X, gc, dc):
        op = core.CreateOperator("ReduceTailSum", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (X.reshape(X.shape[0], -1).sum(axis=1),))

    @given(X=floats_tensor(min_dim=0, max_dim=3), average=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_sum_elements(self, X, average, gc, dc):
        def ref(X, square=False):
            v = X.astype(np.float64) ** (2 if square else 1)
            return (np.array(v.mean() if average else v.sum(), X.dtype),)
        self.assertReferenceChecks(gc, core.CreateOperator("SumElements", ["X"], ["S"], average=average), [X], ref)
        self.assertReferenceChecks(gc, core.CreateOperator("SumSqrElements", ["X"], ["S"], average=average), [X],
                                   lambda X: ref(X, square=True))
        dS = np.array(1.5, np.float32)
        grad = core.CreateOperator("SumElementsGradient", ["X", "dS"], ["dX"], average=average)
        self.assertReferenceChecks(gc, grad, [X, dS], lambda X, dS: (np.full(X.shape, 1.5 / (X.size if average else 1),
                                                                            np.float32),))

    def test_sum_and_colwise_max_gradient_checks(self):
        X = spread(2, 3, 4, seed=3)
        for average in (0, 1):
            op = core.CreateOperator("SumElements", ["X"], ["S"], average=average)
            self.assertGradientChecks(hu.cpu_do, op, [X], 0, [0])
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("ColwiseMax", ["X"], ["Y"]), [X], 0, [0])

    @given(Xs=hu.tensors(n=3, dtype=np.int32, elements=st.integers(-1000, 1000)), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_integer_sums(self, Xs, gc, dc):
        a, b, c = Xs
        self.assertReferenceChecks(gc, core.CreateOperator("SumElementsInt", ["a"], ["s"]), [a],
                                   lambda a: (np.array(int(a.astype(np.int64).sum()), np.int32),))
        self.assertReferenceChecks(gc, core.CreateOperator("SumInt", ["a", "b", "c"], ["s"]), [a, b, c],
                                   lambda a, b, c: (a + b + c,))
        self.assertReferenceChecks(gc, core.CreateOperator("SumInt", ["a", "b"], ["a"]), [a, b],
                                   lambda a, b: (a + b,))

    @given(pair=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_sum_reduce_like(self, pair, gc, dc):
        a_shape = pair.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
        start = pair.draw(st.integers(0, len(a_shape)))
        end = pair.draw(st.integers(start, len(a_shape)))
        b_shape = a_shape[start:end] or [1]
        axis = start if end > start else -1
        A = np.random.RandomState(len(a_shape)).rand(*a_shape).astype(np.float32)
        B = np.zeros(b_shape, np.float32)
        op = core.CreateOperator("SumReduceLike", ["A", "B"], ["C"], axis=axis)

        def ref(A, B):
            view = legacy_view(A.shape, B.shape, axis) if B.size > 1 else [1] * A.ndim
            summed = A.sum(axis=tuple(i for i, d in enumerate(view) if d == 1), keepdims=True)
            return (summed.reshape(B.shape),)
        self.assertReferenceChecks(gc, op, [A, B], ref)

    @given(X=floats_tensor(min_dim=3, max_dim=3), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_colwise_max(self, X, gc, dc):
        self.assertReferenceChecks(gc, core.CreateOperator("ColwiseMax", ["X"], ["Y"]), [X],
                                   lambda X: (X.max(axis=1),))
        Y = X.max(axis=1)
        dY = np.ones_like(Y) * 2
        self.assertReferenceChecks(gc, core.CreateOperator("ColwiseMaxGradient", ["X", "Y", "dY"], ["dX"]),
                                   [X, Y, dY], lambda X, Y, dY: (np.where(X == Y[:, None, :], 2.0, 0.0)
                                                                 .astype(np.float32),))

    def test_errors(self):
        self._raises(core.CreateOperator("SumInt", ["a", "b"], ["s"]),
                     [np.ones(2, np.int32), np.ones(3, np.int32)], "blob 'b': int32 \\[3\\] differs from input 0's")
        self._raises(core.CreateOperator("SumElementsInt", ["a"], ["s"]), [np.ones(2, np.float32)],
                     "SumElementsInt does not support dtype float32")
        self._raises(core.CreateOperator("SumReduceLike", ["A", "B"], ["C"], axis=0),
                     [np.ones((2, 3), np.float32), np.ones(3, np.float32)],
                     "with broadcast=1 and axis 0, B of shape \\[3\\] does not match A of shape \\[2, 3\\]")
        self._raises(core.CreateOperator("ColwiseMax", ["X"], ["Y"]), [np.ones((2, 3), np.float32)],
                     r"must be 3-D \(batch, M, N\)")


def test_gradient_makers_follow_caffe2():
    from caffe2py import gradients
    ops, _ = gradients.get_gradient_for_op(core.CreateOperator("ReduceFrontMax", ["X", "L"], ["Y"]), ["Y_grad"])
    assert [(o.type, list(o.input), list(o.output)) for o in ops] == [
        ("ReduceFrontMaxGradient", ["Y_grad", "X", "Y", "L"], ["X_grad"])]
    with pytest.raises(Caffe2Error, match="should not ask for the gradient"):
        gradients.get_gradient_for_op(core.CreateOperator("SumElementsInt", ["X"], ["Y"]), ["Y_grad"])


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 1600])
def test_column_sums_match_float64_sums(rows):
    """math/reduce.column_sums (FCGradient's bias gradient): float32 blocks of 64 rows,
    then float64 across blocks, stays near the float64 sum."""
    from caffe2py.kernels.cpu.math.reduce import column_sums
    x = (np.random.default_rng(rows).random((rows, 33)) - 0.5).astype(np.float32)
    got = column_sums(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=0), rtol=1e-6, atol=2e-6)
