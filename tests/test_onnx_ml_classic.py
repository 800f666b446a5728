"""The classic ai.onnx.ml ops against onnxruntime on one-node models built with
onnx.helper, 1e-5."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import caffe2py.onnx.backend as c2_backend
from caffe2py.errors import Caffe2Error

ort = pytest.importorskip("onnxruntime")
ML = "ai.onnx.ml"
F, S, I = TensorProto.FLOAT, TensorProto.STRING, TensorProto.INT64


def _model(op, inputs, outputs, **attrs):
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], domain=ML, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) if t is not None else
                               helper.make_value_info(n, helper.make_sequence_type_proto(
                                   helper.make_map_type_proto(S if isinstance(attrs.get("classlabels_strings"), list)
                                                              else I, helper.make_tensor_type_proto(F, None))))
                               for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)],
                             ir_version=8)


def _both(model, feeds):
    ours = c2_backend.prepare(model).run(list(feeds.values()))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ours, sess.run(None, feeds)


def _close(ours, ref):
    for a, b in zip(ours, ref):
        if isinstance(b, list):
            assert len(a) == len(b)
            for da, db in zip(a, b):
                assert set(da) == set(db)
                np.testing.assert_allclose([da[k] for k in db], [db[k] for k in db], rtol=1e-5, atol=1e-6)
        elif np.asarray(b).dtype.kind in "OSU":
            np.testing.assert_array_equal(np.asarray(a).astype(str), np.asarray(b).astype(str))
        else:
            b = np.asarray(b)
            assert a.shape == b.shape, (a.shape, b.shape)
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((50, 4)).astype(np.float32)


def test_scaler():
    m = _model("Scaler", [("X", F, [None, 4])], [("Y", F)], offset=[0.5, -1, 2, 0], scale=[2, 0.5, 1, 3])
    _close(*_both(m, {"X": X}))


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    m = _model("Normalizer", [("X", F, [None, 4])], [("Y", F)], norm=norm)
    _close(*_both(m, {"X": X}))


def test_imputer_floats_nan():
    x = X.copy()
    x[RNG.random(x.shape) < 0.2] = np.nan
    m = _model("Imputer", [("X", F, [None, 4])], [("Y", F)], imputed_value_floats=[1.0, 2.0, 3.0, 4.0],
               replaced_value_float=float("nan"))
    _close(*_both(m, {"X": x}))


def test_imputer_int64():
    x = RNG.integers(-2, 3, (20, 3)).astype(np.int64)
    m = _model("Imputer", [("X", I, [None, 3])], [("Y", I)], imputed_value_int64s=[7],
               replaced_value_int64=0)
    _close(*_both(m, {"X": x}))


def test_one_hot_encoder_strings_and_ints():
    x = np.array([["a", "c"], ["b", "zz"]], dtype=object)
    m = _model("OneHotEncoder", [("X", S, [None, 2])], [("Y", F)], cats_strings=["a", "b", "c"])
    _close(*_both(m, {"X": x}))
    xi = np.array([[1, 5], [3, 3]], np.int64)
    m = _model("OneHotEncoder", [("X", I, [None, 2])], [("Y", F)], cats_int64s=[1, 3, 4])
    _close(*_both(m, {"X": xi}))


def test_one_hot_encoder_unknown_without_zeros_is_an_error():
    m = _model("OneHotEncoder", [("X", I, [None])], [("Y", F)], cats_int64s=[1, 2], zeros=0)
    with pytest.raises(Caffe2Error, match="not among cats"):
        c2_backend.prepare(m).run([np.array([1, 9], np.int64)])


def test_category_mapper_both_ways():
    cats = dict(cats_strings=["x", "y", "z"], cats_int64s=[10, 20, 30], default_int64=-5, default_string="?")
    m = _model("CategoryMapper", [("X", S, [None])], [("Y", I)], **cats)
    _close(*_both(m, {"X": np.array(["y", "x", "q"], dtype=object)}))
    m = _model("CategoryMapper", [("X", I, [None])], [("Y", S)], **cats)
    _close(*_both(m, {"X": np.array([30, 11, 10], np.int64)}))


def test_feature_vectorizer_pads_and_truncates():
    a = RNG.standard_normal((5, 2)).astype(np.float32)
    b = RNG.standard_normal((5, 4)).astype(np.float32)
    m = _model("FeatureVectorizer", [("A", F, [None, 2]), ("B", F, [None, 4])], [("Y", F)], inputdimensions=[3, 2])
    _close(*_both(m, {"A": a, "B": b}))


@pytest.mark.parametrize("labels", [{"classlabels_strings": ["a", "b", "c"]}, {"classlabels_int64s": [5, 6, 7]}])
def test_zipmap(labels):
    x = RNG.random((4, 3)).astype(np.float32)
    m = _model("ZipMap", [("X", F, [None, 3])], [("Z", None)], **labels)
    _close(*_both(m, {"X": x}))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_regressor(transform):
    m = _model("LinearRegressor", [("X", F, [None, 4])], [("Y", F)], targets=2,
               coefficients=RNG.standard_normal(8).tolist(), intercepts=[0.5, -0.25], post_transform=transform)
    _close(*_both(m, {"X": X}))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_linear_classifier_multiclass(transform):
    m = _model("LinearClassifier", [("X", F, [None, 4])], [("label", I), ("scores", F)],
               classlabels_ints=[3, 4, 5], coefficients=RNG.standard_normal(12).tolist(),
               intercepts=[0.1, 0.2, -0.3], post_transform=transform)
    _close(*_both(m, {"X": X}))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_linear_classifier_binary(transform):
    m = _model("LinearClassifier", [("X", F, [None, 4])], [("label", S), ("scores", F)],
               classlabels_strings=["no", "yes"], coefficients=RNG.standard_normal(4).tolist(),
               intercepts=[0.1], post_transform=transform)
    _close(*_both(m, {"X": X}))


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor(kernel):
    sv = RNG.standard_normal((6, 4))
    m = _model("SVMRegressor", [("X", F, [None, 4])], [("Y", F)], kernel_type=kernel,
               kernel_params=[0.3, 0.1, 2.0], support_vectors=sv.reshape(-1).tolist(), n_supports=6,
               coefficients=RNG.standard_normal(6).tolist(), rho=[0.4])
    _close(*_both(m, {"X": X}))


def test_svm_regressor_linear_form():
    """No support vectors: the coefficients are the weights (onnxruntime refuses
    the model, so the formula is the reference)."""
    w = RNG.standard_normal(4)
    m = _model("SVMRegressor", [("X", F, [None, 4])], [("Y", F)], kernel_type="LINEAR",
               coefficients=w.tolist(), rho=[0.4], n_supports=0)
    (y,) = c2_backend.prepare(m).run([X])
    np.testing.assert_allclose(y[:, 0], X.astype(np.float64) @ w + 0.4, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("kernel", ["RBF", "LINEAR"])
def test_svm_classifier(n_classes, kernel):
    counts = [2, 3, 2][:n_classes]
    n_sv = sum(counts)
    m = _model("SVMClassifier", [("X", F, [None, 4])], [("label", I), ("scores", F)], kernel_type=kernel,
               kernel_params=[0.3, 0.0, 3.0], classlabels_ints=list(range(n_classes)), vectors_per_class=counts,
               support_vectors=RNG.standard_normal(n_sv * 4).tolist(),
               coefficients=RNG.standard_normal((n_classes - 1) * n_sv).tolist(),
               rho=RNG.standard_normal(n_classes * (n_classes - 1) // 2).tolist())
    _close(*_both(m, {"X": X}))


@pytest.mark.parametrize("n_classes", [2, 3, 4, 5])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier_with_probability_estimates(n_classes, transform):
    """prob_a/prob_b (scikit-learn's SVC(probability=True)): Platt-scaled pairs coupled
    into class probabilities, label by votes, as onnxruntime. (onnx.reference's
    coupling differs from libsvm's, so onnxruntime is the reference.)"""
    rng = np.random.default_rng(n_classes)
    counts = [2, 3, 2, 1, 2][:n_classes]
    n_sv, pairs = sum(counts), n_classes * (n_classes - 1) // 2
    m = _model("SVMClassifier", [("X", F, [None, 4])], [("label", I), ("scores", F)], kernel_type="RBF",
               kernel_params=[0.3, 0.0, 3.0], classlabels_ints=list(range(10, 10 + n_classes)),
               vectors_per_class=counts, support_vectors=rng.standard_normal(n_sv * 4).tolist(),
               coefficients=rng.standard_normal((n_classes - 1) * n_sv).tolist(),
               rho=rng.standard_normal(pairs).tolist(), prob_a=(-3 * rng.random(pairs)).tolist(),
               prob_b=(0.3 * rng.standard_normal(pairs)).tolist(), post_transform=transform)
    x = rng.standard_normal((200, 4)).astype(np.float32)
    _close(*_both(m, {"X": x}))


def test_pairwise_coupling_solves_the_constrained_quadratic_problem():
    """Independent of libsvm's iteration: the minimiser of p'Qp with sum(p) = 1 is
    Q^-1 1 / (1' Q^-1 1), and consistent pairs r_ij = p_i / (p_i + p_j) give back p."""
    from caffe2py.kernels.cpu.onnx_ml import svm_probability
    rng = np.random.default_rng(7)
    k = 4
    truth = rng.dirichlet(np.ones(k), size=30)
    consistent = truth[:, :, None] / (truth[:, :, None] + truth[:, None, :])
    consistent[:, np.arange(k), np.arange(k)] = 0
    np.testing.assert_allclose(svm_probability.couple(consistent), truth, atol=2e-3)
    upper = np.triu(rng.uniform(0.05, 0.95, (30, k, k)), 1)
    r = upper + np.transpose(np.where(upper > 0, 1 - upper, 0), (0, 2, 1))
    q = -np.transpose(r, (0, 2, 1)) * r
    q[:, np.arange(k), np.arange(k)] = (r * r).sum(axis=1)
    solved = np.linalg.solve(q, np.ones((30, k, 1)))[:, :, 0]
    expected = solved / solved.sum(axis=1, keepdims=True)
    got = svm_probability.couple(r)
    np.testing.assert_allclose(got.sum(axis=1), 1, atol=1e-9)
    np.testing.assert_allclose(got, expected, atol=2e-3)


def test_svm_probability_arguments_are_checked():
    m = _model("SVMClassifier", [("X", F, [None, 4])], [("label", I), ("scores", F)], classlabels_ints=[0, 1, 2],
               vectors_per_class=[1, 1, 1], support_vectors=[0.0] * 12, coefficients=[1.0] * 6,
               rho=[0.0, 0.0, 0.0], prob_a=[1.0, 2.0], prob_b=[0.0, 0.0, 0.0])
    with pytest.raises(Caffe2Error, match="prob_a and prob_b need one value per class pair \\(3\\), got 2 and 3"):
        c2_backend.prepare(m).run([X])


def test_ops_command_lists_the_ml_domain_with_opset_ranges(capsys):
    from caffe2py.cli import main
    assert main(["ops", "--domain", "ai.onnx.ml"]) == 0
    rows = {line.split()[1]: line.split()[-1] for line in capsys.readouterr().out.splitlines()
            if line.startswith("ai.onnx.ml")}
    for op in ("TreeEnsembleClassifier", "TreeEnsembleRegressor", "LinearClassifier", "LinearRegressor",
               "SVMClassifier", "SVMRegressor", "Scaler", "Normalizer", "OneHotEncoder", "LabelEncoder",
               "ZipMap", "ArrayFeatureExtractor", "Binarizer", "Imputer", "CategoryMapper", "FeatureVectorizer"):
        assert rows.get(op) == "1-", (op, rows.get(op))
    assert rows["TreeEnsemble"] == "5-"


def test_negative_sizes_are_named_errors():
    m = _model("FeatureVectorizer", [("A", F, [None, 2])], [("Y", F)], inputdimensions=[-1])
    with pytest.raises(Caffe2Error, match="inputdimensions"):
        c2_backend.prepare(m).run([X[:, :2]])
    m = _model("SVMClassifier", [("X", F, [None, 4])], [("label", I), ("scores", F)], classlabels_ints=[0, 1],
               vectors_per_class=[3, -1], support_vectors=[0.0] * 8, coefficients=[1.0, 1.0], rho=[0.0])
    with pytest.raises(Caffe2Error, match="vectors_per_class"):
        c2_backend.prepare(m).run([X])


def test_one_hot_of_non_whole_float_is_a_named_error():
    m = _model("OneHotEncoder", [("X", F, [None])], [("Y", F)], cats_int64s=[1, 2])
    with pytest.raises(Caffe2Error, match="whole numbers"):
        c2_backend.prepare(m).run([np.array([1.0, np.nan], np.float32)])
