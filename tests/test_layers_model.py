"""caffe2py.layer_model_helper and layer_model_instantiator (Caffe2's layers
framework): a SparseLookup + FC + BatchLRLoss model trained with SGD against the
same model written in NumPy, its predict and eval nets, parameter sharing, tags,
regularizers, global constants, the loss and output records."""
import numpy as np
import pytest

from caffe2py import core, layer_model_helper, layer_model_instantiator as lmi, optimizer, regularizer
from caffe2py import schema, scope, workspace
from caffe2py.layers.tags import Tags
from caffe2py.modeling.parameter_sharing import ParameterSharing

VOCAB, DIM, LR = 7, 3, 0.5
IDS = np.array([0, 3, 3, 6, 1, 2, 5, 4], np.int64)
LENGTHS = np.array([2, 1, 3, 2], np.int32)
LABELS = np.array([1.0, 0.0, 1.0, 0.0], np.float32)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _sparse_model():
    model = layer_model_helper.LayerModelHelper(
        "lr_model",
        input_feature_schema=schema.Struct(("ids", schema.List(schema.Scalar(
            np.int64, metadata=schema.Metadata(categorical_limit=VOCAB))))),
        trainer_extra_schema=schema.Struct(("label", schema.Scalar(np.float32))))
    model.default_optimizer = optimizer.SgdOptimizer(base_learning_rate=LR)
    embedding = model.SparseLookup(model.input_feature_schema.ids, [DIM], "Sum")
    logit = model.FC(embedding, 1)
    loss = model.BatchLRLoss(schema.Struct(("label", model.trainer_extra_schema.label), ("logit", logit)))
    model.add_loss(loss)
    model.output_schema = schema.Struct(("logit", logit))
    return model, model.layers[0], model.layers[1]


def _feed(model, ids=IDS, lengths=LENGTHS, labels=LABELS):
    schema.FeedRecord(model.input_feature_schema, [lengths, ids])
    if labels is not None:
        schema.FeedRecord(model.trainer_extra_schema, [labels])


def _pool(table, ids, lengths):
    segments = np.repeat(np.arange(len(lengths)), lengths)
    pooled = np.zeros((len(lengths), table.shape[1]), np.float64)
    np.add.at(pooled, segments, table[ids])
    return pooled, segments


def _numpy_sgd_step(table, w, b, ids, lengths, labels):
    """One SGD step of mean sigmoid cross entropy through sum pooling and FC."""
    pooled, segments = _pool(table, ids, lengths)
    z = pooled @ w.T + b                                    # (N, 1)
    dz = (1.0 / (1.0 + np.exp(-z)) - labels[:, None]) / len(labels)
    d_pooled = dz @ w
    d_table = np.zeros_like(table)
    np.add.at(d_table, ids, d_pooled[segments])
    return table - LR * d_table, w - LR * (dz.T @ pooled), b - LR * dz.sum(axis=0)


def test_training_matches_numpy_sgd_on_sparse_lookup_fc_and_lr_loss():
    model, lookup, fc = _sparse_model()
    init_net, train_net = lmi.generate_training_nets(model)
    workspace.RunNetOnce(init_net)
    _feed(model)
    table, w, b = (workspace.FetchBlob(str(p)).astype(np.float64) for p in (lookup.w, fc.w, fc.b))
    assert table.shape == (VOCAB, DIM) and w.shape == (1, DIM) and b.shape == (1,)
    workspace.CreateNet(train_net)
    for _ in range(4):
        workspace.RunNet(train_net.Name())
        table, w, b = _numpy_sgd_step(table, w, b, IDS, LENGTHS, LABELS)
    np.testing.assert_allclose(workspace.FetchBlob(str(lookup.w)), table, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(str(fc.w)), w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(str(fc.b)), b, rtol=1e-4, atol=1e-5)
    # the not-trained quantization parameter keeps its initial value
    np.testing.assert_array_equal(workspace.FetchBlob(str(lookup.scale_bias)), np.zeros((), np.float32))


def test_loss_blob_is_the_numpy_mean_cross_entropy():
    model, lookup, fc = _sparse_model()
    init_net, train_net = lmi.generate_training_nets_forward_only(model)
    workspace.RunNetOnce(init_net)
    _feed(model)
    workspace.RunNetOnce(train_net)
    table, w, b = (workspace.FetchBlob(str(p)).astype(np.float64) for p in (lookup.w, fc.w, fc.b))
    z = (_pool(table, IDS, LENGTHS)[0] @ w.T + b)[:, 0]
    expected = np.mean(np.maximum(z, 0) - z * LABELS + np.log1p(np.exp(-np.abs(z))))
    np.testing.assert_allclose(workspace.FetchBlob(str(model.loss.unnamed())), expected, rtol=1e-5)


def test_predict_net_computes_the_logit_without_labels_or_loss():
    model, lookup, fc = _sparse_model()
    init_net, _ = lmi.generate_training_nets(model)
    workspace.RunNetOnce(init_net)
    predict_net = lmi.generate_predict_net(model)
    assert "BatchLRLoss" not in str(predict_net.Proto())
    op_types = [op.type for op in predict_net.Proto().op]
    assert op_types == ["SparseLengthsSum", "FC"]
    ids, lengths = np.array([6, 6, 0, 2], np.int64), np.array([3, 0, 1], np.int32)
    _feed(model, ids, lengths, labels=None)
    workspace.RunNetOnce(predict_net)
    table, w, b = (workspace.FetchBlob(str(p)) for p in (lookup.w, fc.w, fc.b))
    expected = _pool(table.astype(np.float64), ids, lengths)[0] @ w.T + b
    output = schema.FetchRecord(predict_net.output_record())
    np.testing.assert_allclose(output.logit(), expected, rtol=1e-5, atol=1e-6)
    assert [str(b) for b in predict_net.input_record().field_blobs()] == \
        [str(b) for b in model.input_feature_schema.field_blobs()]


def test_eval_net_reads_the_trainer_schema_and_reports_loss_free_outputs():
    model, _, _ = _sparse_model()
    eval_net = lmi.generate_eval_net(model)
    assert set(str(b) for b in eval_net.input_record().field_blobs()) == set(
        str(b) for b in (model.input_feature_schema + model.trainer_extra_schema).field_blobs())
    assert [op.type for op in eval_net.Proto().op][-1] == "AveragedLoss"


def test_regularizer_on_the_loss_adds_lambda_times_squared_weights_to_the_gradient():
    model = layer_model_helper.LayerModelHelper(
        "reg_model", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (2,))))),
        trainer_extra_schema=schema.Struct(("y", schema.Scalar((np.float32, (1,))))))
    model.default_optimizer = optimizer.SgdOptimizer(base_learning_rate=LR)
    lam = 0.3
    pred = model.FC(model.input_feature_schema.x, 1, weight_reg=regularizer.L2Norm(lam))
    model.add_loss(model.BatchMSELoss(schema.Struct(("label", model.trainer_extra_schema.y),
                                                    ("prediction", pred))))
    model.output_schema = schema.Struct(("pred", pred))
    init_net, train_net = lmi.generate_training_nets(model)
    workspace.RunNetOnce(init_net)
    x = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25]], np.float32)
    y = np.array([[1.0], [-1.0], [0.5]], np.float32)
    schema.FeedRecord(model.input_feature_schema, [x])
    schema.FeedRecord(model.trainer_extra_schema, [y])
    fc = model.layers[0]
    w, b = workspace.FetchBlob(str(fc.w)).astype(np.float64), workspace.FetchBlob(str(fc.b)).astype(np.float64)
    workspace.RunNetOnce(train_net)
    # loss = mean 0.5 (y - p)^2 + lam * sum(w^2)
    dp = (x @ w.T + b - y) / len(x)
    np.testing.assert_allclose(workspace.FetchBlob(str(fc.w)), w - LR * (dp.T @ x + 2 * lam * w), rtol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob(str(fc.b)), b - LR * dp.sum(axis=0), rtol=1e-4)
    assert len(model.loss.fields) == 2       # the MSE loss and the regularization term


def test_parameter_sharing_gives_one_blob_and_one_initializer():
    model = layer_model_helper.LayerModelHelper(
        "shared", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (4,))))),
        trainer_extra_schema=schema.Struct())
    with scope.NameScope("top"), ParameterSharing({"tower_b": "tower_a"}):
        with scope.NameScope("tower_a"):
            out_a = model.FC(model.input_feature_schema.x, 2)
        with scope.NameScope("tower_b"):
            out_b = model.FC(model.input_feature_schema.x, 2)
    assert model.layers[0].w == model.layers[1].w == "top/tower_a/fc/w"
    assert str(out_a()) == "top/tower_a/fc/output" and str(out_b()) == "top/tower_b/fc/output"
    init_net = core.Net("init")
    net = core.Net("net")
    for layer in model.layers:
        layer.add_operators(net, init_net)
    assert sorted(o for op in init_net.Proto().op for o in op.output) == ["top/tower_a/fc/b", "top/tower_a/fc/w"]
    workspace.RunNetOnce(init_net)
    x = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    schema.FeedRecord(model.input_feature_schema, [x])
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob(str(out_a())), workspace.FetchBlob(str(out_b())))


def test_shared_parameter_of_another_shape_is_refused():
    model = layer_model_helper.LayerModelHelper(
        "shared", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (4,))))),
        trainer_extra_schema=schema.Struct())
    with ParameterSharing({"fc_auto_0": "fc"}):
        model.FC(model.input_feature_schema.x, 2)
        with pytest.raises(ValueError, match="inconsistent shapes"):
            model.FC(model.input_feature_schema.x, 3)


def test_tags_keep_a_layer_out_of_the_predict_net():
    model = layer_model_helper.LayerModelHelper(
        "tags", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (2,))))),
        trainer_extra_schema=schema.Struct())
    with Tags(Tags.EXCLUDE_FROM_PREDICTION):
        logged = model.Log(model.input_feature_schema.x, 1)
    exp = model.Exp(model.input_feature_schema.x, 1)
    model.output_schema = schema.Struct(("log", logged), ("exp", exp))
    predict_net = lmi.generate_predict_net(model)
    assert [op.type for op in predict_net.Proto().op] == ["Exp"]
    # the output record keeps only what the predict net computes
    assert predict_net.output_record().field_names() == ["exp"]
    _, train_net = lmi.generate_training_nets_forward_only(model)
    assert [op.type for op in train_net.Proto().op] == ["Log", "Exp"]
    with Tags(Tags.TRAIN_ONLY):
        model.Abs(model.input_feature_schema.x, 1)
    assert Tags.EXCLUDE_FROM_EVAL in model.layers[-1].tags
    assert not model.layers[1].tags


def test_global_constants_are_filled_by_every_init_net():
    model = layer_model_helper.LayerModelHelper(
        "constants", input_feature_schema=schema.Struct(), trainer_extra_schema=schema.Struct())
    blob = model.add_global_constant("weights", [1, 2, 3], dtype=np.int64)
    assert model.maybe_add_global_constant("weights", [1, 2, 3], dtype=np.int64) == blob
    with pytest.raises(AssertionError, match="conflicting"):
        model.maybe_add_global_constant("weights", [1, 2, 4], dtype=np.int64)
    workspace.RunNetOnce(model.create_init_net("init"))
    np.testing.assert_array_equal(workspace.FetchBlob(str(blob)), np.array([1, 2, 3], np.int64))
    np.testing.assert_array_equal(workspace.FetchBlob(str(model.global_constants["ONE"])), [1.0])
    np.testing.assert_array_equal(workspace.FetchBlob(str(model.global_constants["ZERO_RANGE"])), [0, 0])


def test_add_loss_names_repeats_uniquely_and_output_fields_are_added_once():
    model = layer_model_helper.LayerModelHelper(
        "losses", input_feature_schema=schema.Struct(), trainer_extra_schema=schema.Struct())
    first = schema.Scalar(np.float32, core.BlobReference("a"))
    model.add_loss(first, "l")
    model.add_loss(schema.Scalar(np.float32, core.BlobReference("b")), "l")
    model.add_loss(schema.Scalar(np.float32, core.BlobReference("c")), "l")
    assert model.loss.field_names() == ["l", "l_auto_0", "l_auto_1"]
    assert [str(b) for b in model.loss.field_blobs()] == ["a", "b", "c"]
    model.add_output_schema("score", schema.Scalar(np.float32))
    with pytest.raises(AssertionError):
        model.add_output_schema("score", schema.Scalar(np.float32))
    with pytest.raises(AttributeError, match="non-registered layer"):
        model.NoSuchLayer


def test_layer_names_are_unique_in_their_name_scope():
    model = layer_model_helper.LayerModelHelper(
        "names", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (2,))))),
        trainer_extra_schema=schema.Struct())
    model.FC(model.input_feature_schema.x, 1)
    model.FC(model.input_feature_schema.x, 1)
    with scope.NameScope("s"):
        model.FC(model.input_feature_schema.x, 1)
    assert [layer.name for layer in model.layers] == ["fc", "fc_auto_0", "s/fc"]
    assert [str(p) for p in model.get_parameter_blobs()] == [
        "fc/w", "fc/b", "fc_auto_0/w", "fc_auto_0/b", "s/fc/w", "s/fc/b"]


def test_metrics_export_layer_outputs_and_parameter_copies():
    model = layer_model_helper.LayerModelHelper(
        "metrics", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, (3,))))),
        trainer_extra_schema=schema.Struct())
    out = model.FC(model.input_feature_schema.x, 2, output_to_metrics=True, params_to_metrics=True)
    model.output_schema = schema.Struct(("out", out))
    init_net, train_net = lmi.generate_training_nets_forward_only(model)
    assert train_net.output_record().field_names() == ["out", "fc/output", "fc/w", "fc/b"]
    # the predict net reports no metrics
    assert lmi.generate_predict_net(model).output_record().field_names() == ["out"]
    workspace.RunNetOnce(init_net)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    schema.FeedRecord(model.input_feature_schema, [x])
    workspace.RunNetOnce(train_net)
    metrics = schema.FetchRecord(train_net.output_record())
    w, b = workspace.FetchBlob("fc/w"), workspace.FetchBlob("fc/b")
    np.testing.assert_array_equal(metrics["fc/w"](), w)
    np.testing.assert_allclose(metrics["fc/output"](), x @ w.T + b, rtol=1e-5)


def test_request_only_inputs_give_request_only_outputs():
    from caffe2py.layers.layers import is_request_only_scalar, set_request_only
    model = layer_model_helper.LayerModelHelper(
        "request", input_feature_schema=schema.Struct(), trainer_extra_schema=schema.Struct())
    ids = schema.Scalar(np.int64, metadata=schema.Metadata(
        categorical_limit=50, expected_value=3, feature_specs=schema.FeatureSpec(feature_ids=[7, 9])))
    set_request_only(ids)
    assert ids.metadata.categorical_limit == 50 and ids.metadata.expected_value == 3
    assert ids.metadata.feature_specs.feature_ids == [7, 9] and is_request_only_scalar(ids)
    request = schema.NewRecord(model.net, schema.Struct(("a", schema.Scalar((np.float32, (2,)))),
                                                        ("b", schema.Scalar((np.float32, (3,))))))
    set_request_only(request)
    assert is_request_only_scalar(model.Concat(request))
    other = schema.NewRecord(model.net, schema.Struct(("c", schema.Scalar((np.float32, (1,))))))
    assert not is_request_only_scalar(model.Concat(request + other))
