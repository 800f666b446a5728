"""Output arrays reused between runs of a net: a pool whose buffers are free when
nobody but the pool holds them.

Public:
    output_array(shape, dtype)    where a kernel gets the array it returns: np.empty
                                  when no pool is active on this thread, else a pooled
                                  C-contiguous array of that shape and dtype that
                                  nobody else holds (when the pooled buffer has
                                  another shape or more room: a reshaped view of its
                                  front)
    OutputPool()                  the buffers; `with pool:` makes it this thread's
                                  active pool for one net run (the executor does this
                                  once per run of a plan that drops its intermediates)
    NO_POOL                       `with NO_POOL:` turns pooling off for a nested run
                                  (a workspace net run from inside a pooled one)
    pooling_enabled()             False when CAFFE2PY_OUTPUT_POOL=0 (plans then make
                                  no pool: every output a new array, as before)

The rule for "free": a buffer is free when the pool's own entry is its only holder,
counted with sys.getrefcount (the technique caffe2py/inplace.py uses to tell an
array only the workspace holds). Anything else that holds it keeps it busy, and a
busy buffer is never handed out: a local of the running net that a later op still
reads, a view or reshape of it (a view holds its base), a workspace entry, an array
a caller fetched or got back from an earlier run. So the memory a net's dropped
intermediates leave behind is taken by the next outputs it has room for, within
the run and in the runs that follow, and nothing anyone can still see is ever
overwritten. Kernels know nothing of nets: they only ask output_array for memory.

What the pool keeps between runs (the sweep when a run ends):
  * free buffers this run took: the next run takes them again (a warm run of
    unchanged shapes allocates nothing);
  * buffers still busy (a returned output the caller holds) taken in this run or
    the one before: a caller looping `out = run(x)` holds the previous output while
    the next run computes, so two buffers alternate;
  * nothing else: free buffers this run did not take (the shapes changed) are let
    go at once, busy ones older than that are forgotten (they are the holder's).
So the pool holds about one run's worth of output memory.

Which buffer a request gets: the one the same request (the k-th of its shape and dtype
in a run) took last, when it is free (a warm run's requests find theirs without a
search); else the first free buffer of exactly its size; else the smallest free one
with room (best fit).

Threads: the active pool is per thread (a DAG net's worker threads have none unless
they enter one); taking a buffer is atomic under the pool's lock, so two threads
running the same plan never share a buffer.
"""
import math
import mmap
import os
import sys
import threading

import numpy as np

_state = threading.local()


def _probe_free_count():
    """sys.getrefcount of a buffer only the pool holds, as OutputPool.take and the
    sweep call it (the entry list's reference plus the call's argument)."""
    entry = [np.empty(1), 0]
    return sys.getrefcount(entry[0])


_FREE = _probe_free_count()

# a free buffer serves an output of up to MAX_SLACK times fewer elements: best fit
# over element counts took the pools of warm light model runs from 13.5 / 37 / 11 MB
# (exact sizes only) to 11.5 / 13 / 7.5 MB (resnet50 / densenet121 / inception_v2)
MAX_SLACK = 4
# buffers from this size up get their own memory mapping (_new_buffer)
MAPPED_MIN_BYTES = 1 << 16


def _new_buffer(shape, dtype):
    """A pooled buffer. Large ones live in their own anonymous mapping, not on
    malloc's heap: pinned for many runs among the heap's short-lived blocks, they kept
    the heap from reusing the space around them (light_resnet50's warm peak RSS, with
    an 11.5 MB pool: 15 MB above the unpooled runs' on the heap, 10 MB mapped). Such a
    buffer is the 1-D array over the mapping itself and is always handed out as a
    view of it: NumPy points every view at that array (the first one up the chain
    whose base is not an array), so every view counts as a holder."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MAPPED_MIN_BYTES or dtype.kind not in "biufc":    # no object arrays over raw memory
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype)


def pooling_enabled():
    return os.environ.get("CAFFE2PY_OUTPUT_POOL", "1").strip().lower() not in ("0", "false", "no", "off")


def output_array(shape, dtype):
    """A C-contiguous array of `shape` and `dtype` for a kernel to fill and return;
    its contents are undefined (as np.empty's)."""
    pool = getattr(_state, "pool", None)
    if pool is None:
        return np.empty(shape, dtype)
    return pool.take(shape, dtype)


def prefer(arrays):
    """Inside (this thread, a pool active): output_array serves these C-contiguous
    arrays first, each to the first request of its shape and dtype, then the pool's.
    kernel_replay.py runs an op it does not replay as kernel calls this way, so that its
    outputs land where the recorded calls after it read them."""
    return _Preferring(arrays)


def active_pool():
    """This thread's active pool, or None."""
    return getattr(_state, "pool", None)


def _activate(pool):
    """Make `pool` (None: no pool) this thread's active one until the matching _restore."""
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    stack.append(getattr(_state, "pool", None))
    _state.pool = pool


def _restore():
    """Reactivate the pool active before the last _activate on this thread; return it."""
    _state.pool = _state.stack.pop()
    return _state.pool


class OutputPool:
    """Buffers by dtype, handed out best fit: the smallest free one with room for the
    output (at most MAX_SLACK times its size, so a small output never pins a large
    buffer). Counts allocations (new buffers) and reuses."""

    def __init__(self):
        self._entries = {}       # dtype.str -> [[array, run it was last taken in], ...]
        # (dtype.str, element count) -> the same entries, in the same order: a warm run
        # finds its exact fit among the few of its size, not by scanning every buffer
        self._exact = {}
        self._requests = {}      # (shape, dtype) as asked -> _request's normal form
        # ((shape, dtype) as asked, k) -> the entry the k-th such request of a run took
        # last: a warm run's requests come in the same order and find theirs free again,
        # without a search (the best-fit scan over every buffer cost ~4% of ShuffleNet's
        # run, many of whose outputs are views of larger buffers; one hint per (shape,
        # dtype) missed for all but one of the ops sharing an output shape)
        self._hints = {}
        self._asked = {}         # (shape, dtype) -> requests of it so far in this run
        self._lock = threading.Lock()
        self._run = 0            # runs entered so far (the sweep's clock)
        self.allocations = 0
        self.reuses = 0

    # ---------------------------------------------------------------- taking

    def take(self, shape, dtype):
        key = (shape, dtype)
        try:
            shape, dtype, exact = self._requests[key]
        except (KeyError, TypeError):        # a new request, or a list shape
            shape, dtype, exact = self._request(shape, dtype)
            key = None
        size = exact[1]
        with self._lock:         # check-and-take is atomic: two threads never share one
            if key is not None:
                k = self._asked.get(key, 0)
                self._asked[key] = k + 1
                key = (key, k)
                hint = self._hints.get(key)
                if hint is not None and hint[1] >= 0 and sys.getrefcount(hint[0]) == _FREE:
                    return self._hand_out(hint, shape, size)
            array, entry = self._take_locked(shape, dtype, exact, size)
            if key is not None:
                if len(self._hints) >= 4096:
                    self._hints.clear()
                self._hints[key] = entry
            return array

    def _hand_out(self, entry, shape, size):
        """entry's buffer as an array of `shape` (`size` elements), taken in this run."""
        entry[1] = self._run
        self.reuses += 1
        array = entry[0]
        if array.shape == shape:
            return array
        return (array if array.size == size else array.reshape(-1)[:size]).reshape(shape)

    def _take_locked(self, shape, dtype, exact, size):
        """(array, its entry): the best free fit, else a new buffer (self._lock held)."""
        # an exact fit is the best fit, and the first free one is the one the scan below
        # would stop at
        for entry in self._exact.get(exact, ()):
            if sys.getrefcount(entry[0]) == _FREE:
                return self._hand_out(entry, shape, size), entry
        entries = self._entries.get(dtype.str)
        if entries is None:
            entries = self._entries[dtype.str] = []
        best = None
        for entry in entries:
            have = entry[0].size
            if size <= have <= MAX_SLACK * max(size, 1) and (best is None or have < best[0].size) \
                    and sys.getrefcount(entry[0]) == _FREE:
                best = entry
                if have == size:
                    break
        if best is not None:
            return self._hand_out(best, shape, size), best
        array = _new_buffer(shape, dtype)
        entry = [array, self._run]
        entries.append(entry)
        self._exact.setdefault((dtype.str, array.size), []).append(entry)
        self.allocations += 1
        return (array if array.shape == shape else array.reshape(shape)), entry

    def _request(self, shape, dtype):
        """(shape tuple, dtype, (dtype.str, element count)) of a take's arguments,
        remembered per hashable (shape, dtype): a net asks for the same few each run."""
        key = (shape, dtype)
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        found = (shape, dtype, (dtype.str, math.prod(shape)))
        try:
            if len(self._requests) >= 4096:
                self._requests.clear()
            self._requests[key] = found
        except TypeError:
            pass
        return found

    # ---------------------------------------------------------------- one run

    def __enter__(self):
        _activate(self)
        with self._lock:
            self._run += 1
            self._asked = {}
        return self

    def __exit__(self, exc_type, exc, tb):
        restored = _restore()
        if restored is not self and getattr(restored, "pool", None) is not self:
            self.sweep()                    # the outermost run of this pool on this thread
        return False

    def sweep(self):
        """Keep what the next run will want (see the module's docstring)."""
        with self._lock:
            now = self._run
            for key in list(self._entries):
                kept = []
                for entry in self._entries[key]:
                    if entry[1] == now if sys.getrefcount(entry[0]) == _FREE else entry[1] >= now - 1:
                        kept.append(entry)
                    else:        # let go (the pool's reference too): no hint takes it again
                        entry[0], entry[1] = None, -1
                if kept:
                    self._entries[key] = kept
                else:
                    del self._entries[key]
            self._exact = {}
            for key, entries in self._entries.items():
                for entry in entries:
                    self._exact.setdefault((key, entry[0].size), []).append(entry)

    # ---------------------------------------------------------------- looking

    def entry_holding(self, start, stop):
        """The pool's entry ([buffer, run]) whose buffer holds the bytes [start, stop),
        or None. Holding the entry list does not hold the buffer in the sense of the
        free rule: kernel_replay.py notes a run's pooled arrays this way without
        keeping the pool from reusing them within that run."""
        with self._lock:
            for entries in self._entries.values():
                for entry in entries:
                    buffer = entry[0]
                    if buffer is None:
                        continue
                    base = buffer.__array_interface__["data"][0]
                    if base <= start and stop <= base + buffer.nbytes:
                        return entry
        return None

    def held_bytes(self):
        """Bytes of every buffer the pool holds, free or busy."""
        with self._lock:
            return sum(entry[0].nbytes for entries in self._entries.values() for entry in entries)

    def buffer_count(self):
        with self._lock:
            return sum(len(entries) for entries in self._entries.values())


class _Preferring:
    """The active pool while `prefer(arrays)` is open: those arrays first, then the pool."""
    __slots__ = ("pool", "arrays")

    def __init__(self, arrays):
        self.arrays = [a for a in arrays if isinstance(a, np.ndarray) and a.flags.c_contiguous]

    def __enter__(self):
        self.pool = getattr(_state, "pool", None)
        _activate(self if self.pool is not None else None)
        return self

    def __exit__(self, exc_type, exc, tb):
        _restore()
        return False

    def take(self, shape, dtype):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        for i, array in enumerate(self.arrays):
            if array.shape == shape and array.dtype == dtype:
                del self.arrays[i]
                return array
        return self.pool.take(shape, dtype)


class _NoPool:
    """`with NO_POOL:` for a run whose outputs must be plain arrays."""
    __slots__ = ()

    def __enter__(self):
        _activate(None)
        return self

    def __exit__(self, exc_type, exc, tb):
        _restore()
        return False


NO_POOL = _NoPool()
