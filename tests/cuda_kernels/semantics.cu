// Kernels that exercise the CUDA device surface the emulator provides (tests/
// test_cuda_emulator.py compares their results with references written in NumPy).
// Valid CUDA: they also compile with nvcc.
#include <cuda_fp16.h>
#include <stdint.h>

// Every thread writes its coordinates: checks threadIdx/blockIdx/blockDim/gridDim in 3-D.
extern "C" __global__ void coordinates(int* out) {
    long long block = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    long long thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    long long i = block * blockDim.x * blockDim.y * blockDim.z + thread;
    int* o = out + 6 * i;
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
}

// kind 0 idx, 1 up, 2 down, 3 xor; one warp per 32 values.
extern "C" __global__ void shuffle(const int* in, int* out, int kind, int arg, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i], r;
    switch (kind) {
        case 0: r = __shfl_sync(0xffffffffu, v, arg, width); break;
        case 1: r = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, width); break;
        case 2: r = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, width); break;
        default: r = __shfl_xor_sync(0xffffffffu, v, arg, width); break;
    }
    out[i] = r;
}

// 64-bit and floating-point values through shuffles.
extern "C" __global__ void shuffle_wide(const double* in, double* out, const long long* lin, long long* lout) {
    int i = threadIdx.x;
    out[i] = __shfl_down_sync(0xffffffffu, in[i], 3);
    lout[i] = __shfl_xor_sync(0xffffffffu, lin[i], 5);
}

// Votes, ballot, match and reductions over each warp; out has 8 ints per thread.
extern "C" __global__ void votes(const int* in, unsigned* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    unsigned* o = out + 8 * i;
    o[0] = __ballot_sync(0xffffffffu, v > 0);
    o[1] = __all_sync(0xffffffffu, v > 0);
    o[2] = __any_sync(0xffffffffu, v > 0);
    o[3] = __match_any_sync(0xffffffffu, v);
    o[4] = __reduce_add_sync(0xffffffffu, (unsigned)v);
    o[5] = (unsigned)__reduce_min_sync(0xffffffffu, v);
    o[6] = (unsigned)__reduce_max_sync(0xffffffffu, v);
    o[7] = __popc(__ballot_sync(0xffffffffu, v != 0));
}

// Half-warp collectives with a 16-lane mask in each half.
extern "C" __global__ void half_warp_sums(const float* in, float* out) {
    int lane = threadIdx.x & 31;
    unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    float x = in[threadIdx.x];
    for (int o = 8; o > 0; o /= 2) x += __shfl_xor_sync(mask, x, o, 16);
    out[threadIdx.x] = x;
}

// __syncthreads_count / _and / _or over a block.
extern "C" __global__ void barrier_reductions(const int* in, int* out) {
    int p = in[threadIdx.x];
    int c = __syncthreads_count(p);
    int a = __syncthreads_and(p);
    int o = __syncthreads_or(p);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}

// Every thread of every block adds into shared counters, then into global ones.
extern "C" __global__ void atomics(const int* in, int* out, unsigned* uout, unsigned long long* cas_out, float* fout) {
    __shared__ int block_sum;
    if (threadIdx.x == 0) block_sum = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    atomicAdd(&block_sum, v);
    atomicMin(&out[1], v);
    atomicMax(&out[2], v);
    atomicInc(&uout[0], 9u);
    atomicOr(&uout[1], 1u << (i % 32));
    unsigned long long seen = atomicCAS(&cas_out[0], 0ull, 1ull);
    if (seen != 0) atomicAdd(&cas_out[1], 1ull);
    atomicAdd(&fout[0], 0.5f);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(&out[0], block_sum);
}

// Conversions and arithmetic of __half (a, b, c: float inputs already representable as halves).
extern "C" __global__ void half_ops(const float* x, const __half* a, const __half* b, const __half* c, long long n,
                                    __half* rn, __half* rz, __half* rd, __half* ru, __half* add, __half* mul,
                                    __half* div, __half* fma, float* h2f) {
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        rn[i] = __float2half_rn(x[i]);
        rz[i] = __float2half_rz(x[i]);
        rd[i] = __float2half_rd(x[i]);
        ru[i] = __float2half_ru(x[i]);
        add[i] = __hadd(a[i], b[i]);
        mul[i] = __hmul(a[i], b[i]);
        div[i] = a[i] / b[i];
        fma[i] = __hfma(a[i], b[i], c[i]);
        __half2 pair = __halves2half2(a[i], b[i]);
        float2 f = __half22float2(pair);
        h2f[i] = f.x + f.y;
    }
}

// Float -> int conversions saturate and send NaN to 0 on a GPU.
extern "C" __global__ void conversions(const float* x, long long n, int* rn, int* rz, unsigned* urn, long long* llrd) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        rn[i] = __float2int_rn(x[i]);
        rz[i] = __float2int_rz(x[i]);
        urn[i] = __float2uint_rn(x[i]);
        llrd[i] = __float2ll_rd(x[i]);
    }
}

// Two extern __shared__ arrays share one address (CUDA's rule); the launch's
// dynamic shared size bounds them.
extern "C" __global__ void dynamic_shared(float* out, int n) {
    extern __shared__ float as_float[];
    extern __shared__ unsigned char as_bytes[];
    as_float[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = as_float[n - 1 - threadIdx.x];
    out[n + threadIdx.x] = (float)(as_bytes == (unsigned char*)as_float);
}

// A reduction with every barrier in place: the same result in every thread order.
extern "C" __global__ void block_sum(const float* in, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = t; i < n; i += blockDim.x) acc += in[i];
    s[t] = acc;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o /= 2) {
        if (t < o) s[t] += s[t + o];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Reads shared memory before any thread wrote it: the emulator's 0xFF fill (NaN) shows.
extern "C" __global__ void reads_unwritten_shared(float* out) {
    __shared__ float s[64];
    out[threadIdx.x] = s[threadIdx.x];
}

// out[i] += 1 on a fresh buffer: its unwritten contents (NaN) propagate.
extern "C" __global__ void accumulates_into_output(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += 1.0f;
}

// A __device__ counter every thread adds to: each launch adds exactly its thread count.
__device__ unsigned long long launches_counted;
extern "C" __global__ void count_threads(unsigned long long* out) {
    atomicAdd(&launches_counted, 1ull);
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) out[0] = 0;   // out's value is not the point
}
extern "C" __global__ void read_count(unsigned long long* out) { out[0] = launches_counted; }
