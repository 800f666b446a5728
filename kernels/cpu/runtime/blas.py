"""GEMM calls into the OpenBLAS that NumPy ships, made from compiled (numba) code.

Public:
    gemm_entry(dtype) -> GemmEntry or None
        the C entry points for float32/float64 GEMMs in NumPy's bundled OpenBLAS
        (None when NumPy uses another BLAS, or the symbols are not found).
    openblas_core()              the CPU kernel family NumPy's OpenBLAS runs ("Haswell", "SkylakeX").
    blas_threads(), set_blas_threads(n)   OpenBLAS's own thread count (the team sets it to
                                 one while caffe2py's kernels run, see jit.team).
The numba intrinsics that call them (`call_gemm`, `call_gemv`) live in blas_calls.py,
which imports numba; kernels reach them through jit's lazy globals.

Pointers are plain integers (`arr.ctypes.data`), so they do not keep an array alive:
numba frees an array after its last use *as an array*, which may come before the
call that reads through the pointer (a buffer made inside a kernel and used last as
`buf.ctypes.data` was freed and reused under the GEMM: wrong products, reproducibly).
Pass arrays the caller owns, or use the array again after the call.

Why: caffe2py's parallel kernels run on one team of threads (numba's, see jit.py).
Each thread calls a single-threaded GEMM on its own block of the output and then
finishes that block (bias, residual, ReLU) while it is in cache. np.matmul cannot be
called from compiled code, and OpenBLAS's own threads would fight the team for the
cores (they spin between calls), so the GEMM is called directly: the function's
address and the integer width of the library are arguments, not constants, so
numba can cache the compiled kernels on disk.
"""
import ctypes
import glob
import os
from collections import namedtuple

import numpy as np

GemmEntry = namedtuple("GemmEntry", "gemm gemv ilp64")


def _library():
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas*.so*"))
                       + glob.glob(os.path.join(libs, "libopenblas*.so*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _address(lib, names):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return ctypes.cast(fn, ctypes.c_void_p).value, name
    return None, None


_ENTRIES = None


def gemm_entry(dtype):
    """GemmEntry(gemm address, gemv address, ilp64) for float32 / float64, or None when
    the direct path is unavailable (NumPy built on another BLAS, other dtypes; env
    CAFFE2PY_DIRECT_BLAS=0 turns it off)."""
    global _ENTRIES
    if _ENTRIES is None:
        _ENTRIES = {}
        lib = _library()
        if lib is not None and os.environ.get("CAFFE2PY_DIRECT_BLAS", "1") != "0":
            for key, prefix in (("f4", "s"), ("f8", "d")):
                gemm, name = _address(lib, ("scipy_cblas_%sgemm64_" % prefix, "cblas_%sgemm64_" % prefix,
                                            "cblas_%sgemm" % prefix))
                gemv, _ = _address(lib, (name.replace("gemm", "gemv"),) if name else ())
                if gemm and gemv:
                    _ENTRIES[key] = GemmEntry(gemm, gemv, name.endswith("64_"))
    dtype = np.dtype(dtype)
    return _ENTRIES.get(dtype.kind + str(dtype.itemsize)) if dtype.kind == "f" else None


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


def blas_threads():
    """OpenBLAS's current thread count (1 when it cannot be read)."""
    return _GET_THREADS() if _GET_THREADS is not None else 1


def set_blas_threads(count):
    """Set OpenBLAS's thread count (no-op when the library is not found)."""
    if _SET_THREADS is not None:
        _SET_THREADS(count)
