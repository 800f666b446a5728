"""Scoring shards on this machine: in this process (one worker) or in worker
processes (several), each preparing the model once and scoring whole shards.

Workers are started with the spawn method: numba's OpenMP runtime (GNU libgomp)
is not fork-safe once it has run, so forked children of a process that has
scored could hang. Each worker's kernel team gets CPUs // workers threads unless
CAFFE2PY_NUM_THREADS says otherwise, so workers do not oversubscribe the cores.

Workers end with the run (caffe2py.child_processes): each watches this process
and exits when it is gone (even SIGKILLed); Ctrl-C and SIGTERM here stop them
before this process exits; a terminal's Ctrl-C is for this process alone.
"""
import multiprocessing
import os
import queue as queue_module
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from caffe2py import child_processes
from caffe2py.errors import Caffe2Error

from .outputs import OutputWriter
from .shards import ShardError, ShardReader


@dataclass
class ShardResult:
    shard: str
    rows: int = 0
    seconds: float = 0.0
    error: str = None


def score_shard(model, shard, out_dir, batch_size, fingerprint, id_column="id", on_rows=None):
    """Score one shard into its output file; a ShardResult, with the error text
    (naming the shard) instead of raising when the shard is malformed."""
    began = time.perf_counter()
    try:
        reader = ShardReader(shard, model.row_specs, id_column)
        with OutputWriter(out_dir, shard, reader.rows, fingerprint, id_column) as writer:
            for ids, feeds in reader.batches(batch_size):
                try:
                    outputs = model.run(feeds)
                except Caffe2Error as exc:
                    raise ShardError("shard '%s': rows %d..: %s" % (shard.name, writer.rows_written, exc)) from None
                writer.write(ids, outputs)
                if on_rows is not None:
                    on_rows(len(ids))
            if writer.rows_written != reader.rows:
                raise ShardError("shard '%s': read %d rows, its header says %d"
                                 % (shard.name, writer.rows_written, reader.rows))
        return ShardResult(shard.name, writer.rows_written, time.perf_counter() - began)
    except Caffe2Error as exc:
        return ShardResult(shard.name, 0, time.perf_counter() - began, str(exc))
    except Exception as exc:  # noqa: BLE001 - one bad shard must not stop the others
        return ShardResult(shard.name, 0, time.perf_counter() - began,
                           "shard '%s': %s: %s" % (shard.name, type(exc).__name__, exc))


# ------------------------------------------------------------ worker processes

_worker = {}


def _init_worker(spec, threads, progress_queue, parent_pid):
    child_processes.protect(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C: the parent stops us
    if threads and "CAFFE2PY_NUM_THREADS" not in os.environ:
        os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
    os.environ.setdefault("CAFFE2PY_QUIET", "1")      # notices once, from the parent
    import caffe2py  # noqa: F401  (registers the ops)
    _worker["queue"] = progress_queue
    try:
        _worker["model"] = spec.prepare()
    except Exception as exc:  # noqa: BLE001 - reported with each shard, then once by the parent
        _worker["model_error"] = "the model could not be prepared: %s" % exc


def _worker_score(shard, out_dir, batch_size, fingerprint, id_column):
    if "model_error" in _worker:
        return ShardResult(shard.name, error=_worker["model_error"])
    q = _worker["queue"]
    return score_shard(_worker["model"], shard, out_dir, batch_size, fingerprint, id_column,
                       on_rows=lambda n: q.put(n))


def default_threads(workers):
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def run_local(spec, shards, out_dir, batch_size, fingerprint, workers=1, id_column="id", progress=None,
              model=None):
    """Score `shards`; returns [ShardResult] in shard order. `progress`: a
    Progress-like object (update(rows)); `model`: an already prepared model
    (one worker only)."""
    if not shards:
        return []
    if workers <= 1:
        model = model or spec.prepare()
        on_rows = progress.update if progress is not None else None
        return [score_shard(model, shard, out_dir, batch_size, fingerprint, id_column, on_rows) for shard in shards]
    return _run_pool(spec, shards, out_dir, batch_size, fingerprint, workers, id_column, progress)


def _run_pool(spec, shards, out_dir, batch_size, fingerprint, workers, id_column, progress):
    context = multiprocessing.get_context("spawn")
    rows_queue = context.Queue()
    results = {}
    workers = min(workers, len(shards))
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                               initargs=(spec, default_threads(workers), rows_queue, os.getpid()))
    finished = False
    try:
        with child_processes.terminate_unwinds():
            futures = {pool.submit(_worker_score, shard, out_dir, batch_size, fingerprint, id_column): shard
                       for shard in shards}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(rows_queue, progress)
                for future in done:
                    results[futures[future].name] = _result(future, futures[future])
            _drain(rows_queue, progress)
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop_pool(pool)
    rows_queue.close()
    model_errors = {r.error for r in results.values() if r.error and r.error.startswith("the model could not")}
    if model_errors and len(model_errors) == 1 and all(r.error for r in results.values()):
        raise Caffe2Error(model_errors.pop())
    return [results[s.name] for s in shards]


def _result(future, shard):
    try:
        return future.result()
    except BrokenProcessPool:
        return ShardResult(shard.name, error="shard '%s': its worker process died "
                           "(killed, or out of memory)" % shard.name)
    except Exception as exc:  # noqa: BLE001 - reported per shard
        return ShardResult(shard.name, error="shard '%s': %s" % (shard.name, exc))


def _stop_pool(pool):
    """Interrupted (Ctrl-C, SIGTERM, an error): end the workers now rather than
    let them finish their shards (shutdown() alone would wait for them)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())   # no public accessor before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    child_processes.stop(processes, grace=2.0)


def _drain(rows_queue, progress):
    while True:
        try:
            n = rows_queue.get_nowait()
        except (queue_module.Empty, OSError, ValueError):
            return
        if progress is not None:
            progress.update(n)
