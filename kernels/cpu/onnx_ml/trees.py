"""Tree ensembles (ai.onnx.ml TreeEnsemble, TreeEnsembleRegressor/Classifier): every
row walks every tree in one compiled loop on the team, rows split into blocks.

An ensemble is flat arrays (see Forest): internal nodes by index; a child or root
c >= 0 is internal node c, c < 0 is leaf -c-1; a leaf's votes are
targets/weights[leaf_lo[l]:leaf_lo[l + 1]]. The op modules build and validate a
Forest once at plan time (children in range, every tree acyclic, targets in range),
and check the feature count against X before the loop: the loop itself does no
bounds checks and terminates because the trees are acyclic.
"""
import math

import numpy as np

from ..runtime.jit import compiled, prange, team, team_blocks

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
MODE_NAMES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
SUM, AVERAGE, MIN, MAX = range(4)
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


class ForestError(ValueError):
    pass


class Forest:
    """Flat, validated arrays of one ensemble (see the module docstring)."""
    __slots__ = ("feature", "split", "mode", "true_child", "false_child", "missing_true", "member_lo",
                 "members", "roots", "leaf_lo", "targets", "weights", "n_targets", "n_features", "packed",
                 "uniform")

    def __init__(self, feature, split, mode, true_child, false_child, missing_true, member_lo, members,
                 roots, leaf_lo, targets, weights, n_targets):
        self.feature = np.ascontiguousarray(feature, np.int64)
        self.split = np.ascontiguousarray(split, np.float64)
        self.mode = np.ascontiguousarray(mode, np.int8)
        self.true_child = np.ascontiguousarray(true_child, np.int64)
        self.false_child = np.ascontiguousarray(false_child, np.int64)
        self.missing_true = np.ascontiguousarray(missing_true, np.bool_)
        self.member_lo = np.ascontiguousarray(member_lo, np.int64)
        self.members = np.ascontiguousarray(members, np.float64)
        self.roots = np.ascontiguousarray(roots, np.int64)
        self.leaf_lo = np.ascontiguousarray(leaf_lo, np.int64)
        self.targets = np.ascontiguousarray(targets, np.int64)
        self.weights = np.ascontiguousarray(weights, np.float64)
        self.n_targets = int(n_targets)
        self._validate()
        self.n_features = int(self.feature.max()) + 1 if self.feature.size else 0
        self.packed = np.stack([self.split, self.feature.astype(np.float64), self.true_child.astype(np.float64),
                                self.false_child.astype(np.float64)], axis=1).reshape(-1)
        modes = np.unique(self.mode)
        self.uniform = int(modes[0]) if modes.size == 1 and modes[0] != MEMBER and not self.missing_true.any() \
            else -1

    def _validate(self):
        n_nodes, n_leaves = self.feature.size, self.leaf_lo.size - 1
        if n_leaves < 0:
            raise ForestError("no leaves")
        for name in ("split", "mode", "true_child", "false_child", "missing_true"):
            if getattr(self, name).size != n_nodes:
                raise ForestError("%s has %d values for %d nodes" % (name, getattr(self, name).size, n_nodes))
        if n_nodes and self.feature.min() < 0:
            raise ForestError("negative feature id %d" % self.feature.min())
        if n_nodes and (self.mode.min() < 0 or self.mode.max() > MEMBER):
            raise ForestError("unknown node mode code %d" % self.mode.max())
        if self.member_lo.size != n_nodes + 1 or (n_nodes and (
                np.any(np.diff(self.member_lo) < 0) or self.member_lo[0] < 0
                or self.member_lo[-1] > self.members.size)):
            raise ForestError("set-membership ranges are inconsistent")
        if np.any(np.diff(self.leaf_lo) < 0) or self.leaf_lo[0] != 0 or self.leaf_lo[-1] != self.targets.size \
                or self.weights.size != self.targets.size:
            raise ForestError("leaf vote ranges are inconsistent")
        if self.targets.size and (self.targets.min() < 0 or self.targets.max() >= self.n_targets):
            raise ForestError("a leaf votes for target %d, outside [0, %d)"
                              % (self.targets.max() if self.targets.max() >= self.n_targets else self.targets.min(),
                                 self.n_targets))
        for name in ("true_child", "false_child", "roots"):
            c = getattr(self, name)
            if c.size and (c.max() >= n_nodes or c.min() < -n_leaves):
                raise ForestError("%s refers to node %d; there are %d nodes and %d leaves"
                                  % (name, c.max() if c.max() >= n_nodes else c.min(), n_nodes, n_leaves))
        _check_acyclic(self.true_child, self.false_child, self.roots)


def _check_acyclic(true_child, false_child, roots):
    """Every walk from a root reaches a leaf: no internal node is its own descendant."""
    # level by level from the roots, all trees at once: acyclic trees run out of
    # internal nodes within as many levels as there are nodes; a cycle never does
    frontier = np.unique(roots[roots >= 0])
    for _ in range(true_child.size + 1):
        if not frontier.size:
            return
        children = np.concatenate([true_child[frontier], false_child[frontier]])
        frontier = np.unique(children[children >= 0])
    _name_a_cycle(true_child, false_child, roots)


def _name_a_cycle(true_child, false_child, roots):
    """A depth-first walk that raises naming a node that is its own descendant."""
    trues, falses = true_child.tolist(), false_child.tolist()
    state = [0] * len(trues)                     # 0 new, 1 on the current path, 2 done
    for root in roots.tolist():
        if root < 0 or state[root] == 2:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            node, step = stack.pop()
            if step == 2:
                state[node] = 2
                continue
            stack.append((node, step + 1))
            child = trues[node] if step == 0 else falses[node]
            if child < 0 or state[child] == 2:
                continue
            if state[child] == 1:
                raise ForestError("node %d is its own descendant (the trees must be acyclic)" % child)
            state[child] = 1
            stack.append((child, 0))


@compiled
def _goes_true(v, mode, split, missing, members):
    if v != v:                                   # NaN: the node's missing-value direction
        if missing:
            return True
    if mode == 0:
        return v <= split
    if mode == 1:
        return v < split
    if mode == 2:
        return v >= split
    if mode == 3:
        return v > split
    if mode == 4:
        return v == split
    if mode == 5:
        return v != split
    for m in members:
        if v == m:
            return True
    return False


_CHUNK = 64       # rows walked through one tree before the next: the tree stays in cache


@compiled(parallel=True)
def _forest_rows(x, packed, mode, missing_true, member_lo, members, roots, leaf_lo, targets, weights,
                 aggregate, uniform, out, hit, bounds):
    """out[r, t] (float64, zeroed) = the aggregate of the votes for target t of every
    tree's leaf for row r; hit[r, t] whether any vote came (MIN/MAX). Rows
    bounds[b]..bounds[b+1] on team block b, in chunks of _CHUNK rows per tree.
    packed[4 * n:4 * n + 4] = (split, feature, true child, false child) of internal
    node n, one cache line for two nodes. uniform: the one mode (0..5) of every node
    when no node sends NaN to its true branch (a NaN then just compares false, or
    true for NEQ), else -1 (each node's own mode, missing track and members).
    Assumes a validated Forest and x.shape[1] > every feature id."""
    for b in prange(bounds.size - 1):
        for c0 in range(bounds[b], bounds[b + 1], _CHUNK):
            c1 = min(c0 + _CHUNK, bounds[b + 1])
            n = c1 - c0
            cur = np.empty(_CHUNK, np.int64)
            for tree in range(roots.size):
                root = roots[tree]
                for i in range(n):
                    cur[i] = root
                if uniform >= 0:
                    # every row of the chunk steps one level per pass: independent walks the
                    # CPU overlaps, and a branch-free child pick (packed[at + 3 - go])
                    live = n
                    while live > 0:
                        live = 0
                        for i in range(n):
                            node = cur[i]
                            if node >= 0:
                                at = 4 * node
                                v = x[c0 + i, np.int64(packed[at + 1])]
                                s = packed[at]
                                if uniform == 0:
                                    go = v <= s
                                elif uniform == 1:
                                    go = v < s
                                elif uniform == 2:
                                    go = v >= s
                                elif uniform == 3:
                                    go = v > s
                                elif uniform == 4:
                                    go = v == s
                                else:
                                    go = v != s
                                cur[i] = np.int64(packed[at + 3 - np.int64(go)])
                                live += 1
                else:
                    for i in range(n):
                        row = x[c0 + i]
                        node = cur[i]
                        while node >= 0:
                            at = 4 * node
                            go = _goes_true(row[np.int64(packed[at + 1])], mode[node], packed[at],
                                            missing_true[node], members[member_lo[node]:member_lo[node + 1]])
                            node = np.int64(packed[at + 2]) if go else np.int64(packed[at + 3])
                        cur[i] = node
                for i in range(n):
                    r = c0 + i
                    leaf = -cur[i] - 1
                    acc = out[r]
                    for k in range(leaf_lo[leaf], leaf_lo[leaf + 1]):
                        t = targets[k]
                        w = weights[k]
                        if aggregate <= 1:
                            acc[t] += w
                        elif not hit[r, t] or (w < acc[t] if aggregate == 2 else w > acc[t]):
                            acc[t] = w
                        hit[r, t] = True


@_forest_rows.numpy_twin
def _forest_rows_numpy(x, packed, mode, missing_true, member_lo, members, roots, leaf_lo, targets, weights,
                       aggregate, uniform, out, hit, bounds):
    first, last = int(bounds[0]), int(bounds[-1])
    rows = np.arange(first, last)
    quad = packed.reshape(-1, 4)
    split, feature = quad[:, 0], quad[:, 1].astype(np.int64)
    true_child, false_child = quad[:, 2].astype(np.int64), quad[:, 3].astype(np.int64)
    for root in roots.tolist():
        node = np.full(rows.size, root, np.int64)
        active = node >= 0
        while active.any():
            idx = np.nonzero(active)[0]
            nd = node[idx]
            v = x[rows[idx], feature[nd]]
            s, m = split[nd], (mode[nd] if uniform < 0 else np.full(nd.size, uniform))
            go = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                           [v <= s, v < s, v >= s, v > s, v == s, v != s], False)
            for j in np.nonzero(m == MEMBER)[0].tolist():
                n = nd[j]
                go[j] = bool(np.any(members[member_lo[n]:member_lo[n + 1]] == v[j]))
            if uniform < 0:
                go |= np.isnan(v) & missing_true[nd]
            node[idx] = np.where(go, true_child[nd], false_child[nd])
            active = node >= 0
        leaf = -node - 1
        for j, lf in enumerate(leaf.tolist()):
            r = rows[j]
            for k in range(leaf_lo[lf], leaf_lo[lf + 1]):
                t, w = targets[k], weights[k]
                if aggregate <= 1:
                    out[r, t] += w
                elif not hit[r, t] or (w < out[r, t] if aggregate == MIN else w > out[r, t]):
                    out[r, t] = w
                hit[r, t] = True


def forest_scores(forest, x, aggregate):
    """(N, n_targets) float64 aggregated votes of every tree for x (N, F) (AVERAGE
    divides the sums by the number of trees); targets nobody voted for are 0."""
    if x.ndim != 2 or x.shape[1] < forest.n_features:
        raise ForestError("X needs %d features per row, got shape %s" % (forest.n_features, list(x.shape)))
    x = np.ascontiguousarray(x, np.float64)
    n = x.shape[0]
    out = np.zeros((n, forest.n_targets), np.float64)
    hit = np.zeros((n, forest.n_targets), np.bool_)
    if n and forest.roots.size:
        blocks = team_blocks(n, forest.roots.size * 8)
        bounds = np.linspace(0, n, blocks + 1).astype(np.int64)
        with team():
            _forest_rows(x, forest.packed, forest.mode, forest.missing_true, forest.member_lo, forest.members,
                         forest.roots, forest.leaf_lo, forest.targets, forest.weights, aggregate, forest.uniform,
                         out, hit, bounds)
    if aggregate == AVERAGE and forest.roots.size:
        out /= forest.roots.size
    return out


# ----------------------------------------------------------------- post transforms

def _erf_inv(x):
    """Winitzki's approximation of erf^-1 (a = 0.147), as onnxruntime's PROBIT uses."""
    sgn = np.where(x < 0, -1.0, 1.0)
    t = (1.0 - x) * (1.0 + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(t)
        v = 2.0 / (math.pi * 0.147) + 0.5 * log
        v3 = -v + np.sqrt(v * v - log / 0.147)
        r = sgn * np.sqrt(v3)
    return np.where(t == 0, sgn * np.inf, r)      # erf^-1(+-1) = +-inf


def post_transform(scores, name):
    """onnx's post_transform of (N, K) scores, float64 in and out."""
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-scores))
    if name == "SOFTMAX":
        e = np.exp(scores - scores.max(axis=1, keepdims=True)) if scores.size else scores
        return e / e.sum(axis=1, keepdims=True) if scores.size else e
    if name == "SOFTMAX_ZERO":
        # softmax over the non-zero scores; exact zeros stay (near) zero
        if not scores.size:
            return scores
        top = scores.max(axis=1, keepdims=True)
        small = np.abs(scores) <= 1e-7
        e = np.where(small, scores * np.exp(-top), np.exp(scores - top))
        s = e.sum(axis=1, keepdims=True)
        return np.where(s == 0, 0.5, e / np.where(s == 0, 1.0, s))
    if name == "PROBIT":
        return math.sqrt(2.0) * _erf_inv(scores * 2.0 - 1.0)
    raise ForestError("unknown post_transform %r" % name)
