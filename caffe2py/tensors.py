"""NumPy <-> TensorProto conversion and the DataType <-> dtype table."""
import numpy as np

from .errors import Caffe2Error
from .proto import caffe2_pb2

DT = caffe2_pb2.TensorProto

_DTYPE_OF = {
    DT.FLOAT: np.dtype(np.float32),
    DT.INT32: np.dtype(np.int32),
    DT.BYTE: np.dtype(np.uint8),
    DT.STRING: np.dtype(object),
    DT.BOOL: np.dtype(np.bool_),
    DT.UINT8: np.dtype(np.uint8),
    DT.INT8: np.dtype(np.int8),
    DT.UINT16: np.dtype(np.uint16),
    DT.INT16: np.dtype(np.int16),
    DT.INT64: np.dtype(np.int64),
    DT.FLOAT16: np.dtype(np.float16),
    DT.DOUBLE: np.dtype(np.float64),
}
_DATATYPE_OF = {
    np.dtype(np.float32): DT.FLOAT, np.dtype(np.int32): DT.INT32,
    np.dtype(np.bool_): DT.BOOL, np.dtype(np.uint8): DT.UINT8, np.dtype(np.int8): DT.INT8,
    np.dtype(np.uint16): DT.UINT16, np.dtype(np.int16): DT.INT16,
    np.dtype(np.int64): DT.INT64, np.dtype(np.float16): DT.FLOAT16,
    np.dtype(np.float64): DT.DOUBLE, np.dtype(object): DT.STRING,
}


def numpy_dtype(data_type):
    """numpy dtype for a TensorProto.DataType value."""
    try:
        return _DTYPE_OF[data_type]
    except KeyError:
        raise Caffe2Error("unsupported TensorProto data type %r" % data_type) from None


def data_type_of(dtype):
    """TensorProto.DataType for a numpy dtype (strings and bytes map to STRING)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "SUO":
        return DT.STRING
    try:
        return _DATATYPE_OF[dtype]
    except KeyError:
        raise Caffe2Error("numpy dtype %s has no Caffe2 data type" % dtype) from None


def data_type_name(data_type):
    return DT.DataType.Name(data_type)


def as_blob_value(value):
    """What FeedBlob stores: a C-contiguous ndarray; strings become object arrays."""
    if isinstance(value, caffe2_pb2.TensorProto):
        return tensor_to_numpy(value)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        # ragged nested lists, ints past 64 bits: no rectangular array of one dtype
        raise Caffe2Error("cannot feed a %s that is not a rectangular array of one dtype (nested lists "
                          "must have equal lengths; integers must fit in 64 bits)" % type(value).__name__) from None
    if arr.dtype.kind in "SU":
        # numpy's fixed-width bytes drop trailing NULs (a serialized proto can end in
        # one): build the object array from the Python strings themselves
        arr = np.array(value, dtype=object) if not isinstance(value, np.ndarray) else arr.astype(object)
    elif arr.dtype.kind == "O":
        pass
    elif arr.dtype not in _DATATYPE_OF:
        raise Caffe2Error("cannot feed values of dtype %s; Caffe2 blobs hold %s"
                          % (arr.dtype, ", ".join(sorted(str(d) for d in _DATATYPE_OF))))
    # ascontiguousarray would turn 0-d scalars into 1-d arrays
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def _as_bytes(s):
    return s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s


def fetched_value(value):
    """What FetchBlob hands back for a host value, as Caffe2's Python 3 binding does:
    a string tensor is an object array of `bytes` (std::string has no encoding; str
    elements are given back UTF-8 encoded), and a string blob (FeedBlob of one str or
    bytes, kept as a 0-d object array) is one `bytes`. Other values are unchanged."""
    if isinstance(value, (str, bytes)):
        return _as_bytes(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "OSU":
        return value
    if value.ndim == 0 and isinstance(value.item(), (str, bytes)):
        return _as_bytes(value.item())
    if value.dtype.kind == "O" and not any(isinstance(v, str) for v in value.flat):
        return value
    out = np.empty(value.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(value.flat):
        flat[i] = _as_bytes(v) if isinstance(v, (str, bytes)) else v
    return out


def tensor_to_numpy(t):
    """Decode a TensorProto (any storage field Caffe2 writes) into an ndarray."""
    dims = tuple(int(d) for d in t.dims)
    dtype = numpy_dtype(t.data_type)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if t.HasField("raw_data") and t.data_type != DT.STRING:
        flat = np.frombuffer(t.raw_data, dtype=dtype.newbyteorder("<")).astype(dtype)
    elif t.data_type == DT.FLOAT:
        flat = np.asarray(t.float_data, dtype=np.float32)
    elif t.data_type == DT.DOUBLE:
        flat = np.asarray(t.double_data, dtype=np.float64)
    elif t.data_type == DT.INT64:
        flat = np.asarray(t.int64_data, dtype=np.int64)
    elif t.data_type == DT.STRING:
        flat = np.empty(len(t.string_data), dtype=object)
        flat[:] = list(t.string_data)
    elif t.data_type == DT.FLOAT16:
        flat = np.asarray(t.int32_data, dtype=np.uint16).view(np.float16)
    elif t.data_type == DT.BYTE and t.byte_data:
        flat = np.frombuffer(t.byte_data, dtype=np.uint8)
    else:  # int32 and the narrow integer types and bool share int32_data
        flat = np.asarray(t.int32_data, dtype=np.int64).astype(dtype)
    if flat.size != count:
        raise Caffe2Error("tensor '%s' declares dims %s (%d elements) but holds %d values"
                          % (t.name, list(dims), count, flat.size))
    return flat.reshape(dims).copy()


def numpy_to_tensor(arr, name=None):
    """Encode an ndarray into a TensorProto the way Caffe2's serializer lays it out."""
    arr = np.asarray(arr)
    if arr.dtype.kind in "SU":
        arr = arr.astype(object)
    t = caffe2_pb2.TensorProto()
    if name is not None:
        t.name = name
    t.dims.extend(arr.shape)
    t.data_type = data_type_of(arr.dtype)
    flat = arr.reshape(-1)
    if t.data_type == DT.FLOAT:
        t.float_data.extend(flat.tolist())
    elif t.data_type == DT.DOUBLE:
        t.double_data.extend(flat.tolist())
    elif t.data_type == DT.INT64:
        t.int64_data.extend(flat.tolist())
    elif t.data_type == DT.STRING:
        t.string_data.extend(s.encode() if isinstance(s, str) else bytes(s) for s in flat)
    elif t.data_type == DT.FLOAT16:
        t.int32_data.extend(flat.view(np.uint16).tolist())
    else:
        t.int32_data.extend(flat.astype(np.int64).tolist())
    return t
