"""Matrix products on BLAS.

Public:
    gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False) -> y
        ONNX Gemm: alpha * op(a) @ op(b) + beta * c, op = transpose when asked;
        c broadcasts unidirectionally to the (M, N) result.
    fc(x, w, b, transposed=False) -> y
        Caffe2 FC on 2-D x (M, K): x @ w.T + b (w (N, K)), or x @ w + b when
        transposed (w (K, N)).
    matmul(a, b) -> y            NumPy matmul semantics (batched, broadcasting).
    blas_summary()               one line for reports: library, kernel family (and whether
                                 OPENBLAS_CORETYPE forces it), threads.
2-D float products run on caffe2py's thread team (team_gemm.py), N-d ones through
np.matmul; one row times a transposed matrix (a CNN's final FC at batch 1) that is
too small to split goes straight to BLAS's GEMV (row_times_transposed). Scaling and bias are applied in place on the fresh product, never as extra
temporaries.
"""
import os

import numpy as np

from ..runtime.blas import blas_threads, openblas_core
from ..runtime.output_pool import output_array
from ..runtime.jit import team_blocks
from .team_gemm import gemm_into

def _product(a, b):
    """a @ b for 2-D operands: float32/float64 on caffe2py's team (team_gemm), others
    and N-d operands through np.matmul."""
    if a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and a.dtype in (np.float32, np.float64):
        return gemm_into(a, b, output_array((a.shape[0], b.shape[1]), a.dtype))
    return np.matmul(a, b)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("Gemm needs 2-D A and B, got shapes %s and %s" % (list(a.shape), list(b.shape)))
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("Gemm inner dimensions differ: op(A) is %s and op(B) is %s"
                         % (list(a2.shape), list(b2.shape)))
    if trans_b and not trans_a and alpha == 1.0 and a.shape[0] == 1:
        y = _one_row_product(a, b, c, beta)
        if y is not None:
            return y
    y = _product(a2, b2)
    if c is not None and beta != 0.0:
        c = np.asarray(c)
        try:
            fits = np.broadcast_shapes(c.shape, y.shape) == y.shape     # C broadcasts to Y, not Y to C
        except ValueError:
            fits = False
        if not fits:
            raise ValueError("Gemm C of shape %s does not broadcast to %s" % (list(c.shape), list(y.shape)))
    if y.dtype.kind in "iu" and not (alpha == 1.0 and beta in (0.0, 1.0)):
        return _integer_scaled(y, c, alpha, beta)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        if beta == 1.0:
            y += c
        else:
            y += c * y.dtype.type(beta)
    return y


def _one_row_product(a, b, c, beta):
    """a (1, K) @ b.T (+ c) by row_times_transposed when c is absent, ignored (beta 0)
    or N values added as they are (beta 1, shape (N,) or (1, N)); else None."""
    if c is not None and beta != 0.0:
        c = np.asarray(c)
        if beta != 1.0 or c.ndim > 2 or c.shape[-1:] != b.shape[:1]:
            return None
        return row_times_transposed(a, b, c)
    return row_times_transposed(a, b)


def row_times_transposed(x, w, bias=None):
    """x (1, K) @ w.T (+ bias, N values) for w (N, K), all float32 or all float64, when
    the product is too small for the team (one block): NumPy's dot, which is BLAS's
    GEMV reading the weights once, into the output, then the bias. The team GEMM path
    costs ~15 us more per call there (launch parameters, a 20-argument kernel call,
    its own bias pass) on a product of 40-80 us (1000 x 544..1024 floats). None when
    the operands do not fit or the product splits over the team (gemm_into does that)."""
    n = w.shape[0]
    if x.ndim != 2 or w.ndim != 2 or x.shape[0] != 1 or x.shape[1] != w.shape[1] or x.dtype not in _FLOATS \
            or w.dtype != x.dtype or (bias is not None and (bias.size != n or bias.dtype != x.dtype)) \
            or team_blocks(n, w.shape[1]) > 1:
        return None
    y = output_array((1, n), x.dtype)
    np.dot(w, x[0], out=y[0])
    if bias is not None:
        y[0] += bias.reshape(-1)
    return y


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _integer_scaled(y, c, alpha, beta):
    """alpha * y + beta * c for integer y with float alpha / beta: computed in float64 (as
    the ONNX reference's NumPy does), truncated toward zero, and wrapped into y's type as
    integer arithmetic wraps (beta -1 on uint32 subtracts C). Float `alpha * y` on uint32 would
    otherwise refuse a negative beta as "out of bounds for uint32"."""
    scaled = y.astype(np.float64) * alpha
    if c is not None and beta != 0.0:
        scaled += c.astype(np.float64) * beta
    limit = float(2 ** 63)        # beyond int64 (an infinite alpha): saturate, then wrap
    whole = np.clip(np.trunc(np.nan_to_num(scaled, nan=0.0)), -limit, np.nextafter(limit, 0.0))
    return whole.astype(np.int64).astype(y.dtype)


def fc(x, w, b, transposed=False):
    if not transposed and x.shape[0] == 1:
        y = row_times_transposed(x, w, b)
        if y is not None:
            return y
    y = _product(x, w if transposed else w.T)
    if b is not None:
        y += b.reshape(1, -1)
    return y


def matmul(a, b):
    if a.ndim == 2 and b.ndim == 2:
        return _product(a, b)
    return np.matmul(a, b)


def blas_summary():
    """E.g. "NumPy's OpenBLAS, SkylakeX kernels, GEMMs on caffe2py's team of 2 threads":
    what decides GEMM speed, for benchmark reports (the kernel family says whether
    OPENBLAS_CORETYPE forces it; without a direct GEMM path, OpenBLAS's own threads)."""
    from ..runtime.blas import gemm_entry
    from ..runtime.jit import team_size
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
