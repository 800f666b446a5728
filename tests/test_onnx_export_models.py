"""The nine onnx `light_*` models round-trip: ONNX -> NetDefs (caffe2py's import)
-> ONNX (the export) -> onnxruntime, equal to onnxruntime on the original."""
import glob
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from caffe2py.onnx import convert, frontend  # noqa: E402

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))
BIG = {"light_vgg19", "light_zfnet512"}      # 575 and 349 MB of weights once materialised


def _param(path):
    name = os.path.basename(path)[:-5]
    return pytest.param(path, id=name, marks=[pytest.mark.slow] if name in BIG else [])


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_the_nine_light_models_are_there():
    assert len(LIGHT_MODELS) == 9


@pytest.mark.parametrize("path", [_param(p) for p in LIGHT_MODELS])
def test_light_model_round_trip(path):
    original = onnx.load(path)
    inits = {t.name for t in original.graph.initializer}
    graph_input = next(v for v in original.graph.input if v.name not in inits)
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    expected = _session(original).run(None, {graph_input.name: x})

    init_net, predict_net = convert(original)
    value_info = {graph_input.name: (graph_input.type.tensor_type.elem_type, shape)}
    result = frontend.export(predict_net, init_net, value_info)
    model = result.model
    del init_net, predict_net, original
    assert [o.version for o in model.opset_import if o.domain == ""] == [frontend.DEFAULT_OPSET]
    if result.initializer_bytes < 100e6:     # the big ones: the export's own check (of the skeleton)
        onnx.checker.check_model(model, full_check=True)
    got = _session(model).run(None, {graph_input.name: x})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-7)
