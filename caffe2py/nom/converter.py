"""NetDef <-> NNModule (Caffe2's caffe2/opt/converter.cc semantics).

NetDef -> module: one operator node per op, in op order; a tensor node per SSA
version of a blob (an op's input reads the latest version, each output makes a new
one). External inputs read by an op become the module's inputs; external inputs no op
reads are kept as lone tensor nodes (and stay external inputs). An external output no
op produces is logged and skipped, or refused with `strict_outputs` (what the
Transformer passes use).

Module -> NetDef: the ops in execution order, each the OperatorDef its annotation
holds, with inputs and outputs read from the graph's edges and `order` rewritten from
the operator's layout; the old net's other fields are kept, and its external
inputs/outputs are kept in their old order, then the module's new ones.
"""
import logging

from ..errors import Caffe2Error
from ..proto import caffe2_pb2
from .graph import Graph
from .representation import NeuralNetData, operator_def_of, operator_from_def

_log = logging.getLogger(__name__)


def fill_module(module, net_def, strict_outputs=False):
    """Build `module`'s graph, order, inputs and outputs from `net_def`."""
    graph = module.dataFlow
    external_inputs = list(dict.fromkeys(net_def.external_input))
    unread = set(external_inputs)
    latest = {}                       # blob name -> its current tensor node
    module_inputs = {}
    for op_def in net_def.op:
        op_node = graph.createNode(None)
        for name in op_def.input:
            if name not in latest:
                latest[name] = graph.createNode(NeuralNetData(name))
                if name in unread:
                    module_inputs[name] = latest[name]
                    unread.discard(name)
            _raw_edge(graph, latest[name], op_node)
        for name in op_def.output:
            tensor = graph.createNode(NeuralNetData(name))
            _raw_edge(graph, op_node, tensor)
            latest[name] = tensor
        op_node.resetData(operator_from_def(op_def))
        module._instructions.append(op_node)
    for name in external_inputs:      # external inputs no op reads: lone tensors
        if name in unread:
            latest[name] = module_inputs[name] = graph.createNode(NeuralNetData(name))
    module.inputs = [module_inputs[name] for name in external_inputs if name in module_inputs]
    module.outputs = []
    for name in dict.fromkeys(net_def.external_output):
        if name not in latest:
            if strict_outputs:
                raise Caffe2Error("NetDef '%s' has an ill-formed external_output: no op "
                                  "produces or reads '%s'" % (net_def.name, name))
            _log.error("NetDef has ill-formed external_output: %s", name)
            continue
        module.outputs.append(latest[name])
    return module


def _raw_edge(graph, tail, head):
    # the op node has no value yet while its edges are drawn (NNGraph checks kinds)
    return Graph.createEdge(graph, tail, head)


def _merge_external(nodes, old_names):
    names = list(dict.fromkeys(node.getName() for node in nodes if node.isTensor()))
    wanted = set(names)
    kept = [name for name in dict.fromkeys(old_names) if name in wanted]
    return kept + [name for name in names if name not in set(kept)]


def to_net_def(module, old_net=None):
    """The NetDef for `module`: a copy of `old_net` (or an empty NetDef) with its ops
    and external inputs/outputs replaced."""
    net = caffe2_pb2.NetDef()
    if old_net is not None:
        if not hasattr(old_net, "SerializeToString"):
            raise Caffe2Error("convertToCaffe2Proto takes either no args or a NetDef, got %s"
                              % type(old_net).__name__)
        net.ParseFromString(old_net.SerializeToString())
    del net.op[:]
    for node in module.execution_order():
        op = operator_def_of(node)
        op.input.extend(tensor.getName() for tensor in node.getInputs())
        op.output.extend(tensor.getName() for tensor in node.getOutputs())
        layout = node.getOperator().layout
        if layout is not None:
            orders = [arg for arg in op.arg if arg.name == "order"]
            arg = orders[0] if orders else op.arg.add(name="order")
            arg.s = layout.encode()
        net.op.add().CopyFrom(op)
    live = [node for node in module.inputs if module.dataFlow.hasNode(node)]
    inputs = _merge_external(live, list(net.external_input))
    live = [node for node in module.outputs if module.dataFlow.hasNode(node)]
    outputs = _merge_external(live, list(net.external_output))
    del net.external_input[:]
    del net.external_output[:]
    net.external_input.extend(inputs)
    net.external_output.extend(outputs)
    return net
