"""The scoring job on a Ray cluster through Ray Data:

    read_parquet(pending shards, include_paths=True)
      -> map_batches(ScoreActor, ActorPoolStrategy(size=workers))   # model prepared once per actor
      -> iter_batches() on the driver, in row order (preserve_order)
      -> each shard's rows into its one output file (temporary name, then rename),
         committed as soon as the shard's last row arrives

The outputs are written by the driver, not by Dataset.write_parquet: Ray's
Parquet sink writes each task's blocks with pyarrow threads, which reorders rows
inside a file (seen here: two 64-row batches swapped), and it names files per
write task, not per input shard. Outputs (scores, embeddings) are small next to
the inputs, so the driver writing them costs little, and a shard is done, and
skipped on a rerun, as soon as its last row is written.

Before the job, every shard is opened on the driver and its first row checked
against the model's inputs: a malformed shard is reported by name and left out,
the others run. Workers need caffe2py installed and the dataset at the same
paths (a shared file system), as Ray Data's local paths do.
"""
import logging
import os
import time

from caffe2py.errors import Caffe2Error
from caffe2py.progress import quiet

from .columns import array_to_column, column_to_array
from .deps import require_ray
from .local import ShardResult
from .outputs import OutputWriter
from .shards import ShardError, ShardReader

SHARD_COLUMN = "__caffe2py_shard"
PATH_COLUMN = "path"          # what read_parquet(include_paths=True) adds
IO_TASK_CPUS = 0.125     # CPUs a read or write task asks for


class ScoreActor:
    """Ray Data's callable class: prepares the model once per actor, then scores
    each batch (a pyarrow Table) into a table of shard name, id and outputs."""

    def __init__(self, spec, id_column, has_ids, threads):
        if threads and "CAFFE2PY_NUM_THREADS" not in os.environ:
            os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
        import caffe2py  # noqa: F401  (registers the ops)
        self.model = spec.prepare()
        self.id_column = id_column
        self.has_ids = has_ids

    def __call__(self, table):
        import pyarrow as pa
        feeds = {}
        for name, (shape, dtype) in self.model.row_specs.items():
            feeds[name] = column_to_array(table.column(name), table.schema.field(name), shape, dtype)
        outputs = self.model.run(feeds)
        names = pa.array([os.path.basename(p) for p in table.column(PATH_COLUMN).to_pylist()], pa.string())
        columns = {SHARD_COLUMN: names}
        if self.has_ids:
            columns[self.id_column] = table.column(self.id_column)
        for name, values in outputs.items():
            columns[name] = array_to_column(values)[0]
        return pa.table(columns)


WORKER_SETUP_HOOK = "caffe2py.scoring.ray_job.settle_fsspec_http"


def ray_init_options():
    """Keyword arguments for ray.init that the scoring job's workers need (a caller
    starting Ray itself passes them too: ray.init(num_cpus=2, **ray_init_options()))."""
    return {"runtime_env": {"worker_process_setup_hook": WORKER_SETUP_HOOK}}


def _connect(address):
    """(ray module, whether we started it): an existing session, the cluster at
    `address`, or for 'auto' a running cluster, else a new local instance."""
    ray = require_ray()
    if ray.is_initialized():
        return ray, False
    kwargs = dict(ray_init_options(), log_to_driver=False, include_dashboard=False)
    if address == "auto":
        try:
            ray.init(address="auto", **kwargs)
        except (ConnectionError, RuntimeError):
            ray.init(**kwargs)       # no cluster running: a local one on this machine
    else:
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise Caffe2Error("--ray %s: cannot connect to the Ray cluster: %s" % (address, exc)) from None
    return ray, True


def settle_fsspec_http():
    """Ray Data asks whether a file system is fsspec's HTTP one by importing
    fsspec.implementations.http and treats ModuleNotFoundError as 'no'. With fsspec
    installed but not aiohttp, that import fails each time it is tried, and when
    two of Ray Data's threads try at once one of them sees the half-imported module
    and gets ImportError "cannot import name 'HTTPFileSystem'", which fails the
    whole job (seen here in 2 of 3 runs, in the driver and in Ray Data's ListFiles
    tasks). Import it once; if it cannot be imported, mark it absent, so every
    later try is the ModuleNotFoundError Ray expects. Runs in the driver and, as
    the job's worker_process_setup_hook (ray_init_options), in every worker."""
    import sys
    name = "fsspec.implementations.http"
    if name in sys.modules:
        return
    try:
        import fsspec.implementations.http  # noqa: F401
    except ImportError:
        sys.modules[name] = None      # `import` of it now raises ModuleNotFoundError


def _check_shards(spec_inputs, shards, id_column):
    """(readable Parquet shards grouped by whether they have ids, ShardResults for the rest)."""
    groups, failed = {True: [], False: []}, []
    for shard in shards:
        if shard.kind != "parquet":
            failed.append(ShardResult(shard.name, error="shard '%s': --ray reads Parquet shards (Ray Data's "
                                      "read_parquet); score .npz/.npy shards without --ray" % shard.name))
            continue
        try:
            reader = ShardReader(shard, spec_inputs, id_column)
            for _ in reader.batches(1):
                break                # the first row converts: columns and shapes fit
        except ShardError as exc:
            failed.append(ShardResult(shard.name, error=str(exc)))
            continue
        groups[reader.has_ids].append((shard, reader.rows))
    return groups, failed


class _ShardSink:
    """Streams the scored rows (in order) into one output file per shard."""

    def __init__(self, shards, out_dir, fingerprint, id_column, has_ids, progress):
        self.expected = {shard.name: (shard, rows) for shard, rows in shards}
        self.out_dir, self.fingerprint = out_dir, fingerprint
        self.id_column, self.has_ids, self.progress = id_column, has_ids, progress
        self.writers, self.results = {}, {}
        self.began = time.perf_counter()

    def write(self, table):
        names = table.column(SHARD_COLUMN).to_numpy(zero_copy_only=False)
        cuts = [0] + [k for k in range(1, len(names)) if names[k] != names[k - 1]] + [len(names)]
        for start, stop in zip(cuts[:-1], cuts[1:]):
            self._write_part(names[start], table.slice(start, stop - start))

    def _write_part(self, name, part):
        writer = self.writers.get(name)
        if writer is None:
            if name in self.results or name not in self.expected:
                raise Caffe2Error("the Ray job returned rows of shard '%s' out of order" % name)
            shard, rows = self.expected[name]
            writer = self.writers[name] = OutputWriter(self.out_dir, shard, rows, self.fingerprint, self.id_column)
        ids = part.column(self.id_column) if self.has_ids else _row_numbers(writer.rows_written, part.num_rows)
        outputs = {f.name: column_to_array(part.column(f.name), f) for f in part.schema
                   if f.name not in (SHARD_COLUMN, self.id_column)}
        writer.write(ids, outputs)
        if self.progress is not None:
            self.progress.update(part.num_rows)
        if writer.rows_written >= self.expected[name][1]:
            self._close(name)

    def _close(self, name):
        writer = self.writers.pop(name, None)
        shard, rows = self.expected[name]
        writer = writer or OutputWriter(self.out_dir, shard, rows, self.fingerprint, self.id_column)
        if writer.rows_written != rows:
            writer.abort()
            self.results[name] = ShardResult(name, error="shard '%s': the Ray job returned %d of its %d rows"
                                             % (name, writer.rows_written, rows))
        else:
            writer.commit()
            self.results[name] = ShardResult(name, rows, time.perf_counter() - self.began)

    def finish(self):
        for name in self.expected:
            if name not in self.results:
                self._close(name)       # empty shards, and shards the job fell short on
        return self.results

    def abort(self, reason):
        for writer in self.writers.values():
            writer.abort()
        self.writers.clear()
        for name in self.expected:
            self.results.setdefault(name, ShardResult(name, error="shard '%s': the Ray job failed: %s"
                                                      % (name, reason)))
        return self.results


def _row_numbers(start, count):
    import numpy as np
    return np.arange(start, start + count, dtype=np.int64)


def run_ray(spec, shards, out_dir, batch_size, fingerprint, workers, id_column, address, progress=None):
    """Score `shards` on Ray Data; [ShardResult] in shard order."""
    ray, started = _connect(address)
    import ray.data
    settle_fsspec_http()
    try:
        _, _, names, declared = spec.load_nets()
        inputs = {name: declared.get(name, (None, None)) for name in names}
        for name, shape in spec.shapes.items():
            inputs[name] = (list(shape), inputs.get(name, (None, None))[1])
        groups, failed = _check_shards(inputs, shards, id_column)
        results = {r.shard: r for r in failed}
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        if quiet() or not getattr(progress, "enabled", False):
            context.enable_progress_bars = False
            logging.getLogger("ray.data").setLevel(logging.WARNING)
        for has_ids, group in groups.items():
            if group:
                results.update(_run_group(ray, spec, group, out_dir, batch_size, fingerprint, workers, id_column,
                                          has_ids, inputs, progress))
    finally:
        if started:
            ray.shutdown()
    return [results[s.name] for s in shards]


def _run_group(ray, spec, group, out_dir, batch_size, fingerprint, workers, id_column, has_ids, inputs, progress):
    columns = list(inputs) + ([id_column] if has_ids else [])
    cpus = float(ray.cluster_resources().get("CPU", 1))
    # Actors must leave a CPU to Ray Data's file listing (it asks for one) and the
    # read tasks: with every CPU held by an actor, nothing is ever read and the
    # job waits forever.
    actor_cpus = min(1.0, max(0.05, (cpus - 1.0) / workers))
    threads = max(1, int(cpus // workers))
    sink = _ShardSink(group, out_dir, fingerprint, id_column, has_ids, progress)
    try:
        ds = ray.data.read_parquet([os.path.abspath(shard.path) for shard, _ in group], include_paths=True,
                                   num_cpus=IO_TASK_CPUS, override_num_blocks=max(len(group), workers))
        ds = ds.select_columns(columns + [PATH_COLUMN])
        ds = ds.map_batches(ScoreActor, fn_constructor_args=(spec, id_column, has_ids, threads),
                            batch_size=batch_size, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=actor_cpus)
        for table in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            sink.write(table)
        return sink.finish()
    except Exception as exc:  # noqa: BLE001 - the job failed: every shard not yet done is reported
        text = str(exc).strip().splitlines()
        return sink.abort(text[-1] if text else type(exc).__name__)
