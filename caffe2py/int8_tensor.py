"""Caffe2's Int8 tensor blob (int8::Int8TensorCPU): a tensor of uint8 values (int32 for
the biases Int8GivenIntTensorFill makes) with one float scale and one int32 zero point,
real value = scale * (q - zero_point). Images are NHWC.

Python sees it as Caffe2's pybind does: FetchBlob returns the tuple (data, scale,
zero_point), workspace.FetchInt8Blob the namedtuple Int8Tensor(data, scale, zero_point),
and FeedBlob accepts an Int8Tensor (or an Int8TensorCPU) and stores an Int8 blob.
Save/Load write Caffe2's BlobProto form: type "Int8TensorCPU" with a QTensorProto
(dims, precision 8, scale, bias = zero point, is_signed false, data_type UINT8 or
INT32, the values in `data`).

The blob carries `shape`, `dtype` and `ndim` of its data, so schema inference types it
like a tensor of those dims (UINT8 or INT32); bound shape inference marks it quantized.
"""
import collections
import math

import numpy as np

from .errors import Caffe2Error, SerializationError
from .proto import caffe2_pb2

DT = caffe2_pb2.TensorProto
INT8_BLOB_TYPE = "Int8TensorCPU"
DATA_DTYPES = (np.dtype(np.uint8), np.dtype(np.int32))

# Caffe2's Python form (caffe2/python/workspace.py)
Int8Tensor = collections.namedtuple("Int8Tensor", ["data", "scale", "zero_point"])


class Int8TensorCPU:
    """The blob value. Kernels never modify `data` once the blob holds it."""
    __slots__ = ("data", "scale", "zero_point")

    def __init__(self, data, scale, zero_point):
        self.data = data
        self.scale = float(np.float32(scale))       # Caffe2 keeps a float
        self.zero_point = int(zero_point)

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def nbytes(self):
        return self.data.nbytes

    def python_form(self):
        """What Caffe2's FetchBlob returns for an Int8 blob: (data copy, scale, zero point)."""
        return (self.data.copy(), self.scale, self.zero_point)

    def __repr__(self):
        return "Int8TensorCPU(shape=%s, dtype=%s, scale=%.7g, zero_point=%d)" % (
            list(self.shape), self.dtype, self.scale, self.zero_point)


class Int8QuantParams:
    """Caffe2's Int8QuantParamsBlob (a scale and a zero point): the optional Qparam input
    of Int8Quantize and Int8FC, which then replaces their Y_scale / Y_zero_point."""
    __slots__ = ("scale", "zero_point")

    def __init__(self, scale, zero_point):
        self.scale = float(np.float32(scale))
        self.zero_point = int(zero_point)

    def __repr__(self):
        return "Int8QuantParams(scale=%.7g, zero_point=%d)" % (self.scale, self.zero_point)


def is_int8_feed(value):
    return isinstance(value, (Int8Tensor, Int8TensorCPU))


def from_feed(value, name):
    """The blob FeedBlob stores for an Int8Tensor: a copy of the data, checked."""
    data, scale, zero_point = (value.data, value.scale, value.zero_point)
    data = np.array(data, copy=True, order="C")
    if data.dtype not in DATA_DTYPES:
        raise Caffe2Error("cannot feed Int8 blob '%s': its data must be uint8 (or int32 for a bias), got %s"
                          % (name, data.dtype))
    if not isinstance(scale, (int, float, np.integer, np.floating)) or not math.isfinite(float(scale)):
        raise Caffe2Error("cannot feed Int8 blob '%s': scale must be a finite number, got %r" % (name, scale))
    if not isinstance(zero_point, (int, np.integer)) or isinstance(zero_point, bool) \
            or not -2 ** 31 <= int(zero_point) < 2 ** 31:
        raise Caffe2Error("cannot feed Int8 blob '%s': zero_point must be an int32 integer, got %r"
                          % (name, zero_point))
    return Int8TensorCPU(data, scale, zero_point)


# ----------------------------------------------------------------- BlobProto form

def to_blob_proto(value, name):
    """Caffe2's Int8TensorCPUSerializer: one BlobProto with a qtensor."""
    proto = caffe2_pb2.BlobProto(name=name, type=INT8_BLOB_TYPE)
    q = proto.qtensor
    q.name = name
    q.dims.extend(int(d) for d in value.shape)
    q.precision = 8
    q.scale = value.scale
    q.bias = value.zero_point
    q.is_signed = False
    if value.dtype == np.int32:
        q.data_type = DT.INT32
    elif value.dtype == np.uint8:
        q.data_type = DT.UINT8
    else:
        raise Caffe2Error("Int8 blob '%s': unsupported data type %s (uint8 or int32)" % (name, value.dtype))
    q.data.extend(value.data.reshape(-1).astype(np.int32).tolist())
    return proto


def from_blob_proto(blob_proto):
    """Caffe2's Int8TensorCPUDeserializer, with the sizes checked."""
    q = blob_proto.qtensor
    name = blob_proto.name
    if not blob_proto.HasField("qtensor"):
        raise SerializationError("blob '%s': type %s but the record has no qtensor" % (name, INT8_BLOB_TYPE))
    dims = [int(d) for d in q.dims]
    if any(d < 0 for d in dims):
        raise SerializationError("blob '%s': negative dimension in %s" % (name, dims))
    dtype = {DT.INT32: np.int32, DT.UINT8: np.uint8}.get(q.data_type)
    if dtype is None:
        raise SerializationError("blob '%s': unsupported data type %s in Int8TensorCPU (UINT8 or INT32)"
                                 % (name, DT.DataType.Name(q.data_type) if q.data_type in DT.DataType.values()
                                    else q.data_type))
    count = math.prod(dims)
    if len(q.data) != count:
        raise SerializationError("blob '%s': qtensor holds %d values where dims %s need %d"
                                 % (name, len(q.data), dims, count))
    values = np.asarray(q.data, dtype=np.int64)
    if dtype is np.uint8 and values.size and (values.min() < 0 or values.max() > 255):
        raise SerializationError("blob '%s': uint8 qtensor values outside [0, 255]" % name)
    return Int8TensorCPU(values.astype(dtype).reshape(dims), q.scale, int(q.bias))
