// ReduceSum / ReduceMean (any axes) and ReduceFront/Back{Sum,Mean}: a block per
// output value (grid-stride over outputs), each thread summing reduced elements
// threadIdx.x, threadIdx.x + blockDim.x, ... in float, then a shuffle/shared tree
// (block_reduce). A fused chain that ends in a last-axis reduction
// (caffe2py/cuda/fused.py) sums in exactly this order, so its result is bitwise
// this kernel's. Geometry is passed by value: the kept dims (which output) and the
// reduced dims (which element of the output's group), each with the input's element
// strides, adjacent dims merged on the host.
#include "../common.cuh"

#define C2_MAX_DIMS 6

struct ReduceGeometry {
    long long kept_ndim;
    long long kept_dims[C2_MAX_DIMS];
    long long kept_strides[C2_MAX_DIMS];
    long long red_ndim;
    long long red_dims[C2_MAX_DIMS];
    long long red_strides[C2_MAX_DIMS];
};

C2_INLINE long long strided_offset(long long i, long long ndim, const long long* dims, const long long* strides) {
    long long off = 0;
    for (int k = (int)ndim - 1; k >= 0; --k) {
        long long c = i % dims[k];
        i /= dims[k];
        off += c * strides[k];
    }
    return off;
}

// y[o] = (sum of the o-th group's r elements) / divisor (1 for a sum, r for a mean)
template <typename T>
C2_INLINE void reduce_sum(const T* __restrict__ x, T* __restrict__ y, long long n_out, long long r,
                          const ReduceGeometry& g, float divisor) {
    __shared__ float scratch[32];
    for (long long o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* base = x + strided_offset(o, g.kept_ndim, g.kept_dims, g.kept_strides);
        float s = 0.0f;
        for (long long k = threadIdx.x; k < r; k += blockDim.x)
            s += to_float(base[strided_offset(k, g.red_ndim, g.red_dims, g.red_strides)]);
        s = block_reduce(s, scratch, SumOp(), 0.0f);
        if (threadIdx.x == 0) y[o] = from_float<T>(__fdiv_rn(s, divisor));
    }
}

extern "C" __global__ void __launch_bounds__(256) reduce_sum_f32(const float* x, float* y, long long n_out,
                                                                long long r, ReduceGeometry g, float divisor) {
    reduce_sum<float>(x, y, n_out, r, g, divisor);
}

extern "C" __global__ void __launch_bounds__(256) reduce_sum_f16(const __half* x, __half* y, long long n_out,
                                                                long long r, ReduceGeometry g, float divisor) {
    reduce_sum<__half>(x, y, n_out, r, g, divisor);
}
