"""Caffe2's shape and tensor-utility ops (operators/tensor/caffe2_shape.py) with
hypothesis_test_util against NumPy references written here, through the
caffe2.python aliases."""
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

DT = caffe2_pb2.TensorProto


class OpTest(hu.HypothesisTestCase):
    assert_shape_inference = True
    check_output_dtypes = True

    def _raises(self, op, inputs, regexp):
        self.assertRunOpRaises(hu.cpu_do, op, inputs, exception=Caffe2Error, regexp=regexp)


class TestExpandSqueeze(OpTest):
    @given(X=hu.tensor(min_dim=0, max_dim=3), data=st.data(), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_expand_dims(self, X, data, inplace, gc, dc):
        n_new = data.draw(st.integers(1, 3))
        dims = data.draw(st.lists(st.integers(0, X.ndim + n_new - 1), min_size=n_new, max_size=n_new, unique=True))
        dims_arg = dims + dims[:1]                       # a repeat is ignored
        op = core.CreateOperator("ExpandDims", ["X"], ["X" if inplace else "Y"], dims=dims_arg)

        def ref(X):
            shape = list(X.shape)
            for d in sorted(dims):
                shape.insert(d, 1)
            return (X.reshape(shape),)
        self.assertReferenceChecks(gc, op, [X], ref)

    @given(X=hu.tensor(min_dim=1, max_dim=3), data=st.data(), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_squeeze(self, X, data, inplace, gc, dc):
        shape = list(X.shape)
        ones = data.draw(st.lists(st.integers(0, len(shape)), min_size=1, max_size=3, unique=True))
        for d in sorted(ones):
            shape.insert(d, 1)
        X = X.reshape(shape)
        op = core.CreateOperator("Squeeze", ["X"], ["X" if inplace else "Y"], dims=ones[::-1])
        self.assertReferenceChecks(gc, op, [X], lambda X: (X.reshape([s for i, s in enumerate(X.shape) if i not in ones]),))

    def test_bad_dims(self):
        X = np.ones((2, 1, 3), np.float32)
        self._raises(core.CreateOperator("Squeeze", ["X"], ["Y"], dims=[0]), [X],
                     r"Squeeze #0 'Y': blob 'X': dim 0 of shape \[2, 1, 3\] is 2, not 1")
        self._raises(core.CreateOperator("Squeeze", ["X"], ["Y"], dims=[3]), [X], "has 3 dims; dims \\[3\\] need at least 4")
        self._raises(core.CreateOperator("Squeeze", ["X"], ["Y"], dims=[-1]), [X], "dimension ids must be non-negative")
        self._raises(core.CreateOperator("ExpandDims", ["X"], ["Y"], dims=[5]), [X], "dims \\[5\\] need at least 5")
        self._raises(core.CreateOperator("ExpandDims", ["X"], ["Y"], dims=[]), [X],
                     "argument dims must be provided and not empty")
        with pytest.raises(Caffe2Error, match="required argument 'dims' is missing"):
            workspace.FeedBlob("X", X)
            workspace.RunOperatorOnce(core.CreateOperator("ExpandDims", ["X"], ["Y"]))


class TestReshapes(OpTest):
    @given(X=hu.tensor(min_dim=1), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_flatten_to_vec(self, X, gc, dc):
        op = core.CreateOperator("FlattenToVec", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.array([v for v in X.flat], dtype=X.dtype),))

    @given(X=hu.tensor(min_dim=2), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=10)
    def test_merge_dim(self, X, inplace, gc, dc):
        op = core.CreateOperator("MergeDim", ["X"], ["X" if inplace else "Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (X.reshape((X.shape[0] * X.shape[1],) + X.shape[2:]),))

    @given(X=hu.tensor(min_dim=1), data=st.data(), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_prepend_dim(self, X, data, inplace, gc, dc):
        size = data.draw(st.sampled_from([d for d in range(1, X.shape[0] + 1) if X.shape[0] % d == 0]))
        op = core.CreateOperator("PrependDim", ["X"], ["X" if inplace else "Y"], dim_size=size)
        self.assertReferenceChecks(gc, op, [X], lambda X: (X.reshape((size, X.shape[0] // size) + X.shape[1:]),))

    @given(X=hu.tensor(), data=st.data(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_resize_like(self, X, data, gc, dc):
        like = np.zeros(data.draw(st.permutations(X.shape)), dtype=np.int32)
        op = core.CreateOperator("ResizeLike", ["X", "like"], ["Y"])
        self.assertReferenceChecks(gc, op, [X, like], lambda X, like: (X.reshape(-1).reshape(like.shape),))

    def test_errors(self):
        self._raises(core.CreateOperator("FlattenToVec", ["X"], ["Y"]), [np.float32(1)], "rank of the tensor must be >= 1")
        self._raises(core.CreateOperator("MergeDim", ["X"], ["Y"]), [np.ones(3)], "must be at least 2-D")
        self._raises(core.CreateOperator("PrependDim", ["X"], ["Y"], dim_size=2), [np.ones((3, 2))],
                     "first dim 3 is not a multiple of dim_size 2")
        self._raises(core.CreateOperator("PrependDim", ["X"], ["Y"], dim_size=0), [np.ones((3, 2))],
                     "dim_size must be greater than zero")
        self._raises(core.CreateOperator("ResizeLike", ["X", "L"], ["Y"]), [np.ones(6), np.ones((2, 2))],
                     r"blob 'X': has 6 elements \(shape \[6\]\) but 'L' has 4")


class TestSizeAndEmptiness(OpTest):
    @given(X=hu.tensor(min_dim=0, max_dim=3, min_value=0, max_value=3), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_size_has_elements_is_empty(self, X, gc, dc):
        count = math.prod(X.shape)
        self.assertReferenceChecks(gc, core.CreateOperator("Size", ["X"], ["Y"]), [X],
                                   lambda X: (np.array(count, dtype=np.int64),))
        self.assertReferenceChecks(gc, core.CreateOperator("IsEmpty", ["X"], ["Y"]), [X],
                                   lambda X: (np.array(count == 0),))
        self.assertReferenceChecks(gc, core.CreateOperator("HasElements", ["X"], ["Y"]), [X],
                                   lambda X: (np.array(count > 0),))

    def test_has_elements_of_several_inputs(self):
        op = core.CreateOperator("HasElements", ["A", "B"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros(0), np.zeros((2, 0))], lambda A, B: (np.array(False),))
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros(0), np.zeros((1, 1))], lambda A, B: (np.array(True),))


class TestRange(OpTest):
    @given(start=st.integers(-20, 20), stop=st.integers(-20, 20), step=st.integers(-5, 5).filter(bool),
           dtype=st.sampled_from([np.int32, np.int64]), n=st.sampled_from([1, 2, 3]), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_integers(self, start, stop, step, dtype, n, gc, dc):
        if n == 1:
            start, step = 0, 1
        elif n == 2:
            step = 1
        values = [start, stop, step][:n] if n > 1 else [stop]
        inputs = [np.array(v, dtype=dtype) for v in values]
        op = core.CreateOperator("Range", ["a", "b", "c"][:n], ["Y"])

        def ref(*xs):
            out, v = [], start
            while (step > 0 and v < stop) or (step < 0 and v > stop):
                out.append(v)
                v += step
            return (np.array(out, dtype=dtype),)
        self.assertReferenceChecks(gc, op, inputs, ref)

    @given(start=st.sampled_from([-2.0, 0.0, 0.5]), stop=st.sampled_from([-1.5, 1.0, 3.25]),
           step=st.sampled_from([-0.5, 0.25, 1.0]), dtype=st.sampled_from([np.float32, np.float64]))
    @settings(max_examples=15)
    def test_floats(self, start, stop, step, dtype):
        op = core.CreateOperator("Range", ["a", "b", "c"], ["Y"])
        count = max(0, math.ceil((stop - start) / step))
        self.assertReferenceChecks(hu.cpu_do, op, [np.array(v, dtype=dtype) for v in (start, stop, step)],
                                   lambda *xs: (np.array([start + i * step for i in range(count)], dtype=dtype),))

    def test_errors(self):
        op = core.CreateOperator("Range", ["a", "b", "c"], ["Y"])
        self._raises(op, [np.array(0), np.array(5), np.array(0)], "blob 'c': step size cannot be 0")
        self._raises(op, [np.array(0), np.array([5]), np.array(1)], r"blob 'b': all inputs must be scalars \(0-d\)")
        self._raises(op, [np.array(0), np.array(5.0), np.array(1)], "blob 'b': dtype float64 differs from input 0's int64")
        self._raises(op, [np.array(0.0), np.array(np.inf), np.array(1.0)], "must be finite")


class TestSlice(OpTest):
    @given(X=hu.tensor(min_dim=1, max_dim=3), data=st.data(), as_inputs=st.booleans(),
           itype=st.sampled_from([np.int32, np.int64]), **hu.gcs_cpu_only)
    @settings(max_examples=25)
    def test_slice(self, X, data, as_inputs, itype, gc, dc):
        k = data.draw(st.integers(1, X.ndim))
        starts, ends = [], []
        for d in X.shape[:k]:
            s = data.draw(st.integers(-d - 1, d))
            e = data.draw(st.integers(-d - 1, d + 2))
            if (s if s >= 0 else d + 1 + s) > (min(e, d) if e >= 0 else d + 1 + e):
                s, e = 0, -1
            starts.append(s)
            ends.append(e)

        def ref(X, *unused):
            index = []
            for i, d in enumerate(X.shape):
                if i >= k:
                    index.append(slice(None))
                    continue
                s = starts[i] if starts[i] >= 0 else d + 1 + starts[i]
                e = ends[i] if ends[i] >= 0 else d + 1 + ends[i]
                index.append(slice(min(s, d), min(e, d)))
            return (X[tuple(index)],)
        if as_inputs:
            op = core.CreateOperator("Slice", ["X", "s", "e"], ["Y"])
            self.assertReferenceChecks(gc, op, [X, np.array(starts, itype), np.array(ends, itype)], ref)
        else:
            op = core.CreateOperator("Slice", ["X"], ["Y"], starts=starts, ends=ends)
            self.assertReferenceChecks(gc, op, [X], ref)

    def test_caffe2_example_and_errors(self):
        X = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32)
        op = core.CreateOperator("Slice", ["X"], ["Y"], starts=[0, 1], ends=[-1, 3])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([[2, 3], [6, 7]], np.float32),))
        self._raises(core.CreateOperator("Slice", ["X"], ["Y"], starts=[0, 3], ends=[-1, 1]), [X],
                     r"slice \[3, 1\) of dim 1 \(size 4\) is not valid")
        self._raises(core.CreateOperator("Slice", ["X"], ["Y"], starts=[0, 0, 0], ends=[1, 1, 1]), [X],
                     "has 2 dims but starts/ends give 3")
        self._raises(core.CreateOperator("Slice", ["X"], ["Y"], starts=[0], ends=[1, 2]), [X], "differ in length")
        self._raises(core.CreateOperator("Slice", ["X", "s", "e"], ["Y"]), [X, np.array([0.0]), np.array([1])],
                     "Slice does not support dtype float64")
        self._raises(core.CreateOperator("Slice", ["X"], ["Y"]), [X], "needs arguments starts and ends")


class TestScatterAssign(OpTest):
    @given(data=hu.tensor(min_dim=1, max_dim=3), draw=st.data(), itype=st.sampled_from([np.int32, np.int64]),
           dtype=st.sampled_from([np.float32, np.float16, np.int32, np.int64, np.uint8]), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_scatter_assign(self, data, draw, itype, dtype, gc, dc):
        data = (data * 10).astype(dtype)
        n = data.shape[0]
        indices = np.array(draw.draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True)), dtype=itype)
        slices = (np.arange(len(indices) * math.prod(data.shape[1:])) + 7).astype(dtype)
        slices = slices.reshape((len(indices),) + data.shape[1:])
        op = core.CreateOperator("ScatterAssign", ["data", "indices", "slices"], ["data"])

        def ref(data, indices, slices):
            out = data.copy()
            for k, i in enumerate(indices):
                out[i] = slices[k]
            return (out,)
        self.assertReferenceChecks(gc, op, [data, indices, slices], ref)

    def test_errors_leave_data_alone(self):
        data = np.zeros((3, 2), np.float32)
        op = core.CreateOperator("ScatterAssign", ["D", "I", "S"], ["D"])
        self._raises(op, [data, np.array([0, 3], np.int64), np.ones((2, 2), np.float32)],
                     r"blob 'I': index 3 is out of range \[0, 3\) for DATA 'D'")
        self._raises(op, [data, np.array([-1], np.int32), np.ones((1, 2), np.float32)], "index -1 is out of range")
        self._raises(op, [data, np.array([0], np.int64), np.ones((1, 3), np.float32)], "has 3 elements; 1 indices")
        self._raises(op, [data, np.array([0], np.int64), np.ones((1, 2), np.float64)], "dtype float64 differs")
        workspace.FeedBlob("D", data)
        workspace.FeedBlob("I", np.array([0, 5]))
        workspace.FeedBlob("S", np.ones((2, 2), np.float32))
        with pytest.raises(Caffe2Error):
            workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("D"), data)
        with pytest.raises(Caffe2Error, match="must run in place"):
            workspace.RunOperatorOnce(core.CreateOperator("ScatterAssign", ["D", "I", "S"], ["E"]))


class TestCoalesceAndCopies(OpTest):
    @given(inputs=st.lists(hu.tensor(max_dim=3), min_size=1, max_size=4), inplace=st.booleans(), **hu.gcs_cpu_only)
    @settings(max_examples=15)
    def test_unsafe_coalesce(self, inputs, inplace, gc, dc):
        names = ["X%d" % i for i in range(len(inputs))]
        outs = (names if inplace else ["Y%d" % i for i in range(len(inputs))]) + ["coalesced"]
        op = core.CreateOperator("UnsafeCoalesce", names, outs)

        def ref(*xs):
            return tuple(xs) + (np.concatenate([x.ravel() for x in xs]),)
        self.assertReferenceChecks(gc, op, inputs, ref)

    def test_unsafe_coalesce_checks(self):
        with pytest.raises(Caffe2Error, match="not a valid combination"):
            workspace.FeedBlob("A", np.ones(2, np.float32))
            workspace.RunOperatorOnce(core.CreateOperator("UnsafeCoalesce", ["A"], ["A"]))
        self._raises(core.CreateOperator("UnsafeCoalesce", ["A"], ["B", "C"]), [np.ones(2, np.int32)],
                     "UnsafeCoalesce does not support dtype int32")

    def test_unsafe_coalesce_outputs_share_one_buffer(self):
        # as Caffe2: feeding the coalesced blob (same type and size) writes into the storage
        # the other outputs view, and feeding one view shows in the coalesced blob
        xs = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float32([7, 8])]
        for i, x in enumerate(xs):
            workspace.FeedBlob("x%d" % i, x)
        workspace.RunOperatorOnce(core.CreateOperator("UnsafeCoalesce", ["x0", "x1"], ["x0", "x1", "flat"]))
        workspace.FeedBlob("flat", np.full(8, -2, np.float32))
        np.testing.assert_array_equal(workspace.FetchBlob("x0"), np.full((2, 3), -2, np.float32))
        np.testing.assert_array_equal(workspace.FetchBlob("x1"), np.float32([-2, -2]))
        workspace.FeedBlob("x1", np.float32([5, 6]))
        np.testing.assert_array_equal(workspace.FetchBlob("flat"), np.float32([-2] * 6 + [5, 6]))
        # another size (or type) reallocates, as Caffe2 does: the others keep their values
        workspace.FeedBlob("flat", np.zeros(3, np.float32))
        np.testing.assert_array_equal(workspace.FetchBlob("x1"), np.float32([5, 6]))
        # blobs that never went through UnsafeCoalesce never alias
        a = np.ones(2, np.float32)
        workspace.FeedBlob("plain", a)
        workspace.FeedBlob("plain", np.zeros(2, np.float32))
        np.testing.assert_array_equal(a, np.ones(2, np.float32))

    @given(X=hu.tensor(), **hu.gcs_cpu_only)
    @settings(max_examples=5)
    def test_copy_on_device_like(self, X, gc, dc):
        op = core.CreateOperator("CopyOnDeviceLike", ["X", "dst"], ["Y"])
        self.assertReferenceChecks(gc, op, [X, np.zeros(1)], lambda X, dst: (X,))


class TestDiagonalFill(OpTest):
    @given(rows=st.integers(1, 6), cols=st.integers(1, 6), value=st.floats(-3, 3), dtype=st.sampled_from(
        [DT.FLOAT, DT.DOUBLE, DT.INT32, DT.INT64, DT.BOOL]), **hu.gcs_cpu_only)
    @settings(max_examples=20)
    def test_2d_from_shape(self, rows, cols, value, dtype, gc, dc):
        np_type = {DT.FLOAT: np.float32, DT.DOUBLE: np.float64, DT.INT32: np.int32, DT.INT64: np.int64,
                   DT.BOOL: np.bool_}[dtype]
        op = core.CreateOperator("DiagonalFill", [], ["Y"], shape=[rows, cols], value=value, dtype=dtype)

        def ref():
            out = np.zeros((rows, cols), np_type)
            # Caffe2 walks the flat array with stride cols + 1; `value` travels as a float32 argument
            np.fill_diagonal(out, np_type(np.float32(value)), wrap=True)
            return (out,)
        self.assertReferenceChecks(gc, op, [], ref)

    def test_from_input_and_cubes(self):
        op = core.CreateOperator("DiagonalFill", ["X"], ["Y"], value=2.0)
        cube = np.zeros((3, 3, 3), np.float32)
        for i in range(3):
            cube[i, i, i] = 2
        self.assertReferenceChecks(hu.cpu_do, op, [np.ones((3, 3, 3), np.int32)], lambda X: (cube,))
        op = core.CreateOperator("DiagonalFill", ["X"], ["Y"], value=1.0, input_as_shape=1, extra_shape=[2])
        self.assertReferenceChecks(hu.cpu_do, op, [np.array([2], np.int64)], lambda X: (np.eye(2, dtype=np.float32),))

    def test_errors(self):
        with pytest.raises(Caffe2Error, match="must have at least 2 dims"):
            workspace.RunOperatorOnce(core.CreateOperator("DiagonalFill", [], ["Y"], shape=[4]))
        with pytest.raises(Caffe2Error, match=r"all dims of the 3-D output shape \[2, 3, 2\] must be equal"):
            workspace.RunOperatorOnce(core.CreateOperator("DiagonalFill", [], ["Y"], shape=[2, 3, 2]))
        with pytest.raises(Caffe2Error, match="unsupported dtype 4"):
            workspace.RunOperatorOnce(core.CreateOperator("DiagonalFill", [], ["Y"], shape=[2, 2], dtype=DT.STRING))
