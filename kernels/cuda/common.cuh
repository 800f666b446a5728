// Shared helpers for caffe2py's CUDA kernels: half conversion, aligned vector
// loads, warp/block reductions, and the error status word the host reads back.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#define C2_INLINE __device__ __forceinline__

// status[0]: smallest offending position (INT64_MAX when none), status[1]: a code
// for malformed lengths/offsets (0 when fine). Initialised once by the host and
// reset by the host only after it has reported an error.
#define C2_NO_ERROR 0x7fffffffffffffffLL

C2_INLINE void report_bad_position(long long* status, long long pos) {
    atomicMin((unsigned long long*)status, (unsigned long long)pos);
}

C2_INLINE void report_bad_segments(long long* status, long long code) {
    atomicMax((unsigned long long*)(status + 1), (unsigned long long)code);
}

C2_INLINE float to_float(float x) { return x; }
C2_INLINE float to_float(__half x) { return __half2float(x); }

template <typename T> C2_INLINE T from_float(float x);
template <> C2_INLINE float from_float<float>(float x) { return x; }
template <> C2_INLINE __half from_float<__half>(float x) { return __float2half_rn(x); }

// N consecutive elements loaded/stored as one aligned vector (float4, half2, uchar4...).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

template <typename T, int N>
C2_INLINE Vec<T, N> load_vec(const T* p) {
    return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
C2_INLINE void store_vec(T* p, const Vec<T, N>& x) {
    *reinterpret_cast<Vec<T, N>*>(p) = x;
}

// Reads a float stored at any byte address (fused rows whose width is not a multiple of 4).
C2_INLINE float load_unaligned_f32(const uint8_t* p) {
    uint32_t bits = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return __uint_as_float(bits);
}

C2_INLINE float load_unaligned_f16(const uint8_t* p) {
    unsigned short bits = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(bits));
}

C2_INLINE float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
// Same formula as the CPU LSTM kernel: tanh(x) = 2 sigmoid(2x) - 1.
C2_INLINE float tanh_via_sigmoid(float x) { return 2.0f * sigmoidf_(2.0f * x) - 1.0f; }

template <typename T>
C2_INLINE T warp_sum(T x, int width = 32) {
    for (int o = width / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o, width);
    return x;
}

C2_INLINE float warp_max(float x, int width = 32) {
    for (int o = width / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o, width));
    return x;
}

C2_INLINE float warp_min(float x, int width = 32) {
    for (int o = width / 2; o > 0; o /= 2) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o, width));
    return x;
}

// Block-wide reduction; blockDim.x a multiple of 32, at most 1024. `scratch` holds 32 floats.
template <typename Op>
C2_INLINE float block_reduce(float x, float* scratch, Op op, float identity) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    int warps = blockDim.x >> 5;
    x = threadIdx.x < warps ? scratch[threadIdx.x] : identity;
    if (warp == 0) {
        for (int o = 16; o > 0; o /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
        if (lane == 0) scratch[0] = x;
    }
    __syncthreads();
    return scratch[0];
}

struct MaxOp { C2_INLINE float operator()(float a, float b) const { return fmaxf(a, b); } };
struct MinOp { C2_INLINE float operator()(float a, float b) const { return fminf(a, b); } };
struct SumOp { C2_INLINE float operator()(float a, float b) const { return a + b; } };
