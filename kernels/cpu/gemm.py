"""Matrix products on BLAS.

Public:
    gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False) -> y
        ONNX Gemm: alpha * op(a) @ op(b) + beta * c, op = transpose when asked;
        c broadcasts unidirectionally to the (M, N) result.
    fc(x, w, b, transposed=False) -> y
        Caffe2 FC on 2-D x (M, K): x @ w.T + b (w (N, K)), or x @ w + b when
        transposed (w (K, N)).
    matmul(a, b) -> y            NumPy matmul semantics (batched, broadcasting).
    openblas_core()              the CPU kernel family NumPy's OpenBLAS runs ("Haswell", "SkylakeX").
    blas_summary()               one line for reports: library, kernel family (and whether
                                 OPENBLAS_CORETYPE forces it), threads.
    blas_threads(), set_blas_threads(n)   OpenBLAS's own thread count.
2-D float products run on caffe2py's thread team (team_gemm.py), N-d ones through
np.matmul. Scaling and bias are applied in place on the fresh product, never as extra
temporaries.
"""
import os

import numpy as np

from .team_gemm import gemm_into

def _product(a, b):
    """a @ b for 2-D operands: float32/float64 on caffe2py's team (team_gemm), others
    and N-d operands through np.matmul."""
    if a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and a.dtype in (np.float32, np.float64):
        return gemm_into(a, b, np.empty((a.shape[0], b.shape[1]), a.dtype))
    return np.matmul(a, b)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("Gemm needs 2-D A and B, got shapes %s and %s" % (list(a.shape), list(b.shape)))
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("Gemm inner dimensions differ: op(A) is %s and op(B) is %s"
                         % (list(a2.shape), list(b2.shape)))
    y = _product(a2, b2)
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
    y = _product(x, w if transposed else w.T)
    if b is not None:
        y += b.reshape(1, -1)
    return y


def matmul(a, b):
    if a.ndim == 2 and b.ndim == 2:
        return _product(a, b)
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
    """E.g. "NumPy's OpenBLAS, SkylakeX kernels, GEMMs on caffe2py's team of 2 threads":
    what decides GEMM speed, for benchmark reports (the kernel family says whether
    OPENBLAS_CORETYPE forces it; without a direct GEMM path, OpenBLAS's own threads)."""
    from .blas import gemm_entry
    from .jit import team_size
    core = openblas_core()
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if core is None:
        library = "NumPy's BLAS (kernel family unknown)"
    else:
        library = "NumPy's OpenBLAS, %s kernels%s" % (core, " (forced by OPENBLAS_CORETYPE=%s)" % forced if forced else "")
    if gemm_entry(np.float32) is not None:
        threads = team_size()
        return "%s, GEMMs on caffe2py's team of %d thread%s" % (library, threads, "" if threads == 1 else "s")
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


def blas_threads():
    """OpenBLAS's current thread count (1 when it cannot be read)."""
    return _GET_THREADS() if _GET_THREADS is not None else 1


def set_blas_threads(count):
    """Set OpenBLAS's thread count (no-op when the library is not found)."""
    if _SET_THREADS is not None:
        _SET_THREADS(count)
