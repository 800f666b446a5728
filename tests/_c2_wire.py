"""Caffe2 db records written by hand from the formats' definitions, independent of
caffe2py's writer and of the generated protobuf classes.

Protobuf wire format: a field is a varint key (field_number << 3 | wire_type) then
its payload; wire type 0 is a varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed
32 bits. Packed repeated scalars are one length-delimited field. Negative int32 and
int64 varints are the 64-bit two's complement. Field numbers are those of Caffe2's
caffe2.proto: BlobProto {name 1, type 2, tensor 3, content 4}; TensorProto {dims 1
(unpacked), data_type 2, float_data 3 (packed), int32_data 4 (packed), byte_data 5,
string_data 6, name 7, device_detail 8, double_data 9 (packed), int64_data 10
(packed), segment 11 {begin 1, end 2}, raw_data 13, data_format 15}; DeviceOption
{device_type 1}. A serializer writes fields in field-number order, as both protobuf
runtimes do.

minidb: per record, int32 key length, int32 value length (little-endian), key, value.
"""
import struct

import numpy as np

FLOAT, INT32, BYTE, STRING, BOOL, UINT8, INT8, UINT16, INT16, INT64, FLOAT16, DOUBLE = \
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, v):
    return key(field, 0) + varint(int(v))


def f_bytes(field, data):
    data = data.encode() if isinstance(data, str) else bytes(data)
    return key(field, 2) + varint(len(data)) + data


def f_packed_varints(field, values):
    return f_bytes(field, b"".join(varint(int(v)) for v in values)) if len(values) else b""


def f_packed_floats(field, values):
    return f_bytes(field, struct.pack("<%df" % len(values), *values)) if len(values) else b""


def f_packed_doubles(field, values):
    return f_bytes(field, struct.pack("<%dd" % len(values), *values)) if len(values) else b""


def tensor(dims, data_type, payload, name, segment=None, device_type=0, data_format=None):
    """TensorProto bytes. payload: (field number, encoded field) of the data field(s)
    (3, 4, 5, 6, 9, 10 or 13); fields go out in field-number order."""
    fields = [(1, b"".join(f_varint(1, d) for d in dims)), (2, f_varint(2, data_type)), (7, f_bytes(7, name))]
    fields += [payload] if isinstance(payload, tuple) else list(payload)
    if device_type is not None:
        fields.append((8, f_bytes(8, f_varint(1, device_type))))
    if segment is not None:
        fields.append((11, f_bytes(11, f_varint(1, segment[0]) + f_varint(2, segment[1]))))
    if data_format is not None:
        fields.append((15, f_varint(15, data_format)))
    return b"".join(data for _, data in sorted(fields, key=lambda f: f[0]))


def blob(name, blob_type, tensor_bytes=None, content=None):
    out = f_bytes(1, name) + f_bytes(2, blob_type)
    if tensor_bytes is not None:
        out += f_bytes(3, tensor_bytes)
    if content is not None:
        out += f_bytes(4, content)
    return out


def float_chunk(name, array, begin, end, data_format=0):
    """A chunk of a float tensor exactly as late Caffe2's TensorSerializer writes it."""
    flat = np.asarray(array, dtype=np.float32).reshape(-1)[begin:end]
    return blob(name, "Tensor", tensor(np.shape(array), FLOAT, (3, f_packed_floats(3, flat.tolist())), name,
                                       segment=(begin, end), data_format=data_format))


def minidb(records):
    out = b""
    for k, v in records:
        k = k.encode() if isinstance(k, str) else k
        out += struct.pack("<ii", len(k), len(v)) + k + v
    return out
