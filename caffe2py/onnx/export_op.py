"""What a translator works with: the GraphBuilder that collects ONNX nodes and
initializers, and ExportOp, one Caffe2 op being exported.

ExportOp gives a translator the op's arguments with their schema defaults
(`ex.args`, an OpContext), the ONNX names of its inputs and outputs (after the
SSA rewrite), their shapes (`ex.shape`: ints for static dims, None for
symbolic ones) and element types, the values of constant inputs, and
`ex.node(...)` to write ONNX nodes, plus small helpers that spell an op the way
the target opset wants (axes as attributes before opset 13 / 18, as inputs
after).
"""
import numpy as np

from caffe2py.errors import Caffe2Error, describe_op
from caffe2py.registry import OpContext, schema_for

from .export_shapes import ValueType


class ExportError(Caffe2Error):
    """The net cannot be exported. `unsupported` lists (op index, op type) of the
    ops that have no translation."""

    def __init__(self, message, unsupported=()):
        self.unsupported = list(unsupported)
        super().__init__(message)


class GraphBuilder:
    """The ONNX graph under construction (nodes in order, new initializers)."""

    def __init__(self, opset, scope, types, constants, reads, graph_outputs, original):
        self.opset = opset
        self.scope = scope                  # NameScope of value names
        self.types = types                  # value name -> ValueType
        self.constants = constants          # value name -> ndarray (init net and new)
        self.reads = reads                  # value name -> how many ops read it
        self.graph_outputs = set(graph_outputs)
        self.original = original            # SSA name -> Caffe2 blob name
        self.nodes = []
        self.new_initializers = {}
        self.opsets = {"": opset}
        self.derived = {}                   # translators' cache of constants made from others
        self.known_values = {}              # value name -> ndarray a translator knows it will hold
        self.quant = {}                     # value name -> (scale, zero point) of a Caffe2 Int8 tensor
        self._node_names = set()
        self._small_constants = {}

    def node_name(self, base):
        name, k = base, 1
        while name in self._node_names:
            name = "%s_%d" % (base, k)
            k += 1
        self._node_names.add(name)
        return name

    def add_node(self, node):
        self.nodes.append(node)
        return node

    def constant(self, value, hint):
        """The name of an initializer holding `value`; small ones are shared."""
        value = np.asarray(value)
        key = None
        if value.size <= 64 and value.dtype.kind != "O":
            key = (value.dtype.str, value.shape, value.tobytes())
            found = self._small_constants.get(key)
            if found is not None:
                return found
        name = self.scope.unique(hint)
        self.new_initializers[name] = value
        self.constants[name] = value
        self.types[name] = ValueType(tuple(int(d) for d in value.shape), value.dtype)
        if key is not None:
            self._small_constants[key] = name
        return name


class ExportOp:
    """One Caffe2 op on its way to ONNX (what a translator receives)."""

    def __init__(self, graph, op, index, original_op):
        self.graph = graph
        self.op = op
        self.index = index
        self.type = op.type
        self.domain = op.domain
        self.args = OpContext(op, schema_for(op.type, op.domain, op.op_version or None), index)
        self.inputs = list(op.input)
        self.outputs = list(op.output)
        self.opset = graph.opset
        self.label = describe_op(index, original_op)
        self.emitted = []           # ONNX op types written, for the export report
        self._base = "%s_%d" % (op.type, index)

    # -- errors
    def error(self, message, blob=None):
        where = "%s: " % self.label
        if blob is not None:
            where += "blob '%s': " % self.graph.original.get(blob, blob)
        return ExportError(where + message)

    # -- what is known about values
    def value_type(self, name):
        return self.graph.types.get(name)

    def shape(self, name):
        """Dims of a value: ints where static, None where symbolic; None if unknown."""
        t = self.graph.types.get(name)
        return None if t is None else t.static_dims

    def rank(self, name):
        dims = self.shape(name)
        return None if dims is None else len(dims)

    def dtype(self, name):
        t = self.graph.types.get(name)
        return None if t is None else t.dtype

    def need_rank(self, name, why):
        rank = self.rank(name)
        if rank is None:
            raise self.error("the rank of this input is unknown, and %s; give its shape in value_info "
                             "(--input)" % why, blob=name)
        return rank

    def need_dims(self, name, why, axes=None):
        """The dims of `name` (those at `axes`, or all) must be static."""
        dims = self.shape(name)
        if dims is None:
            raise self.error("its shape is unknown, and %s; give the shapes of the net's inputs in value_info "
                             "(--input)" % why, blob=name)
        check = range(len(dims)) if axes is None else axes
        if any(dims[a] is None for a in check):
            raise self.error("shape %s has symbolic dims where %s" % (_dims_text(dims), why), blob=name)
        return dims

    def value(self, name):
        """The ndarray of a constant input (init net, translator-made, or an output a
        translator knows the value of), else None."""
        found = self.graph.constants.get(name)
        return found if found is not None else self.graph.known_values.get(name)

    def set_value(self, name, value):
        """Declare that value `name` (an output this op writes) always holds `value`."""
        value = np.asarray(value)
        self.graph.known_values[name] = value
        self.set_type(name, tuple(int(d) for d in value.shape), value.dtype)

    def set_type(self, name, dims, dtype):
        """Declare the type of an output the shape inference could not tell (dims:
        ints, or None for a dim that is not static)."""
        known = self.graph.types.get(name)
        if known is None or known.dims is None or known.dtype is None:
            self.graph.types[name] = ValueType(None if dims is None else tuple(dims),
                                               None if dtype is None else np.dtype(dtype))

    def is_read(self, k):
        """Whether output k is read by a later op or is an output of the net."""
        name = self.outputs[k]
        return self.graph.reads.get(name, 0) > 0 or name in self.graph.graph_outputs

    # -- writing nodes
    def temp(self, hint):
        return self.graph.scope.unique("%s_%s" % (self.outputs[0] if self.outputs else self._base, hint))

    def node(self, op_type, inputs, outputs=None, domain="", **attrs):
        """Append an ONNX node; outputs: None (one new name), a count, or names.
        Returns the output name (one output) or the list of names."""
        from onnx import helper
        if outputs is None:
            outputs = [self.temp(op_type.lower())]
        elif isinstance(outputs, int):
            outputs = [self.temp("%s%d" % (op_type.lower(), k)) for k in range(outputs)]
        else:
            outputs = list(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        name = self.graph.node_name("%s/%s" % (self._base, op_type))
        self.graph.add_node(helper.make_node(op_type, list(inputs), outputs, name=name, domain=domain or None,
                                             **attrs))
        self.emitted.append(op_type)
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, value, hint="const", dtype=None):
        return self.graph.constant(np.asarray(value, dtype=dtype), "%s_%s" % (self._base, hint))

    def int64s(self, values, hint="shape"):
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1), hint)

    def scalar(self, value, dtype, hint="scalar"):
        return self.const(np.asarray(value, dtype=dtype), hint)

    # -- ops whose spelling depends on the opset
    def unsqueeze(self, x, axes, out=None):
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.int64s(axes, "axes")], out and [out])
        return self.node("Unsqueeze", [x], out and [out], axes=list(axes))

    def squeeze(self, x, axes, out=None):
        if self.opset >= 13:
            return self.node("Squeeze", [x, self.int64s(axes, "axes")], out and [out])
        return self.node("Squeeze", [x], out and [out], axes=list(axes))

    def reduce(self, op_type, x, axes, keepdims, out=None):
        """Reduce{Sum,Max,Mean,...} over `axes` (axes are an input from opset 13 for
        ReduceSum and from 18 for the others)."""
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if as_input:
            return self.node(op_type, [x, self.int64s(axes, "axes")], out and [out], keepdims=int(keepdims))
        return self.node(op_type, [x], out and [out], axes=list(axes), keepdims=int(keepdims))

    def shape_of(self, x, start=0, end=None):
        """int64 1-D tensor: x's dims[start:end]."""
        if start == 0 and end is None:
            return self.node("Shape", [x])
        if self.opset >= 15:
            return self.node("Shape", [x], start=start, end=end)
        shape = self.node("Shape", [x])
        stop = np.iinfo(np.int64).max if end is None else end
        return self.node("Slice", [shape, self.int64s([start], "start"), self.int64s([stop], "end")])

    def cast(self, x, dtype, out=None):
        from .export_types import onnx_elem_type
        return self.node("Cast", [x], out and [out], to=onnx_elem_type(dtype))

    def reshape(self, x, shape, out=None):
        """shape: a list of ints (a constant; 0 copies a dim, -1 is inferred) or a value name."""
        target = shape if isinstance(shape, str) else self.int64s(shape)
        return self.node("Reshape", [x, target], out and [out])

    def transpose(self, x, perm, out=None):
        return self.node("Transpose", [x], out and [out], perm=list(perm))

    def identity(self, x, out):
        return self.node("Identity", [x], [out])


def _dims_text(dims):
    return "[%s]" % ", ".join("?" if d is None else str(d) for d in dims)
