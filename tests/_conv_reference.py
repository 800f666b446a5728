"""Float64 2-D convolution written out in NumPy (group 1, zero padding): the reference
the convolution kernels' tests compare against, with their shared shape and data helpers
and the fixture that runs a kernel's tests at both register widths."""
import numpy as np
import pytest


def reference(x, w, b, strides, pads, dilations, residual=None, relu=False):
    """float64: zero-padded input, one strided window slice per kernel tap."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    for a in range(kh):
        for bb in range(kw):
            window = xp[:, :, a * dh:a * dh + (oh - 1) * sh + 1:sh, bb * dw:bb * dw + (ow - 1) * sw + 1:sw]
            y += np.einsum("nchw,mc->nmhw", window, w[:, :, a, bb])
    if b is not None:
        y += b.astype(np.float64).reshape(1, m, 1, 1)
    if residual is not None:
        y += residual
    return np.maximum(y, 0) if relu else y


def out_shape(x_shape, w_shape, strides, pads, dilations):
    """(N, M, OH, OW) of a 2-D convolution (pads: top, left, bottom, right)."""
    return (x_shape[0], w_shape[0]) + tuple(
        (x_shape[2 + i] + pads[i] + pads[2 + i] - (w_shape[2 + i] - 1) * dilations[i] - 1) // strides[i] + 1
        for i in range(2))


def data(x_shape, w_shape, seed):
    """(x, w, bias) float32 standard normals."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[0]).astype(np.float32))


def case(x_shape, w_shape, strides, pads, dilations, seed=0):
    """(x, w, bias, residual) float32 standard normals for one geometry."""
    rng = np.random.default_rng(seed + sum(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    res = rng.standard_normal(out_shape(x_shape, w_shape, strides, pads, dilations)).astype(np.float32)
    return x, w, b, res


def both_register_widths():
    """An autouse fixture (assign it to a module-level name in a test file): every test
    of the file at 8 and at 16 lanes, whatever this CPU has (16 lanes run as two AVX2
    vectors where there is no AVX-512), with conv_nchw's small maps kept off the channel
    panels and its 1x1s off the pixel-lane kernel (tests/test_panel_conv.py and
    tests/test_pointwise_conv.py have their own)."""
    from caffe2py.kernels.cpu.cnn import conv as conv_k, direct_conv, panel_conv, pointwise_conv

    @pytest.fixture(autouse=True, params=[8, 16], ids=["8-lanes", "16-lanes"])
    def register_lanes(request, monkeypatch):
        monkeypatch.setattr(direct_conv, "REGISTER_LANES", request.param)
        monkeypatch.setattr(panel_conv, "takes", lambda *args: False)
        monkeypatch.setattr(pointwise_conv, "takes", lambda *args: False)
        conv_k._plan.cache_clear()          # conv_nchw's plans hold the width they were made at
        yield request.param
        conv_k._plan.cache_clear()
    return register_lanes
