"""Convolutions in channel panels (kernels/cpu/cnn/panel_conv.py): against the float64
reference of tests/_conv_reference.py, with every epilogue, ragged channel and output
counts, strides, pads, dilations, batches, team sizes, NaN, and through conv_nchw's plan
choice. FORCE makes the path take every float32 conv it is asked about, so the tests
run on CPUs without AVX-512 too (LLVM splits the 16-lane vectors there)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import panel_conv as pc
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import case, out_shape, reference


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(pc, "FORCE", True)
    conv_k._plan.cache_clear()
    yield
    conv_k._plan.cache_clear()


def run_panels(x, w, b, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), relu=False, residual=None, out=None):
    shape = out_shape(x.shape, w.shape, strides, pads, dilations)
    plan = pc.panel_plan(x.shape, w.shape, strides, pads, dilations, shape[2:], np.float32)
    assert plan is not None
    if out is None:
        out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, residual)
    return out


def _case(x_shape, w_shape, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), seed=0):
    return case(x_shape, w_shape, strides, pads, dilations, seed)


# (x shape, w shape, strides, pads, dilations)
GEOMETRIES = [
    ((1, 512, 7, 7), (128, 512, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),     # 1x1 in place, 49 = 4 x 12 + 1: a tail
    ((2, 37, 5, 3), (45, 37, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # channels past a panel, batch
    ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),           # one of everything
    ((3, 64, 4, 6), (33, 64, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),        # 24 pixels: whole blocks, no tail
    ((1, 20, 9, 9), (40, 20, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),        # strided 1x1: the phase path
    ((1, 48, 7, 7), (64, 48, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),        # 3x3 pad 1
    ((2, 16, 14, 14), (35, 16, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),      # 3x3 stride 2
    ((1, 9, 6, 6), (70, 9, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),          # 5x5
    ((1, 7, 11, 13), (32, 7, 3, 2), (1, 2), (0, 2, 1, 0), (2, 1)),        # mixed stride, dilation, asymmetric pads
    ((1, 20, 14, 14), (40, 20, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # 14x14: one output row per block
    ((1, 12, 13, 12), (33, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # rows of 12: two slots past the row
    ((2, 8, 5, 7), (36, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # two rows of 7 per block, odd rows
    ((1, 10, 11, 11), (34, 10, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),      # 5x5 by stride 2: two rows of 5
]


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", GEOMETRIES)
def test_panels_match_float64_with_every_epilogue(forced, x_shape, w_shape, strides, pads, dilations):
    x, w, b, res = _case(x_shape, w_shape, strides, pads, dilations)
    tol = dict(rtol=1e-4, atol=1e-5 * np.sqrt(np.prod(w_shape[1:])))
    for bias, relu, residual in ((b, False, None), (None, True, None), (b, True, res), (None, False, res)):
        np.testing.assert_allclose(run_panels(x, w, bias, strides, pads, dilations, relu, residual),
                                   reference(x, w, bias, strides, pads, dilations, residual, relu), **tol)


@pytest.mark.parametrize("x_shape,w_shape,strides,pads", [((1, 600, 7, 7), (130, 600, 1, 1), (1, 1), (0, 0, 0, 0)),
                                                           ((1, 64, 9, 9), (70, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
                                                           ((1, 64, 7, 7), (70, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
                                                           ((1, 40, 14, 14), (70, 40, 3, 3), (1, 1), (1, 1, 1, 1))])
def test_results_are_bit_identical_at_team_sizes_1_2_3(forced, monkeypatch, x_shape, w_shape, strides, pads):
    """Each output's sum runs over the taps in order whoever computes it."""
    x, w, b, res = _case(x_shape, w_shape, strides, pads)
    results = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(pc, "team_blocks", lambda count, work, t=threads: min(count, t))
        results.append(run_panels(x, w, b, strides, pads, relu=True, residual=res))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], reference(x, w, b, strides, pads, (1, 1), res, True), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("w_shape,pads", [((35, 40, 1, 1), (0, 0, 0, 0)), ((35, 40, 3, 3), (1, 1, 1, 1))])
def test_nan_reaches_every_output_that_reads_it_and_relu_keeps_it(forced, w_shape, pads):
    x, w, b, _ = _case((1, 40, 5, 5), w_shape, pads=pads)
    x[0, 3, 2, 4] = np.nan
    y = run_panels(x, w, b, pads=pads, relu=True)
    want = reference(x, w, b, (1, 1), pads, (1, 1), relu=True)
    assert np.isnan(y[:, :, 2, 4]).all()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y[~np.isnan(y)], want[~np.isnan(want)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks", [1, 2], ids=["serial", "parallel"])
@pytest.mark.parametrize("w_shape,pads", [((50, 70, 1, 1), (0, 0, 0, 0)), ((50, 70, 3, 3), (1, 0, 1, 2))])
def test_numpy_twin_agrees_with_the_kernel(forced, monkeypatch, blocks, w_shape, pads):
    """Both kernels' twins (test_jit_modes leaves this module's to this test)."""
    monkeypatch.setattr(pc, "team_blocks", lambda count, work: min(count, blocks))
    x, w, b, res = _case((2, 70, 6, 5), w_shape, pads=pads)
    compiled = run_panels(x, w, b, pads=pads, relu=True, residual=res)
    called = []
    kernel = pc._panel_blocks if blocks > 1 else pc._panel_blocks_serial
    monkeypatch.setattr(kernel, "twin", lambda *args: called.append(1) or pc._panel_blocks_numpy(*args))
    before = jit.jit_mode()
    try:
        jit.set_jit_mode("numpy")
        twin = run_panels(x, w, b, pads=pads, relu=True, residual=res)
    finally:
        jit.set_jit_mode(before)
    assert called
    np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-4)


def test_row_blocks_cover_maps_of_up_to_14_columns_without_flat_padding():
    # two rows of up to 7, one row of 12-14, else flat blocks of 14 consecutive outputs
    assert pc.row_blocks(7, 7, 9, 5) == (4, 18, 9)
    assert pc.row_blocks(14, 14, 16, 16) == (14, 16, 7)
    assert pc.row_blocks(9, 9, 11, 8) == (8, 14, 7)
    # a last block that would read past what the phase buffers hold stays flat
    assert pc.row_blocks(3, 7, 9, 2) == (2, 14, 7)


def test_weights_edited_in_place_are_packed_again(forced):
    x, w, b, _ = _case((1, 64, 7, 7), (40, 64, 1, 1))
    plan = pc.panel_plan(x.shape, w.shape, (1, 1), (0, 0, 0, 0), (1, 1), (7, 7), np.float32)
    out = np.empty((1, 40, 7, 7), np.float32)
    scratch = Scratch()
    with jit.team():
        plan(x, w, out, scratch, b)
        w[5] *= -2.0
        plan(x, w, out, scratch, b)
    np.testing.assert_allclose(out, reference(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1)), rtol=1e-4, atol=1e-4)


def test_inputs_and_outputs_that_are_views(forced):
    """A placed Concat hands its convs channel slices of one buffer (batch 2: not
    contiguous), and an input may be a channel slice too."""
    x, w, b, _ = _case((2, 60, 4, 4), (40, 48, 1, 1))
    big = np.full((2, 100, 4, 4), -7.0, np.float32)
    run_panels(x[:, 5:53], w, b, out=big[:, 30:70])
    np.testing.assert_allclose(big[:, 30:70], reference(x[:, 5:53], w, b, (1, 1), (0, 0, 0, 0), (1, 1)),
                               rtol=1e-4, atol=1e-4)
    assert (big[:, :30] == -7.0).all() and (big[:, 70:] == -7.0).all()


def test_a_bias_of_the_wrong_length_is_refused(forced):
    x, w, _, _ = _case((1, 8, 3, 3), (40, 8, 1, 1))
    with pytest.raises(ValueError, match="bias of 39 values for 40 output channels"):
        run_panels(x, w, np.zeros(39, np.float32))


def test_conv_nchw_takes_the_panels_where_the_rule_says(monkeypatch):
    from caffe2py.kernels.cpu.runtime import simd
    monkeypatch.setattr(simd, "target_lanes", lambda: 16)
    conv_k._plan.cache_clear()
    try:
        def kind(x_shape, w_shape, strides=(1, 1), pads=(0, 0, 0, 0), dtype=np.float32, group=1):
            plan = conv_k._plan(x_shape, w_shape, strides, pads, (1, 1), group, np.dtype(dtype))
            return plan.compute.__qualname__.split(".")[0]
        same = (1, 1, 1, 1)
        assert kind((1, 512, 7, 7), (128, 512, 1, 1)) == "panel_plan"                 # 1x1 on 7x7
        assert kind((1, 512, 7, 7), (512, 512, 3, 3), pads=same) == "panel_plan"      # was the direct kernel
        assert kind((1, 512, 14, 14), (512, 512, 3, 3), (2, 2), same) == "panel_plan"
        assert kind((1, 128, 14, 14), (32, 128, 3, 3), pads=same) == "panel_plan"     # densenet's, 14x14
        assert kind((1, 256, 14, 14), (256, 256, 3, 3), pads=same) == "panel_plan"     # was Winograd
        assert kind((1, 512, 14, 14), (512, 512, 3, 3), pads=same) == "panel_plan"
        # Winograd keeps its 3x3s above 14x14, the pixel-lane kernel or OpenBLAS the 1x1s
        # on larger maps or with few channels, the direct kernel larger maps and few
        # output channels; float64 its paths
        assert kind((1, 128, 28, 28), (128, 128, 3, 3), pads=same) == "winograd_plan"
        assert kind((1, 512, 14, 14), (128, 512, 1, 1)) == "pointwise_plan"      # pixel lanes (pointwise_conv.py)
        assert kind((1, 256, 7, 7), (128, 256, 1, 1)) == "_pointwise_plan"
        assert kind((1, 128, 28, 28), (32, 128, 3, 3), pads=same) == "direct_plan"
        assert kind((1, 128, 7, 7), (16, 128, 3, 3), pads=same) == "direct_plan"
        assert kind((1, 512, 7, 7), (128, 512, 1, 1), dtype=np.float64) == "_pointwise_plan"
        x, w, b, res = _case((1, 512, 7, 7), (128, 512, 1, 1))
        y = conv_k.conv_nchw(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 1, activation="relu", residual=res)
        np.testing.assert_allclose(y, reference(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), res, True), rtol=1e-4, atol=1e-3)
        # without 16-lane registers none of them
        monkeypatch.setattr(simd, "target_lanes", lambda: 8)
        conv_k._plan.cache_clear()
        assert kind((1, 512, 7, 7), (128, 512, 1, 1)) == "_pointwise_plan"
        assert kind((1, 512, 7, 7), (512, 512, 3, 3), pads=same) == "direct_plan"
    finally:
        conv_k._plan.cache_clear()
