"""LLVM vectors in compiled (numba) kernels: a block of float32 lanes that lives in
registers, loads that widen table values of several encodings into it, software
prefetch, and scalar loads/stores at any byte address.

Why: numba has no SIMD type. A loop that sums rows into an array keeps its sums in
memory (a load and a store per value per row, plus index wrap-around code); an LLVM
`<n x float>` value stays in n/8 AVX2 (n/16 AVX-512) registers for the whole loop,
and each row costs its loads and FMAs only (SparseLengthsSum, 1M x 64 table, one
thread: 4.9 -> 3.9 ms, measured; see docs/perfkernels.md).

Memory is named by integer addresses (`arr.ctypes.data` plus byte offsets), so a
kernel's argument types do not depend on a table's dtype, strides or index width, and
one compiled kernel serves them all (numba compiles a parallel kernel in seconds, once
per argument-type combination). Addresses do not keep arrays alive: the caller owns
every array it passes an address of (see blas.py for what goes wrong otherwise), and
guarantees that every address is in bounds: nothing here checks.

    Lanes(n[, kind])               token argument: the kernel is compiled for n lanes
                                   (of table values stored as `kind`, one of KINDS)
    LANES_8, LANES_16, LOOKUP_LANES   constants: 8 and 16 lanes; every (width, kind) of a lookup
    lanes_are(lanes, width, kind)  whether a constant Lanes is (run-time) width, kind
    lane_count(lanes)              n of Lanes(n), a compile-time constant
    target_lanes()                 (host side) 16 where numba's target has AVX-512F, else 8
    vzeros(lanes)                  a zero vector, type Vec(n)
    vload_f32 / vload_f16 / vload_u8 / vload_u4 / vload_u2(lanes, address)
                                   n values stored as float32, float16, uint8, or two /
                                   four values per byte (low bits first), widened to
                                   float32; packed values come out *field-major* (lane
                                   f * n/k + b holds field f of byte b: no shuffle per
                                   row, lanes are summed independently)
    vfma(acc, w, x), vadds(acc, s), vmuls(acc, s)       acc + w*x, acc + s, acc * s
    vload(lanes, address)          the vload_<kind> of lanes' kind
    vload_f32_even / vload_f32_odd(lanes, address)   floats 0, 2, .. / 1, 3, .. of the 2n
                                   float32 at address (a stride-2 split)
    has_scale_bias(lanes), row_scale / row_bias(lanes, address)   fused rows' scale
                                   and bias (constants 1 and 0 for float kinds)
    vstore_lanes_at(lanes, address, v)  vstore_f32_at, packed kinds back in natural order
    vstore(out, row, col, v)       n float32 into row `row` from column `col` of 2-D
                                   float32 `out`
    vstore_fields(out, row, col, v, k)   the same for field-major lanes of k = 2 or 4
                                   values per byte (back in natural order)
    vnatural(v, k)                 field-major lanes (k = 2 or 4) in natural order
    vmin(a, b), vmax(a, b)         lanewise (b where a compares false: NaN in a is
                                   dropped; see vhsum for finding NaN)
    vmax_nan(a, b)                 lanewise max propagating NaN from either (np.maximum)
    vrint(v), vclamp(v, lo, hi)    round half to even; lanewise clamp to scalars
    vhmin(v), vhmax(v), vhsum(v)   across the lanes (n a power of two), to a scalar
    vstore_f32_lanes(address, v, lo, hi), vload_f32_lanes(lanes, address, lo, hi)
                                   lanes lo..hi-1 only (masked store / load, the others
                                   0.0): memory of the other lanes is not touched
    vmerge_f32_lanes(v, address, lo, hi)   v with lanes lo..hi-1 loaded (masked load)
    vtranspose16_at(address, v0, .., v15)  the 16 x 16 transpose of 16-lane rows v0..v15
                                   stored at address (column c at address + 64c)
    vstore_f32_at / vstore_f16_at / vstore_u8_at(address, v)   n float32, n float16
                                   (rounded to nearest even), n bytes (v holds whole
                                   numbers in [0, 255])
    vstore_packed_at(address, v, bits)   n whole numbers < 2**bits, k = 8/bits per byte
                                   (low bits first): n/k bytes
    vsplat(lanes, s); vadd / vsub / vmul(a, b)                 lanewise arithmetic
    vsigmoid(v) = 1 / (1 + exp(-v)), vtanh(v) = 1 - 2 / (exp(2v) + 1), with a vector
                                   exp (see _emit_exp: |relative error| < 4e-7)
    prefetch(address)              prefetcht0 (never faults, whatever the address)
    prefetch_l2(address)           prefetcht1: into L2, not L1 (never faults either)
    prefetch_w(address)            prefetchw: a line about to be written (never faults)
    load_f32 / load_f16(address), load_index(address, j, wide)     scalars
    store_f32 / store_f16(address, x)                               (unaligned)
    address(arr)                   arr's data pointer as an integer
    half_to_float(bits) / float_to_half(x)                          uint16 <-> float32

float16 widening is LLVM's fpext (F16C's vcvtph2ps): exact, half subnormals included,
also when the thread flushes float32 denormals (FTZ/DAZ only concern float32/64
inputs and results); tests/test_sparse_lengths_compiled.py checks it with
torch.set_flush_denormal(True). Narrowing (fptrunc) rounds to nearest even.
Importing this module imports numba; kernel modules reach it through jit's LazyGlobal.
numba's disk cache notices edits to a kernel's own source file only; caffe2py's cache
folders also carry a digest of every CPU kernel module (cache.kernels_tree_digest), so
an edit here recompiles the kernels that inline these intrinsics.
"""
import functools

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.imputils import lower_constant
from numba.extending import NativeValue, intrinsic, models, register_model, typeof_impl, unbox

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()


# Value encodings a Lanes type can carry (lookup kernels), with their codes.
KINDS = ("f32", "f16", "u8", "u4", "u2")
_BITS = {"f32": 32, "f16": 16, "u8": 8, "u4": 4, "u2": 2}


class Lanes:
    """n float32 lanes, optionally of table values stored as `kind` (one of KINDS)."""
    __slots__ = ("n", "kind", "numba_type")

    def __init__(self, n, kind=None):
        if n < 1 or kind not in (None,) + KINDS or (kind and n % max(1, 8 // _BITS[kind])):
            raise ValueError("no Lanes(%r, %r)" % (n, kind))
        self.n, self.kind = n, kind
        self.numba_type = None      # made on the first call that passes it (_typeof_lanes)

    def __repr__(self):
        return "Lanes(%d, %r)" % (self.n, self.kind)


class LanesType(types.Type):
    def __init__(self, n, kind=None):
        self.n, self.kind = n, kind
        super().__init__(name="Lanes(%d,%s)" % (n, kind))


class Vec(types.Type):
    """<n x float>."""

    def __init__(self, n):
        self.n = n
        super().__init__(name="Vec(%d)" % n)


@register_model(LanesType)
class _LanesModel(models.OpaqueModel):
    pass


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(_F32, fe_type.n))


@typeof_impl.register(Lanes)
def _typeof_lanes(val, c):
    # kept on the token: numba asks on every call of a kernel taking one (2.4 us a time)
    if val.numba_type is None:
        val.numba_type = LanesType(val.n, val.kind)
    return val.numba_type


@unbox(LanesType)
def _unbox_lanes(typ, obj, c):
    return NativeValue(ir.Constant(_I8P, None))


@lower_constant(LanesType)
def _constant_lanes(context, builder, ty, value):
    return ir.Constant(_I8P, None)


LANES_8 = Lanes(8)
LANES_16 = Lanes(16)
# Every (width, kind) a lookup kernel uses, for numba.literal_unroll: one compiled kernel
# holds a copy of its row loop for each, picked at run time by lanes_are().
LOOKUP_WIDTHS = (64, 32, 16, 8, 4, 2, 1)
LOOKUP_LANES = tuple(Lanes(n, kind) for kind in KINDS for n in LOOKUP_WIDTHS if n % max(1, 8 // _BITS[kind]) == 0)


def _vector(n, elem=_F32):
    return ir.VectorType(elem, n)


def _broadcast(builder, scalar, n):
    v = builder.insert_element(ir.Constant(_vector(n), ir.Undefined), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, v, ir.Constant(_vector(n, _I32), [0] * n))


def _f32(context, builder, value, ty):
    return context.cast(builder, value, ty, types.float32)


def _pointer(context, builder, address, ty, elem):
    return builder.inttoptr(context.cast(builder, address, ty, types.int64), elem.as_pointer())


def _is_int(*tys):
    return all(isinstance(t, types.Integer) for t in tys)


@intrinsic
def vzeros(typingctx, lanes):
    if not isinstance(lanes, LanesType):
        return None
    n = lanes.n

    def codegen(context, builder, sig, args):
        return ir.Constant(_vector(n), [0.0] * n)
    return Vec(n)(lanes), codegen


def _spread_fields(builder, raw, count, bits):
    """<count x i8> packed bytes -> <count * 8/bits x i8>, field-major."""
    k = 8 // bits
    i8s = _vector(count, ir.IntType(8))
    mask = ir.Constant(i8s, [(1 << bits) - 1] * count)
    fields = []
    for f in range(k):
        shifted = raw if f == 0 else builder.lshr(raw, ir.Constant(i8s, [f * bits] * count))
        fields.append(shifted if f == k - 1 else builder.and_(shifted, mask))
    while len(fields) > 1:         # concatenate pairwise: [f0 f1], [f2 f3] -> [f0 f1 f2 f3]
        width = fields[0].type.count
        order = ir.Constant(_vector(2 * width, _I32), list(range(2 * width)))
        fields = [builder.shuffle_vector(fields[i], fields[i + 1], order) for i in range(0, len(fields), 2)]
    return fields[0]


def _vload(bits):
    def typer(typingctx, lanes, address):
        if not isinstance(lanes, LanesType) or not _is_int(address):
            return None
        n = lanes.n
        k = max(1, 8 // bits)

        def codegen(context, builder, sig, args):
            if n % k:      # no such tile: the callers pick widths that are multiples of k
                return ir.Constant(_vector(n), [0.0] * n)
            elem = {32: _F32, 16: ir.IntType(16)}.get(bits, ir.IntType(8))
            raw = builder.load(_pointer(context, builder, args[1], sig.args[1], _vector(n // k, elem)), align=1)
            if bits == 32:
                return raw
            if bits == 16:
                return builder.fpext(builder.bitcast(raw, _vector(n, ir.HalfType())), _vector(n))
            if bits < 8:
                raw = _spread_fields(builder, raw, n // k, bits)
            return builder.uitofp(raw, _vector(n))
        return Vec(n)(lanes, address), codegen
    return typer


_VLOAD_TYPERS = {kind: _vload(bits) for kind, bits in _BITS.items()}
vload_f32 = intrinsic(_VLOAD_TYPERS["f32"])
vload_f16 = intrinsic(_VLOAD_TYPERS["f16"])
vload_u8 = intrinsic(_VLOAD_TYPERS["u8"])
vload_u4 = intrinsic(_VLOAD_TYPERS["u4"])
vload_u2 = intrinsic(_VLOAD_TYPERS["u2"])


def _vload_every2(first):
    def typer(typingctx, lanes, address):
        if not isinstance(lanes, LanesType) or not _is_int(address):
            return None
        n = lanes.n

        def codegen(context, builder, sig, args):
            wide = builder.load(_pointer(context, builder, args[1], sig.args[1], _vector(2 * n)), align=1)
            return builder.shuffle_vector(wide, wide, ir.Constant(_vector(n, _I32), [2 * i + first for i in range(n)]))
        return Vec(n)(lanes, address), codegen
    return typer


# n float32 from the 2n at an address: the even ones (lane i = float 2i) or the odd ones
# (float 2i + 1); a row split by stride 2 in one load and a shuffle per half, where
# scalar strided loads cost a load each
vload_f32_even = intrinsic(_vload_every2(0))
vload_f32_odd = intrinsic(_vload_every2(1))


@intrinsic
def vfma(typingctx, acc, w, x):
    if not isinstance(acc, Vec) or acc != x or not isinstance(w, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a, ww, xx = args
        wv = _broadcast(builder, _f32(context, builder, ww, sig.args[1]), sig.args[0].n)
        return builder.fadd(a, builder.fmul(wv, xx, flags=["contract"]), flags=["contract"])
    return acc(acc, w, x), codegen


def _scalar_op(op):
    def typer(typingctx, acc, s):
        if not isinstance(acc, Vec) or not isinstance(s, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            sv = _broadcast(builder, _f32(context, builder, args[1], sig.args[1]), sig.args[0].n)
            return getattr(builder, op)(args[0], sv)
        return acc(acc, s), codegen
    return intrinsic(typer)


vadds = _scalar_op("fadd")
vmuls = _scalar_op("fmul")


def _vstore(typingctx, out, row, col, v, per_byte):
    if not isinstance(v, Vec) or not isinstance(out, types.Array) or out.ndim != 2 \
            or out.dtype != types.float32 or not _is_int(row, col):
        return None
    n = v.n

    def codegen(context, builder, sig, args):
        a, r, c, vv = args[:4]
        if per_byte > 1 and n % per_byte == 0:     # field-major -> natural
            order = [(i % per_byte) * (n // per_byte) + i // per_byte for i in range(n)]
            vv = builder.shuffle_vector(vv, vv, ir.Constant(_vector(n, _I32), order))
        ary = context.make_array(sig.args[0])(context, builder, a)
        stride0 = builder.extract_value(ary.strides, 0)
        r = context.cast(builder, r, sig.args[1], types.int64)
        c = context.cast(builder, c, sig.args[2], types.int64)
        addr = builder.add(builder.ptrtoint(ary.data, _I64), builder.mul(r, stride0))
        addr = builder.add(addr, builder.mul(c, ir.Constant(_I64, 4)))
        builder.store(vv, builder.inttoptr(addr, _vector(n).as_pointer()), align=4)
        return context.get_dummy_value()
    return codegen


@intrinsic
def vstore(typingctx, out, row, col, v):
    codegen = _vstore(typingctx, out, row, col, v, 1)
    return None if codegen is None else (types.void(out, row, col, v), codegen)


@intrinsic
def vstore_fields(typingctx, out, row, col, v, k):
    """vstore of field-major lanes of k (a constant 2 or 4) values per byte."""
    per_byte = getattr(k, "literal_value", None)
    if per_byte not in (2, 4):
        return None
    codegen = _vstore(typingctx, out, row, col, v, per_byte)
    return None if codegen is None else (types.void(out, row, col, v, k), codegen)


def _prefetch(locality, write=0):
    def typer(typingctx, address):
        if not _is_int(address):
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
            fn = builder.module.declare_intrinsic("llvm.prefetch", fnty=fnty)
            # read or write, the locality, data cache
            builder.call(fn, [_pointer(context, builder, args[0], sig.args[0], ir.IntType(8)),
                              ir.Constant(_I32, write), ir.Constant(_I32, locality), ir.Constant(_I32, 1)])
            return context.get_dummy_value()
        return types.void(address), codegen
    return intrinsic(typer)


# prefetcht0 (into every cache level) and prefetcht1 (into L2 and the last level, not
# L1: data wanted a while later, which should not evict what the loop reads now)
prefetch = _prefetch(3)
prefetch_l2 = _prefetch(2)
# prefetchw: a line about to be written, fetched for ownership ahead of the stores
prefetch_w = _prefetch(3, write=1)


@intrinsic
def load_f32(typingctx, address):
    if not _is_int(address):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, args[0], sig.args[0], _F32), align=1)
    return types.float32(address), codegen


@intrinsic
def load_f16(typingctx, address):
    if not _is_int(address):
        return None

    def codegen(context, builder, sig, args):
        return builder.fpext(builder.load(_pointer(context, builder, args[0], sig.args[0], ir.HalfType()), align=1),
                             _F32)
    return types.float32(address), codegen


@intrinsic
def load_index(typingctx, address, j, wide):
    """Entry j of an int64 (wide) or int32 array at `address`, as int64."""
    if not _is_int(address, j) or not isinstance(wide, types.Boolean):
        return None

    def codegen(context, builder, sig, args):
        base = context.cast(builder, args[0], sig.args[0], types.int64)
        j = context.cast(builder, args[1], sig.args[1], types.int64)
        with builder.if_else(args[2]) as (then, otherwise):
            with then:
                p64 = builder.inttoptr(builder.add(base, builder.shl(j, ir.Constant(_I64, 3))), _I64.as_pointer())
                v64 = builder.load(p64, align=8)
                b64 = builder.block
            with otherwise:
                p32 = builder.inttoptr(builder.add(base, builder.shl(j, ir.Constant(_I64, 2))), _I32.as_pointer())
                v32 = builder.sext(builder.load(p32, align=4), _I64)
                b32 = builder.block
        phi = builder.phi(_I64)
        phi.add_incoming(v64, b64)
        phi.add_incoming(v32, b32)
        return phi
    return types.int64(address, j, wide), codegen


def _store(half):
    def typer(typingctx, address, x):
        if not _is_int(address) or not isinstance(x, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            v = _f32(context, builder, args[1], sig.args[1])
            elem = ir.HalfType() if half else _F32
            if half:
                v = builder.fptrunc(v, elem)
            builder.store(v, _pointer(context, builder, args[0], sig.args[0], elem), align=1)
            return context.get_dummy_value()
        return types.void(address, x), codegen
    return intrinsic(typer)


store_f32 = _store(False)
store_f16 = _store(True)


@intrinsic
def address(typingctx, arr):
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        return builder.ptrtoint(context.make_array(sig.args[0])(context, builder, args[0]).data, _I64)
    return types.int64(arr), codegen


@intrinsic
def half_to_float(typingctx, bits):
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), _F32)
    return types.float32(bits), codegen


@intrinsic
def float_to_half(typingctx, x):
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, sig, args):
        v = _f32(context, builder, args[0], sig.args[0])
        return builder.bitcast(builder.fptrunc(v, ir.HalfType()), ir.IntType(16))
    return types.uint16(x), codegen


@intrinsic
def vnatural(typingctx, v, k):
    per_byte = getattr(k, "literal_value", None)
    if not isinstance(v, Vec) or per_byte not in (2, 4) or v.n % per_byte:
        return None
    n = v.n

    def codegen(context, builder, sig, args):
        order = [(i % per_byte) * (n // per_byte) + i // per_byte for i in range(n)]
        return builder.shuffle_vector(args[0], args[0], ir.Constant(_vector(n, _I32), order))
    return v(v, k), codegen


def _pick(pred):
    def typer(typingctx, a, b):
        if not isinstance(a, Vec) or a != b:
            return None

        def codegen(context, builder, sig, args):
            return builder.select(builder.fcmp_ordered(pred, args[0], args[1]), args[0], args[1])
        return a(a, b), codegen
    return intrinsic(typer)


vmin = _pick("<")
vmax = _pick(">")


@intrinsic
def vmax_nan(typingctx, a, b):
    """Lanewise a where a is NaN or a > b, else b: NaN in either propagates (as
    np.maximum), and each lane is the scalar `a if (a > b or a != a) else b`."""
    if not isinstance(a, Vec) or a != b:
        return None

    def codegen(context, builder, sig, args):
        a_wins = builder.or_(builder.fcmp_unordered("uno", args[0], args[0]),
                             builder.fcmp_ordered(">", args[0], args[1]))
        return builder.select(a_wins, args[0], args[1])
    return a(a, b), codegen


@intrinsic
def vrint(typingctx, v):
    if not isinstance(v, Vec):
        return None

    def codegen(context, builder, sig, args):
        vt = args[0].type
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]), "llvm.rint.v%df32" % vt.count)
        return builder.call(fn, [args[0]])
    return v(v), codegen


@intrinsic
def vclamp(typingctx, v, lo, hi):
    if not isinstance(v, Vec) or not isinstance(lo, (types.Float, types.Integer)) \
            or not isinstance(hi, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        n = sig.args[0].n
        lo_v = _broadcast(builder, _f32(context, builder, args[1], sig.args[1]), n)
        hi_v = _broadcast(builder, _f32(context, builder, args[2], sig.args[2]), n)
        x = builder.select(builder.fcmp_ordered("<", args[0], lo_v), lo_v, args[0])
        return builder.select(builder.fcmp_ordered(">", x, hi_v), hi_v, x)
    return v(v, lo, hi), codegen


def _across(kind):
    def typer(typingctx, v):
        if not isinstance(v, Vec) or v.n & (v.n - 1):      # powers of two only
            return None

        def codegen(context, builder, sig, args):
            x = args[0]
            width = sig.args[0].n
            while width > 1:          # halve: lanes [0, w/2) combined with [w/2, w)
                half = width // 2
                lo = builder.shuffle_vector(x, x, ir.Constant(_vector(half, _I32), list(range(half))))
                hi = builder.shuffle_vector(x, x, ir.Constant(_vector(half, _I32), list(range(half, width))))
                if kind == "sum":
                    x = builder.fadd(lo, hi)
                else:
                    x = builder.select(builder.fcmp_ordered(kind, lo, hi), lo, hi)
                width = half
            return builder.extract_element(x, ir.Constant(_I32, 0))
        return types.float32(v), codegen
    return intrinsic(typer)


vhmin = _across("<")
vhmax = _across(">")
vhsum = _across("sum")


def _vstore_at(encoding):
    def typer(typingctx, address, v):
        if not _is_int(address) or not isinstance(v, Vec):
            return None
        n = v.n

        def codegen(context, builder, sig, args):
            x = args[1]
            if encoding == "f16":
                x = builder.fptrunc(x, _vector(n, ir.HalfType()))
            elif encoding == "u8":
                x = builder.trunc(builder.fptosi(x, _vector(n, _I32)), _vector(n, ir.IntType(8)))
            builder.store(x, _pointer(context, builder, args[0], sig.args[0], x.type), align=1)
            return context.get_dummy_value()
        return types.void(address, v), codegen
    return intrinsic(typer)


vstore_f32_at = _vstore_at("f32")
vstore_f16_at = _vstore_at("f16")
vstore_u8_at = _vstore_at("u8")


def _lane_mask(context, builder, sig, args, first, n):
    """<n x i1> from a call's (lo, hi) at args[first], args[first + 1]: lanes i with
    lo <= i < hi."""
    lo, hi = (context.cast(builder, args[k], sig.args[k], types.int64) for k in (first, first + 1))
    iota = ir.Constant(_vector(n, _I64), list(range(n)))
    return builder.and_(builder.icmp_signed(">=", iota, _broadcast_int(builder, lo, n)),
                        builder.icmp_signed("<", iota, _broadcast_int(builder, hi, n)))


def _broadcast_int(builder, scalar, n):
    v = builder.insert_element(ir.Constant(_vector(n, _I64), ir.Undefined), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, v, ir.Constant(_vector(n, _I32), [0] * n))


def _masked_intrinsic(builder, name, n, args):
    """A call of LLVM's llvm.masked.store / llvm.masked.load on <n x float>."""
    vec = _vector(n)
    mask = _vector(n, ir.IntType(1))
    if name == "store":
        fnty = ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), _I32, mask])
    else:
        fnty = ir.FunctionType(vec, [vec.as_pointer(), _I32, mask, vec])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.%s.v%df32.p0" % (name, n))
    return builder.call(fn, args)


def _masked_load(context, builder, sig, args, passthrough):
    """A masked load for a call whose args are (lanes or v, address, lo, hi): lanes
    lo..hi-1 from memory, the others from `passthrough`."""
    n = passthrough.type.count
    at = _pointer(context, builder, args[1], sig.args[1], _vector(n))
    mask = _lane_mask(context, builder, sig, args, 2, n)
    return _masked_intrinsic(builder, "load", n, [at, ir.Constant(_I32, 4), mask, passthrough])


@intrinsic
def vstore_f32_lanes(typingctx, address, v, lo, hi):
    """Lanes lo..hi-1 of v to the float32 at address + 4 * lane (AVX-512 masked
    store): the other lanes' memory is not touched, whatever it is."""
    if not _is_int(address, lo, hi) or not isinstance(v, Vec):
        return None
    n = v.n

    def codegen(context, builder, sig, args):
        at = _pointer(context, builder, args[0], sig.args[0], _vector(n))
        _masked_intrinsic(builder, "store", n, [args[1], at, ir.Constant(_I32, 4),
                                                _lane_mask(context, builder, sig, args, 2, n)])
        return context.get_dummy_value()
    return types.void(address, v, lo, hi), codegen


@intrinsic
def vload_f32_lanes(typingctx, lanes, address, lo, hi):
    """n float32 from address, lanes lo..hi-1 read, the others 0.0 (their memory is not
    touched)."""
    if not isinstance(lanes, LanesType) or not _is_int(address, lo, hi):
        return None
    n = lanes.n

    def codegen(context, builder, sig, args):
        return _masked_load(context, builder, sig, args, ir.Constant(_vector(n), [0.0] * n))
    return Vec(n)(lanes, address, lo, hi), codegen


@intrinsic
def vmerge_f32_lanes(typingctx, v, address, lo, hi):
    """v with lanes lo..hi-1 replaced by the float32 at address + 4 * lane (masked
    load): the other lanes keep v's values bit for bit, and their memory is not
    touched."""
    if not isinstance(v, Vec) or not _is_int(address, lo, hi):
        return None

    def codegen(context, builder, sig, args):
        return _masked_load(context, builder, sig, args, args[0])
    return v(v, address, lo, hi), codegen


def _transpose_masks():
    """The four stages of a 16 x 16 transpose as (pairs, shufflevector masks): stage
    s turns vectors (a, b) of each listed pair into the pair's two results, the
    classic network of per-128-bit unpacks (32-bit, then 64-bit elements) and two
    rounds of 128-bit block selects."""
    lo32 = [e for q in range(4) for e in (4 * q, 16 + 4 * q, 4 * q + 1, 17 + 4 * q)]
    hi32 = [e + 2 for e in lo32]
    lo64 = [e for q in range(4) for e in (4 * q, 4 * q + 1, 16 + 4 * q, 17 + 4 * q)]
    hi64 = [e + 2 for e in lo64]
    # 128-bit blocks: even blocks of a then b, odd blocks of a then b
    even = [4 * blk + e for blk in (0, 2, 4, 6) for e in range(4)]
    odd = [4 * blk + e for blk in (1, 3, 5, 7) for e in range(4)]
    return (lo32, hi32), (lo64, hi64), (even, odd)


@intrinsic
def vtranspose16_at(typingctx, address, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15):
    """The 16 x 16 transpose of rows v0..v15 (16 lanes each) stored at address: the
    64 bytes at address + 64 * c hold lane c of v0, v1, .., v15 (column c). In
    registers (64 shuffles, no gathers or scatters): how a block computed with
    channels in the lanes is written out with pixels in the lanes."""
    rows = (v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15)
    if not _is_int(address) or any(r != Vec(16) for r in rows):
        return None

    def codegen(context, builder, sig, args):
        (lo32, hi32), (lo64, hi64), (even, odd) = _transpose_masks()

        def shuffle(a, b, mask):
            return builder.shuffle_vector(a, b, ir.Constant(_vector(16, _I32), mask))
        r = list(args[1:])
        # rows 4g..4g+3 -> t: [r0 r1 interleaved], ..; u[g][k]: column 4q + k of rows
        # 4g..4g+3 in 128-bit block q
        u = []
        for g in range(4):
            a, b, c, d = r[4 * g:4 * g + 4]
            t0, t1 = shuffle(a, b, lo32), shuffle(a, b, hi32)
            t2, t3 = shuffle(c, d, lo32), shuffle(c, d, hi32)
            u.append((shuffle(t0, t2, lo64), shuffle(t0, t2, hi64), shuffle(t1, t3, lo64), shuffle(t1, t3, hi64)))
        for k in range(4):
            x0, x1 = shuffle(u[0][k], u[1][k], even), shuffle(u[0][k], u[1][k], odd)
            y0, y1 = shuffle(u[2][k], u[3][k], even), shuffle(u[2][k], u[3][k], odd)
            # column 4q + k: block q of u[0][k], u[1][k], u[2][k], u[3][k]
            columns = {0: shuffle(x0, y0, even), 2: shuffle(x0, y0, odd),
                       1: shuffle(x1, y1, even), 3: shuffle(x1, y1, odd)}
            for q, col in columns.items():
                at = _pointer(context, builder, builder.add(context.cast(builder, args[0], sig.args[0], types.int64),
                                                            ir.Constant(_I64, 64 * (4 * q + k))),
                              types.int64, _vector(16))
                builder.store(col, at, align=4)
        return context.get_dummy_value()
    return types.void(address, *rows), codegen


@intrinsic
def vstore_packed_at(typingctx, address, v, bits):
    width = getattr(bits, "literal_value", None)
    if not _is_int(address) or not isinstance(v, Vec) or width not in (4, 2) or v.n % (8 // width):
        return None
    n, k = v.n, 8 // width

    def codegen(context, builder, sig, args):
        count = n // k
        i8s = _vector(count, ir.IntType(8))
        q = builder.trunc(builder.fptosi(args[1], _vector(n, _I32)), _vector(n, ir.IntType(8)))
        packed = None
        for f in range(k):            # field f: lanes f, f + k, f + 2k, ... -> bits f * width
            field = builder.shuffle_vector(q, q, ir.Constant(_vector(count, _I32), list(range(f, n, k))))
            if f:
                field = builder.shl(field, ir.Constant(i8s, [f * width] * count))
            packed = field if packed is None else builder.or_(packed, field)
        builder.store(packed, _pointer(context, builder, args[0], sig.args[0], i8s), align=1)
        return context.get_dummy_value()
    return types.void(address, v, bits), codegen


@intrinsic
def vsplat(typingctx, lanes, s):
    if not isinstance(lanes, LanesType) or not isinstance(s, (types.Float, types.Integer)):
        return None
    n = lanes.n

    def codegen(context, builder, sig, args):
        return _broadcast(builder, _f32(context, builder, args[1], sig.args[1]), n)
    return Vec(n)(lanes, s), codegen


def _binary(op):
    def typer(typingctx, a, b):
        if not isinstance(a, Vec) or a != b:
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1], flags=["contract"])
        return a(a, b), codegen
    return intrinsic(typer)


vadd = _binary("fadd")
vsub = _binary("fsub")
vmul = _binary("fmul")

# exp(x) = 2**k * exp(r): k = rint(x / ln 2), r = x - k ln 2 (ln 2 in two parts: k * _LN2_HI
# is exact for |k| < 2**9, so r keeps its precision), exp(r) for |r| <= ln(2)/2 by the
# Taylor polynomial of degree 7 (truncation error < 6e-9 relative), 2**k put into the
# exponent bits. x is clamped to [-87, 88] so that 2**k stays a normal float32.
_LN2_HI = 0.693145751953125          # 0x3F317200: 15 significant bits
_LN2_LO = 1.4286068203094172e-06     # ln 2 - _LN2_HI
_TAYLOR = [1.0 / f for f in (5040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0)]


def _emit_exp(builder, x):
    n = x.type.count
    vec = _vector(n)

    def c(value):
        return ir.Constant(vec, [value] * n)
    x = builder.select(builder.fcmp_ordered("<", x, c(-87.0)), c(-87.0), x)
    x = builder.select(builder.fcmp_ordered(">", x, c(88.0)), c(88.0), x)
    rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec]), "llvm.rint.v%df32" % n)
    k = builder.call(rint, [builder.fmul(x, c(1.4426950408889634))])
    r = builder.fsub(x, builder.fmul(k, c(_LN2_HI)))
    r = builder.fsub(r, builder.fmul(k, c(_LN2_LO)))
    p = c(_TAYLOR[0])
    for coefficient in _TAYLOR[1:]:
        p = builder.fadd(builder.fmul(p, r, flags=["contract"]), c(coefficient), flags=["contract"])
    i32s = _vector(n, _I32)
    bits = builder.shl(builder.add(builder.fptosi(k, i32s), ir.Constant(i32s, [127] * n)),
                       ir.Constant(i32s, [23] * n))
    return builder.fmul(p, builder.bitcast(bits, vec))


def _activation(kind):
    def typer(typingctx, v):
        if not isinstance(v, Vec):
            return None

        def codegen(context, builder, sig, args):
            n = sig.args[0].n
            one = ir.Constant(_vector(n), [1.0] * n)
            if kind == "sigmoid":
                e = _emit_exp(builder, builder.fsub(ir.Constant(_vector(n), [0.0] * n), args[0]))
                return builder.fdiv(one, builder.fadd(one, e))
            e = _emit_exp(builder, builder.fadd(args[0], args[0]))
            two = ir.Constant(_vector(n), [2.0] * n)
            return builder.fsub(one, builder.fdiv(two, builder.fadd(e, one)))
        return v(v), codegen
    return intrinsic(typer)


vsigmoid = _activation("sigmoid")
vtanh = _activation("tanh")


def _kind_of(lanes):
    return lanes.kind if isinstance(lanes, LanesType) else None


@intrinsic
def lane_count(typingctx, lanes):
    """n of a Lanes(n) token, as a compile-time constant (block sizes in a kernel
    compiled once per width)."""
    if not isinstance(lanes, LanesType):
        return None
    n = lanes.n

    def codegen(context, builder, sig, args):
        return ir.Constant(_I64, n)
    return types.int64(lanes), codegen


@functools.lru_cache(maxsize=1)
def target_lanes():
    """float32 lanes of the widest vector register of the CPU numba compiles for: 16
    with AVX-512F, else 8 (numba's NUMBA_CPU_NAME / NUMBA_CPU_FEATURES overrides count).
    Asked once per process: LLVM's feature query costs ~0.36 ms, and every conv plan
    asks."""
    from llvmlite import binding
    from numba.core import config
    if config.CPU_FEATURES is not None:
        features = config.CPU_FEATURES
    elif config.CPU_NAME is not None:       # a named target without features: assume its baseline
        features = ""
    else:
        features = binding.get_host_cpu_features().flatten()
    return 16 if "+avx512f" in features.split(",") else 8


@intrinsic
def lanes_are(typingctx, lanes, width, kind):
    """Whether `lanes` has `width` lanes of KINDS[kind] (run-time ints)."""
    if not isinstance(lanes, LanesType) or lanes.kind is None or not _is_int(width, kind):
        return None
    n, code = lanes.n, KINDS.index(lanes.kind)

    def codegen(context, builder, sig, args):
        w = context.cast(builder, args[1], sig.args[1], types.int64)
        k = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.and_(builder.icmp_signed("==", w, ir.Constant(_I64, n)),
                            builder.icmp_signed("==", k, ir.Constant(_I64, code)))
    return types.boolean(lanes, width, kind), codegen


@intrinsic
def vload(typingctx, lanes, address):
    """vload_<kind> for the kind `lanes` carries."""
    kind = _kind_of(lanes)
    if kind is None:
        return None
    return _VLOAD_TYPERS[kind](typingctx, lanes, address)


@intrinsic
def has_scale_bias(typingctx, lanes):
    """Whether rows of lanes' kind carry scale and bias (a constant)."""
    kind = _kind_of(lanes)
    if kind is None:
        return None
    value = kind in ("u8", "u4", "u2")

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(1), int(value))
    return types.boolean(lanes), codegen


def _scale_bias(part):
    def typer(typingctx, lanes, address):
        """The scale (part 0) or bias (part 1) stored at `address` for lanes' kind: float32
        pair for u8, float16 pair for u4 / u2; 1 and 0 for float kinds."""
        kind = _kind_of(lanes)
        if kind is None or not _is_int(address):
            return None

        def codegen(context, builder, sig, args):
            if kind in ("f32", "f16"):
                return ir.Constant(_F32, 1.0 if part == 0 else 0.0)
            half = kind != "u8"
            base = context.cast(builder, args[1], sig.args[1], types.int64)
            at = builder.add(base, ir.Constant(_I64, part * (2 if half else 4)))
            elem = ir.HalfType() if half else _F32
            value = builder.load(builder.inttoptr(at, elem.as_pointer()), align=1)
            return builder.fpext(value, _F32) if half else value
        return types.float32(lanes, address), codegen
    return intrinsic(typer)


row_scale = _scale_bias(0)
row_bias = _scale_bias(1)


@intrinsic
def vstore_lanes_at(typingctx, lanes, address, v):
    """n float32 at `address`, field-major lanes of u4 / u2 put back in natural order."""
    kind = _kind_of(lanes)
    if kind is None or not _is_int(address) or not isinstance(v, Vec) or v.n != lanes.n:
        return None
    n = v.n
    k = {"u4": 2, "u2": 4}.get(kind, 1)

    def codegen(context, builder, sig, args):
        x = args[2]
        if k > 1:
            order = [(i % k) * (n // k) + i // k for i in range(n)]
            x = builder.shuffle_vector(x, x, ir.Constant(_vector(n, _I32), order))
        builder.store(x, _pointer(context, builder, args[1], sig.args[1], x.type), align=4)
        return context.get_dummy_value()
    return types.void(lanes, address, v), codegen
