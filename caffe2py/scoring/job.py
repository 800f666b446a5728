"""A scoring job from start to end: find the shards, skip those whose output is
complete, score the rest locally or on Ray, and sum up what happened."""
import os
import sys
import time
from dataclasses import dataclass, field

from caffe2py.errors import Caffe2Error
from caffe2py.progress import Progress

from .deps import require_pyarrow
from .outputs import is_complete, remove_stale_temps
from .shards import count_rows, discover


@dataclass
class JobSummary:
    shards: int = 0
    skipped: list = field(default_factory=list)     # complete outputs found
    results: list = field(default_factory=list)     # ShardResult per scored shard
    seconds: float = 0.0

    @property
    def failed(self):
        return [r for r in self.results if r.error]

    @property
    def rows(self):
        return sum(r.rows for r in self.results if not r.error)

    def text(self):
        done = len(self.results) - len(self.failed)
        line = "scored %d row(s) in %d shard(s) in %.2f s" % (self.rows, done, self.seconds)
        if self.seconds > 0 and self.rows:
            line += " (%.0f rows/s)" % (self.rows / self.seconds)
        if self.skipped:
            line += "; %d shard(s) already complete, skipped" % len(self.skipped)
        if self.failed:
            line += "; %d shard(s) failed" % len(self.failed)
        return line


def pending_shards(shards, out_dir, fingerprint):
    """(shards to score, names of shards whose output is complete)."""
    todo, skipped = [], []
    for shard in shards:
        if is_complete(os.path.join(out_dir, shard.output_name), shard, fingerprint):
            skipped.append(shard.name)
        else:
            todo.append(shard)
    return todo, skipped


def run_job(spec, sources, out_dir, batch_size=64, workers=1, id_column="id", ray_address=None,
            err=None, progress=True, model=None):
    """Score every shard of `sources` with the model of `spec` into out_dir."""
    require_pyarrow()
    if batch_size < 1:
        raise Caffe2Error("--batch-size must be at least 1 (got %d)" % batch_size)
    if workers < 1:
        raise Caffe2Error("--workers must be at least 1 (got %d)" % workers)
    err = err or sys.stderr
    shards = discover(sources)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise Caffe2Error("cannot create output folder '%s': %s" % (out_dir, exc.strerror or exc)) from None
    remove_stale_temps(out_dir)
    fingerprint = spec.fingerprint()
    todo, skipped = pending_shards(shards, out_dir, fingerprint)
    summary = JobSummary(len(shards), skipped)
    if not todo:
        return summary
    total = sum(count_rows(s) or 0 for s in todo)
    bar = Progress(total or None, "scoring", unit="rows", stream=err, enabled=None if progress else False)
    began = time.perf_counter()
    try:
        if ray_address is not None:
            from .ray_job import run_ray
            summary.results = run_ray(spec, todo, out_dir, batch_size, fingerprint, workers, id_column,
                                      ray_address, bar)
        else:
            from .local import run_local
            summary.results = run_local(spec, todo, out_dir, batch_size, fingerprint, workers, id_column, bar,
                                        model=model)
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - began
    return summary
