"""hypothesis_test_util accepts what Caffe2's accepted on today's hypothesis (issue 31,
item 6): each test below is written as a Caffe2-era operator test would be, and each
strategy it uses is one today's hypothesis refuses when called directly (the last
test of each group shows that refusal, so the test fails without hu's casting)."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

from caffe2.python import core
import caffe2.python.hypothesis_test_util as hu


def _draw(strategy, n=30):
    """n examples of strategy, drawn through @given as a test would."""
    seen = []

    @hypothesis.settings(max_examples=n, database=None, deadline=None)
    @given(strategy)
    def collect(value):
        seen.append(value)
    collect()
    return seen


def _f32(x):
    return float(np.float32(x))


# ------------------------------------------------------------------ hu.floats

def test_to_float32_rounds_to_the_nearest_float32():
    for x in (0.1, 1e-4, 0.7, -3.3, 1.0, 0.0):
        assert hu.to_float32(x) == _f32(x)
        assert isinstance(hu.to_float32(x), float)


def test_floats_bounds_float32_cannot_hold_are_rounded():
    values = _draw(hu.floats(min_value=0.1, max_value=0.7))
    assert values and all(_f32(0.1) <= v <= _f32(0.7) for v in values)
    assert all(np.float32(v) == v for v in values)            # width 32: float32 values


def test_floats_with_explicit_width_and_positional_bounds():
    values = _draw(hu.floats(1e-4, 0.5, width=32))
    assert values and all(_f32(1e-4) <= v <= _f32(0.5) for v in values)
    values16 = _draw(hu.floats(min_value=0.1, max_value=0.3, width=16))
    assert all(float(np.float16(0.1)) <= v <= float(np.float16(0.3)) and np.float16(v) == v
               for v in values16)


def test_floats_bounds_beyond_float32_clamp_to_its_finite_range():
    values = _draw(hu.floats(min_value=-1e40, max_value=1e40))
    big = float(np.finfo(np.float32).max)
    assert values and all(-big <= v <= big and np.isfinite(v) for v in values)


def test_floats_allow_infinity_with_finite_bounds_is_moot():
    values = _draw(hu.floats(min_value=0, max_value=1, allow_infinity=True))
    assert values and all(0 <= v <= 1 for v in values)


def test_floats_unbounded_keeps_nan_and_infinity_when_asked():
    strategy = hu.floats(allow_nan=True, allow_infinity=True)
    assert strategy.validate() is None


def test_todays_hypothesis_refuses_these_bounds_directly():
    with pytest.raises(hypothesis.errors.InvalidArgument):
        _draw(st.floats(min_value=0.1, max_value=0.7, width=32))
    with pytest.raises(hypothesis.errors.InvalidArgument):
        _draw(st.floats(min_value=0, max_value=1, allow_infinity=True))


# ------------------------------------------------------------------ hu.arrays / hu.tensor elements

def test_float64_samples_from_a_numpy_array_become_float32_elements():
    values = np.array([0.1, 0.2, 0.3])
    arrays = _draw(hu.arrays([4], elements=st.sampled_from(values)))
    allowed = set(values.astype(np.float32).tolist())
    assert arrays and all(a.dtype == np.float32 and set(a.tolist()) <= allowed for a in arrays)


def test_float16_tensor_from_float32_elements():
    tensors = _draw(hu.tensor(dtype=np.float16, elements=st.floats(-1, 1, width=32)))
    assert tensors and all(t.dtype == np.float16 and np.all(np.abs(t) <= 1) for t in tensors)


def test_integers_beyond_the_dtype_wrap_as_numpy_did():
    arrays = _draw(hu.arrays([6], dtype=np.int8, elements=st.integers(120, 140)))
    for a in arrays:
        assert a.dtype == np.int8
        # each value is some v in [120, 140] wrapped to int8: ((v + 128) mod 256) - 128
        assert all(((v - 120) % 256) <= 20 for v in a.astype(np.int64).tolist())
    assert any((a < 0).any() for a in arrays) or len(arrays) < 5


def test_floats_into_an_integer_array_truncate():
    arrays = _draw(hu.arrays([5], dtype=np.int32, elements=st.floats(0, 10)))
    assert arrays and all(a.dtype == np.int32 and ((0 <= a) & (a <= 10)).all() for a in arrays)


def test_shapes_given_as_numpy_integers():
    assert {a.shape for a in _draw(hu.arrays(np.array([2, 3])), 5)} == {(2, 3)}
    assert {a.shape for a in _draw(hu.arrays([np.int64(4)]), 5)} == {(4,)}
    assert {a.shape for a in _draw(hu.arrays(np.int32(3)), 5)} == {(3,)}


def test_todays_hypothesis_refuses_these_elements_directly():
    with pytest.raises(hypothesis.errors.InvalidArgument):
        _draw(hnp.arrays(np.float32, [4], elements=st.sampled_from(np.array([0.1, 0.2, 0.3]))))
    with pytest.raises(OverflowError):
        _draw(hnp.arrays(np.int8, [50], elements=st.integers(250, 260)))
    with pytest.raises(hypothesis.errors.InvalidArgument):
        _draw(hnp.arrays(np.float32, [np.int64(4)]))


# ------------------------------------------------------------------ hu.settings

def test_settings_drops_what_hypothesis_removed():
    s = hu.settings(max_examples=3, timeout=100, min_satisfying_examples=1, perform_health_check=False)
    assert s.max_examples == 3
    assert set(s.suppress_health_check) == set(hypothesis.HealthCheck)
    with pytest.raises(TypeError):
        hypothesis.settings(max_examples=3, timeout=100)
    runs = []

    @hu.settings(max_examples=4, timeout=100, database=None)
    @given(x=st.integers())
    def counted(x):
        runs.append(x)
    counted()
    assert 1 <= len(runs) <= 4


# ------------------------------------------------------------------ an old op test, as written

class TestOldStyleOpTests(hu.HypothesisTestCase):
    """Op tests of Caffe2's era: their strategies used to fail before the op ran."""

    @given(X=hu.tensor(elements=hu.floats(min_value=0.1, max_value=0.9)), **hu.gcs_cpu_only)
    def test_log(self, X, gc, dc):
        op = core.CreateOperator("Log", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.log(X),))

    @given(X=hu.arrays(dims=[3, 4], elements=st.sampled_from(np.array([-0.3, 0.1, 2.5]))),
           **hu.gcs_cpu_only)
    def test_relu_on_samples_from_numpy(self, X, gc, dc):
        op = core.CreateOperator("Relu", ["X"], ["Y"])
        self.assertReferenceChecks(gc, op, [X], lambda X: (np.maximum(X, 0),))


# ------------------------------------------------------------------ health checks Caffe2's hypothesis lacked

class _SharedGivenHelper(hu.HypothesisTestCase):
    """Caffe2's RNN tests call one @given helper from several test methods (each with
    its own self): today's differing_executors health check fails the second."""

    @given(x=st.integers(0, 3))
    def helper(self, x, kind):
        self.assertIn(kind, ("a", "b"))

    def test_a(self):
        self.helper(kind="a")

    def test_b(self):
        self.helper(kind="b")


def test_a_given_helper_shared_by_several_tests_runs():
    import unittest
    suite = unittest.TestSuite([_SharedGivenHelper("test_a"), _SharedGivenHelper("test_b")])
    result = unittest.TextTestRunner(stream=open("/dev/null", "w"), verbosity=0).run(suite)
    assert result.wasSuccessful(), result.errors + result.failures
    assert hypothesis.HealthCheck.differing_executors in hypothesis.settings.default.suppress_health_check
