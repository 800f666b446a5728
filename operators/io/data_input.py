"""Data readers: CreateDB + TensorProtosDBInput (records of serialized TensorProtos
read through a shared DBReader) and CreateTextFileReader + TextFileReaderRead
(tab-separated text files). ImageInput is in image_input.py."""
import numpy as np

from caffe2py import db as dbs
from caffe2py.kernels.cpu.io import text as T
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import FileName
from caffe2py.serialization import SerializationError, chunk_values, register_deserializer, register_serializer

DT = caffe2_pb2.TensorProto


def _unknown(ctx, ins):
    return [UNKNOWN] * ctx.n_outputs


# ----------------------------------------------------------------- CreateDB

register_schema(OpSchema(
    "CreateDB", num_inputs=0, num_outputs=1,
    args=(Arg("db_type", "string", "leveldb", doc="the db type (Caffe2's default: leveldb)"),
          Arg("db", "string", "", check=FileName(), required=True, doc="path of the db"),
          Arg("num_shards", "int", 1), Arg("shard_id", "int", 0)),
    inference=_unknown,
    doc="A DBReader over the db: a shared cursor that Load and TensorProtosDBInput read "
        "from, starting over at the end. With num_shards it reads every num_shards-th record "
        "from shard_id on."))


@register_kernel("CreateDB")
def create_db(ctx):
    db_type, path = ctx.string("db_type", "leveldb"), ctx.string("db", "")
    shards, shard = ctx.int("num_shards", 1), ctx.int("shard_id", 0)
    if not path:
        raise ctx.error("must specify a db name (argument `db`)")
    if shards < 1 or not 0 <= shard < shards:
        raise ctx.error("need num_shards >= 1 and 0 <= shard_id < num_shards, got %d and %d" % (shards, shard))
    try:
        dbs.check_db_type(db_type)
    except dbs.DBError as exc:
        raise ctx.error(str(exc)) from None

    def run():
        try:
            return dbs.DBReader(db_type, path, shards, shard)
        except dbs.DBError as exc:
            raise type(exc)("%s: %s" % (ctx.label, exc)) from exc
    return run


# ----------------------------------------------------------------- TensorProtosDBInput

register_schema(OpSchema(
    "TensorProtosDBInput", num_inputs=1, num_outputs=(1, None),
    args=(Arg("batch_size", "int", 0, doc="records per batch; 0 outputs one record's tensors as they are"),),
    inference=_unknown,
    doc="Read records whose values are serialized TensorProtos (one tensor per output) from a "
        "DBReader; batch_size > 0 stacks that many records along a new first dimension."))


def _record_tensors(ctx, key, value):
    try:
        protos = caffe2_pb2.TensorProtos.FromString(value)
    except Exception:  # noqa: BLE001
        raise ctx.error("record %r is not a serialized TensorProtos" % key[:64]) from None
    if len(protos.protos) != ctx.n_outputs:
        raise ctx.error("record %r holds %d tensors; the op has %d outputs"
                        % (key[:64], len(protos.protos), ctx.n_outputs))
    out = []
    for i, t in enumerate(protos.protos):
        try:
            dims, _, begin, end, flat = chunk_values(t, ctx.outputs[i])
        except SerializationError as exc:
            raise ctx.error("record %r: %s" % (key[:64], exc)) from None
        if end - begin != (int(np.prod(dims)) if dims else 1):
            raise ctx.error("record %r: tensor %d is a partial segment" % (key[:64], i))
        out.append(flat.reshape(dims))
    return out


@register_kernel("TensorProtosDBInput")
def tensor_protos_db_input(ctx):
    batch = ctx.int("batch_size", 0)
    if batch < 0:
        raise ctx.error("batch_size must be >= 0, got %d" % batch)

    def run(reader):
        if not isinstance(reader, dbs.DBReader):
            raise ctx.input_error(0, "must be a DBReader (from CreateDB), got %s" % type(reader).__name__)
        try:
            if batch == 0:
                outs = _record_tensors(ctx, *reader.read())
            else:
                rows = [_record_tensors(ctx, *reader.read()) for _ in range(batch)]
                outs = []
                for i in range(ctx.n_outputs):
                    first = rows[0][i]
                    for k, row in enumerate(rows):
                        if row[i].shape != first.shape or row[i].dtype != first.dtype:
                            raise ctx.error("tensor %d of item %d is %s %s; item 0's is %s %s"
                                            % (i, k, row[i].dtype, list(row[i].shape), first.dtype, list(first.shape)))
                    outs.append(np.stack([row[i] for row in rows]))
        except dbs.DBError as exc:
            raise type(exc)("%s: %s" % (ctx.label, exc)) from exc
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


# ----------------------------------------------------------------- text files

_TEXT_TYPES = {DT.STRING: (object, lambda token: token), DT.FLOAT: (np.float32, T.parse_float)}

register_schema(OpSchema(
    "CreateTextFileReader", num_inputs=0, num_outputs=1,
    args=(Arg("filename", "string", "", check=FileName(), required=True), Arg("num_passes", "int", 1),
          Arg("field_types", "ints", None, required=True, doc="TensorProto data types: STRING or FLOAT")),
    inference=_unknown,
    doc="A reader of a text file with one row per line and tab-separated fields."))


@register_kernel("CreateTextFileReader")
def create_text_file_reader(ctx):
    path = ctx.string("filename", "")
    types = list(ctx.ints("field_types") or [])
    passes = ctx.int("num_passes", 1)
    if not types:
        raise ctx.error("field_types must be non-empty")
    for t in types:
        if t not in _TEXT_TYPES:
            raise ctx.error("field type %s is not supported: text fields are STRING or FLOAT"
                            % (DT.DataType.Name(t) if t in DT.DataType.values() else t))

    def run():
        try:
            return T.TextFileReader(path, passes, types)
        except OSError as exc:
            raise ctx.error("error opening file for reading: %s (path %s)" % (exc.strerror or exc, path)) from exc
    return run


register_schema(OpSchema(
    "TextFileReaderRead", num_inputs=1, num_outputs=(1, None),
    args=(Arg("batch_size", "int", 1, doc="most rows to read"),),
    inference=_unknown,
    doc="Read up to batch_size rows: one 1-D output per field; empty outputs at the end."))


@register_kernel("TextFileReaderRead")
def text_file_reader_read(ctx):
    batch = ctx.int("batch_size", 1)
    if batch < 0:
        raise ctx.error("batch_size must be >= 0, got %d" % batch)

    def run(reader):
        if not isinstance(reader, T.TextFileReader):
            raise ctx.input_error(0, "must be a text file reader (from CreateTextFileReader), got %s"
                                  % type(reader).__name__)
        if len(reader.field_types) != ctx.n_outputs:
            raise ctx.error("invalid number of outputs: expected %d, got %d" % (len(reader.field_types), ctx.n_outputs))
        kinds = [_TEXT_TYPES[t] for t in reader.field_types]
        try:
            columns = reader.read(batch, [convert for _, convert in kinds])
        except T.TextFileError as exc:
            raise ctx.error(str(exc)) from None
        outs = [T.column(col, dtype) for col, (dtype, _) in zip(columns, kinds)]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run



# ----------------------------------------------------------------- DBReader (de)serialization

def _serialize_reader(reader, name):
    proto = caffe2_pb2.DBReaderProto(name=name, source=reader.source, db_type=reader.db_type)
    cursor = reader.cursor()
    with reader.lock:
        if cursor.supports_seek() and cursor.valid():
            proto.key = cursor.key()
    return caffe2_pb2.BlobProto(name=name, type="DBReader", content=proto.SerializeToString())


def _deserialize_reader(blob_proto):
    try:
        proto = caffe2_pb2.DBReaderProto.FromString(blob_proto.content)
    except Exception:  # noqa: BLE001
        raise SerializationError("blob '%s': cannot parse its content as a DBReaderProto" % blob_proto.name) from None
    reader = dbs.DBReader(proto.db_type, proto.source)
    if proto.HasField("key"):
        if not reader.cursor().supports_seek():
            raise SerializationError("blob '%s': the reader was saved at a key but db type '%s' cannot seek"
                                     % (blob_proto.name, proto.db_type))
        reader.cursor().seek(proto.key)
    return reader


register_serializer(dbs.DBReader, _serialize_reader)
register_deserializer("DBReader", _deserialize_reader)
