"""Hypothesis properties for the lookup family over random shapes and lengths:
every SparseLengths* variant equals a float64 loop reference; offsets and lengths
forms agree; fused lookups equal float lookups on the dequantised table."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caffe2py import core, workspace

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_op(op_type, inputs, **kwargs):
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, ["out"], **kwargs))
    return workspace.FetchBlob("out")


def ref(rows, indices, lengths, weights=None, positional=False, mean=False):
    out = np.zeros((len(lengths), rows.shape[1]))
    cur = 0
    for m, n in enumerate(lengths):
        for j in range(n):
            w = 1.0 if weights is None else float(weights[j if positional else cur])
            out[m] += w * rows[indices[cur]]
            cur += 1
        if mean and n:
            out[m] /= n
    return out


@st.composite
def lookup_case(draw):
    n_rows = draw(st.integers(1, 40))
    dim = draw(st.integers(1, 20))
    lengths = draw(st.lists(st.integers(0, 12), min_size=0, max_size=12))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    rng = np.random.default_rng(seed)
    lengths = np.array(lengths, np.int32)
    indices = rng.integers(0, n_rows, int(lengths.sum())).astype(index_dtype)
    data = rng.standard_normal((n_rows, dim)).astype(np.float32)
    weights = rng.standard_normal(max(indices.size, int(lengths.max(initial=0)))).astype(np.float32)
    return data, indices, lengths, weights


@SETTINGS
@given(lookup_case(), st.sampled_from(["Sum", "WeightedSum", "Mean", "PositionalWeightedSum"]),
       st.booleans(), st.booleans())
def test_float_lookup_family(case, reduction, half, use_offsets):
    data, indices, lengths, weights = case
    if half:
        data = data.astype(np.float16)
    positional = reduction == "PositionalWeightedSum"
    w = None
    if "Weighted" in reduction:
        w = weights[:int(lengths.max(initial=0))] if positional else weights[:indices.size]
    seg = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64) if use_offsets else lengths
    op = "SparseLengths%s%s" % (reduction, "Idx" if use_offsets else "")
    inputs = [data, w, indices, seg] if w is not None else [data, indices, seg]
    got = run_op(op, inputs)
    want = ref(data.astype(np.float64), indices, lengths, w, positional, reduction == "Mean")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(lookup_case(), st.sampled_from(["Sum", "WeightedSum", "Mean"]), st.sampled_from([8, 4, 2]))
def test_fused_lookup_equals_float_lookup_on_dequantised_table(case, reduction, bits):
    data, indices, lengths, weights = case
    suffix = "Fused%dBitRowwise" % bits
    if bits == 8:
        table = run_op("FloatToFused8BitRowwiseQuantized", [data])
        rows = run_op("Fused8BitRowwiseQuantizedToFloat", [table])
    else:
        table = run_op("FloatToFused%dBitRowwiseQuantized" % bits, [data])
        rows = run_op("Fused%dBitRowwiseQuantizedToFloat" % bits, [table])
    w = weights[:indices.size] if reduction == "WeightedSum" else None
    inputs = [table, w, indices, lengths] if w is not None else [table, indices, lengths]
    got = run_op("SparseLengths%s%s" % (reduction, suffix), inputs)
    want = ref(rows.astype(np.float64), indices, lengths, w, mean=reduction == "Mean")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(lookup_case())
def test_lengths_sum_equals_sparse_lengths_sum_of_identity(case):
    data, _, lengths, _ = case
    total = int(lengths.sum())
    rows = np.resize(data, (total, data.shape[1])).astype(np.float32)
    got = run_op("LengthsSum", [rows, lengths])
    want = ref(rows.astype(np.float64), np.arange(total), lengths)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
