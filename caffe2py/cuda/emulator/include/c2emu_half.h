// caffe2py CUDA emulator: __half and __half2 on GCC's _Float16 (IEEE binary16).
// Conversions round to nearest even; each arithmetic operation rounds its exact
// result once (computed in float, which holds the exact sum, product or quotient of
// two halves closely enough for one rounding to half to be correct), like the GPU's
// half instructions. Included by c2emu.h.
#pragma once

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct __half {
    _Float16 value_;
    __half() = default;
    constexpr __half(const __half_raw& r) : value_(__builtin_bit_cast(_Float16, r.x)) {}
    constexpr __half(_Float16 v) : value_(v) {}
    __half(float f) : value_((_Float16)f) {}
    __half(double d) : value_((_Float16)d) {}
    __half(int i) : value_((_Float16)i) {}
    __half(unsigned int i) : value_((_Float16)i) {}
    __half(short i) : value_((_Float16)i) {}
    __half(unsigned short i) : value_((_Float16)i) {}
    __half(long long i) : value_((_Float16)i) {}
    __half(unsigned long long i) : value_((_Float16)i) {}
    operator float() const { return (float)value_; }
    operator __half_raw() const { return __half_raw{__builtin_bit_cast(unsigned short, value_)}; }
};

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
    __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    operator __half2_raw() const { return __half2_raw{((__half_raw)x).x, ((__half_raw)y).x}; }
};

typedef __half half;
typedef __half2 half2;

namespace c2emu {
inline unsigned short half_bits(__half h) { return __builtin_bit_cast(unsigned short, h.value_); }
inline __half half_from_bits(unsigned short b) { return __half(__half_raw{b}); }
// The next half away from (up=false: toward -inf, up=true: toward +inf) h.
inline __half half_step(__half h, bool up) {
    unsigned short b = half_bits(h);
    if ((b & 0x7FFF) == 0) return half_from_bits(up ? 0x0001 : 0x8001);
    bool neg = b & 0x8000;
    return half_from_bits((unsigned short)(up != neg ? b + 1 : b - 1));
}
// Directed rounding of a float to half: 0 nearest even, 1 toward zero, 2 down, 3 up.
inline __half float_to_half(float f, int mode) {
    __half h(f);
    float back = (float)h;
    if (mode == 0 || back == f || f != f || std::isinf(back)) {
        if (mode != 0 && std::isinf(back) && !std::isinf(f)) {  // overflow under directed rounding
            bool toward_inf = (mode == 3 && f > 0) || (mode == 2 && f < 0);
            if (!toward_inf) return half_from_bits(f > 0 ? 0x7BFF : 0xFBFF);
        }
        return h;
    }
    bool down = mode == 2 || (mode == 1 && f > 0);
    if (down) return back > f ? half_step(h, false) : h;
    return back < f ? half_step(h, true) : h;
}
// a * b + c rounded once: the product of two halves is exact in double, the sum's
// rounding error is recovered exactly (TwoSum), and it decides ties of the rounding to half.
inline __half fma_half(__half a, __half b, __half c) {
    double p = (double)(float)a * (double)(float)b, q = (double)(float)c;
    double s = p + q;
    double bp = s - q, e = (p - bp) + (q - (s - bp));
    __half h((_Float16)s);
    double r = (double)(float)h;
    if (e != 0.0 && r != s && !std::isinf(r)) {
        __half other = half_step(h, s > r);
        double ro = (double)(float)other;
        if (ro - s == s - r || s - ro == r - s) {  // s is exactly halfway: the error decides
            bool true_above = e > 0;
            return (true_above == (ro > r)) ? other : h;
        }
    }
    return h;
}
}  // namespace c2emu

// ---- conversions
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half_rz(float f) { return c2emu::float_to_half(f, 1); }
inline __half __float2half_rd(float f) { return c2emu::float_to_half(f, 2); }
inline __half __float2half_ru(float f) { return c2emu::float_to_half(f, 3); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return (float)h; }
inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
inline float __low2float(__half2 h) { return (float)h.x; }
inline float __high2float(__half2 h) { return (float)h.y; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
inline __half2 __low2half2(__half2 a) { return __half2(a.x, a.x); }
inline __half2 __high2half2(__half2 a) { return __half2(a.y, a.y); }
inline __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }
inline unsigned short __half_as_ushort(__half h) { return c2emu::half_bits(h); }
inline __half __ushort_as_half(unsigned short b) { return c2emu::half_from_bits(b); }
inline short __half_as_short(__half h) { return (short)c2emu::half_bits(h); }
inline __half __short_as_half(short b) { return c2emu::half_from_bits((unsigned short)b); }
#define C2EMU_H2I(NAME, I)                                                                       \
    inline I NAME##_rn(__half h) { return c2emu::sat_convert<I>(std::nearbyint((float)h)); }     \
    inline I NAME##_rz(__half h) { return c2emu::sat_convert<I>(std::trunc((float)h)); }         \
    inline I NAME##_rd(__half h) { return c2emu::sat_convert<I>(std::floor((float)h)); }         \
    inline I NAME##_ru(__half h) { return c2emu::sat_convert<I>(std::ceil((float)h)); }
C2EMU_H2I(__half2int, int)
C2EMU_H2I(__half2uint, unsigned int)
C2EMU_H2I(__half2short, short)
C2EMU_H2I(__half2ushort, unsigned short)
C2EMU_H2I(__half2ll, long long)
C2EMU_H2I(__half2ull, unsigned long long)
#undef C2EMU_H2I
inline __half __int2half_rn(int i) { return __half(i); }
inline __half __uint2half_rn(unsigned i) { return __half(i); }
inline __half __short2half_rn(short i) { return __half(i); }
inline __half __ushort2half_rn(unsigned short i) { return __half(i); }
inline __half __ll2half_rn(long long i) { return __half(i); }
inline __half __ull2half_rn(unsigned long long i) { return __half(i); }

// ---- half arithmetic
inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
inline __half __hsub(__half a, __half b) { return __half((float)a - (float)b); }
inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
inline __half __hdiv(__half a, __half b) { return __half((float)a / (float)b); }
inline __half __hfma(__half a, __half b, __half c) { return c2emu::fma_half(a, b, c); }
inline __half __hneg(__half a) { return c2emu::half_from_bits(c2emu::half_bits(a) ^ 0x8000); }
inline __half __habs(__half a) { return c2emu::half_from_bits(c2emu::half_bits(a) & 0x7FFF); }
inline __half c2emu_sat(__half a) { float f = (float)a; return __half(f > 0.0f ? (f < 1.0f ? f : 1.0f) : 0.0f); }
inline __half __hadd_sat(__half a, __half b) { return c2emu_sat(__hadd(a, b)); }
inline __half __hsub_sat(__half a, __half b) { return c2emu_sat(__hsub(a, b)); }
inline __half __hmul_sat(__half a, __half b) { return c2emu_sat(__hmul(a, b)); }
inline __half __hfma_sat(__half a, __half b, __half c) { return c2emu_sat(__hfma(a, b, c)); }
inline __half __hfma_relu(__half a, __half b, __half c) {
    __half r = __hfma(a, b, c);
    return (float)r < 0.0f ? __half(0.0f) : r;
}
inline bool __hisnan(__half a) { return (float)a != (float)a; }
inline int __hisinf(__half a) { float f = (float)a; return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; }
inline __half __hmax(__half a, __half b) { return __half(fmaxf((float)a, (float)b)); }
inline __half __hmin(__half a, __half b) { return __half(fminf((float)a, (float)b)); }
inline __half __hmax_nan(__half a, __half b) { return __hisnan(a) ? a : __hisnan(b) ? b : __hmax(a, b); }
inline __half __hmin_nan(__half a, __half b) { return __hisnan(a) ? a : __hisnan(b) ? b : __hmin(a, b); }
inline bool __heq(__half a, __half b) { return (float)a == (float)b; }
inline bool __hne(__half a, __half b) { return (float)a != (float)b && !__hisnan(a) && !__hisnan(b); }
inline bool __hlt(__half a, __half b) { return (float)a < (float)b; }
inline bool __hle(__half a, __half b) { return (float)a <= (float)b; }
inline bool __hgt(__half a, __half b) { return (float)a > (float)b; }
inline bool __hge(__half a, __half b) { return (float)a >= (float)b; }
inline bool __hequ(__half a, __half b) { return !((float)a != (float)b) || __hisnan(a) || __hisnan(b); }
inline bool __hneu(__half a, __half b) { return (float)a != (float)b; }
inline bool __hltu(__half a, __half b) { return !((float)a >= (float)b); }
inline bool __hleu(__half a, __half b) { return !((float)a > (float)b); }
inline bool __hgtu(__half a, __half b) { return !((float)a <= (float)b); }
inline bool __hgeu(__half a, __half b) { return !((float)a < (float)b); }

#define C2EMU_HMATH(NAME, EXPR) inline __half NAME(__half a) { float x = (float)a; return __half(EXPR); }
C2EMU_HMATH(hexp, expf(x))
C2EMU_HMATH(hexp2, exp2f(x))
C2EMU_HMATH(hexp10, exp10f(x))
C2EMU_HMATH(hlog, logf(x))
C2EMU_HMATH(hlog2, log2f(x))
C2EMU_HMATH(hlog10, log10f(x))
C2EMU_HMATH(hsqrt, sqrtf(x))
C2EMU_HMATH(hrsqrt, 1.0f / sqrtf(x))
C2EMU_HMATH(hrcp, 1.0f / x)
C2EMU_HMATH(hsin, sinf(x))
C2EMU_HMATH(hcos, cosf(x))
C2EMU_HMATH(htanh, tanhf(x))
C2EMU_HMATH(htrunc, truncf(x))
C2EMU_HMATH(hceil, ceilf(x))
C2EMU_HMATH(hfloor, floorf(x))
C2EMU_HMATH(hrint, nearbyintf(x))
#undef C2EMU_HMATH

// ---- half2 arithmetic (each half on its own)
#define C2EMU_H2BIN(NAME, OP) \
    inline __half2 NAME(__half2 a, __half2 b) { return __half2(OP(a.x, b.x), OP(a.y, b.y)); }
C2EMU_H2BIN(__hadd2, __hadd)
C2EMU_H2BIN(__hsub2, __hsub)
C2EMU_H2BIN(__hmul2, __hmul)
C2EMU_H2BIN(__h2div, __hdiv)
C2EMU_H2BIN(__hadd2_sat, __hadd_sat)
C2EMU_H2BIN(__hsub2_sat, __hsub_sat)
C2EMU_H2BIN(__hmul2_sat, __hmul_sat)
C2EMU_H2BIN(__hmax2, __hmax)
C2EMU_H2BIN(__hmin2, __hmin)
#undef C2EMU_H2BIN
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
inline __half2 __hfma2_sat(__half2 a, __half2 b, __half2 c) {
    return __half2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));
}
inline __half2 __hneg2(__half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
#define C2EMU_H2CMP(NAME, B, OP)                                                                              \
    inline __half2 NAME(__half2 a, __half2 b) { return __half2(__half(OP(a.x, b.x) ? 1.0f : 0.0f), __half(OP(a.y, b.y) ? 1.0f : 0.0f)); } \
    inline bool B(__half2 a, __half2 b) { return OP(a.x, b.x) && OP(a.y, b.y); }
C2EMU_H2CMP(__heq2, __hbeq2, __heq)
C2EMU_H2CMP(__hne2, __hbne2, __hne)
C2EMU_H2CMP(__hlt2, __hblt2, __hlt)
C2EMU_H2CMP(__hle2, __hble2, __hle)
C2EMU_H2CMP(__hgt2, __hbgt2, __hgt)
C2EMU_H2CMP(__hge2, __hbge2, __hge)
#undef C2EMU_H2CMP
#define C2EMU_H2MATH(NAME, ONE) inline __half2 NAME(__half2 a) { return __half2(ONE(a.x), ONE(a.y)); }
C2EMU_H2MATH(h2exp, hexp)
C2EMU_H2MATH(h2exp2, hexp2)
C2EMU_H2MATH(h2exp10, hexp10)
C2EMU_H2MATH(h2log, hlog)
C2EMU_H2MATH(h2log2, hlog2)
C2EMU_H2MATH(h2log10, hlog10)
C2EMU_H2MATH(h2sqrt, hsqrt)
C2EMU_H2MATH(h2rsqrt, hrsqrt)
C2EMU_H2MATH(h2rcp, hrcp)
C2EMU_H2MATH(h2sin, hsin)
C2EMU_H2MATH(h2cos, hcos)
C2EMU_H2MATH(h2trunc, htrunc)
C2EMU_H2MATH(h2ceil, hceil)
C2EMU_H2MATH(h2floor, hfloor)
C2EMU_H2MATH(h2rint, hrint)
#undef C2EMU_H2MATH

// ---- operators (cuda_fp16.hpp's, for __half with __half and __half2 with __half2)
inline __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }
inline __half operator-(const __half& a, const __half& b) { return __hsub(a, b); }
inline __half operator*(const __half& a, const __half& b) { return __hmul(a, b); }
inline __half operator/(const __half& a, const __half& b) { return __hdiv(a, b); }
inline __half operator-(const __half& a) { return __hneg(a); }
inline __half operator+(const __half& a) { return a; }
inline __half& operator+=(__half& a, const __half& b) { return a = __hadd(a, b); }
inline __half& operator-=(__half& a, const __half& b) { return a = __hsub(a, b); }
inline __half& operator*=(__half& a, const __half& b) { return a = __hmul(a, b); }
inline __half& operator/=(__half& a, const __half& b) { return a = __hdiv(a, b); }
inline bool operator==(const __half& a, const __half& b) { return __heq(a, b); }
inline bool operator!=(const __half& a, const __half& b) { return __hneu(a, b); }
inline bool operator<(const __half& a, const __half& b) { return __hlt(a, b); }
inline bool operator<=(const __half& a, const __half& b) { return __hle(a, b); }
inline bool operator>(const __half& a, const __half& b) { return __hgt(a, b); }
inline bool operator>=(const __half& a, const __half& b) { return __hge(a, b); }
inline __half2 operator+(const __half2& a, const __half2& b) { return __hadd2(a, b); }
inline __half2 operator-(const __half2& a, const __half2& b) { return __hsub2(a, b); }
inline __half2 operator*(const __half2& a, const __half2& b) { return __hmul2(a, b); }
inline __half2 operator/(const __half2& a, const __half2& b) { return __h2div(a, b); }
inline __half2 operator-(const __half2& a) { return __hneg2(a); }
inline __half2& operator+=(__half2& a, const __half2& b) { return a = __hadd2(a, b); }
inline __half2& operator-=(__half2& a, const __half2& b) { return a = __hsub2(a, b); }
inline __half2& operator*=(__half2& a, const __half2& b) { return a = __hmul2(a, b); }
inline __half2& operator/=(__half2& a, const __half2& b) { return a = __h2div(a, b); }
inline bool operator==(const __half2& a, const __half2& b) { return __hbeq2(a, b); }
inline bool operator!=(const __half2& a, const __half2& b) { return !__hbeq2(a, b); }

// ---- atomics on halves
inline __half atomicAdd(__half* p, __half v) { return c2emu::rmw(p, [v](__half o) { return __hadd(o, v); }); }
inline __half2 atomicAdd(__half2* p, __half2 v) { return c2emu::rmw(p, [v](__half2 o) { return __hadd2(o, v); }); }
