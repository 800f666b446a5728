"""Export of ai.onnx-domain ops (what the ONNX importer makes of an ONNX model):
they are ONNX already. Arguments go back to attributes with the types the ONNX
schema declares, absent optional inputs get their empty names back, and a node
written for another opset than the target is moved there with onnx's version
converter (only ops whose schema changed between the two opsets). The
converter costs tens of milliseconds a call, so its result is kept as a
template per (op, attributes, input types) and reused for nodes that differ
only in their value names (a ResNet's 53 Convs are a handful of templates).
"""
from caffe2py.errors import Caffe2Error
from caffe2py.registry import ONNX_DOMAIN
from caffe2py.tensors import tensor_to_numpy

from .convert import ABSENT_ARG, CAPTURED_ARG
from .export_registry import register_domain_exporter

_INTERNAL_ARGS = {ABSENT_ARG, CAPTURED_ARG, "_forward"}
_COERCED_SOFTMAX = {"Softmax", "LogSoftmax", "Hardmax"}   # 2-D coercion before opset 13
_CONSTANT_INPUT_LIMIT = 4096     # small integer constant inputs go to the converter (Reshape's shape)


def _shape_like(value):
    return value is not None and value.dtype.kind in "iub" and value.size <= _CONSTANT_INPUT_LIMIT


def onnx_schema(op_type, version, domain=""):
    import onnx
    try:
        return onnx.defs.get_schema(op_type, max_inclusive_version=version, domain=domain)
    except onnx.defs.SchemaError:
        return None


def _attribute(arg, attr_type):
    from onnx import AttributeProto as A, helper, numpy_helper
    name = arg.name
    if attr_type == A.INT:
        return helper.make_attribute(name, int(arg.i if arg.HasField("i") else arg.f))
    if attr_type == A.FLOAT:
        return helper.make_attribute(name, float(arg.f if arg.HasField("f") else arg.i))
    if attr_type == A.STRING:
        return helper.make_attribute(name, bytes(arg.s))
    if attr_type == A.TENSOR:
        return helper.make_attribute(name, numpy_helper.from_array(tensor_to_numpy(arg.t)))
    if attr_type == A.TYPE_PROTO:
        import onnx
        return helper.make_attribute(name, onnx.TypeProto.FromString(arg.s))
    attr = A(name=name, type=attr_type)
    if attr_type == A.INTS:
        attr.ints.extend(int(v) for v in arg.ints)
    elif attr_type == A.FLOATS:
        attr.floats.extend(float(v) for v in arg.floats)
    elif attr_type == A.STRINGS:
        attr.strings.extend(arg.strings)
    elif attr_type == A.TENSORS:
        attr.tensors.extend(numpy_helper.from_array(tensor_to_numpy(t)) for t in arg.tensors)
    elif attr_type == A.TYPE_PROTOS:
        import onnx
        attr.type_protos.extend(onnx.TypeProto.FromString(s) for s in arg.strings)
    else:
        raise Caffe2Error("attribute '%s' of type %s cannot be exported (subgraph attributes are not "
                          "supported)" % (name, A.AttributeType.Name(attr_type)))
    return attr


def _guess_type(arg):
    """The attribute type an Argument carries when the schema does not say."""
    from onnx import AttributeProto as A
    for field, kind in (("i", A.INT), ("f", A.FLOAT), ("s", A.STRING), ("t", A.TENSOR)):
        if arg.HasField(field):
            return kind
    for field, kind in (("ints", A.INTS), ("floats", A.FLOATS), ("strings", A.STRINGS), ("tensors", A.TENSORS)):
        if len(getattr(arg, field)):
            return kind
    return A.GRAPH if arg.HasField("n") or len(arg.nets) else A.INTS


def onnx_node(op, version):
    """(NodeProto, onnx schema or None) of an ai.onnx OperatorDef at opset `version`.
    Raises Caffe2Error for what cannot be written back (subgraphs)."""
    from onnx import NodeProto
    from caffe2py.args import ArgumentHelper
    schema = onnx_schema(op.type, version)
    declared = {} if schema is None else {k: int(a.type) for k, a in schema.attributes.items()}
    args = ArgumentHelper(op)
    if args.has(CAPTURED_ARG) or args.has("_forward") or any(a.HasField("n") or len(a.nets) for a in op.arg):
        raise Caffe2Error("ops with subgraphs (If, Loop, Scan, Gradient) are not exported")
    inputs = list(op.input)
    for position in sorted(args.get_ints(ABSENT_ARG, []) if args.has(ABSENT_ARG) else []):
        inputs.insert(position, "")
    node = NodeProto(op_type=op.type)
    node.input.extend(inputs)
    node.output.extend(op.output)
    for arg in op.arg:
        if arg.name not in _INTERNAL_ARGS:
            node.attribute.append(_attribute(arg, declared.get(arg.name, _guess_type(arg))))
    return node, schema


def _value_info(ex, name):
    from onnx import helper
    from .export_types import onnx_elem_type
    t = ex.value_type(name)
    if t is None or t.dtype is None:
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(name, onnx_elem_type(t.dtype), t.dims)


def _template_key(ex, node, version):
    """What the converter's output can depend on, besides value names."""
    parts = [node.op_type, version, ex.opset, tuple(a.SerializeToString() for a in node.attribute),
             tuple(bool(n) for n in node.input), len(node.output)]
    for name in node.input:
        if not name:
            continue
        t = ex.value_type(name)
        value = ex.value(name)
        parts.append((None if t is None else (str(t.dtype), None if t.dims is None else len(t.dims)),
                      value.tobytes() if _shape_like(value) else None))
    return ("convert",) + tuple(parts)


def _run_converter(ex, node, version):
    """(converted nodes, {converter initializer name: ndarray}) for one node."""
    from onnx import helper, numpy_helper, version_converter
    inputs = list(dict.fromkeys(n for n in node.input if n))
    graph = helper.make_graph([node], "node", [_value_info(ex, n) for n in inputs],
                              [_value_info(ex, n) for n in node.output if n])
    for name in inputs:
        if _shape_like(ex.value(name)):   # adapters may read them
            graph.initializer.append(numpy_helper.from_array(ex.value(name), name))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    try:
        converted = version_converter.convert_version(model, ex.opset)
    except Exception as exc:  # noqa: BLE001 - the converter raises several types
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ex.error("onnx's version converter cannot move %s from opset %d to %d: %s"
                       % (ex.type, version, ex.opset, text)) from None
    given = {t.name for t in graph.initializer}
    made = {t.name: numpy_helper.to_array(t) for t in converted.graph.initializer if t.name not in given}
    return list(converted.graph.node), made


def _template(ex, node, version):
    """The converter's output with value names as roles: ("in", i), ("out", j),
    ("const", name) for constants it made (shared by every use), ("tmp", k)."""
    key = _template_key(ex, node, version)
    found = ex.graph.derived.get(key)
    if found is not None:
        return found
    nodes, made = _run_converter(ex, node, version)
    consts = {name: ex.graph.constant(value, "%s_v%d_const" % (node.op_type, ex.opset))
              for name, value in made.items()}
    roles = {}
    for i, name in enumerate(node.input):
        if name:
            roles.setdefault(name, ("in", i))
    for j, name in enumerate(node.output):
        roles.setdefault(name, ("out", j))
    temps = 0
    template = []
    for n in nodes:
        ins, outs = [], []
        for names, into in ((n.input, ins), (n.output, outs)):
            for name in names:
                if not name:
                    into.append(("none", ""))
                elif name in roles:
                    into.append(roles[name])
                elif name in consts:
                    into.append(("const", consts[name]))
                else:
                    roles[name] = ("tmp", temps)
                    temps += 1
                    into.append(roles[name])
        template.append((n, ins, outs))
    ex.graph.derived[key] = template
    return template


def _emit_template(ex, node, template):
    temps = {}

    def resolve(role):
        kind, value = role
        if kind == "in":
            return node.input[value]
        if kind == "out":
            return node.output[value]
        if kind == "const":
            return value
        if kind == "none":
            return ""
        if value not in temps:
            temps[value] = ex.temp("v%d" % ex.opset)
        return temps[value]

    from onnx import NodeProto
    for proto, ins, outs in template:
        n = NodeProto()
        n.CopyFrom(proto)
        n.input[:] = [resolve(r) for r in ins]
        n.output[:] = [resolve(r) for r in outs]
        n.name = ex.graph.node_name("%s/%s" % (ex._base, n.op_type))
        ex.graph.add_node(n)
        ex.emitted.append(n.op_type)


def _softmax_on_last_axis(ex, node, version):
    """Before opset 13 Softmax & co. coerce to 2-D at `axis`; on the last axis that is
    the same as the new meaning, so no Flatten/Reshape is needed."""
    if node.op_type not in _COERCED_SOFTMAX or version >= 13:
        return False
    rank = ex.rank(ex.inputs[0])
    axis = ex.args.int("axis", 1)
    if rank is None or not -rank <= axis < rank or axis % rank != rank - 1:
        return False
    ex.node(node.op_type, [ex.inputs[0]], ex.outputs, axis=-1)
    return True


@register_domain_exporter(ONNX_DOMAIN, onnx_form="the same op; moved to the target opset by onnx's "
                                                 "version converter when its schema changed in between")
def export_onnx_op(ex):
    version = ex.op.op_version or ex.opset
    try:
        node, schema = onnx_node(ex.op, version)
    except Caffe2Error as exc:
        raise ex.error(str(exc)) from None
    if schema is None:
        raise ex.error("ONNX has no schema of %s for opset %d" % (ex.type, version))
    target = onnx_schema(ex.type, ex.opset)
    if target is not None and target.since_version == schema.since_version:
        node.name = ex.graph.node_name("%s/%s" % (ex._base, node.op_type))
        ex.graph.add_node(node)
        ex.emitted.append(node.op_type)
        return
    if _softmax_on_last_axis(ex, node, version):
        return
    _emit_template(ex, node, _template(ex, node, version))
