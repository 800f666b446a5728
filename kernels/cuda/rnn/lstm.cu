// LSTMUnit and LSTMUnitGradient. Gates per row are [i | f | o | g], each D wide.
// A thread handles V consecutive columns of one row, loading them as one vector
// (float4, or 4/2 halves); math is float32 for both float and half tensors.
// The timestep is read on the device, so nothing is copied back to the host.
#include "../common.cuh"

template <typename T, int V>
C2_INLINE void load_f(const T* p, float* out) {
    Vec<T, V> x = load_vec<T, V>(p);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = to_float(x.v[k]);
}

template <typename T, int V>
C2_INLINE void store_f(T* p, const float* in) {
    Vec<T, V> x;
#pragma unroll
    for (int k = 0; k < V; ++k) x.v[k] = from_float<T>(in[k]);
    store_vec<T, V>(p, x);
}

template <typename T, int V>
C2_INLINE void lstm_forward(const T* __restrict__ h_prev, const T* __restrict__ c_prev, const T* __restrict__ gates,
                            const int* __restrict__ seq_lengths, const int* __restrict__ timestep, long long n,
                            long long d, float forget_bias, int drop_states, T* __restrict__ h, T* __restrict__ c) {
    const long long per_row = d / V, items = n * per_row;
    const int t = *timestep;
    for (long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        long long row = it / per_row, col = (it - row * per_row) * V;
        long long at = row * d + col;
        const bool valid = seq_lengths == nullptr || t < seq_lengths[row];
        float hv[V], cv[V];
        if (valid) {
            const T* x = gates + row * 4 * d + col;
            float xi[V], xf[V], xo[V], xg[V], cp[V];
            load_f<T, V>(x, xi);
            load_f<T, V>(x + d, xf);
            load_f<T, V>(x + 2 * d, xo);
            load_f<T, V>(x + 3 * d, xg);
            load_f<T, V>(c_prev + at, cp);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                float i = sigmoidf_(xi[k]), f = sigmoidf_(xf[k] + forget_bias);
                float o = sigmoidf_(xo[k]), g = tanh_via_sigmoid(xg[k]);
                cv[k] = f * cp[k] + i * g;
                hv[k] = o * tanh_via_sigmoid(cv[k]);
            }
        } else if (drop_states) {
#pragma unroll
            for (int k = 0; k < V; ++k) { hv[k] = 0.0f; cv[k] = 0.0f; }
        } else {
            load_f<T, V>(h_prev + at, hv);
            load_f<T, V>(c_prev + at, cv);
        }
        store_f<T, V>(h + at, hv);
        store_f<T, V>(c + at, cv);
    }
}

template <typename T, int V>
C2_INLINE void lstm_backward(const T* __restrict__ c_prev, const T* __restrict__ gates, const int* __restrict__ seq_lengths,
                             const int* __restrict__ timestep, const T* __restrict__ c, const T* __restrict__ dh,
                             const T* __restrict__ dc, long long n, long long d, float forget_bias, int drop_states,
                             T* __restrict__ dh_prev, T* __restrict__ dc_prev, T* __restrict__ dgates) {
    const long long per_row = d / V, items = n * per_row;
    const int t = *timestep;
    for (long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x; it < items;
         it += (long long)gridDim.x * blockDim.x) {
        long long row = it / per_row, col = (it - row * per_row) * V;
        long long at = row * d + col;
        T* dx = dgates + row * 4 * d + col;
        const bool valid = seq_lengths == nullptr || t < seq_lengths[row];
        float zero[V], dhv[V], dcv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) zero[k] = 0.0f;
        load_f<T, V>(dh + at, dhv);
        load_f<T, V>(dc + at, dcv);
        if (valid) {
            const T* x = gates + row * 4 * d + col;
            float xi[V], xf[V], xo[V], xg[V], cp[V], cc[V];
            float di[V], df[V], dout[V], dg[V], dcp[V];
            load_f<T, V>(x, xi);
            load_f<T, V>(x + d, xf);
            load_f<T, V>(x + 2 * d, xo);
            load_f<T, V>(x + 3 * d, xg);
            load_f<T, V>(c_prev + at, cp);
            load_f<T, V>(c + at, cc);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                float i = sigmoidf_(xi[k]), f = sigmoidf_(xf[k] + forget_bias);
                float o = sigmoidf_(xo[k]), g = tanh_via_sigmoid(xg[k]);
                float tc = tanh_via_sigmoid(cc[k]);
                float dcell = dcv[k] + dhv[k] * o * (1.0f - tc * tc);
                dcp[k] = dcell * f;
                di[k] = dcell * g * i * (1.0f - i);
                df[k] = dcell * cp[k] * f * (1.0f - f);
                dout[k] = dhv[k] * tc * o * (1.0f - o);
                dg[k] = dcell * i * (1.0f - g * g);
            }
            store_f<T, V>(dh_prev + at, zero);
            store_f<T, V>(dc_prev + at, dcp);
            store_f<T, V>(dx, di);
            store_f<T, V>(dx + d, df);
            store_f<T, V>(dx + 2 * d, dout);
            store_f<T, V>(dx + 3 * d, dg);
        } else {
            if (drop_states) {
#pragma unroll
                for (int k = 0; k < V; ++k) { dhv[k] = 0.0f; dcv[k] = 0.0f; }
            }
            store_f<T, V>(dh_prev + at, dhv);
            store_f<T, V>(dc_prev + at, dcv);
#pragma unroll
            for (int q = 0; q < 4; ++q) store_f<T, V>(dx + q * d, zero);
        }
    }
}

#define C2_LSTM(SUFFIX, T, V)                                                                              \
    extern "C" __global__ void lstm_unit_##SUFFIX(const T* h_prev, const T* c_prev, const T* gates,        \
                                                  const int* seq_lengths, const int* timestep, long long n, \
                                                  long long d, float forget_bias, int drop_states, T* h,    \
                                                  T* c) {                                                   \
        lstm_forward<T, V>(h_prev, c_prev, gates, seq_lengths, timestep, n, d, forget_bias, drop_states,   \
                           h, c);                                                                            \
    }                                                                                                       \
    extern "C" __global__ void lstm_unit_gradient_##SUFFIX(                                                 \
        const T* c_prev, const T* gates, const int* seq_lengths, const int* timestep, const T* c,          \
        const T* dh, const T* dc, long long n, long long d, float forget_bias, int drop_states, T* dh_prev, \
        T* dc_prev, T* dgates) {                                                                            \
        lstm_backward<T, V>(c_prev, gates, seq_lengths, timestep, c, dh, dc, n, d, forget_bias,            \
                            drop_states, dh_prev, dc_prev, dgates);                                         \
    }

C2_LSTM(f32_v4, float, 4)
C2_LSTM(f32_v1, float, 1)
C2_LSTM(f16_v4, __half, 4)
C2_LSTM(f16_v2, __half, 2)
C2_LSTM(f16_v1, __half, 1)
