"""Static shape and type inference through op schemas (Caffe2's InferShapesAndTypes)."""
import logging

import numpy as np

from .net_defs import normalized_ops
from .registry import UNKNOWN, OpContext, TensorType, schema_for
from .tensors import data_type_of

log = logging.getLogger("caffe2py")


def type_of_value(value):
    """TensorType of a workspace value (numpy array or anything with shape/dtype)."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return UNKNOWN
    return TensorType(tuple(int(d) for d in shape), data_type_of(np.dtype(dtype)))


def infer_op(op_def, input_types, index=None):
    """Output TensorTypes of one op from its input types (UNKNOWN where not inferable)."""
    schema = schema_for(op_def.type, op_def.domain, op_def.op_version or None)
    n_out = len(op_def.output)
    if schema is None or schema.inference is None or any(not t.known for t in input_types):
        return [UNKNOWN] * n_out
    ctx = OpContext(op_def, schema, index, list(input_types))
    try:
        outs = list(schema.inference(ctx, list(input_types)))
    except Exception as exc:  # noqa: BLE001 - inference never breaks a caller
        log.warning("shape inference of %s failed: %s", ctx.label, exc)
        return [UNKNOWN] * n_out
    outs += [UNKNOWN] * (n_out - len(outs))
    return outs[:n_out]


def static_output_shapes(op_def, ctx, inputs, fixed=()):
    """The op's output shapes as its input shapes and dtypes and the values of the
    inputs at the indices in `fixed` decide them (the schema's inference, else a check
    that can tell them: onnx's inference for ONNX ops), or None where some output's
    shape may depend on the values of the other inputs."""
    outs = infer_op(op_def, [type_of_value(x) for x in inputs])
    if outs and all(t.known for t in outs):
        return [tuple(t.dims) for t in outs]
    schema = ctx.schema if ctx is not None else None
    for check in getattr(schema, "checks", ()) or ():
        tell = getattr(check, "output_shapes", None)
        if tell is not None:
            return tell(ctx, inputs, fixed)
    return None


def infer_net(net_defs, known):
    """Forward pass over the nets. known: {blob: TensorType}; returns the extended map."""
    types = dict(known)
    for net_def in net_defs:
        for index, op in enumerate(normalized_ops(net_def)):
            ins = [types.get(b, UNKNOWN) for b in op.input]
            for blob, t in zip(op.output, infer_op(op, ins, index)):
                if not t.known and op.is_gradient_op:
                    t = _gradient_like_its_blob(blob, types, t)
                if t.known or blob not in types:
                    types[blob] = t
    return types


def _gradient_like_its_blob(blob, types, t):
    """Caffe2's rule for a gradient op's output its schema cannot infer (Split with its
    sizes as an input, as Concat's gradient runs it): `<x>_grad` has x's shape and type."""
    if blob.endswith("_grad"):
        source = types.get(blob[:-len("_grad")])
        if source is not None and source.known:
            return source
    return t
