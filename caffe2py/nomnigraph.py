"""Caffe2's `caffe2.python.nomnigraph`: the nomnigraph graph IR of a net.

`NNModule(net)` turns a core.Net or NetDef into a data-flow graph of operator and
tensor nodes (one tensor node per version of a blob) plus the order the operators
run in; edit it (createNode/createEdge/deleteEdge/replaceNode/deleteNode, the
replace* helpers, subgraph matching with NNMatchGraph) and get a NetDef back with
`convertToCaffe2Proto()`. Pure Python (caffe2py/nom/); Caffe2 bound C++ for this.
"""
from .nom.graph import Edge, Graph, Node
from .nom.match import NNMatchGraph, NNSubgraph, match_subgraph
from .nom.module import NNModule
from .nom.representation import (Annotation, Data, NeuralNetData, NeuralNetOperator, NNGraph,
                                 Operator)

__all__ = ["Annotation", "Data", "Edge", "Graph", "NNGraph", "NNMatchGraph", "NNModule",
           "NNSubgraph", "NeuralNetData", "NeuralNetOperator", "Node", "Operator",
           "matchSubgraph", "render"]

matchSubgraph = match_subgraph


def render(graph):
    """Print a graph (NNGraph, Graph, NNSubgraph) as Graphviz dot text."""
    print(str(graph))
