"""The phase-split depthwise kernel (kernels/cpu/cnn/depthwise.py, _depthwise_phased:
strided float32 depthwise convs, vectors of 8 outputs stored straight into the rows;
stride 1 too when PHASED_MAX_STRIDE1_WIDTH admits it): against a float64 depthwise
convolution written out here."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import depthwise
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import out_shape, data


def reference(x, w, b, strides, pads, dilations, relu=False, channel_map=None):
    """float64: output channel o convolves input plane map[o // multiplier] with w[o]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    if channel_map is not None:
        x = x[:, channel_map]
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    planes = xp[:, np.arange(m) // (m // c)]
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    for a in range(kh):
        for bb in range(kw):
            window = planes[:, :, a * dh:a * dh + (oh - 1) * sh + 1:sh, bb * dw:bb * dw + (ow - 1) * sw + 1:sw]
            y += window * w[:, 0, a, bb].reshape(1, m, 1, 1)
    if b is not None:
        y += b.astype(np.float64).reshape(1, m, 1, 1)
    return np.maximum(y, 0) if relu else y


@pytest.fixture
def every_geometry(monkeypatch):
    """The phased kernel for stride-1 rows of any length too (the plan keeps it to short
    ones), and for the 3x3s that _depthwise3x3_rows takes first."""
    monkeypatch.setattr(depthwise, "PHASED_MAX_STRIDE1_WIDTH", 1 << 20)
    monkeypatch.setattr(depthwise, "ROWS_3X3", False)


def run_phased(x, w, b, strides, pads, dilations=(1, 1), relu=False, channel_map=None):
    shape = out_shape(x.shape, w.shape, strides, pads, dilations)
    args = (x.shape, w.shape, strides, pads, dilations, shape[2:], "<f4")
    assert depthwise._phased_layout(x.shape, *w.shape[2:], strides, pads, dilations, shape[2:], "<f4") is not None
    plan = depthwise.depthwise_plan(*args)
    out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, None, channel_map)
    return out


# (x shape, w shape, strides, pads, dilations): output widths 8 (one vector), 9, 15,
# 16, 17, 28 (the last vector moved back); vectors per map not a multiple of 4; input
# widths odd and even, with fewer and more than 16 columns (the stride-2 split scalar
# and as vectors); strides 1 to 4, pads at both ends and one, dilations, multiplier 2
GEOMETRIES = [
    ((1, 4, 16, 16), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),          # ow 8, input rows of 16
    ((2, 5, 18, 17), (5, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),          # ow 9, odd width
    ((1, 3, 56, 56), (3, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),          # ShuffleNet: ow 28
    ((1, 6, 30, 33), (6, 1, 3, 3), (2, 2), (0, 1, 2, 0), (1, 1)),          # ow 16, left pad 1
    ((1, 3, 20, 35), (3, 1, 3, 3), (2, 2), (1, 2, 0, 1), (1, 1)),          # ow 18, left pad 2
    ((1, 2, 11, 11), (2, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # stride 1, ow 11
    ((1, 3, 14, 14), (3, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # ShuffleNet stride 1: ow 14
    ((1, 2, 9, 41), (2, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),           # 5x5, long rows
    ((1, 4, 25, 50), (8, 1, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),          # stride 3, multiplier 2
    ((1, 2, 40, 67), (2, 1, 5, 3), (4, 4), (2, 1, 2, 3), (1, 1)),          # stride 4
    ((1, 3, 21, 40), (3, 1, 3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),          # dilated, stride 2
    ((1, 3, 19, 23), (3, 1, 3, 3), (1, 2), (1, 0, 1, 0), (2, 1)),          # mixed strides and dilations
]


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dilations", GEOMETRIES)
def test_phased_kernel_matches_float64_reference(every_geometry, x_shape, w_shape, strides, pads, dilations):
    x, w, b = data(x_shape, w_shape, sum(x_shape) + sum(w_shape))
    for bias, relu in ((b, False), (None, False), (b, True)):
        np.testing.assert_allclose(run_phased(x, w, bias, strides, pads, dilations, relu),
                                   reference(x, w, bias, strides, pads, dilations, relu), rtol=1e-5, atol=1e-5)


def test_channel_map_and_nan(every_geometry):
    x, w, b = data((1, 6, 20, 20), (6, 1, 3, 3), 1)
    x[0, 2, 5, 5] = np.nan
    cmap = np.array([3, 0, 4, 1, 5, 2])
    got = run_phased(x, w, b, (2, 2), (1, 1, 1, 1), relu=True, channel_map=cmap)
    want = reference(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), relu=True, channel_map=cmap)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 4      # channel 5 reads plane 2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_team_splits_give_identical_bits(monkeypatch):
    x, w, b = data((2, 20, 30, 30), (20, 1, 3, 3), 2)
    results = []
    for blocks in (1, 2, 3):
        monkeypatch.setattr(depthwise, "team_blocks", lambda count, work, blocks=blocks: min(count, blocks))
        results.append(run_phased(x, w, b, (2, 2), (1, 1, 1, 1), relu=True))
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], reference(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), relu=True),
                               rtol=1e-5, atol=1e-5)


def test_numpy_twin_agrees_with_the_kernel(every_geometry):
    x, w, b = data((1, 4, 23, 37), (8, 1, 3, 3), 3)
    cmap = np.array([1, 3, 0, 2])
    for strides, pads in (((2, 2), (1, 1, 1, 1)), ((1, 1), (1, 0, 2, 1)), ((3, 2), (0, 2, 1, 0))):
        compiled = run_phased(x, w, b, strides, pads, relu=True, channel_map=cmap)
        before = jit.jit_mode()
        try:
            jit.set_jit_mode("numpy")
            twin = run_phased(x, w, b, strides, pads, relu=True, channel_map=cmap)
        finally:
            jit.set_jit_mode(before)
        np.testing.assert_allclose(twin, compiled, rtol=1e-5, atol=1e-5)


def test_which_depthwise_convs_take_the_phased_kernel():
    def phased(x_shape, strides, dtype="<f4", w_hw=(3, 3)):
        c = x_shape[1]
        pads = (1, 1, 1, 1)
        shape = out_shape(x_shape, (c, 1) + w_hw, strides, pads, (1, 1))
        return depthwise._phased_layout(x_shape, *w_hw, strides, pads, (1, 1), shape[2:], dtype) is not None
    # ShuffleNet's stride-2 layers at 56 and 28
    assert phased((1, 112, 56, 56), (2, 2)) and phased((1, 136, 28, 28), (2, 2))
    # rows under 8 outputs, stride 1, float64: _depthwise
    assert not phased((1, 272, 14, 14), (2, 2)) and not phased((1, 544, 7, 7), (1, 1))
    assert not phased((1, 136, 28, 28), (1, 1)) and not phased((1, 272, 14, 14), (1, 1))
    assert not phased((1, 112, 56, 56), (2, 2), "<f8")


def test_conv_nchw_with_a_residual_through_the_phased_kernel():
    x, w, b = data((2, 8, 32, 32), (8, 1, 3, 3), 4)
    res = np.random.default_rng(5).standard_normal((2, 8, 16, 16)).astype(np.float32)
    got = conv_k.conv_nchw(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), 8, activation="relu", residual=res)
    want = np.maximum(reference(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1)) + res, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
