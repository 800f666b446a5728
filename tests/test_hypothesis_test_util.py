"""Caffe2's test utilities (hypothesis_test_util, serialized_test_util, test_util,
device_checker), used exactly as a Caffe2 user's operator test uses them, through
the caffe2.python aliases."""
import caffe2py.compat  # noqa: F401  (installs the caffe2.python aliases, as `python -m caffe2py.compat` does)

import os
import subprocess
import sys
import textwrap
import unittest

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
import caffe2.python.serialized_test.serialized_test_util as serial
from caffe2.python import device_checker, test_util

from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema


# A user's custom op, registered the way caffe2py registers its own (Caffe2 users
# registered C++ ops; the tests below are what they wrote for them).
register_schema(OpSchema(
    "TestScaleShift", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("scale", "float", 1.0), Arg("shift", "float", 0.0)),
    inference=lambda ctx, ins: [ins[0]], doc="scale * x + shift (a test op)"))


@register_kernel("TestScaleShift")
def _scale_shift(ctx):
    scale, shift = ctx.float("scale"), ctx.float("shift")
    if scale == 0:
        raise ctx.error("scale must not be 0")
    return lambda x: (x * np.float32(scale) + np.float32(shift)).astype(x.dtype)


# An op whose declared shape inference is wrong on purpose (one row short).
register_schema(OpSchema(
    "TestWrongInference", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0] - 1,) + ins[0].dims[1:], ins[0].dtype)]))
register_kernel("TestWrongInference")(lambda ctx: lambda x: x.copy())

# An op whose output depends on the device id, to make devices disagree on a CPU-only machine.
register_schema(OpSchema("TestAddDeviceId", num_inputs=1, num_outputs=1, inference=lambda ctx, ins: [ins[0]]))
register_kernel("TestAddDeviceId")(lambda ctx: lambda x: x + np.float32(ctx.device_id))


class TestCustomOp(serial.SerializedTestCase):
    @serial.given(X=hu.tensor(), scale=st.floats(0.5, 2.0), shift=st.floats(-1.0, 1.0),
                  inplace=st.booleans(), **hu.gcs_cpu_only)    # the op has a CPU kernel only
    @settings(max_examples=15)
    def test_scale_shift(self, X, scale, shift, inplace, gc, dc):
        op = core.CreateOperator("TestScaleShift", ["X"], ["X" if inplace else "Y"], scale=scale, shift=shift)

        def reference(X):
            return (X * np.float32(scale) + np.float32(shift),)

        self.assertReferenceChecks(gc, op, [X], reference)
        self.assertDeviceChecks(dc, op, [X], [0])

    @given(inputs=hu.tensors(n=2), **hu.gcs)
    @settings(max_examples=10)
    def test_add_validation(self, inputs, gc, dc):
        A, B = inputs
        op = core.CreateOperator("Add", ["A", "B"], ["C"])

        def validator(A, B, C):
            np.testing.assert_allclose(C, A + B, rtol=1e-6)

        self.assertValidationChecks(gc, op, [A, B], validator)
        self.assertValidationChecks(gc, op, [A, B], lambda inputs, outputs: np.testing.assert_allclose(
            outputs[0], inputs[0] + inputs[1], rtol=1e-6), as_kwargs=False)

    @given(**hu.gcs_cpu_only)
    @settings(max_examples=1)
    def test_run_op_raises(self, gc, dc):
        op = core.CreateOperator("Add", ["A", "B"], ["C"])
        A, B = np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)
        self.assertRunOpRaises(gc, op, [A, B], exception=RuntimeError, regexp="do not broadcast")
        bad = core.CreateOperator("TestScaleShift", ["X"], ["Y"], scale=0.0)
        self.assertRunOpRaises(gc, bad, [A], exception=RuntimeError, regexp="scale must not be 0")

    def test_gradient_checks_skip_until_the_gradient_checker_lands(self):
        import importlib.util
        if importlib.util.find_spec("caffe2py.gradient_checker") is not None:
            pytest.skip("caffe2py.gradient_checker exists; its own tests cover assertGradientChecks")
        op = core.CreateOperator("Relu", ["X"], ["Y"])
        with self.assertRaisesRegex(unittest.SkipTest, "gradient_checker"):
            self.assertGradientChecks(hu.cpu_do, op, [np.ones(3, np.float32)], 0, [0])


class TestAssertionsCatchMistakes(hu.HypothesisTestCase):
    """Each assertion must fail when what it checks is wrong."""

    def test_wrong_reference_fails(self):
        X = np.arange(6, dtype=np.float32).reshape(2, 3)
        op = core.CreateOperator("TestScaleShift", ["X"], ["Y"], scale=2.0)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (2 * X,))
        with self.assertRaisesRegex(AssertionError, "Output Y is not matching the reference"):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (2 * X + 1e-2,))
        with self.assertRaises(AssertionError):      # wrong shape
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: ((2 * X).T,))
        with self.assertRaises(AssertionError):      # wrong number of outputs
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (2 * X, X))
        with self.assertRaisesRegex(RuntimeError, "tuple/list"):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: 2 * X)
        with self.assertRaisesRegex(ValueError, "must supply an input"):
            self.assertReferenceChecks(hu.cpu_do, op, [], lambda: (X,))

    def test_threshold_and_atol(self):
        X = np.full(4, 1000.0, np.float32)
        op = core.CreateOperator("TestScaleShift", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X + 0.05,), threshold=1e-4)  # rtol covers it
        with self.assertRaises(AssertionError):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X + 0.5,), threshold=1e-4)
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X + 0.5,), threshold=1e-4, atol=1.0)

    def test_outputs_to_check_and_returned_outputs(self):
        X = np.arange(4, dtype=np.float32)
        op = core.CreateOperator("Reshape", ["X"], ["Y", "old_shape"], shape=[2, 2])
        outs = self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([4]),), outputs_to_check=[1])
        self.assertEqual(outs[0].tolist(), [4])
        with self.assertRaises(AssertionError):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (np.array([5]),), outputs_to_check=[1])

    def test_dtype_check_is_opt_in(self):
        X = np.arange(4, dtype=np.float32)
        op = core.CreateOperator("TestScaleShift", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X.astype(np.float64),))
        self.check_output_dtypes = True
        with self.assertRaisesRegex(AssertionError, "dtype"):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X.astype(np.float64),))

    def test_shape_inference_mismatch(self):
        X = np.zeros((3, 2), np.float32)
        op = core.CreateOperator("TestWrongInference", ["X"], ["Y"])
        self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X,))       # Caffe2 default: a warning
        self.assert_shape_inference = True
        with self.assertRaisesRegex(AssertionError, r"Shape Y mismatch: inferred \[2, 2\] vs. computed \[3, 2\]"):
            self.assertReferenceChecks(hu.cpu_do, op, [X], lambda X: (X,))

    def test_ensure_outputs_are_inferred(self):
        X = np.zeros(3, np.float32)
        op = core.CreateOperator("Reshape", ["X", "shape"], ["Y"])      # shape from a blob: not inferred
        with self.assertRaisesRegex(AssertionError, "Shape for Y was not inferred"):
            self.assertReferenceChecks(hu.cpu_do, op, [X, np.array([3, 1])], lambda X, s: (X.reshape(3, 1),),
                                       ensure_outputs_are_inferred=True)

    def test_device_checks_catch_disagreeing_devices(self):
        X = np.zeros(3, np.float32)
        op = core.CreateOperator("TestAddDeviceId", ["X"], ["Y"])
        cpu1 = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CPU, device_id=1)
        self.assertDeviceChecks([hu.cpu_do, hu.cpu_do], op, [X], [0])
        with self.assertRaises(AssertionError):
            self.assertDeviceChecks([hu.cpu_do, cpu1], op, [X], [0])
        checker = device_checker.DeviceChecker(0.01, [hu.cpu_do, cpu1])
        net = core.Net("two_devices")
        net.TestAddDeviceId("X", "Y")
        self.assertFalse(checker.CheckNet(net, inputs={"X": X}))
        self.assertTrue(device_checker.DeviceChecker(0.01, [hu.cpu_do, hu.cpu_do]).CheckNet(net, inputs={"X": X}))

    def test_run_op_raises_fails_when_the_op_succeeds(self):
        op = core.CreateOperator("TestScaleShift", ["X"], ["Y"])
        with self.assertRaises(AssertionError):
            self.assertRunOpRaises(hu.cpu_do, op, [np.zeros(2, np.float32)])

    def test_checks_leave_the_callers_workspace_alone(self):
        workspace.FeedBlob("mine", np.ones(2, np.float32))
        op = core.CreateOperator("TestScaleShift", ["X"], ["mine"])
        self.assertReferenceChecks(hu.cpu_do, op, [np.zeros(2, np.float32)], lambda X: (X,))
        self.assertEqual(workspace.FetchBlob("mine").tolist(), [1.0, 1.0])
        self.assertEqual(workspace.Blobs(), ["mine"])

    def test_run_op_on_input_and_benchmark(self):
        op = core.CreateOperator("TestScaleShift", ["X"], ["Y"], shift=1.0)
        out, = hu.runOpOnInput(hu.cpu_do, op, [np.zeros(2, np.float32)])
        self.assertEqual(out.tolist(), [1.0, 1.0])
        self.assertIsNotNone(hu.runOpBenchmark(hu.cpu_do, op, [np.zeros(2, np.float32)], iterations=2))


class TestStrategies(hu.HypothesisTestCase):
    @given(data=hu.lengths_tensor(min_segments=1, max_segments=4, min_dim=1, max_dim=3))
    @settings(max_examples=25)
    def test_lengths_tensor(self, data):
        X, lengths = data
        self.assertEqual(lengths.dtype, np.int32)
        self.assertTrue(1 <= len(lengths) <= 4)
        self.assertTrue((lengths >= 0).all())
        self.assertEqual(int(lengths.sum()), X.shape[0])

    @given(data=hu.sparse_lengths_tensor(min_dim=2, max_dim=2, allow_empty=True))
    @settings(max_examples=25)
    def test_sparse_lengths_tensor(self, data):
        table, indices, lengths = data
        self.assertEqual(indices.dtype, np.int64)
        self.assertEqual(int(lengths.sum()), len(indices))
        if len(indices):
            self.assertTrue(0 <= indices.min() and indices.max() < table.shape[0])

    @given(data=hu.segmented_tensor(is_sorted=True, allow_empty=True))
    @settings(max_examples=25)
    def test_sorted_segment_ids(self, data):
        X, ids = data
        self.assertEqual(len(ids), X.shape[0])
        if len(ids):
            self.assertEqual(ids[0], 0)
            self.assertTrue(set(np.diff(ids).tolist()) <= {0, 1})

    @given(data=hu.sparse_segmented_tensor(is_sorted=False, itype=np.int32))
    @settings(max_examples=15)
    def test_unsorted_sparse_segments(self, data):
        table, indices, ids = data
        self.assertEqual(indices.dtype, np.int32)
        self.assertEqual(len(ids), len(indices))
        self.assertTrue((ids >= 0).all() and (ids <= 2 * len(indices)).all())

    @given(Xs=hu.tensors(n=3, min_dim=2, max_dim=3), X16=hu.tensor(dtype=np.float16),
           i32=hu.tensor1d(max_len=4, dtype=np.int32), b=hu.tensor(dtype=np.bool_),
           few=hu.ntensors(1, 3, max_dim=2))
    @settings(max_examples=20)
    def test_tensor_strategies(self, Xs, X16, i32, b, few):
        self.assertEqual(len(Xs), 3)
        self.assertEqual({x.shape for x in Xs}, {Xs[0].shape})
        self.assertTrue(2 <= Xs[0].ndim <= 3 and all(1 <= d <= 5 for d in Xs[0].shape))
        self.assertTrue(all(((x >= -1) & (x <= 1)).all() for x in Xs))
        self.assertEqual(X16.dtype, np.float16)
        self.assertTrue(i32.dtype == np.int32 and i32.ndim == 1 and 1 <= len(i32) <= 4 and (i32 >= 0).all())
        self.assertEqual(b.dtype, np.bool_)
        self.assertTrue(1 <= len(few) <= 3 and len({x.shape for x in few}) == 1)

    def test_unknown_dtype_needs_elements(self):
        with self.assertRaisesRegex(ValueError, "Unexpected dtype"):
            hu.elements_of_type(np.complex64)
        with self.assertRaises(ValueError):
            hu.lengths(3, min_segments=2, max_segments=1)

    def test_device_lists(self):
        self.assertEqual(hu.cpu_do.device_type, caffe2_pb2.CPU)
        self.assertEqual(hu.gpu_do.device_type, caffe2_pb2.CUDA)
        self.assertEqual(hu.device_options[0], hu.cpu_do)
        has_gpu = workspace.has_gpu_support
        self.assertEqual(any(d.device_type == caffe2_pb2.CUDA for d in hu.device_options), has_gpu)
        self.assertEqual(len(hu.expanded_device_options), 1 + workspace.NumGpuDevices())
        self.assertEqual(set(hu.gcs), {"gc", "dc"})

    @given(**hu.gcs)
    @settings(max_examples=5)
    def test_gcs_draw_from_the_device_list(self, gc, dc):
        self.assertIn(gc, hu.device_options)
        self.assertEqual(dc, hu.device_options)

    def test_temp_workspace(self):
        workspace.FeedBlob("outer", np.ones(1))
        before = workspace.CurrentWorkspace()
        with hu.temp_workspace():
            self.assertNotEqual(workspace.CurrentWorkspace(), before)
            self.assertFalse(workspace.HasBlob("outer"))
            workspace.FeedBlob("inner", np.ones(1))
        self.assertEqual(workspace.CurrentWorkspace(), before)
        self.assertTrue(workspace.HasBlob("outer"))
        with hu.temp_workspace():
            self.assertFalse(workspace.HasBlob("inner"))     # emptied on the way out


class TestTestUtil(test_util.TestCase):
    def test_each_test_starts_and_ends_with_an_empty_workspace(self):
        class Inner(test_util.TestCase):
            seen = []

            def test_feed(self):
                Inner.seen.append(workspace.Blobs())
                workspace.FeedBlob("leftover", np.ones(1))

        workspace.FeedBlob("before", np.ones(1))
        result = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(Inner))
        self.assertTrue(result.wasSuccessful())
        self.assertEqual(Inner.seen, [[]])
        self.assertEqual(workspace.Blobs(), [])
        self.assertIsInstance(self.ws, workspace.C.Workspace)

    def test_make_tempdir_is_removed(self):
        holder = {}

        class Inner(test_util.TestCase):
            def test_dir(self):
                path = self.make_tempdir()
                (path / "f.txt").write_text("x")
                holder["path"] = path

        unittest.TextTestRunner(stream=open(os.devnull, "w")).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(Inner))
        self.assertFalse(holder["path"].exists())

    def test_random_blobs_and_helpers(self):
        a = test_util.rand_array(3, 4)
        self.assertEqual((a.shape, a.dtype), ((3, 4), np.float32))
        self.assertTrue(((a >= -0.5) & (a < 0.5)).all())
        self.assertEqual(test_util.rand_array().shape, ())
        test_util.randBlobsFloat32(["p", "q"], 2, 5, offset=10.0)
        for name in ("p", "q"):
            value = workspace.FetchBlob(name)
            self.assertEqual((value.shape, value.dtype), ((2, 5), np.float32))
            self.assertTrue(((value >= 10) & (value < 11)).all())
        net = core.Net("n")
        net.Relu("x", "y")
        net.Relu("y", "z")
        self.assertEqual(test_util.numOps(net), 2)
        self.assertTrue(test_util.str_compare(b"abc", "abc"))
        self.assertFalse(test_util.str_compare("abc", b"abd"))

    def test_flaky_tests_run_only_in_flaky_mode(self):
        class Inner(test_util.TestCase):
            ran = []

            @test_util.caffe2_flaky
            def test_flaky(self):
                Inner.ran.append("flaky")

            def test_regular(self):
                Inner.ran.append("regular")

        unittest.TextTestRunner(stream=open(os.devnull, "w")).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(Inner))
        self.assertEqual(Inner.ran, [] if test_util.is_flaky_test_mode() else ["regular"])


_USER_TEST_FILE = '''
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
import caffe2.python.serialized_test.serialized_test_util as serial
from hypothesis import given, settings
import hypothesis.strategies as st
import numpy as np


class TestRelu(serial.SerializedTestCase):
    @serial.given(X=hu.tensor(), inplace=st.booleans(), **hu.gcs)
    @settings(max_examples=5)
    def test_relu(self, X, inplace, gc, dc):
        op = core.CreateOperator("Relu", ["X"], ["X" if inplace else "Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.maximum(X, 0),))
        self.assertDeviceChecks(dc, op, [X], [0])

    @given(inputs=hu.tensors(n=2), **hu.gcs_cpu_only)
    @settings(max_examples=5)
    def test_sub_wrong(self, inputs, gc, dc):
        op = core.CreateOperator("Sub", ["A", "B"], ["C"])
        self.assertReferenceChecks(gc, op, inputs, lambda A, B: (A + B + 1,))


if __name__ == "__main__":
    serial.testWithArgs()
'''


def test_unmodified_caffe2_test_file_runs_through_the_compat_alias(tmp_path):
    """A Caffe2 operator test file, as its author wrote it, run with
    `python -m caffe2py.compat`: the correct test passes, the wrong reference fails."""
    script = tmp_path / "relu_op_test.py"
    script.write_text(textwrap.dedent(_USER_TEST_FILE))
    out = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(script), "-G", "TestRelu.test_relu"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Ran 1 test" in out.stderr and "OK" in out.stderr
    out = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(script), "TestRelu.test_sub_wrong"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1
    assert "Output C is not matching the reference" in out.stderr
