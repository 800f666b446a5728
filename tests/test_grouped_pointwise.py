"""Grouped 1x1 convolutions (kernels/cpu/cnn/grouped_pointwise.py) against a NumPy
formula: groups, strides, bias / residual / ReLU, batches, odd sizes, threads."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import grouped_pointwise as gp_k

RNG = np.random.default_rng(20261128)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def ref_grouped_1x1(x, w, b, strides, group, residual=None, relu=False):
    """float64: y[n, g*mg + m, p] = sum_k w[g*mg + m, k] x[n, g*kg + k, p at the stride]."""
    x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)].astype(np.float64)
    n, c = x.shape[:2]
    m = w.shape[0]
    xg = x.reshape(n, group, c // group, -1)
    wg = w.reshape(group, m // group, c // group).astype(np.float64)
    y = np.einsum("gmk,ngkp->ngmp", wg, xg).reshape((n, m) + x.shape[2:])
    if b is not None:
        y += b.astype(np.float64).reshape(1, m, *([1] * (x.ndim - 2)))
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


CASES = [
    # x shape, out channels, strides, group
    ((1, 136, 28, 28), 136, (1, 1), 4),      # ShuffleNet's layers
    ((2, 24, 9, 7), 112, (1, 1), 4),         # a batch, 6 inputs per group
    ((1, 12, 5, 6), 9, (2, 2), 3),           # strided, 3 outputs per group, odd sizes
    ((1, 6, 3, 3), 4, (1, 1), 2),            # 3 inputs and 2 outputs per group, tiny map
    ((1, 8, 7, 9), 16, (1, 2), 8),           # one input and two outputs per group
    ((1, 10, 40, 40), 15, (1, 1), 5),        # more columns than one block
]


def plan_of(x, w, strides, group):
    return conv_k._plan(x.shape, w.shape, strides, (0,) * (2 * len(strides)), (1,) * len(strides), group,
                        np.dtype(x.dtype).str)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, m, strides, group", CASES)
def test_grouped_1x1_conv_matches_numpy(xs, m, strides, group, dtype):
    x, w, b = rand(*xs, dtype=dtype), rand(m, xs[1] // group, 1, 1, dtype=dtype), rand(m, dtype=dtype)
    plan = plan_of(x, w, strides, group)
    if dtype == np.float32 and np.prod(plan.out_shape[2:]) >= gp_k.DIRECT_MIN_PIXELS:
        assert plan.compute.__qualname__.startswith("direct_grouped_pointwise_plan")
    else:
        assert plan.compute.product.__name__ == "grouped_product"
    pads, dil = (0, 0, 0, 0), (1, 1)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y = conv_k.conv_nchw(x, w, None, strides, pads, dil, group)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ref_grouped_1x1(x, w, None, strides, group), **tol)
    y = conv_k.conv_nchw(x, w, b, strides, pads, dil, group, activation="relu")
    np.testing.assert_allclose(y, ref_grouped_1x1(x, w, b, strides, group, relu=True), **tol)
    res = rand(*y.shape, dtype=dtype)
    for relu in (False, True):
        y = conv_k.conv_nchw(x, w, b, strides, pads, dil, group, residual=res, activation="relu" if relu else None)
        np.testing.assert_allclose(y, ref_grouped_1x1(x, w, b, strides, group, res, relu), **tol)


@pytest.mark.parametrize("xs, m, strides, group", CASES)
def test_grouped_1x1_conv_on_two_threads(monkeypatch, xs, m, strides, group):
    """Every product split over the team: whole groups per thread, or column blocks
    when the groups do not share out evenly."""
    monkeypatch.setattr(gp_k, "DIRECT_MIN_PIXELS", 1 << 30)     # the BLAS path (the direct one: its own tests)
    conv_k._plan.cache_clear()
    monkeypatch.setattr(gp_k, "_MIN_PARALLEL_MACS", 1)
    monkeypatch.setattr(gp_k, "_MIN_BLOCK_COLS", 4)
    monkeypatch.setattr(gp_k, "team_size", lambda: 2)
    calls = []
    kernel = gp_k._grouped_gemm
    monkeypatch.setattr(gp_k, "_grouped_gemm", lambda *args: calls.append(args[-2:]) or kernel(*args))
    x, w, b = rand(*xs), rand(m, xs[1] // group, 1, 1), rand(m)
    res = rand(*ref_grouped_1x1(x, w, b, strides, group).shape)
    y = conv_k.conv_nchw(x, w, b, strides, (0, 0, 0, 0), (1, 1), group, residual=res, activation="relu")
    np.testing.assert_allclose(y, ref_grouped_1x1(x, w, b, strides, group, res, True), rtol=1e-5, atol=1e-5)
    assert len(calls) == xs[0] and all(blocks == 2 for _, blocks in calls)
    assert all(cols == (1 if group % 2 == 0 else 2) for cols, _ in calls)
    conv_k._plan.cache_clear()


def test_grouped_1x1_writes_into_a_concat_buffer_and_keeps_nan():
    """The output may be a channel range of a larger buffer (the executor's concat
    elimination); NaN survives the ReLU as in the other conv paths."""
    x, w, b = rand(1, 8, 5, 5), rand(6, 4, 1, 1), rand(6)
    x[0, 0, 2, 3] = np.nan
    whole = np.full((1, 10, 5, 5), 7.0, np.float32)
    y = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 2, activation="relu", out=whole[:, 2:8])
    assert np.shares_memory(y, whole)
    assert (whole[:, :2] == 7).all() and (whole[:, 8:] == 7).all()
    assert np.isnan(y[0, :3, 2, 3]).all() and not np.isnan(y[0, 3:]).any()
    keep = ~np.isnan(y)
    np.testing.assert_allclose(y[keep], ref_grouped_1x1(x, w, b, (1, 1), 2, relu=True)[keep], rtol=1e-5, atol=1e-5)


def test_grouped_pointwise_refuses_operands_that_do_not_agree():
    x, w, out = rand(2, 3, 10), rand(2, 4, 3), np.empty((2, 4, 10), np.float32)
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x, rand(2, 4, 5), out)                  # inner dims differ
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x, w, np.empty((2, 4, 9), np.float32))  # columns differ
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x[:, :, ::2], w, out[:, :, :5])         # not contiguous
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x.astype(np.float64), w, out)           # dtypes differ
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x, w, out, bias=rand(7))                # bias of the wrong size
    with pytest.raises(ValueError):
        gp_k.grouped_pointwise(x, w, out, residual=rand(2, 4, 9))      # residual of the wrong size


def test_group_one_matrix_vector_and_integer_convs_keep_their_paths():
    x = rand(1, 8, 4, 4)
    for w, group, xs in ((rand(8, 8, 1, 1), 1, x), (rand(4, 2, 1, 1), 4, x),      # group 1; 1 output a group
                         (rand(8, 4, 1, 1), 2, rand(1, 8, 1, 1))):                # a 1x1 map (GEMV)
        assert not plan_of(xs, w, (1, 1), group).compute.product.__name__ == "grouped_product"
        y = conv_k.conv_nchw(xs, w, None, (1, 1), (0, 0, 0, 0), (1, 1), group)
        np.testing.assert_allclose(y, ref_grouped_1x1(xs, w, None, (1, 1), group), rtol=1e-5, atol=1e-5)
    xi = np.ones((1, 4, 3, 3), np.int32)
    assert plan_of(xi, np.ones((4, 2, 1, 1), np.int32), (1, 1), 2).compute.product.__name__ == "gemm_into"
    y = conv_k.conv_nchw(xi, np.ones((4, 2, 1, 1), np.int32), None, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    assert y.dtype == np.int32 and (y == 2).all()
