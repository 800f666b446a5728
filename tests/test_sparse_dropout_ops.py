"""SparseDropoutWithReplacement and SparseItemwiseDropoutWithReplacement: what every
output must be (Caffe2's sparse_*dropout_with_replacement_op), and drop rates that
match `ratio` over many draws."""
import numpy as np
import pytest

from caffe2py import core
from caffe2py.errors import Caffe2Error

from _reference import run

SEEDED = core.DeviceOption(0, random_seed=7)


def _segments(x, lengths):
    starts = np.concatenate(([0], np.cumsum(lengths)))
    return [x[starts[i]:starts[i + 1]].tolist() for i in range(len(lengths))]


def _op(name, ratio, replacement=-1):
    return core.CreateOperator(name, ["X", "L"], ["Y", "LY"], ratio=ratio, replacement_value=replacement,
                               device_option=SEEDED)


@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0])
def test_examplewise_each_list_is_kept_or_becomes_one_replacement(ratio):
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 4, size=400).astype(np.int32)
    x = rng.integers(0, 1000, size=int(lengths.sum())).astype(np.int64)
    y, out_lengths = run(_op("SparseDropoutWithReplacement", ratio), [x, lengths])
    assert y.dtype == np.int64 and out_lengths.dtype == np.int32 and out_lengths.shape == lengths.shape
    assert int(out_lengths.sum()) == y.size
    dropped = 0
    for before, after in zip(_segments(x, lengths), _segments(y, out_lengths)):
        if after != before:
            assert after == [-1]
            dropped += 1
    if ratio == 0.0:
        assert dropped == 0 and y.tolist() == x.tolist()
    elif ratio == 1.0:
        assert y.tolist() == [-1] * len(lengths) and out_lengths.tolist() == [1] * len(lengths)
    else:
        # an empty list that is dropped also changes (to [-1]); 400 draws: within 5 sigma
        assert abs(dropped / len(lengths) - ratio) < 5 * np.sqrt(ratio * (1 - ratio) / len(lengths))


@pytest.mark.parametrize("ratio", [0.0, 0.4, 1.0])
def test_itemwise_each_id_is_kept_or_replaced(ratio):
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 5, size=300).astype(np.int32)
    x = rng.integers(0, 1000, size=int(lengths.sum())).astype(np.int64)
    y, out_lengths = run(_op("SparseItemwiseDropoutWithReplacement", ratio, replacement=-7), [x, lengths])
    assert out_lengths.tolist() == lengths.tolist() and y.dtype == np.int64 and y.shape == x.shape
    replaced = y != x
    assert (y[replaced] == -7).all()
    if ratio in (0.0, 1.0):
        assert replaced.mean() == ratio
    else:
        assert abs(replaced.mean() - ratio) < 5 * np.sqrt(ratio * (1 - ratio) / x.size)


def test_empty_inputs():
    x, lengths = np.zeros(0, np.int64), np.array([0], np.int32)
    y, out = run(_op("SparseDropoutWithReplacement", 1.0), [x, lengths])
    assert y.tolist() == [-1] and out.tolist() == [1]
    y, out = run(_op("SparseItemwiseDropoutWithReplacement", 1.0), [x, lengths])
    assert y.tolist() == [] and out.tolist() == [0]


@pytest.mark.parametrize("name", ["SparseDropoutWithReplacement", "SparseItemwiseDropoutWithReplacement"])
def test_refusals(name):
    x, lengths = np.arange(4, dtype=np.int64), np.array([1, 3], np.int32)
    cases = [([x, np.array([1, 2], np.int32)], "Number of elements should match total length"),
             ([x.astype(np.int32), lengths], "int64"),
             ([x, lengths.astype(np.int64)], "int32"),
             ([x.reshape(2, 2), lengths], "1-D"),
             ([x, np.array([5, -1], np.int32)], "negative")]
    for inputs, message in cases:
        with pytest.raises(Caffe2Error, match=message):
            run(_op(name, 0.5), inputs)
    with pytest.raises(Caffe2Error, match=r"ratio must be in \[0, 1\]"):
        run(_op(name, 1.5), [x, lengths])
