"""ONNX ModelProto -> (init_net, predict_net).

Every ONNX node becomes one OperatorDef in domain "ai.onnx" (or the node's own
domain) with op_version taken from the model's opset import, so kernels keep
ONNX semantics exactly. Attributes become Arguments (tensors as TensorProtos,
graphs as nested NetDefs). Initializers become `Constant` ops in the init net.

Load-time constant folding: a node whose inputs are all constants (initializers,
Constant nodes or earlier folded nodes) and that is deterministic moves into
the init net, so running the init net once (at prepare time) computes it;
the predict net only holds the input-dependent part. The init net stays small
on disk because it holds the recipe (e.g. ConstantOfShape), not the values.

Missing optional inputs (empty names) cannot be blobs: trailing ones are
dropped, and the positions of the others are kept in the `_onnx_absent`
argument so the kernel sees None there.
"""
import numpy as np

from caffe2py.args import make_argument
from caffe2py.errors import Caffe2Error
from caffe2py.progress import Progress
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import CPU, ONNX_DOMAIN, _kernels, has_op, normalize_domain
from caffe2py.tensors import data_type_of

from .loader import load_model

ABSENT_ARG = "_onnx_absent"
CAPTURED_ARG = "_onnx_captured"
# Nodes that must run every time even when their inputs are constant.
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}


class UnsupportedModelError(Caffe2Error):
    """The model uses ops (or opset versions) caffe2py has no kernel for.
    `unsupported` lists every (domain, op type, opset version) pair."""

    def __init__(self, message, unsupported):
        self.unsupported = unsupported
        super().__init__(message)


# --------------------------------------------------------------------------- tensors

def onnx_tensor_to_numpy(tensor):
    from onnx import numpy_helper
    try:
        return numpy_helper.to_array(tensor)
    except Exception:  # noqa: BLE001 - onnx raises several types for bad tensors
        from onnx import TensorProto
        kind = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
            else "unknown data type %d" % tensor.data_type
        raise Caffe2Error("ONNX tensor '%s' cannot be decoded: its data does not hold %s values for dims %s "
                          "(%d raw bytes; corrupted file?)" % (tensor.name, kind, list(tensor.dims),
                                                               len(tensor.raw_data))) from None


def numpy_to_c2_tensor(arr, name=None):
    """A Caffe2 TensorProto holding arr; numeric data goes to raw_data (fast, exact)."""
    arr = np.asarray(arr)
    t = caffe2_pb2.TensorProto()
    if name:
        t.name = name
    t.dims.extend(arr.shape)
    t.data_type = data_type_of(arr.dtype)
    if arr.dtype.kind in "OSU":
        t.string_data.extend(s.encode() if isinstance(s, str) else bytes(s) for s in arr.reshape(-1))
    else:
        t.raw_data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return t


# --------------------------------------------------------------------------- attributes

def _attribute_to_argument(attr, opsets):
    import onnx
    A = onnx.AttributeProto
    kind = attr.type
    if kind == A.INT:
        return make_argument(attr.name, int(attr.i))
    if kind == A.FLOAT:
        return make_argument(attr.name, float(attr.f))
    if kind == A.STRING:
        return make_argument(attr.name, attr.s)
    if kind == A.TENSOR:
        return make_argument(attr.name, numpy_to_c2_tensor(onnx_tensor_to_numpy(attr.t)))
    if kind == A.GRAPH:
        return make_argument(attr.name, graph_to_net(attr.g, opsets, attr.name))
    arg = caffe2_pb2.Argument(name=attr.name)   # lists: typed even when empty
    if kind == A.INTS:
        arg.ints.extend(attr.ints)        # both int64: no per-value Python work (tree models: 100k+)
    elif kind == A.FLOATS:
        arg.floats.extend(attr.floats)
    elif kind == A.STRINGS:
        arg.strings.extend(attr.strings)
    elif kind == A.TENSORS:
        arg.tensors.extend(numpy_to_c2_tensor(onnx_tensor_to_numpy(t)) for t in attr.tensors)
    elif kind == A.GRAPHS:
        arg.nets.extend(graph_to_net(g, opsets, attr.name) for g in attr.graphs)
    elif kind == A.TYPE_PROTO:      # kept as the serialized onnx.TypeProto
        arg.s = attr.tp.SerializeToString()
    elif kind == A.TYPE_PROTOS:
        arg.strings.extend(tp.SerializeToString() for tp in attr.type_protos)
    else:
        raise Caffe2Error("attribute '%s' has type %s, which caffe2py does not read"
                          % (attr.name, A.AttributeType.Name(kind)))
    return arg


# --------------------------------------------------------------------------- nodes

def node_domain(node):
    return normalize_domain(node.domain or ONNX_DOMAIN)


def node_opset(node, opsets):
    domain = node.domain or ""
    if domain in ("ai.onnx", ""):
        return opsets.get("", opsets.get("ai.onnx", 1))
    return opsets.get(domain, 1)


def node_to_op(node, opsets):
    op = caffe2_pb2.OperatorDef(type=node.op_type, name=node.name, domain=node_domain(node),
                                op_version=node_opset(node, opsets))
    inputs = list(node.input)
    while inputs and not inputs[-1]:
        inputs.pop()
    absent = [i for i, name in enumerate(inputs) if not name]
    op.input.extend(name for name in inputs if name)
    outputs = list(node.output)
    while outputs and not outputs[-1]:
        outputs.pop()
    # Unused optional outputs in the middle still need a (private) name; the
    # node's first real output (unique in the graph) keeps it unique.
    anchor = next((n for n in outputs if n), node.name or node.op_type)
    op.output.extend(name or "_onnx_unused_%s_%d" % (anchor, i) for i, name in enumerate(outputs))
    for attr in node.attribute:
        if attr.ref_attr_name:
            raise Caffe2Error("node '%s' (%s): attribute references (ref_attr_name) are only valid "
                              "inside functions" % (node.name, node.op_type))
        op.arg.append(_attribute_to_argument(attr, opsets))
    if absent:
        op.arg.append(make_argument(ABSENT_ARG, absent))
    captured = [n for g in _subgraphs(node) for n in free_variables(g)]
    captured = list(dict.fromkeys(captured))
    if captured:
        # Subgraphs may read outer-scope values: they become extra inputs of
        # the op (after its own) and declared inputs of every nested net.
        op.input.extend(captured)
        op.arg.append(make_argument(CAPTURED_ARG, captured))
        for arg in op.arg:
            nets = [arg.n] if arg.HasField("n") else list(arg.nets)
            for net in nets:
                net.external_input.extend(n for n in captured if n not in net.external_input)
    return op


def _subgraphs(node):
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def free_variables(graph):
    """Names a (sub)graph reads but does not define: outer-scope values."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    free = []
    for node in graph.node:
        uses = [n for n in node.input if n]
        for g in _subgraphs(node):
            uses += free_variables(g)
        for name in uses:
            if name not in defined and name not in free:
                free.append(name)
        defined.update(o for o in node.output if o)
    for v in graph.output:   # an output may pass an outer value straight through
        if v.name not in defined and v.name not in free:
            free.append(v.name)
    return free


def _graph_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graph_nodes(attr.g)
            for g in attr.graphs:
                yield from _graph_nodes(g)


def is_supported(domain, op_type, version):
    table = _kernels.get((normalize_domain(domain), op_type, CPU))
    return bool(table) and any(e.covers(version) for entries in table.values() for e in entries)


def unsupported_ops(model):
    """Sorted (domain, op type, opset) triples with no CPU kernel."""
    opsets = model_opsets(model)
    missing = set()
    for node in _graph_nodes(model.graph):
        domain, version = node_domain(node), node_opset(node, opsets)
        if not is_supported(domain, node.op_type, version):
            missing.add((domain, node.op_type, version))
    return sorted(missing)


def model_opsets(model):
    opsets = {}
    for imp in model.opset_import:
        opsets[imp.domain if imp.domain != "ai.onnx" else ""] = int(imp.version)
    if not opsets:
        opsets[""] = 1  # IR < 3 models may leave it out; opset 1 is the oldest
    return opsets


def graph_to_net(graph, opsets, name=None):
    """A subgraph (If/Loop/Scan body) as a NetDef; no folding inside."""
    net = caffe2_pb2.NetDef(name=name or graph.name)
    for node in graph.node:
        net.op.append(node_to_op(node, opsets))
    net.external_input.extend(v.name for v in graph.input)
    net.external_output.extend(v.name for v in graph.output)
    for init in graph.initializer:
        net.op.insert(0, constant_op(init.name, onnx_tensor_to_numpy(init)))
    return net


def constant_op(name, value):
    op = caffe2_pb2.OperatorDef(type="Constant", domain=ONNX_DOMAIN, op_version=13)
    op.output.append(name)
    op.arg.append(make_argument("value", numpy_to_c2_tensor(value)))
    return op


# --------------------------------------------------------------------------- Gradient

GRADIENT_DOMAIN = "ai.onnx.preview.training"


def attach_forward_subgraph(op, node, earlier_nodes, opsets):
    """Gradient needs the ops from its inputs (xs, zs) to y: attach them as the
    `_forward` NetDef argument so the kernel can differentiate them."""
    attrs = {a.name: a for a in node.attribute}
    if "y" not in attrs or "xs" not in attrs:
        raise Caffe2Error("Gradient node '%s' needs attributes xs and y" % node.name)
    y = attrs["y"].s.decode()
    sources = set(node.input)
    needed, chosen = {y}, []
    for earlier in reversed(earlier_nodes):
        if needed & set(earlier.output):
            chosen.append(earlier)
            needed.update(b for b in earlier.input if b and b not in sources)
    forward = caffe2_pb2.NetDef(name="gradient_forward")
    forward.op.extend(node_to_op(n, opsets) for n in reversed(chosen))
    forward.external_input.extend(b for b in node.input if b)
    forward.external_output.append(y)
    op.arg.append(make_argument("_forward", forward))


# --------------------------------------------------------------------------- model

def check_graph_wiring(graph):
    """Every value a node reads is a graph input, an initializer or an earlier
    node's output, and every graph output is produced: a truncated or corrupted
    file that still decodes is caught here rather than deep in the executor."""
    known = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in known:
                raise Caffe2Error("ONNX graph '%s' is inconsistent: node %d (%s '%s') reads '%s', which no "
                                  "graph input, initializer or earlier node provides (corrupted or truncated "
                                  "file, or nodes out of order?)" % (graph.name, index, node.op_type,
                                                                     node.name, name))
        known.update(o for o in node.output if o)
    missing = [v.name for v in graph.output if v.name not in known]
    if missing:
        raise Caffe2Error("ONNX graph '%s' is inconsistent: output '%s' is never produced (corrupted or "
                          "truncated file?)" % (graph.name, missing[0]))


def graph_inputs(model):
    """Names of the graph inputs a caller must feed (initializers excluded)."""
    inits = {t.name for t in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in inits]


def convert(model, fold_constants=True, check=False):
    """(init_net, predict_net) NetDefs for an ONNX model (ModelProto, path or bytes).

    Raises UnsupportedModelError listing every (op, opset) pair without a kernel.
    """
    import caffe2py.operators  # noqa: F401 - registers the ONNX ops

    model = load_model(model, check=check)
    missing = unsupported_ops(model)
    if missing or len(model.functions):
        from .functions import expand_functions
        model = expand_functions(model, is_supported, model_opsets)
        missing = unsupported_ops(model)
    if missing:
        listed = ", ".join("%s-%d%s" % (t, v, "" if d == ONNX_DOMAIN else " (domain %s)" % d)
                           for d, t, v in missing)
        raise UnsupportedModelError("the model uses %d op(s) caffe2py cannot run: %s"
                                    % (len(missing), listed), missing)
    opsets = model_opsets(model)
    graph = model.graph
    check_graph_wiring(graph)
    name = graph.name or "onnx_model"
    init_net = caffe2_pb2.NetDef(name=name + "_init")
    predict_net = caffe2_pb2.NetDef(name=name)

    # a bar on a terminal when converting takes over a second (large models)
    bar = Progress(len(graph.initializer) + len(graph.node), "converting '%s'" % name,
                   unit="tensors+nodes", delay=1.0)
    constants = set()
    for init in graph.initializer:
        init_net.op.append(constant_op(init.name, onnx_tensor_to_numpy(init)))
        constants.add(init.name)
        bar.update()
    for sparse in graph.sparse_initializer:
        raise Caffe2Error("sparse initializer '%s' is not supported" % sparse.values.name)

    for index, node in enumerate(graph.node):
        op = node_to_op(node, opsets)
        if node.op_type == "Gradient" and node.domain == GRADIENT_DOMAIN:
            attach_forward_subgraph(op, node, graph.node[:index], opsets)
        has_subgraph = any(a.HasField("g") or len(a.graphs) for a in node.attribute)
        foldable = (fold_constants and node.op_type not in NONDETERMINISTIC and not has_subgraph
                    and all(b in constants for b in op.input))
        if foldable:
            init_net.op.append(op)
            constants.update(op.output)
        else:
            predict_net.op.append(op)
        bar.update()
    bar.close()

    fed = graph_inputs(model)
    used = {b for op in predict_net.op for b in op.input} | {v.name for v in graph.output}
    predict_net.external_input.extend(fed)
    predict_net.external_input.extend(sorted(b for b in constants if b in used and b not in fed))
    predict_net.external_output.extend(v.name for v in graph.output)
    init_net.external_output.extend(sorted(constants))
    return init_net, predict_net
