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
256x27x27 63 -> 80 us; inlined: 60). The disk cache is keyed by the caller's source file
only, so keep callees in their caller's module (or run `caffe2py cache clear`).

Settings and why:
  * lazy: `import caffe2py` does not import numba (0.35 s); the first call does.
  * cache: machine code is cached on disk in the user's cache folder, never the
    install tree (cache.py), so later processes load a kernel in milliseconds instead
    of compiling it for ~0.5 s.
  * nogil: kernels release the GIL.
  * fastmath: 'contract' only by default (fused multiply-add): NaN, inf and signed
    zeros keep IEEE semantics, so results match the NumPy kernels'.
  * no bounds checks: callers check shapes before calling (every kernel's docstring
    says what it assumes).
  * buffers a kernel reaches through an address (simd.address, .ctypes.data) belong to
    its caller (an argument, buffers.team_work / temp_buffer): numba frees an array
    made inside a kernel after its last use as an array, and writes through its
    address then land in freed heap (direct conv did so: other threads' batches were
    corrupted and glibc aborted now and then). tests/test_kernel_buffer_ownership.py
    reads every kernel's source for it.

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
import atexit
import sys
import threading

from . import compiler_pages
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


# thread ident -> observer(kernel, machine code or None, args, result), called after each of
# that thread's kernel calls while it records a net run's kernel calls (caffe2py/kernel_replay.py);
# empty otherwise, and then a call costs one truth test more
call_observers = {}


class CompiledKernel:
    """A Python function that numba compiles on its first call (see the module
    docstring), with an optional NumPy twin that stands in until it is compiled."""

    def __init__(self, fn, fastmath=_DEFAULT_FASTMATH, parallel=False, inline=False, error_model=None):
        self.py_func = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._options = dict(cache=True, nogil=True, boundscheck=False, fastmath=set(fastmath))
        if error_model is not None:     # "numpy": x / 0 gives inf/nan as NumPy does, no exception
            self._options["error_model"] = error_model
        if parallel:
            self._options["parallel"] = True
        if inline:
            self._options["inline"] = "always"
        self._dispatcher = None
        self._run = None             # what a call runs once machine code is loaded
        self.twin = None             # NumPy function with the kernel's arguments and effect
        self._waiting = None         # [signature, next time to look in the cache, time queued] while a worker compiles
        _all_kernels.append(self)

    def numpy_twin(self, fn):
        """Decorator: `fn` computes what this kernel computes, with NumPy, from the same
        arguments. Calls run it while the kernel compiles in the background (and in
        CAFFE2PY_JIT=numpy mode); tests check the two agree."""
        self.twin = fn
        return fn

    @property
    def dispatcher(self):
        """numba's dispatcher for the function (imports numba on first use)."""
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    import numba
                    from .cache import install_locator
                    install_locator()
                    namespace = self.py_func.__globals__
                    for name in self.py_func.__code__.co_names:
                        if isinstance(namespace.get(name), LazyGlobal):
                            namespace[name] = namespace[name].load()
                        elif isinstance(namespace.get(name), CompiledKernel):
                            # a kernel calling a kernel: numba types the callee by its
                            # dispatcher (serial callees only; the lock is re-entrant)
                            namespace[name] = namespace[name].dispatcher
                    if self._reads_thread_id():
                        # numba.get_thread_id() links to the threading layer's symbol:
                        # compiling starts the layer, but machine code loaded from the
                        # disk cache before it started called a null pointer (a serial
                        # copy's first call in a new process: a stride-2 depthwise
                        # conv segfaulted in every process after the one that compiled it)
                        _serial_launches()
                    self._dispatcher = numba.njit(**self._options)(self.py_func)
        return self._dispatcher

    def __call__(self, *args):
        run = self._run
        if run is not None and not call_observers:
            return run(*args)
        return self._observed_call(run, args)

    def _observed_call(self, run, args):
        """A call while some thread records kernel calls (call_observers): this
        thread's observer, if any, sees it once it returned."""
        result = run(*args) if run is not None else self._first_calls(*args)
        observer = call_observers.get(threading.get_ident())
        if observer is not None:
            observer(self, run, args, result)
        return result

    def _use_machine_code(self):
        dispatcher = self.dispatcher
        compiler_pages.note_linked()     # the team's outermost exit hands LLVM's pages back
        if getattr(_this_thread, "depth", 0):
            _use_team_size()        # inside team(): numba may have been imported just now
        if self._options.get("parallel") and _serial_launches():
            def run(*args):
                with _launch_lock:
                    return dispatcher(*args)
            self._run = run
        else:
            self._run = dispatcher

    def _reads_thread_id(self):
        import numba
        namespace = self.py_func.__globals__
        return any(namespace.get(name) is numba.get_thread_id for name in self.py_func.__code__.co_names)

    def _first_calls(self, *args):
        """Calls until machine code is loaded: from the disk cache when it is there;
        otherwise compiled here (inline mode, or no twin), or by a background worker
        while the twin computes (background mode), or never (numpy mode)."""
        mode = jit_mode()
        if self.twin is not None and mode == "numpy":
            return self.twin(*args)
        if self.twin is None or mode == "inline":
            if not self._in_cache(args):
                _announce_inline_compile(self)
            self._use_machine_code()
            return self._run(*args)
        # background mode
        if self._waiting is None:
            sig = self._signature(args)
            if self._load_cached(sig):
                self._use_machine_code()
                return self._run(*args)
            from . import background
            background.submit(self, sig)
            background.start_workers()
            _queued.append(self)
            _unannounced.append(self)
            import time
            self._waiting = [sig, 0.0, time.monotonic()]
        else:
            import time
            sig, next_look, queued_at = self._waiting
            now = time.monotonic()
            if now >= next_look:
                self._waiting[1] = now + _LOOK_INTERVAL
                if self._load_cached(sig):
                    self._waiting = None
                    self._use_machine_code()
                    return self._run(*args)
                # Workers run at idle priority: a job that keeps every CPU busy starves
                # them, and would stay on the twin to its end. Past this point the job is
                # long enough that compiling here costs less than the twin's slowness.
                if self._background_failed(sig) or now - queued_at > _COMPILE_HERE_AFTER:
                    self._waiting = None
                    _announce_inline_compile(self)
                    self._use_machine_code()    # compile here: the error surfaces, or it works
                    return self._run(*args)
        return self.twin(*args)

    def _background_failed(self, sig):
        from . import background
        state = background.job_state(self, sig)
        return state is not None and state.startswith("failed")

    def _signature(self, args):
        dispatcher = self.dispatcher
        return tuple(dispatcher.typeof_pyval(a) for a in args)

    def _in_cache(self, args):
        try:
            return self._load_cached(self._signature(args))
        except Exception:            # noqa: BLE001 - numba internals moved: just compile
            return False

    def _load_cached(self, sig):
        """Load machine code for `sig` from the disk cache into the dispatcher, as
        numba's Dispatcher.compile does before compiling. True when it is there."""
        from numba.core.compiler_lock import global_compiler_lock
        dispatcher = self.dispatcher
        with global_compiler_lock:
            if tuple(sig) in dispatcher.overloads:
                return True
            cres = dispatcher._cache.load_overload(sig, dispatcher.targetctx)
            if cres is None:
                return False
            if not cres.objectmode:
                dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            return True

    def ready(self):
        """Whether calls run machine code now."""
        return self._run is not None


_LOOK_INTERVAL = 0.1            # seconds between looks in the cache while a worker compiles
_COMPILE_HERE_AFTER = 30.0      # seconds on the twin before a still-running process compiles itself
_all_kernels = []
_queued = []                    # kernels handed to background workers by this process
_unannounced = []               # ... not yet reported on stderr
_MODES = ("background", "inline", "numpy")
_mode = []


def jit_mode():
    """How kernels get their machine code: CAFFE2PY_JIT = background (default: a
    kernel not in the disk cache runs its NumPy twin while a background process
    compiles it), inline (compile on the first call and wait), numpy (twins only,
    never compile; kernels without a twin still compile)."""
    if not _mode:
        import os
        mode = os.environ.get("CAFFE2PY_JIT", "background").strip().lower() or "background"
        if mode not in _MODES:
            raise ValueError("CAFFE2PY_JIT must be one of %s, got '%s'" % (", ".join(_MODES), mode))
        _mode.append(mode)
    return _mode[0]


# set_jit_mode calls so far: recorded kernel calls (kernel_replay.py) hold machine code
# that a mode switch takes away from every kernel
mode_changes = [0]


def set_jit_mode(mode):
    """Switch modes in this process (tests, benchmarks). Kernels go back to their first
    calls, so switching to numpy makes every kernel with a twin run it."""
    if mode not in _MODES:
        raise ValueError("mode must be one of %s" % (_MODES,))
    _mode[:] = [mode]
    mode_changes[0] += 1
    for kernel in _all_kernels:
        kernel._run = None
        kernel._waiting = None


def _announce_background():
    from .progress import announce_background
    kernels = list(_unannounced)
    del _unannounced[:]
    announce_background(kernels)


@atexit.register
def _announce_at_exit():
    # kernels queued outside a team() block (whose exit announces them) are told at exit
    if _unannounced:
        _announce_background()


def wait_for_kernels(timeout=None):
    """Block until every kernel this process handed to background workers runs
    machine code (a progress bar on a terminal). Benchmarks call this before timing."""
    from .progress import wait_for
    return wait_for(_queued, timeout)


def kernels_waiting():
    """Whether some kernel this process handed to a background compiler still runs as
    its NumPy twin (a timed run now would time the twin)."""
    return any(k._waiting is not None for k in _queued)


def _announce_inline_compile(kernel):
    from .progress import announce_inline
    announce_inline(kernel)


_launch_lock = threading.Lock()
_layer = []


def _serial_launches():
    """Whether parallel kernels must not be launched from two threads at once: numba's
    own "workqueue" threading layer (used when neither OpenMP nor TBB is installed)
    aborts the process on concurrent launches; its OpenMP and TBB layers do not."""
    if not _layer:
        import numba
        from numba.np.ufunc import parallel
        parallel._launch_threads()            # starts numba's threading layer (no compile)
        _layer.append(numba.threading_layer())
    return _layer[0] == "workqueue"


def compiled(fn=None, *, fastmath=_DEFAULT_FASTMATH, parallel=False, inline=False, error_model=None):
    """Decorator: `fn` becomes a CompiledKernel (see the module docstring)."""
    if fn is None:
        return lambda f: CompiledKernel(f, fastmath, parallel, inline, error_model)
    return CompiledKernel(fn, fastmath, parallel, inline, error_model)


def serial_variant(kernel, name):
    """A copy of parallel `kernel` compiled without parallel=True, so `prange` runs as
    `range` on the calling thread: for work too small to split, a call without a
    parallel region at all (starting and joining one costs ~3 us on an idle machine,
    and on a loaded one waits until every team thread has been scheduled: a
    one-block prange kernel averaged 130 us against 0.6 us serial on the shared
    2-CPU VM, measured). Assign the result to the module-level `name`: background
    compile workers find kernels by module and name, and numba caches the copy apart
    from the parallel kernel by that name. The copy answers with the kernel's twin,
    looked up at call time (a twin attached after this call counts too)."""
    import types
    fn = kernel.py_func
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = fn.__doc__
    options = kernel._options
    serial = _SerialCopy(copy, fastmath=tuple(options["fastmath"]), parallel=False,
                         inline=options.get("inline") == "always", error_model=options.get("error_model"))
    serial._parallel = kernel
    return serial


class _SerialCopy(CompiledKernel):
    """serial_variant's kernel: its twin is the parallel kernel's unless one is set."""

    _own_twin = None
    _parallel = None

    @property
    def twin(self):
        if self._own_twin is not None or self._parallel is None:
            return self._own_twin
        return self._parallel.twin

    @twin.setter
    def twin(self, fn):        # setting the kernel's own twin back: follow the kernel again
        self._own_twin = None if self._parallel is not None and fn is self._parallel.twin else fn


# ----------------------------------------------------------------- the team

# Below this much work (elements or multiply-adds) one block is best: a parallel
# region's start and join cost about what one thread needs for ~20-30k elements.
TEAM_MIN_WORK = 1 << 15
_team_size = None
_blas_depth = [0, None]          # entries into team() on any thread, OpenBLAS's count before
_team_lock = threading.Lock()


def team_size():
    """Threads in the team: CAFFE2PY_NUM_THREADS, else min(4, CPUs), at most numba's;
    on a thread inside team_limit(n), at most n."""
    global _team_size
    if _team_size is None:
        import numba
        _team_size = max(1, min(num_threads(), numba.config.NUMBA_NUM_THREADS))
    if not _limits_active[0]:      # no thread is inside team_limit: skip the thread-local read
        return _team_size
    limit = getattr(_this_thread, "limit", 0)
    return min(_team_size, limit) if limit else _team_size


# team_limit contexts open on any thread: team_size is asked several times per op, and
# a thread-local attribute read costs ~0.3 us
_limits_active = [0]
_limits_lock = threading.Lock()


class team_limit:
    """Context: kernels called on this thread split their work over at most `size`
    threads. The parallel net executor runs each branch of a net under
    team_limit(budget // workers), so that branches on worker threads times each
    branch's team never exceed the thread budget (caffe2py/parallel_executor.py)."""
    __slots__ = ("size", "_before")

    def __init__(self, size):
        self.size = max(1, int(size))
        self._before = 0

    def __enter__(self):
        with _limits_lock:
            _limits_active[0] += 1
        self._before = getattr(_this_thread, "limit", 0)
        _this_thread.limit = self.size
        if "numba" in _sys_modules and getattr(_this_thread, "depth", 0):
            _use_team_size()
        return self

    def __exit__(self, *exc):
        _this_thread.limit = self._before
        with _limits_lock:
            _limits_active[0] -= 1
        if "numba" in _sys_modules and getattr(_this_thread, "depth", 0):
            _use_team_size()
        return False


def team_blocks(count, work_per_item):
    """How many blocks to split `count` items of `work_per_item` each into."""
    if count <= 1 or count * work_per_item < TEAM_MIN_WORK:
        return 1
    return min(count, team_size())


def per_team(memo, make):
    """make() once per calling thread and team size, then kept in the dict `memo`: a
    kernel's per-call choices (block counts, serial or parallel variant, buffers its
    op owns), which otherwise cost a few microseconds of lookups on every call (small
    nets run tens of convolutions of ~0.1 ms each)."""
    key = (threading.get_ident(), team_size())
    found = memo.get(key)
    if found is None:
        if len(memo) >= 64:
            memo.clear()
        found = memo[key] = make()
    return found


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
                blas = _blas_module()
                before = blas.blas_threads()
                _blas_depth[1] = before
                if before != 1:
                    blas.set_blas_threads(1)
        # numba's thread count matters only to compiled kernels: a net of NumPy kernels
        # need not import numba (~0.3-0.5 s, the first example of a hypothesis test with
        # a 1 s deadline); the first kernel given machine code sets it (_use_machine_code)
        if "numba" in _sys_modules:
            _use_team_size()
        return self

    def __exit__(self, *exc):
        _this_thread.depth -= 1
        if _this_thread.depth:
            return False
        if _unannounced:
            _announce_background()
        compiler_pages.release_if_linked()
        with _team_lock:
            _blas_depth[0] -= 1
            if _blas_depth[0] == 0 and _blas_depth[1] not in (None, 1):
                _blas_module().set_blas_threads(_blas_depth[1])
        return False


_this_thread = threading.local()      # team() nesting depth, numba thread count last set
_sys_modules = sys.modules
_blas = []


def _blas_module():
    # imported on first use, then held: an import statement costs ~2 us a net run
    if not _blas:
        from . import blas
        _blas.append(blas)
    return _blas[0]


def _use_team_size():
    # numba's thread count is per calling thread
    if getattr(_this_thread, "size", None) != team_size():
        import numba
        numba.set_num_threads(team_size())
        _this_thread.size = team_size()
