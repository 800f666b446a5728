"""Function expansion before conversion.

Model-local functions (ModelProto.functions, as exported by torch.onnx's
dynamo path) are inlined. A node with no caffe2py kernel whose ONNX schema
defines it as a function (a plain body, or one built for the node's
attributes and input types, as Attention or RotaryEmbedding are) is replaced
by that body, repeatedly, so only ops with neither a kernel nor a body remain
unsupported. onnx's own inliner does the renaming and attribute binding.
"""
import logging

log = logging.getLogger("caffe2py")
EXPANDED_DOMAIN = "caffe2py.expanded"


def _value_types(model):
    """{value name: TypeProto} from shape inference plus inputs and initializers."""
    import onnx
    from onnx import helper
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is only a help for building bodies
        inferred = model
    g = inferred.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for t in model.graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return types


def _schema(node, version):
    import onnx.defs
    try:
        return onnx.defs.get_schema(node.op_type, version, node.domain or "")
    except Exception:  # noqa: BLE001 - no schema: nothing to expand
        return None


def _function_for(node, version, types):
    """The FunctionProto implementing node at this opset, or None."""
    import onnx
    schema = _schema(node, version)
    if schema is None:
        return None
    fp = onnx.FunctionProto()
    if schema.has_context_dependent_function:
        if any(n and n not in types for n in node.input):
            return None
        in_types = [(types[n] if n else onnx.TypeProto()).SerializeToString() for n in node.input]
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= version]
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                max(versions) if versions else version, node.SerializeToString(), in_types)
        except Exception:  # noqa: BLE001 - the builder refuses unusual nodes
            return None
        fp.ParseFromString(data)
        return fp
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= version]
        data = schema.get_function_with_opset_version(max(versions)) if versions else None
        if not data:
            return None
        fp.ParseFromString(data if isinstance(data, bytes) else data.SerializeToString())
        return fp
    return None


def _walk(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _walk(attr.g)
            for g in attr.graphs:
                yield from _walk(g)


def expand_functions(model, supported, opsets_of, max_rounds=8):
    """A copy of model with local functions inlined and kernel-less function ops
    expanded. supported(domain, op type, version) says which ops have kernels."""
    import onnx
    from onnx import helper, inliner

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if len(out.functions):
        out = inliner.inline_local_functions(out)
    for round_ in range(max_rounds):
        opsets = opsets_of(out)
        types = None
        added = []
        for node in _walk(out.graph):
            domain = node.domain or ""
            version = opsets.get(domain if domain != "ai.onnx" else "", 1)
            if supported(domain or "ai.onnx", node.op_type, version):
                continue
            if types is None:
                types = _value_types(out)
            fp = _function_for(node, version, types)
            if fp is None:
                continue
            fp.name = "%s_%d_%d" % (node.op_type, round_, len(added))
            fp.domain = EXPANDED_DOMAIN
            node.op_type, node.domain = fp.name, EXPANDED_DOMAIN
            added.append(fp)
        if not added:
            break
        out.functions.extend(added)
        if not any(o.domain == EXPANDED_DOMAIN for o in out.opset_import):
            out.opset_import.append(helper.make_opsetid(EXPANDED_DOMAIN, 1))
        try:
            out = inliner.inline_local_functions(out)
        except Exception as exc:  # noqa: BLE001 - keep the model as it was
            log.debug("function expansion failed: %s", exc)
            return model
    return out
