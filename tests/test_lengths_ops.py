"""Segment encodings and sharding against NumPy references written here:
LengthsToSegmentIds/Ranges/Shape/Weights, SegmentIdsToLengths/Ranges, LengthsTile,
LengthsGather, Partition, Sharding, LengthsPartition, GatherByKey."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run

lengths_st = st.lists(st.integers(0, 5), min_size=0, max_size=8).map(lambda v: np.array(v, np.int32))


def _segment_ids(lengths):
    return np.array([i for i, n in enumerate(lengths) for _ in range(n)], np.int32)


def _partition_reference(keys, extras, parts, pack):
    outs = []
    for j in range(parts):
        sel = [p for p, k in enumerate(keys.reshape(-1)) if k % parts == j]     # Python's % is non-negative
        main = keys.reshape(-1)[sel]
        outs.append((main - j) // parts if pack else main)
        for x in extras:
            outs.append(x.reshape((keys.size,) + x.shape[keys.ndim:])[sel])
    return outs


class TestLengthsOps(ReferenceTestCase):
    @SETTINGS
    @given(lengths_st)
    def test_lengths_conversions(self, lengths):
        self.check(core.CreateOperator("LengthsToSegmentIds", ["L"], ["O"]), [lengths], _segment_ids)

        def ranges(lens):
            starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(lens) else np.zeros(0, np.int64)
            return np.stack([starts, lens], axis=1).astype(np.int32).reshape(-1, 2)
        out = self.check(core.CreateOperator("LengthsToRanges", ["L"], ["O"]), [lengths], ranges)
        assert out[0].dtype == np.int32

        for power in (0.5, 1.0, 2.0):
            def weights(lens, p=power):
                return np.array([1.0 / n ** p for n in lens for _ in range(n)], np.float64)
            self.check(core.CreateOperator("LengthsToWeights", ["L"], ["O"], power=power), [lengths],
                       weights, threshold=1e-6)

    @SETTINGS
    @given(lengths_st, st.integers(0, 3))
    def test_segment_ids_to_lengths_and_ranges(self, lengths, extra):
        ids = _segment_ids(lengths)
        k = len(lengths) + extra                  # trailing empty segments only through input 1

        def to_lengths(i, data=None):
            n = data.shape[0] if data is not None else (int(i[-1]) + 1 if i.size else 0)
            return np.array([(i == s).sum() for s in range(n)], np.int32)

        def to_ranges(i, data=None):
            n = data.shape[0] if data is not None else (int(i[-1]) + 1 if i.size else 0)
            out = np.zeros((n, 2), np.int32)
            first = int(i[0]) if i.size else 0
            for s in range(n):
                out[s, 1] = (i == s).sum()
                if i.size and first < s <= i[-1]:
                    out[s, 0] = int(np.searchsorted(i, s))       # where Caffe2's walk meets segment s
            return out
        self.check(core.CreateOperator("SegmentIdsToLengths", ["I"], ["O"]), [ids], to_lengths)
        self.check(core.CreateOperator("SegmentIdsToRanges", ["I"], ["O"]), [ids], to_ranges)
        if k >= (int(ids[-1]) + 1 if ids.size else 0):
            data = np.zeros((k, 2), np.float32)
            out = self.check(core.CreateOperator("SegmentIdsToLengths", ["I", "D"], ["O"]), [ids, data],
                             to_lengths)
            np.testing.assert_array_equal(out[0][:len(lengths)], lengths)       # inverse of LengthsToSegmentIds
            self.check(core.CreateOperator("SegmentIdsToRanges", ["I", "D"], ["O"]), [ids, data],
                       to_ranges)

    def test_segment_ids_to_ranges_with_a_gap_and_doc_examples(self):
        (out,) = run(core.CreateOperator("SegmentIdsToRanges", ["I"], ["O"]), [np.array([0, 0, 2, 2, 2])])
        np.testing.assert_array_equal(out, [[0, 2], [2, 0], [2, 3]])
        (out,) = run(core.CreateOperator("LengthsToShape", ["L"], ["O"]), [np.full(10, 2, np.int32)])
        np.testing.assert_array_equal(out, [10, 2])
        (out,) = run(core.CreateOperator("LengthsToSegmentIds", ["L"], ["O"]), [np.array([1, 3, 0, 2], np.int32)])
        np.testing.assert_array_equal(out, [0, 1, 1, 1, 3, 3])

    def test_conversion_errors(self):
        with pytest.raises(Caffe2Error, match="Segment ids must be sorted: 2 vs 1"):
            run(core.CreateOperator("SegmentIdsToLengths", ["I"], ["O"]), [np.array([0, 2, 1])])
        with pytest.raises(Caffe2Error, match="should \\*NOT\\* be larger"):
            run(core.CreateOperator("SegmentIdsToLengths", ["I", "D"], ["O"]), [np.array([0, 3]), np.zeros(2)])
        with pytest.raises(Caffe2Error, match="All elements of input must be same"):
            run(core.CreateOperator("LengthsToShape", ["L"], ["O"]), [np.array([2, 3], np.int32)])
        with pytest.raises(Caffe2Error, match="negative length"):
            run(core.CreateOperator("LengthsToSegmentIds", ["L"], ["O"]), [np.array([2, -1], np.int32)])

    @SETTINGS
    @given(lengths_st, st.integers(0, 2 ** 31 - 1))
    def test_lengths_tile_and_gather(self, lengths, seed):
        rng = np.random.default_rng(seed)
        data = rng.standard_normal((len(lengths), 3)).astype(np.float32)

        def tile(d, lens):
            return np.array([row for row, n in zip(d, lens) for _ in range(n)], np.float32).reshape(-1, 3)
        self.check(core.CreateOperator("LengthsTile", ["D", "L"], ["O"]), [data, lengths], tile)

        items = rng.integers(0, 100, size=(int(lengths.sum()), 2)).astype(np.int64)
        indices = rng.integers(0, max(len(lengths), 1), size=rng.integers(0, 6)).astype(np.int64) \
            if len(lengths) else np.zeros(0, np.int64)

        def gather(it, lens, idx):
            starts = np.concatenate(([0], np.cumsum(lens)))
            parts = [it[starts[i]:starts[i + 1]] for i in idx]
            return np.concatenate(parts, axis=0) if parts else np.zeros((0, 2), np.int64)
        self.check(core.CreateOperator("LengthsGather", ["I", "L", "X"], ["O"]), [items, lengths, indices],
                   gather)

    def test_lengths_gather_doc_example_and_errors(self):
        items, lengths = np.arange(10), np.array([0, 2, 3, 1, 4], np.int32)
        (out,) = run(core.CreateOperator("LengthsGather", ["I", "L", "X"], ["O"]),
                     [items, lengths, np.array([0, 2, 4])])
        np.testing.assert_array_equal(out, [2, 3, 4, 6, 7, 8, 9])
        with pytest.raises(Caffe2Error, match="blob 'X': index 5 is out of range"):
            run(core.CreateOperator("LengthsGather", ["I", "L", "X"], ["O"]), [items, lengths, np.array([5])])
        with pytest.raises(Caffe2Error, match="LENGTHS must match the first dimension of ITEMS"):
            run(core.CreateOperator("LengthsGather", ["I", "L", "X"], ["O"]), [items[:9], lengths, np.array([0])])

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.integers(1, 4), st.booleans())
    def test_partition_and_gather_by_key(self, seed, parts, pack):
        rng = np.random.default_rng(seed)
        keys = rng.integers(-20, 40, size=rng.integers(0, 12)).astype(np.int64)
        values = rng.standard_normal((keys.size, 2)).astype(np.float32)
        names = ["K_%d" % j if i == 0 else "V_%d" % j for j in range(parts) for i in range(2)]
        op = core.CreateOperator("Partition", ["K", "V"], names, pack_first_input=int(pack))
        outs = self.check(op, [keys, values], lambda k, v: _partition_reference(k, [v], parts, pack))
        back = core.CreateOperator("GatherByKey", ["K"] + ["S%d" % j for j in range(parts)], ["O"])
        self.check(back, [keys] + outs[1::2], lambda k, *shards: values)   # inverse of Partition

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.integers(1, 4), st.integers(1, 3), st.booleans())
    def test_sharding_outputs_input_major(self, seed, parts, n_inputs, pack):
        # Caffe2's first name of Partition: output i * parts + j is input i's shard j
        # (one input and one part included: the only output is the whole input).
        rng = np.random.default_rng(seed)
        keys = rng.integers(-20, 40, size=(rng.integers(0, 4), 3)).astype(np.int32)
        extras = [rng.standard_normal(keys.shape + (2,) * k).astype(np.float32) for k in range(1, n_inputs)]
        names = ["in%d_p%d" % (i, j) for i in range(n_inputs) for j in range(parts)]
        op = core.CreateOperator("Sharding", ["in%d" % i for i in range(n_inputs)], names,
                                 pack_first_input=int(pack))

        def ref(k, *xs):
            by_part = _partition_reference(k, xs, parts, pack)
            return [by_part[j * n_inputs + i] for i in range(n_inputs) for j in range(parts)]
        outs = run(op, [keys] + extras)
        for got, want in zip(outs, ref(keys, *extras)):
            np.testing.assert_array_equal(got, want)
            self.assertEqual(got.shape, want.shape)
            self.assertEqual(got.dtype, want.dtype)

    def test_partition_single_output_keeps_shape(self):
        keys = np.array([[4, -3], [7, 0]], np.int64)
        for op_type in ("Partition", "Sharding"):
            (out,) = run(core.CreateOperator(op_type, ["K"], ["O"], pack_first_input=1), [keys])
            np.testing.assert_array_equal(out, keys.reshape(-1))
            self.assertEqual(out.shape, (4,))

    def test_sharding_errors(self):
        with pytest.raises(Caffe2Error, match="Prefix of extra input's shape must match"):
            run(core.CreateOperator("Sharding", ["K", "V"], ["a", "b"]), [np.arange(3), np.zeros(2)])
        with pytest.raises(Caffe2Error, match="not a valid combination"):
            run(core.CreateOperator("Sharding", ["K", "V"], ["a", "b", "c"]), [np.arange(3), np.zeros(3)])
        with pytest.raises(Caffe2Error, match="input 0 must be int32 or int64"):
            run(core.CreateOperator("Sharding", ["K"], ["a", "b"]), [np.zeros(3, np.float32)])
        with pytest.raises(Caffe2Error, match="Only primitive types are supported"):
            run(core.CreateOperator("Sharding", ["K", "V"], ["a", "b"]),
                [np.arange(2), np.array(["x", "y"], dtype=object)])

    @SETTINGS
    @given(lengths_st, st.integers(1, 3), st.integers(0, 2 ** 31 - 1))
    def test_lengths_partition(self, lengths, parts, seed):
        rng = np.random.default_rng(seed)
        keys = rng.integers(-9, 30, size=int(lengths.sum())).astype(np.int32)
        extra = rng.standard_normal(keys.size).astype(np.float32)

        def ref(lens, k, x):
            seg = _segment_ids(lens)
            outs = []
            for j in range(parts):
                sel = np.array([p for p in range(k.size) if k[p] % parts == j], np.int64)
                outs.append(np.array([(seg[sel] == s).sum() for s in range(len(lens))], np.int32))
                outs.append(k[sel])
                outs.append(x[sel])
            return outs
        names = ["%s_%d" % (n, j) for j in range(parts) for n in ("L", "K", "X")]
        self.check(core.CreateOperator("LengthsPartition", ["L", "K", "X"], names),
                   [lengths, keys, extra], ref)

    def test_partition_errors(self):
        with pytest.raises(Caffe2Error, match="Prefix of extra input's shape must match"):
            run(core.CreateOperator("Partition", ["K", "V"], ["a", "b", "c", "d"]), [np.arange(3), np.zeros(2)])
        with pytest.raises(Caffe2Error, match="not a valid combination"):
            run(core.CreateOperator("Partition", ["K", "V"], ["a", "b", "c"]), [np.arange(3), np.zeros(3)])
        with pytest.raises(Caffe2Error, match="shard 0 holds 1 rows but KEYS map 2"):
            run(core.CreateOperator("GatherByKey", ["K", "A", "B"], ["O"]),
                [np.array([0, 2, 1]), np.zeros(1), np.zeros(2)])
