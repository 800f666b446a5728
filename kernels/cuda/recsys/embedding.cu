// SparseLengths{Sum,WeightedSum,Mean} over float32, float16 and fused 8-, 4- and
// 2-bit rowwise tables; int32/int64 indices; lengths (after lengths_to_offsets) or
// offsets. `lanes` threads (blockDim.x) share one bag and span its row in vectors;
// blockDim.y bags per block. float32 accumulation. Out-of-range indices are skipped
// and reported through status (see common.cuh); the host then raises the CPU op's error.
#include "../common.cuh"

// ---------------------------------------------------------------- table kinds
// Each kind: VEC (elements per vector load), and add<V>(row, col, w, acc) adding
// w * value for V consecutive columns starting at col.

struct F32Table {
    static const int VEC = 4;
    const float* data; long long dim;
    C2_INLINE const float* row(long long idx) const { return data + idx * dim; }
    template <int V> C2_INLINE void add(long long idx, int col, float w, float* acc) const {
        const float* r = row(idx) + col;
        if (V == 4) {
            Vec<float, 4> x = load_vec<float, 4>(r);
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] = fmaf(w, x.v[k], acc[k]);
        } else {
            acc[0] = fmaf(w, r[0], acc[0]);
        }
    }
};

struct F16Table {
    static const int VEC = 4;
    const __half* data; long long dim;
    template <int V> C2_INLINE void add(long long idx, int col, float w, float* acc) const {
        const __half* r = data + idx * dim + col;
        if (V == 4) {
            Vec<__half2, 2> x = load_vec<__half2, 2>(reinterpret_cast<const __half2*>(r));
            float2 a = __half22float2(x.v[0]), b = __half22float2(x.v[1]);
            acc[0] = fmaf(w, a.x, acc[0]); acc[1] = fmaf(w, a.y, acc[1]);
            acc[2] = fmaf(w, b.x, acc[2]); acc[3] = fmaf(w, b.y, acc[3]);
        } else {
            acc[0] = fmaf(w, __half2float(r[0]), acc[0]);
        }
    }
};

// Row: dim uint8 values, then float32 scale and float32 bias (the last 8 bytes).
struct Fused8Table {
    static const int VEC = 4;
    const uint8_t* data; long long dim;
    template <int V> C2_INLINE void add(long long idx, int col, float w, float* acc) const {
        const uint8_t* r = data + idx * (dim + 8);
        float scale, bias;
        if (V == 4) {  // dim % 4 == 0: scale and bias are 4-byte aligned
            scale = *reinterpret_cast<const float*>(r + dim);
            bias = *reinterpret_cast<const float*>(r + dim + 4);
            Vec<uint8_t, 4> q = load_vec<uint8_t, 4>(r + col);
            float ws = w * scale, wb = w * bias;
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[k] += fmaf(ws, (float)q.v[k], wb);
        } else {
            scale = load_unaligned_f32(r + dim);
            bias = load_unaligned_f32(r + dim + 4);
            acc[0] += fmaf(w * scale, (float)r[col], w * bias);
        }
    }
};

// Row: ceil(dim/2) bytes of 4-bit values (low nibble first), then float16 scale, float16 bias.
struct Fused4Table {
    static const int VEC = 8;
    const uint8_t* data; long long dim;
    template <int V> C2_INLINE void add(long long idx, int col, float w, float* acc) const {
        long long nbytes = (dim + 1) / 2;
        const uint8_t* r = data + idx * (nbytes + 4);
        if (V == 8) {  // dim % 8 == 0: rows and the 4 bytes read are 4-byte aligned
            float scale = __half2float(*reinterpret_cast<const __half*>(r + nbytes));
            float bias = __half2float(*reinterpret_cast<const __half*>(r + nbytes + 2));
            unsigned int q = *reinterpret_cast<const unsigned int*>(r + col / 2);
            float ws = w * scale, wb = w * bias;
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[k] += fmaf(ws, (float)((q >> (4 * k)) & 0xF), wb);
        } else {
            float scale = load_unaligned_f16(r + nbytes);
            float bias = load_unaligned_f16(r + nbytes + 2);
            uint8_t byte = r[col / 2];
            float q = (float)((col & 1) ? (byte >> 4) : (byte & 0xF));
            acc[0] += fmaf(w * scale, q, w * bias);
        }
    }
};

// Row: ceil(dim/4) bytes of 2-bit values (lowest bits first), then float16 scale, float16 bias.
struct Fused2Table {
    static const int VEC = 16;
    const uint8_t* data; long long dim;
    template <int V> C2_INLINE void add(long long idx, int col, float w, float* acc) const {
        long long nbytes = (dim + 3) / 4;
        const uint8_t* r = data + idx * (nbytes + 4);
        if (V == 16) {  // dim % 16 == 0: rows and the 4 bytes read are 4-byte aligned
            float scale = __half2float(*reinterpret_cast<const __half*>(r + nbytes));
            float bias = __half2float(*reinterpret_cast<const __half*>(r + nbytes + 2));
            unsigned int q = *reinterpret_cast<const unsigned int*>(r + col / 4);
            float ws = w * scale, wb = w * bias;
#pragma unroll
            for (int k = 0; k < 16; ++k) acc[k] += fmaf(ws, (float)((q >> (2 * k)) & 0x3), wb);
        } else {
            float scale = load_unaligned_f16(r + nbytes);
            float bias = load_unaligned_f16(r + nbytes + 2);
            float q = (float)((r[col / 4] >> (2 * (col & 3))) & 0x3);
            acc[0] += fmaf(w * scale, q, w * bias);
        }
    }
};

// ---------------------------------------------------------------- the lookup

template <typename Table, int V, typename IT, typename OT>
C2_INLINE void lookup(Table table, long long rows, const IT* __restrict__ indices, long long n_indices,
                      const OT* __restrict__ offsets, long long n_offsets, long long n_bags,
                      const float* __restrict__ weights,
                      int mean, float* __restrict__ out, long long* status) {
    long long bag = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    if (bag >= n_bags) return;
    const int lane = threadIdx.x, lanes = blockDim.x;
    const long long dim = table.dim;
    long long first = (long long)offsets[0];
    // Without a last offset (torch's include_last_offset=False) the last bag ends at n_indices.
    long long start = (long long)offsets[bag] - first;
    long long end = bag + 1 < n_offsets ? (long long)offsets[bag + 1] - first : n_indices;
    if (start < 0 || end < start || end > n_indices) {
        if (lane == 0) report_bad_segments(status, 1);
        start = start < 0 ? 0 : (start > n_indices ? n_indices : start);
        end = end < start ? start : (end > n_indices ? n_indices : end);
    }
    const float norm = (mean && end > start) ? 1.0f / (float)(end - start) : 1.0f;
    for (long long col = (long long)lane * V; col < dim; col += (long long)lanes * V) {
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = 0.0f;
        long long p = start;
        // Four rows in flight per thread: the index loads and row loads of the group
        // are independent, so their latencies overlap.
        for (; p + 4 <= end; p += 4) {
            long long idx[4];
            float w[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                idx[u] = (long long)indices[p + u];
                w[u] = weights ? weights[p + u] : 1.0f;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (idx[u] < 0 || idx[u] >= rows) { report_bad_position(status, p + u); continue; }
                table.template add<V>(idx[u], (int)col, w[u], acc);
            }
        }
        for (; p < end; ++p) {
            long long idx = (long long)indices[p];
            if (idx < 0 || idx >= rows) { report_bad_position(status, p); continue; }
            table.template add<V>(idx, (int)col, weights ? weights[p] : 1.0f, acc);
        }
        float* o = out + bag * dim + col;
        if (V >= 4) {
#pragma unroll
            for (int k = 0; k < V; k += 4) {
                Vec<float, 4> y;
                y.v[0] = acc[k] * norm; y.v[1] = acc[k + 1] * norm;
                y.v[2] = acc[k + 2] * norm; y.v[3] = acc[k + 3] * norm;
                store_vec<float, 4>(o + k, y);
            }
        } else {
            o[0] = acc[0] * norm;
        }
    }
}

// One extern "C" entry per (table kind, index type, offsets type). `vectorized`
// (host-chosen: dim % VEC == 0 and aligned buffers) picks vector or scalar loads.
#define C2_SLS_ENTRY(NAME, TABLE, ELEM, IT, OT)                                                         \
    extern "C" __global__ void NAME(const ELEM* data, long long rows, long long dim, const IT* indices, \
                                    long long n_indices, const OT* offsets, long long n_offsets,         \
                                    long long n_bags,                                                    \
                                    const float* weights, int mean, int vectorized, float* out,          \
                                    long long* status) {                                                 \
        TABLE table{data, dim};                                                                          \
        if (vectorized)                                                                                  \
            lookup<TABLE, TABLE::VEC>(table, rows, indices, n_indices, offsets, n_offsets, n_bags,       \
                                      weights, mean, out, status);                                       \
        else                                                                                             \
            lookup<TABLE, 1>(table, rows, indices, n_indices, offsets, n_offsets, n_bags, weights, mean, \
                             out, status);                                                               \
    }

#define C2_SLS_FAMILY(KIND, TABLE, ELEM)                               \
    C2_SLS_ENTRY(sls_##KIND##_i32_o64, TABLE, ELEM, int, long long)    \
    C2_SLS_ENTRY(sls_##KIND##_i64_o64, TABLE, ELEM, long long, long long) \
    C2_SLS_ENTRY(sls_##KIND##_i32_o32, TABLE, ELEM, int, int)          \
    C2_SLS_ENTRY(sls_##KIND##_i64_o32, TABLE, ELEM, long long, int)

C2_SLS_FAMILY(f32, F32Table, float)
C2_SLS_FAMILY(f16, F16Table, __half)
C2_SLS_FAMILY(fused8, Fused8Table, uint8_t)
C2_SLS_FAMILY(fused4, Fused4Table, uint8_t)
C2_SLS_FAMILY(fused2, Fused2Table, uint8_t)

// ---------------------------------------------------------------- lengths -> offsets
// One block (blockDim.x a multiple of 32) walks the int32 lengths in chunks of
// blockDim.x * SCAN_ITEMS, each thread scanning SCAN_ITEMS consecutive lengths
// serially and the block scanning the per-thread totals (few block-wide steps even
// for 65,536 bags), and writes n_bags + 1 int64 offsets. Negative lengths count as 0
// and are reported (code 1); a total different from n_indices is reported (code 2).
#define SCAN_ITEMS 16

extern "C" __global__ void __launch_bounds__(1024) lengths_to_offsets(const int* lengths, long long n_bags, long long* offsets,
                                              long long n_indices, long long* status) {
    __shared__ long long warp_total[32];
    __shared__ long long carry;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    if (tid == 0) { carry = 0; offsets[0] = 0; }
    __syncthreads();
    for (long long base = 0; base < n_bags; base += (long long)blockDim.x * SCAN_ITEMS) {
        const long long first = base + (long long)tid * SCAN_ITEMS;
        long long prefix[SCAN_ITEMS];
        long long own = 0;
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS; ++k) {
            long long i = first + k;
            long long v = i < n_bags ? (long long)lengths[i] : 0;
            if (v < 0) { report_bad_segments(status, 1); v = 0; }
            own += v;
            prefix[k] = own;  // inclusive within this thread's items
        }
        long long incl = own;
        for (int o = 1; o < 32; o *= 2) {  // inclusive scan of the thread totals within the warp
            long long up = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += up;
        }
        if (lane == 31) warp_total[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            long long t = lane < warps ? warp_total[lane] : 0;
            for (int o = 1; o < 32; o *= 2) {
                long long up = __shfl_up_sync(0xffffffffu, t, o);
                if (lane >= o) t += up;
            }
            warp_total[lane] = t;  // inclusive totals per warp
        }
        __syncthreads();
        const long long before = carry + (warp > 0 ? warp_total[warp - 1] : 0) + (incl - own);
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS; ++k) {
            long long i = first + k;
            if (i < n_bags) offsets[i + 1] = before + prefix[k];
        }
        __syncthreads();
        if (tid == 0) carry += warp_total[warps - 1];
        __syncthreads();
    }
    if (tid == 0 && carry != n_indices) report_bad_segments(status, 2);
}
