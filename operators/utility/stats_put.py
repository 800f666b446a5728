"""Caffe2's stat put ops: AveragePut, IncrementPut and StdDevPut add one scalar
(input's first value, or default_value for an empty input), times magnitude_expand
and truncated to int64, to counters of the global stat registry (read with
StatRegistryExport), under '<stat_name>/stat_value...' keys."""
import math
import threading

import numpy as np

from caffe2py import runtime_objects as R
from caffe2py.registry import Arg, Cost, OpSchema, register_kernel, register_schema

_INT64_MAX, _INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
_ARGS = (Arg("stat_name", "string", "", doc="counter name prefix (default: the input blob's name)"),
         Arg("magnitude_expand", "int", 1, doc="the value is multiplied by this before truncation"),
         Arg("bound", "bool", False, doc="clamp the expanded value to the int64 range"),
         Arg("default_value", "float", 0.0, doc="the value put when the input is empty"))
_OFFSETS = {}          # StdDevPut: the first value put under each name (its shift)
_OFFSETS_LOCK = threading.Lock()


def _stat_name(ctx):
    name = ctx.arg("stat_name") or ""
    name = name.decode() if isinstance(name, bytes) else str(name)
    return name or ctx.inputs[0]


def _expanded(ctx, x, magnitude, bound, default):
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiub":
        raise ctx.input_error(0, "must be a numeric tensor")
    value = float(x.reshape(-1)[0]) if x.size else default
    scaled = value * magnitude
    if math.isnan(scaled):
        raise ctx.input_error(0, "the value is NaN")
    if not _INT64_MIN <= scaled < 2.0 ** 63:
        if not bound:
            raise ctx.input_error(0, "%r * magnitude_expand %d does not fit int64; set bound=1 to clamp"
                                  % (value, magnitude))
        return _INT64_MAX if scaled > 0 else _INT64_MIN
    return int(scaled)


def _register(op_type, doc, put):
    register_schema(OpSchema(op_type, num_inputs=1, num_outputs=0, inputs=("value",), args=_ARGS,
                             cost=lambda ctx, ins: Cost(), doc=doc))

    @register_kernel(op_type)
    def factory(ctx):
        name, magnitude = _stat_name(ctx), ctx.int("magnitude_expand")
        bound, default = ctx.bool("bound"), ctx.float("default_value")

        def run(x):
            put(R.global_stat_registry(), name + "/stat_value", _expanded(ctx, x, magnitude, bound, default))
        return run
    factory.__name__ = op_type


def _average(registry, key, v):
    registry.update(key + "/sum", v)
    registry.update(key + "/count", 1)


def _increment(registry, key, v):
    registry.update(key, v)


def _stddev(registry, key, v):
    # sums shifted by the first value keep the squares small (Caffe2's StdDevExportedStat)
    with _OFFSETS_LOCK:
        offset = _OFFSETS.setdefault(key, v)
    registry.update(key + "/sum", v)
    registry.update(key + "/count", 1)
    registry.update(key + "/sumoffset", v - offset)
    registry.update(key + "/sumsqoffset", (v - offset) ** 2)


_register("AveragePut", "Adds the value to '<stat_name>/stat_value/sum' and 1 to '.../count'.", _average)
_register("IncrementPut", "Adds the value to '<stat_name>/stat_value'.", _increment)
_register("StdDevPut", "Adds the value to '<stat_name>/stat_value/sum', 1 to '.../count', and the value "
          "less the first value put (and its square) to '.../sumoffset' ('.../sumsqoffset').", _stddev)
