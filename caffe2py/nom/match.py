"""Subgraph matching (nomnigraph's NNMatchGraph / NNSubgraph).

A match graph is a pattern: each node has a predicate on a data-flow node and is
strict (terminal) or not. Matching starts at a pattern root and follows out-edges
(operator -> its outputs -> their consumers). A non-strict pattern node matches a node
on the predicate alone; a strict one also needs the node's out-edges, in order, to
match its pattern children one for one, with no edge left over.
"""
from ..errors import Caffe2Error
from .graph import Graph, dot_string
from .representation import NeuralNetData, NeuralNetOperator, nn_labels


class MatchPredicate:
    def __init__(self, predicate, strict, description):
        self.predicate = predicate
        self.strict = bool(strict)
        self.description = description

    def __repr__(self):
        return "%s%s" % (self.description, " (strict)" if self.strict else "")


class NNMatchGraph(Graph):
    def createNode(self, node=None, strict=False):
        """createNode(ng.NeuralNetOperator(type)) matches operators of that type,
        createNode(ng.NeuralNetData(...)) any tensor, createNode() anything."""
        if isinstance(node, bool):          # createNode(strict) as Caffe2's third form
            node, strict = None, node
        if isinstance(node, NeuralNetOperator):
            op_type = node.getName()
            return super().createNode(MatchPredicate(
                lambda n: n.isOperator() and n.getName() == op_type, strict, op_type))
        if isinstance(node, NeuralNetData):
            return super().createNode(MatchPredicate(lambda n: n.isTensor(), strict, "tensor"))
        if node is None:
            return super().createNode(MatchPredicate(lambda n: True, strict, "any"))
        raise Caffe2Error("NNMatchGraph.createNode takes an ng.NeuralNetOperator, an "
                          "ng.NeuralNetData or nothing, got %s" % type(node).__name__)

    def root(self):
        """The pattern node matching starts from: the first node without in-edges."""
        nodes = self.getMutableNodes()
        if not nodes:
            raise Caffe2Error("NNMatchGraph is empty: create a pattern node first")
        for node in nodes:
            if not node.getInEdges():
                return node
        return nodes[0]


class NNSubgraph:
    """A set of data-flow nodes (and the edges among them once induced)."""

    def __init__(self):
        self._nodes = []
        self._edges = []

    def addNode(self, node):
        if node not in self._nodes:
            self._nodes.append(node)

    def hasNode(self, node):
        return node in self._nodes

    @property
    def nodes(self):
        return list(self._nodes)

    def induceEdges(self):
        """Add every edge whose two ends are in the subgraph."""
        members = set(self._nodes)
        self._edges = [edge for node in self._nodes for edge in node.getOutEdges()
                       if edge.head() in members]

    def getNodes(self):
        return list(self._nodes)

    def __len__(self):
        return len(self._nodes)

    def __repr__(self):
        return dot_string(None, nn_labels, nodes=self._nodes, edges=self._edges)


def match_subgraph(node, pattern):
    """The subgraph of `node`'s graph that matches `pattern` rooted at `node`, or an
    empty NNSubgraph."""
    if not isinstance(pattern, NNMatchGraph):
        raise Caffe2Error("match takes an ng.NNMatchGraph, got %s" % type(pattern).__name__)
    matched = {}
    subgraph = NNSubgraph()
    if _match(node, pattern.root(), matched, subgraph):
        return subgraph
    return NNSubgraph()


def _match(node, criteria, matched, subgraph):
    if criteria in matched:                 # a pattern node reached twice: the same node
        return matched[criteria] is node
    spec = criteria.data()
    if not spec.predicate(node):
        return False
    matched[criteria] = node
    subgraph.addNode(node)
    if not spec.strict:
        return True
    edges = node.getOutEdges()
    children = [edge.head() for edge in criteria.getOutEdges()]
    if len(edges) != len(children):
        return False
    return all(_match(edge.head(), child, matched, subgraph)
               for edge, child in zip(edges, children))
