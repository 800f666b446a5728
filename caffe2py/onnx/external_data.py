"""Reading an ONNX model's external tensor data, confined to the model's folder.

A tensor whose data_location is EXTERNAL names a file (`location`, relative to
the model file) and optionally a byte range (`offset`, `length`). A model is
untrusted input: its locations may point anywhere. caffe2py reads a location
only when it is a relative path without `..` components whose real path (after
symlinks) lies inside the model's folder, names a regular file, and the range
lies within that file; anything else is a ModelLoadError naming the tensor and
the location. A model given as bytes or as a ModelProto has no folder: its
external tensors are refused with an error that says to load it from its path.
"""
import os
import re

from onnx import TensorProto

_DRIVE = re.compile(r"^[A-Za-z]:")


def external_tensors(model):
    """Every TensorProto of the model that keeps its data in a file: initializers,
    sparse initializers, node attributes, in subgraphs and functions too."""
    def graph_tensors(graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            yield from node_tensors(node)

    def node_tensors(node):
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            if attr.HasField("g"):
                yield from graph_tensors(attr.g)
            for g in attr.graphs:
                yield from graph_tensors(g)

    for tensor in graph_tensors(model.graph):
        if tensor.data_location == TensorProto.EXTERNAL:
            yield tensor
    for function in model.functions:
        for node in function.node:
            for tensor in node_tensors(node):
                if tensor.data_location == TensorProto.EXTERNAL:
                    yield tensor


def _entries(tensor):
    return {entry.key: entry.value for entry in tensor.external_data}


def _describe(tensor):
    return "ONNX tensor '%s'" % (tensor.name or "<unnamed>")


def _location_problem(location):
    """Why a location is refused before the file system is asked (None: acceptable)."""
    if not location:
        return "names no file"
    if "\x00" in location:
        return "holds a NUL byte"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or _DRIVE.match(location):
        return "is an absolute path; external data must lie in the model's folder"
    if ".." in re.split(r"[/\\]", location):
        return "contains '..'; external data must lie in the model's folder"
    return None


def _byte_range(tensor, error, entries):
    values = []
    for key in ("offset", "length"):
        text = entries.get(key)
        if text is None or text == "":
            values.append(None)
            continue
        try:
            value = int(text)
        except ValueError:
            raise error("has external data %s %r, which is not a whole number" % (key, text)) from None
        if value < 0:
            raise error("has a negative external data %s (%d)" % (key, value))
        values.append(value)
    return values


def load_external_data(model, base_dir, error_type):
    """Read every external tensor's bytes into raw_data (from files inside base_dir)."""
    base = os.path.realpath(base_dir)
    for tensor in list(external_tensors(model)):
        entries = _entries(tensor)
        location = entries.get("location", "")

        def error(message, location=location, tensor=tensor):
            return error_type("%s %s (external data location %r, model folder '%s')"
                              % (_describe(tensor), message, location, base))

        problem = _location_problem(location)
        if problem:
            raise error("has an external data location that %s" % problem)
        real = os.path.realpath(os.path.join(base, location))
        if os.path.commonpath([real, base]) != base:
            raise error("has external data that resolves to '%s', outside the model's folder "
                        "(through a symbolic link)" % real)
        if not os.path.exists(real):
            raise error("has external data in a file that does not exist")
        if not os.path.isfile(real):
            raise error("has external data in something that is not a regular file")
        offset, length = _byte_range(tensor, error, entries)
        size = os.path.getsize(real)
        offset = offset or 0
        if offset > size or (length is not None and offset + length > size):
            raise error("has an external data range (offset %d, length %s) past the end of the "
                        "%d-byte file" % (offset, "to the end" if length is None else length, size))
        try:
            with open(real, "rb") as f:
                f.seek(offset)
                data = f.read(size - offset if length is None else length)
        except OSError as exc:
            raise error("cannot be read: %s" % (exc.strerror or exc)) from None
        tensor.raw_data = data
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def refuse_external_data(model, source, error_type):
    """A model given without its folder must not rely on files: refuse clearly."""
    for tensor in external_tensors(model):
        raise error_type("%s of %s keeps its data in the external file %r, but the model was not "
                         "given as a path, so there is no folder to read it from; pass the model's "
                         "file path instead" % (_describe(tensor), source, _entries(tensor).get("location", "")))
