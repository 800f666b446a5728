"""ai.onnx.ml tree ensembles against onnxruntime on random models built with
onnx.helper (tests/_tree_models.py), the compiled kernel against its NumPy twin,
and the plan-time validation of malformed trees."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import caffe2py.onnx.backend as c2_backend
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.onnx_ml import trees as trees_k
from caffe2py.kernels.cpu.runtime import jit

from _tree_models import ML, classic_attrs, classifier, random_trees, regressor, tree_ensemble

ort = pytest.importorskip("onnxruntime")
ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x})


def _x(rng, n, f, nan=False, ties_from=None):
    x = rng.standard_normal((n, f)).astype(np.float32)
    if ties_from is not None:      # some values equal to thresholds: EQ/NEQ/LEQ vs LT matter
        x[: n // 2, 0] = rng.choice(ties_from, n // 2)
    if nan:
        x[rng.random((n, f)) < 0.1] = np.nan
    return x


def _thresholds(trees):
    return np.array([n["value"] for nodes in trees for n in nodes if n["mode"] != "LEAF"], np.float32)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_matches_onnxruntime(aggregate):
    rng = np.random.default_rng(1)
    trees = random_trees(rng, 12, 5, 6, 3, modes=ALL_MODES)
    model = regressor(trees, 6, 3, aggregate_function=aggregate, base_values=[0.5, -1.0, 2.0])
    x = _x(rng, 300, 6, ties_from=_thresholds(trees))
    (ours,) = c2_backend.prepare(model).run([x])
    (ref,) = _ort(model, x)
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_regressor_missing_values_follow_the_tracks():
    rng = np.random.default_rng(2)
    trees = random_trees(rng, 8, 5, 4, 1, modes=ALL_MODES)
    model = regressor(trees, 4, 1, missing_true=True)
    x = _x(rng, 400, 4, nan=True)
    np.testing.assert_allclose(c2_backend.prepare(model).run([x])[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_multiclass_classifier_matches_onnxruntime(transform):
    rng = np.random.default_rng(3)
    trees = random_trees(rng, 10, 5, 5, 4)
    model = classifier(trees, 5, [10, 20, 30, 40], post_transform=transform)
    x = _x(rng, 300, 5)
    labels, scores = c2_backend.prepare(model).run([x])
    ref_labels, ref_scores = _ort(model, x)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(labels, ref_labels)
    assert labels.dtype == np.int64


def test_string_labels():
    rng = np.random.default_rng(4)
    trees = random_trees(rng, 6, 4, 3, 3)
    model = classifier(trees, 3, ["a", "b", "c"], post_transform="SOFTMAX")
    x = _x(rng, 100, 3)
    labels, scores = c2_backend.prepare(model).run([x])
    ref_labels, ref_scores = _ort(model, x)
    np.testing.assert_array_equal(labels.astype(str), np.asarray(ref_labels).astype(str))
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("class_id", [0, 1])
def test_binary_classifier_with_votes_for_one_class(transform, positive, class_id):
    """LightGBM/XGBoost style: every leaf votes for one class (onnxruntime's binary
    case when that class is 0)."""
    rng = np.random.default_rng(5)
    trees = random_trees(rng, 10, 4, 4, 1)
    for nodes in trees:
        for n in nodes:
            n["votes"] = [(class_id, abs(w) / 10 if positive else w) for _, w in n["votes"]]
    model = classifier(trees, 4, [0, 1], post_transform=transform)
    x = _x(rng, 300, 4)
    labels, scores = c2_backend.prepare(model).run([x])
    ref_labels, ref_scores = _ort(model, x)
    if transform == "PROBIT" and class_id == 0:
        # onnxruntime writes only the first score here (the second is whatever the
        # buffer held); ours is 0
        scores, ref_scores = scores[:, :1], ref_scores[:, :1]
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(labels, ref_labels)


@pytest.mark.parametrize("aggregate,transform", [(1, 0), (0, 0), (2, 0), (3, 0), (1, 2), (1, 1)])
def test_tree_ensemble_5_matches_onnxruntime(aggregate, transform):
    rng = np.random.default_rng(6)
    trees = random_trees(rng, 10, 5, 5, 3)
    model = tree_ensemble(trees, 5, 3, aggregate_function=aggregate, post_transform=transform)
    x = _x(rng, 200, 5)
    (ours,) = c2_backend.prepare(model).run([x])
    # onnx numbers post_transform SOFTMAX 1, LOGISTIC 2; onnxruntime 1.32 reads them
    # the other way round (its internal enum), so its model gets the codes swapped
    swapped = tree_ensemble(trees, 5, 3, aggregate_function=aggregate, post_transform={1: 2, 2: 1}.get(
        transform, transform))
    (ref,) = _ort(swapped, x)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_tree_ensemble_5_double():
    rng = np.random.default_rng(7)
    trees = random_trees(rng, 5, 4, 3, 2)
    model = tree_ensemble(trees, 3, 2, x_type=TensorProto.DOUBLE)
    x = _x(rng, 100, 3).astype(np.float64)
    (ours,) = c2_backend.prepare(model).run([x])
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, _ort(model, x)[0], rtol=1e-12)


def test_kernel_agrees_with_numpy_twin():
    rng = np.random.default_rng(8)
    trees = random_trees(rng, 9, 6, 5, 3, modes=ALL_MODES)
    model = regressor(trees, 5, 3, missing_true=True)
    x = _x(rng, 257, 5, nan=True, ties_from=_thresholds(trees)).astype(np.float64)
    from caffe2py.operators.onnx_ml import onnx_ml_trees

    class _Ctx:       # the attributes the factory reads, from the model's node
        def __init__(self, node):
            self.a = {a.name: helper.get_attribute_value(a) for a in node.attribute}

        def has(self, name):
            return name in self.a

        def ints(self, name):
            return self.a[name]

        def floats(self, name):
            return self.a[name]

        def strings(self, name):
            return self.a[name]

    forest = onnx_ml_trees._classic_forest(_Ctx(model.graph.node[0]), "target", 3)
    plain = onnx_ml_trees._classic_forest(_Ctx(regressor(random_trees(rng, 7, 6, 5, 3), 5, 3).graph.node[0]),
                                          "target", 3)
    assert forest.uniform == -1 and plain.uniform == 0        # the general and the one-mode paths
    for f in (forest, plain):
        for aggregate in range(4):
            outs = []
            for fn in (trees_k._forest_rows, trees_k._forest_rows.twin):
                out, hit = np.zeros((257, 3)), np.zeros((257, 3), bool)
                fn(x, f.packed, f.mode, f.missing_true, f.member_lo, f.members, f.roots, f.leaf_lo,
                   f.targets, f.weights, aggregate, f.uniform, out, hit, np.array([0, 100, 257]))
                outs.append((out, hit))
            np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-12)
            np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert jit.jit_mode() == "inline"


def _bad_regressor(edit):
    """prepare + run of a small regressor whose classic attributes `edit` spoils."""
    trees = random_trees(np.random.default_rng(9), 2, 2, 3, 1)
    attrs = classic_attrs(trees, "target")
    edit(attrs)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)],
                              ir_version=8)
    return c2_backend.prepare(model).run([np.zeros((2, 3), np.float32)])


def test_cycle_is_refused_by_name():
    def edit(a):
        a["nodes_truenodeids"][0] = 0              # the root is its own true child
    with pytest.raises(Caffe2Error, match="own descendant"):
        _bad_regressor(edit)


def test_a_deep_cycle_is_refused_and_a_shared_subtree_is_not():
    from caffe2py.kernels.cpu.onnx_ml import trees as trees_k
    # internal nodes 0 -> 1 -> 2 -> 3 -> 1 (a cycle three levels below the root)
    true_child = np.array([1, 2, 3, 1])
    false_child = np.array([-1, -1, -1, -1])
    with pytest.raises(trees_k.ForestError, match="own descendant"):
        trees_k._check_acyclic(true_child, false_child, np.array([0]))
    # 0 -> (1, 2), 1 -> (3, leaf), 2 -> (3, leaf): node 3 has two parents; no cycle
    trees_k._check_acyclic(np.array([1, 3, 3, -1]), np.array([2, -1, -2, -2]), np.array([0]))
    # a chain as deep as there are nodes is not a cycle
    n = 500
    trees_k._check_acyclic(np.append(np.arange(1, n), -1), np.full(n, -1), np.array([0]))


def test_child_outside_the_tree_is_refused():
    def edit(a):
        a["nodes_falsenodeids"][0] = 999
    with pytest.raises(Caffe2Error, match="999"):
        _bad_regressor(edit)


def test_vote_target_out_of_range_is_refused():
    def edit(a):
        a["target_ids"][:] = [5] * len(a["target_ids"])
    with pytest.raises(Caffe2Error, match="target 5"):
        _bad_regressor(edit)


def test_too_few_features_is_a_named_error():
    rng = np.random.default_rng(10)
    trees = random_trees(rng, 3, 3, 6, 1)
    model = regressor(trees, 6, 1)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "F"
    need = 1 + max(n["feature"] for nodes in trees for n in nodes if n["mode"] != "LEAF")
    with pytest.raises(Caffe2Error, match="features per row"):
        c2_backend.prepare(model).run([np.zeros((4, need - 1), np.float32)])


def test_empty_batch():
    rng = np.random.default_rng(11)
    trees = random_trees(rng, 3, 3, 2, 2)
    (y,) = c2_backend.prepare(regressor(trees, 2, 2)).run([np.zeros((0, 2), np.float32)])
    assert y.shape == (0, 2) and y.dtype == np.float32
