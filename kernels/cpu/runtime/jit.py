"""Compiled CPU loops: numba's njit with the project's settings, compiled lazily, and
the one team of threads they run on.

Some kernels cannot be written as a few NumPy calls without extra passes over
memory (a depthwise convolution is nine multiply-adds per output, a pooling window
a handful of maxima; as NumPy calls each is a separate pass with its own Python
overhead). Those kernels are plain Python loops compiled by numba to vectorised
machine code.

    @compiled                       # or @compiled(fastmath=("contract", "reassoc"))
    def _kernel(x, out): ...

    @compiled(parallel=True)        # prange loops run on the team
    def _kernel(x, out, blocks):
        for t in prange(blocks): ...

    _kernel(x, out)                 # compiles on the first call, then calls machine code

A kernel may call another (serial) kernel; the callee is linked into the caller's
machine code. Helpers called per short row are better inlined into the caller's
numba IR, `@compiled(inline=True)` (pool.py's row combine as a call: 3x3/s2 max on
256x27x27 63 -> 80 us; inlined: 60). The disk cache is invalidated by edits to the caller's source file
only, so keep callees in their caller's module (or clear `__pycache__/*.nbi|*.nbc`).

Settings and why:
  * lazy: `import caffe2py` does not import numba (0.35 s); the first call does.
  * cache: machine code is cached on disk (next to the module, or numba's user cache
    when that is not writable), so later processes load a kernel in milliseconds
    instead of compiling it for ~0.5 s.
  * nogil: kernels release the GIL.
  * fastmath: 'contract' only by default (fused multiply-add): NaN, inf and signed
    zeros keep IEEE semantics, so results match the NumPy kernels'.
  * no bounds checks: callers check shapes before calling (every kernel's docstring
    says what it assumes).

The team. Parallel kernels split their work into `team_blocks(...)` blocks and run
them with numba's prange on numba's threads (OpenMP where available): starting a
parallel region costs ~3 us, where handing work to a Python pool thread costs ~57 us.
Those threads spin for a while when idle, and so do OpenBLAS's: two spinning teams
on the same cores stall each other (a 0.09 ms loop took 6.5 ms right after a
2-thread GEMM, measured). So while caffe2py's kernels run (`team()`, which the
executor enters around every net run and GEMM-calling kernels enter themselves),
OpenBLAS is set to one thread and caffe2py's GEMMs are split over the team instead
(blas.py): one team, never two.

Loops vectorise when their inner index runs over plain slices: write
`x0 = row[a:a + n]` then `x0[i]`, not `row[i + a]` (numba must allow a negative
index there, which stops LLVM's vectoriser: 5-9x slower, measured).
"""
import threading

from .threads import num_threads

_DEFAULT_FASTMATH = ("contract",)
_lock = threading.RLock()

class LazyGlobal:
    """A name compiled kernels use whose module imports numba: the kernel's module
    holds this placeholder, and compiling the kernel puts the real object in its place
    (in the kernel's module namespace), so importing caffe2py does not import numba."""
    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name

    def load(self):
        import importlib
        return getattr(importlib.import_module(self.module, __package__), self.name)


# Kernel modules write `from .jit import prange` and loop `for t in prange(blocks)`;
# numba recognises prange by identity, so the placeholder is swapped before compiling.
prange = LazyGlobal("numba", "prange")
call_gemm = LazyGlobal(".blas_calls", "call_gemm")
thread_id = LazyGlobal("numba", "get_thread_id")      # this team thread's number, in a prange body
call_gemv = LazyGlobal(".blas_calls", "call_gemv")


class CompiledKernel:
    """A Python function that numba compiles on its first call."""

    def __init__(self, fn, fastmath=_DEFAULT_FASTMATH, parallel=False, inline=False):
        self.py_func = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._options = dict(cache=True, nogil=True, boundscheck=False, fastmath=set(fastmath))
        if parallel:
            self._options["parallel"] = True
        if inline:
            self._options["inline"] = "always"
        self._dispatcher = None
        self._serialized = None      # parallel launches must take _launch_lock (known after the first call)

    @property
    def dispatcher(self):
        """numba's dispatcher for the function (imports numba on first use)."""
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    import numba
                    namespace = self.py_func.__globals__
                    for name in self.py_func.__code__.co_names:
                        if isinstance(namespace.get(name), LazyGlobal):
                            namespace[name] = namespace[name].load()
                        elif isinstance(namespace.get(name), CompiledKernel):
                            # a kernel calling a kernel: numba types the callee by its
                            # dispatcher (serial callees only; the lock is re-entrant)
                            namespace[name] = namespace[name].dispatcher
                    self._dispatcher = numba.njit(**self._options)(self.py_func)
        return self._dispatcher

    def __call__(self, *args):
        dispatcher = self._dispatcher or self.dispatcher
        if self._serialized is None:
            self._serialized = bool(self._options.get("parallel")) and _serial_launches()
        if self._serialized:
            with _launch_lock:
                return dispatcher(*args)
        return dispatcher(*args)


_launch_lock = threading.Lock()
_layer = []


def _serial_launches():
    """Whether parallel kernels must not be launched from two threads at once: numba's
    own "workqueue" threading layer (used when neither OpenMP nor TBB is installed)
    aborts the process on concurrent launches; its OpenMP and TBB layers do not."""
    if not _layer:
        import numba
        import numpy as np
        _probe.dispatcher(np.zeros(2))        # starts numba's threading layer
        _layer.append(numba.threading_layer())
    return _layer[0] == "workqueue"


def _probe_fn(a):
    for i in prange(a.size):
        a[i] = i


_probe = CompiledKernel(_probe_fn, parallel=True)


def compiled(fn=None, *, fastmath=_DEFAULT_FASTMATH, parallel=False, inline=False):
    """Decorator: `fn` becomes a CompiledKernel (see the module docstring)."""
    if fn is None:
        return lambda f: CompiledKernel(f, fastmath, parallel, inline)
    return CompiledKernel(fn, fastmath, parallel, inline)


# ----------------------------------------------------------------- the team

# Below this much work (elements or multiply-adds) one block is best: a parallel
# region's start and join cost about what one thread needs for ~20-30k elements.
TEAM_MIN_WORK = 1 << 15
_team_size = None
_blas_depth = [0, None]          # entries into team() on any thread, OpenBLAS's count before
_team_lock = threading.Lock()


def team_size():
    """Threads in the team: CAFFE2PY_NUM_THREADS, else min(4, CPUs), at most numba's."""
    global _team_size
    if _team_size is None:
        import numba
        _team_size = max(1, min(num_threads(), numba.config.NUMBA_NUM_THREADS))
    return _team_size


def team_blocks(count, work_per_item):
    """How many blocks to split `count` items of `work_per_item` each into."""
    if count <= 1 or count * work_per_item < TEAM_MIN_WORK:
        return 1
    return min(count, team_size())


def in_team():
    """Whether some thread is inside team() (OpenBLAS on one thread meanwhile)."""
    return _blas_depth[0] > 0


class team:
    """Context: caffe2py's kernels run on the team; OpenBLAS on one thread meanwhile
    (restored when the outermost entry on any thread leaves). Cheap to re-enter."""
    __slots__ = ()

    def __enter__(self):
        # nested entries on one thread (a conv inside a net run, a GEMM inside a conv)
        # only count: ~1.5 us less per kernel call
        nested = getattr(_this_thread, "depth", 0)
        _this_thread.depth = nested + 1
        if nested:
            return self
        with _team_lock:
            _blas_depth[0] += 1
            if _blas_depth[0] == 1:
                from .blas import blas_threads, set_blas_threads
                before = blas_threads()
                _blas_depth[1] = before
                if before != 1:
                    set_blas_threads(1)
        _use_team_size()
        return self

    def __exit__(self, *exc):
        _this_thread.depth -= 1
        if _this_thread.depth:
            return False
        with _team_lock:
            _blas_depth[0] -= 1
            if _blas_depth[0] == 0 and _blas_depth[1] not in (None, 1):
                from .blas import set_blas_threads
                set_blas_threads(_blas_depth[1])
        return False


_this_thread = threading.local()      # team() nesting depth, numba thread count last set


def _use_team_size():
    # numba's thread count is per calling thread
    if getattr(_this_thread, "size", None) != team_size():
        import numba
        numba.set_num_threads(team_size())
        _this_thread.size = team_size()
