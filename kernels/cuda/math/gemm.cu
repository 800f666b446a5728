// Fallback GEMM, used only when cuBLAS cannot be loaded: row-major, batched with
// element strides, C = alpha * op(A) op(B) + beta * C, 16x16 shared-memory tiles.
#include "../common.cuh"

#define TILE 16

extern "C" __global__ void sgemm_tiled(int trans_a, int trans_b, long long m, long long n, long long k, float alpha,
                                       const float* __restrict__ a, long long stride_a, const float* __restrict__ b,
                                       long long stride_b, float beta, float* __restrict__ c, long long stride_c) {
    __shared__ float ta[TILE][TILE + 1];
    __shared__ float tb[TILE][TILE + 1];
    const long long batch = blockIdx.z;
    a += batch * stride_a; b += batch * stride_b; c += batch * stride_c;
    const long long row = (long long)blockIdx.y * TILE + threadIdx.y;
    const long long col = (long long)blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (long long k0 = 0; k0 < k; k0 += TILE) {
        long long ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        // op(A)[row, ka]: A is [m, k] or, transposed, [k, m].
        ta[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? (trans_a ? a[ka * m + row] : a[row * k + ka]) : 0.0f;
        // op(B)[kb, col]: B is [k, n] or, transposed, [n, k].
        tb[threadIdx.y][threadIdx.x] = (kb < k && col < n) ? (trans_b ? b[col * k + kb] : b[kb * n + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < TILE; ++q) acc = fmaf(ta[threadIdx.y][q], tb[q][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < m && col < n) {
        float prev = beta != 0.0f ? beta * c[row * n + col] : 0.0f;
        c[row * n + col] = alpha * acc + prev;
    }
}
