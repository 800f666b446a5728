"""Compiled CPU loops: numba's njit with the project's settings, compiled lazily.

Some kernels cannot be written as a few NumPy calls without extra passes over
memory (a depthwise convolution is nine multiply-adds per output, a pooling window
a handful of maxima; as NumPy calls each is a separate pass with its own Python
overhead). Those kernels are plain Python loops compiled by numba to vectorised
machine code.

    @compiled                       # or @compiled(fastmath=("contract", "reassoc"))
    def _kernel(x, out): ...

    _kernel(x, out)                 # compiles on the first call, then calls machine code

Settings and why:
  * lazy: `import caffe2py` does not import numba (0.35 s); the first call does.
  * cache: machine code is cached on disk (next to the module, or numba's user cache
    when that is not writable), so later processes load a kernel in milliseconds
    instead of compiling it for ~0.5 s.
  * nogil: kernels run on caffe2py's thread pool at the same time (`split`).
  * fastmath: 'contract' only by default (fused multiply-add): NaN, inf and signed
    zeros keep IEEE semantics, so results match the NumPy kernels'.
  * no bounds checks: callers check shapes before calling (every kernel's docstring
    says what it assumes).

Loops vectorise when their inner index runs over plain slices: write
`x0 = row[a:a + n]` then `x0[i]`, not `row[i + a]` (numba must allow a negative
index there, which stops LLVM's vectoriser: 5-9x slower, measured).
"""
import threading

from .threads import num_threads, run_split

_DEFAULT_FASTMATH = ("contract",)
_lock = threading.Lock()


class CompiledKernel:
    """A Python function that numba compiles on its first call."""

    def __init__(self, fn, fastmath=_DEFAULT_FASTMATH):
        self.py_func = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._options = dict(cache=True, nogil=True, boundscheck=False, fastmath=set(fastmath))
        self._dispatcher = None

    @property
    def dispatcher(self):
        """numba's dispatcher for the function (imports numba on first use)."""
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    import numba
                    self._dispatcher = numba.njit(**self._options)(self.py_func)
        return self._dispatcher

    def __call__(self, *args):
        return self.dispatcher(*args)


def compiled(fn=None, *, fastmath=_DEFAULT_FASTMATH):
    """Decorator: `fn` becomes a CompiledKernel (see the module docstring)."""
    if fn is None:
        return lambda f: CompiledKernel(f, fastmath)
    return CompiledKernel(fn, fastmath)


# Below this much work (elements or multiply-adds) a second thread costs more than it
# saves: handing work to a pool thread and joining it takes ~57 us on a 2-vCPU VM
# (measured), about what one thread needs for 0.5-1 M elements of these loops. (numba's
# own OpenMP threads start in ~3 us, but they spin while idle and then fight
# OpenBLAS's spinning workers for the cores: a 0.09 ms loop took 6.5 ms after a GEMM.)
SPLIT_MIN_WORK = 1 << 20


def split(fn, count, work_per_item):
    """fn(lo, hi) over range(count) in contiguous blocks, one per thread of caffe2py's
    pool (the caller included) when the total work is worth it, else fn(0, count)."""
    threads = min(num_threads(), count)
    if threads <= 1 or count * work_per_item < SPLIT_MIN_WORK:
        fn(0, count)
        return
    bounds = [count * t // threads for t in range(threads + 1)]
    run_split(lambda t: fn(bounds[t], bounds[t + 1]), list(range(threads)), threads)
