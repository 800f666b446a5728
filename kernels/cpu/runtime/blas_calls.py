"""numba intrinsics that call OpenBLAS's GEMM and GEMV from compiled code (see blas.py).

    call_gemm(address, ilp64, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, like)
        one row-major GEMM through the entry point at `address`
    call_gemv(address, ilp64, trans, m, n, a, lda, x, incx, y, incy, like)
        one row-major matrix-vector product (GEMM is slow there)

Pointers are integers (`arr.ctypes.data`): they do not keep arrays alive (blas.py).
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# cblas_?gemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


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
