"""RowWiseCounter and Quantile against NumPy formulas written here, and their errors."""
import math

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)
import numpy as np
import pytest
from caffe2.python import core, workspace

from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _run(op_type, inputs, outputs, feeds, **args):
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, inputs, outputs, **args))
    return [workspace.FetchBlob(o) for o in outputs]


# ----------------------------------------------------------------- RowWiseCounter

def _counter_reference(prev_iter, counter, indices, now, halflife):
    prev, count = prev_iter.reshape(-1).copy(), counter.reshape(-1).copy()
    if halflife <= 0:
        return prev, count
    rate = math.log(2) / halflife
    for i in indices.reshape(-1):
        delta = max(0, now - int(prev[i]))
        count[i] = 1.0 + math.exp(-delta * rate) * count[i]
        prev[i] = max(now, int(prev[i]))
    return prev, count


_COUNTER_IO = (["prev_iter", "counter", "indices", "iter"], ["prev_iter", "counter"])


def _counter_feeds(prev_iter, counter, indices, now):
    return {"prev_iter": prev_iter, "counter": counter, "indices": indices,
            "iter": np.array([now], np.int64)}


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("halflife", [1, 7])
def test_rowwise_counter_matches_formula(index_dtype, halflife):
    rng = np.random.RandomState(3)
    rows = 50
    prev_iter = rng.randint(0, 120, size=(rows, 1)).astype(np.int64)   # some rows "in the future"
    counter = rng.rand(rows) * 10
    indices = np.array([4, 9, 4, 30, 49, 0, 4], index_dtype)          # repeats apply in order
    want_prev, want_count = _counter_reference(prev_iter, counter, indices, 100, halflife)
    got_prev, got_count = _run("RowWiseCounter", *_COUNTER_IO,
                               _counter_feeds(prev_iter, counter, indices, 100),
                               counter_halflife=halflife)
    assert got_prev.shape == (rows, 1) and got_prev.dtype == np.int64
    assert got_count.dtype == np.float64
    np.testing.assert_array_equal(got_prev.reshape(-1), want_prev)
    np.testing.assert_allclose(got_count, want_count, rtol=1e-12)
    untouched = np.setdiff1d(np.arange(rows), indices)
    np.testing.assert_array_equal(got_count[untouched], counter[untouched])


@pytest.mark.parametrize("halflife", [0, -1])
def test_rowwise_counter_off_without_positive_halflife(halflife):
    prev_iter, counter = np.zeros(4, np.int64), np.arange(4, dtype=np.float64)
    got_prev, got_count = _run("RowWiseCounter", *_COUNTER_IO,
                               _counter_feeds(prev_iter, counter, np.array([1, 2]), 9),
                               counter_halflife=halflife)
    np.testing.assert_array_equal(got_prev, prev_iter)
    np.testing.assert_array_equal(got_count, counter)


@pytest.mark.parametrize("feeds, regexp", [
    (_counter_feeds(np.zeros(4, np.int64), np.zeros(4), np.array([1, 4]), 5),
     r"indices.*index 4 at position 1 is out of range \[0, 4\)"),
    (_counter_feeds(np.zeros(4, np.int64), np.zeros(4), np.array([-1]), 5), r"indices.*index -1"),
    (_counter_feeds(np.zeros(4, np.int64), np.zeros(3), np.array([1]), 5), r"counter.*has 3 elements"),
    (_counter_feeds(np.zeros(4, np.int32), np.zeros(4), np.array([1]), 5), r"prev_iter.*int64"),
    (_counter_feeds(np.zeros(4, np.int64), np.zeros(4, np.float32), np.array([1]), 5),
     r"counter.*float64"),
    (_counter_feeds(np.zeros(4, np.int64), np.zeros(4), np.array([1.0]), 5), r"indices.*int32 or int64"),
    (dict(_counter_feeds(np.zeros(4, np.int64), np.zeros(4), np.array([1]), 5),
          iter=np.array([1, 2], np.int64)), r"iter.*one int64 value"),
])
def test_rowwise_counter_refuses_bad_input_before_writing(feeds, regexp):
    kept = {k: v.copy() for k, v in feeds.items()}
    with pytest.raises(Caffe2Error, match=regexp):
        _run("RowWiseCounter", *_COUNTER_IO, feeds, counter_halflife=2)
    for name in ("prev_iter", "counter"):
        np.testing.assert_array_equal(workspace.FetchBlob(name), kept[name])


# ----------------------------------------------------------------- Quantile

def _check_quantile(value, inputs, quantile, use_abs, tol):
    """Caffe2's guarantee: at least ceil(n * q) values are <= value, and value is the
    upper end of a bracket within tol (a value just below it counts no more than that)."""
    values = np.concatenate([x.reshape(-1) for x in inputs]).astype(np.float64)
    values = np.abs(values) if use_abs else values
    target = math.ceil(values.size * quantile)
    assert np.sum(values <= value) >= target
    below = value - 2.5 * tol * abs(value)
    assert np.sum(values <= below) <= target
    assert values.min() <= value <= values.max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("quantile, use_abs, tol", [(0.2, True, 1e-4), (0.5, False, 1e-3),
                                                    (0.93, True, 1e-5), (0.3, False, 1e-4)])
def test_quantile_of_several_tensors(dtype, quantile, use_abs, tol):
    rng = np.random.RandomState(5)
    inputs = [rng.randn(30).astype(dtype) + 2, rng.randn(7, 9).astype(dtype) + 2, rng.randn(1).astype(dtype)]
    names = ["t%d" % i for i in range(len(inputs))]
    value, = _run("Quantile", names, ["q"], dict(zip(names, inputs)),
                  quantile=quantile, abs=int(use_abs), tol=tol)
    assert value.shape == (1,) and value.dtype == dtype
    _check_quantile(float(value[0]), inputs, quantile, use_abs, tol)


def test_quantile_ends_are_min_and_max():
    x = np.array([-4.0, 1.0, 3.0, 2.5], np.float32)
    low, = _run("Quantile", ["x"], ["q"], {"x": x}, quantile=0.0, abs=0)
    high, = _run("Quantile", ["x"], ["q"], {"x": x}, quantile=1.0, abs=0)
    high_abs, = _run("Quantile", ["x"], ["q"], {"x": x}, quantile=1.0, abs=1)
    assert (low[0], high[0], high_abs[0]) == (-4.0, 3.0, 4.0)


def test_quantile_abs_is_the_default():
    x = np.array([-9.0, -8.0, 1.0, 2.0])
    value, = _run("Quantile", ["x"], ["q"], {"x": x}, quantile=0.5, tol=1e-6)
    _check_quantile(float(value[0]), [x], 0.5, True, 1e-6)
    assert value[0] < 8.0


@pytest.mark.parametrize("feeds, args, regexp", [
    ({"a": np.ones(3, np.float32), "b": np.ones(3)}, {"quantile": 0.5}, r"'b'.*one type"),
    ({"a": np.ones(3, np.int64), "b": np.ones(3, np.int64)}, {"quantile": 0.5}, r"'a'.*dtype int64"),
    ({"a": np.ones(0), "b": np.ones(0)}, {"quantile": 0.5}, r"no values"),
    ({"a": np.ones(3), "b": np.ones(3)}, {}, r"quantile must be in \[0, 1\], got -1"),
    ({"a": np.ones(3), "b": np.ones(3)}, {"quantile": 1.5}, r"quantile must be in"),
    ({"a": np.ones(3), "b": np.ones(3)}, {"quantile": 0.5, "tol": 0.0}, r"tol must be > 0"),
])
def test_quantile_errors(feeds, args, regexp):
    with pytest.raises(Caffe2Error, match=regexp):
        _run("Quantile", ["a", "b"], ["q"], feeds, **args)


def test_rowwise_counter_is_undone_when_a_later_op_of_the_net_fails():
    prev_iter, counter = np.zeros(4, np.int64), np.arange(4, dtype=np.float64)
    for name, value in _counter_feeds(prev_iter, counter, np.array([1, 2]), 9).items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("bad", np.array([7]))
    net = core.Net("counter_then_failure")
    net.RowWiseCounter(*_COUNTER_IO, counter_halflife=3)
    net.RowWiseCounter(["prev_iter", "counter", "bad", "iter"], ["prev_iter", "counter"],
                       counter_halflife=3)
    with pytest.raises(Caffe2Error, match="bad"):
        workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("prev_iter"), prev_iter)
    np.testing.assert_array_equal(workspace.FetchBlob("counter"), counter)
