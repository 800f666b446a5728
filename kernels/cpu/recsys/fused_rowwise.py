"""Fused rowwise quantisation: float/half rows <-> uint8 rows that carry their own
scale and bias at the end (Caffe2's fused_{8bit,nbit}_rowwise_conversion), plus
FloatToHalf / HalfToFloat. Compiled loops over rows on the team, 8 values at a time
in vector registers (runtime/simd.py): one pass over the input for min/max and one
for the quantised values, each row while it is in L1.

Rounding: round half to even (`rint`), computed in float32 like the late Caffe2
base kernels (`lrintf` under the default rounding mode). The 2018 Eigen op rounded
half away from zero; the two differ only on exact ties. See docs/perfkernels.md.

Layouts (little-endian, scale first, then bias, both after the values):
- 8-bit:             D uint8 values, float32 scale, float32 bias   (D + 8 bytes)
- 8-bit half s/b:    D uint8 values, float16 scale, float16 bias   (D + 4 bytes)
- 4/2-bit:           ceil(D / k) bytes, value j in byte j // k at bit (j % k) * bits
                     (low bits first), float16 scale, float16 bias (k = 8 / bits)

A row holding NaN gets NaN scale and bias (its bytes are unspecified), as before.
"""
import math

import numpy as np

from ..runtime.jit import LazyGlobal, compiled, prange, team, team_blocks

EPSILON = np.float32(1e-8)

LANES_8 = LazyGlobal(".simd", "LANES_8")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vload_f16 = LazyGlobal(".simd", "vload_f16")
vload_u8 = LazyGlobal(".simd", "vload_u8")
vload_u4 = LazyGlobal(".simd", "vload_u4")
vload_u2 = LazyGlobal(".simd", "vload_u2")
vnatural = LazyGlobal(".simd", "vnatural")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vmuls = LazyGlobal(".simd", "vmuls")
vmin = LazyGlobal(".simd", "vmin")
vmax = LazyGlobal(".simd", "vmax")
vrint = LazyGlobal(".simd", "vrint")
vclamp = LazyGlobal(".simd", "vclamp")
vhmin = LazyGlobal(".simd", "vhmin")
vhmax = LazyGlobal(".simd", "vhmax")
vhsum = LazyGlobal(".simd", "vhsum")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vstore_f16_at = LazyGlobal(".simd", "vstore_f16_at")
vstore_u8_at = LazyGlobal(".simd", "vstore_u8_at")
vstore_packed_at = LazyGlobal(".simd", "vstore_packed_at")
load_f32 = LazyGlobal(".simd", "load_f32")
load_f16 = LazyGlobal(".simd", "load_f16")
store_f32 = LazyGlobal(".simd", "store_f32")
store_f16 = LazyGlobal(".simd", "store_f16")
address = LazyGlobal(".simd", "address")
half_bits_to_float = LazyGlobal(".simd", "half_to_float")
float_to_half_bits = LazyGlobal(".simd", "float_to_half")

# Conversions must round like NumPy's float32 arithmetic: no fused multiply-adds.
_EXACT = ()


@compiled(fastmath=_EXACT)
def _load(at, half):
    return load_f16(at) if half else load_f32(at)


@compiled(fastmath=_EXACT)
def _row_range(row, d, half):
    """(min, max) of the d float32 (or float16, `half`) values at address `row`; both
    NaN when one is NaN."""
    size = 2 if half else 4
    zero = np.float32(0.0)
    lo = hi = _load(row, half)
    probe = zero                      # x * 0 is NaN only for NaN and inf
    vec = d // 8 * 8
    if vec:
        x = vload_f16(LANES_8, row) if half else vload_f32(LANES_8, row)
        vlo = vhi = x
        vprobe = vmuls(x, zero)
        for j in range(8, vec, 8):
            x = vload_f16(LANES_8, row + size * j) if half else vload_f32(LANES_8, row + size * j)
            vlo = vmin(x, vlo)
            vhi = vmax(x, vhi)
            vprobe = vfma(vprobe, zero, x)
        lo, hi, probe = vhmin(vlo), vhmax(vhi), vhsum(vprobe)
    for j in range(vec, d):
        x = _load(row + size * j, half)
        lo = min(lo, x)
        hi = max(hi, x)
        probe += x * zero
    if probe != zero:                 # NaN or inf somewhere: NaN wins, inf compares fine
        for j in range(d):
            x = _load(row + size * j, half)
            if x != x:
                return x, x
            lo = min(lo, x)
            hi = max(hi, x)
    return lo, hi


def _values_of(src, half, d):
    """Twins' view of the kernels' byte rows: float32 [n, d] (float16 widened, exactly)."""
    return src.view(np.float16 if half else np.float32)[:, :d].astype(np.float32)


def _row_ranges(x):
    """Each row's (min, max), both NaN when it holds one (as _row_range)."""
    return x.min(axis=1), x.max(axis=1)


@compiled(parallel=True, fastmath=_EXACT)
def _quantize8(src, half, out, blocks):
    """out (n, d + 8) uint8 <- src (n, d * itemsize) bytes of float32 / float16 rows:
    float32 scale = (max - min) / 255 and bias = min after the values."""
    n, d = out.shape[0], out.shape[1] - 8
    size = 2 if half else 4
    base, obase = address(src), address(out)
    top = np.float32(255.0)
    for t in prange(blocks):
        for r in range((n * t) // blocks, (n * (t + 1)) // blocks):
            row = base + r * src.shape[1]
            o = obase + r * out.shape[1]
            lo, hi = _row_range(row, d, half)
            span = hi - lo
            inv = top / (span + np.float32(1e-8))
            neg = -lo
            vec = d // 8 * 8
            for j in range(0, vec, 8):
                x = vload_f16(LANES_8, row + size * j) if half else vload_f32(LANES_8, row + size * j)
                vstore_u8_at(o + j, vclamp(vrint(vmuls(vadds(x, neg), inv)), 0, 255))
            for j in range(vec, d):
                q = np.rint((_load(row + size * j, half) - lo) * inv)
                out[r, j] = np.uint8(min(max(q, np.float32(0)), top))
            store_f32(o + d, span / top)
            store_f32(o + d + 4, lo)


@_quantize8.numpy_twin
def _quantize8_numpy(src, half, out, blocks):
    d = out.shape[1] - 8
    x = _values_of(src, half, d)
    with np.errstate(all="ignore"):
        lo, hi = _row_ranges(x)
        span = hi - lo
        inv = np.float32(255.0) / (span + np.float32(1e-8))
        q = np.clip(np.rint((x - lo[:, None]) * inv[:, None]), 0, 255)
        out[:, :d] = np.nan_to_num(q, nan=0.0)          # a NaN row's bytes are unspecified
        out[:, d:] = np.stack([span / np.float32(255.0), lo], axis=1).astype(np.float32).view(np.uint8)


@compiled(parallel=True, fastmath=_EXACT)
def _quantize_nbit(src, half, bits, d, out, blocks):
    """out (n, ceil(d / k) + 4) uint8 <- src rows of d float32 / float16 values: bits =
    8 (one value a byte), 4 or 2 (k = 8 / bits a byte, low bits first), then float16
    scale and bias: bias = half(min), scale = half((max - bias) / (2**bits - 1)), 1 when
    that is 0 or its inverse is inf; q = clamp(rint((x - bias) / scale))."""
    n = out.shape[0]
    nbytes = out.shape[1] - 4
    k = 8 // bits
    size = 2 if half else 4
    top = np.float32((1 << bits) - 1)
    one, zero = np.float32(1.0), np.float32(0.0)
    base, obase = address(src), address(out)
    for t in prange(blocks):
        for r in range((n * t) // blocks, (n * (t + 1)) // blocks):
            row = base + r * src.shape[1]
            o = obase + r * out.shape[1]
            lo, hi = _row_range(row, d, half)
            bias = half_bits_to_float(float_to_half_bits(lo))
            span = hi - bias
            scale = half_bits_to_float(float_to_half_bits(span / top if span != zero else one))
            inv = one / scale if scale != zero else one
            if scale == zero or inv == np.inf:
                scale, inv = one, one
            neg = -bias
            vec = d // 8 * 8
            for j in range(0, vec, 8):
                x = vload_f16(LANES_8, row + size * j) if half else vload_f32(LANES_8, row + size * j)
                q = vclamp(vrint(vmuls(vadds(x, neg), inv)), 0, top)
                if bits == 8:
                    vstore_u8_at(o + j, q)
                elif bits == 4:
                    vstore_packed_at(o + j // 2, q, 4)
                else:
                    vstore_packed_at(o + j // 4, q, 2)
            for b in range(vec // k, nbytes):
                out[r, b] = 0
            for j in range(vec, d):
                q = min(max(np.rint((_load(row + size * j, half) - bias) * inv), zero), top)
                out[r, j // k] |= np.uint8(q) << np.uint8((j % k) * bits)
            store_f16(o + nbytes, scale)
            store_f16(o + nbytes + 2, bias)


@_quantize_nbit.numpy_twin
def _quantize_nbit_numpy(src, half, bits, d, out, blocks):
    n, nbytes = out.shape[0], out.shape[1] - 4
    k = 8 // bits
    top, one = np.float32((1 << bits) - 1), np.float32(1.0)
    x = _values_of(src, half, d)
    with np.errstate(all="ignore"):
        lo, hi = _row_ranges(x)
        bias = lo.astype(np.float16).astype(np.float32)
        span = hi - bias
        scale = np.where(span != 0, span / top, one).astype(np.float16).astype(np.float32)
        inv = np.where(scale != 0, one / scale, one)
        fallback = (scale == 0) | (inv == np.inf)
        scale, inv = np.where(fallback, one, scale), np.where(fallback, one, inv)
        q = np.clip(np.rint((x - bias[:, None]) * inv[:, None]), 0, top)
        q = np.nan_to_num(q, nan=0.0).astype(np.uint8)   # a NaN row's bytes are unspecified
    fields = np.zeros((n, nbytes * k), np.uint8)
    fields[:, :d] = q
    shifts = (np.arange(k) * bits).astype(np.uint8)
    out[:, :nbytes] = np.bitwise_or.reduce(fields.reshape(n, nbytes, k) << shifts, axis=2)
    out[:, nbytes:] = np.stack([scale, bias], axis=1).astype(np.float16).view(np.uint8)


@compiled(parallel=True, fastmath=_EXACT)
def _dequantize(src, bits, half_scale_bias, out, half_out, blocks):
    """out rows (bytes of float32 / float16 `half_out` values) <- src fused rows:
    value * scale + bias (two roundings, as NumPy). bits 8 with float32 (or float16,
    half_scale_bias) scale/bias, or 4 / 2 with float16 scale/bias."""
    n = src.shape[0]
    extra = 4 if half_scale_bias else 8
    nbytes = src.shape[1] - extra
    k = 8 // bits
    values = nbytes * k
    size = 2 if half_out else 4
    mask = np.uint8((1 << bits) - 1)
    base, obase = address(src), address(out)
    for t in prange(blocks):
        for r in range((n * t) // blocks, (n * (t + 1)) // blocks):
            row = base + r * src.shape[1]
            o = obase + r * out.shape[1]
            if half_scale_bias:
                scale, bias = load_f16(row + nbytes), load_f16(row + nbytes + 2)
            else:
                scale, bias = load_f32(row + nbytes), load_f32(row + nbytes + 4)
            vec = values // 8 * 8
            for j in range(0, vec, 8):
                if bits == 8:
                    x = vload_u8(LANES_8, row + j)
                elif bits == 4:
                    x = vnatural(vload_u4(LANES_8, row + j // 2), 2)
                else:
                    x = vnatural(vload_u2(LANES_8, row + j // 4), 4)
                y = vadds(vmuls(x, scale), bias)
                if half_out:
                    vstore_f16_at(o + 2 * j, y)
                else:
                    vstore_f32_at(o + 4 * j, y)
            for j in range(vec, values):
                v = (src[r, j // k] >> np.uint8((j % k) * bits)) & mask
                y = np.float32(v) * scale + bias
                if half_out:
                    store_f16(o + size * j, y)
                else:
                    store_f32(o + size * j, y)


@_dequantize.numpy_twin
def _dequantize_numpy(src, bits, half_scale_bias, out, half_out, blocks):
    n = src.shape[0]
    extra = 4 if half_scale_bias else 8
    nbytes = src.shape[1] - extra
    k = 8 // bits
    pair = np.ascontiguousarray(src[:, nbytes:]).view(np.float16 if half_scale_bias else np.float32)
    scale, bias = pair[:, :1].astype(np.float32), pair[:, 1:2].astype(np.float32)
    shifts = (np.arange(k) * bits).astype(np.uint8)
    values = (src[:, :nbytes, None] >> shifts) & np.uint8((1 << bits) - 1)
    with np.errstate(all="ignore"):
        y = values.reshape(n, nbytes * k).astype(np.float32) * scale + bias
        out[...] = y.astype(np.float16 if half_out else np.float32).view(np.uint8)


@compiled(parallel=True, fastmath=_EXACT)
def _cast(src, to_half, out, count, blocks):
    """count values: float32 -> float16 (to_half; nearest even, overflow -> inf) or
    float16 -> float32 (exact), between the buffers src and out (uint8 arrays)."""
    base, obase = address(src), address(out)
    isize, osize = (4, 2) if to_half else (2, 4)
    for t in prange(blocks):
        lo, hi = (count * t) // blocks, (count * (t + 1)) // blocks
        vec_end = lo + (hi - lo) // 8 * 8
        for j in range(lo, vec_end, 8):
            if to_half:
                vstore_f16_at(obase + osize * j, vload_f32(LANES_8, base + isize * j))
            else:
                vstore_f32_at(obase + osize * j, vload_f16(LANES_8, base + isize * j))
        for j in range(vec_end, hi):
            if to_half:
                store_f16(obase + osize * j, load_f32(base + isize * j))
            else:
                store_f32(obase + osize * j, load_f16(base + isize * j))


@_cast.numpy_twin
def _cast_numpy(src, to_half, out, count, blocks):
    source, target = (np.float32, np.float16) if to_half else (np.float16, np.float32)
    with np.errstate(all="ignore"):            # out-of-range float32 -> inf, as the kernel
        converted = src.view(source)[:count].astype(target)
    out[:converted.nbytes] = converted.view(np.uint8)


# --------------------------------------------------------------------------- entry points

def _rows(x):
    """x as contiguous 2-D rows (leading dims flattened) of float32 or float16, viewed
    as bytes; (rows, values per row, is half)."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("input must have at least one dimension")
    if x.dtype not in (np.float32, np.float16):
        x = x.astype(np.float32)
    # math.prod, not -1: reshape(-1, 0) is ambiguous for a zero-size x with no values per row
    rows = np.ascontiguousarray(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]))
    return rows.view(np.uint8).reshape(rows.shape[0], rows.shape[1] * rows.itemsize), rows.shape[1], \
        rows.dtype == np.float16


def float_to_fused8(x):
    """float32/float16 [..., D] -> uint8 [..., D + 8] with float32 scale and bias."""
    shape = np.shape(x)
    src, d, half = _rows(x)
    out = np.empty((src.shape[0], d + 8), dtype=np.uint8)
    if out.size and d:
        with team():
            _quantize8(src, half, out, team_blocks(src.shape[0], 4 * d))
    elif out.size:            # no values: scale 0, bias 0
        out[:] = 0
    return out.reshape(shape[:-1] + (d + 8,))


def float_to_fused_nbit(x, bit_rate):
    """float32/float16 [..., D] -> uint8 [..., ceil(D/k) + 4] with float16 scale/bias.

    bit_rate 8 gives the "HalfScaleBias" 8-bit layout (D + 4 bytes)."""
    shape = np.shape(x)
    src, d, half = _rows(x)
    k = 8 // bit_rate
    nbytes = (d + k - 1) // k
    out = np.empty((src.shape[0], nbytes + 4), dtype=np.uint8)
    if out.size and d:
        with team():
            _quantize_nbit(src, half, bit_rate, d, out, team_blocks(src.shape[0], 4 * d))
    elif out.size:            # no values: scale 1, bias 0
        out[:, -4:] = np.array([1.0, 0.0], "<f2").view(np.uint8)
    return out.reshape(shape[:-1] + (nbytes + 4,))


def _dequantize_rows(q, bits, half_scale_bias, out_dtype):
    q = np.asarray(q)
    rows = np.ascontiguousarray(q.reshape(math.prod(q.shape[:-1]), q.shape[-1]))
    extra = 4 if half_scale_bias else 8
    values = (rows.shape[1] - extra) * (8 // bits)
    out = np.empty((rows.shape[0], values), dtype=out_dtype)
    if out.size:
        with team():
            _dequantize(rows, bits, half_scale_bias, out.view(np.uint8), out_dtype == np.float16,
                        team_blocks(rows.shape[0], 2 * values))
    return out.reshape(q.shape[:-1] + (values,))


def fused8_to_float(q, out_dtype=np.float32):
    """uint8 [..., D + 8] -> float [..., D]: value * scale + bias (in float32)."""
    return _dequantize_rows(q, 8, False, np.dtype(out_dtype))


def fused_nbit_to_float(q, bit_rate, out_dtype=np.float32):
    """uint8 [..., B + 4] -> float [..., B * k]: scale * value + bias (float32 math).
    bit_rate 8: the HalfScaleBias 8-bit layout."""
    return _dequantize_rows(q, bit_rate, True, np.dtype(out_dtype))


def _cast_array(x, to_half):
    src = np.asarray(x, dtype=np.float32 if to_half else np.float16)
    if not src.flags.c_contiguous:
        src = src.copy()
    out = np.empty(src.shape, np.float16 if to_half else np.float32)
    if src.size:
        with team():
            _cast(src.reshape(-1).view(np.uint8), to_half, out.reshape(-1).view(np.uint8), src.size,
                  team_blocks(src.size // 4096 + 1, 4096))
    return out


def float_to_half(x):
    """float32 -> float16, nearest even (out-of-range values become inf, as in C++)."""
    return _cast_array(x, True)


def half_to_float(x):
    """float16 -> float32 (exact)."""
    return _cast_array(x, False)
