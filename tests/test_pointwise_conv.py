"""1x1 convolutions with the pixels in the vector lanes (kernels/cpu/cnn/pointwise_conv.py):
against the float64 reference of tests/_conv_reference.py, with every epilogue, tails of
1-47 pixels, chunked reductions, pixel tiles, strides, batches, team sizes, NaN, views,
a residual that is the output itself, and through conv_nchw's plan choice. FORCE makes
the path take every float32 1x1 it is asked about, so the tests run on CPUs without
AVX-512 too (LLVM splits the 16-lane vectors there)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import pointwise_conv as pw
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import case, out_shape, reference

VALID = (0, 0, 0, 0)
ONE = (1, 1)


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(pw, "FORCE", True)
    conv_k._plan.cache_clear()
    yield
    conv_k._plan.cache_clear()


def run_pointwise(x, w, b, strides=ONE, relu=False, residual=None, out=None, scratch=None):
    shape = out_shape(x.shape, w.shape, strides, VALID, ONE)
    plan = pw.pointwise_plan(x.shape, w.shape, strides, shape[2:], np.float32)
    assert plan is not None
    if out is None:
        out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, scratch or Scratch(), b, relu, residual)
    return out


def want(x, w, b, strides=ONE, relu=False, residual=None):
    return reference(x, w, b, strides, VALID, ONE, residual, relu)


def tolerance(c):
    return dict(rtol=1e-4, atol=1e-5 * np.sqrt(c))


# (x shape, M, strides): pixels = 48 * full blocks + a tail
GEOMETRIES = [
    ((1, 64, 14, 14), 64, ONE),          # 196 = 4 x 48 + 4: a one-vector tail
    ((2, 37, 10, 10), 16, ONE),          # 100 = 2 x 48 + 4, odd channels, a batch
    ((1, 300, 12, 12), 24, ONE),         # 144 = 3 x 48: no tail; 300 channels: 3 chunks of 100
    ((1, 130, 8, 6), 40, ONE),           # 48: one block; 2 chunks of 65
    ((1, 9, 8, 11), 8, ONE),             # 88 = 48 + 40: a three-vector tail
    ((3, 8, 7, 7), 32, ONE),             # 49 = 48 + 1, batch 3
    ((1, 20, 20, 21), 48, (2, 2)),       # strided: 10 x 11 = 110 outputs
    ((1, 3, 4, 12), 8, ONE),             # 48 pixels, 3 channels
]


@pytest.mark.parametrize("x_shape,m,strides", GEOMETRIES)
def test_pointwise_matches_float64_with_every_epilogue(forced, x_shape, m, strides):
    w_shape = (m, x_shape[1], 1, 1)
    x, w, b, res = case(x_shape, w_shape, strides, VALID, ONE)
    for bias, relu, residual in ((b, False, None), (None, True, None), (b, True, res), (None, False, res)):
        np.testing.assert_allclose(run_pointwise(x, w, bias, strides, relu, residual),
                                   want(x, w, bias, strides, relu, residual), **tolerance(x_shape[1]))


def test_pixel_tiles_cover_every_block(forced, monkeypatch):
    """Tiles of 3 pixel blocks over 20 full blocks and a tail (the tiled order runs for
    single-chunk reductions with large outputs: forced here on a small one)."""
    monkeypatch.setattr(pw, "TILE_PIXEL_BLOCKS", 3)
    monkeypatch.setattr(pw, "TILE_MIN_OUTPUT_BYTES", 0)
    x, w, b, res = case((1, 24, 31, 31), (16, 24, 1, 1), ONE, VALID, ONE)      # 961 = 20 x 48 + 1
    np.testing.assert_allclose(run_pointwise(x, w, b, relu=True, residual=res), want(x, w, b, relu=True, residual=res),
                               **tolerance(24))


@pytest.mark.parametrize("x_shape,m", [((1, 260, 10, 20), 256),   # pixels <= outputs: the team splits rows
                                       ((1, 40, 20, 20), 8)],      # pixels > outputs: the team splits pixel blocks
                         ids=["rows", "pixels"])
def test_results_are_bit_identical_at_team_sizes_1_2_3(forced, monkeypatch, x_shape, m):
    """Each output's sum runs over the channels in order whoever computes it."""
    x, w, b, res = case(x_shape, (m, x_shape[1], 1, 1), ONE, VALID, ONE)
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(pw, "team_blocks", lambda count, work, t=threads: min(count, t))
        monkeypatch.setattr(pw, "team_size", lambda t=threads: t)
        results.append(run_pointwise(x, w, b, relu=True, residual=res))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], want(x, w, b, relu=True, residual=res), **tolerance(x_shape[1]))


def test_nan_reaches_every_output_that_reads_it_and_relu_keeps_it(forced):
    x, w, b, _ = case((1, 40, 10, 10), (16, 40, 1, 1), ONE, VALID, ONE)
    x[0, 3, 2, 4] = np.nan          # in a full block
    x[0, 7, 9, 9] = np.nan          # in the tail
    y = run_pointwise(x, w, b, relu=True)
    assert np.isnan(y[:, :, 2, 4]).all() and np.isnan(y[:, :, 9, 9]).all()
    expected = want(x, w, b, relu=True)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_allclose(y[~np.isnan(y)], expected[~np.isnan(expected)], **tolerance(40))


@pytest.mark.parametrize("blocks", [1, 2], ids=["serial", "parallel"])
def test_numpy_twin_agrees_with_the_kernel(forced, monkeypatch, blocks):
    """Both kernels' twins (test_jit_modes leaves this module's to this test)."""
    monkeypatch.setattr(pw, "team_blocks", lambda count, work: min(count, blocks))
    x, w, b, res = case((2, 150, 10, 10), (24, 150, 1, 1), ONE, VALID, ONE)
    compiled = run_pointwise(x, w, b, relu=True, residual=res)
    called = []
    kernel = pw._pointwise_blocks if blocks > 1 else pw._pointwise_blocks_serial
    monkeypatch.setattr(kernel, "twin", lambda *args: called.append(1) or pw._pointwise_blocks_numpy(*args))
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = run_pointwise(x, w, b, relu=True, residual=res)
    finally:
        jit.set_jit_mode(before)
    assert called
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ahead", [0, 384, 1 << 40])
def test_the_input_prefetch_distance_never_changes_the_bits(forced, monkeypatch, ahead):
    # prefetches never fault, even 1 TB past the input, and change no result
    x, w, b, _ = case((1, 300, 12, 12), (24, 300, 1, 1), ONE, VALID, ONE)
    base = run_pointwise(x, w, b, relu=True)
    monkeypatch.setattr(pw, "INPUT_PREFETCH_BYTES", ahead)
    np.testing.assert_array_equal(run_pointwise(x, w, b, relu=True), base)


def test_the_team_splits_whichever_operand_it_would_read_less_twice():
    assert pw.split_by_rows(1024, 196, 2)          # 14x14, 1024 outputs: the input is the smaller
    assert not pw.split_by_rows(64, 3136, 2)       # 56x56, 64 outputs: the weights are
    assert pw.split_by_rows(64, 100, 2)            # 3 pixel blocks for 2 threads: rows
    assert not pw.split_by_rows(64, 400, 2)


def test_packed_weights_round_trip_over_uneven_chunks():
    w = np.random.default_rng(3).standard_normal((24, 300, 1, 1)).astype(np.float32)
    chunk = pw.chunk_channels(300)
    assert chunk == 100
    packed = pw.pack_rows(w)
    assert packed.shape == (3, 300, 8)
    np.testing.assert_array_equal(pw.unpack_rows(packed, chunk), w[:, :, 0, 0])
    # inside a chunk, row block 1's weights for channel 0 follow row block 0's whole chunk
    np.testing.assert_array_equal(packed.reshape(-1)[800:808], w[8:16, 0, 0, 0])


def test_weights_edited_in_place_are_packed_again(forced):
    x, w, b, _ = case((1, 64, 7, 8), (40, 64, 1, 1), ONE, VALID, ONE)
    plan = pw.pointwise_plan(x.shape, w.shape, ONE, (7, 8), np.float32)
    out = np.empty((1, 40, 7, 8), np.float32)
    scratch = Scratch()
    with jit.team():
        plan(x, w, out, scratch, b)
        w[5] *= -2.0
        plan(x, w, out, scratch, b)
    np.testing.assert_allclose(out, want(x, w, b), **tolerance(64))


def test_inputs_and_outputs_that_are_views(forced):
    """A placed Concat hands its convs channel slices of one buffer, an input may be a
    channel slice too, and an output may be a window of a larger map (not contiguous)."""
    x, w, b, _ = case((2, 60, 7, 8), (40, 48, 1, 1), ONE, VALID, ONE)
    big = np.full((2, 100, 7, 8), -7.0, np.float32)
    run_pointwise(x[:, 5:53], w, b, out=big[:, 30:70])
    np.testing.assert_allclose(big[:, 30:70], want(x[:, 5:53], w, b), **tolerance(48))
    assert (big[:, :30] == -7.0).all() and (big[:, 70:] == -7.0).all()
    framed = np.full((2, 40, 9, 10), -7.0, np.float32)
    run_pointwise(x[:, 5:53], w, b, out=framed[:, :, 1:8, 1:9])
    np.testing.assert_allclose(framed[:, :, 1:8, 1:9], want(x[:, 5:53], w, b), **tolerance(48))
    assert (framed[:, :, 0] == -7.0).all() and (framed[:, :, :, 9] == -7.0).all()


def test_a_residual_that_is_the_output_itself(forced):
    """An in-place Sum: the partial sums wait in the output, so the kernel must not read
    the residual from there."""
    x, w, b, res = case((1, 300, 10, 10), (16, 300, 1, 1), ONE, VALID, ONE)
    expected = want(x, w, b, relu=True, residual=res)
    out = res.copy()
    run_pointwise(x, w, b, relu=True, residual=out, out=out)
    np.testing.assert_allclose(out, expected, **tolerance(300))


def test_a_bias_of_the_wrong_length_is_refused(forced):
    x, w, _, _ = case((1, 8, 8, 6), (40, 8, 1, 1), ONE, VALID, ONE)
    with pytest.raises(ValueError, match="bias of 39 values for 40 output channels"):
        run_pointwise(x, w, np.zeros(39, np.float32))


def test_conv_nchw_takes_the_pixel_lanes_where_the_rule_says(monkeypatch):
    from caffe2py.kernels.cpu.runtime import simd
    conv_k._plan.cache_clear()
    try:
        def kind(x_shape, w_shape, strides=ONE, dtype=np.float32):
            plan = conv_k._plan(x_shape, w_shape, strides, VALID, ONE, 1, np.dtype(dtype))
            return plan.compute.__qualname__.split(".")[0]
        monkeypatch.setattr(simd, "target_lanes", lambda: 16)
        assert kind((1, 256, 14, 14), (1024, 256, 1, 1)) == "pointwise_plan"
        assert kind((1, 64, 56, 56), (256, 64, 1, 1)) == "pointwise_plan"
        assert kind((1, 256, 56, 56), (512, 256, 1, 1), (2, 2)) == "pointwise_plan"     # strided
        assert kind((1, 512, 7, 7), (128, 512, 1, 1)) == "panel_plan"        # small maps: channel panels
        assert kind((1, 512, 7, 7), (2048, 512, 1, 1)) == "pointwise_plan"   # small maps, many outputs
        assert kind((1, 832, 7, 7), (48, 832, 1, 1)) == "_pointwise_plan"    # 49 pixels: OpenBLAS
        assert kind((1, 64, 14, 14), (36, 64, 1, 1)) == "_pointwise_plan"    # 36 outputs: not rows of 8
        assert kind((1, 64, 14, 14), (64, 64, 1, 1), dtype=np.float64) == "_pointwise_plan"
        x, w, b, res = case((1, 64, 14, 14), (32, 64, 1, 1), ONE, VALID, ONE)
        y = conv_k.conv_nchw(x, w, b, ONE, VALID, ONE, 1, activation="relu", residual=res)
        np.testing.assert_allclose(y, want(x, w, b, relu=True, residual=res), **tolerance(64))
        monkeypatch.setattr(simd, "target_lanes", lambda: 8)
        conv_k._plan.cache_clear()
        assert kind((1, 256, 14, 14), (1024, 256, 1, 1)) == "_pointwise_plan"      # AVX2: OpenBLAS
    finally:
        conv_k._plan.cache_clear()
