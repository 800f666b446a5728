"""A generic directed multigraph with ordered edges, as nomnigraph's Graph.

Each node keeps its in- and out-edges in creation order: for a data-flow graph the
order of an operator's in-edges is the order of its inputs. Rewiring an edge to
another endpoint (`Edge.set_tail` / `Edge.set_head`) keeps its place in the other
endpoint's list, so replacing a tensor keeps the consumer's input positions.
"""


class Edge:
    def __init__(self, tail, head):
        self._tail = tail
        self._head = head

    def tail(self):
        return self._tail

    def head(self):
        return self._head

    def set_tail(self, node):
        """Move this edge's start to `node`, keeping its slot in the head's in-edges."""
        self._tail._out_edges.remove(self)
        self._tail = node
        node._out_edges.append(self)

    def set_head(self, node):
        """Move this edge's end to `node`, keeping its slot in the tail's out-edges."""
        self._head._in_edges.remove(self)
        self._head = node
        node._in_edges.append(self)

    def __repr__(self):
        return "Edge(%r -> %r)" % (self._tail, self._head)


class Node:
    def __init__(self, data, graph):
        self._data = data
        self._graph = graph
        self._in_edges = []
        self._out_edges = []

    def data(self):
        return self._data

    def resetData(self, data):
        self._data = data

    def getInEdges(self):
        return list(self._in_edges)

    def getOutEdges(self):
        return list(self._out_edges)

    def in_graph(self):
        return self._graph is not None


class Graph:
    """Nodes and edges in creation order; the Node/Edge objects are the references."""

    node_class = Node

    def __init__(self):
        # insertion-ordered dicts used as ordered sets: O(1) removal on large nets
        self._nodes = {}
        self._edges = {}

    # --- nodes
    def createNode(self, data=None):
        node = self.node_class(data, self)
        self._nodes[node] = None
        return node

    def deleteNode(self, node):
        """Remove `node` and every edge touching it."""
        self._check_member(node)
        for edge in node._in_edges + node._out_edges:
            self._drop_edge(edge)
        del self._nodes[node]
        node._graph = None

    def getMutableNodes(self):
        return list(self._nodes)

    def hasNode(self, node):
        return node._graph is self

    # --- edges
    def createEdge(self, tail, head):
        self._check_member(tail)
        self._check_member(head)
        edge = Edge(tail, head)
        tail._out_edges.append(edge)
        head._in_edges.append(edge)
        self._edges[edge] = None
        return edge

    def getEdgeIfExists(self, tail, head):
        for edge in tail._out_edges:
            if edge._head is head:
                return edge
        return None

    def deleteEdge(self, edge, head=None):
        """deleteEdge(edge), or deleteEdge(tail, head): the first such edge if any."""
        if head is not None:
            edge = self.getEdgeIfExists(edge, head)
            if edge is None:
                return
        if edge in self._edges:
            self._drop_edge(edge)

    def getMutableEdges(self):
        return list(self._edges)

    def _drop_edge(self, edge):
        edge._tail._out_edges.remove(edge)
        edge._head._in_edges.remove(edge)
        del self._edges[edge]

    # --- rewiring
    def replaceInEdges(self, old, new):
        for edge in list(old._in_edges):
            edge.set_head(new)

    def replaceOutEdges(self, old, new):
        for edge in list(old._out_edges):
            edge.set_tail(new)

    def replaceNode(self, old, new):
        """`new` takes every edge of `old` (old is left without edges, still in the graph)."""
        self._check_member(old)
        self._check_member(new)
        self.replaceInEdges(old, new)
        self.replaceOutEdges(old, new)

    def swapNodes(self, first, second):
        """Exchange the places of two nodes: every edge end at one moves to the other."""
        self._check_member(first)
        self._check_member(second)
        edges = {id(e): e for e in first._in_edges + first._out_edges
                 + second._in_edges + second._out_edges}.values()
        swap = {first: second, second: first}
        for edge in edges:
            edge._tail = swap.get(edge._tail, edge._tail)
            edge._head = swap.get(edge._head, edge._head)
        first._in_edges, second._in_edges = second._in_edges, first._in_edges
        first._out_edges, second._out_edges = second._out_edges, first._out_edges

    def _check_member(self, node):
        from ..errors import Caffe2Error
        if not isinstance(node, Node) or node._graph is not self:
            raise Caffe2Error("nomnigraph: %r is not a node of this graph (deleted, or from "
                              "another graph)" % (node,))

    def __repr__(self):
        return dot_string(self, lambda node: {"label": str(node.data())})


def dot_string(graph, labeller, nodes=None, edges=None):
    """The graph as Graphviz dot text; `labeller(node)` gives each node's attributes."""
    nodes = graph.getMutableNodes() if nodes is None else nodes
    edges = graph.getMutableEdges() if edges is None else edges
    ids = {node: index for index, node in enumerate(nodes)}
    lines = ["digraph G {"]
    for node, index in ids.items():
        attrs = ", ".join('%s="%s"' % (key, str(value).replace('"', '\\"'))
                          for key, value in sorted(labeller(node).items()))
        lines.append("  %d [%s];" % (index, attrs))
    for edge in edges:
        if edge.tail() in ids and edge.head() in ids:
            lines.append("  %d -> %d;" % (ids[edge.tail()], ids[edge.head()]))
    lines.append("}")
    return "\n".join(lines) + "\n"
