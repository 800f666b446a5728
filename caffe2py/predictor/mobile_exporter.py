"""caffe2.python.predictor.mobile_exporter: a net and its parameters as the
(init_net, predict_net) pair Caffe2's Predictor loads.

The init net fills every parameter with a GivenTensor*Fill holding its values (uint8
tensors as one byte string, to keep the file small) and every other input with a
1x1 placeholder; the predict net's external inputs become those inputs followed by
the original external inputs, and its external outputs the blobs that no op reads.
"""
import numpy as np

from caffe2py import core, utils
from caffe2py.proto import caffe2_pb2

_FILL_OF = {
    np.dtype("float32"): "GivenTensorFill",
    np.dtype("int32"): "GivenTensorIntFill",
    np.dtype("int64"): "GivenTensorInt64Fill",
    np.dtype("uint8"): "GivenTensorByteStringToUInt8Fill",
    np.dtype("O"): "GivenTensorStringFill",
}


def add_tensor(net, name, blob):
    """Append to NetDef `net` an op that recreates tensor `blob` as `name`."""
    blob = np.asarray(blob)
    if blob.dtype not in _FILL_OF:
        raise TypeError("blob %s: dtype %s cannot be exported (float32, int32, int64, uint8 or strings)"
                        % (name, blob.dtype))
    values = blob
    if blob.dtype == np.dtype("uint8"):
        values = [blob.tobytes()]            # one byte string: storing uint8 one by one costs a lot
    if blob.dtype == np.dtype("O"):
        for value in blob.reshape(-1):
            assert isinstance(value, bytes), "string tensors must hold bytes (blob %s)" % name
    op = core.CreateOperator(_FILL_OF[blob.dtype], [], [name], arg=[
        utils.MakeArgument("shape", list(blob.shape)),
        utils.MakeArgument("values", values),
    ])
    net.op.extend([op])


def _ssa(net_def):
    """Caffe2's core.get_ssa: per op (versioned inputs, versioned outputs) and each
    blob's last version. External inputs (or, when the net declares none, the blobs ops
    read before anything writes them) start at version 0, in order of appearance."""
    versions = {}
    for name in net_def.external_input:
        versions.setdefault(name, 0)
    ssa = []
    for op in net_def.op:
        if not net_def.external_input:
            for name in op.input:
                versions.setdefault(name, 0)
        inputs = [(name, versions.get(name, 0)) for name in op.input]
        for name in op.output:
            versions[name] = versions.get(name, 0) + 1
        ssa.append((inputs, [(name, versions[name]) for name in op.output]))
    return ssa, versions


def Export(workspace, net, params):
    """(init_net, predict_net) NetDefs for `net` (core.Net or NetDef) whose parameters
    `params` are read from `workspace` (the caffe2 workspace module or alike)."""
    proto = net if isinstance(net, caffe2_pb2.NetDef) else net.Proto()
    predict_net = caffe2_pb2.NetDef()
    predict_net.CopyFrom(proto)
    init_net = caffe2_pb2.NetDef()
    ssa, blob_versions = _ssa(proto)
    params = [str(p) for p in params]
    read = [name for versioned_inputs, _ in ssa for name, _ in versioned_inputs]
    input_blobs = [b for b, v in blob_versions.items() if v == 0 and b not in params]
    output_blobs = [b for b, v in blob_versions.items() if v != 0 and b not in read]
    for name in params:
        add_tensor(init_net, name, workspace.FetchBlob(name))
    # the inputs must exist when the predictor is created: a placeholder, overwritten by real data
    for name in input_blobs:
        init_net.op.extend([core.CreateOperator("GivenTensorFill", [], [name], arg=[
            utils.MakeArgument("shape", [1, 1]), utils.MakeArgument("values", [0.0])])])
    del predict_net.external_input[:]
    external_inputs = list(input_blobs)
    for name in proto.external_input:
        if name not in external_inputs:
            external_inputs.append(name)
    predict_net.external_input.extend(external_inputs)
    del predict_net.external_output[:]
    predict_net.external_output.extend(output_blobs)
    return init_net, predict_net
