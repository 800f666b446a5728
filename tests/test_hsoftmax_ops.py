"""HSoftmax, HSoftmaxSearch and HuffmanTreeHierarchy against references written here."""
import heapq
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
from caffe2.python import core, workspace
import caffe2.python.hypothesis_test_util as hu
from caffe2py.errors import Caffe2Error
from caffe2py.proto import hsm_pb2

# A 2-level tree over 5 words: the root's rows 0-1 choose a subtree, subtree A (rows
# 2-4) holds words 0, 1, 2 and subtree B (rows 5-6) words 3, 4.
PATHS = {0: [(0, 2, 0), (2, 3, 0)], 1: [(0, 2, 0), (2, 3, 1)], 2: [(0, 2, 0), (2, 3, 2)],
         3: [(0, 2, 1), (5, 2, 0)], 4: [(0, 2, 1), (5, 2, 1)]}
ROWS = 7


def hierarchy_bytes(paths=PATHS):
    h = hsm_pb2.HierarchyProto(size=len(paths))
    for word, steps in paths.items():
        p = h.paths.add(word_id=word)
        for index, length, target in steps:
            p.path_nodes.add(index=index, length=length, target=target)
    return h.SerializeToString()


def tree_bytes():
    t = hsm_pb2.TreeProto()
    root = t.root_node
    root.offset, root.name = 0, "root"
    a = root.children.add(offset=2, name="A")
    a.word_ids.extend([0, 1, 2])
    b = root.children.add(offset=5, name="B")
    b.word_ids.extend([3, 4])
    return t.SerializeToString()


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def run_op(op, inputs):
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(o) for o in op.output]


class TestHSoftmax(hu.HypothesisTestCase):
    @given(m=st.integers(1, 4), k=st.integers(1, 5), seed=st.integers(0, 99))
    @settings(max_examples=10, deadline=None, derandomize=True)
    def test_loss_and_gradient(self, m, k, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((ROWS, k)).astype(np.float32)
        b = rng.standard_normal(ROWS).astype(np.float32)
        labels = rng.integers(0, 5, m).astype(np.int32)
        op = core.CreateOperator("HSoftmax", ["X", "W", "b", "labels"], ["Y", "inter"], hierarchy=hierarchy_bytes())

        def reference(x, w, b, labels):
            y, inter = np.zeros(m), []
            for s in range(m):
                for index, length, target in PATHS[int(labels[s])]:
                    fc = w[index:index + length].astype(np.float64) @ x[s] + b[index:index + length]
                    sm = softmax(fc)
                    inter += list(fc) + list(sm)
                    y[s] -= math.log(sm[target])
            return [y.astype(np.float32), np.array(inter, np.float32)]
        self.assertReferenceChecks(hu.cpu_do, op, [x, w, b, labels], reference)
        for i in (0, 1, 2):
            self.assertGradientChecks(hu.cpu_do, op, [x, w, b, labels], i, [0], stepsize=1e-2, threshold=1e-2)

    def test_unknown_word_and_bad_hierarchy(self):
        x, w, b = np.zeros((1, 2), np.float32), np.zeros((ROWS, 2), np.float32), np.zeros(ROWS, np.float32)
        op = core.CreateOperator("HSoftmax", ["X", "W", "b", "labels"], ["Y", "inter"], hierarchy=hierarchy_bytes())
        # a word outside the hierarchy has an empty path in Caffe2: loss 0, nothing kept
        for name, value in zip(op.input, [x, w, b, np.array([9], np.int32)]):
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("Y"), np.zeros(1, np.float32))
        self.assertEqual(workspace.FetchBlob("inter").size, 0)
        self.assertRunOpRaises(hu.cpu_do, op, [x, w[:4], b[:4], np.array([3], np.int32)], exception=Caffe2Error,
                               regexp="rows 5..6 of W")
        bad = core.CreateOperator("HSoftmax", ["X", "W", "b", "labels"], ["Y", "inter"],
                                  hierarchy=hierarchy_bytes({0: [(0, 2, 2)]}))
        self.assertRunOpRaises(hu.cpu_do, bad, [x, w, b, np.array([0], np.int32)], exception=Caffe2Error,
                               regexp="target < length")

    @given(m=st.integers(1, 3), beam=st.sampled_from([0.5, 2.0, 20.0]), top_n=st.integers(1, 8),
           seed=st.integers(0, 99))
    @settings(max_examples=10, deadline=None, derandomize=True)
    def test_search(self, m, beam, top_n, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((m, 3)).astype(np.float32)
        w = rng.standard_normal((ROWS, 3)).astype(np.float32)
        b = rng.standard_normal(ROWS).astype(np.float32)
        op = core.CreateOperator("HSoftmaxSearch", ["X", "W", "b"], ["names", "scores"], tree=tree_bytes(),
                                 beam=beam, topN=top_n)

        def reference(x, w, b):
            names = np.full((m, top_n), b"", dtype=object)          # string outputs are fetched as bytes
            scores = np.zeros((m, top_n), np.float32)
            for s in range(m):
                found = []
                root_p = softmax(w[0:2].astype(np.float64) @ x[s] + b[0:2])
                kept = []
                for c, (name, off, words) in enumerate((("A", 2, [0, 1, 2]), ("B", 5, [3, 4]))):
                    score = -math.log(root_p[c])
                    if score < beam:
                        found.append((name, score))
                        kept.append((score, off, words))
                for score, off, words in kept:
                    p = softmax(w[off:off + len(words)].astype(np.float64) @ x[s] + b[off:off + len(words)])
                    for j, word in enumerate(words):
                        if score - math.log(p[j]) < score + beam:
                            found.append((str(word), score - math.log(p[j])))
                found.sort(key=lambda e: e[1])
                for j, (name, score) in enumerate(found[:top_n]):
                    names[s, j], scores[s, j] = name.encode(), score
            return [names, scores]
        self.assertReferenceChecks(hu.cpu_do, op, [x, w, b], reference, threshold=1e-4)


class TestHuffmanTree(hu.HypothesisTestCase):
    def test_distinct_counts_give_caffe2s_tree(self):
        labels = np.repeat(np.arange(4), [1, 2, 4, 8]).astype(np.int64)
        op = core.CreateOperator("HuffmanTreeHierarchy", ["L"], ["T"], num_classes=4)
        (out,) = run_op(op, [labels])
        tree = hsm_pb2.TreeProto()
        tree.ParseFromString(out[0] if isinstance(out[0], bytes) else out[0].encode("latin-1"))
        root = tree.root_node
        self.assertEqual((root.offset, list(root.word_ids), len(root.children)), (0, [3], 1))
        a = root.children[0]
        self.assertEqual((a.offset, list(a.word_ids), len(a.children)), (2, [2], 1))
        self.assertEqual((a.children[0].offset, list(a.children[0].word_ids)), (4, [0, 1]))

    @given(classes=st.integers(1, 12), n=st.integers(0, 60), seed=st.integers(0, 99))
    @settings(max_examples=15, deadline=None, derandomize=True)
    def test_is_an_optimal_prefix_code(self, classes, n, seed):
        labels = np.random.default_rng(seed).integers(0, classes, n).astype(np.int64)
        (out,) = run_op(core.CreateOperator("HuffmanTreeHierarchy", ["L"], ["T"], num_classes=classes), [labels])
        tree = hsm_pb2.TreeProto()
        tree.ParseFromString(out[0] if isinstance(out[0], bytes) else out[0].encode("latin-1"))
        depth = {}

        def walk(node, d):
            for word in node.word_ids:
                depth[word] = d + 1
            for child in node.children:
                walk(child, d + 1)
        walk(tree.root_node, 0)
        self.assertEqual(sorted(depth), list(range(classes)) if classes > 1 else sorted(depth))
        if classes > 1:
            counts = np.bincount(labels, minlength=classes)
            heap = [int(c) for c in counts]
            heapq.heapify(heap)
            optimal = 0
            while len(heap) > 1:
                a, b = heapq.heappop(heap), heapq.heappop(heap)
                optimal += a + b
                heapq.heappush(heap, a + b)
            self.assertEqual(sum(counts[w] * d for w, d in depth.items()), optimal)

    def test_labels_out_of_range(self):
        op = core.CreateOperator("HuffmanTreeHierarchy", ["L"], ["T"], num_classes=3)
        self.assertRunOpRaises(hu.cpu_do, op, [np.array([0, 3], np.int64)], exception=Caffe2Error,
                               regexp="not in range")
