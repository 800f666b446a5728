// Deliberately broken kernels, kept so that tests/test_cuda_emulator.py can prove the
// emulator's checks catch each kind of bug. Each compiles (with nvcc too); a GPU would
// run most of them silently, reading neighbours' memory or racing.
#include <cuda_fp16.h>
#include <assert.h>

// Off by one: i <= n reads and writes one element past both buffers.
extern "C" __global__ void off_by_one(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 2.0f * in[i];
}

// Off by one on the write side only (the read is guarded).
extern "C" __global__ void writes_one_past(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i + 1] = in[i];
}

// Reads before the start of its input.
extern "C" __global__ void reads_before_start(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i - 1];
}

// A tree reduction without the __syncthreads between its steps: threads read partial
// sums their neighbours may not have written yet.
extern "C" __global__ void missing_barrier(const float* in, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = t < n ? in[t] : 0.0f;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o /= 2) {
        if (t < o) s[t] += s[t + o];
    }
    if (t == 0) out[0] = s[0];
}

// The block reduction of kernels/cuda/common.cuh without its first barrier: warp 0
// writes the next reduction's partial sum into scratch[0] while other warps may still
// read the previous result from it.
extern "C" __global__ void reused_scratch_without_barrier(const float* in, float* out) {
    __shared__ float scratch[32];
    float x = in[threadIdx.x];
    for (int round = 0; round < 2; ++round) {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
        if (lane == 0) scratch[warp] = x;   // missing: __syncthreads() before this write
        __syncthreads();
        x = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : 0.0f;
        if (warp == 0) {
            for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
            if (lane == 0) scratch[0] = x;
        }
        __syncthreads();
        x = scratch[0];
    }
    out[threadIdx.x] = x;
}

// Every block writes the same element: the result depends on which block runs last.
extern "C" __global__ void blocks_race(float* out) {
    if (threadIdx.x == 0) out[0] = (float)blockIdx.x;
}

// A full-warp shuffle after half the warp has returned.
extern "C" __global__ void shuffle_after_exit(const float* in, float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, in[threadIdx.x], 1);
}

// Half the warp waits at __syncthreads, the other half at __syncwarp for them: no one goes on.
extern "C" __global__ void divergent_barrier(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
    out[threadIdx.x] = 1.0f;
}

// A shuffle that reads a lane outside its mask.
extern "C" __global__ void shuffle_outside_mask(const float* in, float* out) {
    out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, in[threadIdx.x], 16);
}

// A float4 load at an address that is only 4-byte aligned.
extern "C" __global__ void misaligned_vector_load(const float* in, float* out) {
    float4 v = *reinterpret_cast<const float4*>(in + 1);
    out[0] = v.x + v.y + v.z + v.w;
}

// Writes far past the block's __shared__ array.
extern "C" __global__ void shared_overflow(float* out) {
    __shared__ float s[32];
    s[threadIdx.x * 1024] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[0];
}

// Indexes past the end of a __device__ table.
__device__ int lookup_table[4] = {1, 2, 3, 4};
extern "C" __global__ void device_table_overflow(const int* idx, int* out) {
    out[threadIdx.x] = lookup_table[idx[threadIdx.x]];
}

// Dereferences a pointer argument that may be null.
extern "C" __global__ void null_dereference(const float* maybe_null, float* out) {
    out[threadIdx.x] = maybe_null[threadIdx.x];
}

// Divides by an integer that may be zero (a GPU returns an undefined value).
extern "C" __global__ void divides_by_zero(const int* a, const int* b, int* out) {
    out[threadIdx.x] = a[threadIdx.x] / b[threadIdx.x];
}

// A device-side assert that fails.
extern "C" __global__ void failing_assert(const int* in) {
    assert(in[threadIdx.x] >= 0);
}

// Waits for a flag nobody sets.
extern "C" __global__ void spins_forever(const volatile int* flag) {
    while (flag[0] == 0) {
    }
}

// Unbounded recursion: overflows the thread's stack.
__device__ __noinline__ int recurse(volatile int* p, int depth) {
    volatile char pad[512];
    pad[depth & 511] = (char)depth;
    return depth + recurse(p, depth + 1) + pad[(depth + 1) & 511];
}
extern "C" __global__ void overflows_stack(int* out) {
    out[0] = recurse(out, 0);
}

// Takes `int n` where the host packs a 64-bit integer.
extern "C" __global__ void takes_int(float* out, int n) {
    if (threadIdx.x < n) out[threadIdx.x] = 0.0f;
}

// The last block to run leaves its number in a __device__ variable.
__device__ int last_block;
extern "C" __global__ void blocks_race_on_a_device_variable() {
    if (threadIdx.x == 0) last_block = blockIdx.x;
}
