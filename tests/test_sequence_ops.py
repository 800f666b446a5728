"""SequenceMask, ReversePackedSegs, PackRNNSequence / UnpackRNNSequence,
SinusoidPositionEncoding and Glu against loop references written here."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


class TestSequenceMask(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(shape=st.lists(st.integers(0, 4), min_size=2, max_size=4), axis=st.integers(1, 3),
           mode=st.sampled_from(["sequence", "window", "upper", "lower", "upperdiag", "lowerdiag"]),
           grad=st.booleans(), seed=st.integers(0, 99))
    @SETTINGS
    def test_modes(self, shape, axis, mode, grad, seed):
        axis = min(axis, len(shape) - 1)
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(np.float32)
        rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
        lengths = rng.integers(0, cols + 2, max(rows, 1)).astype(np.int32)
        fill = 0.0 if grad else -7.5

        def reference(x, *rest):
            x2 = x.reshape(rows, cols).copy()
            for i in range(rows):
                for j in range(cols):
                    c = int(lengths[i])
                    hit = {"sequence": j >= c, "window": abs(j - c) > 2, "upper": j > i, "lower": j < i,
                           "upperdiag": j >= i, "lowerdiag": j <= i}[mode]
                    if hit:
                        x2[i, j] = fill
            return [x2.reshape(x.shape)]
        two = mode in ("sequence", "window")
        op = core.CreateOperator("SequenceMask", ["X", "L"] if two else ["X"], ["Y"], mode=mode, axis=axis,
                                 radius=2, fill_val=-7.5, grad=int(grad))
        self.assertReferenceChecks(hu.cpu_do, op, [x, lengths] if two else [x], reference)

    def test_batch_masks_every_item_alike(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        lengths = np.array([1, 4, 2], np.int32)
        (y,) = run_op(core.CreateOperator("SequenceMask", ["X", "L"], ["Y"], batch=0, axis=2), [x, lengths])
        want = x.copy()
        for b in range(2):
            for i in range(3):
                want[b, i, lengths[i]:] = -np.inf
        np.testing.assert_array_equal(y, want)

    def test_repeat_from_axis(self):
        x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
        (y,) = run_op(core.CreateOperator("SequenceMask", ["X", "L"], ["Y"], axis=1, repeat_from_axis=2,
                                          fill_val=0.0), [x, np.array([2, 1], np.int32)])
        want = x.copy()
        want[0, 2:] = 0
        want[1, 1:] = 0
        np.testing.assert_array_equal(y, want)

    def test_gradient_masks_the_same_entries(self):
        x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
        op = core.CreateOperator("SequenceMask", ["X", "L"], ["Y"], fill_val=-3.0)
        self.assertGradientChecks(hu.cpu_do, op, [x, np.array([2, 0, 5], np.int32)], 0, [0])

    def test_too_few_lengths(self):
        op = core.CreateOperator("SequenceMask", ["X", "L"], ["Y"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((3, 2), np.float32), np.array([1, 1], np.int32)],
                               exception=Caffe2Error, regexp="Out of bound")


class TestPackedSequences(hu.HypothesisTestCase):
    @given(lengths=st.lists(st.integers(0, 4), min_size=0, max_size=4), feat=st.integers(1, 3),
           seed=st.integers(0, 99))
    @SETTINGS
    def test_pack_unpack_reverse(self, lengths, feat, seed):
        rng = np.random.default_rng(seed)
        lens = np.array(lengths, np.int32)
        values = rng.standard_normal((int(lens.sum()), feat)).astype(np.float32)
        T = max(lengths) if lengths else 0

        def pack_ref(values, lens):
            out, off = np.zeros((T, len(lengths), feat), np.float32), 0
            for b, n in enumerate(lengths):
                for t in range(n):
                    out[t, b] = values[off + t]
                off += n
            return [out]
        op = core.CreateOperator("PackRNNSequence", ["V", "L"], ["P"])
        (packed,) = self.assertReferenceChecks(hu.cpu_do, op, [values, lens], pack_ref)
        op = core.CreateOperator("UnpackRNNSequence", ["P", "L"], ["V"])
        self.assertReferenceChecks(hu.cpu_do, op, [packed, lens], lambda p, lens: [values])

        data = rng.standard_normal((T + 1, len(lengths), feat)).astype(np.float32)

        def reverse_ref(data, lens):
            out = data.copy()
            for b, n in enumerate(lengths):
                out[:n, b] = data[:n, b][::-1]
            return [out]
        for dtype in (np.int32, np.int64):
            op = core.CreateOperator("ReversePackedSegs", ["D", "L"], ["R"])
            self.assertReferenceChecks(hu.cpu_do, op, [data, lens.astype(dtype)], reverse_ref)

    def test_gradients(self):
        rng = np.random.default_rng(3)
        lens = np.array([2, 0, 3], np.int32)
        values = rng.standard_normal((5, 2)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("PackRNNSequence", ["V", "L"], ["P"]),
                                  [values, lens], 0, [0])
        packed = rng.standard_normal((3, 3, 2)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("UnpackRNNSequence", ["P", "L"], ["V"]),
                                  [packed, lens], 0, [0])
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("ReversePackedSegs", ["D", "L"], ["R"]),
                                  [packed, lens], 0, [0])

    def test_lengths_are_checked(self):
        op = core.CreateOperator("ReversePackedSegs", ["D", "L"], ["R"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((2, 2), np.float32), np.array([1, 3], np.int32)],
                               exception=Caffe2Error, regexp="outside \\[0, max_length = 2\\]")
        op = core.CreateOperator("PackRNNSequence", ["V", "L"], ["P"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.zeros((3, 1), np.float32), np.array([1, 1], np.int32)],
                               exception=Caffe2Error, regexp="sum to 2")


class TestEncodings(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(m=st.integers(0, 4), k=st.integers(1, 3), size=st.integers(1, 9), seed=st.integers(0, 99))
    @SETTINGS
    def test_sinusoid_position_encoding(self, m, k, size, seed):
        positions = np.random.default_rng(seed).integers(0, 50, (m, k)).astype(np.int32)

        def reference(positions):
            out = np.zeros((m, k, size))
            for i in range(m):
                p = float(positions[i, 0])
                for e in range(size):
                    angle = p / 100.0 ** (e / size)
                    out[i, :, e] = 2.0 * (math.sin(angle) if e % 2 == 0 else math.cos(angle))
            return [out.astype(np.float32)]
        op = core.CreateOperator("SinusoidPositionEncoding", ["P"], ["Y"], embedding_size=size, alpha=100.0,
                                 amplitude=2.0)
        self.assertReferenceChecks(hu.cpu_do, op, [positions], reference, atol=1e-4)

    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 99))
    @SETTINGS
    def test_glu(self, shape, seed):
        rng = np.random.default_rng(seed)
        axis = int(rng.integers(0, len(shape)))
        shape[axis] *= 2
        x = rng.standard_normal(shape).astype(np.float32)

        def reference(x):
            a, b = np.split(x.astype(np.float64), 2, axis=axis)
            return [(a / (1 + np.exp(-b))).astype(np.float32)]
        op = core.CreateOperator("Glu", ["X"], ["Y"], dim=axis)
        self.assertReferenceChecks(hu.cpu_do, op, [x], reference)
        if axis == len(shape) - 1:
            self.assertReferenceChecks(hu.cpu_do, core.CreateOperator("Glu", ["X"], ["Y"]), [x], reference)

    def test_glu_needs_an_even_split(self):
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("Glu", ["X"], ["Y"]), [np.zeros((2, 3), np.float32)],
                               exception=Caffe2Error, regexp="even size")
