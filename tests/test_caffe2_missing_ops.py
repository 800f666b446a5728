"""Caffe2 ops Caffe2's own operator tests use (issue 31), each against a NumPy
formula written here: clamps, moments, tile/expand, batch and row ops, lengths ops,
bucketizing, histograms, sparse dropout and the Merge*FeatureTensors family."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _grad_util import finite_difference_check, outputs_of, run_gradient

RNG = np.random.default_rng(31)


def op(op_type, n_in, n_out, **args):
    return core.CreateOperator(op_type, ["i%d" % k for k in range(n_in)], ["o%d" % k for k in range(n_out)], **args)


def away_from(x, points, gap=0.05):
    """x nudged away from the kinks, so finite differences stay on one side."""
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + gap * np.where(x[near] >= p, 1, -1)
    return x


# ----------------------------------------------------------------- Hardtanh / ReluN

@pytest.mark.parametrize("op_type,args,low,high", [("Hardtanh", dict(min_val=-0.5, max_val=1.2), -0.5, 1.2),
                                                   ("ReluN", dict(n=1.5), 0.0, 1.5)])
def test_clamps_and_gradients(op_type, args, low, high):
    x = away_from(RNG.uniform(-3, 3, (4, 5)).astype(np.float32), [low, high])
    o = op(op_type, 1, 1, **args)
    np.testing.assert_array_equal(outputs_of(o, [x])[0], np.minimum(np.maximum(x, low), high))
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    grads, _ = run_gradient(o, [x], {0: dy})
    np.testing.assert_allclose(grads[0], np.where((x > low) & (x < high), dy, 0))
    finite_difference_check(o, [x], [0])


# ----------------------------------------------------------------- Moments / BatchMoments

@pytest.mark.parametrize("axes,keepdims", [(None, True), ([0, 2], False), ([-1], True)])
def test_moments(axes, keepdims):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    args = dict(keepdims=keepdims) if axes is None else dict(axes=axes, keepdims=keepdims)
    o = op("Moments", 1, 2, **args)
    ax = None if axes is None else tuple(a % 3 for a in axes)
    mean, var = outputs_of(o, [x])
    np.testing.assert_allclose(mean, x.mean(axis=ax, keepdims=keepdims), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, ((x - x.mean(axis=ax, keepdims=True)) ** 2).mean(axis=ax, keepdims=keepdims),
                               rtol=1e-5, atol=1e-6)
    finite_difference_check(o, [x], [0], outputs_with_grads=(0, 1))


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_batch_moments(order):
    x = RNG.standard_normal((2, 3, 4, 2)).astype(np.float32)
    o = op("BatchMoments", 1, 2, order=order)
    rows = x.transpose(0, 2, 3, 1).reshape(-1, 3) if order == "NCHW" else x.reshape(-1, 2)
    mu, second = outputs_of(o, [x])
    np.testing.assert_allclose(mu, rows.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second, (rows ** 2).mean(0), rtol=1e-5, atol=1e-6)
    finite_difference_check(o, [x], [0], outputs_with_grads=(0, 1))


# ----------------------------------------------------------------- NumpyTile / Expand / SplitByLengths

def test_numpy_tile():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    reps = np.array([3, 0], np.int64)
    out = outputs_of(op("NumpyTile", 2, 1), [x, reps])[0]
    assert out.shape == (6, 0)
    reps = np.array([2, 2], np.int64)
    np.testing.assert_array_equal(outputs_of(op("NumpyTile", 2, 1), [x, reps])[0],
                                  np.concatenate([np.concatenate([x, x], 1)] * 2, 0))
    with pytest.raises(Caffe2Error, match="repeats"):
        outputs_of(op("NumpyTile", 2, 1), [x, np.array([2], np.int64)])


def test_expand_and_gradient():
    x = RNG.standard_normal((3, 1)).astype(np.float32)
    shape = np.array([2, -1, 4], np.int64)
    o = op("Expand", 2, 1)
    y = outputs_of(o, [x, shape])[0]
    np.testing.assert_array_equal(y, x[None, :, :] * np.ones((2, 3, 4), np.float32))
    dy = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    grads, _ = run_gradient(o, [x, shape], {0: dy})
    np.testing.assert_allclose(grads[0], dy.sum(axis=(0, 2))[:, None], rtol=1e-5)
    with pytest.raises(Caffe2Error, match="broadcast"):
        outputs_of(o, [x, np.array([2, 2], np.int64)])


def test_split_by_lengths():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    lengths = np.array([1, 2, 0, 3], np.int32)
    a, b = outputs_of(core.CreateOperator("SplitByLengths", ["x", "l"], ["a", "b"]), [x, lengths])
    np.testing.assert_array_equal(a, x[:3])
    np.testing.assert_array_equal(b, x[3:])
    scaled = core.CreateOperator("SplitByLengths", ["x", "l"], ["a", "b"], use_scaling_lengths=True)
    a, b = outputs_of(scaled, [x, np.array([1, 2], np.int32)])   # lengths sum 3, scaled by 2
    np.testing.assert_array_equal(a, x[:2])
    np.testing.assert_array_equal(b, x[2:])


# ----------------------------------------------------------------- AdjustBatch / CopyRowsToTensor

def test_adjust_batch_pad_and_truncate():
    x = RNG.integers(0, 9, (3, 2)).astype(np.int64)
    y, real = outputs_of(op("AdjustBatch", 1, 2, max_batch_size=5), [x])
    np.testing.assert_array_equal(y, np.concatenate([x, np.zeros((2, 2), np.int64)]))
    assert real.tolist() == [3]
    y = outputs_of(op("AdjustBatch", 2, 1), [x, np.array([2], np.int64)])[0]
    np.testing.assert_array_equal(y, x[:2])
    with pytest.raises(Caffe2Error, match="max_batch_size"):
        outputs_of(op("AdjustBatch", 1, 1, max_batch_size=2), [x])


def test_copy_rows_to_tensor():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    row = np.array([7, 8, 9], np.float32)
    o = core.CreateOperator("CopyRowsToTensor", ["x", "i", "r"], ["x"])
    out = outputs_of(o, [x, np.array([3, 1], np.int64), row])[0]
    want = x.copy()
    want[[1, 3]] = row
    np.testing.assert_array_equal(out, want)
    with pytest.raises(Caffe2Error, match="width of input tensor should match lengths of row"):
        outputs_of(o, [x, np.array([0], np.int64), np.ones(4, np.float32)])


# ----------------------------------------------------------------- AliasWithName / DataCouple / EnforceFinite

def test_alias_data_couple_enforce_finite():
    x = RNG.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_array_equal(outputs_of(op("AliasWithName", 1, 1, name="n"), [x])[0], x)
    couple = core.CreateOperator("DataCouple", ["a", "b", "c"], ["a", "b"])
    a, b = outputs_of(couple, [x, x + 1, x + 2])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x + 1)
    outputs_of(op("EnforceFinite", 1, 0), [x])
    with pytest.raises(Caffe2Error, match="non-finite"):
        outputs_of(op("EnforceFinite", 1, 0), [np.array([1.0, np.inf], np.float32)])


# ----------------------------------------------------------------- LengthsPad / LengthsSplit

def test_lengths_pad():
    data = RNG.standard_normal((5, 2)).astype(np.float32)
    lengths = np.array([2, 0, 3], np.int32)
    out = outputs_of(op("LengthsPad", 2, 1, target_length=4, padding_value=-7.0), [data, lengths])[0]
    want = np.full((12, 2), -7.0, np.float32)
    want[0:2], want[8:11] = data[0:2], data[2:5]
    np.testing.assert_array_equal(out, want)
    with pytest.raises(Caffe2Error, match="target_length"):
        outputs_of(op("LengthsPad", 2, 1, target_length=2), [data, lengths])


def test_lengths_pad_shape_inference():
    net = core.Net("lengths_pad_shapes")
    net.LengthsPad(["data", "lengths"], "padded", target_length=4)
    shapes, types = workspace.InferShapesAndTypes(
        [net], {"data": [5, 2, 3], "lengths": [3]},
        blob_types={"data": core.DataType.FLOAT, "lengths": core.DataType.INT32})
    assert shapes["padded"] == [12, 2, 3] and types["padded"] == core.DataType.FLOAT


def test_lengths_split():
    lengths = np.array([7, 0, 4], np.int32)
    want = [3, 2, 2, 0, 0, 0, 2, 1, 1]       # 7 -> 3+2+2, 4 -> 2+1+1
    assert outputs_of(op("LengthsSplit", 2, 1), [lengths, np.array([3], np.int32)])[0].tolist() == want
    assert outputs_of(op("LengthsSplit", 1, 1, n_split=3), [lengths])[0].tolist() == want


# ----------------------------------------------------------------- BatchBucketize / BisectPercentile / Histogram

def test_batch_bucketize():
    x = np.array([[0.4, 9.0, 1.0], [2.6, -1.0, 1.1]], np.float32)
    indices = np.array([0, 2], np.int32)
    boundaries = np.array([1.0, 2.0, 3.0, 1.0], np.float32)
    lengths = np.array([3, 1], np.int32)
    out = outputs_of(op("BatchBucketize", 4, 1), [x, indices, boundaries, lengths])[0]
    # bucket = number of the column's boundaries strictly below the value
    want = [[sum(b < v for b in [1, 2, 3]), sum(b < w for b in [1])] for v, w in x[:, [0, 2]]]
    np.testing.assert_array_equal(out, np.array(want, np.int32))


def test_bisect_percentile():
    raw, mapping = [1.0, 2.0, 4.0], [0.2, 0.5, 0.9]
    lower, upper = [0.1, 0.4, 0.8], [0.3, 0.6, 1.0]
    x = np.array([[0.5], [1.0], [1.5], [3.0], [4.0], [5.0]], np.float32)
    o = op("BisectPercentile", 1, 1, percentile_raw=raw, percentile_mapping=mapping,
           percentile_lower=lower, percentile_upper=upper, lengths=[3])
    # below the first raw value 0, above the last 1, on a raw value its mapping,
    # between raw k and k + 1 the line from upper[k] to lower[k + 1]
    want = [0.0, 0.2, 0.3 + (0.4 - 0.3) * 0.5, 0.6 + (0.8 - 0.6) * 0.5, 0.9, 1.0]
    np.testing.assert_allclose(outputs_of(o, [x])[0].reshape(-1), want, rtol=1e-6)


def test_histogram():
    a = RNG.uniform(-1, 11, 200)
    b = RNG.uniform(-1, 11, (3, 7)).astype(np.float32)
    edges = [0.0, 1.5, 4.0, 10.0]
    out = outputs_of(op("Histogram", 2, 1, bin_edges=edges), [a, b])[0]
    values = np.concatenate([a, b.reshape(-1)])
    want = [((values >= lo) & (values < hi)).sum() for lo, hi in zip(edges[:-1], edges[1:])]
    assert out.tolist() == want
    with pytest.raises(Caffe2Error, match="strictly increasing"):
        outputs_of(op("Histogram", 1, 1, bin_edges=[0.0, 0.0]), [a])


# ----------------------------------------------------------------- DenseVectorToIdList / fills / dropout

def test_dense_vector_to_id_list():
    x = np.array([[0, 2, 0, 1], [0, 0, 0, 0], [3, 0, 0, 5]], np.float32)
    lengths, ids = outputs_of(op("DenseVectorToIdList", 1, 2), [x])
    assert lengths.tolist() == [2, 0, 2] and ids.tolist() == [1, 3, 0, 3]


def test_given_tensor_string_to_uint8_fill():
    x = RNG.integers(0, 256, (2, 3)).astype(np.uint8)
    o = core.CreateOperator("GivenTensorStringToUInt8Fill", [], ["y"], shape=[2, 3], values=[x.tobytes()])
    np.testing.assert_array_equal(outputs_of(o, [])[0], x)


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_sparse_dropout_with_replacement(ratio):
    x = np.arange(1, 8, dtype=np.int64)
    lengths = np.array([3, 0, 4], np.int32)
    y, ly = outputs_of(op("SparseDropoutWithReplacement", 2, 2, ratio=ratio, replacement_value=-5), [x, lengths])
    if ratio == 0.0:
        assert y.tolist() == x.tolist() and ly.tolist() == lengths.tolist()
    else:
        assert y.tolist() == [-5, -5, -5] and ly.tolist() == [1, 1, 1]
    y, ly = outputs_of(op("SparseItemwiseDropoutWithReplacement", 2, 2, ratio=ratio, replacement_value=-5),
                       [x, lengths])
    assert y.tolist() == (x.tolist() if ratio == 0.0 else [-5] * 7) and ly.tolist() == lengths.tolist()


# ----------------------------------------------------------------- Merge*FeatureTensors

def test_merge_single_list_and_gradient():
    lengths1, values1, presence1 = np.array([2, 1], np.int32), np.array([1.0, 2.0, 3.0]), np.array([True, False])
    lengths2, values2, presence2 = np.array([0, 2], np.int32), np.array([4.0, 5.0]), np.array([True, True])
    o = core.CreateOperator("MergeSingleListFeatureTensors", ["l1", "v1", "p1", "l2", "v2", "p2"],
                            ["ol", "ok", "ovl", "ovv"], feature_ids=[7, 9])
    inputs = [lengths1, values1, presence1, lengths2, values2, presence2]
    ol, ok, ovl, ovv = outputs_of(o, inputs)
    # example 0: feature 7 (values 1, 2) and feature 9 (no values); example 1: feature 9 only
    assert ol.tolist() == [2, 1] and ok.tolist() == [7, 9, 9] and ovl.tolist() == [2, 0, 2]
    assert ovv.tolist() == [1.0, 2.0, 4.0, 5.0]
    grads, _ = run_gradient(o, inputs, {3: np.array([10.0, 20.0, 40.0, 50.0])})
    assert grads[1].tolist() == [10.0, 20.0, 0.0] and grads[4].tolist() == [40.0, 50.0]


def test_merge_multi_map_and_gradient():
    inputs = [np.array([1, 1], np.int32), np.array([11, 12]), np.array([1, 2], np.int32),
              np.array([111, 121, 122]), np.array([1.0, 2.0, 3.0]),
              np.array([0, 1], np.int32), np.array([21]), np.array([1], np.int32),
              np.array([211]), np.array([4.0])]
    names = ["l1", "k1", "vl1", "vk1", "vv1", "l2", "k2", "vl2", "vk2", "vv2"]
    o = core.CreateOperator("MergeMultiMapFeatureTensors", names, ["ol", "ok", "ovl", "ovk", "ovv"])
    ol, ok, ovl, ovk, ovv = outputs_of(o, inputs)
    assert ol.tolist() == [1, 2] and ok.tolist() == [11, 12, 21] and ovl.tolist() == [1, 2, 1]
    assert ovk.tolist() == [111, 121, 122, 211] and ovv.tolist() == [1.0, 2.0, 3.0, 4.0]
    grads, _ = run_gradient(o, inputs, {4: np.array([5.0, 6.0, 7.0, 8.0])})
    assert grads[4].tolist() == [5.0, 6.0, 7.0] and grads[9].tolist() == [8.0]


def test_merge_dense_feature_tensors():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    presence = np.array([[True, False, True], [False, False, True]])
    lengths, keys, values = outputs_of(op("MergeDenseFeatureTensors", 2, 3, feature_ids=[5, 6, 7]), [x, presence])
    assert lengths.tolist() == [2, 1] and keys.tolist() == [5, 7, 7] and values.tolist() == [1.0, 3.0, 6.0]


# ----------------------------------------------------------------- stat puts / AsyncNetBarrier

def _stats():
    workspace.RunOperatorOnce(core.CreateOperator("StatRegistryExport", [], ["k", "v", "t"]))
    keys = [k.decode() if isinstance(k, bytes) else k for k in workspace.FetchBlob("k")]
    return dict(zip(keys, workspace.FetchBlob("v").tolist()))


def test_stat_puts():
    _stats()                                             # reset the counters
    for value in (3.25, 1.5):
        workspace.FeedBlob("value", np.array([value]))
        for op_type in ("AveragePut", "IncrementPut", "StdDevPut"):
            workspace.RunOperatorOnce(core.CreateOperator(op_type, ["value"], [], stat_name=op_type,
                                                          magnitude_expand=100))
    stats = _stats()
    assert stats["AveragePut/stat_value/sum"] == 325 + 150 and stats["AveragePut/stat_value/count"] == 2
    assert stats["IncrementPut/stat_value"] == 475
    # StdDevPut shifts by the first value put (325)
    assert stats["StdDevPut/stat_value/sumoffset"] == 150 - 325
    assert stats["StdDevPut/stat_value/sumsqoffset"] == (150 - 325) ** 2
    workspace.FeedBlob("value", np.array([1e30]))
    workspace.RunOperatorOnce(core.CreateOperator("IncrementPut", ["value"], [], stat_name="big", bound=True))
    assert _stats()["big/stat_value"] == np.iinfo(np.int64).max
    with pytest.raises(Caffe2Error, match="int64"):
        workspace.RunOperatorOnce(core.CreateOperator("IncrementPut", ["value"], [], stat_name="big"))


def test_async_net_barrier():
    a, b = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    out = outputs_of(core.CreateOperator("AsyncNetBarrier", ["a", "b"], ["a", "b"]), [a, b])
    np.testing.assert_array_equal(out[0], a)
    np.testing.assert_array_equal(out[1], b)


def test_range_argument_becomes_ints():
    created = core.CreateOperator("Moments", ["X"], ["m", "v"], axes=range(2))
    assert list(created.arg[0].ints) == [0, 1]


@pytest.mark.parametrize("spacing", ["linear", "logarithmic"])
def test_self_binning_histogram(spacing):
    a = np.array([-1.0, 0.5, 2.0, 3.0, 7.0])
    b = np.array([[4.0, 7.0]])
    values, counts = outputs_of(op("SelfBinningHistogram", 2, 2, num_bins=4, bin_spacing=spacing,
                                   logspacing_start=0.25), [a, b])
    start = -1.0 if spacing == "linear" else 0.25
    want_edges = (np.linspace(start, 7.0, 5) if spacing == "linear" else np.geomspace(start, 7.0, 5))
    np.testing.assert_allclose(values[:-1], want_edges[:-1], rtol=1e-12)
    assert 7.0 < values[-1] < 7.0 + 1e-12                # just above the maximum
    data = np.concatenate([a, b.reshape(-1)])
    # each value in the last bin whose start is <= it (values below the first start: bin 0)
    want = np.bincount(np.clip(np.searchsorted(values, data, side="right") - 1, 0, 4), minlength=5)
    assert counts.tolist() == want.tolist() and counts.sum() == data.size
    same = outputs_of(op("SelfBinningHistogram", 1, 2, num_bins=3, bin_spacing=spacing), [np.ones(4)])
    assert same[0].tolist() == [1.0] * 4 and same[1].tolist() == [4, 0, 0, 0]


def test_estimate_all_blob_sizes():
    from caffe2py.proto import caffe2_pb2
    workspace.ResetWorkspace()
    workspace.FeedBlob("f", np.zeros(2500, np.float32))
    workspace.FeedBlob("u", np.zeros(10, np.uint16))
    options = caffe2_pb2.SerializationOptions(options=[caffe2_pb2.BlobSerializationOptions(
        blob_name_regex="f", chunk_size=1000)])
    workspace.RunOperatorOnce(core.CreateOperator("EstimateAllBlobSizes", [], ["names", "sizes"],
                                                  options=options))
    sizes = dict(zip([n.decode() if isinstance(n, bytes) else n for n in workspace.FetchBlob("names")],
                     workspace.FetchBlob("sizes").tolist()))
    # per chunk: name + 50 bytes; per element: float 4, 16-bit int 3, string 50, int64 8
    assert sizes == {"f": 3 * (1 + 50) + 2500 * 4, "u": (1 + 50) + 10 * 3,
                     "names": (5 + 50) + 4 * 50, "sizes": (5 + 50) + 4 * 8}


def test_estimate_all_blob_sizes_follows_caffe2_per_type():
    from caffe2py.proto import caffe2_pb2
    workspace.ResetWorkspace()
    workspace.FeedBlob("bf", np.ones(1200, np.float32))
    workspace.FeedBlob("i8", np.zeros(7, np.int8))
    workspace.FeedBlob("u8", np.zeros(5, np.uint8))
    workspace.FeedBlob("b", np.zeros(6, np.bool_))
    workspace.FeedBlob("h", np.zeros(4, np.float16))
    workspace.FeedBlob("empty", np.zeros((0, 3), np.float32))
    workspace.FeedBlob("s", "hello")
    bf16 = caffe2_pb2.BlobSerializationOptions(blob_name_regex="bf", chunk_size=500,
                                               float_format=caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16)
    whole = caffe2_pb2.BlobSerializationOptions(blob_name_regex="i8", chunk_size=-1)
    workspace.RunOperatorOnce(core.CreateOperator(
        "EstimateAllBlobSizes", [], ["names", "sizes"],
        options=caffe2_pb2.SerializationOptions(options=[bf16, whole])))
    sizes = dict(zip([n.decode() for n in workspace.FetchBlob("names")], workspace.FetchBlob("sizes").tolist()))
    # Caffe2's estimate: ceil(n / chunk) chunks of name + 50 bytes; per element bfloat16 2
    # (Save writes it so: an FBGEMM build), int8/uint8 2 and float16 3 (int32 varints),
    # bool 1; an empty tensor no chunk; a string blob name + length + 20
    assert workspace.has_fbgemm
    assert sizes["bf"] == 3 * (2 + 50) + 1200 * 2
    assert sizes["i8"] == (2 + 50) + 7 * 2
    assert sizes["u8"] == (2 + 50) + 5 * 2
    assert sizes["b"] == (1 + 50) + 6 * 1
    assert sizes["h"] == (1 + 50) + 4 * 3
    assert sizes["empty"] == 0
    assert sizes["s"] == 1 + 5 + 20
