"""Selection, masking, row ops and samplers: Unique, Find, FindDuplicateElements,
BooleanMask(+Lengths), BooleanUnmask, FlexibleTopK, RemoveDataBlocks, Append,
ExtendTensor, RowMul, RowWiseArgMax, RowwiseMax against NumPy references written
here; UniformIntFill, UniqueUniformFill, RangeFill, WeightedSample and
WeightedMultiSampling by their guarantees (range, distinctness, avoided values,
zero-weight never drawn, seeded reproducibility, frequencies)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2

from _reference import SETTINGS, ReferenceTestCase, run

seed_st = st.integers(0, 2 ** 31 - 1)


# --------------------------------------------------------------------------- samplers

def _seeded(op_type, inputs, outputs, seed, **kwargs):
    return core.CreateOperator(op_type, inputs, outputs, device_option=core.DeviceOption(caffe2_pb2.CPU, 0,
                                                                                        random_seed=seed), **kwargs)


class TestSelectionOps(ReferenceTestCase):
    @SETTINGS
    @given(seed_st, st.sampled_from([np.int32, np.int64]))
    def test_unique_find_and_duplicates(self, seed, dtype):
        rng = np.random.default_rng(seed)
        x = rng.integers(-3, 6, size=rng.integers(0, 12)).astype(dtype)

        def unique_ref(v):
            u = np.array(sorted(set(v.tolist())), dtype)
            return u, np.array([list(u).index(e) for e in v], np.int32)
        self.check(core.CreateOperator("Unique", ["X"], ["U", "R"]), [x], unique_ref)

        # Caffe2's SparseHash engine: a registry key of its own, same results
        assert core.IsOperator("Unique_ENGINE_SparseHash") and not core.IsOperator("Unique_ENGINE_NoSuch")
        self.check(core.CreateOperator("Unique", ["X"], ["U", "R"], engine="SparseHash"), [x], unique_ref)

        # fewer than 16 needles and more: Caffe2's two search paths
        needles = rng.integers(-4, 7, size=rng.integers(0, 20)).astype(dtype)

        def find_ref(index, q):
            last = {int(v): p for p, v in enumerate(index)}
            return np.array([last.get(int(v), -7) for v in q], dtype)
        self.check(core.CreateOperator("Find", ["I", "Q"], ["O"], missing_value=-7), [x, needles], find_ref)

        def dup_ref(v):
            seen, out = set(), []
            for p, e in enumerate(v.tolist()):
                if e in seen:
                    out.append(p)
                seen.add(e)
            return np.array(out, np.int64)
        self.check(core.CreateOperator("FindDuplicateElements", ["X"], ["O"]), [x], dup_ref)

    def test_find_duplicate_elements_floats_and_strings(self):
        (out,) = run(core.CreateOperator("FindDuplicateElements", ["X"], ["O"]),
                     [np.array([1.5, np.nan, 1.5, np.nan, 2.0], np.float32)])
        np.testing.assert_array_equal(out, [2])                      # NaN never equals an earlier NaN
        (out,) = run(core.CreateOperator("FindDuplicateElements", ["X"], ["O"]), [np.array(["a", "b", "a"], object)])
        np.testing.assert_array_equal(out, [2])

    @SETTINGS
    @given(seed_st)
    def test_boolean_mask_ops(self, seed):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(0, 4, size=rng.integers(0, 5)).astype(np.int32)
        data = rng.standard_normal((int(lengths.sum()), 2)).astype(np.float32)
        mask = rng.random(data.shape[0]) < 0.5
        self.check(core.CreateOperator("BooleanMask", ["D", "M"], ["O", "I"]), [data, mask],
                   lambda d, m: (d[[p for p in range(len(m)) if m[p]]].reshape(-1, 2),
                                              np.array([p for p in range(len(m)) if m[p]], np.int64)))

        def lengths_ref(lens, m):
            out, pos = [], 0
            for n in lens:
                out.append(int(m[pos:pos + n].sum()))
                pos += n
            return np.array(out, np.int32)
        self.check(core.CreateOperator("BooleanMaskLengths", ["L", "M"], ["O"]), [lengths, mask],
                   lengths_ref)

        # BooleanUnmask inverts a split of one vector by disjoint masks
        values = rng.standard_normal(data.shape[0]).astype(np.float32)
        owner = rng.integers(0, 3, size=values.size)
        ins = []
        for k in range(3):
            ins += [owner == k, values[owner == k]]
        self.check(core.CreateOperator("BooleanUnmask", ["M0", "V0", "M1", "V1", "M2", "V2"], ["O"]),
                   ins, lambda *a: values)

    def test_boolean_unmask_first_true_mask_wins_and_errors(self):
        op = core.CreateOperator("BooleanUnmask", ["M0", "V0", "M1", "V1"], ["O"])
        (out,) = run(op, [np.array([True, False]), np.array([1.0]), np.array([False, True]), np.array([2.0])])
        np.testing.assert_array_equal(out, [1.0, 2.0])
        with pytest.raises(Caffe2Error, match="All masks have False at position 1."):
            run(op, [np.array([True, False]), np.array([1.0]), np.array([False, False]), np.zeros(0)])
        with pytest.raises(Caffe2Error, match="The number of true at mask 1 does not match"):
            run(op, [np.array([True, False]), np.array([1.0]), np.array([True, True]), np.array([2.0, 2.0])])

    @SETTINGS
    @given(seed_st)
    def test_flexible_top_k(self, seed):
        rng = np.random.default_rng(seed)
        r = int(rng.integers(1, 6))
        x = rng.integers(0, 4, size=(int(rng.integers(0, 3)), 2, r)).astype(np.float32)     # ties
        k = rng.integers(1, r + 1, size=x.shape[:-1] + (1,)).astype(np.int64)

        def ref(data, kk):
            vals, idx = [], []
            for row, n in zip(data.reshape(-1, r), kk.reshape(-1)):
                order = sorted(range(r), key=lambda j: (-row[j], j))[:n]
                vals += [row[j] for j in order]
                idx += order
            return np.array(vals, np.float32), np.array(idx, np.int64)
        self.check(core.CreateOperator("FlexibleTopK", ["X", "K"], ["V", "I"]), [x, k], ref)

    def test_flexible_top_k_errors(self):
        op = core.CreateOperator("FlexibleTopK", ["X", "K"], ["V", "I"])
        with pytest.raises(Caffe2Error, match="k should not be greater than last dim, error at index 1, with value: 4"):
            run(op, [np.zeros((2, 3), np.float32), np.array([[1], [4]])])
        with pytest.raises(Caffe2Error, match="k should be greater than 0"):
            run(op, [np.zeros((2, 3), np.float32), np.array([[1], [0]])])

    @SETTINGS
    @given(seed_st)
    def test_remove_data_blocks_row_ops(self, seed):
        rng = np.random.default_rng(seed)
        data = rng.standard_normal((int(rng.integers(1, 6)), 2, 2)).astype(np.float32)
        idx = rng.integers(0, data.shape[0], size=rng.integers(0, 4)).astype(np.int64)
        self.check(core.CreateOperator("RemoveDataBlocks", ["D", "I"], ["O"]), [data, idx],
                   lambda d, i: d[[p for p in range(len(d)) if p not in set(i.tolist())]])
        w = rng.standard_normal(data.shape[0]).astype(np.float32)
        self.check(core.CreateOperator("RowMul", ["D", "W"], ["O"]), [data, w],
                   lambda d, ww: np.stack([row * s for row, s in zip(d, ww)]))
        self.check(core.CreateOperator("RowwiseMax", ["D"], ["O"]), [data],
                   lambda d: np.array([[max(row) for row in m] for m in d]))
        mat = rng.integers(0, 3, size=(int(rng.integers(0, 4)), 4)).astype(np.float32)
        self.check(core.CreateOperator("RowWiseArgMax", ["X"], ["O"]), [mat],
                   lambda x: np.array([[list(row).index(max(row))] for row in x], np.int32).reshape(-1, 1))

    def test_row_ops_edge_cases_and_errors(self):
        (out,) = run(core.CreateOperator("RowWiseArgMax", ["X"], ["O"]),
                     [np.array([[np.nan, 5, 1], [1, np.nan, 2]], np.float32)])
        np.testing.assert_array_equal(out, [[0], [2]])               # Caffe2's '>' loop skips NaN
        (out,) = run(core.CreateOperator("RemoveDataBlocks", ["D", "I"], ["O"]), [np.ones((2, 1)), np.array([])])
        np.testing.assert_array_equal(out, np.ones((2, 1)))     # empty INDICES of any type: a copy, as Caffe2
        with pytest.raises(Caffe2Error, match="The max index should be smaller than the data outer size."):
            run(core.CreateOperator("RemoveDataBlocks", ["D", "I"], ["O"]), [np.zeros((2, 1)), np.array([2])])
        with pytest.raises(Caffe2Error, match="Length of w should be equal to the first dim of mat"):
            run(core.CreateOperator("RowMul", ["D", "W"], ["O"]),
                [np.zeros((2, 1), np.float32), np.ones(3, np.float32)])

    def test_append_and_extend_tensor_in_place(self):
        workspace.ResetWorkspace()
        workspace.FeedBlob("A", np.zeros((0, 2), np.float32))
        workspace.FeedBlob("B", np.array([[1, 2], [3, 4]], np.float32))
        append = core.CreateOperator("Append", ["A", "B"], ["A"])
        workspace.RunOperatorOnce(append)
        workspace.RunOperatorOnce(append)
        np.testing.assert_array_equal(workspace.FetchBlob("A"), [[1, 2], [3, 4], [1, 2], [3, 4]])
        workspace.FeedBlob("C", np.ones((1, 3), np.float32))
        with pytest.raises(Caffe2Error, match="does not extend dataset"):
            workspace.RunOperatorOnce(core.CreateOperator("Append", ["A", "C"], ["A"]))
        with pytest.raises(Caffe2Error, match="must run in place"):
            workspace.RunOperatorOnce(core.CreateOperator("Append", ["A", "B"], ["X"]))

        workspace.FeedBlob("T", np.array([7, 8], np.int32))
        workspace.FeedBlob("I", np.array([1, 4], np.int32))
        workspace.RunOperatorOnce(core.CreateOperator("ExtendTensor", ["T", "I"], ["T"]))
        np.testing.assert_array_equal(workspace.FetchBlob("T"), [7, 8, 0, 0, 0])
        workspace.FeedBlob("I", np.array([0], np.int32))
        workspace.RunOperatorOnce(core.CreateOperator("ExtendTensor", ["T", "I"], ["T"]))
        assert workspace.FetchBlob("T").shape == (5,)

    def test_uniform_int_fill_range_and_reproducibility(self):
        op = _seeded("UniformIntFill", [], ["O"], 5, shape=[200, 3], min=-2, max=3)
        (a,) = run(op, [])
        (b,) = run(op, [])
        assert a.dtype == np.int32 and a.shape == (200, 3)
        assert set(np.unique(a).tolist()) == {-2, -1, 0, 1, 2, 3}    # both ends drawn
        np.testing.assert_array_equal(a, b)                          # same seed, same values
        (c,) = run(_seeded("UniformIntFill", ["S", "LO", "HI"], ["O"], 1, input_as_shape=1),
                   [np.array([4, 2], np.int64), np.array([7]), np.array([5])])
        assert c.shape == (0, 2)                                    # min > max: no rows
        with pytest.raises(Caffe2Error, match="(?i)max value.*should be bigger than min value"):
            run(core.CreateOperator("UniformIntFill", [], ["O"], shape=[2], min=3, max=3), [])

    @SETTINGS
    @given(seed_st, st.sampled_from([caffe2_pb2.TensorProto.INT32, caffe2_pb2.TensorProto.INT64]))
    def test_unique_uniform_fill(self, seed, dtype):
        rng = np.random.default_rng(seed)
        avoid = rng.integers(0, 20, size=6).astype(np.int32 if dtype == caffe2_pb2.TensorProto.INT32 else np.int64)
        op = _seeded("UniqueUniformFill", ["S", "A"], ["O"], seed % 1000, min=0, max=19, dtype=dtype)
        (out,) = run(op, [np.zeros((3, 2)), avoid])
        assert out.shape == (3, 2) and out.dtype == avoid.dtype
        flat = out.reshape(-1).tolist()
        assert len(set(flat)) == 6 and all(0 <= v <= 19 for v in flat)
        assert not set(flat) & set(avoid.tolist())
        with pytest.raises(Caffe2Error, match="do not fit"):
            run(core.CreateOperator("UniqueUniformFill", ["S", "A"], ["O"], min=0, max=5),
                [np.zeros(5), np.array([0, 1], np.int32)])

    def test_range_fill(self):
        (out,) = run(core.CreateOperator("RangeFill", [], ["O"], shape=[2, 3]), [])
        np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3))
        (out,) = run(core.CreateOperator("RangeFill", ["X"], ["O"], extra_shape=[2]), [np.zeros(2)])
        np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32).reshape(2, 2))

    def test_weighted_sample_frequencies_values_and_zero_weights(self):
        weights = np.tile(np.array([[0.0, 1.0, 3.0, 0.0]], np.float32), (4000, 1))
        values = np.tile(np.array([[10, 11, 12, 13]], np.float32), (4000, 1))
        idx, picked = run(_seeded("WeightedSample", ["W", "V"], ["I", "P"], 3), [weights, values])
        assert idx.dtype == np.int32 and idx.shape == (4000,)
        assert set(idx.tolist()) <= {1, 2}                            # zero weights are never drawn
        assert abs((idx == 2).mean() - 0.75) < 0.03                   # 3 : 1
        np.testing.assert_array_equal(picked, idx + 10)
        (empty,) = run(core.CreateOperator("WeightedSample", ["W"], ["I"]), [np.zeros((0, 3), np.float32)])
        assert empty.shape == (0,)
        with pytest.raises(Caffe2Error, match="must have the same dimensions"):
            run(core.CreateOperator("WeightedSample", ["W", "V"], ["I", "P"]), [weights, values[:, :3]])

    def test_weighted_multi_sampling(self):
        cdf = np.array([0.2, 0.5, 0.5, 1.5], np.float32)          # probabilities .2/1.5, .3/1.5, 0, 1/1.5
        (idx,) = run(_seeded("WeightedMultiSampling", ["C"], ["I"], 9, num_samples=6000), [cdf])
        assert idx.dtype == np.int32 and idx.shape == (6000,)
        freq = np.bincount(idx, minlength=4) / 6000
        np.testing.assert_allclose(freq, [0.2 / 1.5, 0.3 / 1.5, 0, 1 / 1.5], atol=0.03)
        (shaped,) = run(core.CreateOperator("WeightedMultiSampling", ["C", "S"], ["I"]), [cdf, np.zeros((2, 3))])
        assert shaped.shape == (2, 3)
        with pytest.raises(Caffe2Error, match="do not pass in the argument `num_samples`"):
            run(core.CreateOperator("WeightedMultiSampling", ["C", "S"], ["I"], num_samples=3), [cdf, np.zeros(2)])

    def _sort_and_shuffle(self, keys, values, seed=None, **kwargs):
        workspace.ResetWorkspace()
        workspace.RunOperatorOnce(core.CreateOperator("CreateTreeCursor", [], ["cursor"],
                                                      fields=["key", "v:lengths", "v:values"]))
        workspace.FeedBlob("key", keys)
        workspace.FeedBlob("v:lengths", np.ones(keys.size, np.int32))
        workspace.FeedBlob("v:values", values)
        op = core.CreateOperator("SortAndShuffle", ["cursor", "key", "v:lengths", "v:values"], ["order"], **kwargs)
        if seed is not None:
            op.device_option.random_seed = seed
        workspace.RunOperatorOnce(op)
        return workspace.FetchBlob("order")

    def test_sort_and_shuffle(self):
        rng = np.random.default_rng(5)
        keys = rng.permutation(23).astype(np.int32)
        values = np.arange(23, dtype=np.float32)
        sorted_records = np.argsort(keys, kind="stable")

        plain = self._sort_and_shuffle(keys, values, sort_by_field_idx=0)      # batch 1, shuffle 1
        assert plain.dtype == np.int64
        assert sorted(plain.tolist()) == list(range(23))

        out = self._sort_and_shuffle(keys, values, sort_by_field_idx=0, batch_size=3, shuffle_size=2)
        np.testing.assert_array_equal(np.sort(out), np.arange(23))
        np.testing.assert_array_equal(out[21:], sorted_records[21:])          # the partial batch stays last
        chunk_of = {int(r): i // 6 for i, r in enumerate(sorted_records[:18])}  # chunks before the last record
        for b in range(7):
            batch = out[3 * b:3 * b + 3]
            if int(batch[0]) in chunk_of:          # a batch never mixes records of two shuffle chunks
                assert {chunk_of.get(int(r)) for r in batch} == {chunk_of[int(batch[0])]}
        again = self._sort_and_shuffle(keys, values, sort_by_field_idx=0, batch_size=3, shuffle_size=2)
        np.testing.assert_array_equal(out, again)                              # same order every run (Caffe2)
        other = self._sort_and_shuffle(keys, values, seed=11, sort_by_field_idx=0, batch_size=3, shuffle_size=2)
        assert sorted(other.tolist()) == list(range(23)) and not np.array_equal(other, out)

        unsorted = self._sort_and_shuffle(keys, values, sort_by_field_idx=-1, batch_size=23)
        np.testing.assert_array_equal(unsorted, np.arange(23))                # one batch, no sort: identity

    def test_sort_and_shuffle_errors(self):
        keys, values = np.arange(4, dtype=np.int32), np.zeros(4, np.float32)
        with pytest.raises(Caffe2Error, match="must sort by a field at the root level"):
            self._sort_and_shuffle(keys, values, sort_by_field_idx=2)
        with pytest.raises(Caffe2Error, match="batch_size and shuffle_size must be > 0"):
            self._sort_and_shuffle(keys, values, batch_size=0)
        with pytest.raises(Caffe2Error, match="must be a TreeCursor"):
            run(core.CreateOperator("SortAndShuffle", ["c", "k"], ["o"]), [np.zeros(2), keys])

    def test_dataset_random_reader_sorts_and_shuffles(self):
        """Caffe2's Python dataset API: random_reader + sort_and_shuffle + ReadRandomBatch
        read every record once, each batch from one shuffle chunk of the sorted records."""
        from caffe2py import dataset, schema
        ds = dataset.Dataset(schema.from_column_list(["key", "ids:lengths", "ids:values"]))
        init = core.Net("init")
        ds.init_empty(init)
        workspace.ResetWorkspace()
        workspace.RunNetOnce(init)
        keys = np.array([5, 3, 9, 1, 7, 2, 8, 0], np.int32)
        lengths = np.array([1, 2, 0, 1, 3, 1, 0, 2], np.int32)
        values = np.arange(int(lengths.sum()), dtype=np.int64)
        for blob, value in zip(ds.get_blobs(), (keys, lengths, values)):
            workspace.FeedBlob(str(blob), value)
        reader_init = core.Net("reader_init")
        reader = ds.random_reader(reader_init, batch_size=2)
        reader.sort_and_shuffle(reader_init, sort_by_field="key", shuffle_size=2, batch_size=2)
        reader.computeoffset(reader_init)
        workspace.RunNetOnce(reader_init)
        read = core.Net("read")
        should_stop, fields = reader.read(read)
        workspace.CreateNet(read)
        got_keys, got_values = [], []
        for _ in range(10):
            workspace.RunNet(read.Name())
            if bool(workspace.FetchBlob(str(should_stop))):
                break
            got_keys.append(workspace.FetchBlob(str(fields[0])))
            got_values.append(workspace.FetchBlob(str(fields[2])))
        assert sorted(np.concatenate(got_keys).tolist()) == sorted(keys.tolist())
        starts = np.concatenate(([0], np.cumsum(lengths)))
        by_key = {int(k): values[starts[i]:starts[i + 1]].tolist() for i, k in enumerate(keys)}
        chunk = {int(k): rank // 4 for rank, k in enumerate(np.sort(keys))}      # chunks of 2 x 2 sorted records
        for batch_keys, batch_values in zip(got_keys, got_values):
            assert sum((by_key[int(k)] for k in batch_keys), []) == batch_values.tolist()
            assert len({chunk[int(k)] for k in batch_keys}) == 1
