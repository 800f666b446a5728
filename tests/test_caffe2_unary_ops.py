"""Caffe2's later unary ops (operators/math/caffe2_unary.py): Erf, Gelu, Mish,
HardSigmoid, Log1p, RSqrt, Tan, Atan, Acos, Asin, Cosh, Sinh, Cbrt, Cube, Reciprocal,
against NumPy formulas written out here (float64) and torch where torch has the op."""
import math

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2py import core
from caffe2py import hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error

from _caffe2_op_helpers import floats_tensor

try:
    import torch
except ImportError:
    torch = None


def _erf(x):
    return np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape)


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


# op -> (reference on float64, arguments, input range)
REFERENCES = {
    "Erf": (_erf, {}, (-3, 3)),
    "Gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), {}, (-3, 3)),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), {}, (-3, 3)),
    "HardSigmoid": (lambda x: np.clip(0.2 * x + 0.5, 0, 1), {}, (-4, 4)),
    "Log1p": (np.log1p, {}, (-0.9, 3)),
    "RSqrt": (lambda x: 1 / np.sqrt(x), {}, (0.1, 3)),
    "Tan": (np.tan, {}, (-1.4, 1.4)),
    "Atan": (np.arctan, {}, (-3, 3)),
    "Acos": (np.arccos, {}, (-1, 1)),
    "Asin": (np.arcsin, {}, (-1, 1)),
    "Cosh": (np.cosh, {}, (-3, 3)),
    "Sinh": (np.sinh, {}, (-3, 3)),
    "Cbrt": (lambda x: np.sign(x) * np.abs(x) ** (1 / 3), {}, (-3, 3)),
    "Cube": (lambda x: x ** 3, {}, (-3, 3)),
    "Reciprocal": (lambda x: 1 / x, {}, (0.1, 3)),
}


class TestCaffe2UnaryOps(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    @given(op_type=st.sampled_from(sorted(REFERENCES)), inplace=st.booleans(), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=40, deadline=None)
    def test_float32(self, op_type, inplace, data, gc, dc):
        fn, args, (lo, hi) = REFERENCES[op_type]
        x = data.draw(floats_tensor(lo, hi))
        op = core.CreateOperator(op_type, ["X"], ["X" if inplace else "Y"], **args)
        self.assertReferenceChecks(gc, op, [x], lambda x: (fn(x.astype(np.float64)).astype(np.float32),),
                                   threshold=1e-5, atol=1e-6)

    def test_float64_and_float16(self):
        for op_type, (fn, args, (lo, hi)) in REFERENCES.items():
            x = np.linspace(lo, hi, 23)
            op = core.CreateOperator(op_type, ["X"], ["Y"], **args)
            self.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: (fn(x),), threshold=1e-12, atol=1e-12)
            self.assertReferenceChecks(hu.cpu_do, op, [x.astype(np.float16)],
                                       lambda x: (fn(x.astype(np.float64)).astype(np.float16),), threshold=2e-3)

    def test_gelu_fast_and_hard_sigmoid_arguments(self):
        x = np.linspace(-4, 4, 33).astype(np.float32)

        def fast(x):
            x = x.astype(np.float64)
            return (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))).astype(np.float32),
        self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("Gelu", ["X"], ["Y"], fast_gelu=1), [x], fast)
        self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("HardSigmoid", ["X"], ["Y"], alpha=0.3, beta=0.2),
                                   [x], lambda x: (np.clip(0.3 * x + 0.2, 0, 1).astype(np.float32),), atol=1e-6)

    def test_cube_of_integers_wraps(self):
        x = np.array([-3, 0, 2, 2000], np.int32)
        self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("Cube", ["X"], ["Y"]), [x],
                                   lambda x: ((x.astype(np.int64) ** 3).astype(np.int32),))

    def test_mish_is_finite_for_large_inputs(self):
        x = np.array([-100, -30, 30, 88, 100], np.float32)
        self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("Mish", ["X"], ["Y"]), [x],
                                   lambda x: (np.where(x > 0, x, 0).astype(np.float32),), atol=1e-6)

    def test_integer_input_to_a_float_op_is_refused(self):
        op = core.CreateOperator("Erf", ["X"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.arange(3, dtype=np.int32)], exception=Caffe2Error,
                               regexp="Erf does not support dtype int32")


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("op_type,torch_fn", [
    ("Erf", lambda t: torch.erf(t)), ("Gelu", lambda t: torch.nn.functional.gelu(t)),
    ("Mish", lambda t: torch.nn.functional.mish(t)), ("Log1p", lambda t: torch.log1p(t)),
    ("RSqrt", lambda t: torch.rsqrt(t)), ("Tan", lambda t: torch.tan(t)), ("Atan", lambda t: torch.atan(t)),
    ("Acos", lambda t: torch.acos(t)), ("Asin", lambda t: torch.asin(t)), ("Cosh", lambda t: torch.cosh(t)),
    ("Sinh", lambda t: torch.sinh(t)), ("Reciprocal", lambda t: torch.reciprocal(t))])
def test_matches_torch(op_type, torch_fn):
    _, args, (lo, hi) = REFERENCES[op_type]
    x = np.random.default_rng(1).uniform(lo, hi, (4, 5)).astype(np.float32)
    from caffe2py import workspace
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, ["X"], ["Y"], **args))
    expected = torch_fn(torch.tensor(x.astype(np.float64))).numpy()
    np.testing.assert_allclose(workspace.FetchBlob("Y"), expected, rtol=1e-5, atol=1e-6)
