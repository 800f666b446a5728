"""The ops recommendation nets use around lookups, against NumPy references written here:
Gather, BatchGather, LengthsRangeFill, LengthsSum/Mean, BatchMatMul, and the existing
Concat(add_axis), Split, Flatten, Sigmoid, FC(axis, axis_w)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(11)


def run_op(op_type, inputs, n_out=1, **kwargs):
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    outs = ["out%d" % i for i in range(n_out)]
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, outs, **kwargs))
    vals = [workspace.FetchBlob(o) for o in outs]
    return vals[0] if n_out == 1 else vals


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_rows_with_multi_dim_indices(index_dtype):
    data = RNG.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 5], [2, 2], [4, 1]], index_dtype)
    got = run_op("Gather", [data, idx])
    want = np.array([[data[i] for i in row] for row in idx])
    assert got.shape == (3, 2, 3)
    np.testing.assert_array_equal(got, want)


def test_gather_out_of_bounds_and_wrap():
    data = np.arange(5, dtype=np.float32)
    with pytest.raises(Caffe2Error, match="INDICES element is out of DATA bounds, id=5 axis_dim=5"):
        run_op("Gather", [data, np.array([1, 5], np.int64)])
    with pytest.raises(Caffe2Error, match="id=-1"):
        run_op("Gather", [data, np.array([-1], np.int64)])
    np.testing.assert_array_equal(run_op("Gather", [data, np.array([-1], np.int64)], wrap_indices=1), [4.0])


def test_batch_gather_selects_along_axis_1():
    data = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    idx = np.array([4, 0, 4], np.int32)
    got = run_op("BatchGather", [data, idx])
    want = np.stack([[data[b, i] for i in idx] for b in range(2)])
    assert got.shape == (2, 3, 3)
    np.testing.assert_array_equal(got, want)


def test_lengths_range_fill():
    got = run_op("LengthsRangeFill", [np.array([2, 0, 3, 1], np.int32)])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [0, 1, 0, 1, 2, 0])
    assert run_op("LengthsRangeFill", [np.zeros(0, np.int32)]).shape == (0,)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op,mean", [("LengthsSum", False), ("LengthsMean", True)])
def test_lengths_reductions(op, mean, dtype):
    lengths = np.array([2, 0, 3, 1], np.int32)
    data = RNG.standard_normal((6, 2, 3)).astype(dtype)
    got = run_op(op, [data, lengths])
    want, cur = [], 0
    for n in lengths:
        seg = data[cur:cur + n].astype(np.float64)
        want.append(seg.sum(0) / (n if mean and n else 1))
        cur += n
    assert got.shape == (4, 2, 3) and got.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got, np.array(want), rtol=tol, atol=tol)


def test_lengths_sum_mismatch_error():
    with pytest.raises(Caffe2Error, match="LENGTHS must sum to the first dimension of DATA"):
        run_op("LengthsSum", [np.zeros((4, 2), np.float32), np.array([1, 2], np.int32)])


def _ref_bmm(a, b, ta, tb):
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    out = np.zeros(a.shape[:-1] + (b.shape[-1],))
    for idx in np.ndindex(*a.shape[:-2]):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                out[idx + (i, j)] = sum(float(a[idx + (i, k)]) * float(b[idx + (k, j)]) for k in range(a.shape[-1]))
    return out


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_batch_matmul_transposes(ta, tb):
    a = RNG.standard_normal((3, 4, 5) if not ta else (3, 5, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 5, 2) if not tb else (3, 2, 5)).astype(np.float32)
    got = run_op("BatchMatMul", [a, b], trans_a=ta, trans_b=tb)
    np.testing.assert_allclose(got, _ref_bmm(a, b, ta, tb), rtol=1e-5, atol=1e-5)


def test_batch_matmul_broadcast():
    a = RNG.standard_normal((2, 1, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4, 2)).astype(np.float32)
    got = run_op("BatchMatMul", [a, b], broadcast=1)
    assert got.shape == (2, 5, 3, 2)
    want = _ref_bmm(np.broadcast_to(a, (2, 5, 3, 4)), np.broadcast_to(b, (2, 5, 4, 2)), 0, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    vec = RNG.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(run_op("BatchMatMul", [a[0, 0], vec], broadcast=1),
                               a[0, 0].astype(np.float64) @ vec, rtol=1e-5)


def test_batch_matmul_errors():
    with pytest.raises(Caffe2Error, match="batch dims differ"):
        run_op("BatchMatMul", [np.zeros((2, 3, 4), np.float32), np.zeros((3, 4, 2), np.float32)])
    with pytest.raises(Caffe2Error, match="inner dimensions differ"):
        run_op("BatchMatMul", [np.zeros((2, 3, 4), np.float32), np.zeros((2, 3, 2), np.float32)])


# ----------------------------------------------------------------- existing ops the issue lists

def test_concat_add_axis_and_split_back():
    parts = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    y, info = run_op("Concat", parts, 2, axis=1, add_axis=1)
    assert y.shape == (2, 4, 3)
    for k in range(4):
        np.testing.assert_array_equal(y[:, k, :], parts[k])
    np.testing.assert_array_equal(info, [1, 1, 1, 1])
    back = run_op("Split", [y], 4, axis=1, add_axis=1)
    for k in range(4):
        np.testing.assert_array_equal(back[k], parts[k])


def test_split_with_sizes():
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    a, b = run_op("Split", [x], 2, axis=1, split=[2, 5])
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(b, x[:, 2:])
    with pytest.raises(Caffe2Error):
        run_op("Split", [x], 2, axis=1, split=[2, 4])


def test_flatten():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_op("Flatten", [x]), x.reshape(2, 60))
    np.testing.assert_array_equal(run_op("Flatten", [x], axis=2), x.reshape(6, 20))


def test_sigmoid():
    x = np.array([-100.0, -3.0, 0.0, 2.0, 100.0], np.float32)
    np.testing.assert_allclose(run_op("Sigmoid", [x]), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-38)


def test_fc_axis_and_axis_w():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((5, 2, 2)).astype(np.float32)   # N=5, K=4 with axis_w=1
    b = RNG.standard_normal(5).astype(np.float32)
    got = run_op("FC", [x, w, b], axis=2, axis_w=1)
    want = x.astype(np.float64).reshape(6, 4) @ w.reshape(5, 4).T.astype(np.float64) + b
    assert got.shape == (2, 3, 5)
    np.testing.assert_allclose(got, want.reshape(2, 3, 5), rtol=1e-5, atol=1e-5)
    w2 = RNG.standard_normal((2, 3, 12)).astype(np.float32)  # axis_w=2: N=6, K=12
    b2 = np.zeros(6, np.float32)
    got = run_op("FC", [x, w2, b2], axis=1, axis_w=2)
    want = x.reshape(2, 12).astype(np.float64) @ w2.reshape(6, 12).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
