"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier
(opsets 1-3 of the domain, the form scikit-learn/LightGBM/XGBoost converters emit)
and TreeEnsemble (opset 5). Each factory turns the node/leaf attributes into one
validated Forest at plan time; kernels/cpu/onnx/trees.py walks it in a compiled
loop. Scores follow onnxruntime: base values added after aggregation, then the
post transform; the classifier's binary case (two labels, every vote for class
0) as onnxruntime scores it (see _binary)."""
import numpy as np

from caffe2py.kernels.cpu.onnx import trees as trees_k
from caffe2py.tensors import tensor_to_numpy

from .onnx_base import onnx_op

ML = "ai.onnx.ml"
_MODES = {name: code for code, name in enumerate(trees_k.MODE_NAMES)}


def _floats(ctx, name, default=None):
    """name_as_tensor (double) if given, else the float list name, as float64."""
    if ctx.has(name + "_as_tensor"):
        return tensor_to_numpy(ctx.tensor(name + "_as_tensor")).astype(np.float64).reshape(-1)
    if ctx.has(name):
        return np.asarray(ctx.floats(name), np.float64)
    return default


def _ints(ctx, name, default=None):
    return np.asarray(ctx.ints(name), np.int64) if ctx.has(name) else default


def _classic_forest(ctx, prefix, n_targets):
    """A Forest from nodes_* and {prefix}_{treeids,nodeids,ids,weights}."""
    tree_ids, node_ids = _ints(ctx, "nodes_treeids"), _ints(ctx, "nodes_nodeids")
    if tree_ids is None or node_ids is None:
        raise ctx.error("needs nodes_treeids and nodes_nodeids")
    n = tree_ids.size
    features = _ints(ctx, "nodes_featureids", np.zeros(n, np.int64))
    modes = ctx.strings("nodes_modes") if ctx.has("nodes_modes") else []
    values = _floats(ctx, "nodes_values", np.zeros(n))
    trues, falses = _ints(ctx, "nodes_truenodeids", np.zeros(n, np.int64)), _ints(ctx, "nodes_falsenodeids",
                                                                                 np.zeros(n, np.int64))
    missing = _ints(ctx, "nodes_missing_value_tracks_true", np.zeros(n, np.int64))
    for name, arr in (("nodes_nodeids", node_ids), ("nodes_featureids", features), ("nodes_modes", modes),
                      ("nodes_values", values), ("nodes_truenodeids", trues), ("nodes_falsenodeids", falses),
                      ("nodes_missing_value_tracks_true", missing)):
        if len(arr) != n:
            raise ctx.error("%s has %d values, nodes_treeids %d" % (name, len(arr), n))
    modes = [m.decode() if isinstance(m, bytes) else m for m in modes]
    unknown = sorted(set(modes) - set(_MODES) - {"LEAF"})
    if unknown:
        raise ctx.error("unknown nodes_modes %s (expected %s or LEAF)" % (unknown, ", ".join(trees_k.MODE_NAMES)))
    # positions: internal nodes and leaves numbered separately, in attribute order
    # each tree's root: its node id 0 (onnx: node ids start at 0), else its first node
    internal, leaf, first = {}, {}, {}
    for i, (t, nid, mode) in enumerate(zip(tree_ids.tolist(), node_ids.tolist(), modes)):
        key = (t, nid)
        if key in internal or key in leaf:
            raise ctx.error("node (tree %d, id %d) is defined twice" % key)
        first.setdefault(t, key)
        (leaf if mode == "LEAF" else internal)[key] = len(leaf if mode == "LEAF" else internal)
    roots = [(t, (t, 0) if (t, 0) in internal or (t, 0) in leaf else key) for t, key in first.items()]

    def ref(t, nid, what):
        key = (t, nid)
        if key in internal:
            return internal[key]
        if key in leaf:
            return -leaf[key] - 1
        raise ctx.error("%s of tree %d refers to node id %d, which the tree does not have" % (what, t, nid))

    keep = [i for i, m in enumerate(modes) if m != "LEAF"]
    true_child = [ref(int(tree_ids[i]), int(trues[i]), "nodes_truenodeids") for i in keep]
    false_child = [ref(int(tree_ids[i]), int(falses[i]), "nodes_falsenodeids") for i in keep]
    v_tree, v_node, v_id = (_ints(ctx, "%s_%s" % (prefix, s)) for s in ("treeids", "nodeids", "ids"))
    v_weight = _floats(ctx, prefix + "_weights")
    if v_tree is None or v_node is None or v_id is None or v_weight is None:
        raise ctx.error("needs %s_treeids, _nodeids, _ids and _weights" % prefix)
    if not len(v_tree) == len(v_node) == len(v_id) == len(v_weight):
        raise ctx.error("%s_treeids, _nodeids, _ids and _weights differ in length" % prefix)
    votes = [[] for _ in leaf]
    for t, nid, target, w in zip(v_tree.tolist(), v_node.tolist(), v_id.tolist(), v_weight.tolist()):
        key = (t, nid)
        if key not in leaf:
            raise ctx.error("%s_nodeids: (tree %d, id %d) is not a LEAF node" % ((prefix,) + key))
        votes[leaf[key]].append((target, w))
    leaf_lo = np.zeros(len(leaf) + 1, np.int64)
    leaf_lo[1:] = np.cumsum([len(v) for v in votes])
    flat = [v for vs in votes for v in vs]
    try:
        return trees_k.Forest(
            features[keep], values[keep], [_MODES[modes[i]] for i in keep], true_child, false_child,
            missing[keep] != 0, np.zeros(len(keep) + 1, np.int64), np.zeros(0),
            [ref(t, key[1], "tree root") for t, key in roots], leaf_lo,
            [v[0] for v in flat], [v[1] for v in flat], n_targets)
    except trees_k.ForestError as exc:
        raise ctx.error(str(exc)) from None


def _post_transform(ctx):
    name = ctx.string("post_transform", "NONE")
    if name not in trees_k.POST_TRANSFORMS:
        raise ctx.error("post_transform must be one of %s, got '%s'" % (", ".join(trees_k.POST_TRANSFORMS), name))
    return name


def _aggregate(name, ctx):
    if name not in trees_k.AGGREGATES:
        raise ctx.error("aggregate_function must be one of %s, got '%s'" % (", ".join(trees_k.AGGREGATES), name))
    return trees_k.AGGREGATES.index(name)


def _base(ctx, n):
    base = _floats(ctx, "base_values")
    if base is not None and base.size not in (0, n):
        raise ctx.error("base_values has %d values for %d targets" % (base.size, n))
    return None if base is None or not base.size else base


def _features(ctx, forest, x):
    """X as (N, F) float64 with enough features, or a named error."""
    if x.dtype.kind not in "fiu":
        raise ctx.input_error(0, "X must be numeric, got %s" % x.dtype)
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    if x2.ndim != 2:
        raise ctx.input_error(0, "X must have rank 1 or 2, got shape %s" % list(x.shape))
    if x2.shape[1] < forest.n_features:
        raise ctx.input_error(0, "X has %d features per row; the trees read feature %d"
                              % (x2.shape[1], forest.n_features - 1))
    return x2


def _scores(ctx, forest, x, aggregate):
    try:
        return trees_k.forest_scores(forest, x, aggregate)
    except trees_k.ForestError as exc:
        raise ctx.input_error(0, str(exc)) from None


@onnx_op("TreeEnsembleRegressor", (1, None), domain=ML)
def tree_ensemble_regressor(ctx):
    n_targets = ctx.int("n_targets", 1)
    if n_targets < 1:
        raise ctx.error("n_targets must be at least 1, got %d" % n_targets)
    forest = _classic_forest(ctx, "target", n_targets)
    aggregate = _aggregate(ctx.string("aggregate_function", "SUM"), ctx)
    base, transform = _base(ctx, n_targets), _post_transform(ctx)

    def run(x):
        s = _scores(ctx, forest, _features(ctx, forest, x), aggregate)
        if base is not None:
            s += base
        return trees_k.post_transform(s, transform).astype(np.float32)
    return run


@onnx_op("TreeEnsembleClassifier", (1, None), domain=ML)
def tree_ensemble_classifier(ctx):
    if ctx.has("classlabels_strings"):
        labels = np.array([s.decode() if isinstance(s, bytes) else s for s in ctx.strings("classlabels_strings")],
                          dtype=object)
    elif ctx.has("classlabels_int64s"):
        labels = np.asarray(ctx.ints("classlabels_int64s"), np.int64)
    else:
        raise ctx.error("needs classlabels_int64s or classlabels_strings")
    if labels.size < 1:
        raise ctx.error("needs at least one class label")
    class_ids = _ints(ctx, "class_ids", np.zeros(0, np.int64))
    n_classes = labels.size
    if n_classes < 2:
        raise ctx.error("needs at least two class labels, got %d" % n_classes)
    # onnxruntime's binary case: two labels and every vote for one class c (LightGBM,
    # XGBoost): the label comes from that class's raw sum (see _binary)
    voted = np.unique(class_ids)
    binary = n_classes == 2 and voted.size == 1
    forest = _classic_forest(ctx, "class", n_classes)
    positive = bool(np.all(forest.weights >= 0))
    base, transform = _base(ctx, n_classes), _post_transform(ctx)

    def run(x):
        s = _scores(ctx, forest, _features(ctx, forest, x), trees_k.SUM)
        if base is not None:
            s += base
        if binary:
            return _binary(s, int(voted[0]), positive, transform, labels)
        scores = trees_k.post_transform(s, transform)
        picked = np.argmax(scores, axis=1) if scores.shape[0] else np.zeros(0, np.int64)
        return labels[picked], scores.astype(np.float32)
    return run


def _binary(sums, voted, positive, transform, labels):
    """onnxruntime's binary case. The label comes from the voted class's raw sum s:
    the second label when s > 0.5 (only non-negative weights) or s > 0. Votes for
    class 1: the scores are the usual transform of the sums. Votes for class 0: s
    becomes the second class's score and the first gets 1 - s (non-negative weights)
    or -s, untransformed for NONE and the softmaxes; LOGISTIC gives [1 - l(s), l(s)],
    PROBIT [probit(s), 0]."""
    s = sums[:, voted]
    picked = (s > (0.5 if positive else 0.0)).astype(np.int64)
    if voted != 0:
        return labels[picked], trees_k.post_transform(sums, transform).astype(np.float32)
    scores = np.empty((s.size, 2), np.float64)
    if transform == "LOGISTIC":
        scores[:, 1] = 1.0 / (1.0 + np.exp(-s))
        scores[:, 0] = 1.0 - scores[:, 1]
    elif transform == "PROBIT":
        scores[:, 0] = trees_k.post_transform(s[:, None], "PROBIT")[:, 0]
        scores[:, 1] = 0.0         # onnxruntime leaves this one unwritten (varying garbage)
    else:
        scores[:, 1] = s
        scores[:, 0] = 1.0 - s if positive else -s
    return labels[picked], scores.astype(np.float32)


def _tensor_attr(ctx, name, dtype=None):
    if not ctx.has(name):
        return None
    value = ctx.arg(name)
    if isinstance(value, (list, tuple)):
        return np.asarray(value, dtype)
    arr = tensor_to_numpy(ctx.tensor(name)).reshape(-1)
    return arr if dtype is None else arr.astype(dtype)


@onnx_op("TreeEnsemble", (5, None), domain=ML)
def tree_ensemble(ctx):
    need = ("nodes_featureids", "nodes_splits", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids",
            "nodes_trueleafs", "nodes_falseleafs", "leaf_targetids", "leaf_weights", "tree_roots")
    missing_attrs = [a for a in need if not ctx.has(a)]
    if missing_attrs:
        raise ctx.error("needs the attributes %s" % ", ".join(missing_attrs))
    features = _tensor_attr(ctx, "nodes_featureids", np.int64)
    splits = _tensor_attr(ctx, "nodes_splits", np.float64)
    modes = _tensor_attr(ctx, "nodes_modes", np.int64)
    trues, falses = _tensor_attr(ctx, "nodes_truenodeids", np.int64), _tensor_attr(ctx, "nodes_falsenodeids", np.int64)
    true_leaf = _tensor_attr(ctx, "nodes_trueleafs", np.int64) != 0
    false_leaf = _tensor_attr(ctx, "nodes_falseleafs", np.int64) != 0
    targets, weights = _tensor_attr(ctx, "leaf_targetids", np.int64), _tensor_attr(ctx, "leaf_weights", np.float64)
    roots = _tensor_attr(ctx, "tree_roots", np.int64)
    missing = _tensor_attr(ctx, "nodes_missing_value_tracks_true", np.int64)
    n = features.size
    missing = np.zeros(n, bool) if missing is None else missing != 0
    for name, arr in (("nodes_splits", splits), ("nodes_modes", modes), ("nodes_truenodeids", trues),
                      ("nodes_falsenodeids", falses), ("nodes_trueleafs", true_leaf),
                      ("nodes_falseleafs", false_leaf), ("nodes_missing_value_tracks_true", missing)):
        if arr.size != n:
            raise ctx.error("%s has %d values for %d nodes" % (name, arr.size, n))
    if targets.size != weights.size:
        raise ctx.error("leaf_targetids and leaf_weights differ in length (%d, %d)" % (targets.size, weights.size))
    if n and (modes.min() < 0 or modes.max() > trees_k.MEMBER):
        raise ctx.error("nodes_modes must be 0..6, got %d" % (modes.max() if modes.max() > 6 else modes.min()))
    # members per BRANCH_MEMBER node, in nodes_modes order, NaN-delimited
    member_lo, members = np.zeros(n + 1, np.int64), []
    values = _tensor_attr(ctx, "membership_values", np.float64)
    groups = []
    if values is not None:
        cur = []
        for v in values.tolist():
            if v != v:
                groups.append(cur)
                cur = []
            else:
                cur.append(v)
        if cur:
            groups.append(cur)
    member_nodes = np.nonzero(modes == trees_k.MEMBER)[0].tolist()
    if len(groups) < len(member_nodes):
        raise ctx.error("membership_values lists %d sets for %d BRANCH_MEMBER nodes" % (len(groups), len(member_nodes)))
    sets = dict(zip(member_nodes, groups))
    for i in range(n):
        members.extend(sets.get(i, ()))
        member_lo[i + 1] = len(members)

    def child(ids, is_leaf):
        return np.where(is_leaf, -ids - 1, ids)

    # a root whose two branches are the same leaf is that leaf (a one-leaf tree)
    root_refs = []
    for r in roots.tolist():
        if 0 <= r < n and true_leaf[r] and false_leaf[r] and trues[r] == falses[r]:
            root_refs.append(-int(trues[r]) - 1)
        else:
            root_refs.append(r)
    n_targets = ctx.int("n_targets", int(targets.max()) + 1 if targets.size else 1)
    try:
        forest = trees_k.Forest(features, splits, modes, child(trues, true_leaf), child(falses, false_leaf),
                                missing, member_lo, members, root_refs, np.arange(targets.size + 1), targets,
                                weights, n_targets)
    except trees_k.ForestError as exc:
        raise ctx.error(str(exc)) from None
    aggregate = ctx.int("aggregate_function", 1)
    if not 0 <= aggregate <= 3:
        raise ctx.error("aggregate_function must be 0..3 (AVERAGE, SUM, MIN, MAX), got %d" % aggregate)
    aggregate = (trees_k.AVERAGE, trees_k.SUM, trees_k.MIN, trees_k.MAX)[aggregate]
    transform_code = ctx.int("post_transform", 0)
    if not 0 <= transform_code <= 4:
        raise ctx.error("post_transform must be 0..4, got %d" % transform_code)
    transform = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")[transform_code]

    def run(x):
        s = _scores(ctx, forest, _features(ctx, forest, x), aggregate)
        return trees_k.post_transform(s, transform).astype(x.dtype if x.dtype.kind == "f" else np.float32)
    return run
