"""Small 2-D convs copy their stride phases and stack their taps with serial copies of
the team kernels (no parallel region for one block; kernels/cpu/cnn/conv.py): the
same values as the parallel kernels and as a direct convolution written here."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import phases
from caffe2py.kernels.cpu.runtime import jit


def _direct_conv(x, w, b, stride, pad, dilation):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dilation:i * dilation + (oh - 1) * stride + 1:stride,
                       j * dilation:j * dilation + (ow - 1) * stride + 1:stride]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j].astype(np.float64))
    return out + b[None, :, None, None]


@pytest.mark.parametrize("stride,pad,dilation,kernel", [(1, 1, 1, 3), (2, 0, 1, 3), (3, 2, 2, 2), (1, 0, 1, 1)])
def test_small_convs_match_a_direct_convolution(stride, pad, dilation, kernel):
    rng = np.random.default_rng(stride * 10 + kernel)
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 4, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    with jit.team():
        y = conv_k.conv_nchw(x, w, b, (stride, stride), (pad,) * 4, (dilation, dilation), 1)
    np.testing.assert_allclose(y, _direct_conv(x, w, b, stride, pad, dilation), rtol=1e-4, atol=1e-4)


def test_serial_phase_copy_equals_the_parallel_one():
    img = np.random.default_rng(0).standard_normal((3, 11, 11)).astype(np.float32)
    layout = (1, 2, 0, 2, 1, 5, 1, 5)       # i0, sh, j0, sw, q0, ni, r0, nj
    outs = []
    for kernel, blocks in ((phases._phase_copy_serial, 1), (phases._phase_copy, 2), (phases._phase_copy, 1)):
        buf = np.zeros((3, 7, 7), np.float32)
        kernel(img, buf, *layout, blocks)
        outs.append(buf)
    expected = np.zeros((3, 7, 7), np.float32)
    expected[:, 1:6, 1:6] = img[:, 1:10:2, 0:9:2]
    for buf in outs:
        np.testing.assert_array_equal(buf, expected)


def test_row_phase_copy_matches_the_scalar_one():
    # column stride 1 (the vector row copy): rows shorter than, equal to and longer than 16
    rng = np.random.default_rng(1)
    for wd in (7, 16, 37):
        img = rng.standard_normal((3, 9, wd)).astype(np.float32)
        layout = (1, 2, 0, 1, 2, 4, 1, wd)      # i0, sh, j0, sw, q0, ni, r0, nj
        rows = (1, 2, 0, 2, 4, 1, wd)            # the same without sw
        expected = np.full((3, 8, wd + 3), -7.0, np.float32)
        expected[:, 2:6, 1:1 + wd] = img[:, 1:9:2, :]
        for kernel, args, blocks in ((phases._phase_copy, layout, 1), (phases._phase_copy_rows, rows, 2),
                                     (phases._phase_copy_rows_serial, rows, 1)):
            buf = np.full((3, 8, wd + 3), -7.0, np.float32)    # nothing outside the rows written
            kernel(img, buf, *args, blocks)
            np.testing.assert_array_equal(buf, expected)
