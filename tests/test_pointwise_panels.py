"""1x1 convolutions in channel panels (kernels/cpu/cnn/pointwise_panels.py): against a
float64 product written here, with every epilogue, ragged channel and pixel counts,
batches, team sizes, NaN, and through conv_nchw's plan choice. FORCE makes the path
take every float32 1x1, so the tests run on CPUs without AVX-512 too (LLVM splits the
16-lane vectors there)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import pointwise_panels as pp
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(pp, "FORCE", True)
    conv_k._plan.cache_clear()
    yield
    conv_k._plan.cache_clear()


def reference(x, w, b, residual=None, relu=False):
    n, c, h, wd = x.shape
    m = w.shape[0]
    y = np.einsum("mc,ncp->nmp", w.reshape(m, c).astype(np.float64), x.reshape(n, c, -1).astype(np.float64))
    if b is not None:
        y += b.astype(np.float64)[None, :, None]
    y = y.reshape(n, m, h, wd)
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


def run_panels(x, w, b, relu=False, residual=None, out=None):
    plan = pp.panel_plan(x.shape, w.shape[0], x.shape[2:], np.float32)
    assert plan is not None
    if out is None:
        out = np.full((x.shape[0], w.shape[0]) + x.shape[2:], np.nan, np.float32)   # every output written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, residual)
    return out


def _case(n, c, m, h, wd, seed=0):
    rng = np.random.default_rng(seed + c + m + h)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((n, m, h, wd)).astype(np.float32)
    return x, w, b, res


# (batch, C, M, H, W): channels past a 32-panel, pixels past a 12-block, one pixel, one channel
SHAPES = [(1, 512, 128, 7, 7), (2, 37, 45, 5, 3), (1, 1, 1, 1, 1), (3, 64, 33, 2, 6), (1, 130, 64, 8, 8),
          (1, 16, 97, 1, 13)]


@pytest.mark.parametrize("n,c,m,h,wd", SHAPES)
def test_panels_match_float64_with_every_epilogue(forced, n, c, m, h, wd):
    x, w, b, res = _case(n, c, m, h, wd)
    tol = dict(rtol=1e-4, atol=1e-5 * np.sqrt(c))
    for bias, relu, residual in ((b, False, None), (None, True, None), (b, True, res), (None, False, res)):
        np.testing.assert_allclose(run_panels(x, w, bias, relu, residual), reference(x, w, bias, residual, relu),
                                   **tol)


def test_results_are_bit_identical_at_team_sizes_1_2_3(forced, monkeypatch):
    """Each output's sum runs over the input channels in order whoever computes it."""
    x, w, b, res = _case(1, 600, 130, 7, 7)
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(jit, "team_blocks", lambda count, work, t=threads: min(count, t))
        monkeypatch.setattr(pp, "team_blocks", lambda count, work, t=threads: min(count, t))
        results.append(run_panels(x, w, b, True, res))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], reference(x, w, b, res, True), rtol=1e-4, atol=1e-3)


def test_nan_reaches_every_output_that_reads_it_and_relu_keeps_it(forced):
    x, w, b, _ = _case(1, 40, 35, 5, 5)
    x[0, 3, 2, 4] = np.nan
    y = run_panels(x, w, b, relu=True)
    want = reference(x, w, b, relu=True)
    assert np.isnan(y[:, :, 2, 4]).all()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y[~np.isnan(y)], want[~np.isnan(want)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks", [1, 2], ids=["serial", "parallel"])
def test_numpy_twin_agrees_with_the_kernel(forced, monkeypatch, blocks):
    """Both kernels' twins (test_jit_modes leaves this module's to this test)."""
    monkeypatch.setattr(pp, "team_blocks", lambda count, work: min(count, blocks))
    x, w, b, res = _case(2, 70, 50, 6, 5)
    compiled = run_panels(x, w, b, True, res)
    called = []
    kernel = pp._panel_blocks if blocks > 1 else pp._panel_blocks_serial
    monkeypatch.setattr(kernel, "twin", lambda *args: called.append(1) or pp._panel_blocks_numpy(*args))
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = run_panels(x, w, b, True, res)
    finally:
        jit.set_jit_mode(before)
    assert called
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-4)


def test_weights_edited_in_place_are_packed_again(forced):
    x, w, b, _ = _case(1, 64, 40, 7, 7)
    plan = pp.panel_plan(x.shape, 40, (7, 7), np.float32)
    out = np.empty((1, 40, 7, 7), np.float32)
    scratch = Scratch()
    with jit.team():
        plan(x, w, out, scratch, b)
        w[5] *= -2.0
        plan(x, w, out, scratch, b)
    np.testing.assert_allclose(out, reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_output_that_is_a_channel_slice_of_a_larger_buffer(forced):
    """A placed Concat hands its convs channel slices of one buffer (batch 2: strided)."""
    x, w, b, _ = _case(2, 48, 40, 4, 4)
    big = np.full((2, 100, 4, 4), -7.0, np.float32)
    run_panels(x, w, b, out=big[:, 30:70])
    np.testing.assert_allclose(big[:, 30:70], reference(x, w, b), rtol=1e-4, atol=1e-4)
    assert (big[:, :30] == -7.0).all() and (big[:, 70:] == -7.0).all()


def test_conv_nchw_takes_the_panels_where_the_rule_says(monkeypatch):
    conv_k._plan.cache_clear()
    try:
        monkeypatch.setattr(pp, "FORCE", False)
        monkeypatch.setattr(pp, "takes", lambda c, m, pixels, dtype: pixels <= 64 and c >= 512 and m >= 128
                            and np.dtype(dtype) == np.float32)
        x, w, b, res = _case(1, 512, 128, 7, 7)
        plan = conv_k._plan(x.shape, w.shape, (1, 1), (0, 0, 0, 0), (1, 1), 1, np.dtype(np.float32))
        assert plan.compute.__qualname__.startswith("panel_plan")
        y = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 1, activation="relu", residual=res)
        np.testing.assert_allclose(y, reference(x, w, b, res, True), rtol=1e-4, atol=1e-3)
        # 14x14 maps, strided, grouped or float64 1x1s keep the other paths
        for x_shape, w_shape, strides, group, dtype in (((1, 512, 14, 14), (128, 512, 1, 1), (1, 1), 1, np.float32),
                                                         ((1, 512, 14, 14), (128, 512, 1, 1), (2, 2), 1, np.float32),
                                                         ((1, 512, 7, 7), (128, 256, 1, 1), (1, 1), 2, np.float32),
                                                         ((1, 512, 7, 7), (128, 512, 1, 1), (1, 1), 1, np.float64)):
            other = conv_k._plan(x_shape, w_shape, strides, (0, 0, 0, 0), (1, 1), group, np.dtype(dtype))
            assert not other.compute.__qualname__.startswith("panel_plan")
    finally:
        conv_k._plan.cache_clear()


def test_rule_needs_sixteen_lane_registers(monkeypatch):
    from caffe2py.kernels.cpu.runtime import simd
    monkeypatch.setattr(pp, "FORCE", False)
    monkeypatch.setattr(simd, "target_lanes", lambda: 8)
    assert not pp.takes(1024, 256, 49, np.float32)
    monkeypatch.setattr(simd, "target_lanes", lambda: 16)
    assert pp.takes(1024, 256, 49, np.float32)
    assert not pp.takes(1024, 256, 196, np.float32)      # 14x14: OpenBLAS measured faster
    assert not pp.takes(256, 256, 49, np.float32)
    assert not pp.takes(1024, 48, 49, np.float32)
    assert not pp.takes(1024, 256, 49, np.float64)
