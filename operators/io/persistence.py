"""Save, Load, Checkpoint/Snapshot and DBExists: blobs to and from Caffe2's dbs.

Save serializes every input first and only then opens the db, so a blob that cannot
be serialized leaves the db untouched; minidb files are replaced atomically when the
db closes. Load reads and checks every record it needs (chunk bookkeeping, sizes,
duplicate keys) before returning anything, so a corrupt or truncated db loads nothing.
With load_all, the blobs that no output names are written to the workspace when the
op runs, after all of them were read.
"""
import re

import numpy as np

from caffe2py import db as dbs
from caffe2py import devices, model_trust
from caffe2py import runtime_object_records  # noqa: F401  (counters, indexes, maps, mutexes as records)
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import (CPU, UNKNOWN, Arg, OpSchema, TensorType, register_kernel,
                               register_schema, takes_blobs)
from caffe2py.schema_rules import FileName
from caffe2py.serialization import (OPTION_DEFAULT_CHUNK, OPTION_NO_CHUNKING, BlobAssembler,
                                    blob_name_from_db_key, serialize_blob)

DEFAULT_DB_TYPE = "minidb"     # Caffe2 requires db_type; its Python helpers default to minidb
_PATH_ARGS = (
    Arg("absolute_path", "int", 0, doc="use `db` as given; 0 prefixes the workspace root folder"),
    Arg("db", "string", "", check=FileName(), doc="path of the db"),
    Arg("db_type", "string", DEFAULT_DB_TYPE, doc="minidb (default), lmdb or leveldb"),
)


def db_path(ctx, name, root="."):
    """Caffe2 joins the root folder and the db name with '/' unless absolute_path."""
    return name if ctx.int("absolute_path", 0) else root + "/" + name


def _open_error(ctx, exc, path):
    hint = ""
    if not ctx.int("absolute_path", 0) and path.startswith(".//"):
        hint = " (the name is absolute but absolute_path is 0, so it was taken relative " \
               "to the workspace root folder; pass absolute_path=1)"
    return _same_class(exc, "%s: %s%s" % (ctx.label, exc, hint))


def _same_class(exc, message):
    """An error of exc's class (CorruptDBError, MissingBackendError, ...) with a new message."""
    try:
        return type(exc)(message)
    except TypeError:       # an error class with another constructor
        return Caffe2Error(message)


def _unique(ctx, names, what):
    seen = set()
    for name in names:
        if name in seen:
            raise ctx.error("duplicated %s: %s" % (what, name))
        seen.add(name)


# ----------------------------------------------------------------- Save

register_schema(OpSchema(
    "Save", num_inputs=(1, None), num_outputs=0,
    args=_PATH_ARGS + (
        Arg("strip_prefix", "string", "", doc="drop input names up to and including this text"),
        Arg("blob_name_overrides", "strings", None, doc="names to save the inputs under"),
        Arg("chunk_size", "int", None, doc="elements per record: -1 default (1,000,000), 0 one "
                                           "record per tensor, n > 0 n elements"),
        Arg("options", "string", "", doc="a serialized SerializationOptions (per-blob chunk size "
                                          "and float format, matched by blob_name_regex)")),
    doc="Write the input blobs to a db (keys '<name>#%<chunk>' for tensors)."))


def _serialization_options(ctx):
    options = caffe2_pb2.SerializationOptions()
    # the raw bytes: a serialized message is not text (ctx.arg decodes strings, which
    # corrupts bytes >= 0x80 such as a chunk_size >= 128)
    raw = next((a for a in ctx.op_def.arg if a.name == "options"), None)
    data = raw.s if raw is not None and raw.HasField("s") else (ctx.arg("options", b"") or b"")
    if data:
        try:
            options.ParseFromString(data.encode() if isinstance(data, str) else bytes(data))
        except Exception:  # noqa: BLE001
            raise ctx.error("unable to parse the `options` argument as SerializationOptions") from None
    if ctx.has("chunk_size"):
        # The older argument: -1 meant the default size and 0 no chunking, the opposite
        # of BlobSerializationOptions; it applies to every blob the options leave open.
        size = ctx.int("chunk_size")
        size = {-1: OPTION_DEFAULT_CHUNK, 0: OPTION_NO_CHUNKING}.get(size, size)
        if size < OPTION_NO_CHUNKING:
            raise ctx.error("chunk_size must be -1, 0 or positive, got %d" % ctx.int("chunk_size"))
        options.options.add().chunk_size = size
    compiled = []
    for opt in options.options:
        try:
            regex = re.compile(opt.blob_name_regex) if opt.blob_name_regex else None
        except re.error as exc:
            raise ctx.error("bad blob_name_regex %r: %s" % (opt.blob_name_regex, exc)) from None
        compiled.append((regex, opt.chunk_size, opt.float_format))
    return compiled


def _options_for(compiled, name):
    for regex, chunk_size, float_format in compiled:
        if regex is None or regex.fullmatch(name):
            return chunk_size, float_format
    return OPTION_DEFAULT_CHUNK, 0


def saved_names(ctx, inputs):
    """The names the inputs are saved under (overrides, or inputs with strip_prefix)."""
    overrides = ctx.strings("blob_name_overrides") or []
    strip = ctx.string("strip_prefix", "")
    if overrides:
        if len(overrides) != len(inputs):
            raise ctx.error("number of blobs (%d) and blob_name_overrides (%d) mismatch"
                            % (len(inputs), len(overrides)))
        if strip:
            raise ctx.error("strip_prefix and blob_name_overrides are mutually exclusive")
        names = [o.decode() if isinstance(o, bytes) else o for o in overrides]
    else:
        names = []
        for blob in inputs:
            at = blob.find(strip) if strip else -1
            names.append(blob[at + len(strip):] if at >= 0 else blob)
    _unique(ctx, names, "input")
    return names


def save_records(ctx, values, names, options):
    """Serialize every blob (all of them before any db is touched)."""
    records = []
    for value, name in zip(values, names):
        chunk_size, float_format = _options_for(options, name)
        try:
            records.extend(serialize_blob(value, name, chunk_size, float_format))
        except Caffe2Error as exc:
            raise ctx.error(str(exc)) from None
    return records


def write_db(ctx, db_type, path, records):
    try:
        with dbs.create_db(db_type, path, dbs.NEW) as db:
            txn = db.new_transaction()
            for key, data in records:
                txn.put(key, data)
            txn.commit()
    except dbs.DBError as exc:
        raise _open_error(ctx, exc, path) from exc


def _check_db_type(ctx, db_type):
    try:
        dbs.check_db_type(db_type)
    except dbs.DBError as exc:          # an unknown db type is a plan-time error
        raise ctx.error(str(exc)) from None


def _save_setup(ctx, inputs):
    db_type = ctx.string("db_type", DEFAULT_DB_TYPE) or DEFAULT_DB_TYPE
    _check_db_type(ctx, db_type)
    return db_type, saved_names(ctx, inputs), _serialization_options(ctx)


@register_kernel("Save")
def save(ctx):
    if not ctx.string("db", ""):
        raise ctx.error("must specify a db name (argument `db`)")
    db_type, names, options = _save_setup(ctx, ctx.inputs)
    path = db_path(ctx, ctx.string("db"))

    def run(*values):
        write_db(ctx, db_type, path, save_records(ctx, values, names, options))
    return run


# ----------------------------------------------------------------- Checkpoint / Snapshot

for _name in ("Checkpoint", "Snapshot"):
    register_schema(OpSchema(
        _name, num_inputs=(1, None), num_outputs=0,
        args=_PATH_ARGS + (
            Arg("every", "int", 1, doc="save when iteration % every == 0"),
            Arg("strip_prefix", "string", ""), Arg("blob_name_overrides", "strings", None),
            Arg("chunk_size", "int", None), Arg("options", "string", "")),
        doc="Save every `every` iterations: input 0 is the int64 iteration counter (saved too), "
            "`db` a printf pattern of it (\"ckpt_%05d\")."
            + (" Old name of Checkpoint." if _name == "Snapshot" else "")))


def _format_db(pattern, iteration):
    try:
        return pattern % iteration
    except (TypeError, ValueError):
        return pattern      # like sprintf with no conversion in the pattern


def checkpoint(ctx):
    pattern = ctx.string("db", "")
    if not pattern:
        raise ctx.error("must specify a checkpoint file pattern (argument `db`)")
    every = ctx.int("every", 1)
    if every <= 0:
        raise ctx.error("checkpoint interval `every` should be positive, got %d" % every)
    db_type, names, options = _save_setup(ctx, ctx.inputs)

    def run(iteration, *values):
        it = np.asarray(iteration)
        if it.dtype != np.int64 or it.size < 1:
            raise ctx.input_error(0, "the iteration counter must be an int64 tensor, got %s %s"
                                  % (it.dtype, list(it.shape)))
        step = int(it.reshape(-1)[0])
        if step % every:
            return
        path = db_path(ctx, _format_db(pattern, step))
        model_trust.check_op_path(ctx, "db", path, write=True)      # the name is only known now
        write_db(ctx, db_type, path, save_records(ctx, (iteration,) + values, names, options))
    return run


register_kernel("Checkpoint")(checkpoint)
register_kernel("Snapshot")(checkpoint)


# ----------------------------------------------------------------- DBExists

register_schema(OpSchema(
    "DBExists", num_inputs=0, num_outputs=1,
    args=(Arg("absolute_path", "int", 0), Arg("db_name", "string", "", check=FileName()),
          Arg("db_type", "string", DEFAULT_DB_TYPE)),
    inference=lambda ctx, ins: [TensorType((), caffe2_pb2.TensorProto.BOOL)],
    doc="Scalar bool: whether the db can be opened for reading."))


@register_kernel("DBExists")
def db_exists(ctx):
    db_type = ctx.string("db_type", DEFAULT_DB_TYPE) or DEFAULT_DB_TYPE
    path = db_path(ctx, ctx.string("db_name", ""))
    _check_db_type(ctx, db_type)

    def run():
        try:
            found = dbs.db_exists(db_type, path)
        except dbs.DBError as exc:
            raise ctx.error(str(exc)) from exc
        return np.array(found, dtype=np.bool_)
    return run


# ----------------------------------------------------------------- Load

def _load_inference(ctx, ins):
    shape = ctx.ints("shape") if ctx.has("shape") else None
    if ctx.n_outputs == 1 and shape:
        return [TensorType(tuple(shape), ctx.int("dtype", caffe2_pb2.TensorProto.FLOAT))]
    return [UNKNOWN] * ctx.n_outputs


register_schema(OpSchema(
    "Load", num_inputs=(0, None), num_outputs=(0, None),
    args=_PATH_ARGS + (
        Arg("dbs", "strings", None, check=FileName(), doc="several dbs to load from"),
        Arg("add_prefix", "string", "", doc="prepended to every loaded name"),
        Arg("strip_prefix", "string", "", doc="db keys lose everything up to and including this"),
        Arg("keep_device", "int", 0, doc="load onto the device recorded in the db, not the op's"),
        Arg("load_all", "int", 0, doc="load every blob of the db(s)"),
        Arg("allow_incomplete", "bool", False, doc="outputs missing from the db are not an error"),
        Arg("source_blob_names", "strings", None, doc="db names of the outputs"),
        Arg("shape", "ints", None), Arg("dtype", "int", caffe2_pb2.TensorProto.FLOAT)),
    inference=_load_inference,
    doc="Load blobs from dbs (the `db`/`dbs` arguments or DBReader inputs), matching db keys "
        "(chunk ids dropped, strip_prefix/add_prefix applied) to the outputs."))


class _LoadSpec:
    """Load's arguments, checked once at plan time as Caffe2's constructor does."""

    def __init__(self, ctx):
        self.absolute = ctx.int("absolute_path", 0)
        self.add_prefix = ctx.string("add_prefix", "")
        self.strip_prefix = ctx.string("strip_prefix", "")
        self.keep_device = bool(ctx.int("keep_device", 0))
        self.load_all = bool(ctx.int("load_all", 0))
        self.allow_incomplete = ctx.bool("allow_incomplete", False)
        self.db_type = ctx.string("db_type", DEFAULT_DB_TYPE) or DEFAULT_DB_TYPE
        self.paths = []
        if ctx.n_inputs == 0:
            _check_db_type(ctx, self.db_type)
        if ctx.n_inputs == 0:
            names = [n.decode() if isinstance(n, bytes) else n for n in (ctx.strings("dbs") or [])]
            if not names:
                if not ctx.string("db", ""):
                    raise ctx.error("must specify a db name (argument `db` or `dbs`) or DBReader inputs")
                names = [ctx.string("db")]
            for n in names:
                if not n:
                    raise ctx.error("db names must not be empty")
            _unique(ctx, names, "db name")
            self.paths = [db_path(ctx, n) for n in names]
        sources = [n.decode() if isinstance(n, bytes) else n for n in (ctx.strings("source_blob_names") or [])]
        if sources and len(sources) != ctx.n_outputs:
            raise ctx.error("number of output blobs (%d) and source_blob_names (%d) mismatch"
                            % (ctx.n_outputs, len(sources)))
        if sources and self.strip_prefix:
            raise ctx.error("strip_prefix and source_blob_names are mutually exclusive")
        if sources and self.load_all:
            raise ctx.error("cannot load_all while using source_blob_names")
        self.wanted = {}            # db blob name -> output index
        if not self.load_all:
            for i, name in enumerate(sources or ctx.outputs):
                if name in self.wanted:
                    raise ctx.error("duplicated source blob name: %s" % name)
                self.wanted[name] = i


def _read_records(ctx, spec, cursors, assembler):
    """Feed the assembler from each cursor; Caffe2's duplicate-key and early-stop rules."""
    key_db = {}
    for db_index, cursor in enumerate(cursors):
        while cursor.valid():
            key = cursor.key()
            name = blob_name_from_db_key(key, spec.strip_prefix, spec.add_prefix)
            if spec.load_all or name in spec.wanted:
                if key_db.setdefault(name, db_index) != db_index:
                    raise ctx.error("duplicate key %s is found in db %d and db %d" % (name, key_db[name], db_index))
                assembler.add_record(name, cursor.value())
                if not spec.load_all and assembler.complete_count == len(spec.wanted):
                    return      # every output is loaded: leave the rest of the db (and cursor) alone
            cursor.next()


def _placed(ctx, spec, assembler, name):
    value = assembler.value(name)
    device = assembler.device(name)
    if device is None:
        return value
    if not spec.keep_device:
        device = ctx.op_def.device_option if ctx.op_def.HasField("device_option") else None
    if device is None or device.device_type == CPU:
        return value
    return devices.to_device(value, device)


@register_kernel("Load")
def load(ctx):
    spec = _LoadSpec(ctx)

    @takes_blobs
    def run(blobs, *readers):
        assembler = BlobAssembler()
        try:
            if readers:
                for i, reader in enumerate(readers):
                    if not isinstance(reader, dbs.DBReader):
                        raise ctx.input_error(i, "Load inputs must be DBReaders (from CreateDB), got %s"
                                              % type(reader).__name__)
                with _locked(readers):
                    _read_records(ctx, spec, [r.cursor() for r in readers], assembler)
            else:
                opened = []
                try:
                    for path in spec.paths:
                        try:
                            opened.append(dbs.create_db(spec.db_type, path, dbs.READ))
                        except dbs.DBError as exc:
                            raise _open_error(ctx, exc, path) from exc
                    _read_records(ctx, spec, [d.new_cursor() for d in opened], assembler)
                finally:
                    for d in opened:
                        d.close()
            assembler.validate()
        except dbs.DBError as exc:
            raise _wrap(ctx, exc) from exc
        except Caffe2Error as exc:
            if str(exc).startswith(ctx.label):
                raise
            raise _wrap(ctx, exc) from exc
        loaded = set(assembler.names())
        if spec.load_all:
            for name in ctx.outputs:
                if name not in loaded:
                    raise ctx.error("output blob name %s does not exist in the db(s)" % name)
            values = {name: _placed(ctx, spec, assembler, name) for name in assembler.names()}
            for name, value in values.items():      # all read and checked: now commit
                if name not in ctx.outputs:
                    blobs[name] = value
            outs = [values[name] for name in ctx.outputs]
        else:
            missing = [name for name in spec.wanted if name not in loaded]
            if missing and not spec.allow_incomplete:
                raise ctx.error("expected to load %d blobs, got %d only; missing: %s"
                                % (len(spec.wanted), len(spec.wanted) - len(missing), ", ".join(missing[:10])))
            outs = [None] * ctx.n_outputs
            for name, i in spec.wanted.items():
                if name in loaded:
                    outs[i] = _placed(ctx, spec, assembler, name)
                else:       # allow_incomplete: the output keeps what it held
                    outs[i] = blobs.get(ctx.outputs[i])
        if ctx.n_outputs == 0:
            return None
        return outs[0] if ctx.n_outputs == 1 else tuple(outs)
    return run


class _locked:
    """Hold every reader's lock while Load walks its cursor (Read() is locked too)."""

    def __init__(self, readers):
        self.readers = readers

    def __enter__(self):
        for r in self.readers:
            r.lock.acquire()

    def __exit__(self, *exc):
        for r in reversed(self.readers):
            r.lock.release()
        return False


def _wrap(ctx, exc):
    if str(exc).startswith(ctx.label):
        return exc
    return _same_class(exc, "%s: nothing was loaded: %s" % (ctx.label, exc))
