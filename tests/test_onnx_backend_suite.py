"""onnx's own backend test suite (onnx.backend.test.BackendTest) against
caffe2py.onnx.backend, for the `real`, `simple`, `pytorch-converted` and
`pytorch-operator` categories, plus the `light` models (the `real` cases run
them on onnx's stored outputs; here they also run on random inputs against
onnxruntime).

The `node` category is out of scope (see docs/onnx.md) and excluded as a whole.
Per-case exclusions: none are needed; EXCLUDED documents the policy (each entry
must name a real defect in the test or in onnx, also listed in docs/onnx.md).
"""
import glob
import os

import numpy as np
import onnx
import onnx.backend.test
import pytest

import caffe2py.onnx.backend as c2_backend

EXCLUDED = {
    # pattern: reason (a defect in the test or in onnx; mirrored in docs/onnx.md)
}


@pytest.fixture(autouse=True, scope="module")
def _onnx_home(tmp_path_factory):
    """The `real` cases write their test data under $ONNX_HOME: keep it temporary."""
    old = os.environ.get("ONNX_HOME")
    os.environ["ONNX_HOME"] = str(tmp_path_factory.mktemp("onnx_home"))
    yield
    if old is None:
        os.environ.pop("ONNX_HOME", None)
    else:
        os.environ["ONNX_HOME"] = old


CATEGORIES = ("OnnxBackendRealModelTest", "OnnxBackendSimpleModelTest",
              "OnnxBackendPyTorchConvertedModelTest", "OnnxBackendPyTorchOperatorModelTest")

backend_test = onnx.backend.test.BackendTest(c2_backend, __name__)
backend_test.exclude(r"_cuda$")   # caffe2py's ONNX backend is CPU only
for _pattern in EXCLUDED:
    backend_test.exclude(_pattern)
# Only the categories in scope: the `node` category's class is left out whole.
globals().update({name: case for name, case in backend_test.test_cases.items() if name in CATEGORIES})


def test_categories_have_cases():
    """The suite really ran the five categories (a renamed class would silently drop one)."""
    names = set(backend_test.test_cases)
    for cls in CATEGORIES:
        assert cls in names
        cpu_tests = [t for t in dir(backend_test.test_cases[cls]) if t.endswith("_cpu")]
        assert cpu_tests, cls


LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: os.path.basename(p)[:-5])
def test_light_model_matches_onnxruntime(path):
    ort = pytest.importorskip("onnxruntime")
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    name = next(v.name for v in model.graph.input if v.name not in inits)
    x = np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)
    ours = c2_backend.prepare(model).run(x)[0]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {name: x})[0]
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-6)


def test_light_model_weights_are_folded_at_prepare_time():
    """ConstantOfShape weights run once in prepare (init net), never in the plan."""
    path = os.path.join(LIGHT_DIR, "light_squeezenet.onnx")
    rep = c2_backend.prepare(onnx.load(path))
    assert not [op for op in rep.predict_net.op if op.type == "ConstantOfShape"]
    assert sum(op.type == "ConstantOfShape" for op in rep.init_net.op) == 39
    assert all(name in rep.constants for name in rep.init_net.external_output)
