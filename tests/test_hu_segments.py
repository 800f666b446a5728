"""Segment reductions (Sorted / Unsorted / Sparse / SortedSegmentRange) and the segment
and lengths bookkeeping ops (SegmentIdsTo*, LengthsTo*, LengthsGather, LengthsPartition,
SegmentOneHot, BooleanMaskLengths, BooleanUnmask) with hypothesis_test_util, against
NumPy loops written here from Caffe2's definitions. Draws cover empty inputs, empty
segments (zero lengths, unsorted ids with unused values, gaps where the op allows them:
the Sorted* reducers, like Caffe2's, require ids 0..K-1 without gaps) and unsorted,
repeated ids."""
import caffe2py.compat  # noqa: F401  (the caffe2.python aliases)

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from caffe2.python import core, workspace  # noqa: F401
import caffe2.python.hypothesis_test_util as hu

from caffe2py.errors import Caffe2Error

SETTINGS = settings(max_examples=10, deadline=None)


def _reduce_rows(rows, kind):
    """One segment's reduction over its (already scaled) rows; empty gives zeros."""
    if rows.shape[0] == 0:
        return np.zeros(rows.shape[1:])
    rows = rows.astype(np.float64)
    if kind in ("Sum", "WeightedSum"):
        return rows.sum(0)
    if kind == "Mean":
        return rows.mean(0)
    if kind == "Max":
        return rows.max(0)
    if kind == "LogSumExp":
        top = rows.max(0)
        return top + np.log(np.exp(rows - top).sum(0))
    if kind == "LogMeanExp":
        top = rows.max(0)
        return top + np.log(np.exp(rows - top).mean(0))
    raise AssertionError(kind)


def segment_ref(data, ids, num_segments, kind, weights=None):
    out = np.zeros((num_segments,) + data.shape[1:])
    for k in range(num_segments):
        rows = data[ids == k].astype(np.float64)
        if weights is not None:
            rows = rows * weights[ids == k].reshape((-1,) + (1,) * (data.ndim - 1))
        out[k] = _reduce_rows(rows, kind)
    return out.astype(data.dtype)


@st.composite
def sorted_ids_with_gaps(draw, n):
    """Sorted ids starting anywhere in [0, 2], growing by 0, 1 or 2 (2 leaves an empty
    segment): what SegmentIdsToLengths / SegmentIdsToRanges accept."""
    if n == 0:
        return np.empty(0, np.int32)
    steps = draw(st.lists(st.integers(0, 2), min_size=n - 1, max_size=n - 1))
    return np.cumsum([draw(st.integers(0, 2))] + steps).astype(np.int32)


@st.composite
def contiguous_ids(draw, n):
    """Sorted ids 0..K-1 without gaps (what the SortedSegmentRange ops require)."""
    if n == 0:
        return np.empty(0, np.int32)
    steps = draw(st.lists(st.integers(0, 1), min_size=n - 1, max_size=n - 1))
    return np.cumsum([0] + steps).astype(np.int32)


def _data(draw, n, lo=-2.0, hi=2.0):
    inner = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    rng = np.random.default_rng(draw(st.integers(0, 10 ** 6)))
    return rng.uniform(lo, hi, [n] + inner).astype(np.float32)


class TestSortedSegments(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 8), kind=st.sampled_from(["Sum", "Mean"]), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_sorted_segment(self, n, kind, data, gc, dc):
        X = _data(data.draw, n)
        ids = data.draw(contiguous_ids(n))
        K = int(ids[-1]) + 1 if n else 0
        op_type = {"Sum": "SortedSegmentSum", "Mean": "SortedSegmentMean"}[kind]
        op = core.CreateOperator(op_type, ["DATA", "SEGMENT_IDS"], ["OUT"])
        self.assertReferenceChecks(gc, op, [X, ids], lambda X, ids: (segment_ref(X, ids, K, kind),))

    @given(n=st.integers(0, 8), kind=st.sampled_from(["Sum", "Mean", "WeightedSum"]), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_sparse_sorted_segment(self, n, kind, data, gc, dc):
        X = _data(data.draw, data.draw(st.integers(1, 5)))
        indices = np.array(data.draw(st.lists(st.integers(0, X.shape[0] - 1), min_size=n, max_size=n)), np.int64)
        ids = data.draw(contiguous_ids(n))
        w = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
        K = int(ids[-1]) + 1 if n else 0
        op_type = "SparseSortedSegment" + kind
        if kind == "WeightedSum":
            op = core.CreateOperator(op_type, ["DATA", "SCALARS", "INDICES", "SEGMENT_IDS"], ["OUT"])
            self.assertReferenceChecks(gc, op, [X, w, indices, ids],
                                       lambda X, w, i, s: (segment_ref(X[i], s, K, kind, w),))
        else:
            op = core.CreateOperator(op_type, ["DATA", "INDICES", "SEGMENT_IDS"], ["OUT"])
            self.assertReferenceChecks(gc, op, [X, indices, ids], lambda X, i, s: (segment_ref(X[i], s, K, kind),))

    @given(n=st.integers(0, 8), kind=st.sampled_from(["Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"]),
           data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_sorted_segment_range(self, n, kind, data, gc, dc):
        X = _data(data.draw, n)
        ids = data.draw(contiguous_ids(n))
        K = int(ids[-1]) + 1 if n else 0
        op = core.CreateOperator("SortedSegmentRange" + kind, ["DATA", "SEGMENT_IDS"], ["OUT"])
        self.assertReferenceChecks(gc, op, [X, ids], lambda X, ids: (segment_ref(X, ids, K, kind),))

    def test_named_range_ops(self):
        # each range op by its literal name, on ids with a repeated run
        X = np.array([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]], np.float32)
        ids = np.array([0, 0, 1], np.int32)
        for op_type, kind in (("SortedSegmentRangeSum", "Sum"), ("SortedSegmentRangeMean", "Mean"),
                              ("SortedSegmentRangeMax", "Max"), ("SortedSegmentRangeLogSumExp", "LogSumExp"),
                              ("SortedSegmentRangeLogMeanExp", "LogMeanExp")):
            op = core.CreateOperator(op_type, ["DATA", "SEGMENT_IDS"], ["OUT"])
            self.assertReferenceChecks(hu.cpu_do, op, [X, ids],
                                       lambda X, ids, kind=kind: (segment_ref(X, ids, 2, kind),))

    def test_named_sparse_sorted_ops(self):
        X = np.array([[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]], np.float32)
        idx = np.array([2, 2, 0, 1], np.int64)                    # a repeated row
        ids = np.array([0, 0, 1, 1], np.int32)
        w = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
        cases = (("SparseSortedSegmentSum", [X, idx, ids], segment_ref(X[idx], ids, 2, "Sum")),
                 ("SparseSortedSegmentMean", [X, idx, ids], segment_ref(X[idx], ids, 2, "Mean")),
                 ("SparseSortedSegmentWeightedSum", [X, w, idx, ids], segment_ref(X[idx], ids, 2, "Sum", w)))
        for op_type, inputs, want in cases:
            names = ["DATA", "SCALARS", "INDICES", "SEGMENT_IDS"] if len(inputs) == 4 else \
                ["DATA", "INDICES", "SEGMENT_IDS"]
            self.assertReferenceChecks(hu.cpu_do, core.CreateOperator(op_type, names, ["OUT"]), inputs,
                                       lambda *a, want=want: (want,))

    def test_range_ops_refuse_gaps_and_disorder(self):
        X = np.ones((3, 2), np.float32)
        for ids in (np.array([0, 2, 2], np.int32), np.array([1, 0, 0], np.int32)):
            self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("SortedSegmentRangeSum", ["D", "S"], ["O"]),
                                   [X, ids], exception=Caffe2Error, regexp="SortedSegmentRangeSum")

    def test_sorted_segment_refuses_gaps_and_disorder(self):
        # Caffe2's sorted reducers enforce ids 0..K-1 without gaps (first id 0)
        for ids in (np.array([0, 2, 1], np.int32), np.array([0, 0, 2], np.int32), np.array([1, 1, 2], np.int32)):
            for op_type in ("SortedSegmentSum", "SortedSegmentMean"):
                self.assertRunOpRaises(hu.cpu_do, core.CreateOperator(op_type, ["D", "S"], ["O"]),
                                       [np.ones((3, 2), np.float32), ids], exception=Caffe2Error, regexp=op_type)

    def test_gradients(self):
        rng = np.random.default_rng(11)
        X = rng.uniform(-1, 1, (5, 2)).astype(np.float32)
        ids = np.array([0, 0, 1, 2, 2], np.int32)
        for op_type in ("SortedSegmentSum", "SortedSegmentMean", "SortedSegmentRangeSum",
                        "SortedSegmentRangeMean", "SortedSegmentRangeLogSumExp", "SortedSegmentRangeLogMeanExp"):
            op = core.CreateOperator(op_type, ["DATA", "SEGMENT_IDS"], ["OUT"])
            self.assertGradientChecks(hu.cpu_do, op, [X, ids], 0, [0])
        spread = (rng.permutation(10).astype(np.float32) * 0.3).reshape(5, 2)
        op = core.CreateOperator("SortedSegmentRangeMax", ["DATA", "SEGMENT_IDS"], ["OUT"])
        self.assertGradientChecks(hu.cpu_do, op, [spread, np.array([0, 0, 1, 2, 2], np.int32)], 0, [0])
        idx, seg = np.array([4, 0, 4], np.int32), np.array([0, 1, 1], np.int32)     # row 4 twice
        w = np.array([0.5, -1.5, 2.0], np.float32)
        for op_type in ("SparseSortedSegmentSum", "SparseSortedSegmentMean"):
            op = core.CreateOperator(op_type, ["DATA", "INDICES", "SEGMENT_IDS"], ["OUT"])
            self.assertGradientChecks(hu.cpu_do, op, [X, idx, seg], 0, [0])
        op = core.CreateOperator("SparseSortedSegmentWeightedSum", ["DATA", "SCALARS", "INDICES", "SEGMENT_IDS"],
                                 ["OUT"])
        self.assertGradientChecks(hu.cpu_do, op, [X, w, idx, seg], 0, [0])


class TestUnsortedSegments(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 8), kind=st.sampled_from(["Sum", "Mean", "WeightedSum"]), extra=st.integers(0, 2),
           explicit=st.booleans(), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_unsorted_segment(self, n, kind, extra, explicit, data, gc, dc):
        X = _data(data.draw, n)
        ids = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.int32)  # any order, repeats
        w = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
        K = (int(ids.max()) + 1 if n else 0) + (extra if explicit else 0)
        args = {"num_segments": K} if explicit else {}
        if kind == "WeightedSum":
            op = core.CreateOperator("UnsortedSegmentWeightedSum", ["DATA", "SCALARS", "SEGMENT_IDS"], ["OUT"], **args)
            self.assertReferenceChecks(gc, op, [X, w, ids], lambda X, w, s: (segment_ref(X, s, K, kind, w),))
        else:
            op = core.CreateOperator("UnsortedSegment" + kind, ["DATA", "SEGMENT_IDS"], ["OUT"], **args)
            self.assertReferenceChecks(gc, op, [X, ids], lambda X, s: (segment_ref(X, s, K, kind),))

    @given(n=st.integers(0, 8), kind=st.sampled_from(["Mean", "WeightedSum"]), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_sparse_unsorted_segment(self, n, kind, data, gc, dc):
        X = _data(data.draw, data.draw(st.integers(1, 5)))
        indices = np.array(data.draw(st.lists(st.integers(0, X.shape[0] - 1), min_size=n, max_size=n)), np.int32)
        ids = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.int32)
        w = np.random.default_rng(n + 1).uniform(-1, 1, n).astype(np.float32)
        K = int(ids.max()) + 1 if n else 0
        if kind == "WeightedSum":
            op = core.CreateOperator("SparseUnsortedSegmentWeightedSum",
                                     ["DATA", "SCALARS", "INDICES", "SEGMENT_IDS"], ["OUT"])
            self.assertReferenceChecks(gc, op, [X, w, indices, ids],
                                       lambda X, w, i, s: (segment_ref(X[i], s, K, kind, w),))
        else:
            op = core.CreateOperator("SparseUnsortedSegmentMean", ["DATA", "INDICES", "SEGMENT_IDS"], ["OUT"])
            self.assertReferenceChecks(gc, op, [X, indices, ids], lambda X, i, s: (segment_ref(X[i], s, K, kind),))

    def test_unsorted_segment_sum_by_name(self):
        X = np.arange(8, dtype=np.float32).reshape(4, 2)
        ids = np.array([2, 0, 2, 2], np.int32)
        op = core.CreateOperator("UnsortedSegmentSum", ["DATA", "SEGMENT_IDS"], ["OUT"])
        self.assertReferenceChecks(hu.cpu_do, op, [X, ids], lambda X, s: (segment_ref(X, s, 3, "Sum"),))

    def test_gradients(self):
        X = np.random.default_rng(12).uniform(-1, 1, (5, 2)).astype(np.float32)
        ids = np.array([3, 0, 3, 1, 0], np.int32)
        for op_type in ("UnsortedSegmentSum", "UnsortedSegmentMean"):
            self.assertGradientChecks(hu.cpu_do, core.CreateOperator(op_type, ["DATA", "SEGMENT_IDS"], ["OUT"]),
                                      [X, ids], 0, [0])
        w = np.array([0.5, -1.0, 2.0, 1.5, 0.25], np.float32)
        op = core.CreateOperator("UnsortedSegmentWeightedSum", ["DATA", "SCALARS", "SEGMENT_IDS"], ["OUT"])
        self.assertGradientChecks(hu.cpu_do, op, [X, w, ids], 0, [0])
        idx = np.array([1, 4, 1], np.int64)
        sparse_ids = np.array([2, 0, 2], np.int32)
        op = core.CreateOperator("SparseUnsortedSegmentMean", ["DATA", "INDICES", "SEGMENT_IDS"], ["OUT"])
        self.assertGradientChecks(hu.cpu_do, op, [X, idx, sparse_ids], 0, [0])
        op = core.CreateOperator("SparseUnsortedSegmentWeightedSum", ["DATA", "SCALARS", "INDICES", "SEGMENT_IDS"],
                                 ["OUT"])
        self.assertGradientChecks(hu.cpu_do, op, [X, w[:3], idx, sparse_ids], 0, [0])

    def test_bad_ids_are_named(self):
        X = np.ones((3, 2), np.float32)
        for ids, args in ((np.array([0, -1, 1], np.int32), {}), (np.array([0, 4, 1], np.int32), {"num_segments": 3})):
            self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("UnsortedSegmentSum", ["D", "S"], ["O"], **args),
                                   [X, ids], exception=Caffe2Error, regexp="UnsortedSegmentSum")
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("SparseUnsortedSegmentMean", ["D", "I", "S"], ["O"]),
                               [X, np.array([0, 3], np.int32), np.array([0, 0], np.int32)],
                               exception=Caffe2Error, regexp="SparseUnsortedSegmentMean")


def ids_to_ranges_ref(ids, K):
    """Caffe2's SegmentIdsToRanges: lengths counted; a start is written when the id
    steps past a segment, so segments before the first id or after the last start at 0."""
    out = np.zeros((K, 2), np.int32)
    if len(ids) == 0:
        return out
    prev = int(ids[0])
    for i, s in enumerate(ids):
        while prev != s:
            prev += 1
            out[prev, 0] = i
        out[s, 1] += 1
    return out


class TestSegmentBookkeeping(hu.HypothesisTestCase):
    assert_shape_inference = True

    @given(n=st.integers(0, 8), with_data=st.booleans(), extra=st.integers(0, 2), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_segment_ids_to_lengths_and_ranges(self, n, with_data, extra, data, gc, dc):
        ids = data.draw(sorted_ids_with_gaps(n))
        K = (int(ids[-1]) + 1 if n else 0) + (extra if with_data else 0)
        inputs = [ids, np.zeros((K, 2), np.float32)] if with_data else [ids]
        names = ["ids", "data"][:len(inputs)]
        op = core.CreateOperator("SegmentIdsToLengths", names, ["lengths"])
        self.assertReferenceChecks(gc, op, inputs,
                                   lambda ids, *d: (np.bincount(ids, minlength=K).astype(np.int32)[:K],))
        op = core.CreateOperator("SegmentIdsToRanges", names, ["ranges"])
        self.assertReferenceChecks(gc, op, inputs, lambda ids, *d: (ids_to_ranges_ref(ids, K),))

    def test_segment_ids_must_be_sorted(self):
        for op_type in ("SegmentIdsToLengths", "SegmentIdsToRanges"):
            self.assertRunOpRaises(hu.cpu_do, core.CreateOperator(op_type, ["ids"], ["out"]),
                                   [np.array([0, 2, 1], np.int32)], exception=Caffe2Error, regexp=op_type)

    @given(lengths=st.lists(st.integers(0, 4), min_size=0, max_size=6), dtype=st.sampled_from([np.int32, np.int64]),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_lengths_to_ranges(self, lengths, dtype, gc, dc):
        L = np.array(lengths, dtype)
        op = core.CreateOperator("LengthsToRanges", ["L"], ["R"])
        self.assertReferenceChecks(
            gc, op, [L], lambda L: (np.stack([np.cumsum(L) - L, L], axis=1).astype(dtype).reshape(len(L), 2),))

    @given(count=st.integers(1, 5), length=st.integers(0, 4), **hu.gcs_cpu_only)
    @SETTINGS
    def test_lengths_to_shape(self, count, length, gc, dc):
        op = core.CreateOperator("LengthsToShape", ["L"], ["S"])
        self.assertReferenceChecks(gc, op, [np.full(count, length, np.int32)],
                                   lambda L: (np.array([count, length], np.int32),))

    def test_lengths_to_shape_needs_equal_lengths(self):
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("LengthsToShape", ["L"], ["S"]),
                               [np.array([2, 3], np.int32)], exception=Caffe2Error, regexp="LengthsToShape")

    @given(lengths=st.lists(st.integers(0, 4), min_size=0, max_size=6), power=st.sampled_from([0.5, 1.0, 2.0, 0.3]),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_lengths_to_weights(self, lengths, power, gc, dc):
        L = np.array(lengths, np.int32)
        op = core.CreateOperator("LengthsToWeights", ["L"], ["W"], power=power)

        def ref(L):
            # each length l repeated l times as 1 / l^power; zero lengths add nothing
            return [np.concatenate([[1.0 / float(l) ** power] * int(l) for l in L if l] + [[]]).astype(np.float32)]
        self.assertReferenceChecks(gc, op, [L], ref)

    @given(lengths=st.lists(st.integers(0, 3), min_size=1, max_size=5), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_lengths_gather(self, lengths, data, gc, dc):
        L = np.array(lengths, np.int32)
        items = np.random.default_rng(len(lengths)).standard_normal((int(L.sum()), 2)).astype(np.float32)
        picks = np.array(data.draw(st.lists(st.integers(0, len(L) - 1), max_size=6)), np.int64)   # repeats, any order
        offsets = np.cumsum(L) - L
        op = core.CreateOperator("LengthsGather", ["ITEMS", "LENGTHS", "INDICES"], ["OUT"])
        self.assertReferenceChecks(
            gc, op, [items, L, picks],
            lambda items, L, picks: (np.concatenate([items[offsets[i]:offsets[i] + L[i]] for i in picks]
                                                    + [np.empty((0, 2), np.float32)]),))

    def test_lengths_gather_bad_index(self):
        self.assertRunOpRaises(hu.cpu_do, core.CreateOperator("LengthsGather", ["I", "L", "X"], ["O"]),
                               [np.ones((3, 1), np.float32), np.array([1, 2], np.int32), np.array([2], np.int32)],
                               exception=Caffe2Error, regexp="LengthsGather")

    @given(lengths=st.lists(st.integers(0, 3), min_size=0, max_size=5), parts=st.integers(2, 3), pack=st.booleans(),
           data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_lengths_partition(self, lengths, parts, pack, data, gc, dc):
        L = np.array(lengths, np.int32)
        n = int(L.sum())
        keys = np.array(data.draw(st.lists(st.integers(-7, 9), min_size=n, max_size=n)), np.int64)  # negatives too
        vals = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        outs = []
        for p in range(parts):
            outs += ["L%d" % p, "K%d" % p, "V%d" % p]
        op = core.CreateOperator("LengthsPartition", ["L", "K", "V"], outs, pack_first_input=int(pack))

        def ref(L, keys, vals):
            shard = np.mod(keys, parts)          # Python's mod: non-negative, as Caffe2's shard fix-up
            seg = np.repeat(np.arange(len(L)), L)
            result = []
            for p in range(parts):
                hit = shard == p
                result.append(np.bincount(seg[hit], minlength=len(L)).astype(np.int32)[:len(L)])
                result.append((keys[hit] - p) // parts if pack else keys[hit])
                result.append(vals[hit])
            return result
        self.assertReferenceChecks(gc, op, [L, keys, vals], ref)

    @given(lengths=st.lists(st.integers(0, 3), min_size=0, max_size=5), index_size=st.integers(1, 4), data=st.data(),
           **hu.gcs_cpu_only)
    @SETTINGS
    def test_segment_one_hot(self, lengths, index_size, data, gc, dc):
        L = np.array(lengths, np.int32)
        n = int(L.sum())
        idx = np.array(data.draw(st.lists(st.integers(0, index_size - 1), min_size=n, max_size=n)), np.int64)
        op = core.CreateOperator("SegmentOneHot", ["lengths", "indices", "index_size"], ["out"])

        def ref(L, idx, size):
            out = np.zeros((len(L), index_size), np.float32)
            for row, i in zip(np.repeat(np.arange(len(L)), L), idx):
                out[row, i] = 1.0
            return [out]
        self.assertReferenceChecks(gc, op, [L, idx, np.array(index_size, np.int64)], ref)

    @given(lengths=st.lists(st.integers(0, 4), min_size=0, max_size=6), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_boolean_mask_lengths(self, lengths, data, gc, dc):
        L = np.array(lengths, np.int32)
        n = int(L.sum())
        mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
        op = core.CreateOperator("BooleanMaskLengths", ["lengths", "mask"], ["out"])
        self.assertReferenceChecks(
            gc, op, [L, mask],
            lambda L, m: (np.array([m[o:o + l].sum() for o, l in zip(np.cumsum(L) - L, L)], np.int32).reshape(-1),))

    @given(n=st.integers(0, 8), k=st.integers(1, 3), data=st.data(), **hu.gcs_cpu_only)
    @SETTINGS
    def test_boolean_unmask(self, n, k, data, gc, dc):
        owner = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), np.int64)
        # masks overlap: a later mask may also be true where an earlier one owns the position
        masks = [(owner == j) for j in range(k)]
        values = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        inputs, names = [], []
        for j in range(k):
            inputs += [masks[j], values[owner == j]]
            names += ["mask%d" % j, "values%d" % j]
        op = core.CreateOperator("BooleanUnmask", names, ["out"])
        self.assertReferenceChecks(gc, op, inputs, lambda *a: (values,))

    def test_boolean_unmask_uncovered_position_is_named(self):
        op = core.CreateOperator("BooleanUnmask", ["m0", "v0"], ["out"])
        self.assertRunOpRaises(hu.cpu_do, op, [np.array([True, False]), np.array([1.0], np.float32)],
                               exception=Caffe2Error, regexp="BooleanUnmask")
