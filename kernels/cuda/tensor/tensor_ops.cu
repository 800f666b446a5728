// Elementwise arithmetic with broadcasting, activations, Softmax, Concat,
// Transpose, Gather and the FC bias add. Broadcast/transpose geometry (collapsed
// dims and element strides, at most 6 dims) is computed on the host and passed by
// value, so no launch needs a host-to-device copy.
#include "../common.cuh"

#define C2_MAX_DIMS 6

struct Strided2 {         // output dims and two inputs' element strides (0 = broadcast)
    long long ndim;
    long long dims[C2_MAX_DIMS];
    long long sa[C2_MAX_DIMS];
    long long sb[C2_MAX_DIMS];
};

struct Strided1 {         // output dims and the input's element strides
    long long ndim;
    long long dims[C2_MAX_DIMS];
    long long s[C2_MAX_DIMS];
};

C2_INLINE float apply_binary(int op, float a, float b) {
    switch (op) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        default: return a / b;
    }
}

// same_shape: both inputs have the output's shape (the fast, fully coalesced path).
template <typename T>
C2_INLINE void binary(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n,
                      Strided2 g, int op, int same_shape) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long ia = i, ib = i;
        if (!same_shape) {
            long long rest = i;
            ia = 0; ib = 0;
            for (int k = (int)g.ndim - 1; k >= 0; --k) {
                long long c = rest % g.dims[k];
                rest /= g.dims[k];
                ia += c * g.sa[k];
                ib += c * g.sb[k];
            }
        }
        out[i] = from_float<T>(apply_binary(op, to_float(a[ia]), to_float(b[ib])));
    }
}

extern "C" __global__ void binary_f32(const float* a, const float* b, float* out, long long n, Strided2 g, int op,
                                      int same_shape) {
    binary<float>(a, b, out, n, g, op, same_shape);
}

extern "C" __global__ void binary_f16(const __half* a, const __half* b, __half* out, long long n, Strided2 g,
                                      int op, int same_shape) {
    binary<__half>(a, b, out, n, g, op, same_shape);
}

C2_INLINE float apply_unary(int op, float x) {
    switch (op) {
        case 0: return fmaxf(x, 0.0f);
        case 1: return 1.0f / (1.0f + expf(-x));
        case 2: return tanhf(x);
        case 3: return expf(x);
        case 4: return logf(x);
        case 5: return sqrtf(x);
        case 6: return fabsf(x);
        default: return -x;
    }
}

template <typename T>
C2_INLINE void unary(const T* __restrict__ x, T* __restrict__ y, long long n, int op) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = from_float<T>(apply_unary(op, to_float(x[i])));
}

extern "C" __global__ void unary_f32(const float* x, float* y, long long n, int op) { unary<float>(x, y, n, op); }
extern "C" __global__ void unary_f16(const __half* x, __half* y, long long n, int op) { unary<__half>(x, y, n, op); }

// Y[r, c] += bias[c] (FC after the GEMM).
extern "C" __global__ void add_bias_rows(float* y, const float* __restrict__ bias, long long rows, long long cols) {
    const long long n = rows * cols, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] += bias[i % cols];
}

// A block per row of a [rows, cols] view: max, sum of exp, normalise.
extern "C" __global__ void __launch_bounds__(1024) softmax_rows(const float* __restrict__ x, long long rows, long long cols,
                                        float* __restrict__ y) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = -INFINITY;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_reduce(m, scratch, MaxOp(), -INFINITY);
    float s = 0.0f;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = block_reduce(s, scratch, SumOp(), 0.0f);
    float inv = 1.0f / s;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}

// Concat: inputs viewed as [outer, cols_k], output [outer, out_cols]. Up to 8 inputs
// per launch; this launch fills output columns [col_begin, col_begin + chunk_cols).
struct ConcatInputs {
    const void* p[8];
    long long cols[8];
};

template <typename T>
C2_INLINE void concat(T* __restrict__ out, long long outer, long long out_cols, long long col_begin,
                      long long chunk_cols, long long n_in, ConcatInputs in) {
    const long long n = outer * chunk_cols, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long row = i / chunk_cols, c = i - row * chunk_cols;
        int k = 0;
        while (k + 1 < n_in && c >= in.cols[k]) { c -= in.cols[k]; ++k; }
        out[row * out_cols + col_begin + (i - row * chunk_cols)] =
            reinterpret_cast<const T*>(in.p[k])[row * in.cols[k] + c];
    }
}

// Transpose: output element i at coordinates of g.dims reads input offset sum(c_k * s_k).
template <typename T>
C2_INLINE void permute(const T* __restrict__ x, T* __restrict__ y, long long n, Strided1 g) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long rest = i, src = 0;
        for (int k = (int)g.ndim - 1; k >= 0; --k) {
            long long c = rest % g.dims[k];
            rest /= g.dims[k];
            src += c * g.s[k];
        }
        y[i] = x[src];
    }
}

// Gather on axis 0: out[j, :] = data[indices[j], :]; bad indices write zeros and are reported.
template <typename T, typename IT>
C2_INLINE void gather(const T* __restrict__ data, long long rows, long long inner, const IT* __restrict__ indices,
                      long long n_idx, T* __restrict__ out, long long* status) {
    const long long n = n_idx * inner, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long j = i / inner, c = i - j * inner;
        long long idx = (long long)indices[j];
        if (idx < 0 || idx >= rows) {
            if (c == 0) report_bad_position(status, j);
            out[i] = T();
        } else {
            out[i] = data[idx * inner + c];
        }
    }
}

#define C2_BY_SIZE(BITS, T)                                                                                 \
    extern "C" __global__ void concat_u##BITS(T* out, long long outer, long long out_cols, long long col_begin, \
                                              long long chunk_cols, long long n_in, ConcatInputs in) {      \
        concat<T>(out, outer, out_cols, col_begin, chunk_cols, n_in, in);                                   \
    }                                                                                                       \
    extern "C" __global__ void transpose_u##BITS(const T* x, T* y, long long n, Strided1 g) {               \
        permute<T>(x, y, n, g);                                                                             \
    }                                                                                                       \
    extern "C" __global__ void gather_u##BITS##_i32(const T* data, long long rows, long long inner,         \
                                                    const int* indices, long long n_idx, T* out,           \
                                                    long long* status) {                                    \
        gather<T, int>(data, rows, inner, indices, n_idx, out, status);                                     \
    }                                                                                                       \
    extern "C" __global__ void gather_u##BITS##_i64(const T* data, long long rows, long long inner,         \
                                                    const long long* indices, long long n_idx, T* out,     \
                                                    long long* status) {                                    \
        gather<T, long long>(data, rows, inner, indices, n_idx, out, status);                               \
    }

C2_BY_SIZE(8, uint8_t)
C2_BY_SIZE(16, unsigned short)
C2_BY_SIZE(32, unsigned int)
C2_BY_SIZE(64, unsigned long long)
