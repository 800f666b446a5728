"""AtomicIter (and CreateMutex where the runtime-object ops do not provide it): the
shared iteration counter Caffe2's optimizers step (utils.BuildUniqueMutexIter puts
both in the init/train nets). Iter, the unguarded counter, lives in tensor.py."""
import threading

import numpy as np

from caffe2py import inplace
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


register_schema(OpSchema(
    "AtomicIter", num_inputs=2, num_outputs=1, enforce_inplace={(1, 0)},
    inputs=("mutex", "iter"), outputs=("iter",),
    inference=lambda ctx, ins: [ins[1]],
    doc="Increments the int64 counter `iter` by one under `mutex`, in place, so nets run from "
        "several threads share one count."))


@register_kernel("AtomicIter")
def atomic_iter(ctx):
    def run(mutex, counter):
        if not isinstance(mutex, Mutex):
            raise ctx.input_error(0, "must be a mutex created by CreateMutex, got %s" % type(mutex).__name__)
        if not isinstance(counter, np.ndarray) or counter.dtype != np.int64 or counter.size != 1:
            raise ctx.input_error(1, "the counter must be one int64 value, got %s %s"
                                  % (getattr(counter, "dtype", type(counter).__name__), list(np.shape(counter))))
        counter = inplace.claim(counter)
        with mutex:
            flat = counter.reshape(-1)
            if flat[0] == _INT64_MAX:
                raise ctx.input_error(1, "maximum iterations reached (%d)" % _INT64_MAX)
            inplace.restore_all(counter)
            flat[0] += 1
        return counter
    return run
