"""Grouped 1x1 convolutions of float32 maps of 24 pixels or more through the
register-blocked direct kernel (grouped_pointwise.py's direct_grouped_pointwise_plan
running stem_conv._stem_rows, one row of P outputs per group): against a float64 formula
written here, tails of the 24-pixel blocks and of the 4- and 8-channel blocks, team splits, twin."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import grouped_pointwise as gp_k
from caffe2py.kernels.cpu.runtime import jit

from _conv_reference import both_register_widths


def reference(x, w, b, group, residual=None, relu=False):
    """float64: y[n, g * mg + o, p] = sum_k w[g * mg + o, k] * x[n, g * kg + k, p]."""
    n, c = x.shape[:2]
    m = w.shape[0]
    xg = x.astype(np.float64).reshape(n, group, c // group, -1)
    wg = w.astype(np.float64).reshape(group, m // group, c // group)
    y = np.einsum("gok,ngkp->ngop", wg, xg).reshape((n, m) + x.shape[2:])
    if b is not None:
        y += b.astype(np.float64).reshape(1, m, 1, 1)
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


def data(xs, m, group, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(xs).astype(np.float32),
            rng.standard_normal((m, xs[1] // group, 1, 1)).astype(np.float32),
            rng.standard_normal(m).astype(np.float32))


def path_name(xs, m, group, dtype="<f4"):
    """The direct plan's compute, or the product the BLAS pointwise plan runs."""
    compute = conv_k._plan(xs, (m, xs[1] // group, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), group, dtype).compute
    return getattr(compute, "product", compute).__qualname__


register_lanes = both_register_widths()


# x shape, out channels, group: maps of 24 (one block), 25 (block + vector), 33 (a
# moved-back block), 49 (7x7: two blocks + vector), 784; 1, 3, 5, 34 outputs a group
# (4-channel block tails); a batch
CASES = [
    ((1, 8, 4, 6), 8, 2),
    ((2, 12, 5, 5), 9, 3),
    ((1, 6, 3, 11), 10, 2),
    ((1, 544, 7, 7), 544, 4),            # ShuffleNet's
    ((1, 136, 28, 28), 136, 4),          # ShuffleNet's
    ((1, 24, 8, 7), 112, 4),             # 6 inputs a group
    ((1, 10, 6, 4), 20, 10),             # one input a group
]


@pytest.mark.parametrize("xs, m, group", CASES)
def test_direct_grouped_1x1_matches_float64(xs, m, group):
    x, w, b = data(xs, m, group, sum(xs) + m)
    assert path_name(xs, m, group).startswith("direct_grouped_pointwise_plan")
    res = np.random.default_rng(1).standard_normal((xs[0], m) + xs[2:]).astype(np.float32)
    tol = dict(rtol=1e-5, atol=1e-5 * np.sqrt(xs[1] // group))
    for bias, residual, relu in ((None, None, False), (b, None, True), (b, res, False), (None, res, True)):
        got = conv_k.conv_nchw(x, w, bias, (1, 1), (0, 0, 0, 0), (1, 1), group, residual=residual,
                               activation="relu" if relu else None)
        np.testing.assert_allclose(got, reference(x, w, bias, group, residual, relu), **tol)


def test_small_maps_and_float64_keep_the_blas_path():
    assert path_name((1, 8, 4, 5), 8, 2).startswith("grouped_pointwise_product")      # 20 pixels
    assert path_name((1, 8, 6, 6), 8, 2, "<f8").startswith("grouped_pointwise_product")


def test_strided_maps_and_a_bias_of_the_wrong_length():
    """A strided grouped 1x1 reads every s-th pixel (the direct plan on the strided
    map); a bias that does not hold one value per output channel is refused before
    the kernel reads it."""
    x, w, b = data((1, 8, 14, 12), 12, 2, 8)
    assert conv_k._plan(x.shape, w.shape, (2, 2), (0, 0, 0, 0), (1, 1), 2, "<f4").compute.__qualname__.startswith(
        "direct_grouped_pointwise_plan")
    got = conv_k.conv_nchw(x, w, b, (2, 2), (0, 0, 0, 0), (1, 1), 2, activation="relu")
    np.testing.assert_allclose(got, reference(np.ascontiguousarray(x[:, :, ::2, ::2]), w, b, 2, relu=True),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="bias of 11 values for 12 output channels"):
        conv_k.conv_nchw(x, w, b[:11], (1, 1), (0, 0, 0, 0), (1, 1), 2)


def test_team_splits_give_identical_bits(monkeypatch):
    x, w, b = data((1, 40, 9, 9), 20, 5, 2)
    res = np.random.default_rng(3).standard_normal((1, 20, 9, 9)).astype(np.float32)
    results = []
    for blocks in (1, 2, 3):
        monkeypatch.setattr(gp_k, "team_blocks", lambda count, work, blocks=blocks: min(count, blocks))
        results.append(conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 5, residual=res, activation="relu"))
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], reference(x, w, b, 5, res, True), rtol=1e-5, atol=1e-5)


def test_weights_edited_in_place_or_viewed_are_packed_from_their_values():
    x, w, _ = data((1, 8, 5, 5), 8, 2, 4)
    first = conv_k.conv_nchw(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    w *= 2
    second = conv_k.conv_nchw(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    np.testing.assert_allclose(second, 2 * first.astype(np.float64), rtol=1e-5, atol=1e-5)
    # weights that are part of a larger array
    bigger = np.concatenate([w, -w])
    third = conv_k.conv_nchw(x, bigger[8:], None, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    np.testing.assert_allclose(third, -second, rtol=1e-6, atol=1e-6)


def test_nan_stays_in_its_group_and_its_pixel():
    x, w, b = data((1, 8, 5, 6), 6, 2, 5)
    x[0, 1, 2, 3] = np.nan
    y = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 2, activation="relu")
    assert np.isnan(y[0, :3, 2, 3]).all() and np.isnan(y).sum() == 3


def test_numpy_twin_agrees_with_the_kernel():
    x, w, b = data((2, 12, 7, 7), 12, 3, 6)
    res = np.random.default_rng(7).standard_normal((2, 12, 7, 7)).astype(np.float32)
    compiled = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 3, residual=res, activation="relu")
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 3, residual=res, activation="relu")
    finally:
        jit.set_jit_mode(before)
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs, m, group", [CASES[2], CASES[4], CASES[5]])
def test_four_channel_blocks_where_eight_would_be_used(monkeypatch, xs, m, group):
    """direct_conv.WIDE off: groups of more than 4 outputs in 4-channel blocks at 16 lanes
    too (with it on, 16-lane registers take 8-channel blocks: stem_conv._stem_rows_wide)."""
    from caffe2py.kernels.cpu.cnn import direct_conv
    monkeypatch.setattr(direct_conv, "WIDE", False)
    conv_k._plan.cache_clear()
    x, w, b = data(xs, m, group, 5)
    compute = conv_k._plan(xs, w.shape, (1, 1), (0, 0, 0, 0), (1, 1), group, "<f4").compute
    assert compute.channels == 4
    got = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), group, activation="relu")
    np.testing.assert_allclose(got, reference(x, w, b, group, relu=True), rtol=1e-5,
                               atol=1e-5 * np.sqrt(xs[1] // group))
    conv_k._plan.cache_clear()
