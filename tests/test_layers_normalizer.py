"""caffe2py.normalizer and normalizer_context: the normalizers add their layers to a
layer model (values against NumPy) and are found by name in a UseNormalizer block."""
import numpy as np
import pytest

from caffe2py import core, layer_model_helper, schema, workspace
from caffe2py.normalizer import BatchNormalizer, LayerNormalizer
from caffe2py.normalizer_context import NormalizerContext, UseNormalizer


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _forward(model):
    init_net, net = core.Net("init"), core.Net("net")
    for layer in model.layers:
        layer.add_operators(net, init_net)
    workspace.RunNetOnce(init_net)
    workspace.RunNetOnce(net)


def _model_with_input(x):
    model = layer_model_helper.LayerModelHelper(
        "n", input_feature_schema=schema.Struct(("x", schema.Scalar((np.float32, x.shape[1:])))),
        trainer_extra_schema=schema.Struct())
    schema.FeedRecord(model.input_feature_schema, [x])
    return model


def test_batch_normalizer_adds_batch_normalization_with_its_momentum_and_scale():
    x = np.random.RandomState(1).randn(8, 3).astype(np.float32)
    model = _model_with_input(x)
    out = BatchNormalizer(momentum=0.5, scale_init_value=2.0)(model, model.input_feature_schema.x)
    _forward(model)
    layer = model.layers[0]
    assert layer.momentum == 0.5
    np.testing.assert_allclose(workspace.FetchBlob(str(out())), 2.0 * (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob(str(layer.rm)), 0.5 * x.mean(0), rtol=1e-4, atol=1e-5)


def test_layer_normalizer_uses_its_epsilon():
    x = np.random.RandomState(2).randn(4, 6).astype(np.float32) * 0.01
    model = _model_with_input(x)
    out = LayerNormalizer(epsilon=1e-3)(model, model.input_feature_schema.x)
    _forward(model)
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(workspace.FetchBlob(str(out())), expected, rtol=1e-4, atol=1e-4)


def test_use_normalizer_blocks_nest_and_pop():
    outer, inner = BatchNormalizer(0.1), LayerNormalizer(1e-4)
    with UseNormalizer({"BATCH": outer}):
        with UseNormalizer({"BATCH": inner}):
            assert NormalizerContext.current().get_normalizer("BATCH") is inner
        assert NormalizerContext.current().get_normalizer("BATCH") is outer
    assert not NormalizerContext.current().has_normalizer("BATCH")
