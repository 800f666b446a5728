// 2-D convolution (im2col, then a GEMM per image: cuBLAS or gemm.cu) and 2-D max /
// average pooling, NCHW float32. Geometry is computed on the host (the CPU op's
// argument parsing, legacy pads and ceil-mode sizes) and passed by value.
#include "../common.cuh"

struct Conv2dGeometry {
    long long channels, height, width;   // one image of the input
    long long out_h, out_w;
    int kernel_h, kernel_w, stride_h, stride_w, pad_t, pad_l, dil_h, dil_w;
};

// col[img][(c * kernel_h + ky) * kernel_w + kx][oy * out_w + ox] for images [0, n):
// the input value under that kernel tap, 0 where the tap falls in the padding.
extern "C" __global__ void im2col_f32(const float* __restrict__ x, long long n, Conv2dGeometry g,
                                      float* __restrict__ col) {
    const long long hw = g.out_h * g.out_w, rows = g.channels * g.kernel_h * g.kernel_w;
    const long long total = n * rows * hw, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long p = i % hw, r = (i / hw) % rows, img = i / (hw * rows);
        const long long ox = p % g.out_w, oy = p / g.out_w;
        const int kx = (int)(r % g.kernel_w), ky = (int)((r / g.kernel_w) % g.kernel_h);
        const long long c = r / ((long long)g.kernel_w * g.kernel_h);
        const long long iy = oy * g.stride_h - g.pad_t + (long long)ky * g.dil_h;
        const long long ix = ox * g.stride_w - g.pad_l + (long long)kx * g.dil_w;
        col[i] = (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width)
                     ? x[((img * g.channels + c) * g.height + iy) * g.width + ix]
                     : 0.0f;
    }
}

// y[img, m, p] += bias[m] over n images of `channels` planes of hw values.
extern "C" __global__ void add_bias_channels(float* y, const float* __restrict__ bias, long long n, long long channels,
                                             long long hw) {
    const long long total = n * channels * hw, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        y[i] += bias[(i / hw) % channels];
}

struct Pool2dGeometry {
    long long height, width, out_h, out_w;
    int kernel_h, kernel_w, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil_h, dil_w;
    int count_include_pad, unused;
};

// One thread per output value; `planes` = N * C. Max propagates NaN (as the CPU op).
extern "C" __global__ void max_pool2d_f32(const float* __restrict__ x, long long planes, Pool2dGeometry g,
                                          float* __restrict__ y) {
    const long long ohw = g.out_h * g.out_w, total = planes * ohw, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long plane = i / ohw, p = i - plane * ohw, oy = p / g.out_w, ox = p - oy * g.out_w;
        const long long y0 = oy * g.stride_h - g.pad_t, x0 = ox * g.stride_w - g.pad_l;
        const float* xp = x + plane * g.height * g.width;
        float m = -INFINITY;
        for (int ky = 0; ky < g.kernel_h; ++ky) {
            const long long iy = y0 + (long long)ky * g.dil_h;
            if (iy < 0 || iy >= g.height) continue;
            for (int kx = 0; kx < g.kernel_w; ++kx) {
                const long long ix = x0 + (long long)kx * g.dil_w;
                if (ix < 0 || ix >= g.width) continue;
                const float v = xp[iy * g.width + ix];
                if (v > m || isnan(v)) m = v;
                if (isnan(m)) break;
            }
            if (isnan(m)) break;
        }
        y[i] = m;
    }
}

// Average: the sum of the window's cells inside the input, times 1 / (window cells
// inside the input, or inside input + padding with count_include_pad).
extern "C" __global__ void avg_pool2d_f32(const float* __restrict__ x, long long planes, Pool2dGeometry g,
                                          float* __restrict__ y) {
    const long long ohw = g.out_h * g.out_w, total = planes * ohw, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const long long plane = i / ohw, p = i - plane * ohw, oy = p / g.out_w, ox = p - oy * g.out_w;
        const long long y0 = oy * g.stride_h - g.pad_t, x0 = ox * g.stride_w - g.pad_l;
        const float* xp = x + plane * g.height * g.width;
        float s = 0.0f;
        for (int ky = 0; ky < g.kernel_h; ++ky) {
            const long long iy = y0 + ky;
            if (iy < 0 || iy >= g.height) continue;
            for (int kx = 0; kx < g.kernel_w; ++kx) {
                const long long ix = x0 + kx;
                if (ix >= 0 && ix < g.width) s += xp[iy * g.width + ix];
            }
        }
        const long long lo_y = g.count_include_pad ? -g.pad_t : 0, hi_y = g.count_include_pad ? g.height + g.pad_b : g.height;
        const long long lo_x = g.count_include_pad ? -g.pad_l : 0, hi_x = g.count_include_pad ? g.width + g.pad_r : g.width;
        const long long rows = min(y0 + g.kernel_h, hi_y) - max(y0, lo_y);
        const long long cols = min(x0 + g.kernel_w, hi_x) - max(x0, lo_x);
        y[i] = s * (float)(1.0 / (double)(rows * cols));
    }
}
