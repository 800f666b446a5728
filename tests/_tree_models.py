"""Random tree-ensemble ONNX models built with onnx.helper (tests and
benchmarks/tree_ensemble_bench.py): the classic TreeEnsembleRegressor/Classifier
form and the opset-5 TreeEnsemble form of the same random trees."""
import numpy as np
from onnx import TensorProto, helper

ML = "ai.onnx.ml"


def random_trees(rng, n_trees, depth, n_features, n_targets, leaf_prob=0.15, modes=("BRANCH_LEQ",)):
    """Per tree: list of nodes dicts {id, mode, feature, value, true, false, votes}
    in id order (node 0 the root); leaves carry votes [(target, weight)]."""
    trees = []
    for _ in range(n_trees):
        nodes = []

        def grow(level):
            nid = len(nodes)
            node = {"id": nid}
            nodes.append(node)
            if level == depth or (level > 1 and rng.random() < leaf_prob):
                node.update(mode="LEAF", feature=0, value=0.0, true=0, false=0,
                            votes=[(int(t), float(rng.standard_normal())) for t in
                                   rng.choice(n_targets, size=rng.integers(1, n_targets + 1), replace=False)])
                return nid
            node.update(mode=str(rng.choice(modes)), feature=int(rng.integers(n_features)),
                        value=float(np.float32(rng.standard_normal())), votes=[])
            node["true"] = grow(level + 1)
            node["false"] = grow(level + 1)
            return nid
        grow(0)
        trees.append(nodes)
    return trees


def classic_attrs(trees, prefix, missing_true=False):
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                         prefix + "_treeids", prefix + "_nodeids", prefix + "_ids", prefix + "_weights")}
    for t, nodes in enumerate(trees):
        for n in nodes:
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(n["id"])
            a["nodes_featureids"].append(n["feature"])
            a["nodes_modes"].append(n["mode"])
            a["nodes_values"].append(n["value"])
            a["nodes_truenodeids"].append(n["true"])
            a["nodes_falsenodeids"].append(n["false"])
            a["nodes_missing_value_tracks_true"].append(int(missing_true and n["id"] % 2 == 0))
            for target, w in n["votes"]:
                a[prefix + "_treeids"].append(t)
                a[prefix + "_nodeids"].append(n["id"])
                a[prefix + "_ids"].append(target)
                a[prefix + "_weights"].append(w)
    return a


def _model(node, n_features, outputs, ml_opset, x_type=TensorProto.FLOAT):
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", x_type, [None, n_features])],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)],
                             ir_version=8 if ml_opset < 4 else 10)


def regressor(trees, n_features, n_targets, ml_opset=3, **attrs):
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=n_targets,
                            **classic_attrs(trees, "target", attrs.pop("missing_true", False)), **attrs)
    return _model(node, n_features, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], ml_opset)


def classifier(trees, n_features, labels, ml_opset=3, **attrs):
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain=ML,
                            **{key: list(labels)}, **classic_attrs(trees, "class"), **attrs)
    label_type = TensorProto.STRING if key == "classlabels_strings" else TensorProto.INT64
    return _model(node, n_features, [helper.make_tensor_value_info("label", label_type, None),
                                     helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)], ml_opset)


_MODE_CODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
               "BRANCH_NEQ": 5}


def tree_ensemble(trees, n_features, n_targets, aggregate_function=1, post_transform=0,
                  x_type=TensorProto.FLOAT):
    """The opset-5 TreeEnsemble of the same trees (a leaf there holds one vote, so
    each leaf keeps its first vote only)."""
    feats, splits, modes, tids, fids, tleaf, fleaf = [], [], [], [], [], [], []
    l_targets, l_weights, roots = [], [], []
    for nodes in trees:
        index = {}
        leaf_index = {}
        for n in nodes:
            if n["mode"] == "LEAF":
                leaf_index[n["id"]] = len(l_targets)
                l_targets.append(n["votes"][0][0])
                l_weights.append(n["votes"][0][1])
            else:
                index[n["id"]] = len(feats)
                feats.append(n["feature"])
                splits.append(n["value"])
                modes.append(_MODE_CODES[n["mode"]])
                tids.append(n["true"])
                fids.append(n["false"])
                tleaf.append(0)
                fleaf.append(0)
        roots.append(index[0])
        start = roots[-1]
        for k in range(start, len(feats)):
            for ids, flags in ((tids, tleaf), (fids, fleaf)):
                child = ids[k]
                if child in leaf_index:
                    ids[k], flags[k] = leaf_index[child], 1
                else:
                    ids[k] = index[child]
    dt = np.float32 if x_type == TensorProto.FLOAT else np.float64
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=n_targets, aggregate_function=aggregate_function,
        post_transform=post_transform, nodes_featureids=feats,
        nodes_splits=helper.make_tensor("s", x_type, [len(splits)], np.asarray(splits, dt)),
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(modes)], modes),
        nodes_truenodeids=tids, nodes_falsenodeids=fids, nodes_trueleafs=tleaf, nodes_falseleafs=fleaf,
        leaf_targetids=l_targets,
        leaf_weights=helper.make_tensor("w", x_type, [len(l_weights)], np.asarray(l_weights, dt)),
        tree_roots=roots)
    return _model(node, n_features, [helper.make_tensor_value_info("Y", x_type, None)], 5, x_type)
