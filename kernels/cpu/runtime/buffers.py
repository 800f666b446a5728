"""Reusable buffers for kernels: per-op scratch and per-thread temporaries.

Public:
    Scratch(max_entries=None)     buffers owned by one op, keyed by role, shape, dtype
                                  and calling thread; .empty(...), .zeros(...)
    default_scratch()             a bounded per-thread Scratch for callers without one
    temp_buffer(role, shape, dtype)
                                  a per-thread grow-only block for values that live only
                                  inside one kernel call
    team_work(per_thread, dtype) -> (block, stride)
                                  work space for compiled team kernels: region t of the
                                  block belongs to team thread t, at the same address in
                                  every layer
"""
import math
import threading
from collections import OrderedDict

import numpy as np


class Scratch:
    """Buffers reused across runs, keyed by role, shape, dtype and the calling thread
    (so one op run from two threads at once never shares a buffer); the least
    recently used go once more than `max_entries` are held."""

    def __init__(self, max_entries=None):
        self._buffers = OrderedDict()
        self.max_entries = max_entries
        self._lock = threading.Lock()

    def _get(self, key, make):
        with self._lock:
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = make()
                if self.max_entries is not None and len(self._buffers) > self.max_entries:
                    self._buffers.popitem(last=False)
            elif self.max_entries is not None:
                self._buffers.move_to_end(key)
            return buf

    def empty(self, role, shape, dtype):
        return self._get((threading.get_ident(), role, tuple(shape), np.dtype(dtype).str),
                         lambda: np.empty(shape, dtype))

    def zeros(self, role, shape, dtype, fill=0.0):
        """A buffer whose border is `fill`; callers only ever rewrite its interior."""
        return self._get((threading.get_ident(), role, tuple(shape), np.dtype(dtype).str, fill),
                         lambda: np.full(shape, fill, dtype))


_thread_scratch = threading.local()


def default_scratch():
    """Per-thread buffers for callers that pass no Scratch (bounded, so shapes seen
    once do not pile up)."""
    scratch = getattr(_thread_scratch, "value", None)
    if scratch is None:
        scratch = _thread_scratch.value = Scratch(max_entries=64)
    return scratch


def temp_buffer(role, shape, dtype):
    """A per-thread buffer for values that live only inside one kernel call (tap stacks,
    im2col tiles, Winograd transforms), shared by every op run on this thread: one
    grow-only block per role, so a net's layers keep reusing the same cache-warm memory
    instead of each touching its own (op-owned buffers of every layer add up to more
    than the caches hold). Never returned to callers."""
    buffers = getattr(_thread_scratch, "temp", None)
    if buffers is None:
        buffers = _thread_scratch.temp = {}
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize      # math.prod: np.prod costs ~3 us a call
    block = buffers.get(role)
    if block is None or block.nbytes < nbytes:
        block = buffers[role] = np.empty(max(1, -(-nbytes // 8)), np.float64)
    return block.view(np.uint8)[:nbytes].view(dtype).reshape(shape)


# Team threads' regions start on page boundaries, so no cache line or page is shared.
_REGION_ALIGN = 4096


def team_work(per_thread, dtype):
    """(block, stride) for a parallel kernel whose threads each need `per_thread` values:
    a 1-D block (of this Python thread, grow-only, shared by every layer) in which team
    thread t (numba.get_thread_id()) uses block[t * stride:t * stride + per_thread].

    Each region starts at the same address whatever the layer's size, so a thread keeps
    finding its own region in its own cache from one layer to the next. (Per-block
    slices of a shared buffer started where the previous layer's other thread had
    written: squeezenet ran 1.6-6% slower with them than with op-owned buffers.) One
    region per thread numba may start, so any thread id is in range; regions no thread
    uses are never touched and take no memory."""
    dtype = np.dtype(dtype)
    blocks = getattr(_thread_scratch, "team_work", None)
    if blocks is None:
        blocks = _thread_scratch.team_work = {}
    found = blocks.get(dtype.str)
    if found is None or found[1] < per_thread:
        import numba
        step = max(1, _REGION_ALIGN // dtype.itemsize)
        stride = -(-max(1, per_thread) // step) * step
        found = blocks[dtype.str] = (np.empty(numba.config.NUMBA_NUM_THREADS * stride, dtype), stride)
    return found
