"""The stem convolution kernel (kernels/cpu/cnn/stem_conv.py: few input channels, output
rows in blocks of 24 (48 with 16 lanes) with a moved-back last block or a single-vector tail): against the
float64 convolution written out in tests/_conv_reference.py, directly and through
conv_nchw's dispatch."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import stem_conv
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import both_register_widths, data, out_shape, reference


register_lanes = both_register_widths()


def run_stem(x, w, b, strides, pads, dilations=(1, 1), relu=False, residual=None):
    shape = out_shape(x.shape, w.shape, strides, pads, dilations)
    plan = stem_conv.stem_plan(x.shape, w.shape, strides, pads, dilations, shape[2:], "<f4")
    assert plan is not None
    out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, residual)
    return out


# (x shape, w shape, strides, pads, dilations): output widths 24 (one block), 25..32
# (a single-vector tail), 33..47 (a moved-back block), 48, 54 (AlexNet's 48 + 6);
# strides 1, 2, 4 (16 phases), odd and even left pads, odd input widths, dilations,
# channel counts off the 4-channel blocks
GEOMETRIES = [
    ((1, 3, 5, 26), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),          # ow 24: exactly one block
    ((2, 3, 7, 25), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # ow 25: block + 1-lane tail
    ((1, 1, 6, 34), (3, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),          # ow 32: block + full vector
    ((1, 3, 9, 67), (6, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),          # ow 34: moved-back block, odd width
    ((1, 3, 11, 97), (24, 3, 3, 3), (2, 2), (1, 0, 1, 1), (1, 1)),        # ow 48, pad left 0
    ((1, 3, 35, 227), (7, 3, 11, 11), (4, 4), (0, 0, 0, 0), (1, 1)),      # AlexNet-like: ow 55
    ((1, 3, 30, 221), (9, 3, 11, 11), (4, 4), (2, 3, 1, 2), (1, 1)),      # stride 4, pads: ow 54
    ((1, 2, 19, 71), (5, 2, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),         # 7x7/s2 stems
    ((1, 4, 12, 60), (2, 4, 3, 5), (1, 2), (2, 1, 0, 3), (2, 1)),         # mixed stride, dilation
    ((1, 3, 10, 59), (4, 3, 3, 3), (3, 1), (0, 2, 1, 2), (1, 2)),         # stride 3 rows, dilated columns
    ((1, 3, 8, 72), (5, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),          # ow 70: 16 lanes, moved-back block
    ((1, 3, 6, 114), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),         # ow 112: 16 lanes, a full-vector tail
]


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", GEOMETRIES)
def test_stem_kernel_matches_float64_reference(x_shape, w_shape, strides, pads, dilations):
    x, w, b = data(x_shape, w_shape, sum(x_shape) + sum(w_shape))
    scale = np.sqrt(np.prod(w_shape[1:]))
    for bias in (b, None):
        np.testing.assert_allclose(run_stem(x, w, bias, strides, pads, dilations),
                                   reference(x, w, bias, strides, pads, dilations), rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", [GEOMETRIES[1], GEOMETRIES[3], GEOMETRIES[6]])
def test_relu_and_residual_on_the_way_out(x_shape, w_shape, strides, pads, dilations):
    x, w, b = data(x_shape, w_shape, 3)
    res = np.random.default_rng(4).standard_normal(out_shape(x_shape, w_shape, strides, pads, dilations))
    res = res.astype(np.float32)
    for bias in (b, None):
        for relu, residual in ((True, None), (False, res), (True, res)):
            np.testing.assert_allclose(run_stem(x, w, bias, strides, pads, dilations, relu, residual),
                                       reference(x, w, bias, strides, pads, dilations, residual, relu),
                                       rtol=1e-4, atol=1e-4)


def test_team_splits_give_identical_bits(monkeypatch):
    """Output rows (and the phase copy's input rows) over 1, 2 and 3 blocks."""
    x, w, b = data((2, 3, 29, 61), (10, 3, 5, 5), 8)
    res = np.random.default_rng(9).standard_normal(out_shape(x.shape, w.shape, (2, 2), (2, 2, 2, 2), (1, 1)))
    results = []
    for blocks in (1, 2, 3):
        monkeypatch.setattr(stem_conv, "team_blocks", lambda count, work, blocks=blocks: min(count, blocks))
        results.append(run_stem(x, w, b, (2, 2), (2, 2, 2, 2), relu=True, residual=res.astype(np.float32)))
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], reference(x, w, b, (2, 2), (2, 2, 2, 2), (1, 1), res, True),
                               rtol=1e-4, atol=1e-4)


def test_nan_and_inf_reach_exactly_the_outputs_that_read_them():
    x, w, _ = data((1, 3, 12, 40), (4, 3, 3, 3), 5)
    w = np.abs(w) + 0.1                 # inf stays +inf
    x[0, 0, 5, 7] = np.nan
    x[0, 2, 9, 30] = np.inf
    for relu in (False, True):
        got = run_stem(x, w, None, (1, 1), (1, 1, 1, 1), relu=relu)
        want = reference(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), relu=relu)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 4 * 9
        assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.isposinf(got).sum() == 4 * 9
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_numpy_twins_agree_with_the_kernels():
    x, w, b = data((2, 3, 21, 107), (6, 3, 3, 3), 6)
    res = np.random.default_rng(7).standard_normal(out_shape(x.shape, w.shape, (2, 2), (1, 0, 1, 1), (1, 1)))
    res = res.astype(np.float32)
    for strides, pads in (((2, 2), (1, 0, 1, 1)), ((1, 1), (0, 1, 2, 0)), ((4, 4), (1, 3, 0, 2))):
        residual = res if strides == (2, 2) else None
        compiled = run_stem(x, w, b, strides, pads, relu=True, residual=residual)
        before = jit.jit_mode()
        try:
            jit.set_jit_mode("numpy")
            twin = run_stem(x, w, b, strides, pads, relu=True, residual=residual)
        finally:
            jit.set_jit_mode(before)
        np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-5)


def test_conv_nchw_takes_the_light_models_stems_here():
    def kind(x_shape, w_shape, strides, pads, group=1, dtype="<f4"):
        return conv_k._plan(x_shape, w_shape, strides, pads, (1, 1), group, dtype).compute.__qualname__
    stems = [((1, 3, 224, 224), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)),       # squeezenet
             ((1, 3, 224, 224), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1)),       # shufflenet
             ((1, 3, 224, 224), (96, 3, 11, 11), (4, 4), (0, 0, 0, 0)),     # alexnet
             ((1, 3, 224, 224), (96, 3, 7, 7), (2, 2), (0, 0, 0, 0)),       # zfnet512
             ((1, 3, 224, 224), (64, 3, 3, 3), (1, 1), (1, 1, 1, 1)),       # vgg19
             ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3))]       # inception, resnet, densenet
    for x_shape, w_shape, strides, pads in stems:
        assert kind(x_shape, w_shape, strides, pads).startswith("stem_plan"), (x_shape, w_shape)
    # more input channels, outputs narrower than a block, float64, groups, negative pads: other paths
    assert not kind((1, 16, 55, 55), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1)).startswith("stem")
    assert not kind((1, 3, 20, 20), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1)).startswith("stem")
    assert not kind((1, 3, 40, 40), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1), dtype="<f8").startswith("stem")
    assert not kind((1, 4, 40, 40), (8, 2, 3, 3), (1, 1), (1, 1, 1, 1), group=2).startswith("stem")
    assert not kind((1, 3, 40, 40), (8, 3, 3, 3), (1, 1), (-1, 1, 1, 1)).startswith("stem")


@pytest.mark.parametrize("activation,with_residual", [(None, False), ("relu", False), ("relu", True)])
def test_conv_nchw_through_the_stem_path(activation, with_residual):
    x, w, b = data((3, 3, 30, 66), (8, 3, 3, 3), 11)
    strides, pads = (2, 2), (1, 0, 0, 1)
    res = np.random.default_rng(12).standard_normal(out_shape(x.shape, w.shape, strides, pads, (1, 1)))
    res = res.astype(np.float32) if with_residual else None
    got = conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), 1, activation=activation, residual=res)
    np.testing.assert_allclose(got, reference(x, w, b, strides, pads, (1, 1), res, activation == "relu"),
                               rtol=1e-4, atol=1e-4)


def test_weights_edited_in_place_are_packed_again():
    x, w, _ = data((1, 3, 9, 40), (5, 3, 3, 3), 2)
    first = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    w *= 2
    second = conv_k.conv_nchw(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(second, 2 * first.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row_tile,pb_tile", [(1, 1), (3, 1), (2, 2), (8, None), (100, None)])
def test_tiles_of_rows_and_blocks_give_identical_bits(monkeypatch, row_tile, pb_tile):
    """Each channel block runs over a tile of rows x pixel blocks before the next: any
    tiling (partial tiles, the moved-back block and the one-vector tail inside a tile,
    team splits through a tile) computes the same values as one row at a time."""
    shape, wshape = (1, 3, 23, 59), (6, 3, 3, 3)       # 57 outputs a row: 48 + a moved-back block
    x, w, b = data(shape, wshape, 12)
    res = np.random.default_rng(13).standard_normal(out_shape(shape, wshape, (1, 1), (0, 0, 0, 0), (1, 1)))
    res = res.astype(np.float32)
    results = []
    for blocks in (1, 3):
        monkeypatch.setattr(stem_conv, "team_blocks", lambda count, work, blocks=blocks: min(count, blocks))
        for tiles in ((1, 1), (row_tile, pb_tile)):
            monkeypatch.setattr(stem_conv, "ROW_TILE", tiles[0])
            monkeypatch.setattr(stem_conv, "PB_TILE", tiles[1])
            results.append(run_stem(x, w, b, (1, 1), (0, 0, 0, 0), relu=True, residual=res))
    assert all(np.array_equal(results[0], r) for r in results[1:])
    np.testing.assert_allclose(results[0], reference(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), res, True),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", [GEOMETRIES[1], GEOMETRIES[4], GEOMETRIES[7]])
def test_four_channel_blocks_where_eight_would_be_used(monkeypatch, x_shape, w_shape, strides, pads, dilations):
    """direct_conv.WIDE off: the 4-channel kernel (the grouped 1x1s' and 8-lane rows')
    for stems of more than 4 outputs."""
    from caffe2py.kernels.cpu.cnn import direct_conv
    monkeypatch.setattr(direct_conv, "WIDE", False)
    x, w, b = data(x_shape, w_shape, 12)
    shape = out_shape(x_shape, w_shape, strides, pads, dilations)
    assert stem_conv.stem_plan(x_shape, w_shape, strides, pads, dilations, shape[2:], "<f4").channels == 4
    np.testing.assert_allclose(run_stem(x, w, b, strides, pads, dilations, relu=True),
                               reference(x, w, b, strides, pads, dilations, relu=True),
                               rtol=1e-4, atol=1e-5 * np.sqrt(np.prod(w_shape[1:])))


def test_eight_channel_blocks_at_16_lanes():
    """Stems of more than 4 outputs take 8-channel blocks where registers are 16 lanes
    wide (the partial last block included: 5, 6, 7, 9, 24 outputs above)."""
    from caffe2py.kernels.cpu.cnn import direct_conv
    x_shape, w_shape, strides, pads, dilations = GEOMETRIES[4]
    shape = out_shape(x_shape, w_shape, strides, pads, dilations)
    plan = stem_conv.stem_plan(x_shape, w_shape, strides, pads, dilations, shape[2:], "<f4")
    assert plan.channels == (8 if direct_conv.register_lanes().n == 16 else 4)
