"""Matrix products on BLAS.

Public:
    gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False) -> y
        ONNX Gemm: alpha * op(a) @ op(b) + beta * c, op = transpose when asked;
        c broadcasts unidirectionally to the (M, N) result.
    fc(x, w, b, transposed=False) -> y
        Caffe2 FC on 2-D x (M, K): x @ w.T + b (w (N, K)), or x @ w + b when
        transposed (w (K, N)).
    matmul(a, b) -> y            NumPy matmul semantics (batched, broadcasting).
    single_blas_thread()         context manager: NumPy's OpenBLAS runs on one thread inside.
    openblas_core()              the CPU kernel family NumPy's OpenBLAS runs ("Haswell", "SkylakeX").
    blas_summary()               one line for reports: library, kernel family (and whether
                                 OPENBLAS_CORETYPE forces it), thread count.
    run_chunks(fn, n, ways=None) fn(k, worker) for k < n; with POOL_SPLIT on the calling thread
                                 and pool threads, chunks claimed dynamically, BLAS
                                 single-threaded meanwhile; else in order on the caller.
    POOL_SPLIT                   env CAFFE2PY_POOL_SPLIT=1 (default off: OpenBLAS threads GEMMs).
    SMALL_GEMM_FLOPS             in pool mode, GEMM calls below this size use one BLAS thread
                                 (env CAFFE2PY_SMALL_GEMM_FLOPS, default 8e6).
Scaling and bias are applied in place on the fresh product, never as extra temporaries.
"""
import os
import threading

import numpy as np


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("Gemm needs 2-D A and B, got shapes %s and %s" % (list(a.shape), list(b.shape)))
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("Gemm inner dimensions differ: op(A) is %s and op(B) is %s"
                         % (list(a2.shape), list(b2.shape)))
    y = np.matmul(a2, b2)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        c = np.asarray(c)
        try:
            np.broadcast_shapes(c.shape, y.shape)
        except ValueError:
            raise ValueError("Gemm C of shape %s does not broadcast to %s" % (list(c.shape), list(y.shape))) from None
        if beta == 1.0:
            y += c
        else:
            y += c * y.dtype.type(beta)
    return y


def fc(x, w, b, transposed=False):
    y = np.matmul(x, w if transposed else w.T)
    if b is not None:
        y += b.reshape(1, -1)
    return y


def matmul(a, b):
    return np.matmul(a, b)


# ----------------------------------------------------------------- BLAS thread count

def _openblas_libs():
    """ctypes handles of the OpenBLAS libraries bundled with NumPy (the one it uses)."""
    import ctypes
    import glob
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    found = []
    for path in glob.glob(os.path.join(libs, "libscipy_openblas*.so*")) + glob.glob(os.path.join(libs, "libopenblas*.so*")):
        try:
            found.append(ctypes.CDLL(path))
        except OSError:
            continue
    return found


def openblas_core():
    """The CPU kernel family NumPy's OpenBLAS chose ("Haswell", "SkylakeX", ...), or
    None when it cannot be asked. OPENBLAS_CORETYPE overrides its own detection; on
    an AVX-512 CPU, Haswell kernels run GEMMs at about half of SkylakeX's speed."""
    import ctypes
    for lib in _openblas_libs():
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                fn.argtypes = []
                core = fn()
                return core.decode("ascii", "replace").strip() if core else None
    return None


def blas_summary():
    """E.g. "NumPy's OpenBLAS, Haswell kernels (forced by OPENBLAS_CORETYPE=Haswell), 2
    threads": what decides GEMM speed, for benchmark reports."""
    core = openblas_core()
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if core is None:
        library = "NumPy's BLAS (kernel family unknown)"
    else:
        library = "NumPy's OpenBLAS, %s kernels%s" % (core, " (forced by OPENBLAS_CORETYPE=%s)" % forced if forced else "")
    threads = blas_threads()
    return "%s, %d thread%s" % (library, threads, "" if threads == 1 else "s")


def _openblas_setter():
    """NumPy's bundled OpenBLAS thread-count setter and getter, or (None, None)."""
    import ctypes
    for lib in _openblas_libs():
        for set_name, get_name in (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                                   ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                                   ("openblas_set_num_threads", "openblas_get_num_threads")):
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                setter.argtypes = [ctypes.c_int]
                return setter, getter
    return None, None


_SET_THREADS, _GET_THREADS = _openblas_setter()

# GEMMs below this many flops run on one BLAS thread: waking and joining a second
# thread costs more than it saves there, and far more when the other core is busy
# (a delayed worker thread stalls the call for a scheduler time slice, ~4-8 ms).
SMALL_GEMM_FLOPS = float(os.environ.get("CAFFE2PY_SMALL_GEMM_FLOPS", 8e6))


class single_blas_thread:
    """Context: OpenBLAS uses one thread inside (no-op when the library is not found)."""
    __slots__ = ("_before",)

    def __enter__(self):
        self._before = _GET_THREADS() if _GET_THREADS is not None else 1
        if self._before > 1:
            _SET_THREADS(1)
        return self

    def __exit__(self, *exc):
        if self._before > 1:
            _SET_THREADS(self._before)
        return False


# True (env CAFFE2PY_POOL_SPLIT=1): big GEMMs are cut into chunks that our pool
# threads claim, with OpenBLAS on one thread meanwhile. That tolerates a busy core (a
# descheduled OpenBLAS worker stalls its static split for a time slice), but on a quiet
# machine it loses: OpenBLAS's spinning workers hand off in microseconds, while every
# switch of its thread count wakes those workers, which then spin for ~0.1 s against
# our pool threads (measured on a 2-vCPU Zen 5 VM: a 1000x512x169 GEMM in 4 chunks
# took 0.27 ms with OpenBLAS threads, 0.51 ms split over the pool). Default False:
# run_chunks runs chunks in order on the caller and OpenBLAS threads each GEMM.
POOL_SPLIT = os.environ.get("CAFFE2PY_POOL_SPLIT", "0") == "1"


def blas_threads():
    """OpenBLAS's current thread count (1 when it cannot be read)."""
    return _GET_THREADS() if _GET_THREADS is not None else 1


def set_blas_threads(count):
    """Set OpenBLAS's thread count (no-op when the library is not found)."""
    if _SET_THREADS is not None:
        _SET_THREADS(count)


def pool_ways():
    """How many threads run_chunks will use now (1: callers can skip chunking)."""
    return blas_threads() if POOL_SPLIT else 1


def run_chunks(fn, n_chunks, ways=None):
    """fn(k, worker) for every k in range(n_chunks). With POOL_SPLIT the chunks are
    claimed one at a time by the calling thread and ways - 1 pool threads, with OpenBLAS
    on one thread meanwhile; otherwise (the default) they run in order on the caller.

    Chunks are claimed dynamically and a pool thread that has not started by the time
    the chunks run out is not waited for, so a busy core delays one chunk at most
    (OpenBLAS's static split waits for its worker on every call). `worker` (0 = the
    caller) lets fn pick per-thread scratch buffers. ways defaults to the BLAS thread
    count."""
    ways = blas_threads() if ways is None else ways
    if ways <= 1 or not POOL_SPLIT:
        for k in range(n_chunks):
            fn(k, 0)
        return
    if n_chunks <= 1:
        # Still no OpenBLAS threads: its static split stalls whenever a core is busy.
        with single_blas_thread():
            for k in range(n_chunks):
                fn(k, 0)
        return
    from .threads import executor
    ways = min(ways, n_chunks)
    lock = threading.Lock()
    idle = threading.Condition(lock)
    state = [0, 0]          # next chunk to claim, chunks in progress
    errors = []

    def work(worker):
        while True:
            with lock:
                k = state[0]
                if k >= n_chunks:
                    return
                state[0] += 1
                state[1] += 1
            try:
                fn(k, worker)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                errors.append(exc)
            finally:
                with lock:
                    state[1] -= 1
                    idle.notify_all()

    with single_blas_thread():
        for worker in range(1, ways):
            executor().submit(work, worker)
        work(0)
        with lock:
            while state[1] > 0:
                idle.wait()
    if errors:
        raise errors[0]
