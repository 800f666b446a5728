"""Tensor records of Save/Load written and read without protobuf's per-element Python API.

protobuf's Python API appends repeated numbers one at a time (about 0.6 s per million
floats) and hands them back as a container that NumPy copies again. A tensor chunk's
values sit in one packed field, so:

- chunk_record() writes a chunk's BlobProto with the packed field taken straight
  from the array's bytes (floats and doubles) or from a compiled varint encoder
  (integer types). The other fields are serialized by protobuf itself, and all
  fields go out in field-number order, as protobuf writes them: the bytes are the
  same as protobuf's (tests compare them for every dtype).
- parse_chunk() reads a float or double chunk record by walking the protobuf wire
  format and viewing the packed field with np.frombuffer. Anything it does not
  expect (another layout, another type, an unknown field) returns None and the
  caller parses the record with protobuf.

Wire format: each field is a varint key (field number << 3 | wire type) and a payload;
wire type 0 is a varint, 1 eight bytes, 2 a varint length then that many bytes, 5
four bytes. Field numbers: BlobProto name 1, type 2, tensor 3; TensorProto dims 1,
data_type 2, float_data 3, int32_data 4, double_data 9, int64_data 10, name 7,
device_detail 8, segment 11 (begin 1, end 2), data_format 15.
"""
import numpy as np

from .proto import caffe2_pb2

DT = caffe2_pb2.TensorProto
CPU = caffe2_pb2.PROTO_CPU
_PACKED_FIELD = {DT.FLOAT: 3, DT.INT32: 4, DT.FLOAT16: 4, DT.BOOL: 4, DT.UINT8: 4, DT.INT8: 4,
                 DT.UINT16: 4, DT.INT16: 4, DT.DOUBLE: 9, DT.INT64: 10}
_DATA_TYPE_OF = {np.dtype(np.float32): DT.FLOAT, np.dtype(np.float64): DT.DOUBLE, np.dtype(np.int32): DT.INT32,
                 np.dtype(np.int64): DT.INT64, np.dtype(np.float16): DT.FLOAT16, np.dtype(np.bool_): DT.BOOL,
                 np.dtype(np.uint8): DT.UINT8, np.dtype(np.int8): DT.INT8, np.dtype(np.uint16): DT.UINT16,
                 np.dtype(np.int16): DT.INT16}
_FAST_READ = {DT.FLOAT: (3, np.dtype("<f4"), np.float32), DT.DOUBLE: (9, np.dtype("<f8"), np.float64)}


class Record:
    """A serialized record kept as byte buffers written one after another, so a large
    tensor's bytes are not copied into one string; bytes(record) joins them."""
    __slots__ = ("pieces",)

    def __init__(self, pieces):
        self.pieces = list(pieces)

    def __len__(self):
        return sum(len(p) for p in self.pieces)

    def __bytes__(self):
        return b"".join(self.pieces)

    def __eq__(self, other):
        return bytes(self) == bytes(other)

    __hash__ = None


def varint_bytes(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _varints(values):
    from .kernels.cpu.io import varint
    return varint.encode(values)


def chunk_record(array, name, begin, end, device_option=None):
    """The Record of elements [begin, end) of `array` as a BlobProto chunk, or None for
    types without a packed field (strings)."""
    data_type = _DATA_TYPE_OF.get(array.dtype)
    if data_type is None:
        return None
    field = _PACKED_FIELD[data_type]
    flat = array.reshape(-1)[begin:end]
    if data_type == DT.FLOAT:
        payload = memoryview(np.ascontiguousarray(flat, dtype="<f4")).cast("B")     # no copy on x86
    elif data_type == DT.DOUBLE:
        payload = memoryview(np.ascontiguousarray(flat, dtype="<f8")).cast("B")
    elif data_type == DT.FLOAT16:
        payload = _varints(flat.view(np.uint16))
    else:
        payload = _varints(flat)
    head = caffe2_pb2.TensorProto(dims=array.shape, data_type=data_type)
    parts = [(1, head.SerializeToString()), (7, caffe2_pb2.TensorProto(name=name).SerializeToString())]
    detail = caffe2_pb2.TensorProto()
    if device_option is None:
        detail.device_detail.device_type = CPU
    else:
        detail.device_detail.CopyFrom(device_option)
    parts.append((8, detail.SerializeToString()))
    seg = caffe2_pb2.TensorProto()
    seg.segment.begin, seg.segment.end = begin, end
    parts.append((11, seg.SerializeToString()))
    if data_type == DT.FLOAT:                   # late Caffe2 sets data_format on float tensors
        fmt = caffe2_pb2.TensorProto()
        fmt.data_format = DT.FMT_PROTOBUF
        parts.append((15, fmt.SerializeToString()))
    if len(payload):
        parts.append((field, varint_bytes(field << 3 | 2) + varint_bytes(len(payload))))
        parts.append((field, payload))
    pieces = [data for _, data in sorted(parts, key=lambda p: p[0])]     # stable: length before payload
    size = sum(len(p) for p in pieces)
    head = (caffe2_pb2.BlobProto(name=name, type="Tensor").SerializeToString()
            + varint_bytes(3 << 3 | 2) + varint_bytes(size))
    return Record([head] + pieces)


# ----------------------------------------------------------------- reading

class _Unexpected(Exception):
    """The record is not in the layout the fast reader handles."""


def _varint(buf, pos, end):
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unexpected
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, pos, end):
    """(field number, wire type, varint value or (start, stop) of the payload)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise _Unexpected
            yield field, wire, (pos, pos + n)
            pos += n
        else:
            raise _Unexpected
    if pos != end:
        raise _Unexpected


def parse_chunk(data):
    """For a float/double Tensor record: (dims, data_type, DeviceOption, segment or None,
    values (a read-only view of `data`), name); None for any other record."""
    buf = memoryview(data)
    try:
        tensor = None
        blob_type = None
        for field, wire, value in _fields(buf, 0, len(buf)):
            if field == 2 and wire == 2:
                blob_type = bytes(buf[value[0]:value[1]])
            elif field == 3 and wire == 2 and tensor is None:
                tensor = value
            elif field != 1 or wire != 2:
                raise _Unexpected
        if blob_type != b"Tensor" or tensor is None:
            return None
        dims, data_type, device, segment, values, name, fmt = [], None, None, None, None, "", 0
        for field, wire, value in _fields(buf, *tensor):
            if field == 1 and wire == 0:
                dims.append(value - (1 << 64) if value >= 1 << 63 else value)
            elif field == 2 and wire == 0:
                data_type = value
            elif field == 7 and wire == 2:
                name = bytes(buf[value[0]:value[1]]).decode("utf-8", "replace")
            elif field == 8 and wire == 2:
                device = caffe2_pb2.DeviceOption.FromString(bytes(buf[value[0]:value[1]]))
            elif field == 11 and wire == 2:
                segment = caffe2_pb2.TensorProto.Segment.FromString(bytes(buf[value[0]:value[1]]))
            elif field == 15 and wire == 0:
                fmt = value
            elif wire == 2 and values is None and data_type in _FAST_READ and field == _FAST_READ[data_type][0]:
                values = value
            else:
                raise _Unexpected
        if data_type not in _FAST_READ or fmt != DT.FMT_PROTOBUF:
            return None
        _, wire_dtype, dtype = _FAST_READ[data_type]
        if values is None:
            flat = np.zeros(0, dtype=dtype)
        else:
            if (values[1] - values[0]) % wire_dtype.itemsize:
                raise _Unexpected
            # a read-only view of the record: the caller copies it once, into the blob
            flat = np.frombuffer(data, dtype=wire_dtype, count=(values[1] - values[0]) // wire_dtype.itemsize,
                                 offset=values[0]).astype(dtype, copy=False)
        if device is None:
            device = caffe2_pb2.DeviceOption()
        return dims, data_type, device, segment, flat, name
    except (_Unexpected, Exception):  # noqa: BLE001 - any surprise: the protobuf path decides
        return None
