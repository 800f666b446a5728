"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier
(opsets 1-3 of the domain, the form scikit-learn/LightGBM/XGBoost converters emit)
and TreeEnsemble (opset 5). Each factory turns the node/leaf attributes into one
validated Forest at plan time; kernels/cpu/onnx_ml/trees.py walks it in a compiled
loop. Scores follow onnxruntime: base values added after aggregation, then the
post transform; the classifier's binary case (two labels, every vote for class
0) as onnxruntime scores it (see _binary)."""
import numpy as np

from caffe2py.kernels.cpu.onnx_ml import trees as trees_k
from caffe2py.tensors import tensor_to_numpy

from ..onnx_base import onnx_op

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
    is_leaf = np.array([m == "LEAF" for m in modes], bool)
    nodes = _NodeKeys(ctx, tree_ids, node_ids)
    # positions: internal nodes and leaves numbered separately, in attribute order
    position = np.empty(n, np.int64)
    position[~is_leaf] = np.arange(int((~is_leaf).sum()))
    position[is_leaf] = -np.arange(int(is_leaf.sum())) - 1     # leaf l is -l-1
    keep = np.flatnonzero(~is_leaf)
    true_child = position[nodes.find(tree_ids[keep], trues[keep], "nodes_truenodeids")]
    false_child = position[nodes.find(tree_ids[keep], falses[keep], "nodes_falsenodeids")]
    # each tree's root: its node id 0 (onnx: node ids start at 0), else its first node;
    # trees in the order they first appear
    trees_in_order, first = np.unique(tree_ids, return_index=True)
    trees_in_order = tree_ids[np.sort(first)]
    first_node = node_ids[np.sort(first)]
    root_row = nodes.find(trees_in_order, np.zeros_like(trees_in_order), None)
    missing_zero = root_row < 0
    if missing_zero.any():
        root_row[missing_zero] = nodes.find(trees_in_order[missing_zero], first_node[missing_zero], "tree root")
    roots = position[root_row]

    v_tree, v_node, v_id = (_ints(ctx, "%s_%s" % (prefix, s)) for s in ("treeids", "nodeids", "ids"))
    v_weight = _floats(ctx, prefix + "_weights")
    if v_tree is None or v_node is None or v_id is None or v_weight is None:
        raise ctx.error("needs %s_treeids, _nodeids, _ids and _weights" % prefix)
    if not len(v_tree) == len(v_node) == len(v_id) == len(v_weight):
        raise ctx.error("%s_treeids, _nodeids, _ids and _weights differ in length" % prefix)
    vote_row = nodes.find(v_tree, v_node, None)
    not_leaf = np.ones(vote_row.size, bool)
    found = vote_row >= 0
    not_leaf[found] = ~is_leaf[vote_row[found]]
    if not_leaf.any():
        k = int(np.flatnonzero(not_leaf)[0])
        raise ctx.error("%s_nodeids: (tree %d, id %d) is not a LEAF node" % (prefix, v_tree[k], v_node[k]))
    vote_leaf = -position[vote_row] - 1
    order = np.argsort(vote_leaf, kind="stable")          # grouped by leaf, in attribute order
    leaf_lo = np.zeros(int(is_leaf.sum()) + 1, np.int64)
    leaf_lo[1:] = np.cumsum(np.bincount(vote_leaf, minlength=leaf_lo.size - 1))
    try:
        return trees_k.Forest(
            features[keep], values[keep], [_MODES[modes[i]] for i in keep.tolist()], true_child, false_child,
            missing[keep] != 0, np.zeros(keep.size + 1, np.int64), np.zeros(0),
            roots, leaf_lo, v_id[order], v_weight[order], n_targets)
    except trees_k.ForestError as exc:
        raise ctx.error(str(exc)) from None


class _NodeKeys:
    """Finds the attribute row of (tree id, node id) pairs, all at once: both ids are
    replaced by their rank among the node list's ids, and rank pairs by one int64."""

    def __init__(self, ctx, tree_ids, node_ids):
        self.ctx = ctx
        self.trees = np.unique(tree_ids)
        self.ids = np.unique(node_ids)
        keys = np.searchsorted(self.trees, tree_ids) * self.ids.size + np.searchsorted(self.ids, node_ids)
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]
        twice = np.flatnonzero(self.sorted[1:] == self.sorted[:-1])
        if twice.size:
            row = int(self.order[twice[0] + 1])
            raise ctx.error("node (tree %d, id %d) is defined twice" % (tree_ids[row], node_ids[row]))

    def find(self, tree_ids, node_ids, what):
        """Rows of the pairs; a pair that is not a node is -1, or a named error when
        `what` names the attribute that refers to it."""
        tree_ids, node_ids = np.asarray(tree_ids, np.int64), np.asarray(node_ids, np.int64)
        rows = np.full(tree_ids.size, -1, np.int64)
        if self.sorted.size:
            t = np.minimum(np.searchsorted(self.trees, tree_ids), self.trees.size - 1)
            i = np.minimum(np.searchsorted(self.ids, node_ids), self.ids.size - 1)
            keys = t * self.ids.size + i
            at = np.minimum(np.searchsorted(self.sorted, keys), self.sorted.size - 1)
            found = (self.trees[t] == tree_ids) & (self.ids[i] == node_ids) & (self.sorted[at] == keys)
            rows[found] = self.order[at[found]]
        ok = rows >= 0
        if what is not None and not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            raise self.ctx.error("%s of tree %d refers to node id %d, which the tree does not have"
                                 % (what, tree_ids[k], node_ids[k]))
        return rows


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
