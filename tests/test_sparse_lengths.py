"""SparseLengths* lookups (lengths- and offsets-based, float/fp16/fused 8/4/2-bit) against
float64 references (tests/_lookups.py), plus every Caffe2 error case."""
import numpy as np
import pytest

from caffe2py import core
from caffe2py.errors import Caffe2Error

from _lookups import ref_dequant8, ref_dequant_nbit, ref_lookup, run_op

RNG = np.random.default_rng(2024)


# ----------------------------------------------------------------- references (float64 loops)

def ref_quantize8(x):
    """Independent 8-bit rowwise reference: bytes of values, float32 scale, float32 bias."""
    x = x.astype(np.float32)
    out = []
    for row in x:
        lo, hi = np.float32(row.min()), np.float32(row.max())
        span = np.float32(hi - lo)
        inv = np.float32(255.0) / np.float32(span + np.float32(1e-8))
        q = np.rint((row - lo) * inv).astype(np.uint8)
        out.append(np.concatenate([q, np.array([span / np.float32(255), lo], "<f4").view(np.uint8)]))
    return np.array(out)


def ref_quantize_nbit(x, bits):
    """Independent 4/2-bit reference: fp16 bias = min, fp16 scale, clip(rint), pack low bits first."""
    k, qmax = 8 // bits, (1 << bits) - 1
    out = []
    for row in x.astype(np.float32):
        bias = np.float16(row.min())
        span = np.float32(row.max()) - np.float32(bias)
        scale = np.float16(1.0) if span == 0 else np.float16(span / np.float32(qmax))
        if scale == 0 or np.isinf(np.float32(1) / np.float32(scale)):
            scale = np.float16(1.0)
        inv = np.float32(1) / np.float32(scale)
        q = [int(min(max(np.rint((v - np.float32(bias)) * inv), 0), qmax)) for v in row]
        q += [0] * (-len(q) % k)
        packed = [sum(q[b * k + j] << (j * bits) for j in range(k)) for b in range(len(q) // k)]
        out.append(np.concatenate([np.array(packed, np.uint8),
                                   np.array([scale, bias], "<f2").view(np.uint8)]))
    return np.array(out)


def make_case(n_rows=30, dim=8, n_bags=6, index_dtype=np.int64, empty_bag=True, rng=RNG):
    lengths = rng.integers(0, 6, n_bags).astype(np.int32)
    if empty_bag:
        lengths[1] = 0
    indices = rng.integers(0, n_rows, int(lengths.sum())).astype(index_dtype)
    data = rng.standard_normal((n_rows, dim)).astype(np.float32)
    return data, indices, lengths


def to_offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


# ----------------------------------------------------------------- float / fp16 tables

REDUCTIONS = [("SparseLengthsSum", {}), ("SparseLengthsWeightedSum", {}),
              ("SparseLengthsMean", {"mean": True}),
              ("SparseLengthsPositionalWeightedSum", {"positional": True})]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("table_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op,opts", REDUCTIONS)
def test_float_lookups_match_reference(op, opts, table_dtype, index_dtype):
    data, indices, lengths = make_case(index_dtype=index_dtype)
    data = data.astype(table_dtype)
    weighted = "Weighted" in op
    weights = None
    if weighted:
        n = int(lengths.max()) if opts.get("positional") else indices.size
        weights = RNG.standard_normal(n).astype(np.float32)
    inputs = [data, weights, indices, lengths] if weighted else [data, indices, lengths]
    got = run_op(op, inputs)
    want = ref_lookup(data.astype(np.float64), indices, lengths, weights, **opts)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not got[1].any()   # the empty bag


def test_multi_dim_table_keeps_trailing_dims():
    data = RNG.standard_normal((10, 3, 4)).astype(np.float32)
    indices = np.array([1, 2, 9, 0], np.int64)
    lengths = np.array([3, 1], np.int32)
    got = run_op("SparseLengthsSum", [data, indices, lengths])
    want = ref_lookup(data.reshape(10, 12).astype(np.float64), indices, lengths).reshape(2, 3, 4)
    assert got.shape == (2, 3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_empty_indices_give_zeros_and_still_check_lengths():
    data = RNG.standard_normal((5, 4)).astype(np.float32)
    got = run_op("SparseLengthsSum", [data, np.zeros(0, np.int64), np.array([0, 0, 0], np.int32)])
    np.testing.assert_array_equal(got, np.zeros((3, 4), np.float32))
    got = run_op("SparseLengthsMean", [data, np.zeros(0, np.int32), np.zeros(0, np.int32)])
    assert got.shape == (0, 4)
    # Caffe2 zero-filled here without looking at LENGTHS; caffe2py checks them as it
    # does when INDICES is not empty (issue 22)
    for lengths, why in (([0, 2, 0], "sum of lengths"), ([-5], "non-negative"), ([5, 0], "sum of lengths")):
        with pytest.raises(Caffe2Error, match=why):
            run_op("SparseLengthsSum", [data, np.zeros(0, np.int64), np.array(lengths, np.int32)])


def test_skewed_lengths_and_long_bags():
    """Bags 10x longer than others go through the sorted, padded path."""
    rng = np.random.default_rng(7)
    lengths = np.array([3, 40, 0, 5, 2, 39, 1, 4] * 8, np.int32)
    data = rng.standard_normal((200, 16)).astype(np.float32)
    indices = rng.integers(0, 200, int(lengths.sum())).astype(np.int64)
    weights = rng.standard_normal(indices.size).astype(np.float32)
    got = run_op("SparseLengthsWeightedSum", [data, weights, indices, lengths])
    np.testing.assert_allclose(got, ref_lookup(data.astype(np.float64), indices, lengths, weights),
                               rtol=1e-5, atol=1e-5)


def test_large_lookup_uses_threads_and_matches(monkeypatch):
    from caffe2py.kernels.cpu.recsys import sparse_lengths as K
    monkeypatch.setattr(K, "_PARALLEL_MIN_VALUES", 1 << 16)   # this size is below the default
    monkeypatch.setattr(K, "_CHUNK_BYTES", 1 << 16)           # several chunks per thread
    monkeypatch.setenv("CAFFE2PY_NUM_THREADS", "2")
    rng = np.random.default_rng(3)
    data = rng.standard_normal((5000, 32)).astype(np.float32)
    lengths = rng.integers(0, 60, 300).astype(np.int32)
    indices = rng.integers(0, 5000, int(lengths.sum())).astype(np.int32)
    got = run_op("SparseLengthsMean", [data, indices, lengths])
    np.testing.assert_allclose(got, ref_lookup(data.astype(np.float64), indices, lengths, mean=True),
                               rtol=1e-5, atol=1e-5)


def test_positional_equals_range_fill_gather_weighted_sum():
    data, indices, lengths = make_case()
    weights = RNG.standard_normal(int(lengths.max())).astype(np.float32)
    got = run_op("SparseLengthsPositionalWeightedSum", [data, weights, indices, lengths])
    positions = run_op("LengthsRangeFill", [lengths])
    per_index = run_op("Gather", [weights, positions])
    want = run_op("SparseLengthsWeightedSum", [data, per_index, indices, lengths])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------- fused tables

FUSED = [(8, "Fused8BitRowwise", ref_quantize8, ref_dequant8),
         (4, "Fused4BitRowwise", lambda x: ref_quantize_nbit(x, 4), lambda q: ref_dequant_nbit(q, 4)),
         (2, "Fused2BitRowwise", lambda x: ref_quantize_nbit(x, 2), lambda q: ref_dequant_nbit(q, 2))]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bits,suffix,quant,dequant", FUSED)
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean"])
def test_fused_lookups_match_reference(reduction, bits, suffix, quant, dequant, index_dtype):
    data, indices, lengths = make_case(dim=12, index_dtype=index_dtype)
    table = quant(data)
    rows = dequant(table)
    weights = RNG.standard_normal(indices.size).astype(np.float32) if reduction == "WeightedSum" else None
    inputs = [table, weights, indices, lengths] if weights is not None else [table, indices, lengths]
    got = run_op("SparseLengths%s%s" % (reduction, suffix), inputs)
    want = ref_lookup(rows, indices, lengths, weights, mean=reduction == "Mean")
    assert got.shape == (len(lengths), 12) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bits,suffix,quant,dequant", FUSED)
def test_fused_empty_indices(bits, suffix, quant, dequant):
    table = quant(RNG.standard_normal((4, 8)).astype(np.float32))
    got = run_op("SparseLengthsSum" + suffix, [table, np.zeros(0, np.int64), np.zeros(3, np.int32)])
    np.testing.assert_array_equal(got, np.zeros((3, 8), np.float32))


# ----------------------------------------------------------------- offsets (Idx) variants

@pytest.mark.parametrize("op,opts", REDUCTIONS)
def test_offsets_variants_match_lengths_reference(op, opts):
    data, indices, lengths = make_case()
    weighted = "Weighted" in op
    weights = None
    if weighted:
        n = int(lengths.max()) if opts.get("positional") else indices.size
        weights = RNG.standard_normal(n).astype(np.float32)
    offsets = to_offsets(lengths) + 5     # relative to offsets[0]
    inputs = [data, weights, indices, offsets] if weighted else [data, indices, offsets]
    got = run_op(op + "Idx", inputs)
    want = ref_lookup(data.astype(np.float64), indices, lengths, weights, **opts)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_offsets_torch_style_without_last_offset():
    data, indices, lengths = make_case(index_dtype=np.int32)
    offsets = to_offsets(lengths)[:-1].astype(np.int64)
    got = run_op("SparseLengthsSumIdx", [data, indices, offsets], include_last_offset=0)
    np.testing.assert_allclose(got, ref_lookup(data.astype(np.float64), indices, lengths),
                               rtol=1e-5, atol=1e-5)


def test_fused8_offsets_variant():
    data, indices, lengths = make_case(dim=16)
    table = ref_quantize8(data)
    got = run_op("SparseLengthsMeanFused8BitRowwiseIdx", [table, indices, to_offsets(lengths)])
    np.testing.assert_allclose(got, ref_lookup(ref_dequant8(table), indices, lengths, mean=True),
                               rtol=1e-5, atol=1e-4)


def test_offsets_errors():
    data, indices, lengths = make_case()
    bad = to_offsets(lengths)
    bad[-1] += 1
    with pytest.raises(Caffe2Error, match="the sum of lengths values should be the size of the indices"):
        run_op("SparseLengthsSumIdx", [data, indices, bad])
    dec = to_offsets(lengths)
    dec[2], dec[3] = dec[3] + 1, dec[2]
    with pytest.raises(Caffe2Error, match="non-decreasing"):
        run_op("SparseLengthsSumIdx", [data, indices, dec])


# ----------------------------------------------------------------- errors

def test_index_out_of_bounds_message_names_op_and_blob():
    data = np.zeros((1000, 4), np.float32)
    indices = np.array([3, 17, 1000, 5], np.int64)
    lengths = np.array([4], np.int32)
    with pytest.raises(Caffe2Error) as exc:
        run_op("SparseLengthsSum", [data, indices, lengths])
    msg = str(exc.value)
    assert "Index 2 is out of bounds: 1000, range 0 to 1000" in msg
    assert "SparseLengthsSum" in msg and "'in1'" in msg


@pytest.mark.parametrize("op,n_in", [("SparseLengthsSumFused8BitRowwise", 3),
                                     ("SparseLengthsWeightedSumFused4BitRowwise", 4),
                                     ("SparseLengthsMean", 3)])
def test_negative_index_is_out_of_bounds(op, n_in):
    data = np.zeros((10, 12), np.uint8) if "Fused" in op else np.zeros((10, 4), np.float32)
    indices = np.array([0, -1], np.int32)
    lengths = np.array([2], np.int32)
    inputs = [data, np.ones(2, np.float32), indices, lengths] if n_in == 4 else [data, indices, lengths]
    with pytest.raises(Caffe2Error, match=r"Index 1 is out of bounds: -1, range 0 to 10"):
        run_op(op, inputs)


@pytest.mark.parametrize("op", ["SparseLengthsSum", "SparseLengthsSumFused8BitRowwise",
                                "SparseLengthsMeanFused2BitRowwise"])
def test_lengths_sum_mismatch(op):
    data = np.zeros((10, 16), np.uint8) if "Fused" in op else np.zeros((10, 4), np.float32)
    with pytest.raises(Caffe2Error, match="Your input seems to be incorrect: the sum of lengths values "
                                          "should be the size of the indices tensor, but it appears not."):
        run_op(op, [data, np.array([1, 2, 3], np.int64), np.array([1, 1], np.int32)])


def test_weight_length_mismatch_messages():
    data = np.zeros((10, 4), np.float32)
    idx, lens = np.array([1, 2, 3], np.int64), np.array([3], np.int32)
    with pytest.raises(Caffe2Error, match="Weight should have the same length as indices."):
        run_op("SparseLengthsWeightedSum", [data, np.ones(2, np.float32), idx, lens])
    fused = np.zeros((10, 12), np.uint8)
    with pytest.raises(Caffe2Error, match="WEIGHTS should have the same length as INDICES."):
        run_op("SparseLengthsWeightedSumFused8BitRowwise", [fused, np.ones(4, np.float32), idx, lens])
    with pytest.raises(Caffe2Error, match="WEIGHTS must be a vector"):
        run_op("SparseLengthsWeightedSumFused8BitRowwise", [fused, np.ones((3, 1), np.float32), idx, lens])


def test_vector_checks():
    data = np.zeros((10, 4), np.float32)
    with pytest.raises(Caffe2Error, match="INDICES must be a vector"):
        run_op("SparseLengthsSum", [data, np.zeros((2, 2), np.int64), np.array([4], np.int32)])
    with pytest.raises(Caffe2Error, match="LENGTHS must be a vector"):
        run_op("SparseLengthsSum", [data, np.zeros(4, np.int64), np.array([[4]], np.int32)])
    with pytest.raises(Caffe2Error, match="INDICES must be int32 or int64"):
        run_op("SparseLengthsSum", [data, np.zeros(4, np.float32), np.array([4], np.int32)])


@pytest.mark.parametrize("op,cols,extra", [("SparseLengthsSumFused8BitRowwise", 8, 8),
                                           ("SparseLengthsSumFused4BitRowwise", 4, 4),
                                           ("SparseLengthsMeanFused2BitRowwise", 3, 4)])
def test_fused_data_too_narrow(op, cols, extra):
    data = np.zeros((5, cols), np.uint8)
    with pytest.raises(Caffe2Error, match="DATA must have more than %d columns" % extra):
        run_op(op, [data, np.array([1], np.int64), np.array([1], np.int32)])


def test_float_table_of_wrong_dtype_is_rejected():
    with pytest.raises(Caffe2Error, match="DATA must be float32 or float16"):
        run_op("SparseLengthsSum", [np.zeros((3, 2), np.int32), np.array([1], np.int64),
                                    np.array([1], np.int32)])


def test_schema_inference_and_cost():
    from caffe2py.registry import OpContext, TensorType, schema_for
    from caffe2py.proto import caffe2_pb2
    op = core.CreateOperator("SparseLengthsSumFused4BitRowwise", ["d", "i", "l"], ["o"])
    schema = schema_for(op.type)
    ctx = OpContext(op, schema)
    ins = [TensorType((100, 8 + 4), caffe2_pb2.TensorProto.UINT8),
           TensorType((50,), caffe2_pb2.TensorProto.INT64), TensorType((7,), caffe2_pb2.TensorProto.INT32)]
    assert schema.inference(ctx, ins)[0].dims == (7, 16)
    assert schema.cost(ctx, ins).flops == 2 * 50 * 16
    op = core.CreateOperator("SparseLengthsSumIdx", ["d", "i", "o"], ["y"])
    ins = [TensorType((100, 3, 2)), TensorType((50,), caffe2_pb2.TensorProto.INT64),
           TensorType((8,), caffe2_pb2.TensorProto.INT64)]
    assert schema_for(op.type).inference(OpContext(op, schema_for(op.type)), ins)[0].dims == (7, 3, 2)
