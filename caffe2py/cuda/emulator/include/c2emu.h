// caffe2py CUDA emulator: the device side of CUDA C++ for g++ -std=c++20, so that
// kernels/cuda/*.cu compile unchanged into a host library (force-included with
// -include; cuda_fp16.h and cuda_runtime.h of this folder only include it).
//
// Threads are fibers of the emulator runtime (c2emu_runtime.cpp): built-in variables
// read the state of the thread that runs now; __syncthreads and the warp collectives
// hand control to the runtime's scheduler; __shared__ variables are thread_local (one
// OS thread runs a whole block, so every fiber of the block sees the same variable).
#pragma once
#define __CAFFE2PY_CUDA_EMULATOR__ 1

#include "c2emu_abi.h"

#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define __CUDA_ARCH__ 800
#ifndef CUDART_VERSION
#define CUDART_VERSION 12000
#endif

// ------------------------------------------------------------------ qualifiers
#ifdef C2EMU_SCAN
// The build's first pass (g++ -E) keeps these markers to find kernels and extern
// __shared__ arrays in the preprocessed source.
#define __global__ C2EMU_GLOBAL_MARK
#define __shared__ C2EMU_SHARED_MARK
#else
#define __global__
// `used`: GCC would otherwise fold reads of a never-written static to zero (C++
// zero-initialisation); shared memory is uninitialised, and the emulator fills it with
// 0xFF bytes at the start of every block.
#define __shared__ thread_local __attribute__((used))
#endif
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __cudart_builtin__

// ------------------------------------------------------------------ vector types
#define C2EMU_VEC(T, N, A2, A4)                                                                      \
    struct N##1 { T x; };                                                                            \
    struct __attribute__((aligned(A2))) N##2 { T x, y; };                                            \
    struct N##3 { T x, y, z; };                                                                      \
    struct __attribute__((aligned(A4))) N##4 { T x, y, z, w; };                                      \
    inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }                                     \
    inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }                       \
    inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }         \
    inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
C2EMU_VEC(signed char, char, 2, 4)
C2EMU_VEC(unsigned char, uchar, 2, 4)
C2EMU_VEC(short, short, 4, 8)
C2EMU_VEC(unsigned short, ushort, 4, 8)
C2EMU_VEC(int, int, 8, 16)
C2EMU_VEC(unsigned int, uint, 8, 16)
C2EMU_VEC(long, long, 16, 16)
C2EMU_VEC(unsigned long, ulong, 16, 16)
C2EMU_VEC(long long, longlong, 16, 16)
C2EMU_VEC(unsigned long long, ulonglong, 16, 16)
C2EMU_VEC(float, float, 8, 16)
C2EMU_VEC(double, double, 16, 16)
#undef C2EMU_VEC

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ------------------------------------------------------------------ runtime entry points
extern "C" {
extern c2emu_thread_state c2emu_current;
int c2emu_barrier(int kind, int pred);
void c2emu_warp(c2emu_warp_op* op);
unsigned c2emu_activemask(void);
void c2emu_trap(const char* what);
long long c2emu_clock64(void);
}

#define threadIdx (*reinterpret_cast<const uint3*>(&c2emu_current.thread_idx))
#define blockIdx (*reinterpret_cast<const uint3*>(&c2emu_current.block_idx))
#define blockDim (*reinterpret_cast<const dim3*>(&c2emu_current.block_dim))
#define gridDim (*reinterpret_cast<const dim3*>(&c2emu_current.grid_dim))
constexpr int warpSize = 32;

// ------------------------------------------------------------------ barriers and fences
inline void __syncthreads() { c2emu_barrier(C2EMU_BAR_SYNC, 0); }
inline int __syncthreads_count(int p) { return c2emu_barrier(C2EMU_BAR_COUNT, p); }
inline int __syncthreads_and(int p) { return c2emu_barrier(C2EMU_BAR_AND, p); }
inline int __syncthreads_or(int p) { return c2emu_barrier(C2EMU_BAR_OR, p); }
// One thread runs at a time and memory is host memory: fences order nothing more.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// ------------------------------------------------------------------ warp collectives
namespace c2emu {
template <class T>
inline T warp_exchange(int kind, unsigned mask, T var, int arg, int width, int pred = 0, int* pred_out = nullptr) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp operations take values of at most 8 bytes");
    c2emu_warp_op op{};
    op.kind = kind;
    op.mask = mask;
    op.width = width;
    op.arg = arg;
    op.pred = pred;
    std::memcpy(&op.value, &var, sizeof(T));
    c2emu_warp(&op);
    if (pred_out) *pred_out = op.result_pred;
    T r;
    std::memcpy(&r, &op.result, sizeof(T));
    return r;
}
}  // namespace c2emu

template <class T> inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
    return c2emu::warp_exchange(C2EMU_SHFL_IDX, mask, var, src_lane, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return c2emu::warp_exchange(C2EMU_SHFL_UP, mask, var, (int)delta, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return c2emu::warp_exchange(C2EMU_SHFL_DOWN, mask, var, (int)delta, width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
    return c2emu::warp_exchange(C2EMU_SHFL_XOR, mask, var, lane_mask, width);
}
inline int __all_sync(unsigned mask, int pred) {
    return (int)c2emu::warp_exchange<unsigned>(C2EMU_VOTE_ALL, mask, 0u, 0, 32, pred);
}
inline int __any_sync(unsigned mask, int pred) {
    return (int)c2emu::warp_exchange<unsigned>(C2EMU_VOTE_ANY, mask, 0u, 0, 32, pred);
}
inline int __uni_sync(unsigned mask, int pred) {
    return (int)c2emu::warp_exchange<unsigned>(C2EMU_VOTE_UNI, mask, 0u, 0, 32, pred);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return c2emu::warp_exchange<unsigned>(C2EMU_BALLOT, mask, 0u, 0, 32, pred);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { c2emu::warp_exchange<unsigned>(C2EMU_SYNCWARP, mask, 0u, 0, 32); }
inline unsigned __activemask() { return c2emu_activemask(); }
template <class T> inline unsigned __match_any_sync(unsigned mask, T value) {
    unsigned long long bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    return (unsigned)c2emu::warp_exchange<unsigned long long>(C2EMU_MATCH_ANY, mask, bits, 0, 32);
}
template <class T> inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
    unsigned long long bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    return (unsigned)c2emu::warp_exchange<unsigned long long>(C2EMU_MATCH_ALL, mask, bits, 0, 32, 0, pred);
}
#define C2EMU_REDUCE(NAME, T, KIND) \
    inline T NAME(unsigned mask, T v) { return (T)c2emu::warp_exchange<unsigned>(KIND, mask, (unsigned)v, 0, 32); }
C2EMU_REDUCE(__reduce_add_sync, unsigned, C2EMU_REDUCE_ADD)
C2EMU_REDUCE(__reduce_add_sync, int, C2EMU_REDUCE_ADD)
C2EMU_REDUCE(__reduce_min_sync, unsigned, C2EMU_REDUCE_UMIN)
C2EMU_REDUCE(__reduce_min_sync, int, C2EMU_REDUCE_MIN)
C2EMU_REDUCE(__reduce_max_sync, unsigned, C2EMU_REDUCE_UMAX)
C2EMU_REDUCE(__reduce_max_sync, int, C2EMU_REDUCE_MAX)
C2EMU_REDUCE(__reduce_and_sync, unsigned, C2EMU_REDUCE_AND)
C2EMU_REDUCE(__reduce_or_sync, unsigned, C2EMU_REDUCE_OR)
C2EMU_REDUCE(__reduce_xor_sync, unsigned, C2EMU_REDUCE_XOR)
#undef C2EMU_REDUCE

// ------------------------------------------------------------------ traps, clocks, hints
inline void __trap() { c2emu_trap("__trap() was called"); }
inline void __brkpt() { c2emu_trap("__brkpt() was called"); }
inline long long clock64() { return c2emu_clock64(); }
inline void __nanosleep(unsigned) {}
#if !defined(__has_builtin) || !__has_builtin(__builtin_assume)
#define __builtin_assume(x) ((void)0)
#endif

template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ------------------------------------------------------------------ bit casts and integer intrinsics
namespace c2emu {
template <class To, class From> inline To bits(const From& f) {
    static_assert(sizeof(To) == sizeof(From));
    To t;
    std::memcpy(&t, &f, sizeof(To));
    return t;
}
}  // namespace c2emu
inline unsigned __float_as_uint(float x) { return c2emu::bits<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return c2emu::bits<float>(x); }
inline int __float_as_int(float x) { return c2emu::bits<int>(x); }
inline float __int_as_float(int x) { return c2emu::bits<float>(x); }
inline long long __double_as_longlong(double x) { return c2emu::bits<long long>(x); }
inline double __longlong_as_double(long long x) { return c2emu::bits<double>(x); }
inline int __double2hiint(double x) { return (int)(c2emu::bits<unsigned long long>(x) >> 32); }
inline int __double2loint(double x) { return (int)(unsigned)c2emu::bits<unsigned long long>(x); }
inline double __hiloint2double(int hi, int lo) {
    return c2emu::bits<double>(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline int __mul24(int x, int y) { return (int)((long long)((x << 8) >> 8) * ((y << 8) >> 8)); }
inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xFFFFFFu) * (y & 0xFFFFFFu); }
inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
inline unsigned __umulhi(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x * y) >> 32); }
inline long long __mul64hi(long long x, long long y) { return (long long)(((__int128)x * y) >> 64); }
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
inline int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
inline int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y) >> 1); }
inline unsigned __urhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y + 1) >> 1); }
inline unsigned __sad(int x, int y, unsigned z) { return z + (unsigned)(x > y ? (long long)x - y : (long long)y - x); }
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return z + (x > y ? x - y : y - x); }
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_l(lo, hi, s > 32 ? 32 : s) ; }
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_r(lo, hi, s > 32 ? 32 : s); }

// CUDA's min/max overloads (global namespace, as nvcc has them).
#define C2EMU_MINMAX(T)                                  \
    inline T min(T a, T b) { return b < a ? b : a; }    \
    inline T max(T a, T b) { return a < b ? b : a; }
C2EMU_MINMAX(int)
C2EMU_MINMAX(unsigned int)
C2EMU_MINMAX(long)
C2EMU_MINMAX(unsigned long)
C2EMU_MINMAX(long long)
C2EMU_MINMAX(unsigned long long)
#undef C2EMU_MINMAX
inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
inline unsigned long long min(long long a, unsigned long long b) { return min((unsigned long long)a, b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, (unsigned long long)b); }
inline unsigned long long max(long long a, unsigned long long b) { return max((unsigned long long)a, b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, (unsigned long long)b); }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// CUDA's classification functions, unqualified in device code.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

// ------------------------------------------------------------------ float intrinsics
// Round-to-nearest forms only; the sources are compiled with -ffp-contract=off, so a
// product followed by a sum rounds twice, as __fmul_rn / __fadd_rn promise.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }

// Float -> integer conversions saturate on a GPU (and NaN gives 0); a C++ cast does not.
namespace c2emu {
template <class I, class F> inline I sat_convert(F x) {
    if (x != x) return 0;
    if (x <= (F)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (x >= (F)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)x;
}
}  // namespace c2emu
#define C2EMU_F2I(NAME, F, I)                                                 \
    inline I NAME##_rn(F x) { return c2emu::sat_convert<I>(std::nearbyint(x)); }    \
    inline I NAME##_rz(F x) { return c2emu::sat_convert<I>(std::trunc(x)); }        \
    inline I NAME##_ru(F x) { return c2emu::sat_convert<I>(std::ceil(x)); }         \
    inline I NAME##_rd(F x) { return c2emu::sat_convert<I>(std::floor(x)); }
C2EMU_F2I(__float2int, float, int)
C2EMU_F2I(__float2uint, float, unsigned int)
C2EMU_F2I(__float2ll, float, long long)
C2EMU_F2I(__float2ull, float, unsigned long long)
C2EMU_F2I(__double2int, double, int)
C2EMU_F2I(__double2uint, double, unsigned int)
C2EMU_F2I(__double2ll, double, long long)
C2EMU_F2I(__double2ull, double, unsigned long long)
#undef C2EMU_F2I
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline float __ull2float_rn(unsigned long long x) { return (float)x; }
inline float __double2float_rn(double x) { return (float)x; }
inline double __int2double_rn(int x) { return (double)x; }
inline double __ll2double_rn(long long x) { return (double)x; }

// ------------------------------------------------------------------ atomics
// One thread runs at a time, so a read-modify-write is atomic; the accesses are
// checked like any other.
namespace c2emu {
template <class T, class F> inline T rmw(T* p, F f) {
    T old = *p;
    *p = f(old);
    return old;
}
}  // namespace c2emu
#define C2EMU_ATOMIC(NAME, T, EXPR) \
    inline T NAME(T* p, T v) { return c2emu::rmw(p, [v](T o) { (void)v; return (T)(EXPR); }); }
C2EMU_ATOMIC(atomicAdd, int, (int)((unsigned)o + (unsigned)v))
C2EMU_ATOMIC(atomicAdd, unsigned int, o + v)
C2EMU_ATOMIC(atomicAdd, unsigned long long, o + v)
C2EMU_ATOMIC(atomicAdd, float, o + v)
C2EMU_ATOMIC(atomicAdd, double, o + v)
C2EMU_ATOMIC(atomicSub, int, (int)((unsigned)o - (unsigned)v))
C2EMU_ATOMIC(atomicSub, unsigned int, o - v)
C2EMU_ATOMIC(atomicExch, int, v)
C2EMU_ATOMIC(atomicExch, unsigned int, v)
C2EMU_ATOMIC(atomicExch, unsigned long long, v)
C2EMU_ATOMIC(atomicExch, float, v)
C2EMU_ATOMIC(atomicMin, int, v < o ? v : o)
C2EMU_ATOMIC(atomicMin, unsigned int, v < o ? v : o)
C2EMU_ATOMIC(atomicMin, long long, v < o ? v : o)
C2EMU_ATOMIC(atomicMin, unsigned long long, v < o ? v : o)
C2EMU_ATOMIC(atomicMax, int, v > o ? v : o)
C2EMU_ATOMIC(atomicMax, unsigned int, v > o ? v : o)
C2EMU_ATOMIC(atomicMax, long long, v > o ? v : o)
C2EMU_ATOMIC(atomicMax, unsigned long long, v > o ? v : o)
C2EMU_ATOMIC(atomicAnd, int, o & v)
C2EMU_ATOMIC(atomicAnd, unsigned int, o & v)
C2EMU_ATOMIC(atomicAnd, unsigned long long, o & v)
C2EMU_ATOMIC(atomicOr, int, o | v)
C2EMU_ATOMIC(atomicOr, unsigned int, o | v)
C2EMU_ATOMIC(atomicOr, unsigned long long, o | v)
C2EMU_ATOMIC(atomicXor, int, o ^ v)
C2EMU_ATOMIC(atomicXor, unsigned int, o ^ v)
C2EMU_ATOMIC(atomicXor, unsigned long long, o ^ v)
C2EMU_ATOMIC(atomicInc, unsigned int, o >= v ? 0u : o + 1)
C2EMU_ATOMIC(atomicDec, unsigned int, (o == 0 || o > v) ? v : o - 1)
#undef C2EMU_ATOMIC
#define C2EMU_CAS(T) \
    inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }
C2EMU_CAS(int)
C2EMU_CAS(unsigned int)
C2EMU_CAS(unsigned long long)
C2EMU_CAS(unsigned short)
#undef C2EMU_CAS
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicSub_block atomicSub
#define atomicExch_block atomicExch
#define atomicMin_block atomicMin
#define atomicMax_block atomicMax
#define atomicCAS_block atomicCAS
#define atomicAnd_block atomicAnd
#define atomicOr_block atomicOr
#define atomicXor_block atomicXor

#include "c2emu_half.h"
