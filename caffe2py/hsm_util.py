"""Caffe2's caffe2.python.hsm_util: build the trees of hierarchical softmax.

create_node_with_words / create_node_with_nodes build a TreeProto's NodeProtos;
create_hierarchy(tree) turns a TreeProto into the HierarchyProto the HSoftmax ops
read (their `hierarchy` argument): one PathProto per word, the path from the
root to the word.

Every node owns a block of the softmax's outputs: one entry per child node, then
one per word. Blocks are laid out depth-first, a node's block before those of its
children, children before words. A path step is (index: the start of the node's
block, length: the block's size, target: the entry taken: child i -> i, word j ->
number of children + j). The hierarchy's size is the total of all blocks. Like
Caffe2's, create_hierarchy also writes each node's block start into the tree's
`offset` fields.
"""
from .proto import hsm_pb2


def create_node_with_words(words, name="node"):
    node = hsm_pb2.NodeProto(name=name)
    node.word_ids.extend(words)
    return node


def create_node_with_nodes(nodes, name="node"):
    node = hsm_pb2.NodeProto(name=name)
    for child in nodes:
        node.children.add().MergeFrom(child)
    return node


def create_hierarchy(tree_proto):
    hierarchy = hsm_pb2.HierarchyProto()
    _lay_out(tree_proto.root_node, [], hierarchy, 0)
    return hierarchy


def _lay_out(node, steps, hierarchy, next_free):
    """Give node its block at next_free, append the paths of the words below it to
    hierarchy; returns the first free output after node's subtree."""
    block = len(node.children) + len(node.word_ids)
    node.offset = next_free
    next_free += block
    hierarchy.size = max(hierarchy.size, next_free)
    for target, child in enumerate(node.children):
        next_free = _lay_out(child, steps + [(node.offset, block, target)], hierarchy, next_free)
    for j, word in enumerate(node.word_ids):
        path = hierarchy.paths.add(word_id=word)
        for index, length, target in steps + [(node.offset, block, len(node.children) + j)]:
            path.path_nodes.add(index=index, length=length, target=target)
    return next_free
