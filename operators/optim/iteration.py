"""Iter and AtomicIter (and CreateMutex where the runtime-object ops do not provide
it): the iteration counter Caffe2's optimizers step (utils.BuildUniqueMutexIter puts
the mutex and AtomicIter in the init/train nets). Both follow Caffe2's IncrementIter:
one value, re-typed to int64 when it is not, never negative, never past int64's max."""
import threading

import numpy as np

from caffe2py import inplace
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, TensorType, register_kernel, register_schema

_INT64_MAX = np.iinfo(np.int64).max


try:
    # Where caffe2py has its runtime-object ops (CreateMutex and the atomics, another
    # family), their mutex type and CreateMutex are the ones; AtomicIter takes that.
    from caffe2py.runtime_objects import Mutex
    _OWN_CREATE_MUTEX = False
except ImportError:
    _OWN_CREATE_MUTEX = True

    class Mutex:
        """The value of a CreateMutex blob (Caffe2 stores a std::mutex); `with mutex:` locks it."""

        def __init__(self):
            self._lock = threading.Lock()

        def __enter__(self):
            self._lock.acquire()
            return self

        def __exit__(self, *exc):
            self._lock.release()

        def __repr__(self):
            return "Mutex()"


if _OWN_CREATE_MUTEX:
    register_schema(OpSchema(
        "CreateMutex", num_inputs=0, num_outputs=1, outputs=("mutex_ptr",),
        inference=lambda ctx, ins: [TensorType(None, None)],
        doc="Creates a mutex blob, for AtomicIter (and atomic updates shared by several nets)."))
    register_kernel("CreateMutex")(lambda ctx: Mutex)


def next_count(ctx, index, counter):
    """(the counter's int64 value + 1, as an int64 array of the counter's shape), by
    Caffe2's IncrementIter. A counter of another dtype is re-typed the way Caffe2's
    mutable_data<int64_t> does it: an 8-byte numeric buffer is reused (its bits read as
    int64), any other is replaced by a fresh zero-filled one (Caffe2's CPU allocator
    zero-fills), so an int32 counter restarts from 0 and counts on in int64."""
    if not isinstance(counter, np.ndarray) or counter.size != 1:
        raise ctx.input_error(index, "the counter must hold one value, got %s %s"
                              % (getattr(counter, "dtype", type(counter).__name__), list(np.shape(counter))))
    if counter.dtype != np.int64:
        reused = counter.dtype.itemsize == 8 and counter.dtype.kind in "fiu"
        counter = np.ascontiguousarray(counter).view(np.int64) if reused else np.zeros(counter.shape, np.int64)
    value = int(counter.reshape(-1)[0])
    if value < 0:
        raise ctx.input_error(index, "the previous iteration number is negative (%d)" % value)
    if value == _INT64_MAX:
        raise ctx.input_error(index, "maximum iterations reached (%d): the counter would overflow" % value)
    return np.full(counter.shape, value + 1, np.int64)


register_schema(OpSchema(
    "Iter", num_inputs=(0, 1), num_outputs=1, enforce_inplace={(0, 0)},
    inference=lambda ctx, ins: [TensorType(ins[0].dims if ins else (1,), caffe2_pb2.TensorProto.INT64)],
    doc="Increments a one-value iteration counter (in place on input 0), re-typing it to int64 as "
        "Caffe2 does (an int32 counter restarts from 0). Caffe2's older form has no input: the "
        "output blob is incremented, or starts at 0 (so 1 after the first run) when it holds no tensor."))


@register_kernel("Iter")
def iter_kernel(ctx):
    if ctx.n_inputs:
        return lambda counter: next_count(ctx, 0, counter)
    ctx.use_workspace()
    name = ctx.outputs[0]

    def run(blobs):
        counter = blobs.get(name)
        if not isinstance(counter, np.ndarray):     # Caffe2: not a CPU tensor yet -> a new {0}
            counter = np.zeros((1,), np.int64)
        return next_count(ctx, 0, counter)
    return run


register_schema(OpSchema(
    "AtomicIter", num_inputs=2, num_outputs=1, enforce_inplace={(1, 0)},
    inputs=("mutex", "iter"), outputs=("iter",),
    inference=lambda ctx, ins: [ins[1]],
    doc="Increments the counter `iter` by one under `mutex`, in place, so nets run from "
        "several threads share one count (re-typed to int64 as Iter does)."))


def _count_iteration(stat_key):
    """Caffe2's AtomicIter counts its runs in the global stat registry under
    atomic_iter/stats/<counter blob>/num_iter (StatRegistryExport shows it)."""
    try:
        from caffe2py.runtime_objects import global_stat_registry
    except ImportError:               # no stat registry in this build: nothing to count into
        return
    global_stat_registry().update(stat_key, 1)


def _shared_counter(mutex, counter):
    """The array AtomicIter increments in place, the same one on every thread.

    Blob values are immutable elsewhere (inplace.py), and inplace.claim hands a kernel
    a private copy whenever anything else holds the array, which nets running
    concurrently on other threads do: their increments would then go to copies and be
    lost. So AtomicIter owns its counter array instead: the first run under a mutex
    replaces the fed array by a private copy (remembered on the mutex, so that a
    thread still holding the fed array gets the same copy, with its current count),
    and later runs write into that copy in place. Called with the mutex held."""
    owned = mutex.__dict__.setdefault("_atomic_iter_counters", {})
    for _, private in owned.values():
        if counter is private:
            return counter
    if id(counter) in owned and owned[id(counter)][0] is counter:
        return owned[id(counter)][1]          # another thread replaced this array already
    if len(owned) > 64:                       # counters re-fed many times: forget old ones
        owned.clear()
    private = np.array(counter, dtype=np.int64, copy=True)
    owned[id(counter)] = (counter, private)   # the original kept alive, so its id stays its own
    return private


@register_kernel("AtomicIter")
def atomic_iter(ctx):
    stat_key = "atomic_iter/stats/%s/num_iter" % ctx.op_def.input[1]

    def run(mutex, counter):
        if not isinstance(mutex, Mutex):
            raise ctx.input_error(0, "must be a mutex created by CreateMutex, got %s" % type(mutex).__name__)
        _count_iteration(stat_key)
        with mutex:
            if counter.dtype != np.int64:
                return next_count(ctx, 1, counter)      # re-typed: a new int64 blob, as Caffe2's
            counter = _shared_counter(mutex, counter)
            following = next_count(ctx, 1, counter)
            inplace.restore_all(counter)
            counter.reshape(-1)[0] = following.reshape(-1)[0]
        return counter
    return run
