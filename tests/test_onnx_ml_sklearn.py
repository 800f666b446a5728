"""scikit-learn models converted by skl2onnx, run by caffe2py and onnxruntime
(1e-5); skipped when scikit-learn or skl2onnx is not installed."""
import numpy as np
import pytest

import caffe2py.onnx.backend as c2_backend

ort = pytest.importorskip("onnxruntime")
sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")


def _data(classes):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    if classes > 2:
        y += (x[:, 2] > 1).astype(np.int64)
    return x, y, x[:, 0] * 2 + x[:, 3]


def _models():
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler
    from sklearn.svm import SVC, SVR
    from sklearn.tree import DecisionTreeClassifier
    return [
        ("random_forest_classifier", RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0), "c"),
        ("decision_tree_binary", DecisionTreeClassifier(max_depth=4, random_state=0), "b"),
        ("random_forest_regressor", RandomForestRegressor(n_estimators=10, max_depth=5, random_state=0), "r"),
        ("gradient_boosting_regressor", GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0), "r"),
        ("logistic_regression", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)), "c"),
        ("logistic_binary", make_pipeline(MinMaxScaler(), LogisticRegression(max_iter=500)), "b"),
        ("linear_regression", make_pipeline(Normalizer(), LinearRegression()), "r"),
        ("svr_rbf", SVR(kernel="rbf"), "r"),
        ("svc_rbf", SVC(kernel="rbf"), "c"),
    ]


CASES = ["random_forest_classifier", "decision_tree_binary", "random_forest_regressor",
         "gradient_boosting_regressor", "logistic_regression", "logistic_binary", "linear_regression",
         "svr_rbf", "svc_rbf"]


@pytest.mark.parametrize("name", CASES)
def test_converted_model_matches_onnxruntime(name):
    from skl2onnx import to_onnx
    _, model, task = next(m for m in _models() if m[0] == name)
    x, y, target = _data(3 if task == "c" else 2)
    model.fit(x, target if task == "r" else y)
    options = None if task == "r" else {id(model): {"zipmap": False}}
    onx = to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    ours = c2_backend.prepare(onx).run([x])
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {sess.get_inputs()[0].name: x})
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        b = np.asarray(b)
        if b.dtype.kind in "iuOSU":
            np.testing.assert_array_equal(np.asarray(a), b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
