"""The 4x16 int16 x int16 -> int32 micro-kernel of the Int8 GEMM, as an LLVM intrinsic
for compiled (numba) kernels, and the vector passes around it (requantize_rows: the
int32 -> uint8 output pass; winograd_input_16 / winograd_output_16: int8_winograd's tile
transforms), all written on explicit int16 / int32 vectors.

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
(numba's disk cache, keyed by the callers' sources, does not notice edits here: run
`caffe2py cache clear` after editing this module).
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


class _Requantizer:
    """IR for requantize_q31 on <8 x i32> sums (numba would widen it to int64 lanes):
    v = (sums >> pre_shift) + bias in int32 (wrapping, as C's int32), the Q31 multiply by
    the int32 multiplier rounded to the high half, the rounding right shift by `shift`
    (0..31, ties away from zero), clamped to [lo - y_zp, hi - y_zp], + y_zp, as <8 x i8>."""

    def __init__(self, builder, pre_shift, mult, shift, y_zp, lo, hi):
        self.builder = b = builder
        self.m64 = _splat(b, b.sext(b.trunc(mult, _I32), _I64), 8)
        self.round64 = _splat(b, ir.Constant(_I64, 1 << 30), 8)
        self.shift31 = _splat(b, ir.Constant(_I64, 31), 8)
        self.sign31 = _splat(b, ir.Constant(_I32, 31), 8)
        self.pre8, self.shift8 = self._splat32(pre_shift), self._splat32(shift)
        mask = b.sub(b.shl(ir.Constant(_I32, 1), b.trunc(shift, _I32)), ir.Constant(_I32, 1))
        self.mask8 = _splat(b, mask, 8)
        self.threshold8 = _splat(b, b.ashr(mask, ir.Constant(_I32, 1)), 8)
        self.zp8 = self._splat32(y_zp)
        self.lo8, self.hi8 = self._splat32(b.sub(lo, y_zp)), self._splat32(b.sub(hi, y_zp))

    def _splat32(self, value):
        return _splat(self.builder, self.builder.trunc(value, _I32), 8)

    def __call__(self, sums, bias):
        b = self.builder
        v8 = _vector(_I32, 8)
        v = b.add(b.ashr(sums, self.pre8), bias)
        prod = b.add(b.mul(b.sext(v, _vector(_I64, 8)), self.m64), self.round64)
        q31 = b.trunc(b.ashr(prod, self.shift31), v8)
        rem = b.add(b.and_(q31, self.mask8), b.ashr(v, self.sign31))           # - 1 when v < 0
        y = b.sub(b.ashr(q31, self.shift8), b.sext(b.icmp_signed(">", rem, self.threshold8), v8))
        y = b.select(b.icmp_signed("<", y, self.lo8), self.lo8, y)
        y = b.select(b.icmp_signed(">", y, self.hi8), self.hi8, y)
        return b.trunc(b.add(y, self.zp8), _vector(ir.IntType(8), 8))


def _int64_args(context, builder, signature, args):
    return [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)]


def _all_integers(*tys):
    return all(isinstance(t, types.Integer) for t in tys)


@intrinsic
def requantize_rows(typingctx, src, src_stride, rows, cols8, bias, dst, dst_stride, mult, shift, y_zp, lo, hi):
    """requantize_rows(src, src_stride, rows, cols8, bias, dst, dst_stride, mult, shift,
    y_zp, lo, hi), all int64 (addresses in bytes): the int32 sums src[r, j] + bias[j] for
    r < rows, j < 8 * cols8 requantized (_Requantizer) to uint8 at dst + r * dst_stride +
    j. The caller keeps every address in bounds (8 * cols8 values per row)."""
    if not _all_integers(src, src_stride, rows, cols8, bias, dst, dst_stride, mult, shift, y_zp, lo, hi):
        return None
    sig = types.void(src, src_stride, rows, cols8, bias, dst, dst_stride, mult, shift, y_zp, lo, hi)

    def codegen(context, builder, signature, args):
        (src_addr, src_step, nrows, ngroups, bias_addr, dst_addr, dst_step, mult_v, shift_v, zp_v, lo_v,
         hi_v) = _int64_args(context, builder, signature, args)
        v8, b8 = _vector(_I32, 8), _vector(ir.IntType(8), 8)
        requantize = _Requantizer(builder, ir.Constant(_I64, 0), mult_v, shift_v, zp_v, lo_v, hi_v)
        with cgutils.for_range(builder, nrows) as rloop:
            row_src = builder.add(src_addr, builder.mul(rloop.index, src_step))
            row_dst = builder.add(dst_addr, builder.mul(rloop.index, dst_step))
            with cgutils.for_range(builder, ngroups) as gloop:
                off = builder.mul(gloop.index, ir.Constant(_I64, 32))
                sums = builder.load(_pointer(builder, builder.add(row_src, off), v8), align=1)
                bias_v = builder.load(_pointer(builder, builder.add(bias_addr, off), v8), align=1)
                dst_off = builder.mul(gloop.index, ir.Constant(_I64, 8))
                builder.store(requantize(sums, bias_v), _pointer(builder, builder.add(row_dst, dst_off), b8),
                              align=1)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def winograd_output_16(typingctx, m, bias, d00, d01, d10, d11, mult, shift, y_zp, lo, hi):
    """The output pass of Winograd F(2x2, 3x3) for 16 channels, all int64 (addresses):

        m: 16 rows of 16 int32 (64 bytes apart), the products M[p * 4 + q] of one tile;
        bias: 16 int32; d00, d01, d10, d11: where the 2x2 outputs' 16 bytes go.

    Y = A^T M A in int32 (wrapping; A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]) is 4 * S (see
    int8_winograd), so S = Y >> 2; + bias and requantized by _Requantizer. Every address
    must be in bounds (16 bytes at each d)."""
    if not _all_integers(m, bias, d00, d01, d10, d11, mult, shift, y_zp, lo, hi):
        return None
    sig = types.void(m, bias, d00, d01, d10, d11, mult, shift, y_zp, lo, hi)

    def codegen(context, builder, signature, args):
        m_addr, bias_addr, a00, a01, a10, a11, mult_v, shift_v, zp_v, lo_v, hi_v = _int64_args(
            context, builder, signature, args)
        v8, b8 = _vector(_I32, 8), _vector(ir.IntType(8), 8)
        requantize = _Requantizer(builder, ir.Constant(_I64, 2), mult_v, shift_v, zp_v, lo_v, hi_v)
        add, sub = builder.add, builder.sub
        for h in range(2):
            mv = [builder.load(_pointer(builder, add(m_addr, ir.Constant(_I64, 64 * i + 32 * h)), v8), align=1)
                  for i in range(16)]
            f0 = [add(add(mv[q], mv[4 + q]), mv[8 + q]) for q in range(4)]
            f1 = [sub(sub(mv[4 + q], mv[8 + q]), mv[12 + q]) for q in range(4)]
            bias_v = builder.load(_pointer(builder, add(bias_addr, ir.Constant(_I64, 32 * h)), v8), align=1)
            for f, (left, right) in ((f0, (a00, a01)), (f1, (a10, a11))):
                for y, where in ((add(add(f[0], f[1]), f[2]), left), (sub(sub(f[1], f[2]), f[3]), right)):
                    builder.store(requantize(y, bias_v),
                                  _pointer(builder, add(where, ir.Constant(_I64, 8 * h)), b8), align=1)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def winograd_input_16(typingctx, src, row_step, pixel_step, groups, dst, dst_step):
    """The input transform of Winograd F(2x2, 3x3), 16 int16 channels at a time, all int64:

        src: the tile's top-left pixel (row i, column k at src + i * row_step + k * pixel_step),
        groups: how many runs of 16 channels (32 bytes) each pixel holds,
        dst: plane p * 4 + q of B^T d B at dst + (p * 4 + q) * dst_step, the same channels.

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]; int16 arithmetic
    (inputs in [-255, 255] give [-1020, 1020]). Every address must be in bounds."""
    if not _all_integers(src, row_step, pixel_step, groups, dst, dst_step):
        return None
    sig = types.void(src, row_step, pixel_step, groups, dst, dst_step)

    def codegen(context, builder, signature, args):
        src_addr, r_step, p_step, count, dst_addr, d_step = _int64_args(context, builder, signature, args)
        v16 = _vector(_I16, 16)
        add, sub, mul = builder.add, builder.sub, builder.mul

        def bt(a):
            return [sub(a[0], a[2]), add(a[1], a[2]), sub(a[2], a[1]), sub(a[1], a[3])]

        with cgutils.for_range(builder, count) as loop:
            off = mul(loop.index, ir.Constant(_I64, 32))
            d = [[builder.load(_pointer(builder, add(add(src_addr, off), add(mul(r_step, ir.Constant(_I64, i)),
                                                                            mul(p_step, ir.Constant(_I64, k)))),
                                        v16), align=1) for k in range(4)] for i in range(4)]
            e = [bt([d[i][k] for i in range(4)]) for k in range(4)]          # e[k][p]
            for p in range(4):
                for q, value in enumerate(bt([e[k][p] for k in range(4)])):
                    where = add(add(dst_addr, off), mul(d_step, ir.Constant(_I64, p * 4 + q)))
                    builder.store(value, _pointer(builder, where, v16), align=1)
        return context.get_dummy_value()
    return sig, codegen


def _splat(builder, value, n):
    vec = builder.insert_element(ir.Constant(_vector(value.type, n), ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vec, vec, ir.Constant(_vector(_I32, n), [0] * n))
