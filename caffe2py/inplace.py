"""Blobs that ops update in place, and undoing those updates when a net run fails.

Blob values are otherwise immutable: kernels return new arrays and several blobs may
share one array (Alias, a Reshape view, a GivenTensorFill constant). Optimizer ops
are the exception Caffe2 makes on purpose: SparseAdagrad, ScatterWeightedSum and
their kind update a few rows of a parameter table that may hold millions, and a copy
of the table per step would cost far more than the update. So those kernels

  * `claim(x)` the array first: they get the workspace's array itself when nothing
    but the workspace entry holds it (counted with sys.getrefcount against a probe of
    the executor's own calling pattern, measured once), else a private writable copy
    (a shared constant, an aliased or viewed table, a read-only array): then the
    update is the op's output like any other, and nobody else sees it;
  * `remember(restore)` how to undo their writes (the touched rows' old values,
    which the kernels copy aside as they update: `row_buffer` / `remember_rows`), so
    that a net failing after them still leaves the workspace exactly as it was (the
    executor's promise): `Plan.run` runs every net inside `undo_on_failure()`, which
    calls the restores, newest first, when the run raises.

Call `claim` from the kernel callable on its own argument: any other name for the
array (a local alias, a list holding it) counts as another holder and costs a copy.
A caller that adds holders of every argument on purpose (the per-op timer's wrapper
around each kernel, executor.Plan.timed_runner) says how many with `extra_holders(n)`
around the run.
"""
import contextlib
import sys
import threading

import numpy as np

_state = threading.local()


# ----------------------------------------------------------------- ownership

def _count_refs(array):
    return sys.getrefcount(array)


def _probe(wrap=None):
    """The reference count `claim` sees for an array only the workspace holds: the
    executor's generated runner loads the blob into a local and calls the kernel
    with it (executor.Plan._render); the kernel passes it to claim. wrap: the kernel
    is called through wrap(kernel) instead."""
    blobs = {"x": np.empty(1)}

    def kernel(x):
        return _count_refs(x)
    call = kernel if wrap is None else wrap(kernel)

    def runner(b):
        v = b["x"]
        return call(v)
    return runner(blobs)


_BASELINE = _probe()


def holders_added_by(wrap):
    """How many more holders every kernel argument has when the generated runner calls
    the kernels through wrap(kernel) (a wrapper's argument tuples): the count to give
    extra_holders around such runs."""
    return _probe(wrap) - _BASELINE


def claim(array):
    """`array` itself when this op may write into it, else a private writable copy
    (C-contiguous, owning its memory)."""
    if (isinstance(array, np.ndarray) and array.flags.writeable and array.flags.c_contiguous
            and array.flags.owndata and sys.getrefcount(array) <= _BASELINE + getattr(_state, "extra", 0)):
        return array
    return np.array(array, copy=True, order="C")


@contextlib.contextmanager
def extra_holders(count):
    """Inside: every kernel argument on this thread has `count` more holders than the
    generated runner's calling pattern gives it (a wrapper's argument tuple)."""
    before = getattr(_state, "extra", 0)
    _state.extra = before + count
    try:
        yield
    finally:
        _state.extra = before


# ----------------------------------------------------------------- undo log

def _stack():
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


def recording():
    """Whether a net run on this thread is collecting undo records."""
    stack = getattr(_state, "stack", None)
    return bool(stack)


def remember(restore):
    """Note `restore()` as the way to undo a write that follows; a no-op outside a
    net run (a kernel called directly)."""
    stack = getattr(_state, "stack", None)
    if stack:
        stack[-1].append(restore)


def row_buffer(array, rows):
    """A buffer for the old values of array[rows] that a row-update kernel fills as it
    goes (saved[i] = the row before update i), or None outside a net run."""
    if not recording():
        return None
    return np.empty((rows.shape[0],) + array.shape[1:], array.dtype)


def remember_rows(array, rows, saved):
    """After a kernel filled `saved` (row_buffer): undo restores each row from its
    first occurrence in `rows`, the value it had before the op."""
    if saved is None:
        return

    def restore():
        _, first = np.unique(rows, return_index=True)
        array[rows[first]] = saved[first]
    remember(restore)


def restore_all(array):
    """Remember all of `array` (small blobs: counters)."""
    if recording():
        saved = array.copy()
        remember(lambda: np.copyto(array, saved))


class undo_on_failure:
    """Context for one net run: if it raises, undo its in-place writes (newest first);
    if it succeeds inside an enclosing run, the enclosing run inherits the records."""
    __slots__ = ()

    def __enter__(self):
        _stack().append([])
        return self

    def __exit__(self, exc_type, exc, tb):
        stack = _state.stack
        records = stack.pop()
        if exc_type is not None:
            for restore in reversed(records):
                restore()
        elif stack and records:
            stack[-1].extend(records)
        return False


class collect_undo:
    """undo_on_failure for a part of a net run on another thread (a branch the parallel
    executor runs on a worker): if the part raises, its writes are undone at once;
    if it succeeds, its records are kept in `records` for the run's own thread to
    `adopt`, so that a later failure anywhere in the run undoes them too."""
    __slots__ = ("records",)

    def __init__(self):
        self.records = []

    def __enter__(self):
        _stack().append([])
        return self

    def __exit__(self, exc_type, exc, tb):
        records = _state.stack.pop()
        if exc_type is not None:
            for restore in reversed(records):
                restore()
        else:
            self.records = records
        return False


def adopt(records):
    """Add undo records collected on another thread (collect_undo) to this thread's
    run, after those it holds (they are undone newest first, as if written here)."""
    stack = getattr(_state, "stack", None)
    if stack and records:
        stack[-1].extend(records)
