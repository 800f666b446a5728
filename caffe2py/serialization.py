"""Blobs <-> Caffe2's BlobProto, as Save/Load and SerializeBlob lay them out.

A tensor blob is written as one or more records, one per chunk of at most
`chunk_size` elements (1,000,000 by default, Caffe2's caffe2_tensor_chunk_size),
keyed "<name>#%<chunk index>". Each record is a BlobProto {name, type "Tensor",
tensor} whose TensorProto carries the whole tensor's dims and data type, the
chunk's [begin, end) element range as `segment`, its device as `device_detail` and
the chunk's values in the typed field Caffe2 uses: float_data, int32_data (int32
and, widened, bool/uint8/int8/uint16/int16 and float16 bit patterns), int64_data,
double_data, string_data. Float tensors also carry data_format = FMT_PROTOBUF, as
late Caffe2 writes it (or FMT_BFLOAT16 with bfloat16 values in raw_data when
asked for). A string blob (`bytes`, or what FeedBlob makes of one: a 0-d object
array) is one record {type "std::string", content}. Other blob types serialize
through serializers their modules register (the dataset cursor, DBReader).

Reading accepts every layout Caffe2 wrote over the years (byte_data for the narrow
types, records without segments, the legacy BYTE type) and checks sizes before
copying. BlobAssembler puts chunked tensors back together with Caffe2's Load
checks (no chunk twice, no chunk past the end, every element present).
"""
import math

import numpy as np

from . import devices, tensor_records
from .errors import Caffe2Error, SerializationError  # noqa: F401  (SerializationError re-exported)
from .proto import caffe2_pb2
from .registry import CPU
from .tensors import data_type_name, data_type_of

DT = caffe2_pb2.TensorProto
CHUNK_ID_SEPARATOR = "#%"
TENSOR_BLOB_TYPE = "Tensor"
STRING_BLOB_TYPE = "std::string"
DEFAULT_CHUNK_SIZE = 1000000          # Caffe2's caffe2_tensor_chunk_size flag
# BlobSerializationOptions.chunk_size: 0 means the default size, -1 no chunking.
OPTION_DEFAULT_CHUNK, OPTION_NO_CHUNKING = 0, -1
# Caffe2 writes FLOAT_BFLOAT16 only when built with FBGEMM (a build without it writes
# plain floats); caffe2py converts as FBGEMM does, so it answers as an FBGEMM build
# (workspace.has_fbgemm, EstimateAllBlobSizes' 2 bytes per float).
WRITES_BFLOAT16 = True

_NARROW = {DT.BOOL: np.bool_, DT.UINT8: np.uint8, DT.INT8: np.int8, DT.UINT16: np.uint16,
           DT.INT16: np.int16}


# ----------------------------------------------------------------- registries

_serializers = []       # (python class, fn(value, name) -> BlobProto)
_deserializers = {}     # BlobProto.type -> fn(blob_proto) -> value


def register_serializer(cls, fn):
    """fn(value, name) -> BlobProto for blobs holding instances of cls (one record)."""
    _serializers.append((cls, fn))


def register_deserializer(blob_type, fn):
    """fn(blob_proto) -> blob value for BlobProtos of this `type`."""
    _deserializers[blob_type] = fn


def _is_string_scalar(value):
    return (isinstance(value, (bytes, str)) or
            (isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype == object
             and isinstance(value.item(), (bytes, str))))


def _as_bytes(s):
    return s.encode() if isinstance(s, str) else bytes(s)


# ----------------------------------------------------------------- writing

def _host_and_device(value, name):
    """(host ndarray, DeviceOption) of a tensor blob wherever it lives."""
    place = devices.placement_of(value)
    option = caffe2_pb2.DeviceOption()
    if place is None or place[0] == CPU:
        if isinstance(value, np.generic):   # a NumPy scalar an op returned: a 0-d tensor
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            raise SerializationError("blob '%s' holds a %s, which has no serializer"
                                     % (name, type(value).__name__))
        option.device_type = CPU
        return value, option
    option.device_type = place[0]
    option.device_id = place[1]
    return devices.to_host(value), option


def _bfloat16_bits(flat):
    """float32 -> bfloat16 bit patterns, rounding as fbgemm's converter does (add half
    an ulp of bfloat16 to the float32 bits, then truncate)."""
    bits = np.ascontiguousarray(flat, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + (1 << 15)) >> 16).astype(np.uint16)


def _fill_values(t, flat, data_type, name, float_format):
    if data_type == DT.FLOAT:
        if WRITES_BFLOAT16 and float_format == caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16:
            t.data_format = DT.FMT_BFLOAT16
            t.raw_data = _bfloat16_bits(flat).astype("<u2").tobytes()
        else:
            t.data_format = DT.FMT_PROTOBUF
            t.float_data.extend(flat.tolist())
    elif data_type == DT.INT32:
        t.int32_data.extend(flat.tolist())
    elif data_type == DT.INT64:
        t.int64_data.extend(flat.tolist())
    elif data_type == DT.DOUBLE:
        t.double_data.extend(flat.tolist())
    elif data_type == DT.FLOAT16:
        t.int32_data.extend(flat.view(np.uint16).tolist())
    elif data_type in _NARROW:
        t.int32_data.extend(flat.astype(np.int32).tolist())
    elif data_type == DT.STRING:
        for i, s in enumerate(flat):
            if not isinstance(s, (bytes, str)):
                raise SerializationError("blob '%s': string tensors hold bytes or str; element %d is a %s"
                                         % (name, i, type(s).__name__))
            t.string_data.append(_as_bytes(s))
    else:  # pragma: no cover - data_type_of only returns the types above
        raise SerializationError("blob '%s': cannot serialize data type %s" % (name, data_type_name(data_type)))


def tensor_chunk(array, name, begin, end, device_option=None, float_format=0):
    """The TensorProto of elements [begin, end) of `array`, as Caffe2 writes one chunk."""
    data_type = data_type_of(array.dtype)
    t = caffe2_pb2.TensorProto()
    t.segment.begin = begin
    t.segment.end = end
    t.dims.extend(array.shape)
    if device_option is None:
        t.device_detail.device_type = CPU
    else:
        t.device_detail.CopyFrom(device_option)
    t.data_type = data_type
    t.name = name
    _fill_values(t, array.reshape(-1)[begin:end], data_type, name, float_format)
    return t


def _chunk_length(option_chunk_size, numel):
    if option_chunk_size == OPTION_NO_CHUNKING:
        return numel + 1            # one chunk, empty tensors included
    if option_chunk_size == OPTION_DEFAULT_CHUNK:
        return DEFAULT_CHUNK_SIZE
    if option_chunk_size < 0:
        raise SerializationError("chunk_size must be positive, 0 (default) or -1 (no chunking), got %d"
                                 % option_chunk_size)
    return option_chunk_size


# Caffe2's type of PackRecords' elements (a shared vector of tensors). Caffe2 writes a
# tensor of them as an UNDEFINED-type tensor whose string_data are per-element blobs
# of this type with no content, and reads them back as null records: the packed
# data is not saved (ReservoirSampling and LastNWindowCollector then start over).
PACKED_RECORDS_TYPE = "std::shared_ptr<std::vector<TensorCPU>>"


def _is_packed_records(value):
    return (isinstance(value, np.ndarray) and value.dtype == object and value.size > 0
            and all(v is None or isinstance(v, (list, tuple)) for v in value.reshape(-1)))


def _packed_records_proto(array, name):
    t = caffe2_pb2.TensorProto(name=name, data_type=DT.UNDEFINED)
    t.dims.extend(array.shape)
    t.segment.begin, t.segment.end = 0, int(array.size)
    t.device_detail.device_type = CPU
    element = caffe2_pb2.BlobProto(type=PACKED_RECORDS_TYPE, content=b"").SerializeToString()
    t.string_data.extend([element] * int(array.size))
    proto = caffe2_pb2.BlobProto(name=name, type=TENSOR_BLOB_TYPE)
    proto.tensor.CopyFrom(t)
    return proto


def _null_packed_records(t, name, numel):
    """The elements of an UNDEFINED-type tensor of packed records: None each."""
    _check_len(name, "string_data", len(t.string_data), numel)
    for data in t.string_data:
        try:
            element_type = caffe2_pb2.BlobProto.FromString(bytes(data)).type
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
            element_type = None
        if element_type != PACKED_RECORDS_TYPE:
            raise SerializationError("blob '%s': tensors of UNDEFINED data type hold only packed records "
                                     "(%s) here, got an element of type %r" % (name, PACKED_RECORDS_TYPE,
                                                                                element_type))
    return np.full(numel, None, dtype=object)


def serialize_blob(value, name, chunk_size=OPTION_DEFAULT_CHUNK, float_format=0):
    """[(db key, serialized BlobProto: bytes or a Record)] for one blob. chunk_size uses
    BlobSerializationOptions' meaning: 0 default size, -1 one chunk, n > 0 elements."""
    if _is_packed_records(value):
        return [(name, _packed_records_proto(value, name).SerializeToString())]
    if _is_string_scalar(value):
        s = value.item() if isinstance(value, np.ndarray) else value
        proto = caffe2_pb2.BlobProto(name=name, type=STRING_BLOB_TYPE, content=_as_bytes(s))
        return [(name, proto.SerializeToString())]
    for cls, fn in _serializers:
        if isinstance(value, cls):
            return [(name, fn(value, name).SerializeToString())]
    array, option = _host_and_device(value, name)
    try:
        data_type_of(array.dtype)
    except Caffe2Error:
        raise SerializationError("blob '%s': numpy dtype %s has no Caffe2 data type" % (name, array.dtype)) from None
    numel = int(array.size)
    step = _chunk_length(chunk_size, numel)
    records = []
    for begin in range(0, max(numel, 1), step):
        end = min(begin + step, numel)
        record = None
        if float_format != caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16:
            record = tensor_records.chunk_record(array, name, begin, end, option)
        if record is None:      # types without a packed field (strings), bfloat16
            proto = caffe2_pb2.BlobProto(name=name, type=TENSOR_BLOB_TYPE)
            proto.tensor.CopyFrom(tensor_chunk(array, name, begin, end, option, float_format))
            record = proto.SerializeToString()
        records.append(("%s%s%d" % (name, CHUNK_ID_SEPARATOR, begin // step), record))
    return records


def serialize_blob_proto(value, name):
    """One unchunked BlobProto (workspace.SerializeBlob)."""
    (_, data), = serialize_blob(value, name, chunk_size=OPTION_NO_CHUNKING)
    return caffe2_pb2.BlobProto.FromString(bytes(data))


# ----------------------------------------------------------------- reading

def _check_len(name, field, have, want):
    if have != want:
        raise SerializationError("blob '%s': %s holds %d values where the segment needs %d"
                                 % (name, field, have, want))


def _narrow_values(t, name, count, dtype):
    if t.HasField("byte_data"):
        itemsize = np.dtype(dtype).itemsize
        _check_len(name, "byte_data", len(t.byte_data), itemsize * count)
        return np.frombuffer(t.byte_data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    _check_len(name, "int32_data", len(t.int32_data), count)
    return np.asarray(t.int32_data, dtype=np.int64).astype(dtype)


def _raw_or(t, name, field, values, dtype, count):
    """Typed field values; a TensorProto that uses raw_data instead is accepted too."""
    if len(values) == 0 and count and t.HasField("raw_data"):
        _check_len(name, "raw_data bytes", len(t.raw_data), count * np.dtype(dtype).itemsize)
        return np.frombuffer(t.raw_data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    _check_len(name, field, len(values), count)
    return np.asarray(values, dtype=dtype)


def chunk_values(t, name):
    """(dims, numpy dtype, begin, end, flat values of the segment) of a TensorProto."""
    if not t.HasField("data_type"):
        raise SerializationError("blob '%s': cannot deserialize a tensor without a (known) data type" % name)
    data_type = t.data_type
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise SerializationError("blob '%s': negative dimension in %s" % (name, list(dims)))
    numel = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if data_type == DT.UNDEFINED:
        if numel == 0:      # Caffe2's legacy empty tensor of no dtype: float [0]
            return (0,), np.dtype(np.float32), 0, 0, np.zeros(0, np.float32)
        return dims, np.dtype(object), 0, numel, _null_packed_records(t, name, numel)
    if t.HasField("segment"):
        begin, end = int(t.segment.begin), int(t.segment.end)
    else:
        begin, end = 0, numel
    if not 0 <= begin <= end <= numel:
        raise SerializationError("blob '%s': invalid chunk [%d, %d) of a tensor with %d elements"
                                 % (name, begin, end, numel))
    count = end - begin
    fmt = t.data_format if t.HasField("data_format") else DT.FMT_PROTOBUF
    if fmt == DT.FMT_BFLOAT16:
        if data_type != DT.FLOAT:
            raise SerializationError("blob '%s': bfloat16 format is only defined for float tensors" % name)
        _check_len(name, "raw_data bytes", len(t.raw_data), 2 * count)
        bits = np.frombuffer(t.raw_data, dtype="<u2").astype(np.uint32) << 16
        return dims, np.dtype(np.float32), begin, end, bits.view(np.float32)
    if fmt != DT.FMT_PROTOBUF:
        raise SerializationError("blob '%s': unsupported serialization format %d" % (name, fmt))
    if data_type == DT.FLOAT:
        flat = _raw_or(t, name, "float_data", t.float_data, np.float32, count)
    elif data_type == DT.INT32:
        flat = _raw_or(t, name, "int32_data", t.int32_data, np.int32, count)
    elif data_type == DT.INT64:
        flat = _raw_or(t, name, "int64_data", t.int64_data, np.int64, count)
    elif data_type == DT.DOUBLE:
        flat = _raw_or(t, name, "double_data", t.double_data, np.float64, count)
    elif data_type == DT.STRING:
        _check_len(name, "string_data", len(t.string_data), count)
        flat = np.empty(count, dtype=object)
        flat[:] = list(t.string_data)
    elif data_type == DT.FLOAT16:
        flat = _narrow_values(t, name, count, np.uint16).view(np.float16)
    elif data_type in _NARROW:
        flat = _narrow_values(t, name, count, _NARROW[data_type])
    elif data_type == DT.BYTE:      # legacy: raw bytes
        _check_len(name, "byte_data", len(t.byte_data), count)
        flat = np.frombuffer(t.byte_data, dtype=np.uint8).copy()
    else:
        raise SerializationError("blob '%s': cannot deserialize data type %s"
                                 % (name, data_type_name(data_type)))
    dtype = flat.dtype if data_type != DT.STRING else np.dtype(object)
    return dims, dtype, begin, end, flat


class _TensorState:
    """One tensor being put back together from its chunks."""

    def __init__(self, name, data_type, device, dims, dtype):
        self.name, self.dims, self.dtype = name, dims, dtype
        self.data_type = data_type
        self.device = caffe2_pb2.DeviceOption()
        self.device.CopyFrom(device)
        self.total = math.prod(dims)
        self.pieces = []        # (begin, end, values); put together by value()
        self.segments = []
        self._current = 0

    def add(self, data_type, dims, begin, end, flat):
        if dims != self.dims or data_type != self.data_type:
            raise SerializationError("blob '%s': chunk [%d, %d) is %s %s but an earlier chunk was %s %s"
                                     % (self.name, begin, end, data_type_name(data_type), list(dims),
                                        data_type_name(self.data_type), list(self.dims)))
        for b, e in self.segments:
            if begin < e and b < end or (begin == end == b == e):
                raise SerializationError("blob '%s': chunk [%d, %d) overlaps chunk [%d, %d) read before"
                                         % (self.name, begin, end, b, e))
        self.segments.append((begin, end))
        self.pieces.append((begin, end, flat))
        self._current += end - begin

    @property
    def current(self):
        return self._current


    def complete(self):
        return self.current == self.total

    def value(self):
        if len(self.pieces) == 1:          # one record held the whole tensor
            flat = self.pieces[0][2]
            # views of a record's bytes are copied once; arrays protobuf made are used as they are
            return (flat if flat.flags.writeable else np.array(flat)).reshape(self.dims)
        flat = np.empty(self.total, dtype=self.dtype)
        for begin, end, values in self.pieces:
            flat[begin:end] = values
        return flat.reshape(self.dims)


class BlobAssembler:
    """Collects the records of a Load and turns them into blob values, applying
    Caffe2's ProcessBlob/validateBlobStates checks."""

    def __init__(self):
        self._tensors = {}
        self._others = {}
        self._order = []
        self.complete_count = 0     # blobs read in full so far

    def __contains__(self, name):
        return name in self._tensors or name in self._others

    def add(self, name, blob_proto):
        """Add one record (a parsed BlobProto) for blob `name`."""
        if blob_proto.HasField("content_num_chunks"):
            raise SerializationError("blob '%s': chunked content of type '%s' is not supported"
                                     % (name, blob_proto.type))
        if blob_proto.type == TENSOR_BLOB_TYPE and not blob_proto.HasField("tensor"):
            raise SerializationError("blob '%s': its type is Tensor but the record has no tensor" % name)
        if not blob_proto.HasField("tensor") or blob_proto.type != TENSOR_BLOB_TYPE:
            if name in self:
                raise SerializationError("blob '%s' appears twice in the db" % name)
            self._others[name] = deserialize_blob(blob_proto, name)
            self._order.append(name)
            self.complete_count += 1
            return
        t = blob_proto.tensor
        dims, dtype, begin, end, flat = chunk_values(t, name)
        self._add_chunk(name, t.data_type, t.device_detail, dims, dtype, begin, end, flat, t.HasField("segment"))

    def add_record(self, name, data):
        """Add one serialized record; float and double tensor chunks skip protobuf's parser."""
        fast = tensor_records.parse_chunk(data)
        if fast is None:
            return self.add(name, parse_blob_proto(data, name))
        dims, data_type, device, segment, flat, _ = fast
        dims = tuple(dims)
        if any(d < 0 for d in dims):
            raise SerializationError("blob '%s': negative dimension in %s" % (name, list(dims)))
        numel = math.prod(dims)
        begin, end = (int(segment.begin), int(segment.end)) if segment is not None else (0, numel)
        if not 0 <= begin <= end <= numel:
            raise SerializationError("blob '%s': invalid chunk [%d, %d) of a tensor with %d elements"
                                     % (name, begin, end, numel))
        _check_len(name, "the packed values", flat.size, end - begin)
        self._add_chunk(name, data_type, device, dims, flat.dtype, begin, end, flat, segment is not None)

    def _add_chunk(self, name, data_type, device, dims, dtype, begin, end, flat, has_segment):
        if name in self._others:
            raise SerializationError("blob '%s' appears twice in the db" % name)
        state = self._tensors.get(name)
        if state is None:
            state = self._tensors[name] = _TensorState(name, data_type, device, dims, dtype)
            self._order.append(name)
        elif state.complete():
            raise SerializationError("blob '%s': found an extra part for an already complete tensor" % name)
        elif not has_segment:
            raise SerializationError("blob '%s': a partial tensor chunk must have a segment" % name)
        state.add(data_type, dims, begin, end, flat)
        if state.complete():
            self.complete_count += 1

    def validate(self):
        for name, state in self._tensors.items():
            if not state.complete():
                raise SerializationError("blob '%s': data size mismatch, expected %d elements, read %d"
                                         % (name, state.total, state.current))

    def names(self):
        return list(self._order)

    def value(self, name):
        if name in self._others:
            return self._others[name]
        return self._tensors[name].value()

    def device(self, name):
        """The DeviceOption a tensor was saved from (None for other blobs)."""
        state = self._tensors.get(name)
        return None if state is None else state.device


def deserialize_blob(blob_proto, name=None):
    """The value of one complete BlobProto (a whole tensor, a string, a registered type)."""
    name = name or blob_proto.name
    if blob_proto.type == TENSOR_BLOB_TYPE and not blob_proto.HasField("tensor"):
        raise SerializationError("blob '%s': its type is Tensor but the record has no tensor" % name)
    if blob_proto.type == TENSOR_BLOB_TYPE or (not blob_proto.type and blob_proto.HasField("tensor")):
        assembler = BlobAssembler()
        proto = blob_proto
        if blob_proto.type != TENSOR_BLOB_TYPE:
            proto = caffe2_pb2.BlobProto()
            proto.CopyFrom(blob_proto)
            proto.type = TENSOR_BLOB_TYPE
        assembler.add(name, proto)
        assembler.validate()
        return assembler.value(name)
    if blob_proto.type == STRING_BLOB_TYPE:
        return bytes(blob_proto.content)
    fn = _deserializers.get(blob_proto.type)
    if fn is None:
        raise SerializationError("blob '%s': no registered deserializer for type '%s'" % (name, blob_proto.type))
    return fn(blob_proto)


def parse_blob_proto(data, name):
    try:
        return caffe2_pb2.BlobProto.FromString(bytes(data))
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same error to the user
        raise SerializationError("record '%s' is not a serialized BlobProto: %s" % (name, exc)) from None


def blob_name_from_db_key(key, strip_prefix="", add_prefix=""):
    """Caffe2's buildBlobNameFromDbKey: drop the chunk id, then everything up to and
    including the first occurrence of strip_prefix, then prepend add_prefix."""
    if isinstance(key, bytes):
        key = key.decode("utf-8", errors="surrogateescape")
    sep = key.find(CHUNK_ID_SEPARATOR)
    if sep >= 0:
        key = key[:sep]
    if strip_prefix:
        at = key.find(strip_prefix)
        if at >= 0:
            key = key[at + len(strip_prefix):]
    return add_prefix + key


# Caffe2's Int8 tensors (int8_tensor.py) serialize as BlobProto type "Int8TensorCPU"
from . import int8_tensor as _int8  # noqa: E402 - registered after the registries exist

register_serializer(_int8.Int8TensorCPU, _int8.to_blob_proto)
register_deserializer(_int8.INT8_BLOB_TYPE, _int8.from_blob_proto)
