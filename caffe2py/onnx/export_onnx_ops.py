"""Export of ai.onnx-domain ops (what the ONNX importer makes of an ONNX model):
they are ONNX already. Arguments go back to attributes with the types the ONNX
schema declares, absent optional inputs get their empty names back, and a node
written for another opset than the target is moved there with onnx's version
converter (only ops whose schema changed between the two opsets)."""
from caffe2py.registry import ONNX_DOMAIN
from caffe2py.tensors import tensor_to_numpy

from .convert import ABSENT_ARG, CAPTURED_ARG
from .export_registry import register_domain_exporter

_INTERNAL_ARGS = {ABSENT_ARG, CAPTURED_ARG, "_forward"}
_COERCED_SOFTMAX = {"Softmax", "LogSoftmax", "Hardmax"}   # 2-D coercion before opset 13


def _schema(op_type, version, domain=""):
    import onnx
    try:
        return onnx.defs.get_schema(op_type, max_inclusive_version=version, domain=domain)
    except onnx.defs.SchemaError:
        return None


def _attribute(ex, arg, attr_type):
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
        raise ex.error("attribute '%s' of type %s cannot be exported (subgraph attributes are not "
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


def _node(ex, domain, version):
    """The op as an ONNX NodeProto at its own opset version."""
    from onnx import NodeProto
    schema = _schema(ex.type, version, "" if domain == ONNX_DOMAIN else domain)
    declared = {} if schema is None else {k: int(a.type) for k, a in schema.attributes.items()}
    absent = list(ex.args.ints(ABSENT_ARG, [])) if ex.args.has(ABSENT_ARG) else []
    if ex.args.has(CAPTURED_ARG) or ex.args.has("_forward"):
        raise ex.error("ops with subgraphs (If, Loop, Scan, Gradient) are not exported")
    inputs = list(ex.inputs)
    for position in sorted(absent):
        inputs.insert(position, "")
    node = NodeProto(op_type=ex.type, domain="" if domain == ONNX_DOMAIN else domain)
    node.input.extend(inputs)
    node.output.extend(ex.outputs)
    for arg in ex.op.arg:
        if arg.name in _INTERNAL_ARGS:
            continue
        node.attribute.append(_attribute(ex, arg, declared.get(arg.name, _guess_type(arg))))
    return node, schema


def _value_info(ex, name):
    from onnx import helper
    from .export_types import onnx_elem_type
    t = ex.value_type(name)
    if t is None or t.dtype is None:
        return helper.make_value_info(name, helper.make_empty_tensor_value_info(name).type)
    return helper.make_tensor_value_info(name, onnx_elem_type(t.dtype), t.dims)


def _convert(ex, node, version):
    """node (written for `version`) rewritten for ex.opset by onnx's version converter."""
    from onnx import helper, version_converter
    inputs = [n for n in node.input if n]
    graph = helper.make_graph([node], "node", [_value_info(ex, n) for n in dict.fromkeys(inputs)],
                              [_value_info(ex, n) for n in node.output if n])
    for name in dict.fromkeys(inputs):
        value = ex.value(name)
        if value is not None and value.size <= 4096:   # adapters may need constant inputs (e.g. Reshape)
            from onnx import numpy_helper
            graph.initializer.append(numpy_helper.from_array(value, name))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    try:
        converted = version_converter.convert_version(model, ex.opset)
    except Exception as exc:  # noqa: BLE001 - the converter raises several types
        raise ex.error("onnx's version converter cannot move %s from opset %d to %d: %s"
                       % (ex.type, version, ex.opset, str(exc).splitlines()[0] if str(exc) else exc)) from None
    interface = set(inputs) | set(node.output)
    given = {t.name for t in graph.initializer}
    renamed = {}
    for t in converted.graph.initializer:
        if t.name not in given:
            from onnx import numpy_helper
            renamed[t.name] = ex.const(numpy_helper.to_array(t), "converted")
    for n in converted.graph.node:
        for field in (n.input, n.output):
            for k, name in enumerate(field):
                if name and name not in interface:
                    if name not in renamed:
                        renamed[name] = ex.temp("v%d" % version)
                    field[k] = renamed[name]
        n.name = ex.graph.node_name("%s/%s" % (ex._base, n.op_type))
        ex.graph.add_node(n)
        ex.emitted.append(n.op_type)


def _softmax_on_last_axis(ex, node, version):
    """Before opset 13 Softmax & co. coerce to 2-D at `axis`; on the last axis that is
    the same as the new meaning, so no Flatten/Reshape is needed."""
    if node.op_type not in _COERCED_SOFTMAX or version >= 13 or ex.opset < 13:
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
    node, schema = _node(ex, ONNX_DOMAIN, version)
    if schema is None:
        raise ex.error("ONNX has no schema of %s for opset %d" % (ex.type, version))
    target = _schema(ex.type, ex.opset)
    if target is not None and target.since_version == schema.since_version:
        node.name = ex.graph.node_name("%s/%s" % (ex._base, node.op_type))
        ex.graph.add_node(node)
        ex.emitted.append(node.op_type)
        return
    if _softmax_on_last_axis(ex, node, version):
        return
    _convert(ex, node, version)
