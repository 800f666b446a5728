"""Caffe2's elementwise math and activation ops (operators/math/caffe2_math.py), tested as
Caffe2's operator tests were: hypothesis_test_util against NumPy references written
out here, through the caffe2.python aliases."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

from _caffe2_op_helpers import floats_tensor, legacy_pair, legacy_view as _legacy_view

DT = caffe2_pb2.TensorProto


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True       # inferred output shapes and types must match the computed ones
    check_output_dtypes = True


# NumPy references, written out from Caffe2's definitions (not from caffe2py's kernels).
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


UNARY = {
    "Ceil": (lambda x: np.ceil(x), {}),
    "Floor": (lambda x: np.floor(x), {}),
    "Sin": (lambda x: np.sin(x), {}),
    "Cos": (lambda x: np.cos(x), {}),
    "Sign": (lambda x: np.where(x > 0, 1, np.where(x < 0, -1, 0)), {}),
    "Sqr": (lambda x: x * x, {}),
    "Softsign": (lambda x: x / (1 + np.abs(x)), {}),
    "Softplus": (lambda x: np.log(1 + np.exp(x.astype(np.float64))), {}),
    "Swish": (lambda x: x * _sigmoid(x), {}),
    "Elu": (lambda x, alpha=1.0: np.where(x > 0, x, alpha * (np.exp(x.astype(np.float64)) - 1)), {"alpha": 0.7}),
    "Selu": (lambda x, alpha=1.6732632423543772, scale=1.0507009873554805:
             scale * np.where(x > 0, x, alpha * (np.exp(x.astype(np.float64)) - 1)), {"alpha": 1.5, "scale": 0.9}),
    "LeakyRelu": (lambda x, alpha=0.01: np.where(x >= 0, x, alpha * x), {"alpha": 0.2}),
    "ThresholdedRelu": (lambda x, alpha=1.0: np.where(x > alpha, x, 0), {"alpha": 0.5}),
    "Scale": (lambda x, scale=1.0: scale * x, {"scale": -2.5}),
}


class TestUnaryOps(OpTest):
    def _check(self, op_type, X, args, inplace, gc):
        fn, _ = UNARY[op_type]
        op = core.CreateOperator(op_type, ["X"], ["X" if inplace else "Y"], **args)
        self.assertReferenceChecks(gc, op, [X], lambda X: (fn(X, **args).astype(X.dtype),), threshold=1e-5)

    @given(X=floats_tensor(), op_type=st.sampled_from(sorted(UNARY)), inplace=st.booleans(),
           defaults=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_float32(self, X, op_type, inplace, defaults, gc, dc):
        self._check(op_type, X, {} if defaults else UNARY[op_type][1], inplace, gc)
        self.assertDeviceChecks(dc, core.CreateOperator(op_type, ["X"], ["Y"]), [X], [0])

    @pytest.mark.filterwarnings("ignore::RuntimeWarning")
    def test_every_op_in_float64_with_its_own_arguments(self):
        X = np.linspace(-3, 3, 37).reshape(37, 1)
        for op_type, (_, args) in UNARY.items():
            self._check(op_type, X, args, False, hu.cpu_do)

    def test_defaults_are_caffe2s(self):
        X = np.array([-2.0, -0.5, 0.0, 0.5, 0.9, 1.0, 2.0], np.float32)
        for op_type in ("Elu", "Selu", "LeakyRelu", "ThresholdedRelu", "Scale"):
            self._check(op_type, X, {}, False, hu.cpu_do)

    @given(X=floats_tensor(dtype=np.float16, lo=-2, hi=2), op_type=st.sampled_from(["Sin", "Swish", "Elu", "Softsign"]))
    @settings(max_examples=10)
    def test_float16_keeps_its_type(self, X, op_type):
        fn, args = UNARY[op_type]
        op = core.CreateOperator(op_type, ["X"], ["Y"], **args)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (fn(X.astype(np.float64), **args).astype(np.float16),),
                                   threshold=2e-3)

    @given(X=hu.tensor(dtype=np.int32, elements=st.integers(-5, 5)))
    @settings(max_examples=10)
    def test_sign_of_integers(self, X):
        op = core.CreateOperator("Sign", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: ((X > 0).astype(np.int32) - (X < 0),))

    def test_integer_input_to_a_float_op_is_refused(self):
        op = core.CreateOperator("Sin", ["X"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.arange(3, dtype=np.int32)], exception=Caffe2Error,
                               regexp="Sin #0 'Y': blob 'X': Sin does not support dtype int32")


class TestLogitReplaceNaNStump(OpTest):
    @given(X=floats_tensor(-0.1, 1.1), eps=st.sampled_from([1e-6, 1e-3, 0.1]), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_logit(self, X, eps, inplace, gc, dc):
        op = core.CreateOperator("Logit", ["X"], ["X" if inplace else "Y"], eps=eps)

        def ref(X):
            p = np.minimum(np.maximum(X.astype(np.float64), eps), 1 - eps)
            return (np.log(p / (1 - p)).astype(np.float32),)
        self.assertReferenceChecks(gc, op, [X], ref, threshold=1e-3)

    @given(X=floats_tensor(), value=st.floats(-5, 5, width=32), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_replace_nan(self, X, value, gc, dc):
        X = X.copy()
        X.reshape(-1)[::2] = np.nan
        op = core.CreateOperator("ReplaceNaN", ["X"], ["Y"], value=value)
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.where(X != X, np.float32(value), X),))

    @given(X=floats_tensor(), t=st.floats(-1, 1), lo=st.floats(-5, 5), hi=st.floats(-5, 5), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_stump_func(self, X, t, lo, hi, gc, dc):
        op = core.CreateOperator("StumpFunc", ["X"], ["Y"], threshold=t, low_value=lo, high_value=hi)
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.where(X <= np.float32(t), lo, hi).astype(np.float32),))


def _c_mod(a, d, follow):
    r = int(math.fmod(int(a), d))        # C's %: the sign of the dividend
    if follow and r != 0 and (r > 0) != (d > 0):
        r += d
    return r


class TestMod(OpTest):
    @given(X=hu.tensor(dtype=np.int64, elements=st.integers(-1000, 1000)),
           divisor=st.integers(-9, 9).filter(bool), follow=st.booleans(), itype=st.sampled_from([np.int32, np.int64]),
           inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_mod(self, X, divisor, follow, itype, inplace, gc, dc):
        X = X.astype(itype)
        op = core.CreateOperator("Mod", ["X"], ["X" if inplace else "Y"], divisor=divisor, sign_follow_divisor=follow)

        def ref(X):
            return (np.array([_c_mod(a, divisor, follow) for a in X.reshape(-1)], dtype=itype).reshape(X.shape),)
        self.assertReferenceChecks(gc, op, [X], ref)

    def test_bad_arguments(self):
        with pytest.raises(Caffe2Error, match="divisor must not be 0"):
            workspace.FeedBlob("X", np.arange(3))
            workspace.RunOperatorOnce(core.CreateOperator("Mod", ["X"], ["Y"]))
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Mod", ["X"], ["Y"], divisor=3),
                               [np.ones(2, np.float32)], exception=Caffe2Error, regexp="does not support dtype float32")


class TestPReluLinearDivide(OpTest):
    @given(X=floats_tensor(min_dim=2, max_dim=4), order=st.sampled_from(["NCHW", "NHWC"]), shared=st.booleans(),
           inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_prelu(self, X, order, shared, inplace, gc, dc):
        C = X.shape[1] if order == "NCHW" else X.shape[-1]
        slope = np.linspace(-1, 1, 1 if shared else C).astype(np.float32)
        op = core.CreateOperator("PRelu", ["X", "W"], ["X" if inplace else "Y"], order=order)

        def ref(X, W):
            out = X.copy()
            for index in np.ndindex(*X.shape):
                c = index[1] if order == "NCHW" else index[-1]
                w = W[0] if W.size == 1 else W[c]
                out[index] = X[index] if X[index] > 0 else w * X[index]
            return (out,)
        self.assertReferenceChecks(gc, op, [X, slope], ref)

    def test_prelu_bad_slope(self):
        op = core.CreateOperator("PRelu", ["X", "W"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.ones((2, 3, 4), np.float32), np.ones(4, np.float32)],
                               exception=Caffe2Error, regexp="Slope has 4 values; it must hold 1 or one per channel")

    @given(X=floats_tensor(min_dim=1, max_dim=4), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_elementwise_linear(self, X, data, gc, dc):
        axis = data.draw(st.integers(0, X.ndim))
        D = math.prod(X.shape[axis:])
        w = np.linspace(-2, 2, D).astype(np.float32)
        b = np.linspace(1, -1, D).astype(np.float32)
        op = core.CreateOperator("ElementwiseLinear", ["X", "w", "b"], ["Y"], axis=axis)

        def ref(X, w, b):
            rows = X.reshape(-1, D)
            return (np.stack([r * w + b for r in rows]).reshape(X.shape),)
        self.assertReferenceChecks(gc, op, [X, w, b], ref)

    def test_elementwise_linear_errors(self):
        op = core.CreateOperator("ElementwiseLinear", ["X", "w", "b"], ["Y"], axis=3)
        X = np.ones((2, 3), np.float32)
        self.assertRunOpRaises(hu.cpu_do, op, [X, np.ones(3, np.float32), np.ones(3, np.float32)],
                               exception=Caffe2Error, regexp="axis 3 is out of range")
        op = core.CreateOperator("ElementwiseLinear", ["X", "w", "b"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [X, np.ones(2, np.float32), np.ones(3, np.float32)],
                               exception=Caffe2Error, regexp="blob 'w': must be 1-D with D = 3")

    @given(X=floats_tensor(min_dim=1, max_dim=3), data=st.data(), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_square_root_divide(self, X, data, inplace, gc, dc):
        stype = data.draw(st.sampled_from([np.int32, np.int64, np.float32]))
        scale = np.array([data.draw(st.integers(0, 9)) for _ in range(X.shape[0])], dtype=stype)
        op = core.CreateOperator("SquareRootDivide", ["X", "scale"], ["X" if inplace else "Y"])

        def ref(X, scale):
            out = X.astype(np.float64)
            for i, s in enumerate(scale):
                if s != 0:
                    out[i] = out[i] / math.sqrt(s)
            return (out.astype(np.float32),)
        self.assertReferenceChecks(gc, op, [X, scale], ref, threshold=1e-5)

    def test_square_root_divide_errors(self):
        op = core.CreateOperator("SquareRootDivide", ["X", "s"], ["Y"])
        X = np.ones((3, 2), np.float32)
        self.assertRunOpRaises(hu.cpu_do, op, [X, np.array([1, -1, 2], np.int32)], exception=Caffe2Error,
                               regexp="scale values must be >= 0")
        self.assertRunOpRaises(hu.cpu_do, op, [X, np.array([1, 2], np.int32)], exception=Caffe2Error,
                               regexp="one value per row of data")


class TestPow(OpTest):
    @given(X=floats_tensor(0.1, 3.0), exponent=st.sampled_from([-1.0, -0.5, 0.5, 2.0, 3.0, 1.7]), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_exponent_argument(self, X, exponent, gc, dc):
        op = core.CreateOperator("Pow", ["X"], ["Y"], exponent=exponent)
        self.assertReferenceChecks(gc, op, [X], lambda X: ((X.astype(np.float64) ** exponent).astype(np.float32),),
                                   threshold=1e-5)

    @given(inputs=hu.tensors(n=2, elements=st.floats(float(np.float32(0.1)), 2.0, width=32)), inplace=st.sampled_from([None, 0, 1]),
           **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_two_inputs_of_one_shape(self, inputs, inplace, gc, dc):
        out = "Y" if inplace is None else ["X", "E"][inplace]
        op = core.CreateOperator("Pow", ["X", "E"], [out])
        self.assertReferenceChecks(gc, op, inputs, lambda X, E: ((X.astype(np.float64) ** E).astype(np.float32),),
                                   threshold=1e-5)

    @given(pair=legacy_pair(lo=0.1, hi=2.0), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_legacy_broadcast(self, pair, gc, dc):
        A, B, axis = pair
        op = core.CreateOperator("Pow", ["A", "B"], ["C"], broadcast=1, axis=axis)

        def ref(A, B):
            view = B.reshape(_legacy_view(A.shape, B.shape, axis)) if B.size != 1 else B.reshape(())
            return ((A.astype(np.float64) ** view).astype(np.float32),)
        self.assertReferenceChecks(gc, op, [A, B], ref, threshold=1e-5)

    def test_errors(self):
        X = np.ones((2, 3), np.float32)
        with pytest.raises(Caffe2Error, match="argument exponent is required"):
            workspace.FeedBlob("X", X)
            workspace.RunOperatorOnce(core.CreateOperator("Pow", ["X"], ["Y"]))
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Pow", ["X", "E"], ["Y"]),
                               [X, np.ones(3, np.float32)], exception=Caffe2Error,
                               regexp="blob 'E': shape \\[3\\] differs from X's \\[2, 3\\]")
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Pow", ["X", "E"], ["Y"], broadcast=1, axis=0),
                               [X, np.ones(3, np.float32)], exception=Caffe2Error,
                               regexp="with broadcast=1 and axis 0, B of shape \\[3\\] does not match A")
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Pow", ["X", "E"], ["Y"], broadcast=1, axis=2),
                               [X, np.ones(3, np.float32)], exception=Caffe2Error,
                               regexp="broadcast axis 2 is out of range \\[0, 1\\]")


class TestMaxMin(OpTest):
    @given(inputs=hu.ntensors(1, 4), op_type=st.sampled_from(["Max", "Min"]), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_variadic(self, inputs, op_type, inplace, gc, dc):
        names = ["X%d" % i for i in range(len(inputs))]
        op = core.CreateOperator(op_type, names, ["X0" if inplace else "Y"])

        def ref(*xs):
            stacked = np.stack(xs)
            return ((stacked.max(axis=0) if op_type == "Max" else stacked.min(axis=0)),)
        self.assertReferenceChecks(gc, op, inputs, ref)

    def test_shapes_must_match(self):
        op = core.CreateOperator("Max", ["A", "B"], ["C"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.ones((2, 3), np.float32), np.ones(3, np.float32)],
                               exception=Caffe2Error, regexp="blob 'B': float32 \\[3\\] differs from input 0's")


class TestAccumulate(OpTest):
    @given(X=floats_tensor(), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_first_call_copies_the_input(self, X, gc, dc):
        op = core.CreateOperator("Accumulate", ["X"], ["acc"], gamma=0.3)
        self.assertReferenceChecks(gc, op, [X], lambda X: (X,))

    @given(X=floats_tensor(), Y=floats_tensor(), gamma=st.floats(-1, 1, width=32))
    @settings(max_examples=15)
    def test_adds_to_the_existing_output(self, X, Y, gamma):
        workspace.ResetWorkspace()
        workspace.FeedBlob("X", X)
        workspace.FeedBlob("acc", Y)
        workspace.RunOperatorOnce(core.CreateOperator("Accumulate", ["X"], ["acc"], gamma=gamma))
        want = (np.float32(gamma) * Y + X) if Y.shape == X.shape else X     # another shape restarts it
        np.testing.assert_allclose(workspace.FetchBlob("acc"), want, rtol=1e-6, atol=1e-6)

    def test_accumulates_across_runs_and_within_a_net(self):
        X = np.array([1.0, 2.0], np.float32)
        workspace.FeedBlob("X", X)
        net = core.Net("acc_net")
        net.Accumulate("X", "acc", gamma=0.5)
        net.Accumulate("X", "acc", gamma=0.5)         # reads the value the first op wrote
        workspace.CreateNet(net)
        workspace.RunNet(net.Name())
        np.testing.assert_allclose(workspace.FetchBlob("acc"), 1.5 * X)
        workspace.RunNet(net.Name())                   # starts from the stored accumulator
        np.testing.assert_allclose(workspace.FetchBlob("acc"), 0.5 * (0.5 * 1.5 * X + X) + X)
        workspace.BenchmarkNet(net.Name(), 0, 1, True)  # the per-op (observed) path reads outputs too
        self.assertEqual(workspace.FetchBlob("acc").shape, (2,))

    def test_accumulate_cannot_run_in_place(self):
        with pytest.raises(Caffe2Error, match="cannot run in place"):
            workspace.FeedBlob("X", np.ones(2, np.float32))
            workspace.RunOperatorOnce(core.CreateOperator("Accumulate", ["X"], ["X"]))


_CAST = {DT.FLOAT: np.float32, DT.DOUBLE: np.float64, DT.FLOAT16: np.float16, DT.INT32: np.int32,
         DT.INT64: np.int64, DT.INT16: np.int16, DT.INT8: np.int8, DT.UINT8: np.uint8, DT.UINT16: np.uint16,
         DT.BOOL: np.bool_}


class TestCast(OpTest):
    @given(X=floats_tensor(-100, 100), to=st.sampled_from(sorted(_CAST)), by_name=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_float_to_every_type(self, X, to, by_name, gc, dc):
        if np.dtype(_CAST[to]).kind == "u":
            X = np.abs(X)
        name = DT.DataType.Name(to)
        op = core.CreateOperator("Cast", ["X"], ["Y"], to=name.lower() if by_name else to)

        def ref(X):
            if _CAST[to] is np.bool_:
                return (X != 0,)
            if np.dtype(_CAST[to]).kind in "iu":
                return (np.trunc(X).astype(_CAST[to]),)          # C's static_cast truncates
            return (X.astype(_CAST[to]),)
        self.assertReferenceChecks(gc, op, [X], ref, threshold=1e-3)

    @given(X=hu.tensor(dtype=np.int32, elements=st.integers(-3, 3)), to=st.sampled_from([DT.FLOAT, DT.BOOL, DT.INT64]))
    @settings(max_examples=10)
    def test_from_int(self, X, to):
        op = core.CreateOperator("Cast", ["X"], ["Y"], to=to)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: ((X != 0) if to == DT.BOOL else X.astype(_CAST[to]),))

    def test_default_is_float_and_bool_input(self):
        op = core.CreateOperator("Cast", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [np.array([True, False])], lambda X: (np.array([1.0, 0.0], np.float32),))

    def test_bad_to(self):
        X = np.ones(2, np.float32)
        for to, message in (("floaty", "unknown 'to' argument 'floaty'"), (99, "unknown 'to' value 99"),
                            ("undefined", "casting to UNDEFINED is not supported")):
            workspace.FeedBlob("X", X)
            with pytest.raises(Caffe2Error, match="Cast #0 'Y': " + message):
                workspace.RunOperatorOnce(core.CreateOperator("Cast", ["X"], ["Y"], to=to))

    def test_numbers_to_strings_as_std_to_string(self):
        # later Caffe2 casts numbers to strings (cast_op_test's test_cast_int_to_string)
        for x, want in ((np.array([[3, -12], [0, 7]], np.int32), [[b"3", b"-12"], [b"0", b"7"]]),
                        (np.array([1.5, -0.25], np.float32), [b"1.500000", b"-0.250000"]),
                        (np.array([True, False]), [b"1", b"0"])):
            workspace.FeedBlob("X", x)
            workspace.RunOperatorOnce(core.CreateOperator("Cast", ["X"], ["Y"], to=DT.STRING))
            self.assertEqual(workspace.FetchBlob("Y").tolist(), want)

    def test_inferred_type_is_the_target(self):
        net = core.Net("cast")
        net.Cast("X", "Y", to=core.DataType.INT64)
        shapes, types = workspace.InferShapesAndTypes([net], {"X": [2, 3]})
        self.assertEqual((shapes["Y"], types["Y"]), ([2, 3], DT.INT64))
