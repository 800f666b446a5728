"""The compiled conversions (kernels/cpu/recsys/fused_rowwise.py) over what the small
reference tests in test_fused_rowwise.py do not reach: every row width from 1 to 40
(8-value vector chunks and the scalar tail), tables split over the team, rows with
NaN or inf, and float16 casts of every bit pattern. References: whole-array NumPy
formulas written here (Caffe2's base-kernel arithmetic in float32)."""
import numpy as np
import pytest

from caffe2py.kernels.cpu.recsys import fused_rowwise as K

RNG = np.random.default_rng(1818)


def numpy_quantize8(x):
    lo, hi = x.min(axis=1), x.max(axis=1)
    span = hi - lo
    inv = np.float32(255) / (span + np.float32(1e-8))
    q = np.clip(np.rint((x - lo[:, None]) * inv[:, None]), 0, 255).astype(np.uint8)
    sb = np.stack([span / np.float32(255), lo], axis=1).astype("<f4").view(np.uint8)
    return np.concatenate([q, sb], axis=1)


def numpy_quantize_nbit(x, bits):
    k, top = 8 // bits, np.float32((1 << bits) - 1)
    n, d = x.shape
    bias = x.min(axis=1).astype(np.float16).astype(np.float32)
    span = x.max(axis=1) - bias
    scale = np.where(span == 0, np.float32(1), span / top).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.float32(1) / scale
    bad = (scale == 0) | np.isinf(inv)
    scale, inv = np.where(bad, 1, scale).astype(np.float32), np.where(bad, 1, inv).astype(np.float32)
    q = np.clip(np.rint((x - bias[:, None]) * inv[:, None]), 0, top).astype(np.uint8)
    q = np.concatenate([q, np.zeros((n, -d % k), np.uint8)], axis=1).reshape(n, -1, k)
    packed = np.zeros(q.shape[:2], np.uint8)
    for f in range(k):
        packed |= q[:, :, f] << np.uint8(f * bits)
    sb = np.stack([scale, bias], axis=1).astype("<f2").view(np.uint8)
    return np.concatenate([packed, sb], axis=1)


def numpy_dequantize(q, bits, half_sb):
    extra = 4 if half_sb else 8
    nb = q.shape[1] - extra
    sb = np.ascontiguousarray(q[:, nb:]).view("<f2" if half_sb else "<f4").astype(np.float32)
    k = 8 // bits
    vals = np.stack([(q[:, :nb] >> np.uint8(f * bits)) & np.uint8((1 << bits) - 1) for f in range(k)], axis=2)
    return vals.reshape(q.shape[0], nb * k).astype(np.float32) * sb[:, :1] + sb[:, 1:]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_width_round_trips(dtype):
    for d in range(1, 41):
        x = (RNG.standard_normal((9, d)) * RNG.uniform(0.1, 50)).astype(dtype)
        x32 = x.astype(np.float32)
        q8 = K.float_to_fused8(x)
        np.testing.assert_array_equal(q8, numpy_quantize8(x32), err_msg="8-bit, d=%d" % d)
        np.testing.assert_array_equal(K.fused8_to_float(q8), numpy_dequantize(q8, 8, False))
        for bits in (8, 4, 2):
            q = K.float_to_fused_nbit(x, bits)
            np.testing.assert_array_equal(q, numpy_quantize_nbit(x32, bits), err_msg="%d-bit, d=%d" % (bits, d))
            want = numpy_dequantize(q, bits, True)
            np.testing.assert_array_equal(K.fused_nbit_to_float(q, bits), want)
            np.testing.assert_array_equal(K.fused_nbit_to_float(q, bits, np.float16), want.astype(np.float16))


def test_large_tables_over_the_team():
    """Rows split over the team's blocks: every row as the NumPy formulas give it."""
    x = (RNG.standard_normal((3001, 77)) * 3).astype(np.float32)
    q8 = K.float_to_fused8(x)
    np.testing.assert_array_equal(q8, numpy_quantize8(x))
    np.testing.assert_array_equal(K.fused8_to_float(q8, np.float16), numpy_dequantize(q8, 8, False).astype(np.float16))
    q4 = K.float_to_fused_nbit(x, 4)
    np.testing.assert_array_equal(q4, numpy_quantize_nbit(x, 4))
    np.testing.assert_array_equal(K.fused_nbit_to_float(q4, 4), numpy_dequantize(q4, 4, True))


def test_rows_with_nan_or_inf():
    """NaN makes its row's scale and bias NaN; inf rows do not crash; other rows keep
    their exact bytes."""
    x = RNG.standard_normal((4, 21)).astype(np.float32)
    x[1, 13] = np.nan
    x[2, 3] = np.inf
    q8 = K.float_to_fused8(x)
    assert np.isnan(q8[1, 21:].view("<f4")).all()
    assert np.isinf(q8[2, 21:].view("<f4")[0])
    np.testing.assert_array_equal(q8[[0, 3]], numpy_quantize8(x[[0, 3]]))
    q4 = K.float_to_fused_nbit(x, 4)
    assert np.isnan(q4[1, -4:].view("<f2")).all()
    np.testing.assert_array_equal(q4[[0, 3]], numpy_quantize_nbit(x[[0, 3]], 4))


def test_half_casts_of_every_bit_pattern():
    half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    wide = K.half_to_float(half)
    want = half.astype(np.float32)
    np.testing.assert_array_equal(wide.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(wide[np.isnan(want)]).all()
    # float32 -> float16: random bit patterns (ties, subnormal results, overflow to inf)
    x = RNG.integers(0, 1 << 32, 200_003, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want16 = x.astype(np.float16)
    got16 = K.float_to_half(x)
    nan = np.isnan(want16)
    np.testing.assert_array_equal(got16.view(np.uint16)[~nan], want16.view(np.uint16)[~nan])
    assert np.isnan(got16[nan]).all()
    assert K.float_to_half(np.float32(3.0)).shape == ()


CONVERSIONS = [  # (quantise op, input dtype, dequantise op, output dtype, bytes per row for D values)
    ("FloatToFused8BitRowwiseQuantized", np.float32, "Fused8BitRowwiseQuantizedToFloat", np.float32,
     lambda d: d + 8),
    ("HalfFloatToFused8BitRowwiseQuantized", np.float16, "Fused8BitRowwiseQuantizedToHalfFloat", np.float16,
     lambda d: d + 8),
    ("FloatToFused8BitRowwiseQuantizedHalfScaleBias", np.float32,
     "Fused8BitRowwiseQuantizedHalfScaleBiasToFloat", np.float32, lambda d: d + 4),
    ("HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias", np.float16,
     "Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat", np.float16, lambda d: d + 4),
    ("FloatToFused4BitRowwiseQuantized", np.float32, "Fused4BitRowwiseQuantizedToFloat", np.float32,
     lambda d: -(-d // 2) + 4),
    ("HalfToFused4BitRowwiseQuantized", np.float16, "Fused4BitRowwiseQuantizedToHalf", np.float16,
     lambda d: -(-d // 2) + 4),
    ("FloatToFused2BitRowwiseQuantized", np.float32, "Fused2BitRowwiseQuantizedToFloat", np.float32,
     lambda d: -(-d // 4) + 4),
    ("HalfToFused2BitRowwiseQuantized", np.float16, "Fused2BitRowwiseQuantizedToHalf", np.float16,
     lambda d: -(-d // 4) + 4),
]


@pytest.mark.parametrize("lead", [(0,), (3, 0)])
@pytest.mark.parametrize("quantise, in_dtype, dequantise, out_dtype, width", CONVERSIONS)
def test_zero_size_inputs_convert_both_ways(lead, quantise, in_dtype, dequantise, out_dtype, width):
    from caffe2py import core, workspace
    d = 8                                     # a whole byte of 2-bit values: D comes back unchanged
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.zeros(lead + (d,), in_dtype))
    workspace.RunOperatorOnce(core.CreateOperator(quantise, ["x"], ["q"]))
    q = workspace.FetchBlob("q")
    assert q.shape == lead + (width(d),) and q.dtype == np.uint8
    workspace.RunOperatorOnce(core.CreateOperator(dequantise, ["q"], ["y"]))
    y = workspace.FetchBlob("y")
    assert y.shape == lead + (d,) and y.dtype == out_dtype


@pytest.mark.parametrize("shape", [(2, 0), (0, 0), (3, 0, 0)])
def test_rows_without_values(shape):
    """No values per row (zero-size, rows left): every row is only its scale and bias,
    scale 0 bias 0 for the 8-bit layout, scale 1 bias 0 for the float16 ones."""
    for dtype in (np.float32, np.float16):
        x = np.zeros(shape, dtype)
        q8 = K.float_to_fused8(x)
        assert q8.shape == shape[:-1] + (8,) and not q8.any()
        assert K.fused8_to_float(q8).shape == shape
        for bits in (8, 4, 2):
            q = K.float_to_fused_nbit(x, bits)
            assert q.shape == shape[:-1] + (4,)
            sb = q.reshape(-1, 4).view("<f2")
            assert (sb[:, 0] == 1).all() and (sb[:, 1] == 0).all()
            assert K.fused_nbit_to_float(q, bits).shape == shape
