"""Sparse-feature gathers and conversions against NumPy references written here:
GatherRanges, GatherRangesToDense, SparseToDense, SparseToDenseMask,
BatchSparseToDense, BatchDenseToSparse, GatherFused8BitRowwise and the separate
scale/bias 8-bit row-wise family."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run


@st.composite
def ranges_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31 - 1)))
    size = draw(st.integers(0, 30))
    n, m = draw(st.integers(0, 5)), draw(st.integers(1, 3))
    starts = rng.integers(0, size + 1, size=(n, m))
    lens = rng.integers(0, 4, size=(n, m))
    lens = np.minimum(lens, size - starts)
    ranges = np.stack([starts, lens], axis=2).astype(draw(st.sampled_from([np.int32, np.int64])))
    dtype = draw(st.sampled_from([np.float32, np.int64, np.int32, np.uint8, np.float16]))
    data = (rng.standard_normal(size) * 50).astype(dtype)
    return data, ranges


# --------------------------------------------------------------------------- 8-bit row-wise

def _quantize_ref(x):
    rows = x.reshape(x.shape[0], -1).astype(np.float32)
    lo, hi = rows.min(axis=1), rows.max(axis=1)
    scale = np.where(hi - lo < 1e-10, 1.0, (hi - lo) / np.float32(255)).astype(np.float32)
    scaled = (rows - lo[:, None]) * (np.float32(1) / scale)[:, None]
    q = np.floor(scaled.astype(np.float64) + 0.5)                # values >= 0: halves go up
    q[hi - lo < 1e-10] = 0
    return q.astype(np.uint8).reshape(x.shape), np.stack([scale, lo], axis=1)


class TestSparseOps(ReferenceTestCase):
    @SETTINGS
    @given(ranges_case())
    def test_gather_ranges(self, case):
        data, ranges = case

        def ref(d, r):
            parts = [d[s:s + n] for s, n in r.reshape(-1, 2)]
            out = np.concatenate(parts) if parts else d[:0]
            return out, r[:, :, 1].sum(axis=1).astype(np.int32)
        self.assert_shape_inference = False      # Caffe2 infers OUTPUT as DATA's size: an upper bound
        out = self.check(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]), [data, ranges], ref)
        assert out[0].dtype == data.dtype

    def test_gather_ranges_shape_inference_gives_caffe2s_upper_bound(self):
        net = core.Net("infer")
        net.GatherRanges(["values", "ranges"], ["out", "lengths"])
        shapes, types = workspace.InferShapesAndTypes(
            [net], {"values": [64], "ranges": [3, 5, 2]},
            blob_types={"values": core.DataType.INT64, "ranges": core.DataType.INT32})
        assert shapes["out"] == [64] and types["out"] == core.DataType.INT64
        assert shapes["lengths"] == [3] and types["lengths"] == core.DataType.INT32

    def test_gather_ranges_doc_example_strings_and_errors(self):
        data = np.array([1, 2, 3, 4, 5, 6], np.int64)
        ranges = np.array([[[0, 1], [2, 2]], [[4, 1], [5, 1]]], np.int32)
        out, lengths = run(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]), [data, ranges])
        np.testing.assert_array_equal(out, [1, 3, 4, 5, 6])
        np.testing.assert_array_equal(lengths, [3, 2])
        words = np.array(["a", "bb", "c"], dtype=object)
        out, _ = run(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]),
                     [words, np.array([[[1, 2]], [[0, 1]]])])
        assert out.tolist() == [b"bb", b"c", b"a"]       # string tensors are fetched as bytes
        with pytest.raises(Caffe2Error, match="blob 'R': range 1 \\(start 5, length 2\\) is outside DATA of 6"):
            run(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]), [data, np.array([[[0, 1], [5, 2]]])])
        with pytest.raises(Caffe2Error, match="Ranges must be 3-D"):
            run(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]), [data, np.array([[0, 1]])])

    @SETTINGS
    @given(ranges_case(), st.booleans())
    def test_gather_ranges_to_dense(self, case, with_key):
        data, ranges = case
        data = data.astype(np.float32)
        rng = np.random.default_rng(len(data))
        widths = [int(w) for w in rng.integers(1, 4, size=ranges.shape[1])]
        key = rng.integers(0, 5, size=data.shape[0]).astype(np.int64)

        def ref(d, r, k=None):
            outs = []
            for j, w in enumerate(widths):
                out = np.zeros((r.shape[0], w), np.float32)
                for i in range(r.shape[0]):
                    s, n = r[i, j]
                    if n == w:
                        vals = d[s:s + n]
                        if k is not None:
                            vals = vals[np.argsort(k[s:s + n], kind="stable")]
                        out[i] = vals
                outs.append(out)
            return outs
        names = ["O%d" % j for j in range(len(widths))]
        ins = [data, ranges] + ([key] if with_key else [])
        op = core.CreateOperator("GatherRangesToDense", ["D", "R", "K"][:len(ins)], names, lengths=widths,
                                 max_mismatched_ratio=1.0)
        self.check(op, ins, ref)

    def test_gather_ranges_to_dense_doc_examples_and_ratio_check(self):
        data = np.arange(1, 9, dtype=np.float32)
        ranges = np.array([[[2, 4], [0, 2]], [[0, 0], [6, 2]]])
        key = np.array([0, 1, 3, 2, 1, 0, 1, 0], np.int64)
        a, b = run(core.CreateOperator("GatherRangesToDense", ["D", "R"], ["A", "B"], lengths=[4, 2]), [data, ranges])
        np.testing.assert_array_equal(a, [[3, 4, 5, 6], [0, 0, 0, 0]])
        np.testing.assert_array_equal(b, [[1, 2], [7, 8]])
        a, b = run(core.CreateOperator("GatherRangesToDense", ["D", "R", "K"], ["A", "B"], lengths=[4, 2]),
                   [data, ranges, key])
        np.testing.assert_array_equal(a, [[6, 5, 4, 3], [0, 0, 0, 0]])
        np.testing.assert_array_equal(b, [[1, 2], [8, 7]])
        with pytest.raises(Caffe2Error, match="Ratio of empty ranges for feature at index 0 is 0.5"):
            run(core.CreateOperator("GatherRangesToDense", ["D", "R"], ["A", "B"], lengths=[4, 2], min_observation=1,
                                    max_empty_ratio=0.1), [data, ranges])
        mismatched = np.array([[[2, 3], [0, 2]]])
        with pytest.raises(Caffe2Error, match="Ratio of range length mismatch for feature at index 0 is 1"):
            run(core.CreateOperator("GatherRangesToDense", ["D", "R"], ["A", "B"], lengths=[4, 2], min_observation=1),
                [data, mismatched])

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.sampled_from([np.float32, np.int32, np.int64]), st.integers(0, 2))
    def test_sparse_to_dense(self, seed, dtype, how):
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, 6, size=rng.integers(0, 10))               # duplicates add up
        vals = (rng.standard_normal((idx.size, 2)) * 10).astype(dtype)
        rows = [int(idx.max()) + 1 if idx.size else 0, 8, 7][how]

        def ref(i, v, *_):
            out = np.zeros((rows, 2), np.float64)
            for k, r in enumerate(i):
                out[r] += v[k]
            return out.astype(dtype)
        ins, names, kwargs = [idx, vals], ["I", "V"], {}
        if how == 1:
            kwargs = {"output_first_dim": 8}
        elif how == 2:
            ins, names = [idx, vals, np.zeros((7, 3))], ["I", "V", "T"]
        self.check(core.CreateOperator("SparseToDense", names, ["O"], **kwargs), ins, ref)

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.booleans())
    def test_sparse_to_dense_mask(self, seed, batched):
        rng = np.random.default_rng(seed)
        mask = [int(m) for m in rng.permutation(12)[:4]]
        lengths = rng.integers(0, 4, size=rng.integers(0, 4)).astype(np.int32) if batched else None
        n = int(lengths.sum()) if batched else int(rng.integers(0, 6))
        idx = rng.integers(0, 12, size=n).astype(np.int64)
        vals = rng.standard_normal((n, 2)).astype(np.float32)
        default = np.array([0.5, -0.5], np.float32)

        def ref(i, v, d, lens=None):
            rows = [n] if lens is None else lens
            out = np.tile(d, (len(rows), len(mask), 1)).astype(np.float32)
            present = np.zeros((len(rows), len(mask)), bool)
            pos = 0
            for r, length in enumerate(rows):
                for e in range(pos, pos + length):
                    if i[e] in mask:
                        out[r, mask.index(i[e])] = v[e]           # the last value of an id wins
                        present[r, mask.index(i[e])] = True
                pos += length
            return (out, present) if lens is not None else (out[0], present[0])
        ins = [idx, vals, default] + ([lengths] if batched else [])
        op = core.CreateOperator("SparseToDenseMask", ["I", "V", "D", "L"][:len(ins)], ["O", "P"], mask=mask,
                                 return_presence_mask=1)
        self.check(op, ins, ref)

    def test_sparse_to_dense_mask_skips_few_negative_ids_then_fails(self):
        op = core.CreateOperator("SparseToDenseMask", ["I", "V", "D"], ["O"], mask=[1, 2], max_skipped_indices=3)
        ins = [np.array([-1, 2]), np.array([1.0, 2.0], np.float32), np.array(0.0, np.float32)]
        (out,) = run(op, ins)
        np.testing.assert_array_equal(out, [0, 2])
        with pytest.raises(Caffe2Error, match="Too many sparse indices skipped"):
            run(op, [np.array([-1, -2, -3]), np.zeros(3, np.float32), np.array(0.0, np.float32)])
        with pytest.raises(Caffe2Error, match="Duplicated id: 2"):
            run(core.CreateOperator("SparseToDenseMask", ["I", "V", "D"], ["O"], mask=[2, 2]), ins)

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.booleans())
    def test_batch_sparse_dense_round_trip(self, seed, with_shape_input):
        rng = np.random.default_rng(seed)
        dim = int(rng.integers(1, 7))
        lengths = rng.integers(0, dim + 1, size=rng.integers(0, 5)).astype(np.int64)
        indices = np.concatenate([rng.permutation(dim)[:n] for n in lengths]).astype(np.int64) if lengths.size \
            else np.zeros(0, np.int64)
        values = rng.standard_normal(indices.size).astype(np.float32)

        def to_dense(lens, idx, v, *_):
            out = np.full((len(lens), dim), 0.25, np.float32)
            pos = 0
            for r, n in enumerate(lens):
                out[r, idx[pos:pos + n]] = v[pos:pos + n]
                pos += n
            return out
        ins = [lengths, indices, values] + ([np.zeros((len(lengths), dim))] if with_shape_input else [])
        op = core.CreateOperator("BatchSparseToDense", ["L", "I", "V", "S"][:len(ins)], ["O"], default_value=0.25,
                                 **({} if with_shape_input else {"dense_last_dim": dim}))
        (dense,) = self.check(op, ins, to_dense)
        back = core.CreateOperator("BatchDenseToSparse", ["L", "I", "D"], ["V"])
        self.check(back, [lengths, indices, dense], lambda *a: values)

    def test_batch_sparse_to_dense_errors(self):
        op = core.CreateOperator("BatchSparseToDense", ["L", "I", "V"], ["O"], dense_last_dim=3)
        with pytest.raises(Caffe2Error, match="An indice \\(3\\) is larger then last dim of dense \\(3\\)."):
            run(op, [np.array([1]), np.array([3]), np.ones(1, np.float32)])
        with pytest.raises(Caffe2Error, match="lengths sum to 2, but there are 1 indices"):
            run(op, [np.array([2]), np.array([0]), np.ones(1, np.float32)])

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.sampled_from([(5, 7), (3, 2, 4), (4, 1)]))
    def test_rowwise_8bit_quantization(self, seed, shape):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
        x[0] = 1.5                                                     # a constant row
        q, sb = self.check(core.CreateOperator("FloatToRowwiseQuantized8Bits", ["X"], ["Q", "SB"]), [x],
                           _quantize_ref, threshold=1e-6)
        deq = self.check(core.CreateOperator("Rowwise8BitQuantizedToFloat", ["Q", "SB"], ["Y"]), [q, sb],
                         lambda a, s: (a.reshape(a.shape[0], -1) * s[:, :1] + s[:, 1:]).reshape(a.shape))
        step = (x.reshape(shape[0], -1).max(axis=1) - x.reshape(shape[0], -1).min(axis=1)) / 255
        assert np.all(np.abs(deq[0] - x).reshape(shape[0], -1) <= step[:, None] / 2 + 1e-5)

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.booleans(), st.booleans())
    def test_sparse_lengths_8bits_rowwise(self, seed, weighted, mean):
        rng = np.random.default_rng(seed)
        table = rng.standard_normal((int(rng.integers(1, 9)), 5)).astype(np.float32)
        q, sb = _quantize_ref(table)
        lengths = rng.integers(0, 4, size=rng.integers(0, 5)).astype(np.int32)
        idx = rng.integers(0, table.shape[0], size=int(lengths.sum())).astype(rng.choice([np.int32, np.int64]))
        w = rng.standard_normal(idx.size).astype(np.float32)

        def ref(*ins):
            data, s_b = ins[0], ins[-1]
            rows = data.astype(np.float64) * s_b[:, :1] + s_b[:, 1:]
            out, pos = [], 0
            for n in lengths:
                seg = rows[idx[pos:pos + n]] * (w[pos:pos + n, None] if weighted else 1)
                total = seg.sum(axis=0)
                out.append(total / n if mean and n else total)
                pos += n
            return np.array(out).reshape(len(lengths), 5)
        name = "SparseLengths" + ("Weighted" if weighted else "") + ("Mean" if mean else "Sum") + "8BitsRowwise"
        ins = [q] + ([w] if weighted else []) + [idx, lengths, sb]
        names = ["D"] + (["W"] if weighted else []) + ["I", "L", "SB"]
        self.check(core.CreateOperator(name, names, ["O"]), ins, ref, threshold=1e-4)

    def test_8bits_rowwise_errors(self):
        q, sb = np.zeros((3, 4), np.uint8), np.ones((3, 2), np.float32)
        with pytest.raises(Caffe2Error, match="Index 1 is out of bounds: 5, range 0 to 3"):
            run(core.CreateOperator("SparseLengthsSum8BitsRowwise", ["D", "I", "L", "SB"], ["O"]),
                [q, np.array([0, 5]), np.array([2], np.int32), sb])
        with pytest.raises(Caffe2Error, match="scale_bias must have the same first dim as data"):
            run(core.CreateOperator("Rowwise8BitQuantizedToFloat", ["D", "SB"], ["O"]), [q, sb[:2]])

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1))
    def test_gather_fused_8bit_rowwise(self, seed):
        rng = np.random.default_rng(seed)
        n, d = int(rng.integers(1, 8)), int(rng.integers(1, 6))
        codes = rng.integers(0, 256, size=(n, d)).astype(np.uint8)
        scale_bias = rng.standard_normal((n, 2)).astype(np.float32)
        fused = np.concatenate([codes, scale_bias.view(np.uint8).reshape(n, 8)], axis=1)
        idx = rng.integers(0, n, size=rng.integers(0, 6)).astype(np.int64)
        self.check(core.CreateOperator("GatherFused8BitRowwise", ["D", "I"], ["O"]), [fused, idx],
                   lambda f, i: codes[i] * scale_bias[i, :1].astype(np.float64) + scale_bias[i, 1:])
        with pytest.raises(Caffe2Error, match="INDICES element is out of DATA bounds, id=%d data_dim=%d" % (n, n)):
            run(core.CreateOperator("GatherFused8BitRowwise", ["D", "I"], ["O"]), [fused, np.array([n])])

    def test_large_gathers_take_the_parallel_kernels(self):
        """Past the team threshold: GatherRanges' run copy and the 8-bit lookup run split
        over the team."""
        rng = np.random.default_rng(3)
        data = rng.integers(0, 1 << 40, size=200000)
        starts = rng.integers(0, 199950, size=(3000, 4))
        lens = rng.integers(0, 40, size=(3000, 4))
        out, lengths = run(core.CreateOperator("GatherRanges", ["D", "R"], ["O", "L"]),
                           [data, np.stack([starts, lens], axis=2)])
        want = np.concatenate([data[s:s + n] for s, n in zip(starts.reshape(-1), lens.reshape(-1))])
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(lengths, lens.sum(axis=1))
        table = rng.standard_normal((1000, 32)).astype(np.float32)
        q, sb = _quantize_ref(table)
        seg_lengths = rng.integers(0, 30, size=2000).astype(np.int32)
        idx = rng.integers(0, 1000, size=int(seg_lengths.sum()))
        (got,) = run(core.CreateOperator("SparseLengthsSum8BitsRowwise", ["D", "I", "L", "SB"], ["O"]),
                     [q, idx, seg_lengths, sb])
        rows = q.astype(np.float64) * sb[:, :1] + sb[:, 1:]
        seg = np.repeat(np.arange(seg_lengths.size), seg_lengths)
        want = np.zeros((seg_lengths.size, 32))
        np.add.at(want, seg, rows[idx])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
