"""Fused rowwise conversions: quantised bytes against independent references (written
here, per row, in float32 like Caffe2's base kernels), round trips, dtypes, shapes."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(99)


def run_op(op_type, x, **kwargs):
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", x)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, ["x"], ["y"], **kwargs))
    return workspace.FetchBlob("y")


def ref_quantize8(x):
    """Per row: scale = span / 255, bias = min, q = round-half-even((x - min) * 255 / (span + 1e-8))."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    out = []
    for row in rows:
        lo = np.float32(row.min())
        span = np.float32(np.float32(row.max()) - lo)
        inv = np.float32(255.0) / np.float32(span + np.float32(1e-8))
        q = [int(np.rint(np.float32(np.float32(v - lo) * inv))) for v in row]
        tail = np.array([np.float32(span / np.float32(255.0)), lo], dtype="<f4").tobytes()
        out.append(np.frombuffer(bytes(q) + tail, dtype=np.uint8))
    return np.array(out).reshape(x.shape[:-1] + (x.shape[-1] + 8,))


def ref_quantize_nbit(x, bits):
    k, qmax = 8 // bits, (1 << bits) - 1
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    out = []
    for row in rows:
        bias = np.float16(row.min())
        span = np.float32(row.max()) - np.float32(bias)
        scale = np.float16(1.0) if span == 0 else np.float16(span / np.float32(qmax))
        if scale == 0 or np.isinf(np.float32(1) / np.float32(scale)):
            scale = np.float16(1.0)
        inv = np.float32(1) / np.float32(scale)
        q = [int(min(max(np.rint(np.float32(v - np.float32(bias)) * inv), 0), qmax)) for v in row]
        q += [0] * (-len(q) % k)
        packed = bytes(sum(q[b * k + j] << (j * bits) for j in range(k)) for b in range(len(q) // k))
        out.append(np.frombuffer(packed + np.array([scale, bias], "<f2").tobytes(), dtype=np.uint8))
    width = (x.shape[-1] + k - 1) // k + 4
    return np.array(out).reshape(x.shape[:-1] + (width,))


def ref_dequant(q, bits, half_sb):
    rows = q.reshape(-1, q.shape[-1])
    extra = 4 if half_sb else 8
    nb = rows.shape[1] - extra
    sb = rows[:, nb:].copy().view("<f2" if half_sb else "<f4").astype(np.float32)
    k = 8 // bits
    vals = np.array([[(int(b) >> (j * bits)) & ((1 << bits) - 1) for b in row[:nb] for j in range(k)]
                     for row in rows], dtype=np.float32).reshape(rows.shape[0], nb * k)
    return (vals * sb[:, :1] + sb[:, 1:]).reshape(q.shape[:-1] + (nb * k,))


SHAPES = [(13,), (4, 9), (2, 3, 16)]


@pytest.mark.parametrize("shape", SHAPES)
def test_float_to_fused8_bytes_and_back(shape):
    x = (RNG.standard_normal(shape) * 33).astype(np.float32)
    q = run_op("FloatToFused8BitRowwiseQuantized", x)
    assert q.dtype == np.uint8 and q.shape == shape[:-1] + (shape[-1] + 8,)
    np.testing.assert_array_equal(q, ref_quantize8(x))
    back = run_op("Fused8BitRowwiseQuantizedToFloat", q)
    assert back.dtype == np.float32 and back.shape == x.shape
    np.testing.assert_allclose(back, ref_dequant(q, 8, False), rtol=1e-6, atol=1e-6)
    span = (x.max(-1, keepdims=True) - x.min(-1, keepdims=True))
    assert (np.abs(back - x) <= span / 255 / 1.9 + 1e-6).all()


def test_rounding_is_half_to_even():
    # span 255 -> inverse scale exactly 1.0 in float32, so 2.5 and 3.5 are exact ties
    x = np.array([[0.0, 2.5, 3.5, 255.0]], np.float32)
    q = run_op("FloatToFused8BitRowwiseQuantized", x)
    assert list(q[0, :4]) == [0, 2, 4, 255]


def test_constant_rows_quantise_to_zero_with_bias():
    x = np.full((2, 5), 3.25, np.float32)
    q = run_op("FloatToFused8BitRowwiseQuantized", x)
    np.testing.assert_array_equal(q, ref_quantize8(x))
    assert not q[:, :5].any()
    np.testing.assert_array_equal(run_op("Fused8BitRowwiseQuantizedToFloat", q), x)
    for bits in (4, 2):
        qn = run_op("FloatToFused%dBitRowwiseQuantized" % bits, x)
        np.testing.assert_array_equal(qn, ref_quantize_nbit(x, bits))
        back = run_op("Fused%dBitRowwiseQuantizedToFloat" % bits, qn)
        np.testing.assert_array_equal(back[:, :5], x)   # padded to whole bytes


def test_half_float_variants():
    x = (RNG.standard_normal((5, 10)) * 4).astype(np.float16)
    q = run_op("HalfFloatToFused8BitRowwiseQuantized", x)
    np.testing.assert_array_equal(q, ref_quantize8(x.astype(np.float32)))
    back = run_op("Fused8BitRowwiseQuantizedToHalfFloat", q)
    assert back.dtype == np.float16
    np.testing.assert_allclose(back, ref_dequant(q, 8, False).astype(np.float16), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("in_op,in_dtype", [("FloatToFused8BitRowwiseQuantizedHalfScaleBias", np.float32),
                                            ("HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias", np.float16)])
def test_half_scale_bias_variants(in_op, in_dtype):
    x = RNG.standard_normal((6, 11)).astype(in_dtype)
    q = run_op(in_op, x)
    assert q.shape == (6, 15)
    np.testing.assert_array_equal(q, ref_quantize_nbit(x.astype(np.float32), 8))
    back = run_op("Fused8BitRowwiseQuantizedHalfScaleBiasToFloat", q)
    np.testing.assert_allclose(back, ref_dequant(q, 8, True), rtol=1e-6, atol=1e-6)
    half = run_op("Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat", q)
    assert half.dtype == np.float16


@pytest.mark.parametrize("bits", [4, 2])
@pytest.mark.parametrize("shape", [(7, 8), (3, 7), (2, 2, 5), (1, 1)])
def test_nbit_bytes_and_back(bits, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    q = run_op("FloatToFused%dBitRowwiseQuantized" % bits, x)
    k = 8 // bits
    assert q.dtype == np.uint8 and q.shape == shape[:-1] + ((shape[-1] + k - 1) // k + 4,)
    np.testing.assert_array_equal(q, ref_quantize_nbit(x, bits))
    back = run_op("Fused%dBitRowwiseQuantizedToFloat" % bits, q)
    want = ref_dequant(q, bits, True)
    assert back.shape == want.shape            # padded to a whole byte, as Caffe2 does
    np.testing.assert_allclose(back, want, rtol=1e-6, atol=1e-6)
    half = run_op("Fused%dBitRowwiseQuantizedToHalf" % bits, q)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half, want.astype(np.float16), rtol=1e-3)


@pytest.mark.parametrize("bits", [4, 2])
def test_half_to_nbit(bits):
    x = RNG.standard_normal((4, 12)).astype(np.float16)
    q = run_op("HalfToFused%dBitRowwiseQuantized" % bits, x)
    np.testing.assert_array_equal(q, ref_quantize_nbit(x.astype(np.float32), bits))


def test_float_half_casts():
    x = np.array([1.0, 1e-8, 70000.0, -2.5, 0.1], np.float32)
    h = run_op("FloatToHalf", x)
    assert h.dtype == np.float16
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h, x.astype(np.float16))   # 70000 -> inf
    f = run_op("HalfToFloat", h)
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f, h.astype(np.float32))
    assert run_op("FloatToHalf", np.float32(3.0)).shape == ()


def test_errors():
    with pytest.raises(Caffe2Error, match="expected float32 input"):
        run_op("FloatToFused8BitRowwiseQuantized", np.zeros((2, 3), np.float64))
    with pytest.raises(Caffe2Error, match="more than 8 columns"):
        run_op("Fused8BitRowwiseQuantizedToFloat", np.zeros((2, 8), np.uint8))
    with pytest.raises(Caffe2Error, match="more than 4 columns"):
        run_op("Fused4BitRowwiseQuantizedToFloat", np.zeros((2, 4), np.uint8))
    with pytest.raises(Caffe2Error, match="expected float16 input"):
        run_op("HalfToFloat", np.zeros(3, np.float32))


def test_tensor_inference():
    from caffe2py.registry import OpContext, TensorType, schema_for
    from caffe2py.proto import caffe2_pb2
    T = caffe2_pb2.TensorProto
    cases = [("FloatToFused8BitRowwiseQuantized", (5, 16), T.FLOAT, (5, 24), T.UINT8),
             ("Fused8BitRowwiseQuantizedToHalfFloat", (5, 24), T.UINT8, (5, 16), T.FLOAT16),
             ("FloatToFused8BitRowwiseQuantizedHalfScaleBias", (5, 16), T.FLOAT, (5, 20), T.UINT8),
             ("FloatToFused4BitRowwiseQuantized", (5, 15), T.FLOAT, (5, 12), T.UINT8),
             ("Fused2BitRowwiseQuantizedToFloat", (5, 8), T.UINT8, (5, 16), T.FLOAT)]
    for name, dims, dt, out_dims, out_dt in cases:
        op = core.CreateOperator(name, ["x"], ["y"])
        schema = schema_for(name)
        got = schema.inference(OpContext(op, schema), [TensorType(dims, dt)])[0]
        assert (got.dims, got.dtype) == (out_dims, out_dt), name
