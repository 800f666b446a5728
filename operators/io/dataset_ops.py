"""Caffe2's dataset ops: tree cursors over nested datasets (CreateTreeCursor,
ReadNextBatch, ReadRandomBatch, ComputeOffset, ResetCursor, GetCursorOffset),
dataset checks and transforms (CheckDatasetConsistency, TrimDataset, PackRecords,
UnPackRecords) and tensor vectors (CreateTensorVector, TensorVectorSize,
ConcatTensorVector, CollectTensor).

The dataset layout (fields named "b:lengths", "b:values", ...) is described in
kernels/cpu/io/dataset.py. A cursor is a blob holding a TreeCursor; reads through
it are atomic, so several threads can read one dataset. Save/Load serialize a
cursor as Caffe2 does (its offsets and field names), so a reader resumes where a
checkpoint left it.
"""
import numpy as np

from caffe2py.kernels.cpu.io import dataset as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.serialization import (SerializationError, chunk_values, register_deserializer,
                                    register_serializer, tensor_chunk)

DT = caffe2_pb2.TensorProto
CURSOR_BLOB_TYPE = "std::unique_ptr<TreeCursor>"
_FIELDS = Arg("fields", "strings", None, doc="the dataset's field names (see CreateTreeCursor)")


def _fields(ctx):
    return [f.decode() if isinstance(f, bytes) else f for f in (ctx.strings("fields") or [])]


def _iterator(ctx):
    try:
        return K.TreeIterator(_fields(ctx))
    except K.DatasetError as exc:
        raise ctx.error(str(exc)) from None


def _cursor(ctx, value, index=0):
    if not isinstance(value, K.TreeCursor):
        raise ctx.input_error(index, "must be a TreeCursor (made by CreateTreeCursor), got %s"
                              % type(value).__name__)
    return value


def _guard(ctx, fn, *args):
    try:
        return fn(*args)
    except K.DatasetError as exc:
        raise ctx.error(str(exc)) from None


def _n_fields(ctx, cursor, given):
    if given != len(cursor.it.fields):
        raise ctx.error("the cursor has %d fields (%s); the op got %d field blobs"
                        % (len(cursor.it.fields), ", ".join(cursor.it.fields), given))


def _unknown(ctx, ins):
    return [UNKNOWN] * ctx.n_outputs


# ----------------------------------------------------------------- cursors

register_schema(OpSchema(
    "CreateTreeCursor", num_inputs=0, num_outputs=1, args=(_FIELDS,), inference=_unknown,
    doc="A cursor over a dataset with the given fields: every 'prefix:lengths' field opens a "
        "domain that later 'prefix:...' fields belong to; lengths fields come before their domain."))


@register_kernel("CreateTreeCursor")
def create_tree_cursor(ctx):
    iterator = _iterator(ctx)
    return lambda: K.TreeCursor(iterator)


register_schema(OpSchema("ResetCursor", num_inputs=1, num_outputs=0,
                         doc="Rewind a TreeCursor to the start (thread safe)."))


@register_kernel("ResetCursor")
def reset_cursor(ctx):
    def run(cursor):
        cursor = _cursor(ctx, cursor)
        with cursor.lock:
            cursor.offsets = []
    return run


register_schema(OpSchema("GetCursorOffset", num_inputs=1, num_outputs=1, inference=_unknown,
                         doc="The cursor's offset per domain (int32)."))


@register_kernel("GetCursorOffset")
def get_cursor_offset(ctx):
    def run(cursor):
        cursor = _cursor(ctx, cursor)
        with cursor.lock:
            return np.array(cursor.offsets, dtype=np.int32)
    return run


register_schema(OpSchema(
    "ReadNextBatch", num_inputs=(1, None), num_outputs=(1, None),
    args=(Arg("batch_size", "int", 1, doc="top-level records to read"),
          Arg("enforce_batch_size", "bool", False, doc="a short last batch comes out empty")),
    inference=_unknown,
    doc="Read the next batch_size records: input 0 the cursor, then one blob per field; one output "
        "per field. Empty outputs at the end. Thread safe."))


@register_kernel("ReadNextBatch")
def read_next_batch(ctx):
    batch = ctx.int("batch_size", 1)
    enforce = ctx.bool("enforce_batch_size", False)
    if batch < 0:
        raise ctx.error("batch_size must be >= 0, got %d" % batch)
    if ctx.n_outputs != ctx.n_inputs - 1:
        raise ctx.error("takes one output per field: %d field inputs, %d outputs" % (ctx.n_inputs - 1, ctx.n_outputs))

    def run(cursor, *fields):
        cursor = _cursor(ctx, cursor)
        _n_fields(ctx, cursor, len(fields))
        outs = _guard(ctx, K.read_next_batch, cursor, fields, batch, enforce)
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


register_schema(OpSchema(
    "ComputeOffset", num_inputs=(1, None), num_outputs=1, inference=_unknown,
    doc="The (records + 1) x domains int64 matrix of offsets before each record, for "
        "ReadRandomBatch; run it on a fresh or reset cursor (it resets the cursor)."))


@register_kernel("ComputeOffset")
def compute_offset(ctx):
    def run(cursor, *fields):
        cursor = _cursor(ctx, cursor)
        _n_fields(ctx, cursor, len(fields))
        return _guard(ctx, K.compute_offset, cursor, fields)
    return run


register_schema(OpSchema(
    "ReadRandomBatch", num_inputs=(3, None), num_outputs=(1, None),
    args=(Arg("batch_size", "int", 1), Arg("enforce_batch_size", "bool", False),
          Arg("loop_over", "bool", False, doc="start over after the last index")),
    inference=_unknown,
    doc="Read batch_size records in the order of the int64 index blob (input 1) using the offsets "
        "matrix of ComputeOffset (input 2); then one blob per field. Thread safe."))


@register_kernel("ReadRandomBatch")
def read_random_batch(ctx):
    batch = ctx.int("batch_size", 1)
    enforce, loop = ctx.bool("enforce_batch_size", False), ctx.bool("loop_over", False)
    if batch < 0:
        raise ctx.error("batch_size must be >= 0, got %d" % batch)
    if ctx.n_outputs != ctx.n_inputs - 3:
        raise ctx.error("takes one output per field: %d field inputs, %d outputs" % (ctx.n_inputs - 3, ctx.n_outputs))

    def run(cursor, idx, offsets, *fields):
        cursor = _cursor(ctx, cursor)
        _n_fields(ctx, cursor, len(fields))
        if not np.issubdtype(np.asarray(idx).dtype, np.integer):
            raise ctx.input_error(1, "indices must be integers, got %s" % np.asarray(idx).dtype)
        outs = _guard(ctx, K.read_random_batch, cursor, idx, offsets, fields, batch, enforce, loop)
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


# ----------------------------------------------------------------- checks and transforms

register_schema(OpSchema(
    "CheckDatasetConsistency", num_inputs=(1, None), num_outputs=0, args=(_FIELDS,),
    doc="Fail unless the field blobs form a consistent dataset under `fields`."))


@register_kernel("CheckDatasetConsistency")
def check_dataset_consistency(ctx):
    iterator = _iterator(ctx)
    if ctx.n_inputs != len(iterator.fields):
        raise ctx.error("invalid number of fields: expected %d, got %d" % (len(iterator.fields), ctx.n_inputs))

    def run(*fields):
        _guard(ctx, K.check_consistency, iterator, fields)
    return run


register_schema(OpSchema(
    "TrimDataset", num_inputs=(1, None), num_outputs=(1, None), enforce_inplace=True,
    args=(_FIELDS, Arg("multiple_of", "int", 1)), inference=lambda ctx, ins: [UNKNOWN] * ctx.n_outputs,
    doc="Keep the largest number of records that is a multiple of multiple_of (in place)."))


@register_kernel("TrimDataset")
def trim_dataset(ctx):
    iterator = _iterator(ctx)
    multiple = ctx.int("multiple_of", 1)
    if multiple < 1:
        raise ctx.error("multiple_of must be >= 1, got %d" % multiple)
    if not ctx.n_inputs == ctx.n_outputs == len(iterator.fields):
        raise ctx.error("takes one input and one output per field (%d)" % len(iterator.fields))

    def run(*fields):
        outs = _guard(ctx, K.trim, iterator, fields, multiple)
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


register_schema(OpSchema(
    "PackRecords", num_inputs=(1, None), num_outputs=1, args=(_FIELDS,), inference=_unknown,
    doc="One element per record, each the list of that record's field tensors."))


@register_kernel("PackRecords")
def pack_records(ctx):
    iterator = _iterator(ctx)
    if ctx.n_inputs != len(iterator.fields):
        raise ctx.error("takes one input per field: %d fields, %d inputs" % (len(iterator.fields), ctx.n_inputs))
    return lambda *fields: _guard(ctx, K.pack_records, iterator, fields)


register_schema(OpSchema(
    "UnPackRecords", num_inputs=(1, None), num_outputs=(1, None), args=(_FIELDS,), inference=_unknown,
    doc="Undo PackRecords: one output per field. Inputs after the first are prototype tensors "
        "giving each field's type and inner shape (needed when there are no records)."))


@register_kernel("UnPackRecords")
def unpack_records(ctx):
    fields = _fields(ctx)
    if len(fields) != ctx.n_outputs:
        raise ctx.error("needs one output per field: %d fields, %d outputs" % (len(fields), ctx.n_outputs))
    if ctx.n_inputs > 1 and ctx.n_inputs - 1 != len(fields):
        raise ctx.error("takes one prototype per field after the packed input: %d fields, %d prototypes"
                        % (len(fields), ctx.n_inputs - 1))

    def run(packed, *prototypes):
        if not (isinstance(packed, np.ndarray) and packed.dtype == object):
            raise ctx.input_error(0, "must be packed records (from PackRecords), got %s"
                                  % getattr(packed, "dtype", type(packed).__name__))
        outs = _guard(ctx, K.unpack_records, packed, len(fields), list(prototypes))
        return outs[0] if len(outs) == 1 else tuple(outs)
    return run


# ----------------------------------------------------------------- tensor vectors

register_schema(OpSchema("CreateTensorVector", num_inputs=0, num_outputs=1, inference=_unknown,
                         doc="An empty vector of tensors."))
register_kernel("CreateTensorVector")(lambda ctx: lambda: K.TensorVector())

register_schema(OpSchema(
    "TensorVectorSize", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType((), DT.INT32)], doc="The vector's length (int32 scalar)."))


def _vector(ctx, value, index=0):
    if not isinstance(value, K.TensorVector):
        raise ctx.input_error(index, "must be a tensor vector (made by CreateTensorVector), got %s"
                              % type(value).__name__)
    return value


@register_kernel("TensorVectorSize")
def tensor_vector_size(ctx):
    return lambda vector: np.array(len(_vector(ctx, vector)), dtype=np.int32)


register_schema(OpSchema("ConcatTensorVector", num_inputs=1, num_outputs=1, inference=_unknown,
                         doc="Concatenate the vector's tensors along the first dimension."))


@register_kernel("ConcatTensorVector")
def concat_tensor_vector(ctx):
    return lambda vector: _guard(ctx, K.concat_tensor_vector, _vector(ctx, vector))


register_schema(OpSchema(
    "CollectTensor", num_inputs=lambda n: n > 0 and n % 2 == 0, num_outputs=(1, None),
    inputs_outputs_check=lambda i, o: i == 2 * o, enforce_inplace=True,
    args=(Arg("num_to_collect", "int", -1, doc="the most tensors each vector keeps"),),
    doc="Reservoir-sample tensors into vectors: inputs are n vectors (also the outputs, in place) "
        "then n tensors; each call keeps all n tensors or none, at one common position."))


@register_kernel("CollectTensor")
def collect_tensor(ctx):
    keep = ctx.int("num_to_collect", -1)
    if keep <= 0:
        raise ctx.error("num_to_collect must be positive, got %d" % keep)
    seed = ctx.op_def.device_option.random_seed if ctx.op_def.device_option.HasField("random_seed") else None
    rng = np.random.default_rng(seed)
    state = {"visited": 0}
    n = ctx.n_outputs

    def run(*args):
        vectors = [_vector(ctx, v, i) for i, v in enumerate(args[:n])]
        visited = state["visited"]
        for v in vectors:
            if visited >= keep and len(v) != keep:
                raise ctx.error("tensor vector holds %d tensors, not num_to_collect = %d" % (len(v), keep))
        pos = visited if visited < keep else int(rng.integers(0, visited + 1))
        if pos < keep:
            for v, t in zip(vectors, args[n:]):
                t = np.array(t, copy=True)
                if pos >= len(v):
                    v.append(t)
                else:
                    v[pos] = t
        state["visited"] = visited + 1
        return vectors[0] if n == 1 else tuple(vectors)
    return run


# ----------------------------------------------------------------- cursor (de)serialization

def _serialize_cursor(cursor, name):
    proto = caffe2_pb2.BlobProto(name=name, type=CURSOR_BLOB_TYPE)
    with cursor.lock:
        offsets = np.array(cursor.offsets, dtype=np.int64)
    if offsets.size:
        t = tensor_chunk(offsets, name, 0, offsets.size)
        t.ClearField("name")        # Caffe2 serializes the offsets without a tensor name
        proto.tensor.CopyFrom(t)
    proto.content = "".join(f + " " for f in cursor.it.fields).encode()
    return proto


def _deserialize_cursor(proto):
    offsets = []
    if proto.HasField("tensor"):
        dims, _, begin, end, flat = chunk_values(proto.tensor, proto.name)
        if end - begin != int(np.prod(dims)):
            raise SerializationError("cursor '%s': the offsets are split over several records" % proto.name)
        offsets = [int(v) for v in flat]
    try:
        iterator = K.TreeIterator(proto.content.decode().split())
    except K.DatasetError as exc:
        raise SerializationError("cursor '%s': %s" % (proto.name, exc)) from None
    return K.TreeCursor(iterator, offsets)


register_serializer(K.TreeCursor, _serialize_cursor)
register_deserializer(CURSOR_BLOB_TYPE, _deserialize_cursor)
