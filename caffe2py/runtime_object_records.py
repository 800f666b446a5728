"""BlobProto forms of the runtime objects Caffe2 can Save and Load: counters, indexes,
maps and mutexes, laid out as Caffe2's own serializers write them so files move
between the two:

- Counter (CreateCounter): type "std::unique_ptr<Counter<int64_t>>", tensor {dims [1],
  INT64, int64_data [count], name}.
- Index (IntIndexCreate, ...): type "std::unique_ptr<caffe2::IndexBase>", tensor = the
  keys in id order as TensorSerializer writes a whole tensor (segment, dims, device,
  no name), content "<max_elements> <frozen 0/1>".
- Map (CreateMap, KeyValueToMap): type "(std::unordered_map<K, V>)" with K, V int32_t or
  int64_t (the parentheses are Caffe2's), content = a TensorProtos {keys, values}.
- Mutex (CreateMutex): type "std::unique_ptr<std::mutex>", empty content; loading makes
  a new unlocked mutex.
"""
import numpy as np

from .proto import caffe2_pb2
from .runtime_objects import Counter, Index, Mutex, TypedMap
from .serialization import (SerializationError, chunk_values, register_deserializer, register_serializer,
                            tensor_chunk)

DT = caffe2_pb2.TensorProto
COUNTER_BLOB_TYPE = "std::unique_ptr<Counter<int64_t>>"
INDEX_BLOB_TYPE = "std::unique_ptr<caffe2::IndexBase>"
MUTEX_BLOB_TYPE = "std::unique_ptr<std::mutex>"
_C_TYPE = {np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}
_INDEX_DTYPE = {"int32": np.int32, "int64": np.int64, "string": object}
_INT64_MAX = np.iinfo(np.int64).max


def map_blob_type(key_dtype, value_dtype):
    return "(std::unordered_map<%s, %s>)" % (_C_TYPE[np.dtype(key_dtype)], _C_TYPE[np.dtype(value_dtype)])


def _whole_tensor(array, name):
    """A TensorProto as Caffe2's TensorSerializer writes a whole tensor for another
    serializer (the caller names the blob, not the tensor)."""
    t = tensor_chunk(array, name, 0, array.size)
    t.ClearField("name")
    return t


def _whole_values(t, name, what):
    dims, _, begin, end, flat = chunk_values(t, name)
    if end - begin != int(np.prod(dims, dtype=np.int64)):
        raise SerializationError("%s '%s': the tensor is split over several records" % (what, name))
    return flat


# ----------------------------------------------------------------- Counter

def _serialize_counter(counter, name):
    proto = caffe2_pb2.BlobProto(name=name, type=COUNTER_BLOB_TYPE)
    proto.tensor.name = name
    proto.tensor.data_type = DT.INT64
    proto.tensor.dims.append(1)
    proto.tensor.int64_data.append(counter.retrieve())
    return proto


def _deserialize_counter(proto):
    t = proto.tensor
    if list(t.dims) != [1] or t.data_type != DT.INT64 or len(t.int64_data) != 1:
        raise SerializationError("counter '%s': expected one int64 value of dims [1], got %s %s with %d "
                                 "int64 values" % (proto.name, DT.DataType.Name(t.data_type)
                                                   if t.data_type in DT.DataType.values() else t.data_type,
                                                   list(t.dims), len(t.int64_data)))
    return Counter(t.int64_data[0])


# ----------------------------------------------------------------- Index

def _serialize_index(index, name):
    keys = index.keys()
    array = np.empty(len(keys), _INDEX_DTYPE[index.key_kind])
    array[:] = keys
    proto = caffe2_pb2.BlobProto(name=name, type=INDEX_BLOB_TYPE)
    proto.tensor.CopyFrom(_whole_tensor(array, name))
    proto.content = ("%d %d" % (index.max_elements, int(index.frozen))).encode()
    return proto


def _index_settings(proto):
    """(max_elements, frozen) from the content, read as Caffe2's istream does: a
    missing field keeps its default (int64 max, not frozen)."""
    fields = proto.content.split()
    try:
        max_elements = int(fields[0]) if fields else _INT64_MAX
        frozen = bool(int(fields[1])) if len(fields) > 1 else False
    except ValueError:
        raise SerializationError("index '%s': content %r is not '<max_elements> <frozen>'"
                                 % (proto.name, bytes(proto.content))) from None
    return max_elements, frozen


def _deserialize_index(proto):
    kinds = {DT.INT32: "int32", DT.INT64: "int64", DT.STRING: "string"}
    kind = kinds.get(proto.tensor.data_type) if proto.HasField("tensor") else None
    if kind is None:
        raise SerializationError("index '%s': the keys must be an int32, int64 or string tensor" % proto.name)
    keys = _whole_values(proto.tensor, proto.name, "index")
    max_elements, frozen = _index_settings(proto)
    index = Index(kind, max_elements)
    try:
        index.load(keys.tolist())
    except ValueError as exc:
        raise SerializationError("index '%s': %s" % (proto.name, exc)) from None
    index.frozen = frozen
    return index


# ----------------------------------------------------------------- Map

def _serialize_map(mapping, name):
    if np.dtype(mapping.key_dtype) not in _C_TYPE or np.dtype(mapping.value_dtype) not in _C_TYPE:
        raise SerializationError("map '%s': only int32 / int64 keys and values serialize, got %s -> %s"
                                 % (name, np.dtype(mapping.key_dtype), np.dtype(mapping.value_dtype)))
    keys = np.array(list(mapping.keys()), mapping.key_dtype).reshape(-1)
    values = np.array(list(mapping.values()), mapping.value_dtype).reshape(-1)
    protos = caffe2_pb2.TensorProtos()
    protos.protos.add().CopyFrom(_whole_tensor(keys, name))
    protos.protos.add().CopyFrom(_whole_tensor(values, name))
    return caffe2_pb2.BlobProto(name=name, type=map_blob_type(mapping.key_dtype, mapping.value_dtype),
                                content=protos.SerializeToString())


def _map_deserializer(key_dtype, value_dtype):
    def deserialize(proto):
        protos = caffe2_pb2.TensorProtos()
        try:
            protos.ParseFromString(proto.content)
        except Exception:  # noqa: BLE001 - any parse failure is the same error
            raise SerializationError("map '%s': the content is not a TensorProtos" % proto.name) from None
        if len(protos.protos) != 2:
            raise SerializationError("map '%s': expected keys and values, got %d tensors"
                                     % (proto.name, len(protos.protos)))
        keys, values = (_whole_values(t, proto.name, "map") for t in protos.protos)
        for what, array, dtype in (("keys", keys, key_dtype), ("values", values, value_dtype)):
            if array.dtype != np.dtype(dtype):
                raise SerializationError("map '%s': %s are %s, the type says %s"
                                         % (proto.name, what, array.dtype, np.dtype(dtype)))
        if keys.size != values.size:
            raise SerializationError("map '%s': %d keys but %d values" % (proto.name, keys.size, values.size))
        mapping = TypedMap(key_dtype, value_dtype)
        for k, v in zip(keys.tolist(), values.tolist()):
            mapping.setdefault(k, v)        # Caffe2 emplaces: the first of repeated keys stays
        return mapping
    return deserialize


# ----------------------------------------------------------------- Mutex

def _serialize_mutex(_mutex, name):
    return caffe2_pb2.BlobProto(name=name, type=MUTEX_BLOB_TYPE, content=b"")


register_serializer(Counter, _serialize_counter)
register_deserializer(COUNTER_BLOB_TYPE, _deserialize_counter)
register_serializer(Index, _serialize_index)
register_deserializer(INDEX_BLOB_TYPE, _deserialize_index)
register_serializer(TypedMap, _serialize_map)
for _key in (np.int32, np.int64):
    for _value in (np.int32, np.int64):
        register_deserializer(map_blob_type(_key, _value), _map_deserializer(_key, _value))
register_serializer(Mutex, _serialize_mutex)
register_deserializer(MUTEX_BLOB_TYPE, lambda proto: Mutex())
