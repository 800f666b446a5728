"""Small products against one weight matrix packed once: the recurrent GEMM of an
RNN (the same W, a few rows of states, every timestep).

Why: OpenBLAS packs its B operand into panels on every call. A recurrent step
multiplies 16-32 rows of states by a 256 x 1024 weight, so each call packs 1 MB to
do 4-8 M multiply-adds, and the packing is a large share of the step (see
benchmarks/RESULTS.md, issue 37). Here B is packed once per sequence into panels of
16 columns (K x 16 floats, contiguous: 16 KB at K = 256, so a panel stays in L1
while every row block passes over it), and a compiled micro-kernel computes 4 rows
x 16 columns at a time with the 4 accumulators in vector registers.

Public:
    pack_columns(b) -> packed [P, K, 16] float32        (host side, once per sequence)
        b: a 2-D float32 view (K, N), any strides; columns past N in the last
        panel are zero.
    packed_product(a, lda, m, packed, n, out, ldo)      compiled; call from kernels (it has
        no NumPy twin: it works on addresses, and the kernels calling it have their own)
        out[i, :n] = a[i, :K] @ b for i < m. a and out are addresses of float32 rows
        lda / ldo elements apart (the caller guarantees they are in bounds: no checks).
    packed_matmul(a, packed, n) -> a @ b                 host-side wrapper (tests)

numba caches a kernel's machine code by its own source file only: after editing
this file, clear the caches of the kernels that call packed_product
(`caffe2py cache clear`), or they keep the old code.
"""
import numpy as np

from ..runtime.jit import LazyGlobal, compiled

PANEL = 16
LANES_16 = LazyGlobal(".simd", "LANES_16")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vfma = LazyGlobal(".simd", "vfma")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
load_f32 = LazyGlobal(".simd", "load_f32")
store_f32 = LazyGlobal(".simd", "store_f32")
vstore = LazyGlobal(".simd", "vstore")
address = LazyGlobal(".simd", "address")


def pack_columns(b):
    """b (K, N) float32 -> [ceil(N / 16), K, 16] panels (see the module docstring)."""
    k, n = b.shape
    panels = -(-n // PANEL)
    padded = np.zeros((k, panels * PANEL), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, PANEL).transpose(1, 0, 2))


@compiled
def packed_product(a, lda, m, packed, n, out, ldo):
    """See the module docstring."""
    panels, depth = packed.shape[0], packed.shape[1]
    base = address(packed)
    tail = np.empty((1, PANEL), np.float32)      # a partial panel's lanes, stored as an array (not by address)
    for p in range(panels):
        pb = base + 4 * PANEL * depth * p
        col = PANEL * p
        width = min(PANEL, n - col)
        i = 0
        while i < m:
            rows = min(4, m - i)
            a0 = a + 4 * i * lda
            a1 = a0 + 4 * lda * min(1, rows - 1)      # rows past m repeat row i: computed, not stored
            a2 = a0 + 4 * lda * min(2, rows - 1)
            a3 = a0 + 4 * lda * min(3, rows - 1)
            s0 = vzeros(LANES_16)
            s1 = vzeros(LANES_16)
            s2 = vzeros(LANES_16)
            s3 = vzeros(LANES_16)
            for k in range(depth):
                wv = vload_f32(LANES_16, pb + 4 * PANEL * k)
                s0 = vfma(s0, load_f32(a0 + 4 * k), wv)
                s1 = vfma(s1, load_f32(a1 + 4 * k), wv)
                s2 = vfma(s2, load_f32(a2 + 4 * k), wv)
                s3 = vfma(s3, load_f32(a3 + 4 * k), wv)
            for r in range(rows):
                s = s0 if r == 0 else (s1 if r == 1 else (s2 if r == 2 else s3))
                dst = out + 4 * ((i + r) * ldo + col)
                if width == PANEL:
                    vstore_f32_at(dst, s)
                else:
                    vstore(tail, 0, 0, s)
                    for j in range(width):
                        store_f32(dst + 4 * j, tail[0, j])
            i += 4


def packed_matmul(a, packed, n):
    """a (M, K) float32 C-contiguous @ the packed b: (M, n)."""
    m, k = a.shape
    if a.dtype != np.float32 or not a.flags.c_contiguous or packed.shape[1] != k or not 0 < n <= packed.shape[0] * 16:
        raise ValueError("packed_matmul: expected a C-contiguous float32 (M, %d) and n <= %d, got %s %s, n = %d"
                         % (packed.shape[1], packed.shape[0] * 16, a.dtype, list(a.shape), n))
    out = np.empty((m, n), np.float32)
    if m:
        _packed_matmul_kernel(a, packed, n, out)
    return out


@compiled
def _packed_matmul_kernel(a, packed, n, out):
    packed_product(address(a), a.shape[1], a.shape[0], packed, n, address(out), out.shape[1])


@_packed_matmul_kernel.numpy_twin
def _packed_matmul_kernel_numpy(a, packed, n, out):
    b = packed.transpose(1, 0, 2).reshape(packed.shape[1], -1)[:, :n]
    np.matmul(a, b, out=out)
