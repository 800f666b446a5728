"""ReLU through the shared zero buffer (caffe2py.kernels.cpu.math.elementwise.relu) keeps
np.maximum(x, 0)'s results exactly: NaN kept, -inf to 0, any dtype, strided outputs,
inputs too big for the buffer."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.math import elementwise as ew


def _special(shape, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[3::11] = -np.inf
    flat[5::13] = np.inf
    flat[6::17] = -0.0
    return x


def _reference(x):
    # Written out: x where x > 0, 0 where x <= 0, NaN where x is NaN.
    return np.where(np.isnan(x) | (x > 0), x, np.zeros((), x.dtype))


@pytest.mark.parametrize("shape", [(5,), (64, 111, 111), (3, 70, 50), (1, 2, 4099)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_relu_matches_definition(shape, dtype):
    x = _special(shape, dtype)
    ref = _reference(x)
    out = ew.relu(x)
    assert out.dtype == x.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, ref)
    inplace = x.copy()
    assert ew.relu(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, ref)
    strided = np.empty(shape[::-1], dtype).T           # Fortran-ordered destination
    ew.relu(x, out=strided)
    np.testing.assert_array_equal(strided, ref)


def test_relu_integer_and_bool():
    xi = np.arange(-6000, 6000, dtype=np.int32).reshape(3, -1)
    np.testing.assert_array_equal(ew.relu(xi), np.where(xi > 0, xi, 0))
    xb = np.array([True, False])
    np.testing.assert_array_equal(ew.relu(xb), xb)


def test_relu_larger_than_zero_buffer_goes_in_slices(monkeypatch):
    monkeypatch.setattr(ew, "_RELU_MAX_ZEROS", 10_000)
    monkeypatch.setattr(ew, "_zeros", {})
    x = _special((7, 30, 100), np.float32, seed=1)        # 21,000 elements, slices of 3 x 3,000
    np.testing.assert_array_equal(ew.relu(x), _reference(x))
    assert ew._zeros[np.dtype(np.float32)].size <= 10_000
    y = _special((2, 12_000), np.float32, seed=2)         # one row is bigger than the buffer
    np.testing.assert_array_equal(ew.relu(y), _reference(y))


def test_zero_buffer_is_read_only_and_stays_zero():
    x = _special((50, 100), np.float32)
    ew.relu(x)
    buf = ew._zeros[np.dtype(np.float32)]
    assert not buf.flags.writeable
    assert not buf.any()


def test_row_scalars_restores_the_buffer_and_keeps_results():
    before = np.getbufsize()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 3136)).astype(np.float32)
    col = rng.standard_normal((64, 1)).astype(np.float32)
    expected = x * col + col                     # default buffering
    with ew.row_scalars(3136):
        assert np.getbufsize() < 3136            # rows longer than the buffer
        got = x * col
        got += col
    assert np.getbufsize() == before
    np.testing.assert_array_equal(got, expected)
    with ew.row_scalars(196):                    # short rows: left buffered
        assert np.getbufsize() == before
    with pytest.raises(RuntimeError):
        with ew.row_scalars(4096):
            raise RuntimeError("restored on errors too")
    assert np.getbufsize() == before
