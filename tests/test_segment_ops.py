"""Segment reductions against NumPy references written here: Sorted/Unsorted/Sparse
segment Sum/Mean/WeightedSum, the SortedSegmentRange reducers, LengthsMax,
LengthsWeightedSum, ReduceFrontWeightedSum, LengthsTopK. Cases include empty inputs,
empty segments, unsorted ids, sparse indices, multi-dimensional rows."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _reference import SETTINGS, ReferenceTestCase, run


def _reduce(rows, how, weights=None):
    """float64 reference of one segment's reduction."""
    rows = np.asarray(rows, np.float64)
    if weights is not None:
        rows = rows * np.asarray(weights, np.float64).reshape((-1,) + (1,) * (rows.ndim - 1))
    if how in ("Sum", "WeightedSum"):
        return rows.sum(axis=0)
    if how == "Mean":
        return rows.mean(axis=0) if len(rows) else rows.sum(axis=0)
    if how == "Max":
        return rows.max(axis=0) if len(rows) else rows.sum(axis=0)
    if how == "LogSumExp":
        return np.log(np.exp(rows).sum(axis=0))
    if how == "LogMeanExp":
        return np.log(np.exp(rows).mean(axis=0))
    raise AssertionError(how)


def segment_reference(how, k=None, sparse=False, weighted=False):
    """Reference for ops taking [DATA, (SCALARS), (INDICES), SEGMENT_IDS]."""
    def ref(*ins):
        data = ins[0]
        w = ins[1] if weighted else None
        idx = ins[-2] if sparse else None
        ids = ins[-1].astype(np.int64)
        n_seg = k if k is not None else (int(ids.max()) + 1 if ids.size else 0)
        rows = data[idx] if sparse else data
        out = [_reduce(rows[ids == s], how, None if w is None else w[ids == s]) for s in range(n_seg)]
        return np.array(out, np.float64).reshape((n_seg,) + data.shape[1:])
    return ref


@st.composite
def segment_case(draw, sorted_ids, sparse, max_rows=30):
    """(data, indices or None, segment ids, weights, num_segments or None)."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31 - 1)))
    inner = draw(st.sampled_from([(), (3,), (2, 2)]))
    n = draw(st.integers(0, max_rows))
    if sorted_ids:
        lengths = rng.integers(1, 4, size=draw(st.integers(0, 8)))
        ids = np.repeat(np.arange(lengths.size), lengths)[:n] if n else np.zeros(0, np.int64)
        n = ids.size
        k = None
    else:
        k_seg = draw(st.integers(1, 8))
        ids = rng.integers(0, k_seg, size=n)           # unsorted, some segments empty
        k = draw(st.sampled_from([None, k_seg + 2]))
    ids = ids.astype(draw(st.sampled_from([np.int32, np.int64])))
    table_rows = draw(st.integers(1, 12)) if sparse else n
    data = rng.standard_normal((table_rows,) + inner).astype(np.float32)
    indices = rng.integers(0, table_rows, size=n).astype(np.int64) if sparse else None
    weights = rng.standard_normal(n).astype(np.float32)
    return data, indices, ids, weights, k


def _op_inputs(data, indices, ids, weights, weighted):
    ins = [data] + ([weights] if weighted else []) + ([indices] if indices is not None else []) + [ids]
    names = ["DATA"] + (["SCALARS"] if weighted else []) + (["INDICES"] if indices is not None else []) + ["IDS"]
    return ins, names


@st.composite
def lengths_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31 - 1)))
    lengths = rng.integers(0, 5, size=draw(st.integers(0, 7))).astype(draw(st.sampled_from([np.int32, np.int64])))
    inner = draw(st.sampled_from([(), (4,), (2, 3)]))
    data = rng.standard_normal((int(lengths.sum()),) + inner).astype(np.float32)
    return data, lengths, rng.standard_normal(data.shape[0]).astype(np.float32)


def lengths_reference(how, weighted=False):
    def ref(*ins):
        data, lengths = ins[0], ins[-1]
        ends = np.cumsum(lengths)
        out = [_reduce(data[e - n:e], how, ins[1][e - n:e] if weighted else None) for n, e in zip(lengths, ends)]
        return np.array(out, np.float64).reshape((len(lengths),) + data.shape[1:])
    return ref


# --------------------------------------------------------------------------- errors

def _error(op, inputs, match):
    with pytest.raises(Caffe2Error, match=match):
        run(op, inputs)


class TestSegmentOps(ReferenceTestCase):
    @SETTINGS
    @given(st.data(), st.sampled_from(["Sum", "Mean", "WeightedSum"]), st.booleans(), st.booleans())
    def test_segment_reductions(self, data, reducer, sorted_ids, sparse):
        data_, indices, ids, weights, k = data.draw(segment_case(sorted_ids, sparse))
        weighted = reducer == "WeightedSum"
        name = ("Sparse" if sparse else "") + ("Sorted" if sorted_ids else "Unsorted") + "Segment" + reducer
        ins, names = _op_inputs(data_, indices, ids, weights, weighted)
        kwargs = {"num_segments": k} if k is not None else {}
        op = core.CreateOperator(name, names, ["OUT"], **kwargs)
        out = self.check(op, ins, segment_reference(reducer, k, sparse, weighted))
        assert out[0].dtype == np.float32

    @SETTINGS
    @given(segment_case(sorted_ids=True, sparse=False),
           st.sampled_from(["Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"]))
    def test_sorted_segment_range_reducers(self, case, reducer):
        data, _, ids, _, _ = case
        op = core.CreateOperator("SortedSegmentRange" + reducer, ["DATA", "IDS"], ["OUT"])
        self.check(op, [data, ids], segment_reference(reducer))

    @SETTINGS
    @given(lengths_case())
    def test_lengths_max_and_weighted_sum(self, case):
        data, lengths, weights = case
        self.check(core.CreateOperator("LengthsMax", ["D", "L"], ["O"]), [data, lengths],
                   lengths_reference("Max"))
        self.check(core.CreateOperator("LengthsWeightedSum", ["D", "W", "L"], ["O"]),
                   [data, weights, lengths], lengths_reference("WeightedSum", weighted=True))

    def test_lengths_ops_match_caffe2_doc_examples(self):
        data = np.array([2, 4, 3, 1, 2, 10], np.float32)
        lengths = np.array([2, 3, 1], np.int32)
        (out,) = run(core.CreateOperator("LengthsMax", ["D", "L"], ["O"]), [data, lengths])
        np.testing.assert_array_equal(out, [4, 3, 10])
        scalars = np.array([8, 2, 1, 4, 1, 0.6], np.float32)
        (out,) = run(core.CreateOperator("LengthsWeightedSum", ["D", "S", "L"], ["O"]), [data, scalars, lengths])
        np.testing.assert_allclose(out, [24, 9, 6], rtol=1e-6)

    @SETTINGS
    @given(st.integers(0, 2 ** 31 - 1), st.integers(1, 2))
    def test_reduce_front_weighted_sum(self, seed, reduce_dims):
        rng = np.random.default_rng(seed)
        data = rng.standard_normal((3, 2, 4)).astype(np.float32)
        scalars = rng.standard_normal(data.shape[:reduce_dims]).astype(np.float32)

        def ref(d, s):
            return np.tensordot(s.astype(np.float64), d.astype(np.float64), axes=reduce_dims)
        op = core.CreateOperator("ReduceFrontWeightedSum", ["D", "S"], ["O"], num_reduce_dim=reduce_dims)
        self.check(op, [data, scalars], ref)

    @SETTINGS
    @given(lengths_case(), st.integers(1, 4))
    def test_lengths_top_k(self, case, k):
        data, lengths, _ = case
        values = data[(slice(None),) + (0,) * (data.ndim - 1)].copy()       # one value per row

        def ref(x, lens):
            out_v = np.zeros((len(lens), k), np.float32)
            out_i = -np.ones((len(lens), k), np.int32)
            start = 0
            for s, n in enumerate(lens):
                seg = x[start:start + n]
                order = sorted(range(n), key=lambda j: (-seg[j], j))[:k]
                out_v[s, :len(order)] = seg[order]
                out_i[s, :len(order)] = order
                start += n
            return out_v, out_i
        op = core.CreateOperator("LengthsTopK", ["X", "L"], ["V", "I"], k=k)
        self.check(op, [values, lengths], ref)

    def test_lengths_top_k_ties_keep_lower_position(self):
        op = core.CreateOperator("LengthsTopK", ["X", "L"], ["V", "I"], k=2)
        v, i = run(op, [np.array([1, 3, 3, 2], np.float32), np.array([4], np.int32)])
        np.testing.assert_array_equal(i, [[1, 2]])
        np.testing.assert_array_equal(v, [[3, 3]])

    def test_sorted_segment_ops_reject_unsorted_or_gapped_ids(self):
        data = np.ones((4, 2), np.float32)
        for ids in ([0, 1, 0, 1], [0, 0, 2, 2], [1, 1, 2, 2]):
            _error(core.CreateOperator("SortedSegmentSum", ["D", "IDS"], ["O"]), [data, np.array(ids)],
                   "IDS.*Indices must be sorted and not have gaps")
            _error(core.CreateOperator("SortedSegmentRangeMax", ["D", "IDS"], ["O"]), [data, np.array(ids)],
                   "Indices must be sorted and not have gaps")

    def test_unsorted_segment_ids_out_of_range(self):
        data = np.ones((3, 2), np.float32)
        _error(core.CreateOperator("UnsortedSegmentSum", ["D", "IDS"], ["O"], num_segments=2),
               [data, np.array([0, 2, 1])], "Segment id out of range: 2, range 0 to 2")
        _error(core.CreateOperator("UnsortedSegmentMean", ["D", "IDS"], ["O"]),
               [data, np.array([0, -1, 1])], "Segment id out of range: -1")

    def test_sparse_segment_index_out_of_bounds_names_indices_blob(self):
        data = np.ones((3, 2), np.float32)
        for name in ("SparseSortedSegmentSum", "SparseUnsortedSegmentMean"):
            _error(core.CreateOperator(name, ["D", "IDX", "IDS"], ["O"]),
                   [data, np.array([0, 3]), np.array([0, 0])], "blob 'IDX': Index out of bounds: 3, range 0 to 3")

    def test_segment_shape_and_type_errors(self):
        _error(core.CreateOperator("SortedSegmentSum", ["D", "IDS"], ["O"]),
               [np.ones((3, 2), np.float32), np.array([0, 0])],
               "DATA must have the same first dimension as SEGMENT_IDS")
        _error(core.CreateOperator("SortedSegmentSum", ["D", "IDS"], ["O"]),
               [np.ones((2, 2), np.float64), np.array([0, 0])], "Unsupported input type: double")
        _error(core.CreateOperator("SparseSortedSegmentSum", ["D", "IDX", "IDS"], ["O"]),
               [np.ones((3, 2), np.float32), np.array([0, 1]), np.array([0])],
               "SEGMENT_IDS must have the same length as INDICES")
        _error(core.CreateOperator("UnsortedSegmentWeightedSum", ["D", "W", "IDS"], ["O"]),
               [np.ones((3, 2), np.float32), np.ones(2, np.float32), np.array([0, 0, 1])],
               "Input 1 must have the same first dim as SEGMENT_IDS")

    def test_lengths_errors(self):
        data = np.ones((4, 2), np.float32)
        _error(core.CreateOperator("LengthsMax", ["D", "L"], ["O"]), [data, np.array([2, 3], np.int32)],
               "When calculating the 1th output with length=3, the index is out of bounds: 4")
        _error(core.CreateOperator("LengthsMax", ["D", "L"], ["O"]), [data, np.array([1, 2], np.int32)], "3 != 4")
        _error(core.CreateOperator("LengthsWeightedSum", ["D", "W", "L"], ["O"]),
               [data, np.ones(4, np.float32), np.array([5, -1], np.int32)], "must be non-negative")

    def test_failed_segment_op_leaves_the_workspace_untouched(self):
        workspace.ResetWorkspace()
        workspace.FeedBlob("D", np.ones((3, 2), np.float32))
        workspace.FeedBlob("IDS", np.array([0, 5, 1]))
        workspace.FeedBlob("O", np.array([42.0], np.float32))
        with pytest.raises(Caffe2Error):
            workspace.RunOperatorOnce(core.CreateOperator("UnsortedSegmentSum", ["D", "IDS"], ["O"], num_segments=2))
        np.testing.assert_array_equal(workspace.FetchBlob("O"), [42.0])

    def test_shape_inference_of_lengths_and_segment_ops(self):
        net = core.Net("infer")
        net.LengthsWeightedSum(["D", "W", "L"], "lws")
        net.UnsortedSegmentSum(["D", "IDS"], "uss", num_segments=7)
        net.ReduceFrontWeightedSum(["D3", "S"], "rf", num_reduce_dim=2)
        net.LengthsTopK(["X", "L"], ["v", "i"], k=3)
        shapes, types = workspace.InferShapesAndTypes(
            [net], {"D": [10, 4], "W": [10], "L": [3], "IDS": [10], "D3": [2, 3, 5], "S": [2, 3], "X": [10]})
        assert shapes["lws"] == [3, 4] and shapes["uss"] == [7, 4] and shapes["rf"] == [5]
        assert shapes["v"] == [3, 3] and shapes["i"] == [3, 3]

    def test_large_inputs_take_the_parallel_kernels(self):
        """Sizes past the team threshold (32k values), so the compiled loops run split over
        the team: wide and narrow unsorted scatters, sorted runs, weighted sparse runs."""
        rng = np.random.default_rng(7)
        for rows, d, k in ((6000, 64, 500), (60000, 1, 300), (60000, 3, 5000)):
            data = rng.standard_normal((rows, d)).astype(np.float32)
            ids = rng.integers(0, k, size=rows)
            want = np.zeros((k, d))
            np.add.at(want, ids, data.astype(np.float64))
            (got,) = run(core.CreateOperator("UnsortedSegmentSum", ["D", "I"], ["O"], num_segments=k), [data, ids])
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        data = rng.standard_normal((5000, 16)).astype(np.float32)
        idx = rng.integers(0, 5000, size=30000)
        ids = np.sort(rng.integers(0, 3000, size=30000))
        ids = np.unique(ids, return_inverse=True)[1]                    # sorted, no gaps
        w = rng.standard_normal(30000).astype(np.float32)
        want = np.zeros((ids.max() + 1, 16))
        np.add.at(want, ids, data[idx].astype(np.float64) * w[:, None])
        (got,) = run(core.CreateOperator("SparseSortedSegmentWeightedSum", ["D", "W", "X", "I"], ["O"]),
                     [data, w, idx, ids])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
