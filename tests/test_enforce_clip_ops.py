"""EnforceFinite and EnsureClipped against NumPy references written here (Caffe2's
enforce_finite_op and ensure_clipped_op)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run

F32_MAX = float(np.finfo(np.float32).max)


def test_enforce_finite_passes_finite_and_empty_tensors():
    for x in (np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 4), np.float64),
              np.array([F32_MAX, -F32_MAX], np.float32)):
        assert run(core.CreateOperator("EnforceFinite", ["X"], []), [x]) == []


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_enforce_finite_names_the_first_bad_element(bad, dtype):
    x = np.array([1.0, 2.0, bad, bad], dtype)
    with pytest.raises(Caffe2Error, match=r"Index 2 is not finite \(e\.g\., NaN, Inf\)"):
        run(core.CreateOperator("EnforceFinite", ["X"], []), [x])


def test_enforce_finite_takes_float_or_double_only():
    with pytest.raises(Caffe2Error, match="float or double"):
        run(core.CreateOperator("EnforceFinite", ["X"], []), [np.arange(3, dtype=np.int32)])


def _clip_ref(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


class TestEnsureClipped(ReferenceTestCase):
    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.sampled_from(["min", "max", "both", "none", "crossed"]),
           st.booleans())
    def test_dense(self, seed, bounds, in_place):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(int(rng.integers(0, 4)), 3)).astype(np.float32)
        args = {"min": {"min": -0.2}, "max": {"max": 0.3}, "both": {"min": -0.5, "max": 0.5}, "none": {},
                "crossed": {"min": 0.4, "max": -0.4}}[bounds]
        lo, hi = args.get("min", -F32_MAX), args.get("max", F32_MAX)
        op = core.CreateOperator("EnsureClipped", ["X"], ["X" if in_place else "Y"], **args)
        self.check(op, [x], lambda x: _clip_ref(x, np.float32(lo), np.float32(hi)))

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.sampled_from([np.int32, np.int64]), st.booleans())
    def test_sparse_clips_only_the_indexed_rows_in_place(self, seed, itype, two_d_indices):
        rng = np.random.default_rng(seed)
        rows = int(rng.integers(1, 6))
        param = rng.normal(size=(rows, 2, 3)).astype(np.float32)
        n = int(rng.integers(0, 5))
        indices = rng.integers(0, rows, size=n).astype(itype)
        grad = rng.normal(size=(n, 2, 3))                       # float64: only its size matters
        if two_d_indices and n % 2 == 0 and n:
            indices, grad = indices.reshape(2, n // 2), grad.reshape(2, n // 2, 2, 3)

        def ref(p, i, g):
            out = p.copy()
            out[i.reshape(-1)] = _clip_ref(p[i.reshape(-1)], np.float32(0), np.float32(0.5))
            return out
        op = core.CreateOperator("EnsureClipped", ["P", "I", "G"], ["P"], min=0.0, max=0.5)
        self.check(op, [param, indices, grad], ref)


def test_ensure_clipped_keeps_nan():
    (y,) = run(core.CreateOperator("EnsureClipped", ["X"], ["Y"], min=0.0, max=1.0),
               [np.array([np.nan, -1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [np.nan, 0.0, 1.0])


def test_ensure_clipped_refusals_leave_the_param_alone():
    param = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    grad = np.zeros((1, 2), np.float32)
    cases = [(["P", "I", "G"], ["Q"], [param, np.array([0]), grad], "must run in place"),
             (["P", "I"], ["P"], [param, np.array([0])], "takes both indices and grad"),
             (["P", "I", "G"], ["P"], [param, np.array([2]), grad], "out of range"),
             (["P", "I", "G"], ["P"], [param, np.array([-1]), grad], "out of range"),
             (["P", "I", "G"], ["P"], [param, np.array([0]), np.zeros((1, 3))], "rows"),
             (["P", "I", "G"], ["P"], [param, np.array([0.0]), grad], "int32 or int64"),
             (["P"], ["P"], [param.astype(np.float64)], "float32")]
    for inputs, outputs, values, message in cases:
        workspace.ResetWorkspace()
        for name, value in zip(inputs, values):
            workspace.FeedBlob(name, value)
        with pytest.raises(Caffe2Error, match=message):
            workspace.RunOperatorOnce(core.CreateOperator("EnsureClipped", inputs, outputs, min=0.0))
        np.testing.assert_array_equal(workspace.FetchBlob("P"), values[0])
