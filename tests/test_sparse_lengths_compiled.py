"""The compiled lookup kernel's own paths (kernels/cpu/recsys/lookup_loops.py): the
prefetch stream across bag boundaries and column tiles, empty bags, one huge bag and
skewed lengths cut by the team's parts, checks before anything is written, strided
tables read in place, float16 under flush-to-zero. Expectations come from the float64
references in tests/_lookups.py."""
import tracemalloc

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.recsys import sparse_lengths as K

from _lookups import ref_dequant8, ref_dequant_nbit, ref_lookup

RNG = np.random.default_rng(18)


def fused_table(n_rows, dim, bits, rng=RNG):
    """Random fused rows: random value bytes, random scale and bias of both signs."""
    if bits == 8:
        sb = np.stack([rng.uniform(-0.05, 0.05, n_rows), rng.uniform(-2, 2, n_rows)], 1).astype("<f4")
        return np.concatenate([rng.integers(0, 256, (n_rows, dim), dtype=np.uint8), sb.view(np.uint8)], 1)
    nb = -(-dim // (8 // bits))
    sb = np.stack([rng.uniform(-0.5, 0.5, n_rows), rng.uniform(-2, 2, n_rows)], 1).astype("<f2")
    return np.concatenate([rng.integers(0, 256, (n_rows, nb), dtype=np.uint8), sb.view(np.uint8)], 1)


def table_and_rows(kind, n_rows, dim):
    """(table for segment_reduce, layout, float64 dequantised rows)."""
    if kind in ("float32", "float16"):
        table = RNG.standard_normal((n_rows, dim)).astype(kind)
        return table, "float", table.astype(np.float64)
    bits = int(kind[-1])
    table = fused_table(n_rows, dim, bits)
    rows = ref_dequant8(table) if bits == 8 else ref_dequant_nbit(table, bits)
    return table, kind, rows


def assert_close(got, want):
    assert got.dtype == np.float32 and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale)


@pytest.fixture
def parts(monkeypatch):
    """segment_reduce(threads=t) then splits any lookup into t parts."""
    monkeypatch.setattr(K, "_PARALLEL_MIN_VALUES", 1)


# ----------------------------------------------------------------- prefetch across bags and tiles

@pytest.mark.parametrize("distance", [0, 1, 3, 8, 64])
@pytest.mark.parametrize("kind,dim", [("float32", 64), ("float32", 100), ("float16", 136), ("fused8", 72),
                                      ("fused4", 130), ("fused2", 68)])
def test_prefetch_distance_and_bag_boundaries(monkeypatch, parts, distance, kind, dim):
    """Bags shorter than, equal to and longer than the prefetch distance, next to empty
    ones; rows of one tile and of several (overlapping) tiles; one and three parts.
    The distance changes only which rows are prefetched, never the sums."""
    monkeypatch.setattr(K, "PREFETCH_DISTANCE", distance)
    monkeypatch.setattr(K, "PREFETCH_DISTANCE_SHORT_ROWS", distance)
    table, layout, rows = table_and_rows(kind, 300, dim)
    d = max(distance, 1)
    lengths = np.array([0, 1, d - 1, d, d + 1, 0, 2 * d, 3, 0], np.int32)
    indices = RNG.integers(0, 300, int(lengths.sum())).astype(np.int64)
    weights = RNG.uniform(-1, 1, indices.size).astype(np.float32)
    for threads in (1, 3):
        got = K.segment_reduce(table, indices, lengths, weights=weights, layout=layout, threads=threads)
        assert_close(got, ref_lookup(rows, indices, lengths, weights))


# ----------------------------------------------------------------- empty bags, huge bags, skew

@pytest.mark.parametrize("threads", [1, 2, 5])
def test_empty_bags_everywhere(parts, threads):
    """Empty bags first, last, in runs, and where part boundaries fall; mean of an
    empty bag is 0 (no 0/0)."""
    table, _, rows = table_and_rows("float32", 50, 24)
    lengths = np.array([0, 0, 3, 0, 0, 0, 4, 0, 1, 0, 0], np.int32)
    indices = RNG.integers(0, 50, int(lengths.sum())).astype(np.int32)
    for mean in (False, True):
        got = K.segment_reduce(table, indices, lengths, mean=mean, threads=threads)
        assert_close(got, ref_lookup(rows, indices, lengths, mean=mean))
        assert not got[lengths == 0].any()


@pytest.mark.parametrize("mode", ["sum", "mean", "weighted", "positional"])
@pytest.mark.parametrize("kind", ["float32", "fused8", "fused4"])
def test_one_huge_bag_split_over_many_parts(monkeypatch, parts, mode, kind):
    """A single bag cut by every part boundary: each part sums a piece, the pieces are
    added up in order and written once (divided by the whole length for mean)."""
    table, layout, rows = table_and_rows(kind, 1000, 40)
    n = 20_000
    indices = RNG.integers(0, 1000, n).astype(np.int64)
    lengths = np.array([n], np.int32)
    kw = {"mean": mode == "mean"}
    if mode in ("weighted", "positional"):
        kw["weights"] = RNG.uniform(-1, 1, n).astype(np.float32)
        kw["positional"] = mode == "positional"
    want = ref_lookup(rows, indices, lengths, **kw)
    # float32 sums of 20,000 terms: the rounding error scales with the sum of the terms'
    # magnitudes (about 10,000 here), not with the result's; one term left out or counted
    # twice (~1) is still 100x this bound
    magnitudes = ref_lookup(np.abs(rows), indices, lengths, **dict(kw, weights=np.abs(kw["weights"]))
                            if "weights" in kw else kw)
    for threads in (2, 7):
        got = K.segment_reduce(table, indices, lengths, layout=layout, threads=threads, **kw)
        assert (np.abs(got - want) <= 1e-6 * magnitudes + 1e-4 * np.abs(want)).all()


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_skewed_lengths_over_the_team_split(parts, threads):
    """One bag of half the indices among many short ones: parts are equal shares of the
    index positions, so the long bag is cut into pieces and the short ones around it
    are whole or cut at their ends."""
    table, _, rows = table_and_rows("float16", 400, 33)
    lengths = np.concatenate([RNG.integers(0, 4, 60), [3000], RNG.integers(0, 4, 60)]).astype(np.int32)
    indices = RNG.integers(0, 400, int(lengths.sum())).astype(np.int32)
    for mean in (False, True):
        got = K.segment_reduce(table, indices, lengths, mean=mean, threads=threads)
        assert_close(got, ref_lookup(rows, indices, lengths, mean=mean))


def test_offsets_form_with_parts(parts):
    table, _, rows = table_and_rows("float32", 80, 16)
    lengths = np.array([5, 0, 40, 2, 0, 7], np.int32)
    indices = RNG.integers(0, 80, int(lengths.sum())).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]) + 11
    got = K.offsets_reduce(table, indices, offsets, threads=3)
    assert_close(got, ref_lookup(rows, indices, lengths))
    torch_style = K.offsets_reduce(table, indices, offsets[:-1], include_last_offset=False, threads=3)
    assert_close(torch_style, ref_lookup(rows, indices, lengths))


# ----------------------------------------------------------------- checks before anything is written

def run_into_existing_output(op, inputs, before):
    """Run op into blob "out" that holds `before`; return the error and the blob after."""
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("out", before)
    with pytest.raises(Caffe2Error) as exc:
        workspace.RunOperatorOnce(core.CreateOperator(op, names, ["out"]))
    return str(exc.value), workspace.FetchBlob("out")


@pytest.mark.parametrize("op,kind", [("SparseLengthsSum", "float32"), ("SparseLengthsMean", "float16"),
                                     ("SparseLengthsSumFused8BitRowwise", "fused8"),
                                     ("SparseLengthsSumFused4BitRowwiseIdx", "fused4")])
@pytest.mark.parametrize("bad", [1000, -1])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_bad_index_in_the_last_bag_leaves_the_output_untouched(op, kind, bad, index_dtype):
    table, _, _ = table_and_rows(kind, 1000, 16)
    lengths = np.array([3000, 2000, 1000], np.int32)
    indices = RNG.integers(0, 1000, 6000).astype(index_dtype)
    indices[5990] = bad
    seg = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64) if op.endswith("Idx") else lengths
    before = np.full((3, 16), 7.0, np.float32)
    msg, after = run_into_existing_output(op, [table, indices, seg], before)
    assert "Index 5990 is out of bounds: %d, range 0 to 1000" % bad in msg
    assert op in msg and "'in1'" in msg
    np.testing.assert_array_equal(after, before)


def test_length_errors_come_before_index_errors():
    table = np.zeros((10, 4), np.float32)
    msg, _ = run_into_existing_output("SparseLengthsSum", [table, np.array([99, 1], np.int64),
                                                           np.array([1, -1, 2], np.int32)], np.zeros(1))
    assert "LENGTHS must be non-negative, lengths[1] = -1" in msg
    msg, _ = run_into_existing_output("SparseLengthsSumIdx", [table, np.array([99, 1], np.int64),
                                                              np.array([0, 2, 1], np.int32)], np.zeros(1))
    assert "OFFSETS must be non-decreasing: offsets[1] = 2 > offsets[2] = 1" in msg


def test_weights_too_short_are_refused_before_the_loop():
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(K.LookupInputError, match="WEIGHT must have at least as many entries"):
        K.segment_reduce(table, np.array([1, 2, 3], np.int64), np.array([3], np.int32),
                         weights=np.ones(2, np.float32), positional=True)
    with pytest.raises(K.LookupInputError, match="Weight should have the same length as indices."):
        K.segment_reduce(table, np.array([1, 2, 3], np.int64), np.array([3], np.int32),
                         weights=np.ones(2, np.float32))


# ----------------------------------------------------------------- tables read in place

def strided_tables():
    wide = RNG.standard_normal((3000, 70)).astype(np.float32)
    yield "row step 2", wide[::2, :64]
    yield "column slice", wide[:, 3:40]
    yield "reversed rows", wide[::-1, :16]
    yield "fp16 column slice", wide.astype(np.float16)[:, 5:69]
    yield "3-d, trailing dims merge", wide[:, :60].reshape(3000, 6, 10)[::3]


@pytest.mark.parametrize("name,table", list(strided_tables()), ids=lambda v: v if isinstance(v, str) else "")
def test_strided_float_tables_are_read_in_place(parts, name, table):
    assert not table.flags.c_contiguous
    n = table.shape[0]
    lengths = np.array([7, 0, 30, 5], np.int32)
    indices = RNG.integers(0, n, int(lengths.sum())).astype(np.int64)
    want = K.segment_reduce(np.ascontiguousarray(table), indices, lengths, threads=2)   # same parts, same sums
    K.segment_reduce(table, indices, lengths, threads=2)
    tracemalloc.start()
    try:
        got = K.segment_reduce(table, indices, lengths, threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert peak < 64 * 1024, peak          # the output and a few small arrays, no table copy
    ref = ref_lookup(table.reshape(n, -1).astype(np.float64), indices, lengths)
    assert_close(got, ref)


def test_transposed_table_gathers_only_the_rows_it_needs():
    """Values of a row 512 KB apart: the rows needed are gathered first (not the
    whole 24 MB table)."""
    base = RNG.standard_normal((8, 6, 128_000)).astype(np.float32)
    table = base.transpose(2, 0, 1)
    lengths = np.array([4, 0, 7, 2], np.int32)
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(np.int32)
    K.segment_reduce(table, indices, lengths, threads=1)
    tracemalloc.start()
    try:
        got = K.segment_reduce(table, indices, lengths, threads=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < table.nbytes // 100, peak
    assert_close(got, ref_lookup(table.reshape(table.shape[0], -1).astype(np.float64), indices, lengths))


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_strided_fused_tables(parts, bits):
    table = fused_table(4000, 24, bits)[1::3]
    lengths = np.array([9, 1, 0, 12], np.int32)
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(np.int32)
    want = K.segment_reduce(np.ascontiguousarray(table), indices, lengths, layout="fused%d" % bits, threads=2)
    got = K.segment_reduce(table, indices, lengths, layout="fused%d" % bits, threads=2)
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------- float16 under flush-to-zero

def test_half_scale_and_values_under_flush_to_zero():
    """With FTZ/DAZ set on this thread, float16 values and the float16 scale/bias of
    4-bit rows that are half subnormals still count (they are normal as float32)."""
    torch = pytest.importorskip("torch")
    sub = RNG.integers(1, 0x0400, (40, 8)).astype(np.uint16).view(np.float16)     # half subnormals
    fused = fused_table(40, 8, 4)
    fused[:, -4:] = np.stack([sub[:, 0], sub[:, 1]], 1).astype("<f2").view(np.uint8)
    lengths = np.array([5, 0, 9, 3], np.int32)
    indices = RNG.integers(0, 40, int(lengths.sum())).astype(np.int64)
    want_half = ref_lookup(sub.astype(np.float64), indices, lengths)
    want_fused = ref_lookup(ref_dequant_nbit(fused, 4), indices, lengths)
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        tiny = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
        assert not np.multiply(tiny, np.float32(1))[0]           # the flag is on in this thread
        got_half = K.segment_reduce(sub, indices, lengths, threads=1)
        got_fused = K.segment_reduce(fused, indices, lengths, layout="fused4", threads=1)
    finally:
        torch.set_flush_denormal(False)
    assert np.abs(got_half).min(axis=1)[lengths > 0].all()
    np.testing.assert_allclose(got_half, want_half, rtol=1e-6, atol=0)
    np.testing.assert_allclose(got_fused, want_fused, rtol=1e-5, atol=1e-6)
