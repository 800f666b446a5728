"""Shape hints for bound shape inference: Caffe2's "name,d1,d2[,type]#name2,..."
strings, TensorBoundShapes protos, checks against a net, and batch / sequence
rescaling."""
import difflib
import logging

from .errors import Caffe2Error
from .proto import caffe2_pb2
from .shape_inference import DimType, ShapeInfo, with_default_dim_types

log = logging.getLogger("caffe2py")
DT = caffe2_pb2.TensorProto

# Caffe2's type names in hint strings (shape_info.cc); anything else means FLOAT.
TYPE_NAMES = {
    "uint8": DT.UINT8, "int8": DT.INT8, "uint16": DT.UINT16, "int16": DT.INT16,
    "int32": DT.INT32, "int64": DT.INT64, "float16": DT.FLOAT16, "half": DT.FLOAT16,
    "float": DT.FLOAT, "double": DT.DOUBLE, "byte": DT.BYTE, "string": DT.STRING,
    "bool": DT.BOOL, "hash": DT.ZERO_COLLISION_HASH,
}


def _is_int(token):
    token = token.strip()
    return token.lstrip("-").isdigit()


def parse_shape_hints(text):
    """{name: ShapeInfo} from "name,d1,d2[,type]#...". First dim BATCH, the rest
    CONSTANT; names containing "int8" default to UINT8. Raises Caffe2Error on
    malformed text or a blob given twice with different shapes."""
    if not isinstance(text, str):
        raise Caffe2Error("shape hints must be a string, got %s" % type(text).__name__)
    hints = {}
    for n, entry in enumerate(text.split("#")):
        if not entry.strip():
            if text.strip():
                raise Caffe2Error("shape hint #%d in %r is empty (two '#' in a row or a trailing '#')" % (n, text))
            continue
        tokens = [t.strip() for t in entry.split(",")]
        name = tokens[0]
        if not name:   # numeric names are fine: ONNX exports call blobs "1", "2", ...
            raise Caffe2Error("shape hint %r must start with a blob name, as in 'name,d1,d2[,type]'" % entry)
        rest = tokens[1:]
        dtype = DT.UINT8 if "int8" in name else DT.FLOAT
        if rest and not _is_int(rest[-1]):
            type_name = rest.pop()
            if type_name.lower() in TYPE_NAMES:
                dtype = TYPE_NAMES[type_name.lower()]
            else:
                log.warning("shape hint for '%s': unknown type '%s', using float", name, type_name)
                dtype = DT.FLOAT
        dims = []
        for token in rest:
            if not _is_int(token):
                raise Caffe2Error("shape hint for '%s': dim %r is not an integer (format: "
                                  "'name,d1,d2[,type]#name2,...')" % (name, token))
            value = int(token)
            if value < 0:
                raise Caffe2Error("shape hint for '%s': dim %d is negative" % (name, value))
            dims.append(value)
        info = with_default_dim_types(dims, dtype)
        if name in hints and (hints[name].dims != info.dims or hints[name].dtype != info.dtype):
            raise Caffe2Error("inconsistent shape hints for '%s': %s and %s"
                              % (name, hints[name].describe(), info.describe()))
        hints[name] = info
    return hints


def format_shape_hints(hints):
    """The inverse of parse_shape_hints (dims and dtype; dim types are not in the format)."""
    names = {v: k for k, v in TYPE_NAMES.items() if k != "half"}
    return "#".join(",".join([name] + [str(d) for d in info.dims] + [names.get(info.dtype, "float")])
                    for name, info in hints.items())


def net_blobs(net_def):
    """Every blob a net mentions (inputs, outputs, external declarations)."""
    blobs = set(net_def.external_input) | set(net_def.external_output)
    for op in net_def.op:
        blobs.update(op.input)
        blobs.update(op.output)
    return blobs


def check_hints_against_net(hints, net_def):
    """A hint for a blob the net never mentions is almost always a typo: say so."""
    blobs = net_blobs(net_def)
    for name in hints:
        if name not in blobs:
            close = difflib.get_close_matches(name, sorted(blobs), n=3, cutoff=0.5)
            raise Caffe2Error("shape hint for blob '%s', which net '%s' does not use%s"
                              % (name, net_def.name or "<unnamed>",
                                 "; did you mean %s?" % " or ".join("'%s'" % c for c in close) if close else ""))


# ----------------------------------------------------------------- protos

def to_tensor_bound_shapes(shape_map, spec=None):
    """TensorBoundShapes proto from {name: ShapeInfo} (and the spec's bounds)."""
    msg = caffe2_pb2.TensorBoundShapes()
    for name, info in shape_map.items():
        entry = msg.shapes.add()
        entry.name = name
        entry.shape.name = name
        entry.shape.dims.extend(info.dims)
        entry.shape.data_type = info.dtype
        entry.dim_type.extend(int(t) for t in info.dim_types)
        entry.shape_is_final = info.shape_is_final
    if spec is not None:
        msg.max_batch_size = spec.max_batch_size
        msg.max_feature_len = spec.max_seq_size
    return msg


def from_tensor_bound_shapes(msg):
    """{name: ShapeInfo} from a TensorBoundShapes proto (Caffe2's
    extractShapeInfoFromTensorBoundShapes without rescaling)."""
    shape_map = {}
    for entry in msg.shapes:
        name = entry.name or entry.shape.name
        if not name:
            raise Caffe2Error("TensorBoundShapes entry without a name: %s" % entry)
        if len(entry.dim_type) and len(entry.dim_type) != len(entry.shape.dims):
            raise Caffe2Error("TensorBoundShape '%s' has %d dims but %d dim types"
                              % (name, len(entry.shape.dims), len(entry.dim_type)))
        shape_map[name] = ShapeInfo(list(entry.shape.dims), list(entry.dim_type), entry.shape.data_type,
                                    shape_is_final=entry.shape_is_final)
    return shape_map


_BATCH_TYPES = {DimType.BATCH, DimType.BATCH_OF_FEATURE_MAX, DimType.BATCH_OF_FEATURE_MAX_DEFAULT}
_SEQ_TYPES = {DimType.FEATURE_MAX_DEFAULT, DimType.BATCH_OF_FEATURE_MAX_DEFAULT}


def rescale_shapes(shape_map, old_batch, old_seq, new_batch, new_seq):
    """Caffe2's changeTensorBoundShapes: BATCH* dims scale by new/old batch and
    *FEATURE_MAX_DEFAULT dims by new/old sequence size (each must divide)."""
    out = {}
    for name, info in shape_map.items():
        info = info.copy()
        for i, t in enumerate(info.dim_types):
            if t in _BATCH_TYPES:
                info.dims[i] = _rescale(name, i, info.dims[i], old_batch, new_batch, "batch size")
            if t in _SEQ_TYPES:
                info.dims[i] = _rescale(name, i, info.dims[i], old_seq, new_seq, "sequence size")
        out[name] = info
    return out


def _rescale(name, i, dim, old, new, what):
    if old <= 0 or dim % old:
        raise Caffe2Error("cannot rescale dim %d (%d) of '%s': it is not a multiple of the old %s %d"
                          % (i, dim, name, what, old))
    return dim // old * new


def extract_shape_info(msg, new_batch=None, new_seq=None):
    """{name: ShapeInfo} from TensorBoundShapes, rescaled to new bounds when given."""
    shape_map = from_tensor_bound_shapes(msg)
    if new_batch is None and new_seq is None:
        return shape_map
    old_batch, old_seq = msg.max_batch_size, msg.max_feature_len
    return rescale_shapes(shape_map, old_batch, old_seq,
                          old_batch if new_batch is None else new_batch,
                          old_seq if new_seq is None else new_seq)
