"""Caffe2's BitwiseAnd, BitwiseOr, BitwiseXor (operators/math/caffe2_logic.py) on bool,
int32 and int64 tensors, with NumPy broadcasting and Caffe2's legacy broadcast=1, axis
form, against NumPy's bitwise functions."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py import gradients
from caffe2py.errors import Caffe2Error

NUMPY = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}
TYPES = [np.bool_, np.int32, np.int64]


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True


def _values(shape, dtype, seed):
    rng = np.random.RandomState(seed)
    if dtype == np.bool_:
        return rng.rand(*shape) < 0.5
    info = np.iinfo(dtype)
    # the full range, negatives and the extremes included (two's complement bits)
    return rng.randint(info.min, info.max, size=shape, dtype=dtype)


@st.composite
def numpy_shapes(draw):
    """Two shapes that broadcast by NumPy's rules (size-1 dims, missing leading dims)."""
    out = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))
    a = [d if draw(st.booleans()) else 1 for d in out][draw(st.integers(0, len(out))):]
    b = [d if draw(st.booleans()) else 1 for d in out][draw(st.integers(0, len(out))):]
    return a, b


class TestBitwise(OpTest):
    @given(shapes=numpy_shapes(), op_type=st.sampled_from(sorted(NUMPY)), dtype=st.sampled_from(TYPES),
           seed=st.integers(0, 1000), **hu.gcs_cpu_only)
    @settings(max_examples=30)
    def test_numpy_broadcasting(self, shapes, op_type, dtype, seed, gc, dc):
        A, B = _values(shapes[0], dtype, seed), _values(shapes[1], dtype, seed + 1)
        op = core.CreateOperator(op_type, ["A", "B"], ["C"])
        self.assertReferenceChecks(gc, op, [A, B], lambda A, B: (NUMPY[op_type](A, B),))

    def test_known_values(self):
        A = np.array([12, -1, 0, 7], np.int32)
        B = np.array([10, 5, 9, -8], np.int32)
        expected = {"BitwiseAnd": [8, 5, 0, 0], "BitwiseOr": [14, -1, 9, -1], "BitwiseXor": [6, -6, 9, -1]}
        for op_type, want in expected.items():
            op = core.CreateOperator(op_type, ["A", "B"], ["C"])
            self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (np.array(want, np.int32),))

    def test_legacy_broadcast_with_axis(self):
        A = _values((2, 3, 4, 5), np.int64, 0)
        for op_type, fn in NUMPY.items():
            # B matches A's dims 1..2 (axis=1), with a trailing 1 ignored
            B = _values((3, 4, 1), np.int64, 1)
            op = core.CreateOperator(op_type, ["A", "B"], ["C"], broadcast=1, axis=1)
            self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (fn(A, B.reshape(1, 3, 4, 1)),))
            # default axis: B matches A's trailing dims
            B = _values((4, 5), np.int64, 2)
            op = core.CreateOperator(op_type, ["A", "B"], ["C"], broadcast=1)
            self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (fn(A, B[None, None]),))
            # a one-element B is a scalar
            B = np.array([6], np.int64)
            self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (fn(A, B[0]),))

    def test_in_place_on_a(self):
        A, B = _values((3, 4), np.int32, 3), _values((4,), np.int32, 4)
        for op_type, fn in NUMPY.items():
            workspace.FeedBlob("A", A)
            workspace.FeedBlob("B", B)
            workspace.RunOperatorOnce(core.CreateOperator(op_type, ["A", "B"], ["A"]))
            np.testing.assert_array_equal(workspace.FetchBlob("A"), fn(A, B))


class TestBitwiseErrors(OpTest):
    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)

    def test_float_inputs_are_refused(self):
        for op_type in NUMPY:
            op = core.CreateOperator(op_type, ["A", "B"], ["C"])
            self._raises(op, [np.ones(3, np.float32), np.ones(3, np.float32)],
                         r"%s #0 'C'.*blob 'A'.*%s does not support dtype float32 \(supported: bool, int32, int64\)"
                         % (op_type, op_type))

    def test_mixed_types_are_refused(self):
        self._raises(core.CreateOperator("BitwiseOr", ["A", "B"], ["C"]),
                     [np.ones(3, np.int32), np.ones(3, np.int64)], "blob 'B': dtype int64 differs from A's int32")

    def test_shapes_that_do_not_broadcast(self):
        A, B = np.ones((2, 3), np.int32), np.ones((2,), np.int32)
        self._raises(core.CreateOperator("BitwiseXor", ["A", "B"], ["C"]), [A, B],
                     r"shapes \[2, 3\] of 'A' and \[2\] of 'B' do not broadcast")
        self._raises(core.CreateOperator("BitwiseXor", ["A", "B"], ["C"], broadcast=1), [A, B],
                     r"with broadcast=1 and axis 1, B of shape \[2\] does not match A of shape \[2, 3\]")


@pytest.mark.parametrize("op_type", sorted(NUMPY))
def test_no_gradient_by_design(op_type):
    op = core.CreateOperator(op_type, ["A", "B"], ["C"])
    with pytest.raises(Caffe2Error, match="should not ask for the gradient of operator type '%s'" % op_type):
        gradients.get_gradient_for_op(op, ["C_grad"])

