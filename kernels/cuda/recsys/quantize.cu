// Rowwise 8-bit quantisation (fused rows: dim uint8 values, float32 scale, float32
// bias) and float32 <-> float16 conversion.
#include "../common.cuh"

// A block per row: min and max by block reduction, then each thread quantises its
// columns. scale = range / 255, bias = min, q = rint((x - min) * 255 / (range + 1e-8)).
extern "C" __global__ void float_to_fused8(const float* __restrict__ in, long long rows, long long cols,
                                           uint8_t* __restrict__ out) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    if (row >= rows) return;
    const float* x = in + row * cols;
    uint8_t* o = out + row * (cols + 8);
    float lo = INFINITY, hi = -INFINITY;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[c];
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    lo = block_reduce(lo, scratch, MinOp(), INFINITY);
    hi = block_reduce(hi, scratch, MaxOp(), -INFINITY);
    if (cols == 0) { lo = 0.0f; hi = 0.0f; }
    float range = __fsub_rn(hi, lo);
    float inverse = __fdiv_rn(255.0f, __fadd_rn(range, 1e-8f));
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) {
        float q = rintf(__fmul_rn(__fsub_rn(x[c], lo), inverse));
        o[c] = (uint8_t)fminf(fmaxf(q, 0.0f), 255.0f);
    }
    if (threadIdx.x < 8) {  // scale then bias, byte by byte: the row may be unaligned
        float scale = __fdiv_rn(range, 255.0f);
        unsigned int bits = __float_as_uint(threadIdx.x < 4 ? scale : lo);
        o[cols + threadIdx.x] = (uint8_t)(bits >> (8 * (threadIdx.x & 3)));
    }
}

// One thread per output element: x = q * scale + bias (two roundings, as on the CPU).
extern "C" __global__ void fused8_to_float(const uint8_t* __restrict__ in, long long rows, long long cols,
                                           float* __restrict__ out) {
    long long n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long row = i / cols, c = i - row * cols;
        const uint8_t* r = in + row * (cols + 8);
        float scale = load_unaligned_f32(r + cols), bias = load_unaligned_f32(r + cols + 4);
        out[i] = __fadd_rn(__fmul_rn((float)r[c], scale), bias);
    }
}

// float32 <-> float16, two elements per thread step (half2 / float2) plus a scalar tail.
extern "C" __global__ void float_to_half(const float* __restrict__ in, long long n, __half* __restrict__ out) {
    long long pairs = n / 2, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += stride) {
        float2 v = reinterpret_cast<const float2*>(in)[i];
        reinterpret_cast<__half2*>(out)[i] = __floats2half2_rn(v.x, v.y);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && (n & 1)) out[n - 1] = __float2half_rn(in[n - 1]);
}

extern "C" __global__ void half_to_float(const __half* __restrict__ in, long long n, float* __restrict__ out) {
    long long pairs = n / 2, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += stride) {
        reinterpret_cast<float2*>(out)[i] = __half22float2(reinterpret_cast<const __half2*>(in)[i]);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && (n & 1)) out[n - 1] = __half2float(in[n - 1]);
}
