"""Gradients of the segment, sparse, padding and selection ops: each registered
gradient against central finite differences (hu.assertGradientChecks), the segment
reducers' gradient ops also against NumPy references, and the gradient names and
types Caffe2's makers produce."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import GradientSlice, get_gradient_for_op

from _reference import SETTINGS

GRAD_SETTINGS = SETTINGS.__class__(parent=SETTINGS, max_examples=6)


def _distinct(rng, shape, low=-3.0, high=3.0):
    """Values far apart (max and top-k gradients have no ties to straddle)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * (high - low) / max(n, 1) + low).astype(np.float32).reshape(shape)


class TestSegmentGradients(hu.HypothesisTestCase):
    @GRAD_SETTINGS
    @given(seed=st.integers(0, 2 ** 31 - 1), reducer=st.sampled_from(["Sum", "Mean", "WeightedSum"]),
           sorted_ids=st.booleans(), sparse=st.booleans())
    def test_segment_reducers(self, seed, reducer, sorted_ids, sparse):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 9))
        ids = np.sort(rng.integers(0, 3, n)) if sorted_ids else rng.integers(0, 4, n)
        if sorted_ids:
            ids = np.unique(ids, return_inverse=True)[1]
        data = rng.standard_normal((6 if sparse else n, 2)).astype(np.float32)
        ins = [data] + ([rng.standard_normal(n).astype(np.float32)] if reducer == "WeightedSum" else [])
        ins += ([rng.integers(0, 6, n)] if sparse else []) + [ids.astype(np.int32)]
        names = ["D", "W", "X", "S"][:1] + (["W"] if reducer == "WeightedSum" else []) + \
            (["X"] if sparse else []) + ["S"]
        name = ("Sparse" if sparse else "") + ("Sorted" if sorted_ids else "Unsorted") + "Segment" + reducer
        op = core.CreateOperator(name, names, ["O"])
        self.assertGradientChecks(hu.cpu_do, op, ins, 0, [0])

    @GRAD_SETTINGS
    @given(seed=st.integers(0, 2 ** 31 - 1), reducer=st.sampled_from(["Sum", "Mean", "Max", "LogSumExp",
                                                                       "LogMeanExp"]))
    def test_range_reducers(self, seed, reducer):
        rng = np.random.default_rng(seed)
        ids = np.array([0, 0, 1, 2, 2, 2], np.int32)
        data = _distinct(rng, (6, 2))
        op = core.CreateOperator("SortedSegmentRange" + reducer, ["D", "S"], ["O"])
        self.assertGradientChecks(hu.cpu_do, op, [data, ids], 0, [0])

    @GRAD_SETTINGS
    @given(seed=st.integers(0, 2 ** 31 - 1), grad_on_weights=st.booleans())
    def test_lengths_max_and_weighted_sum(self, seed, grad_on_weights):
        rng = np.random.default_rng(seed)
        lengths = np.array([2, 0, 3, 1], np.int32)
        data = _distinct(rng, (6, 3))
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("LengthsMax", ["D", "L"], ["O"]),
                                  [data, lengths], 0, [0])
        w = rng.standard_normal(6).astype(np.float32)
        op = core.CreateOperator("LengthsWeightedSum", ["D", "W", "L"], ["O"], grad_on_weights=int(grad_on_weights))
        self.assertGradientChecks(hu.cpu_do, op, [data, w, lengths], 0, [0])
        if grad_on_weights:
            self.assertGradientChecks(hu.cpu_do, op, [data, w, lengths], 1, [0])

    def test_reduce_front_weighted_sum(self):
        rng = np.random.default_rng(1)
        data, scalars = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
        op = core.CreateOperator("ReduceFrontWeightedSum", ["D", "S"], ["O"], num_reduce_dim=2)
        self.assertGradientChecks(hu.cpu_do, op, [data, scalars], 0, [0])

    def test_segment_gradient_ops_against_references(self):
        grad = np.arange(6, dtype=np.float32).reshape(3, 2)
        ids = np.array([2, 0, 2, 2, 1], np.int32)
        (out,) = hu.runOpOnInput(hu.cpu_do, core.CreateOperator("UnsortedSegmentMeanGradient", ["G", "S"], ["O"]),
                                 [grad, ids])
        np.testing.assert_allclose(out, grad[ids] / np.array([3, 1, 3, 3, 1], np.float32)[:, None])
        w = np.array([1, 2, 3, 4, 5], np.float32)
        (out,) = hu.runOpOnInput(hu.cpu_do, core.CreateOperator("UnsortedSegmentWeightedSumGradient",
                                                                ["W", "G", "S"], ["O"]), [w, grad, ids])
        np.testing.assert_allclose(out, grad[ids] * w[:, None])
        with pytest.raises(Caffe2Error, match="Indices must be sorted and not have gaps"):
            hu.runOpOnInput(hu.cpu_do, core.CreateOperator("SortedSegmentSumGradient", ["G", "S"], ["O"]),
                            [grad, np.array([0, 1], np.int32)])      # K = 3 segments, ids end at 1


class TestSparseGradients(hu.HypothesisTestCase):
    def test_sparse_segment_gradient_is_a_slice_over_indices(self):
        op = core.CreateOperator("SparseUnsortedSegmentSum", ["D", "X", "S"], ["O"])
        ops, g_input = get_gradient_for_op(op, ["O_grad"])
        assert [o.type for o in ops] == ["UnsortedSegmentSumGradient"]
        assert g_input[0] == GradientSlice("X", "D_grad_values") and g_input[1] is None
        with pytest.raises(Caffe2Error, match="grads on aux inputs are not yet implemented"):
            get_gradient_for_op(core.CreateOperator("SortedSegmentWeightedSum", ["D", "W", "S"], ["O"],
                                                    grad_on_weights=1), ["O_grad"])

    def test_lengths_top_k_and_flexible_top_k(self):
        rng = np.random.default_rng(2)
        x = _distinct(rng, (7,))
        lengths = np.array([3, 0, 4], np.int32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("LengthsTopK", ["X", "L"], ["V", "I"], k=2),
                                  [x, lengths], 0, [0])
        x2 = _distinct(rng, (2, 5))
        k = np.array([[2], [4]], np.int64)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("FlexibleTopK", ["X", "K"], ["V", "I"]),
                                  [x2, k], 0, [0])

    def test_pack_unpack_and_padding(self):
        rng = np.random.default_rng(3)
        lengths = np.array([2, 0, 3], np.int32)
        data = rng.standard_normal((5, 2)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("PackSegments", ["L", "D"], ["P"]),
                                  [lengths, data], 1, [0])
        packed = rng.standard_normal((3, 3, 2)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("UnpackSegments", ["L", "P"], ["U"]),
                                  [lengths, packed], 1, [0])
        pads = [rng.standard_normal(2).astype(np.float32) for _ in range(2)]
        op = core.CreateOperator("AddPadding", ["D", "L", "SP", "EP"], ["O", "OL"], padding_width=1,
                                 end_padding_width=2)
        for i in (0, 2, 3):
            self.assertGradientChecks(hu.cpu_do, op, [data, lengths] + pads, i, [0])
        padded = rng.standard_normal((11, 2)).astype(np.float32)
        op = core.CreateOperator("RemovePadding", ["D", "L"], ["O", "OL"], padding_width=1, end_padding_width=1)
        self.assertGradientChecks(hu.cpu_do, op, [padded, np.array([4, 2, 5], np.int32)], 0, [0])

    def test_sparse_dense_conversions(self):
        rng = np.random.default_rng(4)
        lengths, indices = np.array([2, 1], np.int64), np.array([3, 0, 2], np.int64)
        values = rng.standard_normal(3).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("BatchSparseToDense", ["L", "I", "V"], ["O"],
                                                                 dense_last_dim=4), [lengths, indices, values], 2, [0])
        dense = rng.standard_normal((2, 4)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("BatchDenseToSparse", ["L", "I", "D"], ["O"]),
                                  [lengths, indices, dense], 2, [0])
        idx = np.array([1, 3, 1, 0], np.int64)
        vals = rng.standard_normal((4, 2)).astype(np.float32)
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("SparseToDense", ["I", "V"], ["O"]),
                                  [idx, vals], 1, [0])
        op = core.CreateOperator("SparseToDenseMask", ["I", "V", "D", "L"], ["O"], mask=[3, 1, 7])
        self.assertGradientChecks(hu.cpu_do, op, [np.array([1, 3, 1, 7, 5], np.int64),
                                                  rng.standard_normal(5).astype(np.float32),
                                                  np.array(0.5, np.float32), np.array([3, 2], np.int32)], 1, [0])

    def test_row_and_mask_ops(self):
        rng = np.random.default_rng(5)
        x = _distinct(rng, (2, 3, 4))
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("RowwiseMax", ["X"], ["Y"]), [x], 0, [0])
        mask = np.array([True, False, True, True])
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("BooleanMask", ["D", "M"], ["O"]),
                                  [rng.standard_normal((4, 2)).astype(np.float32), mask], 0, [0])
        self.assertGradientChecks(hu.cpu_do, core.CreateOperator("LengthsTile", ["D", "L"], ["O"]),
                                  [rng.standard_normal((3, 2)).astype(np.float32), np.array([2, 0, 3], np.int32)],
                                  0, [0])
        mat, w = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
        for i in (0, 1):
            self.assertGradientChecks(hu.cpu_do, core.CreateOperator("RowMul", ["M", "W"], ["O"]), [mat, w], i, [0])

    def test_gather_by_key_gradient_partitions_the_output_gradient(self):
        keys = np.array([3, 1, 4, 1, 5], np.int64)
        workspace.ResetWorkspace()
        workspace.FeedBlob("K", keys)
        parts = ["K0", "V0", "K1", "V1"]
        workspace.FeedBlob("V", np.arange(10, dtype=np.float32).reshape(5, 2))
        workspace.RunOperatorOnce(core.CreateOperator("Partition", ["K", "V"], parts))
        op = core.CreateOperator("GatherByKey", ["K", "V0", "V1"], ["O"])
        shards = [workspace.FetchBlob("V0"), workspace.FetchBlob("V1")]
        for i in (1, 2):
            self.assertGradientChecks(hu.cpu_do, op, [keys] + shards, i, [0])

    def test_index_ops_stop_or_refuse_gradients(self):
        with pytest.raises(Caffe2Error, match="LengthsToSegmentIds"):
            get_gradient_for_op(core.CreateOperator("LengthsToSegmentIds", ["L"], ["S"]), ["S_grad"])
        ops, g_input = get_gradient_for_op(core.CreateOperator("OneHot", ["I", "N"], ["O"]), ["O_grad"])
        assert not ops and g_input == [None, None]


def test_ensure_dense_makes_a_sparse_gradient_dense_and_passes_a_dense_one():
    """Caffe2's GetEnsureDenseGradient: a sparse gradient (Gather's) becomes dense with
    SparseToDense(indices, values, X) so FCGradient can follow; a dense one is handed
    over without an op. Values checked against NumPy."""
    net = core.Net("ensure_dense")
    net.FC(["x0", "w", "b"], "x2")
    net.EnsureDense(["x2"], "x2")
    net.Gather(["x2", "x1"], "x4")
    net.Gather(["x2", "x3"], "x5")
    net.DotProduct(["x4", "x5"], "x6")
    net.AddGradientOperators(["x6"])
    densify = net.Proto().op[-2]
    assert densify.type == "SparseToDense"
    assert list(densify.input) == ["x2_grad_indices_concat", "x2_grad_values_concat", "x2"]
    assert list(densify.output) == ["x2_grad"]
    assert net.Proto().op[-1].type == "FCGradient"
    rng = np.random.default_rng(5)
    feeds = {"x0": rng.normal(size=(4, 3)).astype(np.float32), "w": rng.normal(size=(5, 3)).astype(np.float32),
             "b": rng.normal(size=5).astype(np.float32), "x1": np.array([0, 2], np.int32),
             "x3": np.array([3, 0], np.int32)}
    workspace.ResetWorkspace()
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)
    x2 = feeds["x0"] @ feeds["w"].T + feeds["b"]
    x4, x5 = x2[feeds["x1"]], x2[feeds["x3"]]
    dx2 = np.zeros_like(x2)
    np.add.at(dx2, feeds["x1"], x5 * 1.0)     # d(sum_i <x4_i, x5_i>)/dx4 = x5 (DotProduct's output grad is 1)
    np.add.at(dx2, feeds["x3"], x4 * 1.0)
    np.testing.assert_allclose(workspace.FetchBlob("x2_grad"), dx2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("w_grad"), dx2.T @ feeds["x0"], rtol=1e-4, atol=1e-4)
    dense = core.Net("ensure_dense_dense")
    dense.EnsureDense(["a"], "b")
    dense.Relu("b", "c")
    dense.AddGradientOperators(["c"])
    assert [op.type for op in dense.Proto().op][2:] == ["ConstantFill", "ReluGradient"]   # nothing for EnsureDense
