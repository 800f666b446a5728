"""cuBLAS through ctypes, on PyCUDA device pointers (row-major wrappers).

The library is looked for in: $CAFFE2PY_CUBLAS (a file), the loader's search path
(ctypes.util.find_library), $CUDA_HOME / $CUDA_PATH / /usr/local/cuda lib64, and the
nvidia-cublas wheel (site-packages/nvidia/cublas/lib). cuBLAS uses the CUDA
runtime's primary context, which is the context caffe2py's device pushes.

Fallback: when no libcublas can be loaded, GEMMs run on kernels/cuda/math/gemm.cu (a
16x16 shared-memory tiled kernel: correct, several times slower than cuBLAS);
`backend()` says which one is in use.
"""
import ctypes
import ctypes.util
import glob
import os
import site
import sys

from . import backend as _cuda_backend   # this module's backend() says cublas or fallback
from . import context

CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
FALLBACK_FORMAT = "iiqqqfPqPqfPq"  # sgemm_tiled's parameters, packed as PyCUDA does
_state = {}


def _forget():
    _state.clear()


_cuda_backend.on_select(_forget)   # a new backend: look for cuBLAS again


def candidate_paths(environ=None, site_dirs=None):
    """Where libcublas may be, in search order (pure: tested without a GPU)."""
    environ = os.environ if environ is None else environ
    paths = []
    if environ.get("CAFFE2PY_CUBLAS"):
        paths.append(environ["CAFFE2PY_CUBLAS"])
    found = ctypes.util.find_library("cublas")
    if found:
        paths.append(found)
    roots = [environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            paths += sorted(glob.glob(os.path.join(root, sub, "libcublas.so*")), reverse=True)
    if site_dirs is None:
        site_dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path
    for d in site_dirs:
        if d:
            paths += sorted(glob.glob(os.path.join(d, "nvidia", "cublas", "lib", "libcublas.so*")), reverse=True)
    seen, ordered = set(), []
    for p in paths:
        if p not in seen and "libcublasLt" not in os.path.basename(p):
            seen.add(p)
            ordered.append(p)
    return ordered


def load_library(paths=None):
    """(ctypes CDLL, path) for the first loadable candidate, or (None, reason)."""
    errors = []
    for path in candidate_paths() if paths is None else paths:
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.cublasSgemm_v2  # noqa: B018 - make sure it is the real library
            return lib, path
        except (OSError, AttributeError) as exc:
            errors.append("%s: %s" % (path, exc))
    return None, "; ".join(errors) or "no libcublas found"


def _declare(lib):
    vp, i, ll, fp = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_float)
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSgemm_v2.argtypes = [vp, i, i, i, i, i, fp, vp, i, vp, i, fp, vp, i]
    lib.cublasSgemmStridedBatched.argtypes = [vp, i, i, i, i, i, fp, vp, i, ll, vp, i, ll, fp, vp, i, ll, i]
    for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSgemm_v2", "cublasSgemmStridedBatched"):
        getattr(lib, name).restype = ctypes.c_int


def handle(device_id=0):
    """(lib, handle) bound to the device's stream, or None when cuBLAS is unavailable."""
    key = ("handle", device_id)
    if key not in _state:
        if _cuda_backend.is_emulator():
            _state[key], _state["where"] = None, "the CUDA emulator has no cuBLAS: gemm.cu runs instead"
            return None
        lib = _state.get("lib")
        if "lib" not in _state:
            lib, where = load_library()
            _state["lib"], _state["where"] = lib, where
            if lib is not None:
                _declare(lib)
        if lib is None:
            _state[key] = None
        else:
            context.activate(device_id)
            h = ctypes.c_void_p()
            status = lib.cublasCreate_v2(ctypes.byref(h))
            if status != 0:
                _state[key] = None
                _state["where"] = "cublasCreate failed with status %d" % status
            else:
                lib.cublasSetStream_v2(h, ctypes.c_void_p(context.stream(device_id).handle))
                _state[key] = (lib, h)
    return _state[key]


def backend(device_id=0):
    return "cublas" if handle(device_id) is not None else "fallback"


def _check(status, what):
    if status != 0:
        from ..errors import Caffe2Error  # noqa: PLC0415
        raise Caffe2Error("%s failed with cuBLAS status %d" % (what, status))


def gemm_args(trans_a, trans_b, m, n, k):
    """cuBLAS (column-major) arguments computing row-major C[m,n] = op(A) op(B):
    C^T = op(B)^T op(A)^T, so B goes first. Returns (opB, opA, n, m, k, ldb, lda, ldc)."""
    lda = m if trans_a else k
    ldb = k if trans_b else n
    return (CUBLAS_OP_T if trans_b else CUBLAS_OP_N, CUBLAS_OP_T if trans_a else CUBLAS_OP_N,
            n, m, k, ldb, lda, n)


def sgemm_batched(a_ptr, b_ptr, c_ptr, m, n, k, batch, trans_a=False, trans_b=False,
                  stride_a=0, stride_b=0, stride_c=0, alpha=1.0, beta=0.0, device_id=0):
    """Row-major C[b] = alpha op(A[b]) op(B[b]) + beta C[b] on device pointers, through
    cuBLAS or the fallback kernel."""
    if m == 0 or n == 0 or batch == 0:
        return
    h = handle(device_id)
    if h is None:
        return _fallback(a_ptr, b_ptr, c_ptr, m, n, k, batch, trans_a, trans_b,
                         stride_a, stride_b, stride_c, alpha, beta, device_id)
    lib, hd = h
    op_b, op_a, cm, cn, ck, ldb, lda, ldc = gemm_args(trans_a, trans_b, m, n, k)
    al, be = ctypes.c_float(alpha), ctypes.c_float(beta)
    if batch == 1:
        _check(lib.cublasSgemm_v2(hd, op_b, op_a, cm, cn, ck, ctypes.byref(al), b_ptr, ldb, a_ptr, lda,
                                  ctypes.byref(be), c_ptr, ldc), "cublasSgemm")
    else:
        _check(lib.cublasSgemmStridedBatched(hd, op_b, op_a, cm, cn, ck, ctypes.byref(al), b_ptr, ldb, stride_b,
                                             a_ptr, lda, stride_a, ctypes.byref(be), c_ptr, ldc, stride_c, batch),
               "cublasSgemmStridedBatched")


def _fallback(a_ptr, b_ptr, c_ptr, m, n, k, batch, trans_a, trans_b, stride_a, stride_b, stride_c,
              alpha, beta, device_id):
    import numpy as np  # noqa: PLC0415
    from . import compiler, launch  # noqa: PLC0415
    fn = compiler.function("gemm", "sgemm_tiled", FALLBACK_FORMAT, device_id)
    g = launch.gemm_tiles(m, n, batch)
    fn.prepared_async_call(g.grid, g.block, context.stream(device_id), int(bool(trans_a)), int(bool(trans_b)),
                           m, n, k, np.float32(alpha), a_ptr, stride_a, b_ptr, stride_b, np.float32(beta),
                           c_ptr, stride_c)
