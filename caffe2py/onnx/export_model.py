"""Assembling the exported ModelProto: graph, opset imports, IR version, and the
initializers written straight into the model (an ONNX graph copies every
message it is given: a VGG's 575 MB would be copied twice more). onnx's checker
and shape inference run on a skeleton of the model whose initializers are
typed graph inputs instead of data, so neither serialises the weights."""
import numpy as np

from .export_op import ExportError
from .export_types import onnx_elem_type

PRODUCER = "caffe2py"
_PROPAGATED_CONSTANT_LIMIT = 4096   # small integer constants stay in the skeleton (shape data)


def fill_tensor(tensor, name, value):
    """Write ndarray `value` into onnx TensorProto `tensor` (raw little-endian data)."""
    from onnx import numpy_helper
    value = np.asarray(value)
    if value.dtype.kind in "OSU":
        tensor.CopyFrom(numpy_helper.from_array(value, name))
        return
    tensor.name = name
    tensor.data_type = onnx_elem_type(value.dtype)
    tensor.dims.extend(int(d) for d in value.shape)
    tensor.raw_data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()


def make_model(nodes, name, inputs, outputs, opsets, version):
    """The ModelProto without initializers; IR version the lowest the opsets allow."""
    from onnx import helper
    graph = helper.make_graph(nodes, name, inputs, outputs)
    opset_imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=opset_imports, producer_name=PRODUCER,
                              producer_version=version)
    model.ir_version = helper.find_min_ir_version_for(opset_imports)
    return model


def _skeleton(model, initializers):
    from onnx import ModelProto, helper
    skeleton = ModelProto()
    skeleton.CopyFrom(model)
    for name, value in initializers.items():
        value = np.asarray(value)
        if value.size <= _PROPAGATED_CONSTANT_LIMIT and value.dtype.kind in "iub":
            fill_tensor(skeleton.graph.initializer.add(), name, value)
        else:
            skeleton.graph.input.append(helper.make_tensor_value_info(
                name, onnx_elem_type(value.dtype), list(value.shape)))
    return skeleton


def check_and_type_outputs(model, initializers, untyped):
    """onnx's checker on the model's skeleton; outputs named in `untyped` ({value:
    Caffe2 name}) get the types onnx's shape inference finds for them."""
    import onnx
    skeleton = _skeleton(model, initializers)
    if untyped:
        inferred = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
        known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for out, skel_out in zip(model.graph.output, skeleton.graph.output):
            if out.name not in untyped:
                continue
            found = known.get(out.name)
            if found is None or not found.type.tensor_type.elem_type:
                raise ExportError("the element type of output '%s' cannot be inferred; give the shapes of "
                                  "the net's inputs in value_info" % untyped[out.name])
            out.type.CopyFrom(found.type)
            skel_out.type.CopyFrom(found.type)
    try:
        onnx.checker.check_model(skeleton)
    except onnx.checker.ValidationError as exc:
        raise ExportError("the exported model does not pass onnx's checker: %s" % exc) from None


def add_initializers(model, initializers):
    for name, value in initializers.items():
        fill_tensor(model.graph.initializer.add(), name, value)


# Models over this many bytes keep their initializers in `<file>.data` (protobuf
# cannot serialise 2 GB).
EXTERNAL_DATA_THRESHOLD = 2 ** 31 - 2 ** 24


def save_model(model, path):
    """Write `model` to `path` atomically: into a temporary name in the same folder,
    renamed when complete, so a failure never leaves a partial file. Models over
    2 GB store their initializers in `<path>.data` (the model's tensors are
    switched to external data in place)."""
    import os
    import shutil
    import tempfile
    import onnx
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    if not base:
        raise ExportError("'%s' is a folder, not a file name" % path)
    try:
        size = model.ByteSize()
    except Exception:  # noqa: BLE001 - protobuf refuses sizes it cannot represent
        size = EXTERNAL_DATA_THRESHOLD
    try:
        scratch = tempfile.mkdtemp(prefix=".%s." % base, dir=folder)
    except OSError as exc:
        raise ExportError("cannot write '%s': %s" % (path, exc.strerror or exc)) from None
    try:
        written = [base]
        if size >= EXTERNAL_DATA_THRESHOLD:
            data = base + ".data"
            onnx.save_model(model, os.path.join(scratch, base), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=data, size_threshold=1024)
            written.insert(0, data)      # the data lands first, the model that names it last
        else:
            with open(os.path.join(scratch, base), "wb") as f:
                f.write(model.SerializeToString())
        for name in written:
            if os.path.exists(os.path.join(scratch, name)):   # no data file when every tensor is small
                os.replace(os.path.join(scratch, name), os.path.join(folder, name))
    except OSError as exc:
        raise ExportError("cannot write '%s': %s" % (path, exc.strerror or exc)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path
