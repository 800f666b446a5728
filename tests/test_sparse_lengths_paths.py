"""The code paths inside kernels/cpu/recsys/sparse_lengths.py that small op-level tests do not
reach: float16 widening (every half bit pattern, inf/nan, large weights, a thread that
flushes subnormals), 4/2-bit unpacking with odd widths, fused 8-bit rows whose
scale/bias are not 4-byte aligned, uniform and uneven lengths over several parts and
two threads, and rows next to a non-finite row. Every expectation comes from the
float64 NumPy references in tests/_lookups.py or from NumPy's own float16 cast.
(The compiled kernel's own paths: tests/test_sparse_lengths_compiled.py.)"""
import numpy as np
import pytest

from caffe2py.kernels.cpu.recsys import sparse_lengths as K

from _lookups import ref_dequant8, ref_dequant_nbit, ref_lookup, run_op, unpack_bits

RNG = np.random.default_rng(4)


@pytest.fixture
def small_chunks(monkeypatch):
    """Many chunks and two threads even for test-sized inputs."""
    monkeypatch.setattr(K, "_CHUNK_BYTES", 2048)
    monkeypatch.setattr(K, "_PARALLEL_MIN_VALUES", 1)


# ----------------------------------------------------------------- references

def fused_table(n_rows, dim, bits, rng=RNG):
    """Random fused rows (random value bytes; random scale and bias of both signs)."""
    if bits == 8:
        sb = np.stack([rng.uniform(-0.05, 0.05, n_rows), rng.uniform(-2, 2, n_rows)], 1).astype("<f4")
        return np.concatenate([rng.integers(0, 256, (n_rows, dim), dtype=np.uint8), sb.view(np.uint8)], 1)
    nb = -(-dim // (8 // bits))
    sb = np.stack([rng.uniform(-0.5, 0.5, n_rows), rng.uniform(-2, 2, n_rows)], 1).astype("<f2")
    return np.concatenate([rng.integers(0, 256, (n_rows, nb), dtype=np.uint8), sb.view(np.uint8)], 1)


def reduction_kwargs(mode, n_indices, n_positions):
    """segment_reduce keyword arguments for a reduction mode: "sum", "weighted",
    "big weights" (one weight too large to carry the fp16 path's 2**112 factor),
    "mean" or "positional" (n_positions per-position weights)."""
    kw = {}
    if mode in ("weighted", "big weights"):
        kw["weights"] = RNG.uniform(-2, 2, n_indices).astype(np.float32)
        if mode == "big weights":
            kw["weights"][5] = 1e5
    elif mode == "positional":
        kw.update(weights=RNG.uniform(-2, 2, n_positions).astype(np.float32), positional=True)
    elif mode == "mean":
        kw["mean"] = True
    return kw


def assert_close(got, want):
    assert got.dtype == np.float32 and got.shape == want.shape
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=2e-6 * scale)


LENGTHS = {
    "uniform": np.full(37, 9, np.int32),
    "uneven": np.array([9, 0, 3, 17, 1, 0, 9, 9, 2, 30, 4, 9, 0, 6] * 3, np.int32),
    "skewed": np.where(np.arange(40) % 10 == 3, 60, 6).astype(np.int32),
}


# ----------------------------------------------------------------- float16 widening

def test_every_half_bit_pattern_widens_exactly():
    """Bags of one row each: the output is the row's values as NumPy casts them (inf
    and nan included; -0 sums to +0)."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    table = bits.view(np.float16).reshape(4096, 16)
    indices = np.arange(4096, dtype=np.int64)
    got = K.segment_reduce(table, indices, np.ones(4096, np.int32), threads=1)
    want = table.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])


def flushes_subnormals():
    """Whether this thread flushes float32 subnormals (FTZ/DAZ set)."""
    tiny = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
    return not np.multiply(tiny, np.array([1.0], np.float32))[0]


def test_half_lookups_when_the_thread_flushes_subnormals():
    """With FTZ/DAZ set (here by torch.set_flush_denormal) the bit trick's float32
    subnormals would read as zero: half subnormals must still count."""
    torch = pytest.importorskip("torch")
    bits = RNG.integers(1, 0x0400, (30, 6)).astype(np.uint16)        # half subnormals only
    table = bits.view(np.float16)
    lengths = np.array([3, 5, 0, 4], np.int32)
    indices = RNG.integers(0, 30, int(lengths.sum())).astype(np.int32)
    ref = ref_lookup(table.astype(np.float64), indices, lengths)
    assert not flushes_subnormals()
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        assert flushes_subnormals()
        got = K.segment_reduce(table, indices, lengths, threads=1)
    finally:
        torch.set_flush_denormal(False)
    assert np.abs(got).max() > 0
    assert_close(got, ref)


def half_table(n_rows, dim, rng=RNG):
    """Random halves (normals of all exponents, subnormals, +-0) and a few landmarks."""
    bits = rng.integers(0, 0x7C00, (n_rows, dim)).astype(np.uint16)
    bits |= rng.integers(0, 2, (n_rows, dim)).astype(np.uint16) << 15
    table = bits.view(np.float16)
    table[1, :4] = [np.float16(65504), np.float16(-65504), np.float16(6e-8), np.float16(-0.0)]
    table[2, :3] = [np.float16(2.0 ** -14), np.float16(-2.0 ** -24), np.float16(0.0)]
    return table


@pytest.mark.parametrize("shape", list(LENGTHS))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["sum", "weighted", "big weights", "mean", "positional"])
def test_half_table_lookups(small_chunks, shape, threads, mode):
    lengths = LENGTHS[shape]
    table = half_table(50, 11)
    indices = RNG.integers(0, 50, int(lengths.sum())).astype(np.int32)
    kw = reduction_kwargs(mode, indices.size, 64)
    got = K.segment_reduce(table, indices, lengths, threads=threads, **kw)
    assert_close(got, ref_lookup(table.astype(np.float64), indices, lengths, **kw))


@pytest.mark.parametrize("shape", list(LENGTHS))
def test_half_table_with_inf_and_nan_rows(small_chunks, shape):
    lengths = LENGTHS[shape]
    table = half_table(40, 7)
    table[3, 2] = np.inf
    table[4, 0] = -np.inf
    table[5, 6] = np.nan
    indices = RNG.integers(6, 40, int(lengths.sum())).astype(np.int64)
    indices[::23] = RNG.integers(3, 6, indices[::23].size)   # some chunks hold them, some do not
    for threads in (1, 2):
        got = K.segment_reduce(table, indices, lengths, threads=threads)
        assert_close(got, ref_lookup(table.astype(np.float64), indices, lengths))
    assert np.isnan(got).any() and np.isinf(got).any()


# ----------------------------------------------------------------- fused rows

@pytest.mark.parametrize("bits", [4, 2])
@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 9, 17, 33])
def test_packed_values_unpack_in_order(bits, width):
    """Bags of one row with scale 1 and bias 0: the output is the row's values, low
    bits first, as a shift-and-mask per field gives them."""
    raw = RNG.integers(0, 256, (13, width), dtype=np.uint8)
    sb = np.tile(np.array([1.0, 0.0], "<f2").view(np.uint8), (13, 1))
    table = np.concatenate([raw, sb], axis=1)
    got = K.segment_reduce(table, np.arange(13, dtype=np.int32), np.ones(13, np.int32), layout="fused%d" % bits,
                           threads=1)
    np.testing.assert_array_equal(got, unpack_bits(raw, bits))


@pytest.mark.parametrize("bits,dim", [(4, 1), (4, 5), (4, 7), (4, 13), (2, 1), (2, 5), (2, 7), (2, 10),
                                      (8, 5), (8, 6), (8, 7), (8, 64)])
@pytest.mark.parametrize("reduction", ["Sum", "WeightedSum", "Mean"])
@pytest.mark.parametrize("shape", ["uniform", "uneven"])
def test_fused_lookups_odd_and_unaligned_dims(bits, dim, reduction, shape):
    lengths = LENGTHS[shape]
    table = fused_table(60, dim, bits)
    indices = RNG.integers(0, 60, int(lengths.sum())).astype(np.int32 if dim % 2 else np.int64)
    weights = RNG.uniform(-1, 1, indices.size).astype(np.float32)
    op = "SparseLengths%sFused%dBitRowwise" % (reduction, bits)
    inputs = [table, weights, indices, lengths] if reduction == "WeightedSum" else [table, indices, lengths]
    got = run_op(op, inputs)
    rows = ref_dequant8(table) if bits == 8 else ref_dequant_nbit(table, bits)
    want = ref_lookup(rows, indices, lengths, weights if reduction == "WeightedSum" else None,
                     mean=reduction == "Mean")
    if bits != 8:     # ceil(D/k)*k columns: the padding values of the last byte included
        assert got.shape[1] == -(-dim // (8 // bits)) * (8 // bits)
    assert_close(got, want)


@pytest.mark.parametrize("layout,bits", [("fused8", 8), ("fused4", 4), ("fused2", 2)])
@pytest.mark.parametrize("shape", list(LENGTHS))
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_chunks_and_threads(small_chunks, layout, bits, shape, threads):
    lengths = LENGTHS[shape]
    table = fused_table(70, 9, bits)
    indices = RNG.integers(0, 70, int(lengths.sum())).astype(np.int64)
    weights = RNG.uniform(-1, 1, indices.size).astype(np.float32)
    got = K.segment_reduce(table, indices, lengths, weights=weights, layout=layout, threads=threads)
    rows = ref_dequant8(table) if bits == 8 else ref_dequant_nbit(table, bits)
    assert_close(got, ref_lookup(rows, indices, lengths, weights))


# ----------------------------------------------------------------- float32, lengths shapes

@pytest.mark.parametrize("shape", list(LENGTHS))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["sum", "weighted", "mean", "positional"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_float_lookups_over_chunks_and_threads(small_chunks, shape, threads, mode, index_dtype):
    lengths = LENGTHS[shape]
    table = RNG.standard_normal((80, 6)).astype(np.float32)
    indices = RNG.integers(0, 80, int(lengths.sum())).astype(index_dtype)
    kw = reduction_kwargs(mode, indices.size, 70)
    got = K.segment_reduce(table, indices, lengths, threads=threads, **kw)
    assert_close(got, ref_lookup(table.astype(np.float64), indices, lengths, **kw))


@pytest.mark.parametrize("kind", ["float32", "float16", "fused8", "fused4", "fused2"])
def test_padding_does_not_pick_up_a_non_finite_row(kind):
    """Bags of lengths 3 and 2 share a chunk padded to 3; padded slots gather row 0."""
    lengths = np.array([3, 2, 3, 2], np.int32)
    indices = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0], np.int64)   # only the last bag uses row 0
    if kind in ("float32", "float16"):
        table = RNG.standard_normal((10, 4)).astype(kind)
        table[0, 1] = np.inf
        rows, layout = table.astype(np.float64), "float"
    else:
        bits = int(kind[-1])
        table = fused_table(10, 4, bits)
        sb_at = table.shape[1] - (8 if bits == 8 else 4)
        table[0, sb_at:sb_at + (4 if bits == 8 else 2)] = np.array(
            [np.inf], "<f4" if bits == 8 else "<f2").view(np.uint8)     # scale of row 0
        table[0, :sb_at] = 0x11
        rows = ref_dequant8(table) if bits == 8 else ref_dequant_nbit(table, bits)
        layout = kind
    got = K.segment_reduce(table, indices, lengths, layout=layout)
    want = ref_lookup(rows, indices, lengths)
    assert np.isfinite(got[:3]).all()
    assert_close(got, want)


@pytest.mark.parametrize("positional", [False, True])
@pytest.mark.parametrize("table_dtype", [np.float32, np.float16])
def test_padding_ignores_weights_outside_the_bag(positional, table_dtype):
    """Padded slots must not pick up a nan weight of the next bag (per-index weights
    are windows into WEIGHTS) or of a later position (positional weights)."""
    table = RNG.standard_normal((10, 3)).astype(table_dtype)
    lengths = np.array([3, 2, 2], np.int32)            # one chunk, padded to 3
    indices = np.array([1, 2, 3, 4, 5, 6, 7], np.int64)
    if positional:
        weights = np.array([0.5, -1.0, np.nan], np.float32)   # bag 0 (length 3) uses the nan
    else:
        weights = np.array([1, 2, 3, 4, 5, np.nan, 7], np.float32)   # bag 2 uses the nan
    got = K.segment_reduce(table, indices, lengths, weights=weights, positional=positional)
    want = ref_lookup(table.astype(np.float64), indices, lengths, weights, positional=positional)
    assert np.isfinite(got[1]).all()
    assert_close(got, want)


def test_non_contiguous_table_is_not_copied_per_lookup():
    """A strided N-d table (a transposed view) is read in place: the lookup allocates
    about the gathered rows, not a copy of the 24 MB table."""
    import tracemalloc
    base = RNG.standard_normal((8, 6, 128_000)).astype(np.float32)
    table = base.transpose(2, 0, 1)                    # (128000, 8, 6), strided
    assert not table.flags.c_contiguous
    lengths = np.array([4, 0, 7, 2], np.int32)
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(np.int64)
    K.segment_reduce(table, indices, lengths, threads=1)          # scratch buffers made
    tracemalloc.start()
    try:
        got = K.segment_reduce(table, indices, lengths, threads=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < table.nbytes // 100, peak
    ref = ref_lookup(table.reshape(table.shape[0], -1).astype(np.float64), indices, lengths)
    assert_close(got, ref)


@pytest.mark.parametrize("layout,bits", [("fused8", 8), ("fused4", 4)])
def test_strided_fused_table_is_read_in_place(layout, bits):
    """Fused rows held every other row of a bigger array: same results as the
    contiguous copy, without copying the table per lookup."""
    import tracemalloc
    table = fused_table(200_000, 16, bits)[::2]
    assert not table.flags.c_contiguous
    lengths = np.array([5, 3, 0, 9], np.int32)
    indices = RNG.integers(0, table.shape[0], int(lengths.sum())).astype(np.int32)
    want = K.segment_reduce(np.ascontiguousarray(table), indices, lengths, layout=layout, threads=1)
    tracemalloc.start()
    try:
        got = K.segment_reduce(table, indices, lengths, layout=layout, threads=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert peak < table.nbytes // 100, peak
