"""CNN CPU kernels (conv, pooling, gemm, norms), their Caffe2 ops and the prepare-time
optimize pass, against references written here: direct loops on small shapes,
NumPy formulas and onnxruntime single-node models."""
import itertools
import os

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.executor import compile_net
from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.math import gemm as gemm_k
from caffe2py.kernels.cpu.cnn import norm as norm_k
from caffe2py.kernels.cpu.cnn import pool as pool_k
from caffe2py.kernels.cpu.cnn import winograd as winograd_k
from caffe2py.proto import caffe2_pb2

RNG = np.random.default_rng(20261122)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------- naive references

def out_size(size, k, s, pb, pe, d, ceil=False):
    span = (k - 1) * d + 1
    total = size + pb + pe - span
    o = (-(-total // s) if ceil else total // s) + 1
    if ceil and (o - 1) * s >= size + pb:
        o -= 1
    return o


def ref_conv(x, w, b, strides, pads, dilations, group, relu=False):
    """Direct loops over every output element, float64; pads = begins + ends; N-d."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    k = len(kernel)
    outs = [out_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[k + i], dilations[i]) for i in range(k)]
    y = np.zeros((n, m) + tuple(outs))
    mg = m // group
    for nn, mm in itertools.product(range(n), range(m)):
        g = mm // mg
        for pos in itertools.product(*(range(o) for o in outs)):
            acc = 0.0
            for cc in range(cg):
                for off in itertools.product(*(range(kk) for kk in kernel)):
                    idx = [pos[i] * strides[i] + off[i] * dilations[i] - pads[i] for i in range(k)]
                    if all(0 <= idx[i] < x.shape[2 + i] for i in range(k)):
                        acc += float(x[(nn, g * cg + cc) + tuple(idx)]) * float(w[(mm, cc) + off])
            y[(nn, mm) + pos] = acc + (float(b[mm]) if b is not None else 0.0)
    return np.maximum(y, 0) if relu else y


def ref_conv2d_windows(x, w, b, pads):
    """Stride-1 2-D convolution in float64 as one einsum over sliding windows of the
    padded input (the same definition as ref_conv, fast enough for bigger shapes)."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", win, w.astype(np.float64)) + b.astype(np.float64)[:, None, None]


def ref_pool(x, kernel, strides, pads, kind, dilations=None, ceil=False, include_pad=False):
    """Direct loops; ceil-mode windows may run past the padded input (those cells never count)."""
    k = len(kernel)
    dilations = dilations or [1] * k
    outs = [out_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[k + i], dilations[i], ceil)
            for i in range(k)]
    y = np.zeros(x.shape[:2] + tuple(outs))
    for nn, cc in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for pos in itertools.product(*(range(o) for o in outs)):
            vals, counted = [], 0
            for off in itertools.product(*(range(kk) for kk in kernel)):
                idx = [pos[i] * strides[i] + off[i] * dilations[i] - pads[i] for i in range(k)]
                inside = all(0 <= idx[i] < x.shape[2 + i] for i in range(k))
                in_pads = all(-pads[i] <= idx[i] < x.shape[2 + i] + pads[k + i] for i in range(k))
                if inside:
                    vals.append(float(x[(nn, cc) + tuple(idx)]))
                if inside or (include_pad and in_pads):
                    counted += 1
            y[(nn, cc) + pos] = max(vals) if kind == "max" else sum(vals) / counted
    return y


# ----------------------------------------------------------------- convolution

CONV_CASES = [
    # x shape, w shape, strides, pads, dilations, group
    ((2, 3, 7, 8), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 9, 9), (6, 2, 3, 3), (2, 2), (0, 1, 2, 0), (1, 1), 2),            # groups, asymmetric pads
    ((1, 3, 10, 9), (5, 3, 3, 2), (1, 2), (2, 1, 0, 1), (2, 1), 1),           # dilation, rect kernel
    ((2, 6, 8, 7), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),            # depthwise
    ((1, 4, 9, 8), (8, 1, 3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 4),            # depthwise x2, stride 2
    ((1, 3, 11, 10), (3, 1, 3, 2), (2, 3), (1, 1, 0, 2), (2, 2), 3),          # depthwise, dilated, strided
    ((2, 5, 6, 7), (4, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),            # 1x1 plain matmul
    ((1, 6, 7, 7), (6, 2, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 3),            # 1x1 strided, grouped
    ((1, 3, 5, 5), (2, 3, 1, 1), (1, 1), (1, 0, 0, 1), (1, 1), 1),            # 1x1 with pads
    ((2, 3, 11), (4, 3, 3), (2,), (1, 2), (2,), 1),                           # 1-D
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), (1, 2, 1), (1, 0, 1, 0, 1, 1), (1, 1, 2), 1),   # 3-D
    ((1, 4, 5, 4, 4), (4, 1, 3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 4),   # 3-D depthwise
]


@pytest.mark.parametrize("xs,ws,strides,pads,dil,group", CONV_CASES)
def test_conv_matches_direct_loops(xs, ws, strides, pads, dil, group):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    y = conv_k.conv_nchw(x, w, b, strides, pads, dil, group)
    np.testing.assert_allclose(y, ref_conv(x, w, b, strides, pads, dil, group), rtol=1e-4, atol=1e-4)
    y = conv_k.conv_nchw(x, w, None, strides, pads, dil, group, activation="relu")
    np.testing.assert_allclose(y, ref_conv(x, w, None, strides, pads, dil, group, relu=True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,strides,pads,dil", [
    ((2, 5, 9, 8), (5, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 11, 10), (6, 1, 5, 3), (2, 3), (2, 0, 1, 2), (1, 1)),       # mult 2, 5x3 kernel
    ((1, 4, 13, 12), (4, 1, 3, 3), (3, 2), (1, 2, 0, 1), (2, 3)),       # stride/dilation grids
    ((1, 2, 12, 12), (2, 1, 4, 4), (2, 2), (0, 0, 0, 0), (2, 1)),       # every tap in one phase row
    ((1, 3, 10, 9), (3, 1, 3, 3), (2, 2), (-1, 1, 2, -2), (1, 1)),      # negative pads crop
    ((1, 3, 7, 7), (3, 1, 1, 3), (1, 4), (0, 3, 0, 3), (1, 1)),
])
def test_depthwise_2d_phases_match_direct_loops(xs, ws, strides, pads, dil):
    c = xs[1]
    k = len(strides)
    scratch = conv_k.Scratch()
    for _ in range(2):     # buffers reused with new values: borders stay zero
        x, w, b = rand(*xs), rand(*ws), rand(ws[0])
        y = conv_k.conv_nchw(x, w, b, strides, pads, dil, c, scratch=scratch, activation="relu")
        crop = tuple(slice(max(0, -pads[i]), xs[2 + i] - max(0, -pads[k + i])) for i in range(k))
        ref = ref_conv(x[(slice(None), slice(None)) + crop], w, b, strides, [max(0, p) for p in pads], dil, c,
                       relu=True)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        assert not np.shares_memory(y, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_compiled_kernel_paths(monkeypatch, dtype):
    """Float depthwise convs run the compiled kernel: the flat stride-1 loop and the
    row loop for strides, a channel multiplier, both split over two threads."""
    from caffe2py.kernels.cpu.runtime import jit
    monkeypatch.setattr(jit, "TEAM_MIN_WORK", 1)       # several blocks even on small maps
    for xs, ws, strides, pads, dil in [((2, 6, 9, 8), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
                                       ((1, 5, 12, 11), (5, 1, 3, 5), (2, 3), (1, 2, 0, 1), (2, 1))]:
        x, w, b = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype), rand(ws[0], dtype=dtype)
        plan = conv_k._plan(x.shape, w.shape, strides, pads, dil, xs[1], np.dtype(dtype).str)
        assert plan.compute.__qualname__.startswith("depthwise_plan")
        y = conv_k.conv_nchw(x, w, b, strides, pads, dil, xs[1], activation="relu")
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref_conv(x, w, b, strides, pads, dil, xs[1], relu=True), rtol=1e-5, atol=1e-5)


def test_depthwise_propagates_nan_and_inf():
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((2, 1, 3, 3), np.float32)
    x[0, 0, 2, 2] = np.nan
    x[0, 1, 0, 0] = np.inf
    y = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 2, activation="relu")
    assert np.isnan(y[0, 0, 1:4, 1:4]).all() and not np.isnan(y[0, 0, 0]).any()
    assert np.isposinf(y[0, 1, :2, :2]).all() and np.isfinite(y[0, 1, 2:]).all()


@pytest.mark.parametrize("dtype", [np.float16, np.int32])
def test_conv_other_dtypes_keep_their_dtype_on_the_numpy_paths(dtype):
    """float16 and integer convs (ONNX allows them; ConvInteger runs int32) take exact or
    NumPy paths, never Winograd's fractional transforms or the compiled float kernels:
    a grouped strided conv, and 3x3 layers that would be Winograd / shift-add in float32."""
    for xs, ws, strides, pads, group in [((1, 4, 9, 8), (6, 2, 3, 3), (2, 1), (1, 0, 1, 2), 2),
                                         ((1, 32, 6, 6), (32, 32, 3, 3), (1, 1), (1, 1, 1, 1), 1),
                                         ((1, 16, 6, 5), (4, 16, 3, 3), (1, 1), (1, 1, 1, 1), 1)]:
        x, w = rand(*xs), rand(*ws)
        if dtype == np.int32:
            x, w = np.round(x * 4), np.round(w * 4)
        x, w = x.astype(dtype), w.astype(dtype)
        y = conv_k.conv_nchw(x, w, None, strides, pads, (1, 1), group)
        assert y.dtype == dtype
        ref = ref_conv(x.astype(np.float64), w.astype(np.float64), None, strides, pads, (1, 1), group)
        if dtype == np.int32:
            np.testing.assert_array_equal(y, ref)
        else:
            np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-2, atol=2e-1)


def test_conv_float64_and_negative_pads():
    x, w = rand(1, 2, 6, 6, dtype=np.float64), rand(3, 2, 3, 3, dtype=np.float64)
    y = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, ref_conv(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1), rtol=1e-12)
    # A negative pad crops the input before convolving.
    y = conv_k.conv_nchw(x, w, None, (1, 1), (-1, 0, 0, 1), (1, 1), 1)
    np.testing.assert_allclose(y, ref_conv(x[:, :, 1:], w, None, (1, 1), (0, 0, 0, 1), (1, 1), 1), rtol=1e-12)


def test_conv_call_plans_follow_cache_clear_and_take_any_argument_form(monkeypatch):
    """conv_nchw looks its plan up per call by shapes, dtypes and geometry; clearing
    _plan's cache (what a dispatch switch needs) clears that lookup too, and list
    arguments (unhashable) take the long way to the same result."""
    x, w, b = rand(1, 32, 9, 9), rand(16, 32, 3, 3), rand(16)
    want = ref_conv(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    conv_k._plan.cache_clear()
    try:
        y = conv_k.conv_nchw(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        first = conv_k._call_plan(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)[1]
        assert first.compute.__qualname__.startswith("direct_plan")
        monkeypatch.setattr(conv_k, "BLOCKED_DIRECT", False)
        assert conv_k._call_plan(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)[1] is first   # still the cached plan
        conv_k._plan.cache_clear()
        other = conv_k._call_plan(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)[1]
        assert other is not first and not other.compute.__qualname__.startswith("direct_plan")
        y = conv_k.conv_nchw(x, w, b, [1, 1], [1, 1, 1, 1], [1, 1], 1)           # lists: not cached
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        h = conv_k.conv_nchw(x.astype(np.float16), w.astype(np.float16), b.astype(np.float16),
                             (1, 1), (1, 1, 1, 1), (1, 1), 1)
        assert h.dtype == np.float16
        np.testing.assert_allclose(h, want, rtol=2e-2, atol=5e-2)
    finally:
        conv_k._plan.cache_clear()


def test_conv_reused_buffers_and_row_tiles(monkeypatch):
    """Many small im2col tiles and buffers reused across runs with different inputs."""
    monkeypatch.setattr(conv_k, "_TILE_BYTES", 256)
    conv_k._plan.cache_clear()
    try:
        scratch = conv_k.Scratch()
        w, b = rand(5, 3, 3, 3), rand(5)
        for _ in range(3):
            x = rand(1, 3, 9, 8)
            y = conv_k.conv_nchw(x, w, b, (1, 1), (1, 2, 1, 0), (1, 1), 1, scratch=scratch)
            np.testing.assert_allclose(y, ref_conv(x, w, b, (1, 1), (1, 2, 1, 0), (1, 1), 1), rtol=1e-4, atol=1e-4)
            wd = rand(3, 1, 3, 3)
            y = conv_k.conv_nchw(x, wd, None, (2, 1), (1, 1, 1, 1), (1, 1), 3, scratch=scratch)
            np.testing.assert_allclose(y, ref_conv(x, wd, None, (2, 1), (1, 1, 1, 1), (1, 1), 3), rtol=1e-4, atol=1e-4)
    finally:
        conv_k._plan.cache_clear()


@pytest.fixture
def winograd_on_small_maps(monkeypatch):
    """CPUs with 16-lane registers run 3x3s of up to 14x14 outputs on the blocked
    kernels (conv.py's WIDE_MAX_WINOGRAD_PIXELS): kept on Winograd here."""
    monkeypatch.setattr(conv_k, "WIDE_MAX_WINOGRAD_PIXELS", 0)
    conv_k._plan.cache_clear()
    yield
    conv_k._plan.cache_clear()


@pytest.mark.parametrize("xs,ws,pads,tile", [
    ((1, 96, 13, 15), (96, 96, 3, 3), (1, 1, 1, 1), 2),
    ((2, 64, 12, 14), (192, 64, 3, 3), (0, 2, 1, 0), 2),
    ((1, 48, 30, 29), (64, 48, 3, 3), (1, 0, 2, 1), 4),     # odd sizes
    ((1, 96, 28, 28), (64, 96, 3, 3), (1, 1, 1, 1), 4)])
def test_winograd_path_matches_loop_reference(winograd_on_small_maps, xs, ws, pads, tile):
    """3x3 stride-1 convs with enough channels take a Winograd path: F(4x4,3x3) on
    large maps, F(2x2,3x3) below 14x14."""
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    plan = conv_k._plan(x.shape, w.shape, (1, 1), tuple(pads), (1, 1), 1, np.dtype(np.float32).str)
    assert plan.compute.__qualname__.startswith("winograd_plan")
    assert winograd_k.winograd_tile((3, 3), (1, 1), (1, 1), pads, 1, xs[1], ws[0], plan.out_shape[2:]) == tile
    scratch = conv_k.Scratch()
    np.testing.assert_allclose(ref_conv2d_windows(x[:1, :5], w[:2, :5], b[:2], pads),
                               ref_conv(x[:1, :5], w[:2, :5], b[:2], (1, 1), pads, (1, 1), 1), rtol=1e-12, atol=1e-9)

    def check(y, w, relu=False):
        # Winograd's float32 rounding grows with the sum of |x| * |w| over a window, not
        # with the output (which may cancel to near 0): bound the error by that sum.
        ref = ref_conv2d_windows(x, w, b, pads)
        scale = ref_conv2d_windows(np.abs(x), np.abs(w), np.abs(b), pads)
        np.testing.assert_array_less(np.abs(y - (np.maximum(ref, 0) if relu else ref)), 1e-5 * scale + 1e-6)
    for _ in range(2):   # second run: transformed filters and buffers come from the caches
        check(conv_k.conv_nchw(x, w, b, (1, 1), pads, (1, 1), 1, scratch=scratch, activation="relu"), w, relu=True)
    w[:] *= 0.5       # edited in place: the filter cache must notice
    check(conv_k.conv_nchw(x, w, b, (1, 1), pads, (1, 1), 1, scratch=scratch), w)
    w2 = w.copy()
    w2[:3] *= -1      # another weight array: the filter cache must not return stale transforms
    check(conv_k.conv_nchw(x, w2, b, (1, 1), pads, (1, 1), 1, scratch=scratch), w2)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("fused", [True, False])
def test_winograd_row_chunks_match_onnxruntime(monkeypatch, tile, fused):
    """Tiny chunks: many tile-row chunks per image, the last one sticking out, through
    the fused per-thread pipeline and the chunked one."""
    monkeypatch.setattr(winograd_k, "_WINOGRAD_CHUNK_BYTES", 1)
    monkeypatch.setattr(winograd_k, "_FUSE_CHUNKS", fused)
    x, w, b = rand(2, 8, 13, 11), rand(6, 8, 3, 3), rand(6)
    compute = winograd_k.winograd_plan(x.shape, w.shape, (1, 2, 1, 0), (13, 11), tile, np.float32)
    out = np.full((2, 6, 13, 11), np.nan, np.float32)
    compute(x, w, out, conv_k.Scratch(), b.reshape(-1, 1), True)
    ref = _ort_single("Conv", [x, w, b], dict(pads=[1, 2, 1, 0]))
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("parts", [2, 3])
def test_winograd_channel_split_matches_onnxruntime(monkeypatch, tile, parts):
    """Maps of few tile rows split the output channels over the team (each part gathers
    and transforms the chunk again); parts of 2 and 3 (uneven shares of M = 7) give
    onnxruntime's values, as the row split does. (Not the row split's bits: BLAS sums
    a product of another width in another order, as row chunks of another team size
    already do.)"""
    from caffe2py.kernels.cpu.runtime import jit
    x, w, b = rand(2, 8, 13, 11), rand(7, 8, 3, 3), rand(7)
    outs = {}
    for split in (0, 4):
        monkeypatch.setattr(winograd_k, "SPLIT_CHANNELS_BELOW_ROWS", split)
        monkeypatch.setattr(winograd_k, "SPLIT_MAX_REPEAT", 100.0)     # M = 7: split whatever a^2
        monkeypatch.setattr(winograd_k, "team_size", lambda: parts)
        compute = winograd_k.winograd_plan(x.shape, w.shape, (1, 2, 1, 0), (13, 11), tile, np.float32)
        assert compute.m_parts == (parts if split else 1)
        outs[split] = np.full((2, 7, 13, 11), np.nan, np.float32)
        with jit.team():
            compute(x, w, outs[split], conv_k.Scratch(), b, True)
    ref = np.maximum(_ort_single("Conv", [x, w, b], dict(pads=[1, 2, 1, 0])), 0)
    for out in outs.values():
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,pads,dil,dtype", [
    ((2, 8, 9, 7), (3, 8, 3, 3), (1, 1, 1, 1), (1, 1), np.float32),
    ((1, 6, 11, 10), (2, 6, 5, 3), (2, 0, 1, 2), (1, 2), np.float32),     # 5x3, dilated, asymmetric
    ((1, 4, 8, 8), (2, 4, 3, 3), (0, 0, 0, 0), (2, 2), np.float64),
])
@pytest.mark.parametrize("fused", [True, False])
def test_shift_add_path_matches_loop_reference(monkeypatch, xs, ws, pads, dil, dtype, fused):
    """Stride-1 convs with at least twice the input channels as outputs: tap-major GEMM
    plus shift-add, over several row tiles (fused per thread, or tile by tile);
    filters edited in place are noticed."""
    from caffe2py.kernels.cpu.cnn import shift_conv
    monkeypatch.setattr(shift_conv, "_Z_TILE_BYTES", 1)          # one output row per tile
    monkeypatch.setattr(shift_conv, "_FUSED", fused)
    conv_k._plan.cache_clear()
    try:
        x, w, b = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype), rand(ws[0], dtype=dtype)
        plan = conv_k._plan(x.shape, w.shape, (1, 1), pads, dil, 1, np.dtype(dtype).str)
        assert plan.compute.__qualname__.startswith("shift_plan")
        scratch = conv_k.Scratch()
        for relu in (False, True):
            y = conv_k.conv_nchw(x, w, b, (1, 1), pads, dil, 1, scratch=scratch, activation="relu" if relu else None)
            assert y.dtype == dtype
            np.testing.assert_allclose(y, ref_conv(x, w, b, (1, 1), pads, dil, 1, relu=relu), rtol=1e-4, atol=1e-4)
        w *= -0.5                # edited in place: the tap-major copy must be remade
        y = conv_k.conv_nchw(x, w, None, (1, 1), pads, dil, 1, scratch=scratch)
        np.testing.assert_allclose(y, ref_conv(x, w, None, (1, 1), pads, dil, 1), rtol=1e-4, atol=1e-4)
    finally:
        conv_k._plan.cache_clear()


def test_winograd_choice_depends_on_channels_and_size():
    pick = winograd_k.winograd_tile
    one = (1, 1, 1, 1)
    assert pick((3, 3), (1, 1), (1, 1), one, 1, 16, 64, (55, 55)) == 4      # mix 12.8, large map
    assert pick((3, 3), (1, 1), (1, 1), one, 1, 8, 64, (55, 55)) == 0       # mix 7.1: direct
    assert pick((3, 3), (1, 1), (1, 1), one, 1, 96, 128, (14, 14)) == 4     # mix 55 at 14x14
    assert pick((3, 3), (1, 1), (1, 1), one, 1, 256, 256, (14, 14)) == 2    # mix 128 at 14x14
    assert pick((3, 3), (1, 1), (1, 1), one, 1, 48, 192, (13, 13)) == 2     # below 14x14
    assert pick((3, 3), (2, 2), (1, 1), one, 1, 256, 256, (28, 28)) == 0    # strided
    assert pick((3, 3), (1, 1), (1, 1), one, 2, 256, 256, (28, 28)) == 0    # grouped
    assert pick((3, 3), (1, 1), (1, 1), (-1, 1, 1, 1), 1, 256, 256, (28, 28)) == 0


def test_winograd_filter_transform_matches_definition():
    """G g G^T per filter, written out with G of F(2x2, 3x3)."""
    g = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])
    w = rand(3, 2, 3, 3, dtype=np.float64)
    u = winograd_k.winograd_filter(w, 2)
    for mi in range(3):
        for ci in range(2):
            np.testing.assert_allclose(u[:, mi, ci].reshape(4, 4), g @ w[mi, ci] @ g.T, rtol=1e-12)


def test_shared_buffers_keep_each_padding_layout():
    """Same padded shape, different pads, one (default) scratch: borders must stay zero / -inf."""
    x = np.abs(rand(1, 96, 14, 14)) + 1.0
    for w in (rand(96, 96, 3, 3), rand(8, 96, 3, 3), rand(96, 1, 3, 3)):   # Winograd, im2col, depthwise
        group = 96 if w.shape[1] == 1 else 1
        for pads in ((1, 1, 1, 1), (2, 0, 0, 2), (0, 2, 2, 0), (1, 1, 1, 1)):
            y = conv_k.conv_nchw(x, w, None, (1, 1), pads, (1, 1), group)
            ref = _ort_single("Conv", [x, w], dict(pads=list(pads), group=group))
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-3)
    xn = -np.abs(rand(1, 2, 6, 6)) - 1.0
    for pads in ((1, 1, 0, 0), (0, 0, 1, 1)):
        np.testing.assert_allclose(pool_k.average_pool(xn, [2, 2], [1, 1], pads, True),
                                   ref_pool(xn, [2, 2], [1, 1], pads, "avg", include_pad=True), rtol=1e-5)
        np.testing.assert_allclose(pool_k.max_pool(xn, [2, 2], [1, 1], pads),
                                   ref_pool(xn, [2, 2], [1, 1], pads, "max"), rtol=1e-6)


@pytest.mark.parametrize("xs,ws,strides,pads,group", [
    ((1, 96, 14, 14), (96, 96, 3, 3), (1, 1), (1, 1, 1, 1), 1),      # Winograd
    ((1, 8, 21, 20), (16, 4, 3, 3), (1, 2), (1, 0, 2, 1), 2),        # flattened rows, grouped
    ((2, 12, 33, 31), (10, 12, 1, 1), (1, 1), (0, 0, 0, 0), 1),      # pointwise, column blocks
    ((1, 16, 7, 7), (12, 4, 1, 1), (1, 1), (0, 0, 0, 0), 4),         # pointwise, groups
    ((1, 3, 9, 8, 7), (5, 3, 2, 3, 2), (1, 1, 1), (0,) * 6, 1),      # 3-D im2col
])
@pytest.mark.parametrize("direct", [True, False])
def test_conv_on_the_team_matches_onnxruntime(monkeypatch, xs, ws, strides, pads, group, direct):
    """Every GEMM path split in blocks over the team (direct OpenBLAS calls), and the
    np.matmul fallback used when NumPy's BLAS is not OpenBLAS, give the same result."""
    from caffe2py.kernels.cpu.runtime import blas
    from caffe2py.kernels.cpu.runtime import jit
    monkeypatch.setattr(jit, "TEAM_MIN_WORK", 1)
    if not direct:
        monkeypatch.setattr(blas, "_ENTRIES", {})
    elif blas.gemm_entry(np.float32) is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS: no direct GEMM path")
    conv_k._plan.cache_clear()
    try:
        x, w, b = rand(*xs), rand(*ws), rand(ws[0])
        k = len(strides)
        for _ in range(2):
            y = conv_k.conv_nchw(x, w, b, strides, pads, (1,) * k, group, activation="relu")
        attrs = dict(strides=list(strides), pads=list(pads), group=group)
        ref = _ort_single("Conv", [x, w, b], attrs)
        # Winograd's rounding grows with the sum of |x| * |w| per window: bound by that
        scale = _ort_single("Conv", [np.abs(x), np.abs(w), np.abs(b)], attrs)
        np.testing.assert_array_less(np.abs(y - np.maximum(ref, 0)), 1e-5 * scale + 1e-5)
    finally:
        conv_k._plan.cache_clear()


@pytest.mark.parametrize("split", [True, False], ids=["team blocks", "serial"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_team_gemm_blocks_views_transposes_and_the_output_pass(monkeypatch, dtype, split):
    from caffe2py.kernels.cpu.runtime import jit
    from caffe2py.kernels.cpu.math import team_gemm
    from caffe2py.kernels.cpu.math.team_gemm import gemm_into
    monkeypatch.setattr(jit, "TEAM_MIN_WORK", 1)
    # split: every product over the team's blocks; serial: these small products run on
    # the calling thread (team_gemm's serial copy of the kernel, no parallel region)
    monkeypatch.setattr(team_gemm, "_MIN_PARALLEL_MACS", 1 if split else 1 << 30)
    monkeypatch.setattr(team_gemm, "_layouts", {})        # launches worked out under this threshold
    used = []
    name = "_gemm_blocks" if split else "_gemm_blocks_serial"
    kernel = getattr(team_gemm, name)
    monkeypatch.setattr(team_gemm, name, lambda *args: used.append(args[-2:]) or kernel(*args))
    monkeypatch.setattr(team_gemm, "_EPILOGUE_BLOCK_BYTES", 1024)    # several column blocks per thread
    f64 = np.float64
    # row and column blocks, groups, and the matrix-vector shapes (one output row or column)
    for g, m, k, n in [(1, 64, 40, 700), (1, 300, 20, 9), (3, 7, 5, 11), (1, 1, 3, 1), (1, 1, 30, 50),
                       (1, 40, 30, 1), (2, 1, 9, 6)]:
        a = rand(g, m, k + 2, dtype=dtype)[:, :, 1:k + 1]            # a view with a row stride
        b = rand(g, n, k, dtype=dtype).transpose(0, 2, 1)             # a transposed view
        bias, res = rand(g * m, dtype=dtype), rand(g, m, n, dtype=dtype)
        out = np.empty((g, m, n), dtype)
        gemm_into(a, b, out, bias, res, True)
        want = np.maximum(a.astype(f64) @ b.astype(f64) + bias.astype(f64).reshape(g, m, 1) + res, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4)
        gemm_into(a[0], b[0], out[0])                                   # 2-D, no output pass
        np.testing.assert_allclose(out[0], a[0].astype(f64) @ b[0].astype(f64), rtol=1e-5, atol=1e-4)
        at = rand(g, k, m, dtype=dtype).transpose(0, 2, 1)             # op(a) transposed too
        gemm_into(at, b, out)
        np.testing.assert_allclose(out, at.astype(f64) @ b.astype(f64), rtol=1e-5, atol=1e-4)
    assert len(used) == 21                                    # every product took the path under test
    if not split:
        assert set(used) == {(1, 1)}


@pytest.mark.parametrize("has_bias,has_res,relu", list(itertools.product([False, True], repeat=3)))
@pytest.mark.parametrize("split", [True, False], ids=["team blocks", "serial"])
def test_output_pass_every_combination_keeps_nan(monkeypatch, has_bias, has_res, relu, split):
    """gemm_into's and finish_channels' output passes run one loop per combination of
    bias, residual and ReLU: each against NumPy, with a NaN that ReLU must keep."""
    from caffe2py.kernels.cpu.runtime import jit
    from caffe2py.kernels.cpu.math import team_gemm
    from caffe2py.kernels.cpu.math.epilogue import finish_channels
    monkeypatch.setattr(jit, "TEAM_MIN_WORK", 1)
    monkeypatch.setattr(team_gemm, "_MIN_PARALLEL_MACS", 1 if split else 1 << 30)
    monkeypatch.setattr(team_gemm, "_layouts", {})
    f64 = np.float64
    m, k, n = 37, 19, 301                               # tails in every direction
    a, b = rand(m, k), rand(k, n)
    a[3, 0] = np.nan                                    # row 3 of the product is NaN
    bias, res = (rand(m) if has_bias else None), (rand(m, n) if has_res else None)
    want = a.astype(f64) @ b.astype(f64)
    if has_bias:
        want += bias.astype(f64)[:, None]
    if has_res:
        want += res
    if relu:
        want = np.where(want < 0, 0.0, want)            # NaN stays NaN
    out = np.empty((m, n), np.float32)
    team_gemm.gemm_into(a, b, out, bias, res, relu)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert np.isnan(out[3]).all()
    y = (a.astype(f64) @ b.astype(f64)).astype(np.float32).reshape(1, m, n)
    got = finish_channels(y.copy(), bias, None if res is None else res.reshape(1, m, n), relu)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-4)
    assert np.isnan(got[0, 3]).all()


def test_parallel_kernels_from_two_threads_on_numbas_workqueue_layer(tmp_path):
    """numba's fallback threading layer aborts on concurrent parallel launches: caffe2py
    serialises them there (a subprocess, since the layer is chosen once per process)."""
    import subprocess
    import sys
    script = tmp_path / "two_threads.py"
    script.write_text(
        "import threading, numpy as np\n"
        "from caffe2py.kernels.cpu.cnn import conv\n"
        "from caffe2py.kernels.cpu.runtime import jit\n"
        "jit.TEAM_MIN_WORK = 1\n"
        "x = np.random.rand(1, 8, 20, 20).astype(np.float32)\n"
        "w = np.random.rand(8, 1, 3, 3).astype(np.float32)\n"
        "ref = conv.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 8)\n"
        "bad = []\n"
        "def run():\n"
        "    for _ in range(200):\n"
        "        if not np.array_equal(conv.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 8), ref):\n"
        "            bad.append(1)\n"
        "ts = [threading.Thread(target=run) for _ in range(2)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "import numba; print(numba.threading_layer(), len(bad))\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["workqueue", "0"]


def test_importing_caffe2py_and_its_cpu_kernels_does_not_import_numba():
    """numba (0.35 s to import) loads when the first compiled kernel runs, not before."""
    import subprocess
    import sys
    code = ("import sys, caffe2py, caffe2py.onnx.backend\n"
            "from caffe2py.kernels.cpu.cnn import conv, pool, winograd, shift_conv\n"
            "from caffe2py.kernels.cpu.math import gemm, team_gemm\nfrom caffe2py.kernels.cpu.tensor import layout\n"
            "print('numba' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_team_sets_openblas_to_one_thread_and_restores_it():
    from caffe2py.kernels.cpu.runtime import blas as gemm
    from caffe2py.kernels.cpu.runtime import jit
    if gemm._GET_THREADS is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    gemm.set_blas_threads(2)
    with jit.team():
        assert gemm.blas_threads() == 1
        with jit.team():                  # re-entered (a net run inside a kernel)
            assert gemm.blas_threads() == 1
        assert gemm.blas_threads() == 1
    assert gemm.blas_threads() == 2
    a = rand(40, 30)
    np.testing.assert_allclose(gemm_k.matmul(a, a.T), naive_matmul(a, a.T), rtol=1e-4, atol=1e-4)


def test_one_scratch_used_from_two_threads_at_once():
    """Two threads running the same op (same Scratch) concurrently get their own buffers."""
    from concurrent.futures import ThreadPoolExecutor
    scratch = conv_k.Scratch()
    w = rand(6, 4, 3, 3)
    xs = [rand(1, 4, 10, 9) for _ in range(8)]
    refs = [ref_conv(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1) for x in xs[:2]]

    def run(k):
        return conv_k.conv_nchw(xs[k % 2], w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1, scratch=scratch)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(40)))
    for k, y in enumerate(results):
        np.testing.assert_allclose(y, refs[k % 2], rtol=1e-4, atol=1e-4)


def test_conv_errors():
    with pytest.raises(ValueError, match="does not fit"):
        conv_k.conv_nchw(rand(1, 2, 2, 2), rand(1, 2, 3, 3), None, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match="group"):
        conv_k.conv_nchw(rand(1, 3, 4, 4), rand(2, 2, 1, 1), None, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    with pytest.raises(ValueError, match="positive"):
        conv_k.conv_nchw(rand(1, 2, 4, 4), rand(2, 2, 1, 1), None, (0, 1), (0, 0, 0, 0), (1, 1), 1)


def _ort_single(op_type, inputs, attrs, opset=13):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    names = ["i%d" % k for k in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                            for n, v in zip(names, inputs)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


@pytest.mark.parametrize("xs,ws,strides,pads,dil,group", [
    ((1, 16, 30, 30), (32, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 24, 20, 20), (24, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 24),
    ((1, 3, 40, 40), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),
    ((1, 12, 14, 14), (12, 4, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 3),
])
def test_conv_matches_onnxruntime_on_larger_shapes(xs, ws, strides, pads, dil, group):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    ref = _ort_single("Conv", [x, w, b], dict(strides=list(strides), pads=list(pads), dilations=list(dil),
                                              group=group))
    y = conv_k.conv_nchw(x, w, b, strides, pads, dil, group)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- pooling

POOL_CASES = [
    # x shape, kernel, strides, pads, dilations, ceil
    ((2, 3, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), None, False),
    ((1, 2, 8, 7), (3, 2), (2, 3), (0, 1, 1, 0), None, True),
    ((1, 2, 9, 9), (2, 2), (2, 2), (0, 0, 0, 0), None, True),
    ((1, 2, 6, 7), (3, 3), (1, 2), (1, 0, 0, 1), (2, 1), False),
    ((2, 3, 10), (3,), (2,), (1, 1), None, True),
    ((1, 2, 4, 5, 5), (2, 3, 2), (2, 1, 2), (0, 1, 1, 1, 0, 0), None, True),
    ((1, 2, 7, 6), (1, 3), (2, 1), (0, 1, 0, 1), None, False),          # a kernel dim of 1
    ((1, 2, 7, 6), (3, 1), (1, 2), (1, 0, 1, 0), None, True),
    # strided in both dims: the compiled kernel (general kernel widths, row dilation)
    ((1, 2, 11, 12), (4, 5), (2, 3), (1, 2, 2, 1), (2, 1), True),
    ((2, 2, 13, 9), (5, 1), (3, 2), (2, 0, 1, 0), None, False),
    ((1, 2, 13, 11), (3, 3), (2, 2), (1, 1, 0, 0), (2, 1), False),       # three rows, row dilation 2
    # stride 1 everywhere: the flat-shift path (windows crossing rows, planes and
    # images must all be dropped)
    ((2, 3, 6, 5), (3, 3), (1, 1), (1, 1, 1, 1), None, False),
    ((2, 2, 6, 7), (3, 2), (1, 1), (0, 1, 2, 0), (2, 1), False),
    ((2, 3, 9), (4,), (1,), (1, 2), None, True),
    ((1, 2, 4, 5, 3), (2, 3, 2), (1, 1, 1), (1, 0, 1, 0, 1, 1), None, True),
    ((2, 2, 5, 6), (1, 3), (1, 1), (0, 0, 0, 0), None, False),
]


@pytest.mark.parametrize("xs,kernel,strides,pads,dil,ceil", POOL_CASES)
def test_max_pool_matches_direct_loops(xs, kernel, strides, pads, dil, ceil):
    x = rand(*xs)
    y = pool_k.max_pool(x, kernel, strides, pads, dil, ceil)
    np.testing.assert_allclose(y, ref_pool(x, kernel, strides, pads, "max", dil, ceil), rtol=1e-6)


@pytest.mark.parametrize("xs,kernel,strides,pads,dil,ceil", [c for c in POOL_CASES if c[4] is None])
@pytest.mark.parametrize("include_pad", [False, True])
def test_average_pool_matches_direct_loops(xs, kernel, strides, pads, dil, ceil, include_pad):
    x = rand(*xs)
    y = pool_k.average_pool(x, kernel, strides, pads, include_pad, ceil)
    ref = ref_pool(x, kernel, strides, pads, "avg", None, ceil, include_pad)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,include_pad,ceil", [("MaxPool", 0, 1), ("AveragePool", 1, 1), ("AveragePool", 0, 1),
                                                 ("AveragePool", 1, 0)])
def test_pooling_matches_onnxruntime(op, include_pad, ceil):
    x = rand(1, 4, 13, 12)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=ceil)
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
        y = pool_k.average_pool(x, [3, 3], [2, 2], [1, 0, 1, 1], bool(include_pad), bool(ceil))
    else:
        y = pool_k.max_pool(x, [3, 3], [2, 2], [1, 0, 1, 1], None, bool(ceil))
    np.testing.assert_allclose(y, _ort_single(op, [x], attrs), rtol=1e-5, atol=1e-6)


def test_strided_pools_take_the_compiled_kernel_and_keep_nan():
    x = rand(2, 3, 9, 10, dtype=np.float64)
    assert pool_k._compiled_pool(x, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, True) is not None
    assert pool_k._compiled_pool(x, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True) is not None
    assert pool_k._compiled_pool(x, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1), False, True) is None   # NumPy path
    assert pool_k._compiled_pool(x.astype(np.float16), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, True) is None
    for kernel, strides in itertools.product([(3, 3), (2, 2), (3, 4)], [(2, 2), (1, 1)]):
        y = pool_k.max_pool(x, kernel, strides, (1, 1, 1, 1))
        assert y.dtype == np.float64
        np.testing.assert_array_equal(y, ref_pool(x, kernel, strides, (1, 1, 1, 1), "max"))
        # NaN at the first and at a later position of a window both come out
        xn = x.copy()
        xn[0, 0, 0, 0] = np.nan      # the first cell of window (0, 0) (after the pad)
        xn[0, 1, 4, 5] = np.nan      # a middle cell
        y = pool_k.max_pool(xn, kernel, strides, (1, 1, 1, 1))
        windows_with_nan = ref_pool(np.isnan(xn).astype(np.float64), kernel, strides, (1, 1, 1, 1), "max") > 0
        np.testing.assert_array_equal(np.isnan(y), windows_with_nan)
        assert np.isnan(y[0, 0, 0, 0]) and np.isnan(y[0, 1]).sum() >= 1


@pytest.mark.parametrize("dy,dx", list(itertools.product(range(3), range(3))))
def test_strided_max_pool_keeps_nan_from_every_cell_of_the_window(dy, dx):
    # 3x3 stride-2 windows inside the map take the one-pass three-row path and the
    # stride-2 column path: a NaN in any of the nine cells must reach the output.
    x = rand(1, 2, 11, 13)
    x[0, 1, 4 + dy, 6 + dx] = np.nan       # window (2, 3) of channel 1
    y = pool_k.max_pool(x, (3, 3), (2, 2), (0, 0, 0, 0))
    nan_windows = ref_pool(np.isnan(x).astype(np.float64), (3, 3), (2, 2), (0, 0, 0, 0), "max") > 0
    np.testing.assert_array_equal(np.isnan(y), nan_windows)
    assert np.isnan(y[0, 1, 2, 3])
    finite = ~nan_windows
    np.testing.assert_array_equal(y[finite], ref_pool(np.nan_to_num(x, nan=-np.inf), (3, 3), (2, 2),
                                                      (0, 0, 0, 0), "max")[finite])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_average_pool_compiled_rows(dtype):
    # above pool_k._COMPILED_MEAN_MIN values: the compiled float64-accumulating row means
    x = (RNG.standard_normal((2, 300, 9, 9)) * 100 + 1e4).astype(dtype)
    assert x.size >= pool_k._COMPILED_MEAN_MIN
    x[1, 7, 3, 4] = np.nan
    y = pool_k.global_pool(x, "avg")
    assert y.shape == (2, 300, 1, 1) and y.dtype == dtype
    ref = x.astype(np.float64).reshape(2, 300, -1).sum(axis=2) / 81.0
    np.testing.assert_allclose(y[:, :, 0, 0], ref, rtol=1e-7 if dtype == np.float32 else 1e-13)
    assert np.isnan(y[1, 7, 0, 0]) and np.isnan(y).sum() == 1


def test_global_pool_and_int_max_pool():
    x = rand(2, 3, 5, 4)
    np.testing.assert_allclose(pool_k.global_pool(x, "max"), x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(pool_k.global_pool(x, "avg"), x.astype(np.float64).mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)
    xi = RNG.integers(-50, 50, size=(1, 2, 5, 5)).astype(np.int32)
    y = pool_k.max_pool(xi, [2, 2], [2, 2], [1, 1, 0, 0])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref_pool(xi, [2, 2], [2, 2], [1, 1, 0, 0], "max"))
    with pytest.raises(ValueError):
        pool_k.global_pool(x, "median")
    with pytest.raises(ValueError, match="does not fit"):
        pool_k.max_pool(x, [7, 7], [1, 1], [0, 0, 0, 0])


# ----------------------------------------------------------------- gemm and norms

def naive_matmul(a, b):
    out = np.zeros((a.shape[0], b.shape[1]))
    for i, j in itertools.product(range(a.shape[0]), range(b.shape[1])):
        out[i, j] = sum(float(a[i, t]) * float(b[t, j]) for t in range(a.shape[1]))
    return out


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c_shape", [
    (0, 0, 1.0, 1.0, (5,)), (1, 0, 0.5, 2.0, (4, 1)), (0, 1, 1.0, 0.0, (4, 5)), (1, 1, -1.5, 1.0, None)])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    a = rand(3, 4) if trans_a else rand(4, 3)
    b = rand(5, 3) if trans_b else rand(3, 5)
    c = rand(*c_shape) if c_shape else None
    y = gemm_k.gemm(a, b, c, alpha, beta, trans_a, trans_b)
    ref = alpha * naive_matmul(a.T if trans_a else a, b.T if trans_b else b)
    if c is not None:
        ref = ref + beta * c
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="inner"):
        gemm_k.gemm(rand(2, 3), rand(4, 2))


def test_fc_kernel():
    x, w, b = rand(3, 4), rand(5, 4), rand(5)
    np.testing.assert_allclose(gemm_k.fc(x, w, b), naive_matmul(x, w.T) + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gemm_k.fc(x, w.T.copy(), b, transposed=True), naive_matmul(x, w.T) + b,
                               rtol=1e-5, atol=1e-5)


def test_batch_norm_and_instance_norm():
    x, scale, bias, mean = rand(2, 3, 4, 5), rand(3), rand(3), rand(3)
    var = np.abs(rand(3)) + 0.1
    ref = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * scale[:, None, None] + bias[:, None, None]
    np.testing.assert_allclose(norm_k.batch_norm(x, scale, bias, mean, var, 1e-3), ref, rtol=1e-5, atol=1e-5)
    xl = np.moveaxis(x, 1, -1).copy()
    np.testing.assert_allclose(norm_k.batch_norm(xl, scale, bias, mean, var, 1e-3, axis=-1),
                               np.moveaxis(ref, 1, -1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="channels"):
        norm_k.batch_norm(x, scale[:2], bias, mean, var)
    y, m, inv = norm_k.instance_norm(x, scale, bias, 1e-5, return_stats=True)
    for nn, cc in itertools.product(range(2), range(3)):
        v = x[nn, cc].astype(np.float64)
        r = (v - v.mean()) / np.sqrt(v.var() + 1e-5) * scale[cc] + bias[cc]
        np.testing.assert_allclose(y[nn, cc], r, rtol=1e-4, atol=1e-5)
        assert m[nn, cc] == pytest.approx(v.mean(), abs=1e-6)
        assert inv[nn, cc] == pytest.approx(1 / np.sqrt(v.var() + 1e-5), rel=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_relu_compiled_pass(dtype):
    """NCHW float BN (+ ReLU) is one compiled pass: strided input, NaN kept, input untouched."""
    x = rand(2, 4, 6, 5, dtype=dtype)[:, :, ::2]          # a strided view
    x[0, 1, 0, 0] = np.nan
    scale, bias, mean, var = rand(4), rand(4), rand(4), np.abs(rand(4)) + 0.1
    before = x.copy()
    sh = (1, 4, 1, 1)
    ref = (x.astype(np.float64) - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-3) * scale.reshape(sh) \
        + bias.reshape(sh)
    for relu in (False, True):
        y = norm_k.batch_norm(x, scale, bias, mean, var, 1e-3, relu=relu)
        assert y.dtype == dtype and y.shape == x.shape
        np.testing.assert_allclose(y, np.maximum(ref, 0) if relu else ref, rtol=1e-5, atol=1e-5)
        assert np.isnan(y[0, 1, 0, 0]) and np.isnan(y).sum() == 1
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("size,beta", [(5, 0.75), (4, 0.6), (1, 1.0), (9, 0.75)])
@pytest.mark.parametrize("shape,dtype", [((2, 7, 3, 4), np.float32), ((2, 16, 20, 20), np.float32),
                                         ((3, 5, 6), np.float64), ((4, 6), np.float32)])
def test_lrn_matches_loops_and_onnxruntime(size, beta, shape, dtype):
    """The compiled pass (rows split over the team for the larger shapes), its NumPy
    twin and the scale output against the formula in float64; onnxruntime on 4-D."""
    x = rand(*shape, dtype=dtype)
    alpha, bias = 1e-2, 1.5
    c_count = shape[1]
    ref, ref_scale = np.zeros(x.shape), np.zeros(x.shape)
    for c in range(c_count):
        lo, hi = max(0, c - (size - 1) // 2), min(c_count, c + size // 2 + 1)
        sq = (x[:, lo:hi].astype(np.float64) ** 2).sum(axis=1)
        ref_scale[:, c] = bias + alpha / size * sq
        ref[:, c] = x[:, c] / ref_scale[:, c] ** beta
    y = norm_k.lrn(x, size, alpha, beta, bias)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    y2, scale = norm_k.lrn(x, size, alpha, beta, bias, return_scale=True)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_allclose(scale, ref_scale, rtol=1e-5, atol=1e-6)
    planes = x.reshape(shape[0], shape[1], -1)
    twin_y, twin_scale = np.empty_like(planes), np.empty_like(planes)
    kind = x.dtype.type
    norm_k._lrn_planes.twin(planes, twin_y, twin_scale, True, size, kind(alpha / size), kind(bias), kind(beta), 1)
    np.testing.assert_allclose(twin_y.reshape(shape), y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(twin_scale.reshape(shape), scale, rtol=1e-5, atol=1e-6)
    if size % 2 and len(shape) == 4 and dtype == np.float32:   # onnxruntime: odd sizes, float
        ort_y = _ort_single("LRN", [x], dict(size=size, alpha=alpha, beta=beta, bias=bias))
        np.testing.assert_allclose(y, ort_y, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- Caffe2 ops

def run_op(op_type, inputs, outputs=1, **kwargs):
    workspace.ResetWorkspace()
    names = []
    for i, value in enumerate(inputs):
        names.append("in%d" % i)
        workspace.FeedBlob(names[-1], value)
    outs = ["out%d" % i for i in range(outputs)]
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, outs, **kwargs))
    vals = [workspace.FetchBlob(o) for o in outs]
    return vals[0] if outputs == 1 else vals


def test_caffe2_conv_relu_and_nhwc():
    x, w, b = rand(1, 3, 6, 5), rand(4, 3, 3, 3), rand(4)
    ref = ref_conv(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1, relu=True)
    np.testing.assert_allclose(run_op("ConvRelu", [x, w, b], kernel=3, pad=1), ref, rtol=1e-4, atol=1e-4)
    y = run_op("Conv", [np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy(), b], kernel=3, pad=1,
               order="NHWC")
    np.testing.assert_allclose(np.maximum(np.moveaxis(y, -1, 1), 0), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("relu", [False, True])
def test_caffe2_conv_sum_ops(relu):
    """ConvSum(Relu): the residual added in the output pass, for the pointwise (1x1),
    fused-output (3x3) and depthwise paths, NCHW and NHWC, and a broadcasting S."""
    op = "ConvSumRelu" if relu else "ConvSum"
    for xs, ws, kw, group in [((2, 6, 5, 4), (8, 6, 1, 1), dict(kernel=1), 1),
                              ((1, 4, 7, 6), (5, 4, 3, 3), dict(kernel=3, pad=1), 1),
                              ((1, 4, 7, 6), (4, 1, 3, 3), dict(kernel=3, pad=1, stride=2), 4)]:
        x, w, b = rand(*xs), rand(*ws), rand(ws[0])
        conv = ref_conv(x, w, b, (kw.get("stride", 1),) * 2, (kw.get("pad", 0),) * 4, (1, 1), group)
        s = rand(*conv.shape)
        want = np.maximum(conv + s, 0) if relu else conv + s
        np.testing.assert_allclose(run_op(op, [x, w, b, s], group=group, **kw), want, rtol=1e-4, atol=1e-4)
        nhwc = run_op(op, [np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy(), b,
                           np.moveaxis(s, 1, -1).copy()], group=group, order="NHWC", **kw)
        np.testing.assert_allclose(np.moveaxis(nhwc, -1, 1), want, rtol=1e-4, atol=1e-4)
        col = rand(1, ws[0], 1, 1)       # ONNX Add operands may broadcast
        want = np.maximum(conv + col, 0) if relu else conv + col
        np.testing.assert_allclose(run_op(op, [x, w, b, col], group=group, **kw), want, rtol=1e-4, atol=1e-4)


def test_caffe2_conv_sum_names_a_bad_residual():
    x, w, b = rand(1, 3, 5, 5), rand(4, 3, 1, 1), rand(4)
    workspace.ResetWorkspace()
    for name, value in (("x", x), ("w", w), ("b", b), ("s", rand(1, 3, 5, 5))):
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match=r"ConvSumRelu.*'s'.*\[1, 3, 5, 5\] does not broadcast"):
        workspace.RunOperatorOnce(core.CreateOperator("ConvSumRelu", ["x", "w", "b", "s"], ["y"], kernel=1))
    assert not workspace.HasBlob("y")


def test_caffe2_lrn_instance_norm_spatial_bn_ops():
    x = rand(1, 6, 3, 3)
    y, scale = run_op("LRN", [x], outputs=2, size=3, alpha=0.1, beta=0.75, bias=2.0)
    sq = np.stack([(x[:, max(0, c - 1):c + 2].astype(np.float64) ** 2).sum(1) for c in range(6)], axis=1)
    np.testing.assert_allclose(scale, 2.0 + 0.1 / 3 * sq, rtol=1e-5)
    np.testing.assert_allclose(y, x / (2.0 + 0.1 / 3 * sq) ** 0.75, rtol=1e-5)
    s, bb = rand(6), rand(6)
    y, mean, inv = run_op("InstanceNorm", [x, s, bb], outputs=3, epsilon=1e-3)
    flat = x.reshape(1, 6, -1).astype(np.float64)
    ref = (flat - flat.mean(-1, keepdims=True)) / np.sqrt(flat.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(y.reshape(1, 6, -1), ref * s[:, None] + bb[:, None], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean, flat.mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, 1 / np.sqrt(flat.var(-1) + 1e-3), rtol=1e-5)
    var = np.abs(rand(6)) + 0.5
    y = run_op("SpatialBN", [x, s, bb, mean[0], var], is_test=1, epsilon=1e-4)
    np.testing.assert_allclose(y, (x - mean[0][:, None, None]) / np.sqrt(var[:, None, None] + 1e-4)
                               * s[:, None, None] + bb[:, None, None], rtol=1e-4, atol=1e-5)


def test_caffe2_ops_name_op_and_blob_on_bad_input():
    with pytest.raises(Caffe2Error, match="in0"):
        run_op("Conv", [rand(1, 3, 2, 2), rand(2, 3, 3, 3)], kernel=3)
    with pytest.raises(Caffe2Error, match="InstanceNorm"):
        run_op("InstanceNorm", [rand(1, 3, 2, 2), rand(2), rand(3)])
    with pytest.raises(Caffe2Error, match="MaxPool"):
        run_op("MaxPool", [rand(1, 1, 2, 2)], kernel=5)


# ----------------------------------------------------------------- optimize pass

def _op(op_type, inputs, outputs, domain="ai.onnx", version=9, **args):
    op = core.CreateOperator(op_type, inputs, outputs, **args)
    if domain:
        op.domain = domain
        op.op_version = version
    return op


def _run(net, consts, feeds):
    blobs = dict(consts)
    blobs.update(feeds)
    compile_net(net, known_blobs=blobs.keys()).run(blobs)
    return [blobs[o] for o in net.external_output]


def _net(ops, inputs, outputs):
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend(ops)
    net.external_input.extend(inputs)
    net.external_output.extend(outputs)
    return net


def _bn_consts(prefix, c):
    return {prefix + "_s": rand(c), prefix + "_b": rand(c), prefix + "_m": rand(c),
            prefix + "_v": np.abs(rand(c)) + 0.2}


def test_optimize_folds_conv_bn_mul_add_and_fuses_relu():
    from caffe2py.optimize import optimize
    consts = {"w1": rand(6, 3, 3, 3), "b1": rand(6), "w2": rand(4, 6, 1, 1), "mul": rand(1, 4, 1, 1),
              "add": rand(4, 1, 1), "w3": rand(4, 2, 3, 3)}
    consts.update(_bn_consts("bn1", 6))
    consts.update(_bn_consts("bn2", 4))
    consts.update(_bn_consts("bn3", 4))
    ops = [
        _op("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        _op("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"], epsilon=1e-3),
        _op("Relu", ["n1"], ["r1"]),
        _op("Conv", ["r1", "w2"], ["c2"]),
        _op("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"]),
        _op("Mul", ["n2", "mul"], ["m2"]),
        _op("Add", ["add", "m2"], ["a2"]),
        _op("Relu", ["a2"], ["r2"]),
        # Caffe2 Conv (grouped) + SpatialBN.
        _op("Conv", ["r2", "w3"], ["c3"], domain="", kernel=3, pad=1, group=2),
        _op("SpatialBN", ["c3", "bn3_s", "bn3_b", "bn3_m", "bn3_v"], ["y"], domain="", is_test=1, epsilon=1e-4),
    ]
    net = _net(ops, ["x"] + list(consts), ["y"])
    before = net.SerializeToString()
    x = rand(2, 3, 8, 7)
    (ref,) = _run(net, consts, {"x": x})
    folded_consts = dict(consts)
    opt = optimize(net, folded_consts)
    assert net.SerializeToString() == before, "optimize must not modify its input net"
    assert [op.type for op in opt.op] == ["ConvRelu", "ConvRelu", "Conv"]
    assert list(opt.external_output) == ["y"] and list(opt.external_input)[:len(net.external_input)] == \
        list(net.external_input)
    assert all(np.array_equal(folded_consts[k], v) for k, v in consts.items())
    (got,) = _run(opt, folded_consts, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_optimize_merges_bn_mul_add_chain_and_keeps_shared_outputs():
    from caffe2py.optimize import optimize
    consts = {"w": rand(4, 4, 3, 3), "mul": rand(4, 1, 1), "add": rand(1, 4, 1, 1)}
    consts.update(_bn_consts("bn", 4))
    consts.update(_bn_consts("bn2", 4))
    ops = [
        _op("Concat", ["x", "x2"], ["cat"], axis=1),
        _op("Conv", ["cat", "w"], ["c"], pads=[1, 1, 1, 1]),
        _op("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),   # c is also read below
        _op("Mul", ["n", "mul"], ["m"]),
        _op("Add", ["m", "add"], ["a"]),
        _op("Relu", ["a"], ["r"]),
        _op("Add", ["r", "c"], ["s"]),
        _op("BatchNormalization", ["s", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["y"]),   # net output
    ]
    net = _net(ops, ["x", "x2"] + list(consts), ["y", "r"])
    feeds = {"x": rand(1, 2, 5, 5), "x2": rand(1, 2, 5, 5)}
    ref = _run(net, consts, feeds)
    c2 = dict(consts)
    opt = optimize(c2, net)     # the (blobs, net) order works too
    types = [op.type for op in opt.op]
    assert types == ["Concat", "Conv", "SpatialBNRelu", "Add", "BatchNormalization"], types
    assert opt.op[1].domain == "" and not any(a.name == "kernel_shape" for a in opt.op[1].arg)
    for got, want in zip(_run(opt, c2, feeds), ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_optimize_fuses_pre_activation_bn_relu():
    from caffe2py.optimize import optimize
    consts = {"w": rand(3, 4, 1, 1)}
    consts.update(_bn_consts("bn", 4))
    consts.update(_bn_consts("bn2", 4))
    ops = [
        _op("Concat", ["x", "x2"], ["cat"], axis=1),
        _op("BatchNormalization", ["cat", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"], epsilon=1e-3),
        _op("Relu", ["n"], ["r"]),
        _op("Conv", ["r", "w"], ["y"]),
        _op("SpatialBN", ["cat", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"], domain="", is_test=1),
        _op("Relu", ["n2"], ["r2"]),
        _op("Add", ["n2", "r2"], ["z"]),      # n2 has two readers: stays unfused
    ]
    net = _net(ops, ["x", "x2"] + list(consts), ["y", "z"])
    feeds = {"x": rand(2, 2, 5, 4), "x2": rand(2, 2, 5, 4)}
    ref = _run(net, consts, feeds)
    c2 = dict(consts)
    opt = optimize(net, c2)
    types = [op.type for op in opt.op]
    assert types == ["Concat", "SpatialBNRelu", "Conv", "SpatialBN", "Relu", "Add"], types
    for got, want in zip(_run(opt, c2, feeds), ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The kernel directly, against loops.
    x = rand(2, 3, 4, 5)
    s, b, m, v = rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.1
    want = np.maximum((x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5) * s[:, None, None]
                      + b[:, None, None], 0)
    got = norm_k.batch_norm(x, s, b, m, v, 1e-5, relu=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.shares_memory(got, x)


def test_optimize_leaves_non_constant_and_non_per_channel_alone():
    from caffe2py.optimize import optimize
    consts = {"w": rand(3, 2, 1, 1), "full": rand(1, 3, 4, 4)}
    consts.update(_bn_consts("bn", 3))
    ops = [
        _op("Conv", ["x", "w"], ["c"]),
        _op("Mul", ["c", "full"], ["m"]),                                       # not per-channel
        _op("BatchNormalization", ["m", "bn_s", "bn_b", "bn_m", "scale_in"], ["y"]),   # var is a feed
    ]
    net = _net(ops, ["x", "scale_in"] + list(consts), ["y"])
    opt = optimize(net, dict(consts))
    assert [op.type for op in opt.op] == ["Conv", "Mul", "BatchNormalization"]


def test_optimize_fuses_conv_sum_relu_at_the_sum():
    """Conv -> BN -> Add(other branch, computed after the conv) -> Relu becomes one
    ConvSumRelu placed where the Add was; a conv read twice or a Sum of three stays."""
    from caffe2py.optimize import optimize
    consts = {"w1": rand(4, 3, 3, 3), "b1": rand(4), "w2": rand(4, 3, 1, 1), "w3": rand(4, 3, 1, 1)}
    consts.update(_bn_consts("bn", 4))
    ops = [
        _op("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        _op("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"]),
        _op("Conv", ["x", "w2"], ["short"]),                    # the other operand comes later
        _op("Add", ["short", "n1"], ["sum"]),
        _op("Relu", ["sum"], ["y"]),
        _op("Conv", ["x", "w3"], ["c3"]),
        _op("Sum", ["c3", "y", "c3"], ["z"]),                   # three operands: left alone
    ]
    net = _net(ops, ["x"] + list(consts), ["y", "z"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    assert [op.type for op in opt.op] == ["Conv", "ConvSumRelu", "Conv", "Sum"]
    assert list(opt.op[1].input)[3] == "short" and list(opt.op[1].output) == ["y"]
    feeds = {"x": rand(2, 3, 6, 5)}
    for got, want in zip(_run(opt, blobs, feeds), _run(net, consts, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the sum is a net output: the Relu is not fused, the Add is (into ConvSum)
    net = _net(ops[:5], ["x"] + list(consts), ["y", "sum"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    assert [op.type for op in opt.op] == ["Conv", "ConvSum", "Relu"]
    for got, want in zip(_run(opt, blobs, feeds), _run(net, consts, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_optimize_places_conv_outputs_in_their_concat():
    """Convs whose outputs only a channel Concat reads write into the concat's output
    (SqueezeNet's fire module, with the branch order reversed in the net), same result;
    a branch output read twice, or a non-conv input, keeps the Concat."""
    from caffe2py.optimize import optimize
    consts = {"ws": rand(6, 8, 1, 1), "bs": rand(6), "w1": rand(5, 6, 1, 1), "b1": rand(5),
              "w3": rand(7, 6, 3, 3), "b3": rand(7), "wn": rand(4, 12, 1, 1)}
    ops = [
        _op("Conv", ["x", "ws", "bs"], ["s"]),
        _op("Relu", ["s"], ["sr"]),
        _op("Conv", ["sr", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1]),     # the second input first
        _op("Relu", ["e3"], ["e3r"]),
        _op("Conv", ["sr", "w1", "b1"], ["e1"]),
        _op("Relu", ["e1"], ["e1r"]),
        _op("Concat", ["e1r", "e3r"], ["cat"], axis=1),
        _op("Conv", ["cat", "wn"], ["y"]),
    ]
    net = _net(ops, ["x"] + list(consts), ["y"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    assert [op.type for op in opt.op] == ["ConvRelu", "ConvRelu", "ConvRelu", "Conv"]
    assert list(opt.op[1].output) == ["cat"] and list(opt.op[2].input)[3:] == ["cat"]
    assert [list(a.ints) for op in opt.op[1:3] for a in op.arg if a.name == "concat_channels"] == [[12, 5], [12, 0]]
    feeds = {"x": rand(2, 8, 6, 5)}
    np.testing.assert_allclose(_run(opt, blobs, feeds)[0], _run(net, consts, feeds)[0], rtol=1e-4, atol=1e-4)
    # e1r is also a net output: only e3r is placed, e1r is copied in by a ChannelWrite
    # (write_concat_in_place; tests/test_shuffle_fold.py)
    net = _net(ops, ["x"] + list(consts), ["y", "e1r"])
    assert [op.type for op in optimize(net, dict(consts)).op].count("ChannelWrite") == 1
    # a Concat input that no conv makes (the squeeze output itself): the same
    ops2 = ops[:6] + [_op("Concat", ["e1r", "sr"], ["cat"], axis=1), _op("Conv", ["cat", "wn"], ["y"])]
    consts["wn"] = rand(4, 11, 1, 1)
    types = [op.type for op in optimize(_net(ops2, ["x"] + list(consts), ["y"]), dict(consts)).op]
    assert "Concat" not in types and types.count("ChannelWrite") == 1


def _dense_block_net(links, outputs):
    """A DenseNet-style block: stem conv + max pool, then `links` times BN -> Relu ->
    3x3 conv (2 channels) -> Concat(previous, new); a 1x1 conv reads the last Concat."""
    consts = {"w0": rand(4, 3, 3, 3), "b0": rand(4)}
    ops = [_op("Conv", ["x", "w0", "b0"], ["s"], pads=[1, 1, 1, 1]), _op("Relu", ["s"], ["sr"]),
           _op("MaxPool", ["sr"], ["c0"], kernel_shape=[2, 2], strides=[2, 2])]
    channels = 4
    for i in range(1, links + 1):
        consts.update(_bn_consts("bn%d" % i, channels))
        consts["w%d" % i] = rand(2, channels, 3, 3)
        ops += [_op("BatchNormalization", ["c%d" % (i - 1)] + ["bn%d_%s" % (i, t) for t in "sbmv"], ["n%d" % i]),
                _op("Relu", ["n%d" % i], ["r%d" % i]),
                _op("Conv", ["r%d" % i, "w%d" % i], ["y%d" % i], pads=[1, 1, 1, 1]),
                _op("Concat", ["c%d" % (i - 1), "y%d" % i], ["c%d" % i], axis=1)]
        channels += 2
    consts["wt"] = rand(3, channels, 1, 1)
    ops.append(_op("Conv", ["c%d" % links, "wt"], ["out"]))
    return _net(ops, ["x"] + list(consts), outputs), consts


def test_optimize_grows_a_concat_chain_in_one_buffer():
    """DenseNet's chain of Concats, each adding one conv's output to the previous one,
    becomes one ChannelBuffer the convs write into and ChannelPrefix views; same results
    (batch 2: the views are not contiguous); a chain whose middle value is a net output
    is grown only after it."""
    from caffe2py.optimize import optimize
    feeds = {"x": rand(2, 3, 10, 8)}
    net, consts = _dense_block_net(3, ["out", "c3"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    types = [op.type for op in opt.op]
    assert "Concat" not in types and types.count("ChannelBuffer") == 1 and types.count("ChannelPrefix") == 3
    buffer = next(op for op in opt.op if op.type == "ChannelBuffer")
    assert [a.i for a in buffer.arg if a.name == "channels"] == [10] and list(buffer.input) == ["c0"]
    places = [list(a.ints) for op in opt.op for a in op.arg if a.name == "concat_channels"]
    assert places == [[10, 4], [10, 6], [10, 8]]
    for got, want in zip(_run(opt, blobs, feeds), _run(net, consts, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # c1 is a net output: the chain starts after it (c1's channels from its Concat's inputs)
    net, consts = _dense_block_net(3, ["out", "c1"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    types = [op.type for op in opt.op]
    # (c1's Concat: its conv writes in place, c0 copied in by a ChannelWrite)
    assert types.count("Concat") == 0 and types.count("ChannelWrite") == 1 and types.count("ChannelPrefix") == 2
    for got, want in zip(_run(opt, blobs, feeds), _run(net, consts, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a single link is no chain: its conv writes in place, c0 is copied (write_concat_in_place)
    net, consts = _dense_block_net(1, ["out"])
    types = [op.type for op in optimize(net, dict(consts)).op]
    assert "ChannelBuffer" not in types and types.count("ChannelWrite") == 1


def test_channel_buffer_and_prefix_ops():
    x = rand(2, 3, 4, 5)
    y = run_op("ChannelBuffer", [x], channels=7)
    assert y.shape == (2, 7, 4, 5)
    np.testing.assert_array_equal(y[:, :3], x)
    view = run_op("ChannelPrefix", [y], channels=5)
    assert view.shape == (2, 5, 4, 5)
    np.testing.assert_array_equal(view[:, :3], x)
    with pytest.raises(Caffe2Error, match="more than the buffer"):
        run_op("ChannelBuffer", [x], channels=2)
    with pytest.raises(Caffe2Error, match="fewer than"):
        run_op("ChannelPrefix", [x], channels=4)


def test_conv_into_a_concat_buffer_checks_the_buffer():
    x, w, b = rand(1, 3, 4, 4), rand(2, 3, 1, 1), rand(2)
    first = run_op("ConvRelu", [x, w, b], kernel=1, concat_channels=[5, 3])
    assert first.shape == (1, 5, 4, 4)
    np.testing.assert_allclose(first[:, 3:], ref_conv(x, w, b, (1, 1), (0,) * 4, (1, 1), 1, relu=True),
                               rtol=1e-5, atol=1e-5)
    workspace.ResetWorkspace()
    for name, value in (("x", x), ("w", w), ("b", b), ("buf", np.zeros((1, 4, 4, 4), np.float32))):
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match=r"ConvRelu.*'buf'.*concat buffer of shape \[1, 4, 4, 4\]"):
        workspace.RunOperatorOnce(core.CreateOperator("ConvRelu", ["x", "w", "b", "buf"], ["buf"], kernel=1,
                                                      concat_channels=[5, 0]))
    with pytest.raises(Caffe2Error, match=r"channels 4..6 do not fit concat_channels total 5"):
        workspace.RunOperatorOnce(core.CreateOperator("ConvRelu", ["x", "w", "b"], ["y"], kernel=1,
                                                      concat_channels=[5, 4]))


def test_channel_shuffle_op_and_its_onnx_spelling():
    """Caffe2 ChannelShuffle against the definition, NCHW and NHWC; optimize turns ONNX's
    Reshape -> Transpose -> Reshape into Reshape -> ChannelShuffle with the same result."""
    from caffe2py.optimize import optimize
    x = rand(2, 12, 3, 4)
    want = np.empty_like(x)
    for g, k in itertools.product(range(3), range(4)):
        want[:, k * 3 + g] = x[:, g * 4 + k]
    np.testing.assert_array_equal(run_op("ChannelShuffle", [x], group=3), want)
    nhwc = run_op("ChannelShuffle", [np.moveaxis(x, 1, -1).copy()], group=3, order="NHWC")
    np.testing.assert_array_equal(np.moveaxis(nhwc, -1, 1), want)
    from caffe2py.kernels.cpu.runtime import jit
    from caffe2py.kernels.cpu.tensor import layout
    saved, jit.TEAM_MIN_WORK = jit.TEAM_MIN_WORK, 1          # channel planes split over the team
    try:
        np.testing.assert_array_equal(layout.channel_shuffle(x[:, :, ::2], 3), want[:, :, ::2])
        ints = np.arange(2 * 6 * 5).reshape(2, 6, 5)
        np.testing.assert_array_equal(layout.channel_shuffle(ints, 2), ints[:, [0, 3, 1, 4, 2, 5]])
    finally:
        jit.TEAM_MIN_WORK = saved
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    with pytest.raises(Caffe2Error, match=r"ChannelShuffle.*'x'.*12 channels.*5 groups"):
        workspace.RunOperatorOnce(core.CreateOperator("ChannelShuffle", ["x"], ["y"], group=5))

    consts = {"w": rand(12, 3, 1, 1), "s5": np.array([2, 3, 4, 3, 4], np.int64), "s4": np.array([2, 12, 3, 4], np.int64),
              "dw": rand(12, 1, 3, 3)}
    ops = [
        _op("Conv", ["x", "w"], ["c"], group=4),
        _op("Reshape", ["c", "s5"], ["r5"], version=13),
        _op("Transpose", ["r5"], ["t"], perm=[0, 2, 1, 3, 4]),
        _op("Reshape", ["t", "s4"], ["r4"], version=13),
        _op("Conv", ["r4", "dw"], ["y"], group=12, pads=[1, 1, 1, 1]),
    ]
    net = _net(ops, ["x"] + list(consts), ["y"])
    blobs = dict(consts)
    opt = optimize(net, blobs)
    # the depthwise conv then reads the shuffle through a channel map (tests/test_shuffle_fold.py)
    assert [op.type for op in opt.op] == ["Conv", "Reshape", "Conv"]
    assert [a.i for a in opt.op[2].arg if a.name == "shuffle_group"] == [3]
    feeds = {"x": x}
    np.testing.assert_allclose(_run(opt, blobs, feeds)[0], _run(net, consts, feeds)[0], rtol=1e-5, atol=1e-5)
    # another permutation, or a final shape that is not (n, g*k, h, w): left alone
    ops[2] = _op("Transpose", ["r5"], ["t"], perm=[0, 1, 2, 4, 3])
    consts["s4"] = np.array([2, 12, 4, 3], np.int64)
    assert [op.type for op in optimize(_net(ops, ["x"] + list(consts), ["y"]), dict(consts)).op] == \
        ["Conv", "Reshape", "Transpose", "Reshape", "Conv"]


def test_concat_copies_on_the_team(monkeypatch):
    """Float concatenation (the ONNX and Caffe2 Concat ops) is compiled team copies: row
    blocks, column blocks of a single row, empty inputs, other dtypes through NumPy."""
    from caffe2py.kernels.cpu.runtime import jit
    from caffe2py.kernels.cpu.tensor import layout
    monkeypatch.setattr(jit, "TEAM_MIN_WORK", 1)
    for shapes, axis in [([(1, 3, 4, 5), (1, 2, 4, 5)], 1), ([(2, 3, 4), (2, 3, 1), (2, 3, 2)], 2),
                         ([(5, 2), (1, 2)], 0), ([(2, 0, 3), (2, 2, 3)], 1)]:
        for dtype in (np.float32, np.float64, np.int32):
            xs = [rand(*shape).astype(dtype) for shape in shapes]
            xs[0] = xs[0][..., ::-1] if xs[0].size else xs[0]            # a non-contiguous input
            y = layout.concat(xs, axis)
            assert y.dtype == dtype
            np.testing.assert_array_equal(y, np.concatenate(xs, axis))
    a, b = rand(1, 3, 2, 2), rand(1, 4, 2, 2)
    np.testing.assert_array_equal(run_op("Concat", [a, b], 2, axis=1)[0], np.concatenate([a, b], 1))


def test_optimized_onnx_model_matches_onnxruntime():
    """A small random-weight CNN through caffe2py.onnx (when present) vs onnxruntime."""
    pytest.importorskip("caffe2py.onnx.backend")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from caffe2py.onnx import backend
    inits = {"w1": rand(8, 3, 3, 3), "w2": rand(8, 1, 3, 3), "w3": rand(6, 8, 1, 1), "s": rand(8), "b": rand(8),
             "m": rand(8), "v": np.abs(rand(8)) + 0.1, "gw": rand(5, 6), "gb": rand(5)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("Conv", ["p", "w3"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 15])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    x = rand(1, 3, 17, 15)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = backend.prepare(model)
    np.testing.assert_allclose(rep.run([x])[0], ref, rtol=1e-3, atol=1e-4)


def test_openblas_core_reports_the_forced_kernel_family():
    from caffe2py.kernels.cpu.runtime.blas import openblas_core
    if openblas_core() is None:
        pytest.skip("NumPy's OpenBLAS does not say its kernel family here")
    import os
    import subprocess
    import sys
    code = "from caffe2py.kernels.cpu.runtime.blas import openblas_core; print(openblas_core())"
    env = dict(os.environ, OPENBLAS_CORETYPE="Haswell")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Haswell"


def test_derived_weights_made_once_per_array_and_again_after_edits():
    from caffe2py.kernels.cpu.runtime.packed_weights import DerivedWeights
    made = []
    derived = DerivedWeights(lambda w: made.append(1) or w * 2)
    w = rand(8, 4, 3, 3)
    w[0, 0, 0, 0] = np.nan          # NaN weights still match themselves (no remake per call)
    for _ in range(3):
        out = derived(w)
    assert len(made) == 1
    w[0, 0, 0, 0] = 1.0              # a sampled value edited in place
    np.testing.assert_array_equal(derived(w), w * 2)
    assert len(made) == 2
    other = w.copy()                 # equal values, another array
    derived(other)
    assert len(made) == 3 and out is not None


def test_team_entered_on_two_threads_keeps_openblas_single_threaded_until_both_leave():
    import threading
    from caffe2py.kernels.cpu.runtime import blas as gemm
    from caffe2py.kernels.cpu.runtime import jit
    if gemm._GET_THREADS is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    gemm.set_blas_threads(2)
    inside, leave = threading.Event(), threading.Event()

    def other():
        with jit.team():
            with jit.team():
                inside.set()
                leave.wait(10)
    t = threading.Thread(target=other)
    with jit.team():
        t.start()
        assert inside.wait(10)
    assert gemm.blas_threads() == 1      # the other thread is still inside
    leave.set()
    t.join(10)
    assert gemm.blas_threads() == 2


def test_optimize_drops_inference_dropout_and_fuses_across_it():
    from caffe2py.optimize import optimize
    consts = {"w": rand(4, 3, 3, 3), "b": rand(4), "off": np.array(False), "ratio": np.array(0.5, np.float32)}
    x = rand(1, 3, 6, 6)
    ops = [
        _op("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        _op("Dropout", ["c"], ["d"], version=13),                     # identity: goes
        _op("Relu", ["d"], ["r"]),
        _op("Dropout", ["r", "ratio", "off"], ["e", "unused_mask"], version=13),  # constant false: goes
        _op("Dropout", ["e"], ["y"], version=13),                     # a net output: stays
    ]
    net = _net(ops, ["x"] + list(consts), ["y"])
    (ref,) = _run(net, consts, {"x": x})
    opt = optimize(net, dict(consts))
    assert [op.type for op in opt.op] == ["ConvRelu", "Dropout"]
    assert list(opt.op[1].input) == [opt.op[0].output[0]]
    (got,) = _run(opt, consts, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.maximum(ref_conv(x, consts["w"], consts["b"], (1, 1), (1, 1, 1, 1),
                                                        (1, 1), 1), 0), rtol=1e-4, atol=1e-4)


def test_optimize_keeps_dropouts_that_may_train_or_whose_mask_is_read():
    from caffe2py.optimize import optimize
    consts = {"on": np.array(True), "ratio": np.array(0.5, np.float32)}
    ops = [
        _op("Dropout", ["x", "ratio", "on"], ["a"], version=13),      # training mode: stays
        _op("Dropout", ["a", "ratio", "t"], ["b"], version=13),            # training_mode fed at run time: stays
        _op("Dropout", ["b"], ["c", "mask"], version=13),             # its mask is read: stays
        _op("Cast", ["mask"], ["m"], to=1),
        _op("Dropout", ["c"], ["d"], version=6),                      # opset 6 without is_test: stays
        _op("Dropout", ["d"], ["e"], version=13),                     # its input is rewritten below: stays
        _op("Relu", ["m"], ["d"]),
        _op("Add", ["e", "d"], ["y"]),
    ]
    net = _net(ops, ["x", "t"] + list(consts), ["y"])
    opt = optimize(net, dict(consts))
    assert [op.type for op in opt.op] == [op.type for op in ops]


def test_team_work_regions_keep_their_addresses():
    from caffe2py.kernels.cpu.runtime import buffers
    import numba
    block, stride = buffers.team_work(1000, np.float32)
    assert block.size == numba.config.NUMBA_NUM_THREADS * stride and stride >= 1000
    assert (stride * 4) % 4096 == 0                       # regions start on page boundaries
    smaller, stride2 = buffers.team_work(10, np.float32)
    assert smaller is block and stride2 == stride         # a smaller layer: the same regions
    bigger, stride3 = buffers.team_work(stride + 1, np.float32)
    assert stride3 > stride and bigger.size == numba.config.NUMBA_NUM_THREADS * stride3


def test_layers_sharing_team_work_give_their_own_results():
    # The fused flat (stride-2 stem), shift and Winograd paths all work in the same
    # per-thread regions; interleaved layers of different sizes must not see each
    # other's values.
    layers = [((1, 3, 33, 31), (16, 3, 3, 3), (2, 2), (0, 0, 0, 0)),     # flat rows
              ((1, 64, 12, 13), (16, 64, 3, 3), (1, 1), (1, 1, 1, 1)),   # shift (C >= 2M)
              ((1, 16, 30, 29), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1)),   # Winograd F(4x4)
              ((1, 48, 13, 13), (96, 48, 3, 3), (1, 1), (1, 1, 1, 1))]   # Winograd F(2x2)
    cases = []
    for xs, ws, strides, pads in layers:
        x, w, b = rand(*xs), rand(*ws), rand(ws[0])
        # a stride-s conv is the stride-1 conv sampled every s rows and columns
        ref = ref_conv2d_windows(x, w, b, pads)[:, :, ::strides[0], ::strides[1]]
        cases.append((x, w, b, strides, pads, np.maximum(ref, 0)))
    for x, w, b, strides, pads, ref in cases + cases[::-1] + cases:
        y = conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), 1, activation="relu")
        np.testing.assert_allclose(y, ref, rtol=2e-4, atol=2e-4)
