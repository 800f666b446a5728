"""The 4x16 int16 x int16 -> int32 micro-kernel of the Int8 GEMM, as an LLVM intrinsic
for compiled (numba) kernels.

    qgemm_4x16(a, a_stride, b, kpairs, c, c_stride)      all int64 (addresses in bytes)

c[r, 0:16] = sum over k of a[r, k] * b[k, 0:16] for the 4 rows r, with
  * a: 4 rows of int16, row r at a + r * a_stride, 2 * kpairs values each;
  * b: kpairs blocks of 64 bytes, block p holding for columns 0..15 the pair
    (b[2p, j], b[2p + 1, j]) as two int16 (columns 0-7 then 8-15);
  * c: 4 rows of 16 int32 at c + r * c_stride (written, not accumulated).

Why an intrinsic: numba widens int32 arithmetic to int64, so a plain loop neither keeps
int32 lanes nor forms multiply-add pairs. Here each step broadcasts a row's pair of A
values and multiplies it with a block of B as sign-extended i16 lanes whose even and odd
products are added: LLVM's x86 backend turns that pattern into vpmaddwd (16 products
per instruction, 8 int32 sums), and the 8 accumulators stay in registers for the whole
loop (3136x64 by 576, one thread: 2.9 ms, against 12 ms for float32 sgemm of the same
sizes on the shared VM, measured). Sums wrap modulo 2**32 as C's int32 arithmetic does.
The caller guarantees every address is in bounds: nothing here checks.
Importing this module imports numba; kernel modules reach it through jit's LazyGlobal
(numba's disk cache does not notice edits here: clear the callers' __pycache__ caches).
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I16, _I32, _I64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
MR, NR = 4, 16


def _vector(elem, n):
    return ir.VectorType(elem, n)


def _pointer(builder, address, elem):
    return builder.inttoptr(address, elem.as_pointer())


def _pair_products(builder, a, b):
    """<16 x i16> a, b -> <8 x i32> a[2j] * b[2j] + a[2j+1] * b[2j+1] (vpmaddwd's pattern)."""
    wide = _vector(_I32, 16)
    prod = builder.mul(builder.sext(a, wide), builder.sext(b, wide))
    even = builder.shuffle_vector(prod, prod, ir.Constant(_vector(_I32, 8), list(range(0, 16, 2))))
    odd = builder.shuffle_vector(prod, prod, ir.Constant(_vector(_I32, 8), list(range(1, 16, 2))))
    return builder.add(even, odd)


@intrinsic
def qgemm_4x16(typingctx, a, a_stride, b, kpairs, c, c_stride):
    if not all(isinstance(t, types.Integer) for t in (a, a_stride, b, kpairs, c, c_stride)):
        return None
    sig = types.void(a, a_stride, b, kpairs, c, c_stride)

    def codegen(context, builder, signature, args):
        a_addr, a_step, b_addr, count, c_addr, c_step = [
            context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)]
        v8 = _vector(_I32, 8)
        accs = [[cgutils.alloca_once_value(builder, ir.Constant(v8, [0] * 8)) for _ in range(2)]
                for _ in range(MR)]
        rows = [builder.add(a_addr, builder.mul(a_step, ir.Constant(_I64, r))) for r in range(MR)]
        with cgutils.for_range(builder, count) as loop:
            p = loop.index
            block = builder.add(b_addr, builder.mul(p, ir.Constant(_I64, 64)))
            halves = [builder.load(_pointer(builder, builder.add(block, ir.Constant(_I64, 32 * h)),
                                            _vector(_I16, 16)), align=1) for h in range(2)]
            offset = builder.mul(p, ir.Constant(_I64, 4))
            for r in range(MR):
                pair = builder.load(_pointer(builder, builder.add(rows[r], offset), _I32), align=1)
                spread = builder.insert_element(ir.Constant(v8, ir.Undefined), pair, ir.Constant(_I32, 0))
                spread = builder.shuffle_vector(spread, spread, ir.Constant(v8, [0] * 8))
                a16 = builder.bitcast(spread, _vector(_I16, 16))
                for h in range(2):
                    acc = accs[r][h]
                    builder.store(builder.add(builder.load(acc), _pair_products(builder, a16, halves[h])), acc)
        for r in range(MR):
            row = builder.add(c_addr, builder.mul(c_step, ir.Constant(_I64, r)))
            for h in range(2):
                builder.store(builder.load(accs[r][h]),
                              _pointer(builder, builder.add(row, ir.Constant(_I64, 32 * h)), v8), align=1)
        return context.get_dummy_value()
    return sig, codegen
