"""Shape inference for ai.onnx ops whose caffe2py schema has none: ask onnx's own
shape inference about a one-node model. Used by bound shape inference only;
anything it cannot express (tensor-valued or graph attributes, omitted optional
inputs) is reported as not inferable."""
from .registry import TensorType
from .tensors import data_type_of, numpy_dtype


def _attribute_value(arg):
    if arg.HasField("i"):
        return arg.i
    if arg.HasField("f"):
        return arg.f
    if arg.HasField("s"):
        return arg.s
    if len(arg.ints):
        return list(arg.ints)
    if len(arg.floats):
        return list(arg.floats)
    if len(arg.strings):
        return list(arg.strings)
    raise ValueError("argument '%s' has no plain value for onnx" % arg.name)


def infer_onnx_node(ctx, ins):
    """TensorTypes of an ai.onnx op's outputs via onnx.shape_inference."""
    import onnx
    from onnx import helper

    op = ctx.op_def
    if any(a.name.startswith("_") for a in op.arg):   # converter bookkeeping (e.g. absent inputs)
        raise ValueError("op carries converter-private arguments")
    attrs = {a.name: _attribute_value(a) for a in op.arg}
    node = helper.make_node(op.type, list(op.input), list(op.output), **attrs)
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(numpy_dtype(t.dtype)),
                                            list(t.dims)) for name, t in zip(op.input, ins)]
    outputs = [helper.make_empty_tensor_value_info(name) for name in op.output]
    graph = helper.make_graph([node], "single_op", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", op.op_version or 13)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    result = []
    for name in op.output:
        value = known.get(name)
        t = value.type.tensor_type if value is not None else None
        if t is None or not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim) \
                or not t.elem_type:
            result.append(TensorType(None, None))
            continue
        dtype = data_type_of(helper.tensor_dtype_to_np_dtype(t.elem_type))
        result.append(TensorType(tuple(d.dim_value for d in t.shape.dim), dtype))
    return result
