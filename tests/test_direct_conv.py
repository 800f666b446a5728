"""The register-blocked direct convolution (kernels/cpu/cnn/direct_conv.py): against a
float64 loop reference written here and torch's conv2d, called directly (any C_in)
and through conv_nchw's plan choice (short reductions)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import direct_conv
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import both_register_widths, case, out_shape, reference


def torch_reference(x, w, b, strides, pads, dilations):
    torch = pytest.importorskip("torch")     # .ci/run installs it; a bare `pip install -e .[test]` may not have it
    xt = torch.nn.functional.pad(torch.tensor(x, dtype=torch.float64), (pads[1], pads[3], pads[0], pads[2]))
    bt = None if b is None else torch.tensor(b, dtype=torch.float64)
    return torch.nn.functional.conv2d(xt, torch.tensor(w, dtype=torch.float64), bt, strides,
                                      dilation=dilations).numpy()


register_lanes = both_register_widths()


def run_direct(x, w, b, strides, pads, dilations, relu=False, residual=None):
    shape = out_shape(x.shape, w.shape, strides, pads, dilations)
    plan = direct_conv.direct_plan(x.shape, w.shape, strides, pads, dilations, shape[2:], "<f4")
    assert plan is not None
    out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, residual)
    return out


# (x shape, w shape, strides, pads, dilations)
GEOMETRIES = [
    ((1, 1, 9, 9), (1, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),          # C_in 1, C_out 1
    ((2, 3, 17, 19), (6, 3, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1)),         # stem-like, asymmetric pads
    ((1, 3, 30, 31), (5, 3, 7, 7), (2, 2), (3, 2, 3, 4), (1, 1)),         # 7x7 stride 2
    ((2, 16, 13, 13), (9, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),       # rows shorter than a block
    ((1, 7, 11, 53), (4, 7, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),         # rows longer than a block, tails
    ((1, 5, 12, 40), (7, 5, 2, 5), (1, 2), (0, 2, 1, 0), (2, 1)),         # mixed stride, dilation
    ((1, 4, 10, 10), (3, 4, 3, 3), (2, 1), (0, 0, 0, 0), (1, 3)),
    ((1, 64, 13, 13), (10, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # C_in 64 (long reduction)
    ((1, 2, 5, 4), (3, 2, 5, 4), (1, 1), (0, 0, 0, 0), (1, 1)),           # one output pixel
]


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", GEOMETRIES)
def test_direct_kernel_matches_float64_loops_and_torch(x_shape, w_shape, strides, pads, dilations):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    scale = np.sqrt(np.prod(w_shape[1:]))
    want = reference(x, w, b, strides, pads, dilations)
    np.testing.assert_allclose(run_direct(x, w, b, strides, pads, dilations), want, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(run_direct(x, w, None, strides, pads, dilations),
                               reference(x, w, None, strides, pads, dilations), rtol=1e-4, atol=1e-5 * scale)
    # the float64 reference itself against torch's (last: without torch only this line skips)
    np.testing.assert_allclose(torch_reference(x, w, b, strides, pads, dilations), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[4]])
def test_relu_and_residual_epilogue(x_shape, w_shape, strides, pads, dilations):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    res = rng.standard_normal(out_shape(x_shape, w_shape, strides, pads, dilations)).astype(np.float32)
    for bias in (b, None):
        np.testing.assert_allclose(run_direct(x, w, bias, strides, pads, dilations, relu=True),
                                   reference(x, w, bias, strides, pads, dilations, relu=True), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(run_direct(x, w, bias, strides, pads, dilations, residual=res),
                                   reference(x, w, bias, strides, pads, dilations, residual=res), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(run_direct(x, w, bias, strides, pads, dilations, relu=True, residual=res),
                                   reference(x, w, bias, strides, pads, dilations, res, relu=True),
                                   rtol=1e-4, atol=1e-4)


def test_nan_and_inf_propagate_to_the_outputs_that_read_them():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 20, 40)).astype(np.float32)
    x[0, 0, 5, 7] = np.nan
    x[0, 2, 12, 30] = np.inf
    w = np.abs(rng.standard_normal((6, 3, 3, 3))).astype(np.float32) + 0.1     # inf stays +inf
    for relu in (False, True):
        got = run_direct(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), relu=relu)
        want = reference(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), relu=relu)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 6 * 9
        assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.isposinf(got).sum() == 6 * 9
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_conv_nchw_dispatches_short_reductions_to_the_direct_kernel(register_lanes):
    def compute(x_shape, w_shape, strides, pads):
        return conv_k._plan(x_shape, w_shape, strides, pads, (1, 1), 1, "<f4").compute
    assert compute((1, 6, 56, 56), (64, 6, 5, 5), (2, 2), (2, 2, 2, 2)).__qualname__.startswith("direct_plan")
    assert compute((1, 16, 55, 55), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1)).__qualname__.startswith("direct_plan")
    # the 3x3 stems (K 27) and longer reductions, other dtypes, groups and negative pads
    # keep their paths
    assert not compute((1, 3, 224, 224), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)).__qualname__.startswith("direct")
    assert not compute((1, 48, 28, 28), (192, 48, 3, 3), (1, 1), (1, 1, 1, 1)).__qualname__.startswith("direct")
    # up to 14x14 outputs the 8-channel blocks of 16 lanes take Winograd's 3x3s (conv.py's
    # WIDE_MAX_WINOGRAD_PIXELS), 4-channel ones leave them
    assert compute((1, 48, 13, 13), (192, 48, 3, 3), (1, 1), (1, 1, 1, 1)).__qualname__.startswith(
        "direct" if register_lanes == 16 else "winograd")
    assert not conv_k._plan((1, 8, 20, 20), (8, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
                            "<f8").compute.__qualname__.startswith("direct")
    assert not conv_k._plan((1, 4, 20, 20), (8, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2,
                            "<f4").compute.__qualname__.startswith("direct")
    assert compute((1, 8, 20, 20), (8, 8, 3, 3), (1, 1), (1, 1, 1, 1)).__qualname__.startswith("direct")
    assert not compute((1, 8, 20, 20), (8, 8, 3, 3), (1, 1), (-1, 1, 1, 1)).__qualname__.startswith("direct")


@pytest.mark.parametrize("activation,with_residual", [(None, False), ("relu", False), ("relu", True)])
def test_conv_nchw_through_the_direct_path_batch_and_epilogue(activation, with_residual):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 8, 23, 29)).astype(np.float32)
    w = rng.standard_normal((10, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    strides, pads = (2, 2), (1, 0, 0, 1)
    res = rng.standard_normal(out_shape(x.shape, w.shape, strides, pads, (1, 1))).astype(np.float32) \
        if with_residual else None
    assert conv_k._plan(x.shape, w.shape, strides, pads, (1, 1), 1, "<f4").compute.__qualname__.startswith("direct")
    got = conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), 1, activation=activation, residual=res)
    want = reference(x, w, b, strides, pads, (1, 1), residual=res, relu=activation == "relu")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weights_edited_in_place_are_packed_again():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((5, 8, 3, 3)).astype(np.float32)
    first = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(first, reference(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1)), rtol=1e-4, atol=1e-4)
    w *= 2
    second = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(second, 2 * first.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_numpy_twin_agrees_with_the_kernel():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 14, 33)).astype(np.float32)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    res = rng.standard_normal(out_shape(x.shape, w.shape, (2, 1), (1, 1, 0, 2), (1, 1))).astype(np.float32)
    compiled = run_direct(x, w, b, (2, 1), (1, 1, 0, 2), (1, 1), relu=True, residual=res)
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = run_direct(x, w, b, (2, 1), (1, 1, 0, 2), (1, 1), relu=True, residual=res)
    finally:
        jit.set_jit_mode(before)
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-5)


def test_random_geometries_match_torch():
    """Seeded sweep: strides 1-3, dilations 1-2, pads up to beyond the kernel, widths
    from 1, channel counts off the block sizes."""
    rng = np.random.default_rng(17)
    checked = 0
    while checked < 25:
        c, m = int(rng.integers(1, 12)), int(rng.integers(1, 11))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        strides = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        dilations = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pads = tuple(int(v) for v in rng.integers(0, 6, 4))
        x_shape = (int(rng.integers(1, 3)), c, int(rng.integers(1, 20)), int(rng.integers(1, 40)))
        w_shape = (m, c, kh, kw)
        if min(out_shape(x_shape, w_shape, strides, pads, dilations)[2:]) <= 0:
            continue
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        np.testing.assert_allclose(run_direct(x, w, b, strides, pads, dilations),
                                   torch_reference(x, w, b, strides, pads, dilations), rtol=1e-4, atol=1e-4,
                                   err_msg=str((x_shape, w_shape, strides, pads, dilations)))
        checked += 1


# The cache-blocked kernel: the reduction in chunks of taps, tiles of channel blocks x
# pixel blocks. Small chunk / tile sizes here so that small layers cross every boundary.
BLOCKED = [
    # (x shape, w shape, strides, pads, dilations, (chunk taps, tile weight bytes, pixel blocks per tile))
    ((1, 13, 9, 11), (10, 13, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (25, 2 * 25 * 16, 2)),   # K 117 = 4 x 25 + 17
    ((2, 9, 15, 14), (7, 9, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), (16, 3 * 16 * 16, 1)),      # stride 2, asymmetric
    ((1, 6, 12, 13), (5, 6, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), (10, 10 * 16, 3)),          # dilation 2
    ((1, 8, 14, 17), (9, 8, 5, 5), (2, 2), (0, 0, 0, 0), (1, 1), (64, 64 * 16, 2)),          # 5x5/s2, zero pads
    ((1, 37, 7, 7), (11, 37, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), (8, 8 * 16, 1)),           # 1x1, tail at the end
    ((2, 20, 5, 9), (6, 20, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (7, 2 * 7 * 16, 2)),        # 1x1 stride 2
    ((1, 16, 13, 13), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (144, 16 * 144 * 16, 4)),  # one chunk
]


@pytest.fixture
def blocking(monkeypatch):
    def use(chunk, weight_bytes, pixel_blocks):
        monkeypatch.setattr(direct_conv, "CHUNK_TAPS", chunk)
        monkeypatch.setattr(direct_conv, "TILE_WEIGHT_BYTES", weight_bytes)
        monkeypatch.setattr(direct_conv, "TILE_PIXEL_BLOCKS", pixel_blocks)
    return use


_blocked_case = case


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations,sizes", BLOCKED)
def test_blocked_reduction_matches_float64_for_every_tail(blocking, x_shape, w_shape, strides, pads, dilations,
                                                          sizes):
    blocking(*sizes)
    shape = out_shape(x_shape, w_shape, strides, pads, dilations)
    plan = direct_conv.direct_plan(x_shape, w_shape, strides, pads, dilations, shape[2:], "<f4")
    k_count = int(np.prod(w_shape[1:]))
    chunk, tile_cb, tile_pb = plan.blocking
    assert chunk == sizes[0] or k_count <= sizes[0] or k_count % sizes[0]   # balanced when not exact
    x, w, b, res = _blocked_case(x_shape, w_shape, strides, pads, dilations)
    scale = np.sqrt(k_count)
    for bias, relu, residual in ((b, False, None), (None, True, None), (b, True, res), (None, False, res)):
        np.testing.assert_allclose(run_direct(x, w, bias, strides, pads, dilations, relu=relu, residual=residual),
                                   reference(x, w, bias, strides, pads, dilations, residual=residual, relu=relu),
                                   rtol=1e-4, atol=1e-5 * scale)


def test_blocking_splits_long_reductions_and_wide_layers():
    # resnet50's 256 -> 256 3x3 at 14x14: K 2304 in 9 chunks of 256; 192 KB of weights hold
    # 48 channel blocks, so the 64 blocks go in 2 tiles of 32; 10 pixel blocks in 2 tiles of 5
    assert direct_conv.blocking(2304, 64, 10) == (256, 32, 5)
    # a short reduction stays one chunk; tiles never hold more blocks than there are
    assert direct_conv.blocking(144, 16, 3) == (144, 16, 3)
    # 48-output blocks (16 lanes): chunks of half the taps, tiles of half the pixel blocks
    # (the same bytes in L1 / L2); the weights of all 64 channel blocks then fit one tile
    assert direct_conv.blocking(2304, 64, 10, pixels=48) == (128, 64, 4)


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations,sizes", [BLOCKED[0], BLOCKED[3], BLOCKED[4]])
def test_blocked_results_are_bit_identical_at_team_sizes_1_2_3(blocking, x_shape, w_shape, strides, pads,
                                                              dilations, sizes):
    """Each output's sum runs chunk by chunk, tap by tap, whoever computes it: the same
    bits whatever the number of blocks the tiles are split into (reproducible training)."""
    blocking(*sizes)
    shape = out_shape(x_shape, w_shape, strides, pads, dilations)
    x, w, b, res = _blocked_case(x_shape, w_shape, strides, pads, dilations, seed=1)
    calls = []
    plan = direct_conv.direct_plan(x_shape, w_shape, strides, pads, dilations, shape[2:], "<f4")
    names = ("_direct_blocks_wide", "_direct_blocks_wide_serial") if plan.channels == 8 else \
        ("_direct_blocks", "_direct_blocks_serial")
    real = tuple(getattr(direct_conv, name) for name in names)

    def recording(*args):
        calls.append(args)
        return real[0](*args)
    out = np.empty(shape, np.float32)
    try:
        for name in names:
            setattr(direct_conv, name, recording)
        with jit.team():
            plan(x, w, out, Scratch(), b, True, res)
    finally:
        for name, kernel in zip(names, real):
            setattr(direct_conv, name, kernel)
    assert calls
    results = []
    for blocks in (1, 2, 3):
        got = np.empty(shape, np.float32)
        for i, args in enumerate(calls):        # one call per image, the arguments it had
            args = list(args)
            args[8], args[14] = got[i], blocks               # out, blocks
            args[13] = np.full_like(args[13], np.nan)        # acc: partial sums come from this run only
            (real[0] if blocks > 1 else real[1])(*args)
        results.append(got)
    assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes() == out.tobytes()
    np.testing.assert_allclose(out, reference(x, w, b, strides, pads, dilations, residual=res, relu=True),
                               rtol=1e-4, atol=1e-4)


def test_blocked_numpy_twin_agrees_with_the_kernel(blocking):
    blocking(*BLOCKED[0][5])
    x_shape, w_shape, strides, pads, dilations = BLOCKED[0][:5]
    x, w, b, res = _blocked_case(x_shape, w_shape, strides, pads, dilations, seed=2)
    compiled = run_direct(x, w, b, strides, pads, dilations, relu=True, residual=res)
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = run_direct(x, w, b, strides, pads, dilations, relu=True, residual=res)
    finally:
        jit.set_jit_mode(before)
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-5)


def test_conv_nchw_dispatches_to_the_blocked_kernel_where_it_measured_faster(register_lanes):
    def kind(x_shape, w_shape, strides, pads, dtype="<f4"):
        return conv_k._plan(x_shape, w_shape, strides, pads, (1, 1), 1, dtype).compute.__qualname__.split(".")[0]
    same = (1, 1, 1, 1)
    assert kind((1, 128, 28, 28), (32, 128, 3, 3), (1, 1), same) == "direct_plan"        # was shift-add
    assert kind((1, 256, 28, 28), (256, 256, 3, 3), (2, 2), same) == "direct_plan"       # was flattened rows
    assert kind((1, 96, 54, 54), (256, 96, 5, 5), (2, 2), (0, 0, 0, 0)) == "direct_plan"
    assert kind((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), same) == "direct_plan"         # was Winograd
    # Winograd keeps the larger maps, the pointwise GEMM the 1x1s, float64 its paths
    assert kind((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), same) == (
        "direct_plan" if register_lanes == 16 else "winograd_plan")
    assert kind((1, 512, 14, 14), (512, 512, 3, 3), (1, 1), same) == (
        "direct_plan" if register_lanes == 16 else "winograd_plan")
    assert kind((1, 256, 28, 28), (256, 256, 3, 3), (1, 1), same) == "winograd_plan"
    assert kind((1, 512, 14, 14), (2048, 512, 1, 1), (1, 1), (0, 0, 0, 0)) == "_pointwise_plan"
    assert kind((1, 128, 28, 28), (32, 128, 3, 3), (1, 1), same, "<f8") == "shift_plan"


def test_conv_nchw_on_the_blocked_kernel_with_many_chunks_matches_float64():
    """A 7x7-output layer with a reduction of 1152 taps (5 chunks), through conv_nchw,
    a batch of 2 and the residual + ReLU epilogue."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 128, 7, 7)).astype(np.float32)
    w = (0.1 * rng.standard_normal((36, 128, 3, 3))).astype(np.float32)
    b = rng.standard_normal(36).astype(np.float32)
    res = rng.standard_normal((2, 36, 7, 7)).astype(np.float32)
    plan = conv_k._plan(x.shape, w.shape, (1, 1), (1, 1, 1, 1), (1, 1), 1, "<f4")
    assert plan.compute.blocking[0] < 128 * 9
    got = conv_k.conv_nchw(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1, activation="relu", residual=res)
    np.testing.assert_allclose(got, reference(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), residual=res, relu=True),
                               rtol=1e-4, atol=1e-4)


def grouped_reference(x, w, b, strides, pads, dilations, group, residual=None, relu=False):
    """float64: each group's channel slice through the loop reference."""
    cg, mg = x.shape[1] // group, w.shape[0] // group
    y = np.concatenate([reference(x[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg],
                                  None if b is None else b[g * mg:(g + 1) * mg], strides, pads, dilations)
                        for g in range(group)], axis=1)
    if residual is not None:
        y = y + residual
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,group", [
    ((2, 32, 11, 13), (10, 16, 5, 5), (1, 1), (2, 2, 2, 2), 2),      # alexnet-like 5x5 g2, M/g not a multiple of 4
    ((1, 48, 9, 9), (9, 16, 3, 3), (2, 2), (1, 0, 1, 2), 3),         # 3 groups, stride 2, asymmetric pads
])
def test_grouped_convs_run_the_blocked_kernel_per_group(blocking, x_shape, w_shape, strides, pads, group):
    blocking(50, 2 * 50 * 16, 2)                  # several chunks and tiles per group
    plan = conv_k._plan(x_shape, w_shape, strides, pads, (1, 1), group, "<f4")
    assert plan.compute.__qualname__.startswith("grouped_direct_plan")
    rng = np.random.default_rng(12)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    res = rng.standard_normal(plan.out_shape).astype(np.float32)
    scale = np.sqrt(np.prod(w_shape[1:]))
    for bias, act, residual in ((b, None, None), (None, "relu", res), (b, "relu", res)):
        got = conv_k.conv_nchw(x, w, bias, strides, pads, (1, 1), group, activation=act, residual=residual)
        np.testing.assert_allclose(got, grouped_reference(x, w, bias, strides, pads, (1, 1), group, residual,
                                                          act == "relu"), rtol=1e-4, atol=1e-5 * scale)
    w *= -0.5                       # edited in place: every group's packed weights are made again
    got = conv_k.conv_nchw(x, w, None, strides, pads, (1, 1), group)
    np.testing.assert_allclose(got, grouped_reference(x, w, None, strides, pads, (1, 1), group),
                               rtol=1e-4, atol=1e-5 * scale)
    conv_k._plan.cache_clear()      # plans made under the small blocking go


def test_grouped_convs_with_narrow_groups_keep_the_flattened_rows():
    plan = conv_k._plan((1, 8, 20, 20), (8, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, "<f4")
    assert plan.compute.__qualname__.startswith("_flat2d_plan")
    plan = conv_k._plan((1, 96, 27, 27), (256, 48, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 2, "<f4")
    assert plan.compute.__qualname__.startswith("grouped_direct_plan")


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[4]])
def test_outputs_into_a_channel_window_leave_the_neighbours_alone(register_lanes, x_shape, w_shape, strides, pads,
                                                                   dilations):
    """Blocks that straddle output rows are stored lane-masked: into a channel window of
    a larger buffer (a concat's), the channels either side keep their values."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    shape = out_shape(x_shape, w_shape, strides, pads, dilations)
    res = rng.standard_normal(shape).astype(np.float32)
    m = shape[1]
    big = np.full((shape[0], m + 5) + shape[2:], -3.5, np.float32)
    window = big[:, 2:2 + m]
    plan = direct_conv.direct_plan(x_shape, w_shape, strides, pads, dilations, shape[2:], "<f4")
    with jit.team():
        plan(x, w, window, Scratch(), b, True, res)
    np.testing.assert_allclose(window, reference(x, w, b, strides, pads, dilations, res, relu=True),
                               rtol=1e-4, atol=1e-4)
    assert (big[:, :2] == -3.5).all() and (big[:, 2 + m:] == -3.5).all()
