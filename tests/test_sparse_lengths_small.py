"""Small lookups' one-call path (sparse_lengths._small -> lookup_loops.lookup_one_part):
the index and weight checks and one part of bags in one compiled call on the calling
thread. The sums are compared with float64 references written out in tests/_lookups.py;
the checks must catch every bad index / length / weight before anything is written, with
the same named errors as the checked path; the NumPy twin must agree with the kernel."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.recsys import lookup_loops as loops, sparse_lengths as K

from _lookups import ref_dequant8, ref_dequant_nbit, ref_lookup, run_op
from test_sparse_lengths_compiled import assert_close, fused_table

RNG = np.random.default_rng(27)


def make_table(name):
    """(table, layout, op-name suffix, float64 rows) for a table kind."""
    if name in ("float32", "float16"):
        table = RNG.standard_normal((500, 64 if name == "float32" else 24)).astype(name)
        return table, "float", "", table.astype(np.float64)
    bits, dim = {"fused8": (8, 40), "fused4": (4, 32), "fused2": (2, 16)}[name]
    q = fused_table(500, dim, bits, RNG)
    rows = ref_dequant8(q) if bits == 8 else ref_dequant_nbit(q, bits)
    return q, name, "Fused%dBitRowwise" % bits, rows


TABLES = ("float16", "float32", "fused2", "fused4", "fused8")


@pytest.fixture
def spy(monkeypatch):
    """Records what each lookup_one_part call answered (DONE or the failed check)."""
    answers = []
    real = loops.lookup_one_part

    def recording(*args):
        answers.append(real(*args))
        return answers[-1]
    monkeypatch.setattr(loops, "lookup_one_part", recording)
    return answers


@pytest.mark.parametrize("name", TABLES)
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean", "PositionalWeightedSum"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_small_lookups_through_the_op_match_the_reference(spy, name, reduction, index_dtype):
    table, layout, suffix, rows = make_table(name)
    if reduction == "PositionalWeightedSum" and layout != "float":
        pytest.skip("Caffe2 has no fused positional op")
    lengths = np.array([0, 10, 0, 3, 1, 17, 0, 9, 0], np.int32)     # empty bags first, inside and last
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(index_dtype)
    indices[[0, -1]] = [table.shape[0] - 1, 0]                 # both ends of the table
    positional = reduction == "PositionalWeightedSum"
    weights = RNG.uniform(-2, 2, int(lengths.max()) if positional else indices.size).astype(np.float32)
    inputs = [table, weights, indices, lengths] if "Weighted" in reduction else [table, indices, lengths]
    got = run_op("SparseLengths%s%s" % (reduction, suffix), inputs)
    want = ref_lookup(rows, indices, lengths, weights if "Weighted" in reduction else None,
                      positional, reduction == "Mean")
    assert_close(got, want)
    assert spy == [loops.DONE]                                   # it ran the one-call path


@pytest.mark.parametrize("name", ["float32", "fused8", "fused4"])
def test_offsets_ops_take_the_same_path(spy, name):
    table, layout, suffix, rows = make_table(name)
    lengths = np.array([4, 0, 7, 2], np.int32)
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(np.int64)
    offsets = np.concatenate([[5], 5 + np.cumsum(lengths)]).astype(np.int64)      # need not start at 0
    got = run_op("SparseLengthsMean%sIdx" % suffix, [table, indices, offsets])
    assert_close(got, ref_lookup(rows, indices, lengths, mean=True))
    assert spy == [loops.DONE]


def test_lookups_of_a_replaced_or_rewritten_table_read_the_new_rows(spy):
    """Nothing about the table is kept between calls: a new table, or the same array
    written in place, gives the new sums."""
    table = RNG.standard_normal((50, 16)).astype(np.float32)
    indices, lengths = np.array([3, 7, 8, 49], np.int64), np.array([2, 2], np.int32)
    first = K.segment_reduce(table, indices, lengths)
    table[3] += 1.0
    second = K.segment_reduce(table, indices, lengths)
    assert_close(second, ref_lookup(table.astype(np.float64), indices, lengths))
    np.testing.assert_allclose(second[0] - first[0], 1.0, rtol=1e-5)      # row 3 is in bag 0 only
    np.testing.assert_array_equal(second[1], first[1])
    other = table[::-1].copy()
    assert_close(K.segment_reduce(other, indices, lengths), ref_lookup(other.astype(np.float64), indices, lengths))
    assert spy == [loops.DONE] * 3


# ----------------------------------------------------------------- checks on the small path

CASES = [   # (what is bad, op, inputs builder, message part, bad input's blob)
    ("index past the end", "SparseLengthsSum",
     lambda t: [t, np.array([1, 2, 3, 500], np.int64), np.array([2, 2], np.int32)],
     "Index 3 is out of bounds: 500, range 0 to 500", "in1"),
    ("negative int32 index", "SparseLengthsSumFused8BitRowwise",
     lambda t: [t, np.array([1, -1, 3], np.int32), np.array([3], np.int32)],
     "Index 1 is out of bounds: -1, range 0 to 500", "in1"),
    ("index past the end, offsets form", "SparseLengthsSumIdx",
     lambda t: [t, np.array([1, 2, 500], np.int64), np.array([0, 1, 3], np.int64)],
     "Index 2 is out of bounds: 500, range 0 to 500", "in1"),
    ("negative length", "SparseLengthsSum",
     lambda t: [t, np.array([1, 2], np.int64), np.array([3, -1], np.int32)],
     "LENGTHS must be non-negative, lengths[1] = -1", "in2"),
    ("lengths do not add up", "SparseLengthsMean",
     lambda t: [t, np.array([1, 2, 3], np.int64), np.array([1, 1], np.int32)],
     K.SUM_MESSAGE, "in2"),
    ("positional weights too short", "SparseLengthsPositionalWeightedSum",
     lambda t: [t, np.ones(2, np.float32), np.array([1, 2, 3], np.int64), np.array([3, 0], np.int32)],
     "WEIGHT must have at least as many entries (2) as the longest segment (3)", "in1"),
    ("one weight too few", "SparseLengthsWeightedSum",
     lambda t: [t, np.ones(2, np.float32), np.array([1, 2, 3], np.int64), np.array([3], np.int32)],
     "Weight should have the same length as indices.", "in1"),
]


@pytest.mark.parametrize("what,op,build,message,blob", CASES, ids=[c[0] for c in CASES])
def test_bad_inputs_give_the_named_errors_and_leave_the_output(what, op, build, message, blob):
    table = make_table("fused8" if "Fused8" in op else "float32")[0]
    before = np.full((2, 3), 7.0, np.float32)
    workspace.ResetWorkspace()
    inputs = build(table)
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names + ["out"], inputs + [before]):
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error) as exc:
        workspace.RunOperatorOnce(core.CreateOperator(op, names, ["out"]))
    text = str(exc.value)
    assert message in text and op in text and "'%s'" % blob in text
    np.testing.assert_array_equal(workspace.FetchBlob("out"), before)


@pytest.mark.parametrize("bad_at", [0, 5, 39])
@pytest.mark.parametrize("bad", [500, 1 << 40, -1, -(1 << 62)])
def test_the_compiled_check_refuses_every_bad_index_before_writing(spy, bad_at, bad):
    """The one-call kernel itself answers BAD_INDEX (the error is worded afterwards)."""
    table = make_table("float32")[0]
    indices = RNG.integers(0, 500, 40).astype(np.int64)
    indices[bad_at] = bad
    with pytest.raises(K.LookupInputError, match="Index %d is out of bounds: %d" % (bad_at, bad)):
        K.segment_reduce(table, indices, np.array([20, 20], np.int32))
    assert spy == [loops.BAD_INDEX]


@pytest.mark.parametrize("lengths", [[3, -1, 2], [3, 1], [3, 1, 3]])
def test_the_compiled_check_refuses_bad_lengths_before_writing(spy, lengths):
    table = make_table("float32")[0]
    with pytest.raises(K.LookupInputError) as exc:
        K.segment_reduce(table, np.array([1, 2, 3, 4, 5], np.int64), np.array(lengths, np.int32))
    assert str(exc.value) == ("LENGTHS must be non-negative, lengths[1] = -1" if -1 in lengths else K.SUM_MESSAGE)
    assert spy == [loops.BAD_LENGTHS]


def kernel_args(table, indices, segments, from_lengths, weights, wmode, longest, out):
    width, tiles, tile_bytes = K._tile_plan(table.shape[1], 1, 4)
    return (width, loops.FLOAT32, loops.address_of(table), table.strides[0], table.shape[0], 0, indices, weights,
            wmode, False, out, tiles, tile_bytes, segments, from_lengths, longest, 16, K._NO_PART_ROWS,
            K._NO_PART_BAGS)


@pytest.mark.parametrize("from_lengths", [True, False])
@pytest.mark.parametrize("case", ["ok", "bad index", "short positional", "per-index count", "bad lengths"])
def test_kernel_and_numpy_twin_agree(case, from_lengths):
    table = RNG.standard_normal((40, 16)).astype(np.float32)
    indices = RNG.integers(0, 40, 12).astype(np.int64)
    segments = np.array([5, 0, 7] if from_lengths else [0, 5, 5, 12], np.int64)
    weights, wmode, longest = RNG.random(12).astype(np.float32), loops.PER_INDEX, 0 if from_lengths else 7
    if case == "bad index":
        indices[11] = 40
    elif case == "short positional":
        weights, wmode = weights[:6], loops.POSITIONAL
    elif case == "per-index count":
        weights = weights[:11]
    elif case == "bad lengths":
        if not from_lengths:
            pytest.skip("offsets are checked by the caller")
        segments[1] = -1
    outs, answers = [], []
    for fn in (loops.lookup_one_part, loops.lookup_one_part.twin):
        out = np.full((3, 16), 7.0, np.float32)
        answers.append(fn(*kernel_args(table, indices, segments, from_lengths, weights, wmode, longest, out)))
        outs.append(out)
    want = {"ok": loops.DONE, "bad index": loops.BAD_INDEX, "bad lengths": loops.BAD_LENGTHS}.get(case, loops.BAD_WEIGHTS)
    assert answers[0] == answers[1] == want
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    if case == "ok":
        assert_close(outs[0], ref_lookup(table.astype(np.float64), indices, [5, 0, 7], weights))
    else:
        assert (outs[0] == 7.0).all()
    assert loops.address_of(table) == loops.address_of.twin(table) == table.ctypes.data


@pytest.mark.parametrize("reduce", ["lengths", "offsets"])
def test_kernel_api_refuses_tables_its_loops_would_misread(reduce):
    """A big-endian float32 table has dtype != float32 and was read as float16 rows;
    a float64 table likewise. Native tables give the NumPy sums."""
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([0, 2, 2], np.int64)

    def lookup(data, layout="float"):
        if reduce == "lengths":
            return K.segment_reduce(data, indices, np.array([1, 2], np.int32), layout=layout)
        return K.offsets_reduce(data, indices, np.array([0, 1, 3], np.int64), layout=layout)
    for bad in (table.astype(">f4"), table.astype(np.float64)):
        with pytest.raises(K.LookupInputError, match="DATA must be a float32 or float16 table in native byte order"):
            lookup(bad)
    with pytest.raises(K.LookupInputError, match="fused8 DATA must be 2-D uint8 rows"):
        lookup(table, layout="fused8")
    np.testing.assert_array_equal(lookup(table), np.stack([table[0], table[2] + table[2]]))
    np.testing.assert_array_equal(lookup(table.astype(">f4").astype(np.float32)), lookup(table))
