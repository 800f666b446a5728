"""Nomnigraph's neural-net representation: operator and tensor values, Caffe2
annotations, and the data-flow graph (NNGraph) whose nodes are operators and tensors
with edges only between an operator and a tensor (tensor -> op: an input,
op -> tensor: an output)."""
import copy
import logging

from ..errors import Caffe2Error
from ..proto import caffe2_pb2
from .graph import Graph, Node, dot_string

_log = logging.getLogger(__name__)


class NeuralNetOperator:
    """An operator value: its type name, layout (from the `order` argument) and an
    optional Annotation that carries the Caffe2 OperatorDef."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise Caffe2Error("NeuralNetOperator takes the operator type as a string, got %r"
                              % (name,))
        self._name = name
        self.layout = None          # "NCHW", "NHWC" or None (undefined)
        self.annotation = None

    def getName(self):
        return self._name

    def __repr__(self):
        return "NeuralNetOperator(%r)" % self._name


class NeuralNetData:
    """A tensor value: a blob name (one node per SSA version of the blob)."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise Caffe2Error("NeuralNetData takes the blob name as a string, got %r" % (name,))
        self._name = name

    def getName(self):
        return self._name

    def setName(self, name):
        self._name = name

    def __repr__(self):
        return "NeuralNetData(%r)" % self._name


# Caffe2's short names in caffe2.python.nomnigraph
Operator = NeuralNetOperator
Data = NeuralNetData


class Annotation:
    """Caffe2Annotation: device name and type, device option, the OperatorDef, and the
    distributed fields (key/length nodes, component levels). Protos are copied in and
    out, as Caffe2's binding serialises them."""

    def __init__(self):
        self._device = ""
        self._device_type = caffe2_pb2.CPU
        self._device_option = None
        self._operator_def = None
        self._key_node = None
        self._length_node = None
        self._component_levels = []

    def setDevice(self, device):
        self._device = device

    def getDevice(self):
        return self._device

    def setDeviceType(self, device_type):
        self._device_type = int(device_type)

    def getDeviceType(self):
        return self._device_type

    def setKeyNode(self, node):
        self._key_node = node

    def getKeyNode(self):
        if self._key_node is None:
            raise Caffe2Error("Annotation: no key node was set (setKeyNode)")
        return self._key_node

    def setLengthNode(self, node):
        self._length_node = node

    def getLengthNode(self):
        if self._length_node is None:
            raise Caffe2Error("Annotation: no length node was set (setLengthNode)")
        return self._length_node

    def setComponentLevels(self, levels):
        self._component_levels = [str(level) for level in levels]

    def getComponentLevels(self):
        return list(self._component_levels)

    def hasDeviceOption(self):
        return self._device_option is not None

    def getDeviceOption(self):
        option = caffe2_pb2.DeviceOption()
        if self._device_option is not None:
            option.CopyFrom(self._device_option)
        return option

    def setDeviceOption(self, option):
        self._device_option = _copy_proto(option, caffe2_pb2.DeviceOption, "device_option")

    device_option = property(getDeviceOption, setDeviceOption)

    def hasOperatorDef(self):
        return self._operator_def is not None

    def getOperatorDef(self):
        op = caffe2_pb2.OperatorDef()
        if self._operator_def is not None:
            op.CopyFrom(self._operator_def)
        return op

    def setOperatorDef(self, op):
        self._operator_def = _copy_proto(op, caffe2_pb2.OperatorDef, "operator_def")

    def mutableOperatorDef(self):
        """The stored OperatorDef itself (passes edit it in place)."""
        if self._operator_def is None:
            self._operator_def = caffe2_pb2.OperatorDef()
        return self._operator_def

    operator_def = property(getOperatorDef, setOperatorDef)

    def __copy__(self):
        clone = Annotation.__new__(Annotation)
        clone.__dict__.update(self.__dict__)
        clone._component_levels = list(self._component_levels)
        for field in ("_device_option", "_operator_def"):
            if getattr(self, field) is not None:
                setattr(clone, field, copy.deepcopy(getattr(self, field)))
        return clone


def _copy_proto(value, message_class, what):
    if not hasattr(value, "SerializeToString"):
        raise Caffe2Error("Annotation.%s can only be set to a %s, got %s"
                          % (what, message_class.__name__, type(value).__name__))
    out = message_class()
    out.ParseFromString(value.SerializeToString())
    return out


def operator_from_def(op_def):
    """NeuralNetOperator for an OperatorDef (Caffe2's convertToNeuralNetOperator): the
    type, the layout from `order`, an annotation holding the whole def and its device."""
    op = NeuralNetOperator(op_def.type)
    for arg in op_def.arg:
        if arg.name == "order":
            order = arg.s.decode() if isinstance(arg.s, bytes) else arg.s
            op.layout = order.upper() if order.upper() in ("NCHW", "NHWC") else None
    annotation = Annotation()
    annotation.setOperatorDef(op_def)
    if op_def.device_option.node_name:
        annotation.setDevice(op_def.device_option.node_name)
    annotation.setDeviceType(op_def.device_option.device_type)
    op.annotation = annotation
    return op


def operator_def_of(node):
    """The OperatorDef an operator node stands for, without inputs and outputs
    (Caffe2's convertToOperatorDef)."""
    nn_op = node.getOperator()
    annotation = nn_op.annotation
    if annotation is None or not annotation.hasOperatorDef():
        op = caffe2_pb2.OperatorDef()
        op.type = nn_op.getName()
    else:
        op = annotation.getOperatorDef()
    # the annotation's device type wins; an op without device_option keeps none (it
    # then runs on the net's device) unless the annotation asks for another device
    if annotation is not None and annotation.getDeviceType() != op.device_option.device_type:
        op.device_option.device_type = annotation.getDeviceType()
    del op.input[:]
    del op.output[:]
    return op


class NNNode(Node):
    """A node of an NNGraph: an operator or a tensor (Caffe2's NodeRef)."""

    def isOperator(self):
        return isinstance(self._data, NeuralNetOperator)

    def isTensor(self):
        return isinstance(self._data, NeuralNetData)

    def getType(self):
        if self.isTensor():
            return "Tensor"
        return "Operator" if self.isOperator() else "Unknown"

    def getName(self):
        if self.isTensor() or self.isOperator():
            return self._data.getName()
        return "Unknown"

    type = property(getType)
    name = property(getName)

    def _require(self, operator, what):
        if (self.isOperator() if operator else self.isTensor()):
            return
        raise Caffe2Error("nomnigraph: %s needs %s node, and %r is a %s node"
                          % (what, "an operator" if operator else "a tensor", self.getName(),
                             self.getType().lower()))

    def getOperator(self):
        self._require(True, "getOperator")
        return self._data

    def getTensor(self):
        self._require(False, "getTensor")
        return self._data

    operator = property(getOperator)
    tensor = property(getTensor)

    def getInputs(self):
        self._require(True, "getInputs")
        return [edge.tail() for edge in self._in_edges]

    def getOutputs(self):
        self._require(True, "getOutputs")
        return [edge.head() for edge in self._out_edges]

    def hasProducer(self):
        return len(self._in_edges) > 0

    def getProducer(self):
        self._require(False, "getProducer")
        if not self._in_edges:
            raise Caffe2Error("nomnigraph: tensor %r has no producer" % self.getName())
        return self._in_edges[0].tail()

    def getConsumers(self):
        self._require(False, "getConsumers")
        return [edge.head() for edge in self._out_edges]

    inputs = property(getInputs)
    outputs = property(getOutputs)
    producer = property(getProducer)
    consumers = property(getConsumers)

    def getAnnotation(self):
        """The operator's annotation, created from its def when it has none (the live
        object: changes to it change the node)."""
        op = self.getOperator()
        if op.annotation is None:
            annotation = Annotation()
            annotation.setOperatorDef(operator_def_of(self))
            op.annotation = annotation
        return op.annotation

    def setAnnotation(self, annotation):
        if not isinstance(annotation, Annotation):
            raise Caffe2Error("setAnnotation takes an ng.Annotation, got %s"
                              % type(annotation).__name__)
        self.getOperator().annotation = copy.copy(annotation)

    annotation = property(getAnnotation, setAnnotation)

    def getOperatorPredecessors(self):
        self._require(True, "getOperatorPredecessors")
        return [edge.tail().getProducer() for edge in self._in_edges
                if edge.tail().hasProducer()]

    def getOperatorSuccessors(self):
        self._require(True, "getOperatorSuccessors")
        return [consumer for edge in self._out_edges for consumer in edge.head().getConsumers()]

    def __repr__(self):
        return "<%s node %r>" % (self.getType(), self.getName())


def nn_labels(node):
    if node.isOperator():
        return {"label": node.getName(), "shape": "box"}
    return {"label": node.getName()}


class NNGraph(Graph):
    """The data-flow graph of operators and tensors."""

    node_class = NNNode

    def createNode(self, value=None):
        """createNode(NeuralNetOperator | NeuralNetData | OperatorDef): a new node holding
        a copy of the value (an OperatorDef's inputs and outputs are dropped)."""
        if value is None:
            return super().createNode(None)
        if isinstance(value, NeuralNetOperator):
            return super().createNode(NeuralNetOperator(value.getName()))
        if isinstance(value, NeuralNetData):
            return super().createNode(NeuralNetData(value.getName()))
        if not hasattr(value, "SerializeToString"):
            raise Caffe2Error("createNode takes an OperatorDef, an ng.NeuralNetOperator or an "
                              "ng.NeuralNetData, got %s" % type(value).__name__)
        op_def = _copy_proto(value, caffe2_pb2.OperatorDef, "createNode")
        if len(op_def.input) or len(op_def.output):
            _log.warning("Input and output specifications are dropped when converting a single "
                         "operator to nomnigraph. Use ng.NNModule(NetDef) to preserve these.")
        return super().createNode(operator_from_def(op_def))

    def createEdge(self, tail, head):
        if not ((_is(tail, NNNode.isOperator) and _is(head, NNNode.isTensor))
                or (_is(tail, NNNode.isTensor) and _is(head, NNNode.isOperator))):
            raise Caffe2Error("Edges must exist between NeuralNetOperator and NeuralNetData "
                              "(got %r -> %r)" % (tail, head))
        return super().createEdge(tail, head)

    @property
    def nodes(self):
        return self.getMutableNodes()

    @property
    def operators(self):
        return [node for node in self._nodes if node.isOperator()]

    @property
    def tensors(self):
        return [node for node in self._nodes if node.isTensor()]

    def __repr__(self):
        return dot_string(self, nn_labels)


def _is(node, predicate):
    return isinstance(node, NNNode) and predicate(node)
