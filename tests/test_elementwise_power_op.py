"""Caffe2's older ElementwisePower (operators/math/caffe2_math.py): x ** exponent on
float tensors, against NumPy."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True


class TestElementwisePower(OpTest):
    @given(X=hu.tensor(elements=hu.floats(min_value=0.1, max_value=5.0)),
           exponent=st.floats(min_value=-2.0, max_value=2.0, width=32), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_matches_numpy(self, X, exponent, gc, dc):
        op = core.CreateOperator("ElementwisePower", ["X"], ["Y"], exponent=exponent)
        self.assertReferenceChecks(gc, op, [X], lambda X: (X ** np.float32(exponent),))

    def test_negative_base_with_a_fractional_exponent_is_nan(self):
        op = core.CreateOperator("ElementwisePower", ["X"], ["Y"], exponent=0.5)
        X = np.array([-4.0, 4.0, 0.0], np.float32)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([np.nan, 2.0, 0.0], np.float32),))

    def test_integer_input_is_refused(self):
        op = core.CreateOperator("ElementwisePower", ["X"], ["Y"], exponent=2.0)
        self.assertRunOpRaises(hu.cpu_do, op, [np.ones(3, np.int32)], exception=Caffe2Error,
                               regexp="ElementwisePower does not support dtype int32")
