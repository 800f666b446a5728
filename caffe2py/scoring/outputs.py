"""Output files of a scoring job: one Parquet file per input shard, written under a
temporary name and renamed when complete, so a file with the final name is always
whole. Its schema metadata (key b"caffe2py.score") records the shard it came from
(name, size, mtime, rows) and the model's fingerprint: an output is taken as done
only when all of these still match.
"""
import json
import os
import uuid

import numpy as np

from .columns import array_to_column
from .deps import require_pyarrow

MARKER = b"caffe2py.score"
TEMP_PREFIX = ".caffe2py-tmp-"


def marker_for(shard, rows, fingerprint):
    size, mtime_ns = shard.stat_key()
    return {"source": shard.name, "source_bytes": size, "source_mtime_ns": mtime_ns,
            "rows": rows, "model": fingerprint}


def read_marker(path):
    """The marker of a finished output file, or None (no file, unreadable, not ours)."""
    pa = require_pyarrow()
    import pyarrow.parquet as pq
    try:
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
        text = (schema.metadata or {}).get(MARKER)
        if text is None:
            return None
        marker = json.loads(text)
        marker["_num_rows"] = meta.num_rows
        return marker
    except (OSError, ValueError, pa.ArrowException):
        return None


def is_complete(path, shard, fingerprint):
    """Whether `path` is a whole output of this version of `shard` by this model."""
    marker = read_marker(path)
    if marker is None:
        return False
    size, mtime_ns = shard.stat_key()
    return (marker.get("source") == shard.name and marker.get("source_bytes") == size
            and marker.get("source_mtime_ns") == mtime_ns and marker.get("model") == fingerprint
            and marker.get("rows") == marker["_num_rows"])


def remove_stale_temps(out_dir):
    """Temporary files of runs that died (their process is gone); a live run's stay."""
    removed = 0
    for name in os.listdir(out_dir):
        if not name.startswith(TEMP_PREFIX):
            continue
        try:
            pid, _, started = name[len(TEMP_PREFIX):].split("-", 1)[0].partition(".")
            pid, started = int(pid), int(started) if started else None
        except ValueError:
            continue
        if pid != os.getpid() and _alive(pid, started):
            continue
        try:
            os.remove(os.path.join(out_dir, name))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _process_tag(pid=None):
    """'pid.start' (start: the process's start time in clock ticks, from /proc), or
    'pid' where /proc does not say: a temporary file names the process writing it."""
    pid = os.getpid() if pid is None else pid
    started = _start_time(pid)
    return "%d" % pid if started is None else "%d.%d" % (pid, started)


def _proc_stat(pid):
    """/proc/<pid>/stat's fields after the command name, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid, fields=None):
    """Process pid's start time (stat field 22) from its stat fields, or None."""
    fields = _proc_stat(pid) if fields is None else fields
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _alive(pid, started=None):
    """Whether process `pid` (started at `started`, when known) still runs: not when it
    is gone, a zombie (killed, not yet reaped: its files are no one's), or another
    process that reuses the number. Without /proc: whether the number is in use."""
    if os.path.isdir("/proc/self"):
        fields = _proc_stat(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            return False
        now = _start_time(pid, fields)
        return started is None or now is None or now == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class OutputWriter:
    """Writes batches of (ids, {output: array}) to a temporary file in out_dir;
    `commit()` renames it to its final name, `abort()` removes it. As a context
    manager it commits on success and aborts on any error."""

    def __init__(self, out_dir, shard, rows, fingerprint, id_column="id"):
        self.final = os.path.join(out_dir, shard.output_name)
        self.temp = os.path.join(out_dir, "%s%s-%s-%s" % (TEMP_PREFIX, _process_tag(), uuid.uuid4().hex[:8],
                                                           shard.output_name))
        self.marker = marker_for(shard, rows, fingerprint)
        self.id_column = id_column
        self.rows_written = 0
        self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is None:
            self.commit()
        else:
            self.abort()

    def table(self, ids, outputs):
        pa = require_pyarrow()
        ids = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(ids))
        arrays, fields = [ids], [pa.field(self.id_column, ids.type)]
        for name, values in outputs.items():
            array, meta = array_to_column(values)
            arrays.append(array)
            fields.append(pa.field(name, array.type, metadata=meta))
        schema = pa.schema(fields, metadata={MARKER: json.dumps(self.marker).encode()})
        return pa.Table.from_arrays(arrays, schema=schema)

    def write(self, ids, outputs):
        import pyarrow.parquet as pq
        table = self.table(ids, outputs)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.temp, table.schema)
        elif not table.schema.equals(self._writer.schema, check_metadata=False):
            table = table.cast(self._writer.schema)
        self._writer.write_table(table)
        self.rows_written += table.num_rows

    def commit(self):
        if self._writer is None:          # an empty shard still gets its (empty) output
            import pyarrow.parquet as pq
            pa = require_pyarrow()
            schema = pa.schema([pa.field(self.id_column, pa.int64())],
                               metadata={MARKER: json.dumps(self.marker).encode()})
            self._writer = pq.ParquetWriter(self.temp, schema)
        self._writer.close()
        with open(self.temp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(self.temp, self.final)     # atomic: the final name is whole or absent
        _fsync_dir(os.path.dirname(self.final))

    def abort(self):
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the file is removed anyway
                pass
        try:
            os.remove(self.temp)
        except FileNotFoundError:
            pass
