"""Caffe2's comparison and logic ops (operators/math/caffe2_logic.py): legacy broadcast=1
and NumPy broadcasting, Not, Where, IsMemberOf; hypothesis_test_util against NumPy
references written here, through the caffe2.python aliases."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

from _caffe2_op_helpers import legacy_pair, legacy_view as _legacy_view

DT = caffe2_pb2.TensorProto

COMPARE = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
           "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}
LOGIC = {"And": lambda a, b: a & b, "Or": lambda a, b: a | b, "Xor": lambda a, b: a ^ b}


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True


@st.composite
def numpy_pair(draw, dtype):
    """(A, B) whose shapes broadcast by NumPy's rules (dims of 1, missing leading dims)."""
    out = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))
    a_shape = [d if draw(st.booleans()) else 1 for d in out][draw(st.integers(0, len(out))):]
    b_shape = [d if draw(st.booleans()) else 1 for d in out][draw(st.integers(0, len(out))):]
    if draw(st.booleans()):
        a_shape, b_shape = b_shape, a_shape
    elements = st.booleans() if dtype == np.bool_ else st.integers(-2, 2)
    A = draw(hu.arrays(a_shape, dtype, elements))
    B = draw(hu.arrays(b_shape, dtype, elements))
    return A, B


def _expand(A, B):
    """NumPy broadcasting written out: both operands tiled to the common shape."""
    nd = max(A.ndim, B.ndim)
    a = A.reshape((1,) * (nd - A.ndim) + A.shape)
    b = B.reshape((1,) * (nd - B.ndim) + B.shape)
    shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
    return (np.tile(a, [s // d for s, d in zip(shape, a.shape)]), np.tile(b, [s // d for s, d in zip(shape, b.shape)]))


class TestComparisons(OpTest):
    @given(pair=numpy_pair(np.int32), op_type=st.sampled_from(sorted(COMPARE)),
           dtype=st.sampled_from([np.int32, np.int64, np.float32, np.float64]), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_numpy_broadcasting(self, pair, op_type, dtype, gc, dc):
        A, B = (x.astype(dtype) for x in pair)
        op = core.CreateOperator(op_type, ["A", "B"], ["C"])
        self.assertReferenceChecks(gc, op, [A, B], lambda A, B: (COMPARE[op_type](*_expand(A, B)),))

    @given(pair=legacy_pair(), op_type=st.sampled_from(sorted(COMPARE)), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_legacy_broadcast(self, pair, op_type, gc, dc):
        A, B, axis = pair
        op = core.CreateOperator(op_type, ["A", "B"], ["C"], broadcast=1, axis=axis)

        def ref(A, B):
            view = B.reshape(()) if B.size == 1 else B.reshape(_legacy_view(A.shape, B.shape, axis))
            return (COMPARE[op_type](A, view),)
        self.assertReferenceChecks(gc, op, [A, B], ref)

    def test_caffe2_catalogue_examples(self):
        A = np.array([1, 5, 2, 9, 12, 3])
        B = np.array([1, 3, 4, 9, 12, 8])
        expected = {"LT": [0, 0, 1, 0, 0, 1], "LE": [1, 0, 1, 1, 1, 1], "GT": [0, 1, 0, 0, 0, 0],
                    "GE": [1, 1, 0, 1, 1, 0], "EQ": [1, 0, 0, 1, 1, 0], "NE": [0, 1, 1, 0, 0, 1]}
        for op_type, want in expected.items():
            op = core.CreateOperator(op_type, ["A", "B"], ["C"])
            self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (np.array(want, dtype=bool),))

    def test_axis_str_picks_the_axis_from_order(self):
        A = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
        B = np.array([1.0, 13.0, 30.0], np.float32)
        op = core.CreateOperator("GT", ["A", "B"], ["C"], broadcast=1, axis_str="C", order="NCHW")
        self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (A > B.reshape(1, 3, 1, 1),))

    def test_bools_compare(self):
        op = core.CreateOperator("EQ", ["A", "B"], ["C"])
        A, B = np.array([True, False, True]), np.array([True, True, False])
        self.assertReferenceChecks(hu.cpu_do, op, [A, B], lambda A, B: (np.array([True, False, False]),))


class TestBroadcastErrors(OpTest):
    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)

    def test_shapes_that_do_not_broadcast(self):
        A, B = np.ones((2, 3), np.float32), np.ones((2,), np.float32)
        self._raises(core.CreateOperator("LT", ["A", "B"], ["C"]), [A, B],
                     r"LT #0 'C': shapes \[2, 3\] of 'A' and \[2\] of 'B' do not broadcast")
        self._raises(core.CreateOperator("LT", ["A", "B"], ["C"], broadcast=1), [A, B],
                     r"blob 'B': with broadcast=1 and axis 1, B of shape \[2\] does not match A of shape \[2, 3\]")
        # legacy broadcasting has no size-1 expansion inside B's dims
        self._raises(core.CreateOperator("EQ", ["A", "B"], ["C"], broadcast=1, axis=0),
                     [np.ones((2, 3, 4), np.float32), np.ones((2, 1, 4), np.float32)], "does not match A")

    def test_axis_out_of_range(self):
        A, B = np.ones((2, 3), np.float32), np.ones((3,), np.float32)
        self._raises(core.CreateOperator("GE", ["A", "B"], ["C"], broadcast=1, axis=5), [A, B],
                     r"broadcast axis 5 is out of range \[0, 1\]")
        self._raises(core.CreateOperator("GE", ["A", "B"], ["C"], broadcast=1), [B, A],
                     r"B \(shape \[2, 3\]\) must not have more dims than A")

    def test_bad_axis_str(self):
        A, B = np.ones((2, 3), np.float32), np.ones((3,), np.float32)
        self._raises(core.CreateOperator("EQ", ["A", "B"], ["C"], broadcast=1, axis_str="X"), [A, B],
                     "axis_str 'X' is not one letter of order 'NCHW'")
        self._raises(core.CreateOperator("EQ", ["A", "B"], ["C"], broadcast=1, axis_str="C", axis=1), [A, B],
                     "axis and axis_str cannot be used together")

    def test_types(self):
        self._raises(core.CreateOperator("EQ", ["A", "B"], ["C"]), [np.ones(2, np.float32), np.ones(2, np.float64)],
                     "blob 'B': dtype float64 differs from A's float32")
        self._raises(core.CreateOperator("And", ["A", "B"], ["C"]), [np.ones(2, np.float32), np.ones(2, np.float32)],
                     "And does not support dtype float32")

    def test_in_place_rules(self):
        with pytest.raises(Caffe2Error, match="cannot run in place"):
            workspace.FeedBlob("A", np.ones(2, np.float32))
            workspace.FeedBlob("B", np.ones(2, np.float32))
            workspace.RunOperatorOnce(core.CreateOperator("LT", ["A", "B"], ["A"]))
        A, B = np.ones((1, 3), bool), np.ones((2, 3), bool)
        self._raises(core.CreateOperator("And", ["A", "B"], ["A"]), [A, B],
                     r"in place, the output shape \[2, 3\] must equal the shape of the input it replaces")


class TestLogic(OpTest):
    @given(pair=numpy_pair(np.bool_), op_type=st.sampled_from(sorted(LOGIC)), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_numpy_broadcasting(self, pair, op_type, inplace, gc, dc):
        A, B = pair
        if inplace and np.broadcast_shapes(A.shape, B.shape) != A.shape:
            inplace = False
        op = core.CreateOperator(op_type, ["A", "B"], ["A" if inplace else "C"])
        self.assertReferenceChecks(gc, op, [A, B], lambda A, B: (LOGIC[op_type](*_expand(A, B)),))

    @given(pair=legacy_pair(dtype=np.bool_), op_type=st.sampled_from(sorted(LOGIC)), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_legacy_broadcast(self, pair, op_type, gc, dc):
        A, B, axis = pair
        op = core.CreateOperator(op_type, ["A", "B"], ["C"], broadcast=1, axis=axis)

        def ref(A, B):
            view = B.reshape(()) if B.size == 1 else B.reshape(_legacy_view(A.shape, B.shape, axis))
            return (LOGIC[op_type](A, view),)
        self.assertReferenceChecks(gc, op, [A, B], ref)

    @given(X=hu.tensor(dtype=np.bool_), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_not(self, X, inplace, gc, dc):
        op = core.CreateOperator("Not", ["X"], ["X" if inplace else "Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (X == False,))  # noqa: E712
        self.assertRunOpRaises(gc, op, [X.astype(np.int32)], exception=Caffe2Error, regexp="Not does not support")


class TestWhere(OpTest):
    @given(X=hu.tensor(), data=st.data(), dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_]),
           **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_elementwise(self, X, data, dtype, gc, dc):
        X = (X * 10).astype(dtype)
        Y = (-X).astype(dtype) if dtype != np.bool_ else ~X
        C = data.draw(hu.arrays(X.shape, np.bool_))
        op = core.CreateOperator("Where", ["C", "X", "Y"], ["Z"])

        def ref(C, X, Y):
            out = Y.copy()
            for index in np.ndindex(*C.shape):
                if C[index]:
                    out[index] = X[index]
            return (out,)
        self.assertReferenceChecks(gc, op, [C, X, Y], ref)

    @given(X=hu.tensor(min_dim=1), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_broadcast_on_rows(self, X, data, gc, dc):
        Y = X + 5
        C = data.draw(hu.arrays([X.shape[0]], np.bool_))
        op = core.CreateOperator("Where", ["C", "X", "Y"], ["Z"], broadcast_on_rows=1)
        self.assertReferenceChecks(gc, op, [C, X, Y], lambda C, X, Y: (np.stack([X[i] if c else Y[i] for i, c in enumerate(C)]),))

    def test_strings_and_errors(self):
        X = np.array(["a", "b", "c"], dtype=object)
        Y = np.array(["x", "y", "z"], dtype=object)
        C = np.array([True, False, True])
        op = core.CreateOperator("Where", ["C", "X", "Y"], ["Z"])
        self.assertReferenceChecks(hu.cpu_do, op, [C, X, Y], lambda C, X, Y: (np.array([b"a", b"y", b"c"], dtype=object),))
        self.assertRunOpRaises(hu.cpu_do, op, [C[:2], X, Y], exception=Caffe2Error,
                               regexp=r"blob 'C': shape \[2\] differs from X's \[3\]")
        self.assertRunOpRaises(hu.cpu_do, op, [C.astype(np.int32), X, Y], exception=Caffe2Error,
                               regexp="Where does not support dtype int32")
        rows = core.CreateOperator("Where", ["C", "X", "Y"], ["Z"], broadcast_on_rows=1)
        self.assertRunOpRaises(hu.cpu_do, rows, [np.ones((3, 1), bool), np.ones((3, 2)), np.ones((3, 2))],
                               exception=Caffe2Error, regexp="C must be 1-D with one value per row")


class TestIsMemberOf(OpTest):
    @given(X=hu.tensor(dtype=np.int64, elements=st.integers(-5, 5)), values=st.lists(st.integers(-5, 5), max_size=5),
           itype=st.sampled_from([np.int32, np.int64]), with_dtype=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_integers(self, X, values, itype, with_dtype, gc, dc):
        X = X.astype(itype)
        extra = {"dtype": DT.INT32 if itype == np.int32 else DT.INT64} if with_dtype else {}
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=values, **extra)
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.array([v in values for v in X.reshape(-1)],
                                                                    dtype=bool).reshape(X.shape),))

    def test_strings_and_bools(self):
        X = np.array([["ab", "c"], ["d", "ab"]], dtype=object)
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=["ab", "d"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([[True, False], [True, True]]),))
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=[1], dtype=DT.BOOL)
        self.assertReferenceChecks(hu.cpu_do, op, [np.array([True, False])], lambda X: (np.array([True, False]),))
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"])        # no values: nothing is a member
        self.assertReferenceChecks(hu.cpu_do, op, [np.array([1, 2], np.int64)], lambda X: (np.array([False, False]),))

    def test_errors(self):
        X = np.arange(3, dtype=np.int32)
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=[1], dtype=DT.INT64)
        self.assertRunOpRaises(hu.cpu_do, op, [X], exception=Caffe2Error, regexp="dtype int32 differs from argument dtype int64")
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=[1], dtype=DT.FLOAT)
        self.assertRunOpRaises(hu.cpu_do, op, [X], exception=Caffe2Error, regexp="unexpected 'dtype' value 1")
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=[2 ** 40])
        self.assertRunOpRaises(hu.cpu_do, op, [X], exception=Caffe2Error, regexp="does not fit int32")
        op = core.CreateOperator("IsMemberOf", ["X"], ["Y"], value=[1])
        self.assertRunOpRaises(hu.cpu_do, op, [X.astype(np.float32)], exception=Caffe2Error,
                               regexp="IsMemberOf does not support dtype float32")
