"""caffe2py.hsm_util (Caffe2's caffe2.python.hsm_util): trees to HSoftmax hierarchies.

The layout is checked against paths written out by hand from the rule Caffe2's
hsm_test states (each node's block: children first, then words; blocks depth
first), and the hierarchy is run through HSoftmax against a NumPy loss."""
import numpy as np

from caffe2py import core, hsm_util, workspace
from caffe2py.proto import hsm_pb2

WORDS = [[0, 1, 2], [3, 4], [5, 6, 7, 8]]


def _tree():
    """root(node5) -> [node4 -> [node1: 0 1 2, node2: 3 4], node3: 5 6 7 8]"""
    node1 = hsm_util.create_node_with_words(WORDS[0], "node1")
    node2 = hsm_util.create_node_with_words(WORDS[1], "node2")
    node3 = hsm_util.create_node_with_words(WORDS[2], "node3")
    node4 = hsm_util.create_node_with_nodes([node1, node2], "node4")
    tree = hsm_pb2.TreeProto()
    tree.root_node.MergeFrom(hsm_util.create_node_with_nodes([node4, node3], "node5"))
    return tree


# Blocks: node5 at 0 (2 entries), node4 at 2 (2), node1 at 4 (3), node2 at 7 (2), node3 at 9 (4).
EXPECTED_PATHS = {
    0: [(0, 2, 0), (2, 2, 0), (4, 3, 0)],
    1: [(0, 2, 0), (2, 2, 0), (4, 3, 1)],
    2: [(0, 2, 0), (2, 2, 0), (4, 3, 2)],
    3: [(0, 2, 0), (2, 2, 1), (7, 2, 0)],
    4: [(0, 2, 0), (2, 2, 1), (7, 2, 1)],
    5: [(0, 2, 1), (9, 4, 0)],
    6: [(0, 2, 1), (9, 4, 1)],
    7: [(0, 2, 1), (9, 4, 2)],
    8: [(0, 2, 1), (9, 4, 3)],
}


def _paths(hierarchy):
    return {p.word_id: [(n.index, n.length, n.target) for n in p.path_nodes] for p in hierarchy.paths}


def test_nodes_hold_their_words_and_copies_of_their_children():
    leaf = hsm_util.create_node_with_words([3, 1, 4], "leaf")
    assert leaf.name == "leaf" and list(leaf.word_ids) == [3, 1, 4]
    parent = hsm_util.create_node_with_nodes([leaf], "parent")
    assert parent.name == "parent" and list(parent.children[0].word_ids) == [3, 1, 4]
    leaf.word_ids.append(9)                      # a copy: the parent does not change
    assert list(parent.children[0].word_ids) == [3, 1, 4]
    assert hsm_util.create_node_with_words([]).name == "node"


def test_hierarchy_paths_and_size_follow_the_depth_first_block_layout():
    tree = _tree()
    hierarchy = hsm_util.create_hierarchy(tree)
    assert _paths(hierarchy) == EXPECTED_PATHS
    assert hierarchy.size == 13
    # word order: a node's children's words before its own
    assert [p.word_id for p in hierarchy.paths] == list(range(9))
    # the tree's offsets are filled in as a side effect, as in Caffe2
    root = tree.root_node
    assert [root.offset, root.children[0].offset, root.children[0].children[0].offset,
            root.children[0].children[1].offset, root.children[1].offset] == [0, 2, 4, 7, 9]


def test_a_node_with_both_children_and_words_lists_children_first():
    tree = hsm_pb2.TreeProto()
    tree.root_node.MergeFrom(hsm_util.create_node_with_nodes([hsm_util.create_node_with_words([7, 8])]))
    tree.root_node.word_ids.extend([5])
    hierarchy = hsm_util.create_hierarchy(tree)
    assert _paths(hierarchy) == {7: [(0, 2, 0), (2, 2, 0)], 8: [(0, 2, 0), (2, 2, 1)], 5: [(0, 2, 1)]}
    assert hierarchy.size == 4


def test_the_hierarchy_drives_hsoftmax_like_a_numpy_reference():
    hierarchy = hsm_util.create_hierarchy(_tree())
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    w = rng.standard_normal((hierarchy.size, 5)).astype(np.float32)
    b = rng.standard_normal(hierarchy.size).astype(np.float32)
    labels = np.array([0, 4, 6, 8], dtype=np.int32)
    workspace.ResetWorkspace()
    for name, value in (("X", x), ("W", w), ("b", b), ("labels", labels)):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator(
        "HSoftmax", ["X", "W", "b", "labels"], ["Y", "intermediate"],
        hierarchy=hierarchy.SerializeToString()))
    expected = []
    for row, word in zip(x, labels):
        loss = 0.0
        for index, length, target in EXPECTED_PATHS[int(word)]:
            logits = w[index:index + length] @ row + b[index:index + length]
            loss -= logits[target] - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
        expected.append(loss)
    np.testing.assert_allclose(workspace.FetchBlob("Y"), expected, rtol=1e-4, atol=1e-5)
