"""Reading an ONNX model from a ModelProto, a path or bytes, with clear errors
for missing, corrupted, truncated or invalid files."""
import os

from caffe2py.errors import Caffe2Error

MAX_IR_VERSION = 14
MAX_OPSET = 28


class ModelLoadError(Caffe2Error):
    """The ONNX model could not be read or is not a valid model."""


def _parse(data, source):
    import onnx
    from google.protobuf.message import DecodeError

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelLoadError("%s is not a valid ONNX model: the protobuf cannot be decoded "
                             "(corrupted or truncated file? %d bytes read): %s"
                             % (source, len(data), exc)) from None
    if not model.HasField("graph") or model.ir_version == 0:
        # Random or truncated bytes sometimes decode as an empty message.
        raise ModelLoadError("%s is not a valid ONNX model: %s (corrupted or truncated file? "
                             "%d bytes read)" % (source, "no graph" if not model.HasField("graph")
                                                  else "no ir_version", len(data)))
    return model


def load_model(model, check=False):
    """A ModelProto from a ModelProto, a path (str/PathLike) or serialized bytes."""
    import onnx

    model_arg = model
    if isinstance(model, onnx.ModelProto):
        source = "model '%s'" % (model.graph.name or "<unnamed>")
    elif isinstance(model, (bytes, bytearray, memoryview)):
        source = "ONNX bytes"
        model = _parse(bytes(model), source)
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        source = "'%s'" % path
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ModelLoadError("cannot read ONNX model %s: %s" % (source, exc.strerror or exc)) from None
        model = _parse(data, source)
        _load_external_data(model, os.path.dirname(os.path.abspath(path)))
    else:
        raise ModelLoadError("expected an onnx.ModelProto, a path or bytes, got %s" % type(model).__name__)
    if not isinstance(model_arg, (str, os.PathLike)):
        from .external_data import refuse_external_data
        refuse_external_data(model, source, ModelLoadError)
    _check_text(model, source)
    if model.ir_version > MAX_IR_VERSION:
        raise ModelLoadError("%s has IR version %d; caffe2py reads IR versions up to %d"
                             % (source, model.ir_version, MAX_IR_VERSION))
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > MAX_OPSET:
            raise ModelLoadError("%s imports ai.onnx opset %d; caffe2py knows opsets 1 to %d"
                                 % (source, imp.version, MAX_OPSET))
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError("%s is not a valid ONNX model: %s" % (source, first)) from None
    return model


def _load_external_data(model, base_dir):
    from .external_data import load_external_data
    load_external_data(model, base_dir, ModelLoadError)


def _graph_texts(graph):
    yield graph.name
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        yield v.name
    for t in graph.initializer:
        yield t.name
    for node in graph.node:
        yield node.name
        yield node.op_type
        yield node.domain
        yield from node.input
        yield from node.output
        for attr in node.attribute:
            yield attr.name
            if attr.HasField("g"):
                yield from _graph_texts(attr.g)
            for g in attr.graphs:
                yield from _graph_texts(g)


def _check_text(model, source):
    """Names must be UTF-8 text; protobuf only finds out when a field is read,
    so read them all once here (a corrupted file fails now, with a clear error)."""
    try:
        texts = [imp.domain for imp in model.opset_import] + list(_graph_texts(model.graph))
        for f in model.functions:
            texts += [f.name, f.domain] + [n.op_type for n in f.node] + [x for n in f.node for x in n.input]
    except UnicodeDecodeError as exc:
        raise ModelLoadError("%s holds a name that is not valid UTF-8 text (corrupted file?): %s"
                             % (source, exc)) from None
    if any(not isinstance(t, str) for t in texts):
        raise ModelLoadError("%s holds a name that is not valid UTF-8 text (corrupted file?)" % source)
