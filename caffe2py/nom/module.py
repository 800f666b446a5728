"""NNModule: a data-flow graph, the order its operators run in, and which tensors
are the net's external inputs and outputs."""
from ..errors import Caffe2Error
from ..proto import caffe2_pb2
from . import converter
from .match import NNSubgraph, match_subgraph
from .order import execution_order
from .representation import NeuralNetData, NeuralNetOperator, NNGraph, NNNode


class NNModule:
    def __init__(self, net=None, device_map=None, strict_outputs=False):
        """NNModule() is empty; NNModule(core.Net or NetDef) converts the net;
        NNModule(net, {blob: DeviceOption}) also marks the external inputs/outputs with
        Declare/Export operators carrying those device options (Caffe2's distributed
        form: every name in the map must be an external input or output)."""
        self._graph = NNGraph()
        self._instructions = []
        self.inputs = []
        self.outputs = []
        if net is None:
            if device_map is not None:
                raise Caffe2Error("NNModule: a device map needs a net")
            return
        net_def = _net_def(net)
        converter.fill_module(self, net_def, strict_outputs=strict_outputs)
        if device_map is not None:
            self._inject_data_edge_indicators()
            self._add_blob_device_options(device_map)

    # --- views
    @property
    def dataFlow(self):
        return self._graph

    def execution_order(self):
        self._instructions = execution_order(self._graph, self._instructions)
        return list(self._instructions)

    @property
    def controlFlow(self):
        return self.execution_order()

    @property
    def nodes(self):
        return self._graph.nodes

    @property
    def operators(self):
        return self._graph.operators

    @property
    def tensors(self):
        return self._graph.tensors

    # --- editing (the data-flow graph's, plus Caffe2's nn:: helpers)
    def createNode(self, value):
        return self._graph.createNode(value)

    def deleteNode(self, node):
        return self._graph.deleteNode(node)

    def createEdge(self, tail, head):
        return self._graph.createEdge(tail, head)

    def deleteEdge(self, edge, head=None):
        self._graph.deleteEdge(edge, head)

    def replaceNode(self, old, new):
        return self._graph.replaceNode(old, new)

    def replaceProducer(self, tensor, new_producer):
        """`new_producer` becomes the producer of `tensor` (in place of the old one)."""
        edges = tensor.getInEdges() if _tensor(tensor, "replaceProducer") else []
        if len(edges) != 1:
            raise Caffe2Error("replaceProducer: tensor %r has %d producers, expected 1"
                              % (tensor.getName(), len(edges)))
        _operator(new_producer, "replaceProducer")
        edges[0].set_tail(new_producer)

    def replaceAllUsesWith(self, old_tensor, new_tensor):
        """Every consumer of `old_tensor` reads `new_tensor` instead, at the same input slot."""
        _tensor(old_tensor, "replaceAllUsesWith")
        _tensor(new_tensor, "replaceAllUsesWith")
        for edge in old_tensor.getOutEdges():
            edge.set_tail(new_tensor)

    def replaceAsConsumer(self, old_consumer, new_consumer):
        """`new_consumer` reads the inputs `old_consumer` read (which then reads none)."""
        _operator(old_consumer, "replaceAsConsumer")
        _operator(new_consumer, "replaceAsConsumer")
        self._graph.replaceInEdges(old_consumer, new_consumer)

    def replaceSubgraph(self, subgraph, node, inputs, outputs):
        """Replace `subgraph` by operator `node` reading `inputs` and writing `outputs`
        (tensors of the subgraph's border, which are kept)."""
        keep = set(inputs) | set(outputs)
        for tensor in inputs:
            self._graph.createEdge(tensor, node)
        for tensor in outputs:
            for edge in tensor.getInEdges():
                self._graph.deleteEdge(edge)
            self._graph.createEdge(node, tensor)
        self.deleteSubgraph([n for n in _subgraph_nodes(subgraph) if n not in keep])

    def deleteSubgraph(self, subgraph):
        for node in _subgraph_nodes(subgraph):
            if self._graph.hasNode(node):
                self._graph.deleteNode(node)

    def createUniqueDataNode(self, prefix="_unique"):
        """A new tensor node named `prefix`, or `prefix_0`, `prefix_1`, ... if taken."""
        taken = {node.getName() for node in self._graph.tensors}
        name, index = prefix, 0
        while name in taken:
            name = "%s_%d" % (prefix, index)
            index += 1
        return self._graph.createNode(NeuralNetData(name))

    def convertToCaffe2Proto(self, old_proto=None):
        return converter.to_net_def(self, old_proto)

    def match(self, pattern):
        """Yield the subgraph matched at each node of the data flow (nodes that match)."""
        for node in self._graph.getMutableNodes():
            found = match_subgraph(node, pattern)
            if found:
                yield found

    # --- Caffe2's distributed form
    def _inject_data_edge_indicators(self):
        for tensor in self.inputs:
            self._graph.createEdge(self._graph.createNode(NeuralNetOperator("Declare")), tensor)
        for tensor in self.outputs:
            self._graph.createEdge(tensor, self._graph.createNode(NeuralNetOperator("Export")))
        self.inputs, self.outputs = [], []

    def _add_blob_device_options(self, device_map):
        seen = set()
        for kind, tensor_of in (("Declare", lambda n: n.getOutputs()[0]),
                                ("Export", lambda n: n.getInputs()[0])):
            seen_here = set()
            for node in self._graph.operators:
                if node.getName() != kind:
                    continue
                name = tensor_of(node).getName()
                if name not in device_map:
                    continue
                if name in seen_here:
                    raise Caffe2Error("Ambiguous name->deviceOption map. Please do this "
                                      "manually. Affected blob: " + name)
                option = device_map[name]
                if not hasattr(option, "SerializeToString"):
                    raise Caffe2Error("NNModule: the device map's value for '%s' is not a "
                                      "DeviceOption" % name)
                seen_here.add(name)
                seen.add(name)
                node.getAnnotation().setDeviceOption(option)
        unused = [name for name in device_map if name not in seen]
        if unused:
            raise Caffe2Error("Unused names in the blob map (not external inputs or outputs "
                              "of the net): " + " ".join('"%s"' % n for n in unused))


def _net_def(net):
    if isinstance(net, caffe2_pb2.NetDef):
        return net
    proto = getattr(net, "Proto", None)
    if callable(proto):
        return proto()
    raise Caffe2Error("NNModule can be constructed with core.Net or caffe2_pb2.NetDef types, "
                    "got %s" % type(net).__name__)


def _subgraph_nodes(subgraph):
    return subgraph.nodes if isinstance(subgraph, NNSubgraph) else list(subgraph)


def _tensor(node, what):
    if not (isinstance(node, NNNode) and node.isTensor()):
        raise Caffe2Error("%s: %r is not a tensor node" % (what, node))
    return True


def _operator(node, what):
    if not (isinstance(node, NNNode) and node.isOperator()):
        raise Caffe2Error("%s: %r is not an operator node" % (what, node))
    return True
