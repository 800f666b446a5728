"""Reading nets and inputs from files (binary or text protobuf, .npy/.pb inputs); the
package also holds Caffe2's model builders (caffe2.python.models.resnet: resnet.py)."""
import os

import numpy as np
from google.protobuf import text_format

from .. import model_trust, model_trust_ops
from ..errors import Caffe2Error, ProtoError
from ..proto import caffe2_pb2
from ..tensors import tensor_to_numpy


def read_proto(path, message_type):
    """Parse a binary or text-format protobuf file into message_type."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ProtoError("cannot read '%s': %s" % (path, exc.strerror or exc)) from None
    msg = message_type()
    binary_error = None
    try:
        msg.ParseFromString(data)
        if _looks_valid(msg):
            return msg
    except Exception as exc:  # noqa: BLE001 - try text format next
        binary_error = exc
    try:
        return text_format.Parse(data.decode("utf-8"), message_type())
    except Exception as exc:  # noqa: BLE001
        raise ProtoError("'%s' is not a valid %s (binary: %s; text: %s)"
                         % (path, message_type.DESCRIPTOR.name,
                            binary_error or "parsed to an empty or nameless message", exc)) from None


def _looks_valid(msg):
    if isinstance(msg, caffe2_pb2.NetDef):
        return bool(msg.name or len(msg.op))
    return msg.ByteSize() > 0


def read_net(path, trusted=None, data_roots=None):
    """A NetDef from a model file. Unless trusted (or CAFFE2PY_TRUST_MODEL=1), it is
    checked against the model-trust policy now (nothing in it is unpickled, and ops
    may only touch files in data_roots, or read in the file's own folder) and marked
    so that it keeps that policy wherever it runs (caffe2py/model_trust.py). With
    neither argument, a policy set by the caller (the command line's) applies."""
    net = read_proto(path, caffe2_pb2.NetDef)
    policy = model_trust.loader_policy([path], data_roots, trusted)
    model_trust_ops.check_net(net, policy)
    return model_trust.mark(net, policy)


def read_input(path):
    """An input array from .npy, or a serialized TensorProto / BlobProto (.pb)."""
    if not os.path.exists(path):
        raise Caffe2Error("input file '%s' does not exist" % path)
    if path.endswith(".npy"):
        try:
            return np.load(path, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001
            raise Caffe2Error("cannot read '%s' as .npy: %s" % (path, exc)) from None
    try:
        with open(path, "rb") as f:
            data = f.read()
        blob = caffe2_pb2.BlobProto.FromString(data)
        if blob.HasField("tensor"):
            return tensor_to_numpy(blob.tensor)
        return tensor_to_numpy(caffe2_pb2.TensorProto.FromString(data))
    except Exception as exc:  # noqa: BLE001
        raise ProtoError("cannot read '%s' as .npy, BlobProto or TensorProto: %s" % (path, exc)) from None
