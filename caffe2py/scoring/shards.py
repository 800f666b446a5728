"""Input shards of a scoring job: finding them and reading them in batches.

A shard is one file: Parquet (columns named after the model's inputs, plus an
optional id column), .npz (arrays named after the inputs, plus an optional id
array) or .npy (the one input of a one-input model). Rows without an id column
are identified by their row number in the shard. Each shard's output is one
Parquet file named after it (`part-0.parquet` -> `part-0.parquet` in the output
folder, `x.npz` -> `x.parquet`).
"""
import glob
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from caffe2py.errors import Caffe2Error

from .columns import column_to_array

KINDS = {".parquet": "parquet", ".pq": "parquet", ".npz": "npz", ".npy": "npy"}


class ShardError(Caffe2Error):
    """A shard that cannot be read as the model's input (the message names it)."""


@dataclass(frozen=True)
class Shard:
    path: str
    kind: str

    @property
    def name(self):
        return os.path.basename(self.path)

    @property
    def output_name(self):
        return os.path.splitext(self.name)[0] + ".parquet"

    def stat_key(self):
        """(size, mtime in ns): an output made from another version of this file is redone."""
        st = os.stat(self.path)
        return st.st_size, st.st_mtime_ns


def _shard_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if not f.startswith(".") and os.path.splitext(f)[1].lower() in KINDS
                  and os.path.isfile(os.path.join(folder, f)))


def discover(sources):
    """Shards from folders, globs and files, in a stable order, each once."""
    paths = []
    for source in sources:
        if os.path.isdir(source):
            found = _shard_files(source)
        elif any(c in source for c in "*?["):
            found = sorted(p for p in glob.glob(source) if os.path.isfile(p)
                           and os.path.splitext(p)[1].lower() in KINDS)
        elif os.path.isfile(source):
            if os.path.splitext(source)[1].lower() not in KINDS:
                raise Caffe2Error("'%s' is not a shard: shards are .parquet, .npz or .npy files" % source)
            found = [source]
        else:
            raise Caffe2Error("dataset '%s' is not a folder, a file or a glob that matches files" % source)
        if not found:
            raise Caffe2Error("dataset '%s' holds no .parquet, .npz or .npy files" % source)
        paths.extend(found)
    shards, by_output = [], {}
    for path in dict.fromkeys(os.path.abspath(p) for p in paths):
        shard = Shard(path, KINDS[os.path.splitext(path)[1].lower()])
        other = by_output.setdefault(shard.output_name, shard)
        if other is not shard:
            raise Caffe2Error("shards '%s' and '%s' would both write output '%s': give them different names"
                              % (other.path, shard.path, shard.output_name))
        shards.append(shard)
    return shards


# ------------------------------------------------------------------- reading

def _npy_header(fileobj):
    version = np.lib.format.read_magic(fileobj)
    reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in reader:
        raise ValueError(".npy format version %s" % (version,))
    shape, _, _ = reader[version](fileobj)
    return shape


def count_rows(shard):
    """Rows in a shard from its header alone; None when it cannot be read (the
    error comes later, when the shard is scored)."""
    try:
        if shard.kind == "parquet":
            import pyarrow.parquet as pq
            return pq.ParquetFile(shard.path).metadata.num_rows
        if shard.kind == "npy":
            with open(shard.path, "rb") as f:
                shape = _npy_header(f)
            return shape[0] if shape else None
        with zipfile.ZipFile(shard.path) as z:
            for info in z.infolist():
                with z.open(info) as f:
                    shape = _npy_header(f)
                return shape[0] if shape else None
    except Exception:  # noqa: BLE001 - reported when the shard is read
        return None
    return None


def _describe_error(exc):
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, Caffe2Error) else "%s: %s" % (type(exc).__name__, text)


class ShardReader:
    """Batches of (ids, {input: array}) from one shard, checked against the model's
    inputs before the first row is scored.

    inputs: {name: (row shape or None, dtype or None)}; id_column: the column or
    array holding the rows' ids (absent: row numbers)."""

    def __init__(self, shard, inputs, id_column="id"):
        self.shard = shard
        self.inputs = inputs
        self.id_column = id_column
        try:
            self._open()
        except ShardError:
            raise
        except Exception as exc:  # noqa: BLE001 - any reader failure names the shard
            raise ShardError("shard '%s': cannot read it as %s: %s"
                             % (shard.name, shard.kind, _describe_error(exc))) from None

    def error(self, text):
        return ShardError("shard '%s': %s" % (self.shard.name, text))

    def _missing(self, available, what):
        missing = [n for n in self.inputs if n not in available]
        if missing:
            raise self.error("no %s %s (it has: %s); the model's inputs are %s"
                             % (what, ", ".join("'%s'" % n for n in missing),
                                ", ".join(available) or "nothing", ", ".join(self.inputs)))

    def _open(self):
        kind = self.shard.kind
        if kind == "parquet":
            import pyarrow.parquet as pq
            self._file = pq.ParquetFile(self.shard.path)
            schema = self._file.schema_arrow
            self._missing(schema.names, "column")
            self.has_ids = self.id_column in schema.names
            self.rows = self._file.metadata.num_rows
            self._fields = {n: schema.field(n) for n in schema.names}
        elif kind == "npz":
            with np.load(self.shard.path, allow_pickle=False) as data:
                self._missing(list(data.files), "array")
                self._arrays = {n: data[n] for n in list(self.inputs) + [self.id_column] if n in data.files}
            self.has_ids = self.id_column in self._arrays
            self._check_lengths()
        else:
            if len(self.inputs) != 1:
                raise self.error("a .npy shard holds one array, but the model has %d inputs (%s): use .npz or "
                                 "Parquet" % (len(self.inputs), ", ".join(self.inputs)))
            (name,) = self.inputs
            self._arrays = {name: np.load(self.shard.path, allow_pickle=False)}
            self.has_ids = False
            self._check_lengths()

    def _check_lengths(self):
        lengths = {n: len(a) if np.ndim(a) else None for n, a in self._arrays.items()}
        if None in lengths.values() or len(set(lengths.values())) != 1:
            raise self.error("arrays must share their first (row) dimension: %s"
                             % ", ".join("%s %s" % (n, list(np.shape(a))) for n, a in self._arrays.items()))
        self.rows = next(iter(lengths.values()))

    def _array(self, name, values):
        shape, dtype = self.inputs[name]
        if shape is not None and list(values.shape[1:]) != list(shape):
            per_row = int(np.prod(values.shape[1:], dtype=np.int64))
            if per_row != int(np.prod(shape, dtype=np.int64)):
                raise self.error("'%s' has rows of shape %s; the model's input takes rows of shape %s"
                                 % (name, list(values.shape[1:]), list(shape)))
            values = values.reshape([len(values)] + list(shape))
        return values

    def batches(self, batch_size):
        """Yields (ids, {input: array}) of at most batch_size rows, in row order."""
        try:
            yield from self._batches(batch_size)
        except ShardError:
            raise
        except Caffe2Error as exc:
            raise self.error(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a corrupt page, a bad value: name the shard
            raise self.error("cannot read it: %s" % _describe_error(exc)) from None

    def _batches(self, batch_size):
        start = 0
        if self.shard.kind == "parquet":
            columns = list(self.inputs) + ([self.id_column] if self.has_ids else [])
            for batch in self._file.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
                feeds = {}
                for name in self.inputs:
                    shape, dtype = self.inputs[name]
                    feeds[name] = column_to_array(batch.column(name), self._fields[name], shape, dtype)
                ids = (batch.column(self.id_column) if self.has_ids   # Arrow: the type is kept
                       else np.arange(start, start + batch.num_rows, dtype=np.int64))
                start += batch.num_rows
                yield ids, feeds
            return
        ids_all = self._arrays.get(self.id_column) if self.has_ids else None
        while start < self.rows:
            stop = min(start + batch_size, self.rows)
            feeds = {n: self._array(n, np.asarray(self._arrays[n][start:stop])) for n in self.inputs}
            ids = ids_all[start:stop] if ids_all is not None else np.arange(start, stop, dtype=np.int64)
            yield ids, feeds
            start = stop
