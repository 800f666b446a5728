"""caffe2py.layers: each layer's nets against NumPy formulas written here (pooling
reducers, normalization, losses, sampling, weighting, records)."""
import numpy as np
import pytest

from caffe2py import core, layer_model_helper, schema, workspace
from caffe2py.layers.layers import InstantiationContext, get_key

RNG = np.random.RandomState(7)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _model():
    return layer_model_helper.LayerModelHelper(
        "m", input_feature_schema=schema.Struct(), trainer_extra_schema=schema.Struct())


def _record(model, field_schema, arrays):
    record = schema.NewRecord(model.net, field_schema)
    schema.FeedRecord(record, arrays)
    return record


def _run(model, context=InstantiationContext.TRAINING, times=1):
    """Run the layers' ops for `context` (after their parameters' init ops)."""
    init_net, net = model.create_init_net("init"), core.Net("net_" + context)
    for layer in model.layers:
        layer.add_operators(net, init_net, context=context)
    workspace.RunNetOnce(init_net)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name(), num_iter=times)
    return net


def _fetch(field):
    return workspace.FetchBlob(str(field()))


def _id_list(model, ids, lengths, limit=10):
    return _record(model, schema.List(schema.Scalar(np.int64, metadata=schema.Metadata(categorical_limit=limit))),
                   [lengths, ids])


IDS = np.array([1, 4, 4, 0, 9, 2], np.int64)
LENGTHS = np.array([3, 0, 1, 2], np.int32)
SEGMENTS = np.repeat(np.arange(len(LENGTHS)), LENGTHS)


def _segment_reduce(rows, reduce_fn, empty):
    return np.stack([reduce_fn(rows[SEGMENTS == s]) if LENGTHS[s] else empty for s in range(len(LENGTHS))])


@pytest.mark.parametrize("reducer, formula", [
    ("Sum", lambda r: r.sum(axis=0)),
    ("Mean", lambda r: r.mean(axis=0)),
    ("Sqrt", lambda r: r.sum(axis=0) / np.sqrt(len(r))),
])
def test_sparse_lookup_id_list_reducers(reducer, formula):
    model = _model()
    out = model.SparseLookup(_id_list(model, IDS, LENGTHS), [3], reducer)
    _run(model)
    table = workspace.FetchBlob(str(model.layers[0].w)).astype(np.float64)
    assert table.shape == (10, 3)
    expected = _segment_reduce(table[IDS], formula, np.zeros(3))
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-5, atol=1e-6)


def test_sparse_lookup_max_log_sum_exp_and_none_without_empty_lists():
    # the SortedSegmentRange reducers need every list non-empty
    model = _model()
    ids, lengths = np.array([3, 1, 5, 5, 0], np.int64), np.array([2, 1, 2], np.int32)
    record = _id_list(model, ids, lengths)
    maxed = model.SparseLookup(record, [2], "Max")
    log_sum_exp = model.SparseLookup(record, [2], "LogSumExp")
    gathered = model.SparseLookup(record, [2], "None")
    _run(model)
    groups = ([3, 1], [5], [5, 0])
    table = workspace.FetchBlob(str(model.layers[0].w))
    np.testing.assert_allclose(_fetch(maxed), [table[g].max(0) for g in groups], rtol=1e-6)
    table = workspace.FetchBlob(str(model.layers[1].w)).astype(np.float64)
    np.testing.assert_allclose(_fetch(log_sum_exp), [np.log(np.exp(table[g]).sum(0)) for g in groups], rtol=1e-5)
    np.testing.assert_array_equal(_fetch(gathered), workspace.FetchBlob(str(model.layers[2].w))[ids])


def _id_score_list(model, ids, scores, lengths):
    return _record(model, schema.Map(schema.Scalar(np.int64, metadata=schema.Metadata(categorical_limit=10)),
                                     np.float32), [lengths, ids, scores])


def test_sparse_lookup_id_score_list_weighted_sum_and_mean():
    model = _model()
    scores = np.array([0.5, -1.0, 2.0, 3.0, 0.25, 1.5], np.float32)
    record = _id_score_list(model, IDS, scores, LENGTHS)
    summed = model.SparseLookup(record, [2], "WeightedSum")
    mean = model.SparseLookup(record, [2], "WeightedMean")
    _run(model)
    for layer, out, divide in ((model.layers[0], summed, False), (model.layers[1], mean, True)):
        table = workspace.FetchBlob(str(layer.w)).astype(np.float64)
        rows = table[IDS] * scores[:, None]
        expected = _segment_reduce(rows, lambda r: r.sum(0) / (len(r) if divide else 1), np.zeros(2))
        np.testing.assert_allclose(_fetch(out), expected, rtol=1e-5, atol=1e-6)


def test_position_weighted_lookup_weighs_each_id_by_its_position():
    model = _model()
    record = _id_list(model, IDS, LENGTHS)
    positions = model.PositionWeighted(record)
    id_score_list = schema.Map(keys=get_key(record), values=positions.position_weights, lengths_blob=record.lengths)
    out = model.SparseLookup(id_score_list, [2], "PositionWeighted")
    _run(model)
    pos_w = RNG.rand(10).astype(np.float32)
    workspace.FeedBlob(str(model.layers[0].pos_w), pos_w)
    predict_net = core.Net("again")
    for layer in model.layers:
        layer.add_operators(predict_net, context=InstantiationContext.PREDICTION)
    workspace.RunNetOnce(predict_net)
    table = workspace.FetchBlob(str(model.layers[1].w)).astype(np.float64)
    position = np.concatenate([np.arange(n) for n in LENGTHS])
    expected = _segment_reduce(table[IDS] * pos_w[position][:, None], lambda r: r.sum(0), np.zeros(2))
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-5, atol=1e-6)


def test_sparse_lookup_refuses_features_without_a_categorical_limit():
    model = _model()
    record = _record(model, schema.List(np.int64), [LENGTHS, IDS])
    with pytest.raises(AssertionError, match="metadata"):
        model.SparseLookup(record, [2], "Sum")


def test_batch_normalization_uses_batch_statistics_in_training_and_running_ones_in_eval():
    model = _model()
    x = RNG.randn(6, 4).astype(np.float32) * 3 + 1
    out = model.BatchNormalization(_record(model, schema.Scalar((np.float32, (4,))), [x]))
    _run(model)
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-4, atol=1e-4)
    layer = model.layers[0]
    np.testing.assert_allclose(workspace.FetchBlob(str(layer.rm)), 0.1 * x.mean(0), rtol=1e-4, atol=1e-5)
    workspace.FeedBlob(str(layer.rm), np.full(4, 2.0, np.float32))
    workspace.FeedBlob(str(layer.riv), np.full(4, 0.5, np.float32))
    eval_net = core.Net("eval")
    layer.add_operators(eval_net, context=InstantiationContext.EVAL)
    workspace.RunNetOnce(eval_net)
    # SpatialBN's is_test input 4 holds the running variance
    np.testing.assert_allclose(_fetch(out), (x - 2.0) / np.sqrt(0.5 + 1e-5), rtol=1e-4, atol=1e-4)


def test_layer_normalization_normalizes_each_example():
    model = _model()
    x = RNG.randn(3, 4, 5).astype(np.float32)
    out = model.LayerNormalization(_record(model, schema.Scalar((np.float32, (4, 5))), [x]))
    _run(model)
    flat = x.reshape(3, -1)
    expected = ((flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-4)).reshape(x.shape)
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-4, atol=1e-4)


def test_concat_and_add_bias_and_fc_without_bias():
    model = _model()
    a, b = RNG.randn(2, 3).astype(np.float32), RNG.randn(2, 2).astype(np.float32)
    record = _record(model, schema.Struct(("a", schema.Scalar((np.float32, (3,)))),
                                          ("b", schema.Scalar((np.float32, (2,))))), [a, b])
    joined = model.Concat(record)
    assert joined.field_type().shape == (5,)
    biased = model.AddBias(joined)
    projected = model.FCWithoutBias(biased, 4)
    _run(model)
    bias = workspace.FetchBlob(str(model.layers[1].b))
    w = workspace.FetchBlob(str(model.layers[2].w))
    np.testing.assert_allclose(_fetch(joined), np.hstack([a, b]))
    np.testing.assert_allclose(_fetch(biased), np.hstack([a, b]) + bias, rtol=1e-6)
    np.testing.assert_allclose(_fetch(projected), (np.hstack([a, b]) + bias) @ w, rtol=1e-5, atol=1e-6)


def test_dropout_is_the_identity_outside_training():
    model = _model()
    x = RNG.rand(50, 4).astype(np.float32) + 1
    out = model.Dropout(_record(model, schema.Scalar((np.float32, (4,))), [x]), ratio=0.5)
    _run(model)
    trained = _fetch(out)
    assert set(np.unique(np.round(trained / x, 5))) <= {0.0, 2.0} and (trained == 0).any()
    _run(model, InstantiationContext.PREDICTION)
    np.testing.assert_array_equal(_fetch(out), x)


def test_batch_softmax_loss_with_weights():
    model = _model()
    logits = RNG.randn(4, 3).astype(np.float32)
    labels = np.array([2, 0, 1, 1], np.int64)
    weights = np.array([1.0, 0.5, 2.0, 0.0], np.float32)
    record = _record(model, schema.Struct(("label", schema.Scalar(np.int64)),
                                          ("prediction", schema.Scalar((np.float32, (3,)))),
                                          ("weight", schema.Scalar(np.float32))), [labels, logits, weights])
    out = model.BatchSoftmaxLoss(record)
    _run(model)
    softmax = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    nll = -np.log(softmax[np.arange(4), labels])
    np.testing.assert_allclose(_fetch(out.softmax), softmax, rtol=1e-5)
    np.testing.assert_allclose(_fetch(out.loss), (weights * nll).sum() / weights.sum(), rtol=1e-5)


def test_sigmoid_cross_entropy_mse_and_distill_losses():
    model = _model()
    logits = RNG.randn(4, 1).astype(np.float32)
    labels = np.array([1.0, 0.0, 0.0, 1.0])
    teacher = np.array([0.9, 0.2, 0.4, 0.6], np.float32)
    record = _record(model, schema.Struct(("label", schema.Scalar(np.float64)),
                                          ("logit", schema.Scalar((np.float32, (1,)))),
                                          ("teacher_label", schema.Scalar(np.float32)),
                                          ("prediction", schema.Scalar((np.float32, (1,))))),
                     [labels, logits, teacher, logits])

    def xent(z, t):
        return np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))

    sigmoid_loss = model.BatchSigmoidCrossEntropyLoss(schema.Struct(
        ("label", _record(model, schema.Scalar((np.float32, (1,))), [labels[:, None].astype(np.float32)])),
        ("prediction", record.logit)))
    mse = model.BatchMSELoss(record[["label", "prediction"]])
    distill = model.BatchDistillLRLoss(record[["label", "logit", "teacher_label"]], teacher_weight=0.25)
    _run(model)
    z = logits[:, 0].astype(np.float64)
    np.testing.assert_allclose(_fetch(sigmoid_loss), xent(z, labels).mean(), rtol=1e-5)
    np.testing.assert_allclose(_fetch(mse), np.mean(0.5 * (z - labels) ** 2), rtol=1e-5)
    np.testing.assert_allclose(_fetch(distill), 0.75 * xent(z, labels).mean() + 0.25 * xent(z, teacher).mean(),
                               rtol=1e-5)


def test_margin_rank_loss_sums_the_hinge_of_each_negative():
    model = _model()
    pos = np.array([0.5, 0.1, 0.9], np.float32)
    neg_lengths = np.array([2, 0, 3], np.int32)
    neg = np.array([0.45, 0.7, 0.2, 0.85, 0.95], np.float32)
    record = _record(model, schema.Struct(("pos_prediction", schema.Scalar(np.float32)),
                                          ("neg_prediction", schema.List(np.float32))), [pos, neg_lengths, neg])
    loss = model.MarginRankLoss(record, margin=0.1)
    _run(model)
    pos_each = np.repeat(pos, neg_lengths)
    np.testing.assert_allclose(_fetch(loss), np.maximum(0, 0.1 - (pos_each - neg)).sum(), rtol=1e-5)


def test_sampling_train_gathers_rows_and_subtracts_log_probability():
    model = _model()
    x = RNG.randn(2, 3).astype(np.float32)
    indices = np.array([4, 0, 2], np.int32)
    prob = np.array([0.5, 0.25, 0.125], np.float32)
    record = _record(model, schema.Struct(("input", schema.Scalar((np.float32, (3,)))),
                                          ("indices", schema.Scalar(np.int32)),
                                          ("sampling_prob", schema.Scalar(np.float32))), [x, indices, prob])
    out = model.SamplingTrain(record, "FC", 6)
    _run(model)
    fc = model.layers[0]._prediction_layer
    w, b = workspace.FetchBlob(str(fc.w)), workspace.FetchBlob(str(fc.b))
    np.testing.assert_allclose(_fetch(out), x @ w[indices].T + b[indices] - np.log(prob), rtol=1e-5, atol=1e-6)
    predict_net = core.Net("predict")
    model.layers[0].add_operators(predict_net, context=InstantiationContext.PREDICTION)
    workspace.RunNetOnce(predict_net)
    np.testing.assert_allclose(_fetch(out), x @ w.T + b, rtol=1e-5, atol=1e-6)


def test_pairwise_dot_product_flattens_every_pair():
    model = _model()
    x, y = RNG.randn(2, 3, 4).astype(np.float32), RNG.randn(2, 2, 4).astype(np.float32)
    record = _record(model, schema.Struct(("x_embeddings", schema.Scalar((np.float32, (3, 4)))),
                                          ("y_embeddings", schema.Scalar((np.float32, (2, 4))))), [x, y])
    out = model.PairwiseDotProduct(record, 6)
    _run(model)
    np.testing.assert_allclose(_fetch(out), np.einsum("nid,njd->nij", x, y).reshape(2, 6), rtol=1e-5, atol=1e-6)


def _packed_reservoir():
    model = _model()
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    ids = np.array([1, 2, 1, 3, 2], np.int64)
    record = _record(model, schema.Struct(("record", schema.Struct(("dense", schema.Scalar((np.float32, (2,)))))),
                                          ("object_id", schema.Scalar(np.int64))), [x, ids])
    packed = model.PackRecords(record.record, 1, fields=record.record.field_names())
    reservoir = model.ReservoirSampling(schema.Struct(("data", packed), ("object_id", record.object_id)), 3)
    _run(model)
    kept = workspace.FetchBlob(str(reservoir.reservoir()))
    # ids 1, 2, 3 are each taken once, at their first row
    assert kept.shape == (3,)
    np.testing.assert_array_equal(np.stack([row[0][0] for row in kept]), x[[0, 1, 3]])
    np.testing.assert_array_equal(workspace.FetchBlob(str(reservoir.num_visited())), [3])
    return model, record, reservoir


def test_reservoir_sampling_keeps_packed_records_and_deduplicates_ids():
    _packed_reservoir()


def test_reservoir_of_packed_records_restarts_after_a_serialization_round_trip():
    # Caffe2 does not save packed records: they come back as nulls and the reservoir
    # (its id map too) starts over on the next run
    model, record, reservoir = _packed_reservoir()
    name = str(reservoir.reservoir())
    workspace.DeserializeBlob(name, workspace.SerializeBlob(name))
    assert all(row is None for row in workspace.FetchBlob(name))
    workspace.FeedBlob(str(record.object_id()), np.array([7, 8, 7, 7, 8], np.int64))
    net = core.Net("again")
    for layer in model.layers:
        layer.add_operators(net, context=InstantiationContext.PREDICTION)
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(reservoir.num_visited())), [2])
    assert len(workspace.FetchBlob(name)) == 2


def test_last_n_window_collector_keeps_the_newest_rows():
    model = _model()
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    collected = model.LastNWindowCollector(_record(model, schema.Scalar((np.float32, (2,))), [x]), 3)
    _run(model, times=2)
    last = workspace.FetchBlob(str(collected.last_n()))
    assert sorted(map(tuple, last)) == sorted(map(tuple, x[2:]))
    np.testing.assert_array_equal(workspace.FetchBlob(str(collected.num_visited())), [10])


def test_map_to_range_numbers_new_ids_in_training_and_freezes_in_eval():
    model = _model()
    keys = _record(model, schema.Scalar(np.int32), [np.array([40, 7, 40, 9], np.int32)])
    mapped = model.MapToRange(keys, max_index=10)
    _run(model)
    np.testing.assert_array_equal(workspace.FetchBlob(str(mapped.indices())), [1, 2, 1, 3])
    workspace.FeedBlob(str(keys()), np.array([9, 11, 7], np.int32))
    eval_net = core.Net("eval")
    model.layers[0].add_operators(eval_net, context=InstantiationContext.EVAL)
    workspace.RunNetOnce(eval_net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(mapped.indices())), [3, 0, 2])


def test_gather_record_takes_examples_of_nested_lists():
    model = _model()
    lengths = np.array([1, 0, 2], np.int32)
    items = np.array([10, 20, 30], np.int64)
    dense = np.array([[1.0], [2.0], [3.0]], np.float32)
    record = _record(model, schema.Struct(("dense", schema.Scalar((np.float32, (1,)))),
                                          ("list", schema.List(np.int64))), [dense, lengths, items])
    indices = _record(model, schema.Scalar(np.int32), [np.array([2, 0], np.int32)])
    out = model.GatherRecord(schema.Struct(("indices", indices), ("record", record)))
    _run(model)
    np.testing.assert_array_equal(_fetch(out.dense), dense[[2, 0]])
    np.testing.assert_array_equal(_fetch(out.list.lengths), [2, 1])
    np.testing.assert_array_equal(_fetch(out.list.items), [20, 30, 10])


def test_merge_id_lists_and_sparse_feature_hash_modulo():
    model = _model()
    a = _id_list(model, np.array([1, 2, 5], np.int64), np.array([2, 1], np.int32), limit=8)
    b = _id_list(model, np.array([2, 7], np.int64), np.array([1, 1], np.int32), limit=20)
    merged = model.MergeIdLists(schema.Tuple(a, b))
    assert merged.items.metadata.categorical_limit == 20
    hashed = model.SparseFeatureHash(b, modulo=5, use_hashing=False)
    assert hashed.items.metadata.categorical_limit == 5
    _run(model)
    # each example's ids, without repeats
    np.testing.assert_array_equal(_fetch(merged.lengths), [2, 2])
    assert [sorted(x) for x in np.split(_fetch(merged.items), [2])] == [[1, 2], [5, 7]]
    np.testing.assert_array_equal(_fetch(hashed.items), [2, 2])
    np.testing.assert_array_equal(_fetch(hashed.lengths), [1, 1])


def test_select_record_by_context_picks_each_nets_record():
    model = _model()
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    first = _record(model, schema.Scalar(np.float32), [a])
    second = _record(model, schema.Scalar(np.float32), [b])
    out = model.SelectRecordByContext(schema.Struct((InstantiationContext.PREDICTION, first),
                                                    (InstantiationContext.TRAINING, second)),
                                      default_output_record_field=InstantiationContext.PREDICTION)
    _run(model)
    np.testing.assert_array_equal(_fetch(out), b)
    _run(model, InstantiationContext.EVAL)        # no eval record: the default
    np.testing.assert_array_equal(_fetch(out), a)


def test_homotopy_weight_moves_from_x_to_y():
    model = _model()
    x, y = np.array(3.0, np.float32), np.array(5.0, np.float32)
    record = _record(model, schema.RawTuple(2), [x, y])
    out = model.HomotopyWeight(record, min_weight=0.2, max_weight=1.0, half_life=10, quad_life=50)
    _run(model, times=10)
    alpha = 0.2 + 0.8 * 0.5
    np.testing.assert_allclose(_fetch(out), alpha * 3.0 + (1.2 - alpha) * 5.0, rtol=1e-4)


def test_adaptive_and_constant_weights_and_blob_weighted_sum():
    model = _model()
    data = [np.array(v, np.float32) for v in (0.5, 2.0, 1.5)]
    record = _record(model, schema.RawTuple(3), data)
    weights = np.array([0.2, 0.3, 0.5])
    adaptive = model.AdaptiveWeight(record, weights=weights)
    constant = model.ConstantWeight(record, weights=weights)
    vectors = _record(model, schema.Tuple(schema.Scalar((np.float32, (2,))), schema.Scalar((np.float32, (2,)))),
                      [np.ones((1, 2), np.float32), np.full((1, 2), 3.0, np.float32)])
    summed = model.BlobWeightedSum(vectors, init_weights=[2.0, -1.0])
    _run(model)
    values = np.array([0.5, 2.0, 1.5])
    np.testing.assert_allclose(_fetch(adaptive), np.sum(weights * values + np.log(0.5 / weights)), rtol=1e-5)
    np.testing.assert_allclose(_fetch(constant), np.sum(weights * values), rtol=1e-5)
    np.testing.assert_allclose(_fetch(summed), [[-1.0, -1.0]])


@pytest.mark.parametrize("binary", [True, False])
def test_label_smooth(binary):
    model = _model()
    labels = np.array([0, 1, 1, 0] if binary else [2, 0, 1, 2], np.float32)
    matrix = np.array([0.1, 0.9], np.float32) if binary else RNG.rand(3, 3).astype(np.float32)
    out = model.LabelSmooth(_record(model, schema.Scalar(np.float32), [labels]), matrix)
    _run(model)
    expected = np.where(labels < 0.5, 0.1, 0.9) if binary else matrix[labels.astype(int)]
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-6)


def test_random_feature_layers_follow_their_formulas():
    model = _model()
    x = RNG.randn(3, 4).astype(np.float32)
    record = _record(model, schema.Scalar((np.float32, (4,))), [x])
    rff = model.RandomFourierFeatures(record, 5, 2.0)
    arc = model.ArcCosineFeatureMap(record, 5, s=2)
    _run(model)
    w, b = workspace.FetchBlob(str(model.layers[0].w)), workspace.FetchBlob(str(model.layers[0].b))
    np.testing.assert_allclose(_fetch(rff), np.sqrt(2.0 / 5) * np.cos(x @ w.T + b), rtol=1e-4, atol=1e-5)
    arc_layer = model.layers[1]
    z = x @ workspace.FetchBlob(str(arc_layer.random_w)).T + workspace.FetchBlob(str(arc_layer.random_b))
    np.testing.assert_allclose(_fetch(arc), np.where(z > 0, z ** 2, 0), rtol=1e-4, atol=1e-5)


def test_conv_pads_to_keep_the_size_with_stride_one():
    model = _model()
    x = RNG.rand(2, 1, 5, 3).astype(np.float32)
    out = model.Conv(_record(model, schema.Scalar((np.float32, (1, 5, 3))), [x]), 4, kernel_h=1, kernel_w=3,
                     stride_h=1, stride_w=1)
    _run(model)
    kernel = workspace.FetchBlob(str(model.layers[0].kernel))        # (4, 1, 3, 3) NHWC filters
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)))
    expected = np.stack([np.einsum("nhkc,okc->nho", padded[:, :, j:j + 3, :], kernel[:, 0]) for j in range(5)],
                        axis=2)
    np.testing.assert_allclose(_fetch(out), expected, rtol=1e-4, atol=1e-5)


def test_feature_sparse_to_dense_float_and_id_list_features():
    model = _model()
    float_keys = np.array([5, 2, 9, 5], np.int64)
    float_values = np.array([1.5, -2.0, 7.0, 3.0], np.float32)
    float_lengths = np.array([2, 0, 2], np.int32)
    list_keys = np.array([11, 12, 11], np.int64)
    list_key_lengths = np.array([2, 1, 0], np.int32)
    item_lengths = np.array([2, 1, 3], np.int32)
    items = np.array([100, 101, 102, 103, 104, 105], np.int64)
    record = _record(model, schema.Struct(
        ("dense", schema.Map(np.int64, np.float32)),
        ("sparse", schema.Map(np.int64, schema.List(np.int64)))),
        [float_lengths, float_keys, float_values, list_key_lengths, list_keys, item_lengths, items])
    specs = [("dense", schema.FeatureSpec(feature_type="FLOAT", feature_names=["a", "b", "c"], feature_ids=[2, 5, 8])),
             ("sparse", schema.FeatureSpec(feature_type="ID_LIST", feature_names=["x", "y"], feature_ids=[12, 11]))]
    out = model.FeatureSparseToDense(record, specs)
    assert out.dense.metadata.feature_specs.feature_ids == [2, 5, 8]
    _run(model)
    np.testing.assert_array_equal(_fetch(out.dense), [[-2.0, 1.5, 0.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    # example 0: feature 11 -> items[0:2], feature 12 -> items[2:3]; example 1: 11 -> items[3:6]
    np.testing.assert_array_equal(_fetch(out.sparse.ranges), [[[2, 1], [0, 2]], [[0, 0], [3, 3]], [[0, 0], [0, 0]]])
    np.testing.assert_array_equal(_fetch(out.sparse.values), items)


def test_split_into_equal_and_given_parts():
    model = _model()
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    record = _record(model, schema.Scalar((np.float32, (6,))), [x])
    halves = model.Split(record, 2)
    parts = model.Split(record, split=[1, 5])
    assert parts.field_types()[1].shape == (5,)
    _run(model)
    np.testing.assert_array_equal(_fetch(halves.field_0), x[:, :3])
    np.testing.assert_array_equal(_fetch(halves.field_1), x[:, 3:])
    np.testing.assert_array_equal(_fetch(parts.field_1), x[:, 1:])


def _xent(z, t):
    return np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z)))


def _lr_record(model, with_extras=True):
    z = np.array([[0.3], [-1.2], [2.0], [0.1]], np.float32)
    labels = np.array([1, 0, 0, 1], np.int32)
    fields = [("label", schema.Scalar(np.int32)), ("logit", schema.Scalar((np.float32, (1,))))]
    arrays = [labels, z]
    if with_extras:
        prediction = 1.0 / (1.0 + np.exp(-z))
        weight = np.array([1.0, 2.0, 0.5, 1.0], np.float64)
        log_variance = np.array([0.2, -0.5, 1.0, 0.0], np.float32)
        fields += [("prediction", schema.Scalar((np.float32, (1,)))), ("weight", schema.Scalar(np.float64)),
                   ("log_variance", schema.Scalar(np.float32))]
        arrays += [prediction, weight, log_variance]
    return _record(model, schema.Struct(*fields), arrays), [a.astype(np.float64) for a in arrays]


def test_batch_lr_loss_plain_and_with_label_targets_summed():
    model = _model()
    record, (labels, z) = _lr_record(model, with_extras=False)
    mean_loss = model.BatchLRLoss(record)
    summed = model.BatchLRLoss(record, average_loss=False, pos_label_target=0.9, neg_label_target=0.1)
    _run(model)
    np.testing.assert_allclose(_fetch(mean_loss), _xent(z[:, 0], labels).mean(), rtol=1e-5)
    targets = np.where(labels > 0.5, 0.9, 0.1)
    np.testing.assert_allclose(_fetch(summed), _xent(z[:, 0], targets).sum(), rtol=1e-5)


def test_batch_lr_loss_focal_jsd_uncertainty_and_weight():
    model = _model()
    record, (labels, z, p, weight, s) = _lr_record(model)
    loss = model.BatchLRLoss(record, focal_gamma=2.0, jsd_weight=0.25, uncertainty_penalty=0.5)
    _run(model)
    p, z = p[:, 0], z[:, 0]
    focal = _xent(z, labels) * (labels + p - 2 * labels * p) ** 2

    def entropy(q):          # 0 at q = 0 and q = 1
        q = np.clip(q, 1e-30, 1 - 1e-16)
        return -(q * np.log(q) + (1 - q) * np.log(1 - q))

    jsd = entropy((p + labels) / 2) - (entropy(p) + entropy(labels)) / 2
    fused = 0.75 * focal + 0.25 * jsd
    expected = np.mean(0.5 * (np.exp(-s) * fused + 0.5 * s) * weight)
    np.testing.assert_allclose(_fetch(loss), expected, rtol=1e-4)


def test_batch_softmax_loss_label_smoothing_and_average_by_batch_size():
    model = _model()
    logits = RNG.randn(3, 3).astype(np.float32)
    labels = np.array([2, 0, 1], np.int32)
    weights = np.array([1.0, 3.0, 0.5], np.float32)
    smoothing = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.0, 0.2, 0.8]], np.float32)
    record = _record(model, schema.Struct(("label", schema.Scalar(np.int32)),
                                          ("prediction", schema.Scalar((np.float32, (3,)))),
                                          ("weight", schema.Scalar(np.float32))), [labels, logits, weights])
    out = model.BatchSoftmaxLoss(record, label_smoothing_matrix=smoothing, average_by_batch_size=True)
    _run(model)
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    per_example = -(smoothing[labels] * log_softmax).sum(1)
    np.testing.assert_allclose(_fetch(out.loss), (weights * per_example).sum() / 3, rtol=1e-5)


def test_huber_and_bpr_losses():
    model = _model()
    prediction = np.array([[0.5], [3.0], [-2.0]], np.float32)
    labels = np.array([0.0, 0.5, 1.0], np.float64)
    weights = np.array([1.0, 2.0, 0.5], np.float32)
    record = _record(model, schema.Struct(("label", schema.Scalar(np.float64)),
                                          ("prediction", schema.Scalar((np.float32, (1,)))),
                                          ("weight", schema.Scalar(np.float32))), [labels, prediction, weights])
    huber = model.BatchHuberLoss(record, delta=1.5)
    pos = np.array([0.3, 1.0], np.float32)
    neg_lengths = np.array([2, 1], np.int32)
    neg = np.array([0.5, -0.2, 2.0], np.float32)
    ranking = _record(model, schema.Struct(("pos_prediction", schema.Scalar(np.float32)),
                                           ("neg_prediction", schema.List(np.float32))), [pos, neg_lengths, neg])
    bpr = model.BPRLoss(ranking)
    _run(model)
    error = np.abs(labels - prediction[:, 0])
    expected = 0.5 * np.minimum(error, 1.5) ** 2 + 1.5 * np.maximum(error - 1.5, 0)
    np.testing.assert_allclose(_fetch(huber), np.mean(expected * weights), rtol=1e-5)
    np.testing.assert_allclose(_fetch(bpr), np.log1p(np.exp(neg - np.repeat(pos, neg_lengths))).sum(), rtol=1e-5)


def test_bucket_weighted_gathers_a_weight_per_bucket():
    model = _model()
    # an IdScoreList: the scores pick the buckets
    record = _record(model, schema.Map(np.int64, np.float32), [np.array([2, 1], np.int32),
                                                               np.array([4, 8, 9], np.int64),
                                                               np.array([0.5, 3.0, 7.5], np.float32)])
    out = model.BucketWeighted(record, bucket_boundaries=[1.0, 5.0], hash_buckets=False)
    _run(model)
    weights = RNG.rand(3).astype(np.float32)
    workspace.FeedBlob(str(model.layers[0].bucket_w), weights)
    net = core.Net("predict")
    model.layers[0].add_operators(net, context=InstantiationContext.PREDICTION)
    workspace.RunNetOnce(net)
    # buckets: (-inf, 1] -> 0, (1, 5] -> 1, (5, inf) -> 2
    np.testing.assert_allclose(_fetch(out.bucket_weights), weights[[0, 1, 2]])


def test_sparse_dropout_with_replacement_by_context():
    model = _model()
    record = _id_list(model, np.array([1, 2, 3, 4, 5], np.int64), np.array([2, 3], np.int32))
    out = model.SparseDropoutWithReplacement(record, 0.0, 0.0, 1.0, replacement_value=-1)
    _run(model)
    np.testing.assert_array_equal(_fetch(out.items), [1, 2, 3, 4, 5])
    _run(model, InstantiationContext.PREDICTION)
    np.testing.assert_array_equal(_fetch(out.items), [-1, -1])
    np.testing.assert_array_equal(_fetch(out.lengths), [1, 1])


def test_expand_dims_layer_and_adaptive_weight_refuses_other_estimators():
    model = _model()
    x = RNG.rand(2, 3).astype(np.float32)
    out = model.ExpandDims(_record(model, schema.Scalar((np.float32, (3,))), [x]), dims=[1, 3])
    assert out.field_type().shape == (1, 3, 1)
    _run(model)
    np.testing.assert_array_equal(_fetch(out), x[:, None, :, None])
    with pytest.raises(NotImplementedError, match="inv_var"):
        model.AdaptiveWeight(_record(model, schema.RawTuple(2), [np.float32(1), np.float32(2)]),
                             estimation_method="inv_var")


def test_fc_split_by_max_fc_size_matches_one_fc():
    model = _model()
    x = RNG.randn(3, 4).astype(np.float32)
    out = model.FC(_record(model, schema.Scalar((np.float32, (4,))), [x]), 7, max_fc_size=12)
    layer = model.layers[0]
    assert layer.output_dim_vec == [3, 3, 1]
    assert [str(p) for p in layer.param_blobs] == ["fc/w_sub_0", "fc/w_sub_1", "fc/w_sub_2",
                                                   "fc/b_sub_0", "fc/b_sub_1", "fc/b_sub_2"]
    _run(model)
    w = np.concatenate([workspace.FetchBlob(str(p)) for p in layer.w_vec])
    b = np.concatenate([workspace.FetchBlob(str(p)) for p in layer.b_vec])
    assert w.shape == (7, 4)
    np.testing.assert_allclose(_fetch(out), x @ w.T + b, rtol=1e-5, atol=1e-6)
    with pytest.raises(AssertionError, match="max_fc_size"):
        model.FC(_record(model, schema.Scalar((np.float32, (4,))), [x]), 7, max_fc_size=3)
