"""GEMM calls into the OpenBLAS that NumPy ships, made from compiled (numba) code.

Public:
    gemm_entry(dtype) -> GemmEntry or None
        the C entry points for float32/float64 GEMMs in NumPy's bundled OpenBLAS
        (None when NumPy uses another BLAS, or the symbols are not found).
    call_gemm(address, ilp64, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, like)
        numba intrinsic: one row-major GEMM through that entry point
    call_gemv(address, ilp64, trans, m, n, a, lda, x, incx, y, incy, like)
        numba intrinsic: one row-major matrix-vector product (GEMM is slow there)

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
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# cblas_?gemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

GemmEntry = namedtuple("GemmEntry", "gemm gemv ilp64")


def _gemm_type(float_ir, index_ir):
    i32 = ir.IntType(32)
    ptr = ir.IntType(8).as_pointer()
    return ir.FunctionType(ir.VoidType(), [i32, i32, i32, index_ir, index_ir, index_ir, float_ir, ptr, index_ir,
                                           ptr, index_ir, float_ir, ptr, index_ir])


def _for_index_width(builder, ilp64, call):
    """Emit call(index type, cast) twice, for 64-bit (ilp64 true at run time) and 32-bit
    BLAS integers: the library's width is a run-time value, so cached code serves both."""
    with builder.if_else(ilp64) as (wide, narrow):
        for block, bits in ((wide, 64), (narrow, 32)):
            with block:
                index_ir = ir.IntType(bits)
                call(index_ir, (lambda v, t=index_ir: builder.trunc(v, t)) if bits < 64 else (lambda v: v))


@intrinsic
def call_gemm(typingctx, address, ilp64, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, like):
    """C (m, n) = alpha * op(A) @ op(B) + beta * C, row-major, through the cblas GEMM at
    `address` (pointers a, b, c as integers; lda/ldb/ldc in elements; op transposes
    when trans_a / trans_b). `like` is an array whose dtype (float32 / float64) picks
    sgemm / dgemm; ilp64 says whether the library takes 64-bit integers."""
    if not isinstance(like, types.Array) or like.dtype not in (types.float32, types.float64):
        return None
    float_ir = ir.FloatType() if like.dtype == types.float32 else ir.DoubleType()
    sig = types.void(types.intp, types.boolean, types.boolean, types.boolean, types.intp, types.intp, types.intp,
                     types.float64, types.intp, types.intp, types.intp, types.intp, types.float64, types.intp,
                     types.intp, like)

    def codegen(context, builder, signature, args):
        address, ilp64, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, _ = args
        ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        if float_ir != ir.DoubleType():
            alpha, beta = builder.fptrunc(alpha, float_ir), builder.fptrunc(beta, float_ir)

        def flag(value):
            return builder.select(value, ir.Constant(i32, TRANS), ir.Constant(i32, NO_TRANS))
        head = [ir.Constant(i32, ROW_MAJOR), flag(trans_a), flag(trans_b)]

        def call(index_ir, index):
            fn = builder.inttoptr(address, _gemm_type(float_ir, index_ir).as_pointer())
            builder.call(fn, head + [index(m), index(n), index(k), alpha, builder.inttoptr(a, ptr), index(lda),
                                     builder.inttoptr(b, ptr), index(ldb), beta, builder.inttoptr(c, ptr), index(ldc)])
        _for_index_width(builder, ilp64, call)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def call_gemv(typingctx, address, ilp64, trans, m, n, a, lda, x, incx, y, incy, like):
    """y = op(A) @ x through the cblas GEMV at `address`, row-major: A is (m, n) with
    leading dimension lda, op transposes when trans (then x has m values and y n);
    pointers as integers, increments in elements. `like` picks float32 / float64."""
    if not isinstance(like, types.Array) or like.dtype not in (types.float32, types.float64):
        return None
    float_ir = ir.FloatType() if like.dtype == types.float32 else ir.DoubleType()
    sig = types.void(types.intp, types.boolean, types.boolean, types.intp, types.intp, types.intp, types.intp,
                     types.intp, types.intp, types.intp, types.intp, like)

    def codegen(context, builder, signature, args):
        address, ilp64, trans, m, n, a, lda, x, incx, y, incy, _ = args
        ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        one, zero = ir.Constant(float_ir, 1.0), ir.Constant(float_ir, 0.0)
        head = [ir.Constant(i32, ROW_MAJOR), builder.select(trans, ir.Constant(i32, TRANS), ir.Constant(i32, NO_TRANS))]

        def call(index_ir, index):
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, index_ir, index_ir, float_ir, ptr, index_ir, ptr,
                                                   index_ir, float_ir, ptr, index_ir])
            fn = builder.inttoptr(address, fnty.as_pointer())
            builder.call(fn, head + [index(m), index(n), one, builder.inttoptr(a, ptr), index(lda),
                                     builder.inttoptr(x, ptr), index(incx), zero, builder.inttoptr(y, ptr), index(incy)])
        _for_index_width(builder, ilp64, call)
        return context.get_dummy_value()
    return sig, codegen


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
