"""Batch scoring: a model over a dataset of shards, outputs next to the rows' ids,
one Parquet file per shard, resumable; on this machine or on Ray Data.
See docs/scoring.md and `caffe2py score`."""
from .job import JobSummary, run_job
from .model import ModelSpec, PreparedModel

__all__ = ["ModelSpec", "PreparedModel", "JobSummary", "run_job"]
