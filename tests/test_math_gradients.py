"""Gradients of Caffe2's math-like ops (issue 31): Pow, Max, Min, Mean, Clip, Cast,
WeightedSum, ElementwiseLinear, SquareRootDivide, NegateGradient, ZeroGradient, PRelu,
LpNorm, FloatToHalf / HalfToFloat, CopyCPUToGPU / CopyGPUToCPU, Alias, and the MatMul
(input B, axis_a / axis_b) and training SpatialBN (input X, NHWC) gradient checks.

Each op: finite differences (hu.assertGradientChecks) on a few shapes, the gradient
op's output against torch.autograd where torch has the function (skipped without
torch), and the maker's gradient ops (types, inputs, outputs, arguments) as Caffe2's
makers write them (caffe2/operators/pow_op.cc, minmax_gradient_ops.cc, mean_op.cc,
clip_op.cc, cast_op.cc, utility_ops.cc, elementwise_linear_op.cc,
square_root_divide_op.cc, negate_gradient_op.cc, zero_gradient_op.cc, prelu_op.cc,
lpnorm_op.cc, half_float_ops.cc, copy_op.cc, matmul_op.cc,
spatial_batch_norm_gradient_op.cc)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import itertools

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.args import ArgumentHelper
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import GradientSlice, get_gradient_for_op
from caffe2py.proto import caffe2_pb2

from _grad_util import compare_with_torch, outputs_of, run_gradient, torch

FEW = settings(max_examples=5, deadline=None)
DT = caffe2_pb2.TensorProto


def maker(op, g_output=None):
    """[(type, inputs, outputs, {arg: value})] of op's gradient ops, and g_input."""
    g_output = g_output if g_output is not None else [o + "_grad" for o in op.output]
    ops, g_input = get_gradient_for_op(op, g_output)
    return [(o.type, list(o.input), list(o.output), {a.name: ArgumentHelper(o).get(a.name) for a in o.arg})
            for o in ops], g_input


def spaced(rng, *shape, step=0.25):
    """Distinct values at least `step` apart, in random order (no near-ties)."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * step).astype(np.float32).reshape(shape)


def away_from(rng, shape, points, margin=0.1):
    """Normal values moved at least `margin` away from each of `points`."""
    x = rng.standard_normal(shape).astype(np.float32)
    for p in points:
        near = np.abs(x - p) < margin
        x = np.where(near, p + np.where(x >= p, 2 * margin, -2 * margin), x).astype(np.float32)
    return x


def net_gradients(net, feeds, ys):
    grad_map = net.AddGradientOperators(ys)
    workspace.ResetWorkspace()
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)
    return grad_map


shapes = st.sampled_from([(5,), (2, 3), (2, 3, 4)])


class TestMathGradients(hu.HypothesisTestCase):

    # ------------------------------------------------------------------ Pow

    @FEW
    @given(shape=shapes, exponent=st.sampled_from([2.0, 3.0, 0.5, -1.5]), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_pow_exponent_argument(self, shape, exponent, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = (rng.random(shape) + 0.5).astype(np.float32)
        op = core.CreateOperator("Pow", ["X"], ["Y"], exponent=exponent)
        self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=1e-3, threshold=1e-2)
        if torch is not None:
            compare_with_torch(op, [x], [0], lambda X: [X ** exponent])

    def test_pow_exponent_argument_maker(self):
        ops, g_input = maker(core.CreateOperator("Pow", ["X"], ["Y"], exponent=3.0))
        assert ops == [("Pow", ["X"], ["X_grad"], {"exponent": 2.0}),
                       ("Mul", ["X_grad", "Y_grad"], ["X_grad"], {}),
                       ("Scale", ["X_grad"], ["X_grad"], {"scale": 3.0})]
        assert g_input == ["X_grad"]
        # in place: X is gone, Y^((e - 1) / e) = X^(e - 1)
        ops, _ = maker(core.CreateOperator("Pow", ["X"], ["X"], exponent=4.0))
        # dY is X_grad too: Caffe2 wrote the power over it; here it gets a blob of its own
        assert ops == [("Pow", ["X"], ["X_grad_autogen_pow"], {"exponent": 0.75}),
                       ("Mul", ["X_grad_autogen_pow", "X_grad"], ["X_grad"], {}),
                       ("Scale", ["X_grad"], ["X_grad"], {"scale": 4.0})]
        with pytest.raises(Caffe2Error, match="in place with exponent 0"):
            maker(core.CreateOperator("Pow", ["X"], ["X"], exponent=0.0))

    def test_pow_in_place_gradient_through_a_net(self):
        x = np.array([[0.5, 1.5, 2.0], [3.0, 0.7, 1.1]], np.float32)
        net = core.Net("pow_in_place")
        net.Copy(["X"], ["H"])
        net.Pow(["H"], ["H"], exponent=3.0)
        grad_map = net_gradients(net, {"X": x}, [net.SumElements(["H"], "L")])
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["X"]), 3 * x ** 2, rtol=1e-5)

    @FEW
    @given(shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_pow_exponent_input(self, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = (rng.random(shape) + 0.5).astype(np.float32)
        e = (rng.random(shape) * 3 - 1).astype(np.float32)
        op = core.CreateOperator("Pow", ["X", "E"], ["Y"])
        for i in (0, 1):
            self.assertGradientChecks(gc, op, [x, e], i, [0], stepsize=1e-3, threshold=1e-2)
        if torch is not None:
            compare_with_torch(op, [x, e], [0, 1], lambda X, E: [X ** E])

    @FEW
    @given(case=st.sampled_from([((2, 3, 4), (4,), {}), ((2, 3, 4), (3,), {"axis": 1}),
                                 ((2, 3, 4), (3, 4), {"axis": 1}), ((2, 3, 4), (1,), {}),
                                 ((2, 3, 4), (2,), {"axis_str": "N", "order": "NCHW"})]),
           seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_pow_exponent_input_broadcast(self, case, seed, gc, dc):
        x_shape, e_shape, args = case
        rng = np.random.default_rng(seed)
        x = (rng.random(x_shape) + 0.5).astype(np.float32)
        e = (rng.random(e_shape) * 3 - 1).astype(np.float32)
        op = core.CreateOperator("Pow", ["X", "E"], ["Y"], broadcast=1, **args)
        for i in (0, 1):
            self.assertGradientChecks(gc, op, [x, e], i, [0], stepsize=1e-3, threshold=1e-2)
        axis = 0 if args.get("axis_str") == "N" else args.get("axis", len(x_shape) - len(e_shape))
        view = (1,) * axis + e_shape + (1,) * (len(x_shape) - axis - len(e_shape))
        if e.size == 1:
            view = ()
        if torch is not None:
            compare_with_torch(op, [x, e], [0, 1], lambda X, E: [X ** E.reshape(view)])

    def test_pow_exponent_input_maker(self):
        ops, g_input = maker(core.CreateOperator("Pow", ["X", "E"], ["Y"]))
        assert ops == [("ConstantFill", ["E"], ["E_grad"], {"value": 1.0}),
                       ("Sub", ["E", "E_grad"], ["E_grad"], {}),
                       ("Pow", ["X", "E_grad"], ["X_grad"], {}),
                       ("Mul", ["X_grad", "Y_grad"], ["X_grad"], {}),
                       ("Mul", ["X_grad", "E"], ["X_grad"], {}),
                       ("Log", ["X"], ["E_grad_autogen_pre_red"], {}),
                       ("Mul", ["E_grad_autogen_pre_red", "Y"], ["E_grad_autogen_pre_red"], {}),
                       ("Mul", ["E_grad_autogen_pre_red", "Y_grad"], ["E_grad"], {})]
        assert g_input == ["X_grad", "E_grad"]
        ops, _ = maker(core.CreateOperator("Pow", ["X", "E"], ["Y"], broadcast=1, axis=1))
        legacy = {"broadcast": 1, "axis": 1, "axis_str": "", "order": "NCHW"}
        assert ops[2] == ("Pow", ["X", "E_grad"], ["X_grad"], legacy)
        assert ops[4] == ("Mul", ["X_grad", "E"], ["X_grad"], legacy)
        assert ops[7:] == [("Mul", ["E_grad_autogen_pre_red", "Y_grad"], ["E_grad_autogen_pre_red"], {}),
                           ("SumReduceLike", ["E_grad_autogen_pre_red", "E"], ["E_grad"],
                            {"axis": 1, "axis_str": "", "order": "NCHW"})]
        with pytest.raises(Caffe2Error, match="runs in place"):
            maker(core.CreateOperator("Pow", ["X", "E"], ["X"]))

    def test_pow_gradient_chain_is_summed_whole_when_x_has_other_readers(self):
        """Pow's gradient ops write X_grad in turn; when X is read by another op too
        the whole chain gets the split name (renaming only its last op broke it)."""
        x = np.array([[-1.0, 0.5], [2.0, -0.3]], np.float32)
        e = np.array([[1.5, 2.0], [0.5, 3.0]], np.float32)
        net = core.Net("pow_readers")
        net.Pow(["X"], ["Y"], exponent=3.0)
        net.Relu(["X"], ["R"])
        net.Pow(["A", "E"], ["Z"])
        net.Relu(["E"], ["RE"])
        loss = net.SumElements([net.Sum(["Y", "R", "Z", "RE"], "S")], "L")
        a = np.abs(x) + 0.5
        grad_map = net_gradients(net, {"X": x, "A": a, "E": e}, [loss])
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["X"]), 3 * x ** 2 + (x > 0), rtol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["E"]), a ** e * np.log(a) + (e > 0), rtol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["A"]), e * a ** (e - 1), rtol=1e-5)

    # ------------------------------------------------------------------ Max / Min

    @FEW
    @given(n=st.integers(1, 3), shape=shapes, op_type=st.sampled_from(["Max", "Min"]), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_max_min(self, n, shape, op_type, seed, gc, dc):
        rng = np.random.default_rng(seed)
        xs = list(spaced(rng, n, *shape))          # all values distinct: no ties
        names = ["X%d" % i for i in range(n)]
        op = core.CreateOperator(op_type, names, ["Y"])
        for i in range(n):
            self.assertGradientChecks(gc, op, xs, i, [0])
        if torch is not None:
            def reduce(*ts):
                out = ts[0]
                for t in ts[1:]:
                    out = torch.maximum(out, t) if op_type == "Max" else torch.minimum(out, t)
                return [out]
            compare_with_torch(op, xs, list(range(n)), reduce)

    def test_max_min_ties_give_every_tied_input_the_gradient(self):
        a = np.array([1.0, 2.0, 3.0, -1.0], np.float32)
        b = np.array([1.0, 5.0, 3.0, -2.0], np.float32)
        dy = np.array([0.5, 0.25, -1.0, 2.0], np.float32)
        grads, _ = run_gradient(core.CreateOperator("Max", ["A", "B"], ["Y"]), [a, b], {0: dy})
        np.testing.assert_array_equal(grads[0], [0.5, 0, -1.0, 2.0])
        np.testing.assert_array_equal(grads[1], [0.5, 0.25, -1.0, 0])
        grads, _ = run_gradient(core.CreateOperator("Min", ["A", "B"], ["Y"]), [a, b], {0: dy})
        np.testing.assert_array_equal(grads[0], [0.5, 0.25, -1.0, 0])
        np.testing.assert_array_equal(grads[1], [0.5, 0, -1.0, 2.0])

    def test_max_min_makers(self):
        for op_type in ("Max", "Min"):
            ops, g_input = maker(core.CreateOperator(op_type, ["A", "B", "C"], ["Y"]))
            assert ops == [(op_type + "Gradient", ["Y", "Y_grad", "A", "B", "C"],
                            ["A_grad", "B_grad", "C_grad"], {})]
            assert g_input == ["A_grad", "B_grad", "C_grad"]
            with pytest.raises(Caffe2Error, match="overwrote"):
                maker(core.CreateOperator(op_type, ["A", "B"], ["A"]))

    # ------------------------------------------------------------------ Mean

    @FEW
    @given(n=st.integers(1, 4), shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_mean(self, n, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]
        op = core.CreateOperator("Mean", ["X%d" % i for i in range(n)], ["Y"])
        for i in range(n):
            self.assertGradientChecks(gc, op, xs, i, [0])
        if torch is not None:
            compare_with_torch(op, xs, list(range(n)), lambda *ts: [sum(ts) / n])

    def test_mean_maker(self):
        # late Caffe2 (broadcasting Mean): MeanGradient reads the inputs for their shapes
        ops, g_input = maker(core.CreateOperator("Mean", ["A", "B", "C"], ["Y"]))
        assert ops == [("MeanGradient", ["Y_grad", "A", "B", "C"], ["A_grad", "B_grad", "C_grad"], {})]
        assert g_input == ["A_grad", "B_grad", "C_grad"]

    # ------------------------------------------------------------------ Clip

    @FEW
    @given(shape=shapes, bounds=st.sampled_from([(-0.5, 0.7), (None, 0.2), (-0.3, None), (None, None)]),
           seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_clip(self, shape, bounds, seed, gc, dc):
        lo, hi = bounds
        rng = np.random.default_rng(seed)
        x = away_from(rng, shape, [b for b in bounds if b is not None])
        args = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        op = core.CreateOperator("Clip", ["X"], ["Y"], **args)
        self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=0.01)
        if torch is not None:
            compare_with_torch(op, [x], [0], lambda X: [torch.clamp(X, lo, hi) if bounds != (None, None) else X * 1])

    def test_clip_gradient_is_zero_at_the_bounds(self):
        """Caffe2's ClipGradient passes dY only strictly inside (min, max)."""
        x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)
        grads, _ = run_gradient(core.CreateOperator("Clip", ["X"], ["Y"], min=-1.0, max=1.0), [x],
                                {0: np.ones(5, np.float32)})
        np.testing.assert_array_equal(grads[0], [0, 0, 1, 0, 0])

    def test_clip_maker(self):
        ops, g_input = maker(core.CreateOperator("Clip", ["X"], ["Y"], min=0.0, max=6.0))
        assert ops == [("ClipGradient", ["Y", "Y_grad"], ["X_grad"], {"min": 0.0, "max": 6.0})]
        assert g_input == ["X_grad"]

    # ------------------------------------------------------------------ Cast

    @FEW
    @given(shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_cast(self, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        op = core.CreateOperator("Cast", ["X"], ["Y"], to=DT.DOUBLE, from_type=DT.FLOAT)
        self.assertGradientChecks(gc, op, [x], 0, [0])
        grads, _ = run_gradient(op, [x], {0: np.full(shape, 0.5)})
        assert grads[0].dtype == np.float32
        if torch is not None:
            compare_with_torch(op, [x], [0], lambda X: [X.double()])

    def test_cast_maker_casts_back_to_from_type(self):
        ops, g_input = maker(core.CreateOperator("Cast", ["X"], ["Y"], to=DT.DOUBLE, from_type=DT.FLOAT))
        assert ops == [("Cast", ["Y_grad"], ["X_grad"], {"to": DT.FLOAT, "from_type": DT.DOUBLE})]
        assert g_input == ["X_grad"]
        ops, _ = maker(core.CreateOperator("Cast", ["X"], ["Y"], to="float16", from_type="FLOAT"))
        assert ops == [("Cast", ["Y_grad"], ["X_grad"], {"to": DT.FLOAT, "from_type": DT.FLOAT16})]
        with pytest.raises(Caffe2Error, match="'from_type'.* is required"):
            maker(core.CreateOperator("Cast", ["X"], ["Y"], to=DT.DOUBLE))
        with pytest.raises(Caffe2Error, match="unknown 'from_type'"):
            maker(core.CreateOperator("Cast", ["X"], ["Y"], to=DT.DOUBLE, from_type="QUATERNION"))

    # ------------------------------------------------------------------ WeightedSum

    @FEW
    @given(pairs=st.integers(1, 3), shape=shapes, grad_on_w=st.booleans(), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_weighted_sum(self, pairs, shape, grad_on_w, seed, gc, dc):
        rng = np.random.default_rng(seed)
        inputs = []
        for _ in range(pairs):
            inputs += [rng.standard_normal(shape).astype(np.float32), rng.standard_normal(1).astype(np.float32)]
        names = sum((["X%d" % k, "w%d" % k] for k in range(pairs)), [])
        op = core.CreateOperator("WeightedSum", names, ["Y"], grad_on_w=int(grad_on_w))
        checked = list(range(0, 2 * pairs, 1 if grad_on_w else 2))
        for i in checked:
            self.assertGradientChecks(gc, op, inputs, i, [0])
        if torch is not None:
            compare_with_torch(op, inputs, checked,
                               lambda *ts: [sum(ts[2 * k] * ts[2 * k + 1] for k in range(pairs))])

    def test_weighted_sum_maker(self):
        op = core.CreateOperator("WeightedSum", ["A", "a", "B", "b"], ["Y"])
        ops, g_input = maker(op)
        assert ops == [("WeightedSumGradient", ["Y_grad", "A", "a", "B", "b"], ["A_grad", "B_grad"], {})]
        assert g_input == ["A_grad", None, "B_grad", None]
        op = core.CreateOperator("WeightedSum", ["A", "a", "B", "b"], ["Y"], grad_on_w=1)
        ops, g_input = maker(op)
        assert ops == [("WeightedSumGradient", ["Y_grad", "A", "a", "B", "b"],
                        ["A_grad", "B_grad", "a_grad", "b_grad"], {"grad_on_w": 1})]
        assert g_input == ["A_grad", "a_grad", "B_grad", "b_grad"]
        with pytest.raises(Caffe2Error, match="overwrote"):
            maker(core.CreateOperator("WeightedSum", ["A", "a", "B", "b"], ["A"], grad_on_w=1))

    def test_weighted_sum_gradient_of_an_sgd_step_keeps_float16(self):
        dy = np.array([1.0, -2.0, 0.5], np.float16)
        x = np.array([3.0, 1.0, -1.0], np.float16)
        op = core.CreateOperator("WeightedSumGradient", ["dY", "X", "w"], ["dX", "dw"], grad_on_w=1)
        dx, dw = outputs_of(op, [dy, x, np.array([0.5], np.float32)])
        assert dx.dtype == np.float16 and dw.dtype == np.float32 and dw.shape == (1,)
        np.testing.assert_array_equal(dx, [0.5, -1.0, 0.25])
        np.testing.assert_allclose(dw, [3.0 - 2.0 - 0.5])

    # ------------------------------------------------------------------ ElementwiseLinear

    @FEW
    @given(case=st.sampled_from([((4, 3), 1), ((2, 3, 4), 1), ((2, 3, 4), 2), ((2, 3, 4), -1), ((3, 2), 0)]),
           seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_elementwise_linear(self, case, seed, gc, dc):
        shape, axis = case
        d = int(np.prod(shape[axis:]))
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        w, b = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
        op = core.CreateOperator("ElementwiseLinear", ["X", "w", "b"], ["Y"], axis=axis)
        for i in range(3):
            self.assertGradientChecks(gc, op, [x, w, b], i, [0])
        if torch is not None:
            rows = int(np.prod(shape[:axis % len(shape)]))
            compare_with_torch(op, [x, w, b], [0, 1, 2],
                               lambda X, W, B: [(X.reshape(rows, d) * W + B).reshape(shape)])

    def test_elementwise_linear_maker(self):
        ops, g_input = maker(core.CreateOperator("ElementwiseLinear", ["X", "w", "b"], ["Y"], axis=2))
        assert ops == [("ElementwiseLinearGradient", ["Y_grad", "X", "w"], ["X_grad", "w_grad", "b_grad"],
                        {"axis": 2})]
        assert g_input == ["X_grad", "w_grad", "b_grad"]

    # ------------------------------------------------------------------ SquareRootDivide

    @FEW
    @given(shape=st.sampled_from([(3,), (3, 2), (3, 2, 2)]),
           scale_dtype=st.sampled_from([np.int32, np.int64, np.float32]), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_square_root_divide(self, shape, scale_dtype, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        scale = np.array([4, 0, 9], scale_dtype)          # a zero scale copies its row
        op = core.CreateOperator("SquareRootDivide", ["X", "scale"], ["Y"])
        self.assertGradientChecks(gc, op, [x, scale], 0, [0])
        if torch is not None:
            divisor = np.where(scale == 0, 1.0, np.sqrt(scale.astype(np.float64)))
            view = (3,) + (1,) * (len(shape) - 1)
            compare_with_torch(op, [x, scale], [0],
                               lambda X, S: [X / torch.tensor(divisor.reshape(view))])

    def test_square_root_divide_maker(self):
        ops, g_input = maker(core.CreateOperator("SquareRootDivide", ["X", "scale"], ["Y"]))
        assert ops == [("SquareRootDivide", ["Y_grad", "scale"], ["X_grad"], {})]
        assert g_input == ["X_grad", None]

    # ------------------------------------------------------------------ NegateGradient / ZeroGradient

    @FEW
    @given(shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_negate_gradient(self, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        op = core.CreateOperator("NegateGradient", ["X"], ["Y"])
        (y,) = outputs_of(op, [x])
        np.testing.assert_array_equal(y, x)                  # forward: a copy
        # the op's whole point is a gradient of the wrong sign: minus the finite differences
        from caffe2py.gradient_checker import GradientChecker
        _, grad, estimate = GradientChecker(0.01, 0.01).CheckSimple(op, [x], 0, [0])
        np.testing.assert_allclose(grad, -estimate, rtol=1e-2, atol=1e-2)

    def test_negate_gradient_maker(self):
        ops, g_input = maker(core.CreateOperator("NegateGradient", ["X"], ["Y"]))
        assert ops == [("Negative", ["Y_grad"], ["X_grad"], {})]
        assert g_input == ["X_grad"]

    def test_zero_gradient_maker_and_backward_pass(self):
        ops, g_input = maker(core.CreateOperator("ZeroGradient", ["X"], []))
        assert ops == [("ConstantFill", ["X"], ["X_grad"], {"value": 0.0})]
        assert g_input == ["X_grad"]
        x = np.array([[-1.0, 2.0, 0.5]], np.float32)
        net = core.Net("zero_gradient")
        net.ZeroGradient(["X"], [])
        net.ZeroGradient(["W"], [])                          # read by nothing else: zeros of W's shape
        loss = net.SumElements([net.Relu(["X"], "R")], "L")
        grad_map = net_gradients(net, {"X": x, "W": np.ones((2, 5), np.float32)}, [loss])
        np.testing.assert_array_equal(workspace.FetchBlob(grad_map["X"]), [[0, 1, 1]])
        np.testing.assert_array_equal(workspace.FetchBlob(grad_map["W"]), np.zeros((2, 5)))

    # ------------------------------------------------------------------ PRelu

    @FEW
    @given(order=st.sampled_from(["NCHW", "NHWC"]), shared=st.booleans(),
           shape=st.sampled_from([(2, 3), (2, 3, 4), (2, 3, 2, 2)]), seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_prelu(self, order, shared, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = away_from(rng, shape, [0.0])
        axis = 1 if order == "NCHW" else len(shape) - 1
        slope = (rng.random(1 if shared else shape[axis]) + 0.1).astype(np.float32)
        op = core.CreateOperator("PRelu", ["X", "Slope"], ["Y"], order=order)
        for i in (0, 1):
            self.assertGradientChecks(gc, op, [x, slope], i, [0], stepsize=0.01)
        if torch is not None:
            def prelu(X, S):
                if order == "NCHW":
                    return [torch.nn.functional.prelu(X, S)]
                moved = torch.movedim(X, -1, 1)              # channels last -> torch's dim 1
                return [torch.movedim(torch.nn.functional.prelu(moved, S), 1, -1)]
            compare_with_torch(op, [x, slope], [0, 1], prelu)

    def test_prelu_maker(self):
        ops, g_input = maker(core.CreateOperator("PRelu", ["X", "Slope"], ["Y"], order="NHWC"))
        assert ops == [("PReluGradient", ["Y", "Y_grad", "X", "Slope"], ["X_grad", "Slope_grad"],
                        {"order": "NHWC"})]
        assert g_input == ["X_grad", "Slope_grad"]
        with pytest.raises(Caffe2Error, match="overwrote"):
            maker(core.CreateOperator("PRelu", ["X", "Slope"], ["X"]))

    # ------------------------------------------------------------------ LpNorm

    @FEW
    @given(p=st.sampled_from([1, 2]), average=st.booleans(), shape=shapes, seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_lp_norm(self, p, average, shape, seed, gc, dc):
        rng = np.random.default_rng(seed)
        x = away_from(rng, shape, [0.0])
        op = core.CreateOperator("LpNorm", ["X"], ["Y"], p=p, average=int(average))
        self.assertGradientChecks(gc, op, [x], 0, [0], stepsize=0.01)
        n = x.size if average else 1
        if torch is not None:
            compare_with_torch(op, [x], [0],
                               lambda X: [(X.abs().sum() if p == 1 else (X * X).sum()).reshape(1) / n])

    def test_lp_norm_l1_gradient_is_zero_near_zero(self):
        x = np.array([0.0, 1e-13, -1e-13, 0.5, -0.5], np.float32)
        grads, _ = run_gradient(core.CreateOperator("LpNorm", ["X"], ["Y"], p=1), [x], {0: np.full(1, 2.0, np.float32)})
        np.testing.assert_array_equal(grads[0], [0, 0, 0, 2, -2])

    def test_lp_norm_maker(self):
        ops, g_input = maker(core.CreateOperator("LpNorm", ["X"], ["Y"], p=1, average=1))
        assert ops == [("LpNormGradient", ["X", "Y_grad"], ["X_grad"], {"p": 1, "average": 1})]
        assert g_input == ["X_grad"]

    # ------------------------------------------------------------------ FloatToHalf / HalfToFloat

    @FEW
    @given(shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_half_conversions(self, shape, seed, gc, dc):
        # sixteenths and a step of 1/16: every perturbed value and square is exact in float16
        rng = np.random.default_rng(seed)
        x = (rng.integers(-32, 33, shape) / 16.0).astype(np.float32)
        self.assertGradientChecks(gc, core.CreateOperator("FloatToHalf", ["X"], ["Y"]), [x], 0, [0],
                                  stepsize=1 / 16.0)
        self.assertGradientChecks(gc, core.CreateOperator("HalfToFloat", ["X"], ["Y"]), [x.astype(np.float16)],
                                  0, [0], stepsize=1 / 16.0)
        grads, _ = run_gradient(core.CreateOperator("FloatToHalf", ["X"], ["Y"]), [x],
                                {0: x.astype(np.float16)})
        assert grads[0].dtype == np.float32
        grads, _ = run_gradient(core.CreateOperator("HalfToFloat", ["X"], ["Y"]), [x.astype(np.float16)], {0: x})
        assert grads[0].dtype == np.float16
        if torch is not None:        # dY of a float16 output is float16, as Caffe2 feeds it
            dy = rng.standard_normal(shape).astype(np.float16)
            ours, _ = run_gradient(core.CreateOperator("FloatToHalf", ["X"], ["Y"]), [x], {0: dy})
            tx = torch.tensor(x, requires_grad=True)
            tx.half().backward(torch.tensor(dy))
            np.testing.assert_array_equal(ours[0], tx.grad.numpy())

    def test_half_conversion_makers(self):
        ops, _ = maker(core.CreateOperator("FloatToHalf", ["X"], ["Y"]))
        assert ops == [("HalfToFloat", ["Y_grad"], ["X_grad"], {})]
        ops, _ = maker(core.CreateOperator("HalfToFloat", ["X"], ["Y"]))
        assert ops == [("FloatToHalf", ["Y_grad"], ["X_grad"], {})]

    # ------------------------------------------------------------------ device copies, Alias

    def test_device_copy_makers(self):
        for op_type, back in (("CopyCPUToGPU", "CopyGPUToCPU"), ("CopyGPUToCPU", "CopyCPUToGPU")):
            ops, g_input = maker(core.CreateOperator(op_type, ["X"], ["Y"]))
            assert ops == [(back, ["Y_grad"], ["X_grad"], {})]
            assert g_input == ["X_grad"]
            ops, g_input = maker(core.CreateOperator(op_type, ["X"], ["Y"]), [GradientSlice("gi", "gv")])
            assert ops == [(back, ["gi"], ["X_grad_indices"], {}), (back, ["gv"], ["X_grad_values"], {})]
            assert g_input == [GradientSlice("X_grad_indices", "X_grad_values")]

    @FEW
    @given(shape=shapes, seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_alias(self, shape, seed, gc, dc):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        self.assertGradientChecks(gc, core.CreateOperator("Alias", ["X"], ["Y"]), [x], 0, [0])
        ops, g_input = maker(core.CreateOperator("Alias", ["X"], ["Y"]))
        assert ops == [] and g_input == ["Y_grad"]           # the gradient passes through as it is

    # ------------------------------------------------------------------ MatMul

    @FEW
    @given(axes=st.sampled_from([(1, 1), (2, 1), (1, 2), (2, 2), (-1, -2)]), seed=st.integers(0, 99),
           **hu.gcs_cpu_only)
    def test_matmul_gradient_for_both_inputs(self, axes, seed, gc, dc):
        for trans_a, trans_b, transposed_inputs in itertools.product((False, True), repeat=3):
            self._check_matmul(trans_a, trans_b, transposed_inputs, axes, seed, gc)

    def _check_matmul(self, trans_a, trans_b, transposed_inputs, axes, seed, gc):
        axis_a, axis_b = axes
        rng = np.random.default_rng(seed)
        m, k, n = 3, 4, 2
        # 3-D inputs whose 2-D views at the axes are op(A): (m, k), op(B): (k, n)
        a_view, b_view = ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))
        a_shape = {1: (a_view[0], a_view[1], 1), 2: (a_view[0], 1, a_view[1]),
                   -1: (a_view[0], 1, a_view[1])}[axis_a]
        b_shape = {1: (b_view[0], b_view[1], 1), 2: (b_view[0], 1, b_view[1]),
                   -2: (b_view[0], b_view[1], 1)}[axis_b]
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        if transposed_inputs:            # Caffe2's test feeds X.transpose(): F-ordered arrays
            a, b = np.asfortranarray(a), np.asfortranarray(b)
        op = core.CreateOperator("MatMul", ["X", "Y"], ["out"], trans_a=int(trans_a), trans_b=int(trans_b),
                                 axis_a=axis_a, axis_b=axis_b)
        for i in (0, 1):
            self.assertGradientChecks(gc, op, [a, b], i, [0])
        if torch is not None:
            def matmul(A, B):
                A2, B2 = A.reshape(a_view), B.reshape(b_view)
                return [(A2.T if trans_a else A2) @ (B2.T if trans_b else B2)]
            compare_with_torch(op, [a, b], [0, 1], matmul)

    def test_matmul_maker_is_caffe2s_three_input_form(self):
        cases = {(0, 0): [("MatMul", ["Y_grad", "B", "A"], ["A_grad"], {"trans_b": 1, "axis_b": 2}),
                          ("MatMul", ["A", "Y_grad", "B"], ["B_grad"], {"trans_a": 1, "axis_a": 3})],
                 (1, 0): [("MatMul", ["B", "Y_grad", "A"], ["A_grad"], {"trans_b": 1, "axis_a": 2}),
                          ("MatMul", ["A", "Y_grad", "B"], ["B_grad"], {"axis_a": 3})],
                 (0, 1): [("MatMul", ["Y_grad", "B", "A"], ["A_grad"], {"axis_b": 2}),
                          ("MatMul", ["Y_grad", "A", "B"], ["B_grad"], {"trans_a": 1, "axis_b": 3})],
                 (1, 1): [("MatMul", ["B", "Y_grad", "A"], ["A_grad"], {"trans_a": 1, "trans_b": 1, "axis_a": 2}),
                          ("MatMul", ["Y_grad", "A", "B"], ["B_grad"], {"trans_a": 1, "trans_b": 1, "axis_b": 3})]}
        for (ta, tb), want in cases.items():
            ops, g_input = maker(core.CreateOperator("MatMul", ["A", "B"], ["Y"], trans_a=ta, trans_b=tb,
                                                     axis_a=3, axis_b=2))
            assert ops == want, (ta, tb)
            assert g_input == ["A_grad", "B_grad"]

    def test_matmul_third_input_gives_the_output_shape(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        b = np.ones((3, 4), np.float32)
        (y,) = outputs_of(core.CreateOperator("MatMul", ["A", "B", "S"], ["Y"]), [a, b, np.zeros((2, 2, 2))])
        np.testing.assert_array_equal(y, (a @ b).reshape(2, 2, 2))
        with pytest.raises(Caffe2Error, match="holds 6 values but the product is"):
            outputs_of(core.CreateOperator("MatMul", ["A", "B", "S"], ["Y"]), [a, b, np.zeros((2, 3))])

    # ------------------------------------------------------------------ SpatialBN (training)

    @FEW
    @given(n=st.integers(1, 3), c=st.integers(1, 3), spatial=st.sampled_from([(3,), (2, 3)]),
           seed=st.integers(0, 99), **hu.gcs_cpu_only)
    def test_spatial_bn_training(self, n, c, spatial, seed, gc, dc):
        for order in ("NCHW", "NHWC"):
            self._check_spatial_bn(order, n, c, spatial, seed, gc)

    def _check_spatial_bn(self, order, n, c, spatial, seed, gc):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, c) + spatial).astype(np.float32)
        if order == "NHWC":              # as Caffe2's test: a transposed (not C-ordered) array
            x = np.moveaxis(x, 1, -1)
        scale = (rng.random(c) + 0.5).astype(np.float32)
        bias = (rng.random(c) - 0.5).astype(np.float32)
        mean, var = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
        op = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "mean", "var"],
                                 ["Y", "mean", "var", "saved_mean", "saved_var"],
                                 order=order, is_test=0, epsilon=1e-3, momentum=0.9)
        for i in (0, 1, 2):
            self.assertGradientChecks(gc, op, [x, scale, bias, mean, var], i, [0], stepsize=0.01)
        if torch is not None:
            def batch_norm(X, S, B, M, V):
                moved = torch.movedim(X, -1, 1) if order == "NHWC" else X
                y = torch.nn.functional.batch_norm(moved, M.clone(), V.clone(), S, B, training=True,
                                                   momentum=0.1, eps=1e-3)
                return [torch.movedim(y, 1, -1) if order == "NHWC" else y]
            compare_with_torch(op, [x, scale, bias, mean, var], [0, 1, 2], batch_norm, rtol=1e-3, atol=1e-4)

    def test_spatial_bn_training_empty_batch(self):
        """Caffe2: an empty batch keeps the running statistics, saves zeros, and its
        gradient has zero dscale and dbias."""
        x = np.zeros((0, 3, 2, 2), np.float32)
        scale, bias = np.ones(3, np.float32), np.zeros(3, np.float32)
        mean, var = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
        op = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "rm", "rv"], ["Y", "rm", "rv", "sm", "sv"],
                                 is_test=0)
        y, rm, rv, sm, sv = outputs_of(op, [x, scale, bias, mean, var])
        assert y.shape == x.shape
        np.testing.assert_array_equal(rm, mean)
        np.testing.assert_array_equal(rv, var)
        np.testing.assert_array_equal(sm, np.zeros(3))
        np.testing.assert_array_equal(sv, np.zeros(3))
        ops, _ = maker(op)
        assert [(t, i, o) for t, i, o, _ in ops] == [
            ("SpatialBNGradient", ["X", "scale", "Y_grad", "sm", "sv"], ["X_grad", "scale_grad", "bias_grad"])]
        grads, _ = run_gradient(op, [x, scale, bias, mean, var], {0: np.zeros_like(x)})
        assert grads[0].shape == x.shape
        np.testing.assert_array_equal(grads[1], np.zeros(3))
        np.testing.assert_array_equal(grads[2], np.zeros(3))
        test_mode = core.CreateOperator("SpatialBN", ["X", "scale", "bias", "rm", "rv"], ["Y"], is_test=1)
        (y,) = outputs_of(test_mode, [x, scale, bias, mean, var])
        assert y.shape == x.shape and y.dtype == np.float32

