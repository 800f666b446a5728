"""The float32 3x3 depthwise kernel at stride 1 and 2 (kernels/cpu/cnn/depthwise.py,
_depthwise3x3_rows: 16-lane vectors per output row, masked copies in and masked stores
out): against the float64 depthwise convolution of test_depthwise_phased.py, over row
lengths below, at and past one vector, pads of 0-2 on either side, a multiplier of 2,
a channel map, NaN, ReLU, batches and team splits."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import depthwise
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.runtime.buffers import Scratch

from _conv_reference import data, out_shape
from test_depthwise_phased import reference

GEOMETRIES = [
    # x shape, w shape, stride, pads
    ((1, 5, 14, 14), (5, 1, 3, 3), 1, (1, 1, 1, 1)),      # ShuffleNet's 14x14: one vector, 2 lanes masked
    ((2, 3, 28, 28), (3, 1, 3, 3), 1, (1, 1, 1, 1)),      # two vectors a row, batch 2
    ((1, 4, 7, 7), (4, 1, 3, 3), 1, (1, 1, 1, 1)),        # 7x7
    ((1, 2, 16, 16), (2, 1, 3, 3), 1, (1, 1, 1, 1)),      # exactly one vector
    ((1, 2, 9, 35), (2, 1, 3, 3), 1, (0, 2, 2, 0)),       # pads on one side only: 35 -> 35 columns
    ((1, 3, 5, 19), (6, 1, 3, 3), 1, (0, 0, 0, 0)),       # no pads, multiplier 2
    ((1, 2, 3, 3), (2, 1, 3, 3), 1, (2, 2, 2, 2)),        # pads of 2: rows past the input on both sides
    ((1, 3, 56, 56), (3, 1, 3, 3), 2, (1, 1, 1, 1)),      # ShuffleNet's stride 2: 28 outputs a row
    ((2, 4, 14, 14), (4, 1, 3, 3), 2, (1, 1, 1, 1)),      # 7 outputs a row, batch 2
    ((1, 2, 67, 33), (4, 1, 3, 3), 2, (0, 1, 2, 0)),      # odd sizes, one-sided pads, multiplier 2
    ((1, 2, 5, 5), (2, 1, 3, 3), 2, (0, 0, 0, 0)),        # 2x2 outputs, no pads
]


def run(x, w, b, pads, relu=False, channel_map=None, stride=1):
    region, _ = depthwise.team_work(1 << 16, np.float32)
    region[:] = np.nan          # the threads' grids come from here: earlier contents must not leak in
    shape = out_shape(x.shape, w.shape, (stride, stride), pads, (1, 1))
    plan = depthwise.depthwise_plan(x.shape, w.shape, (stride, stride), pads, (1, 1), shape[2:], "<f4")
    out = np.full(shape, np.nan, np.float32)        # every output must be written
    with jit.team():
        plan(x, w, out, Scratch(), b, relu, None, channel_map)
    return out


@pytest.fixture
def spied(monkeypatch):
    calls = []
    for name in ("_depthwise3x3_rows", "_depthwise3x3_rows_serial"):
        kernel = getattr(depthwise, name)
        monkeypatch.setattr(depthwise, name, lambda *a, f=kernel: calls.append(a[9]) or f(*a))     # blocks
    return calls


@pytest.mark.parametrize("x_shape,w_shape,stride,pads", GEOMETRIES)
def test_rows_kernel_matches_float64(spied, x_shape, w_shape, stride, pads):
    x, w, b = data(x_shape, w_shape, sum(x_shape))
    for bias, relu in ((b, False), (None, True)):
        got = run(x, w, bias, pads, relu, stride=stride)
        want = reference(x, w, bias, (stride, stride), pads, (1, 1), relu)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(spied) == 2 * x_shape[0], "the rows kernel did not run"


@pytest.mark.parametrize("stride", [1, 2])
def test_channel_map_nan_and_team_splits(monkeypatch, spied, stride):
    x, w, b = data((1, 6, 20, 20), (12, 1, 3, 3), 7)
    x[0, 2, 5, 5] = np.nan
    cmap = np.array([3, 0, 5, 1, 2, 4])
    want = reference(x, w, b, (stride, stride), (1, 1, 1, 1), (1, 1), True, cmap)
    outs = []
    for blocks in (1, 2, 3):
        monkeypatch.setattr(depthwise, "team_blocks", lambda count, work, n=blocks: min(count, n))
        outs.append(run(x, w, b, (1, 1, 1, 1), True, cmap, stride))
        np.testing.assert_allclose(outs[-1], want, rtol=1e-5, atol=1e-5)     # NaN where the reference has it
    for other in outs[1:]:
        np.testing.assert_array_equal(other, outs[0])
    assert spied == [1, 2, 3]


@pytest.mark.parametrize("stride", [1, 2])
def test_numpy_twin_agrees(stride):
    x, w, b = data((1, 3, 17, 18), (3, 1, 3, 3), 3)
    got = run(x, w, b, (1, 1, 1, 1), True, stride=stride)
    twin = np.full_like(got, np.nan)
    depthwise._depthwise3x3_rows_numpy(x[0], w.reshape(3, 9), b, twin[0], np.arange(3), stride, 1, 1, True, 1, None,
                                       0)
    np.testing.assert_allclose(twin, got, rtol=1e-5, atol=1e-5)
