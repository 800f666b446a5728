"""Grouped 1x1 convolution (ShuffleNet's pointwise layers) with its output pass fused.

Public:
    grouped_pointwise(x3, w3, out3, bias=None, residual=None, relu=False) -> out3
        out3[g] (M, P) = w3[g] (M, K) @ x3[g] (K, P) [+ bias per row] [+ residual[g]] [ReLU]
    grouped_pointwise_product(m, group, out_spatial, dtype)
        -> the per-image product for conv.py's pointwise plan, or None when this path
        does not cover the case.
    direct_grouped_pointwise_plan(x_shape, m, group, strides, out_spatial, dtype)
        -> conv.py's compute for float32 maps of DIRECT_MIN_PIXELS or more (the direct
        kernel, below), or None.

A grouped 1x1 convolution is one small product per group (ShuffleNet: 4 x 34x34 @
34x784 ... 4 x 136x136 @ 136x49). Each team thread takes whole groups (or column
blocks of them when the groups do not share out evenly), runs one single-threaded
BLAS GEMM into the group's output rows and then adds bias and residual and applies
ReLU in one pass over them while they are in cache. The general batched path
(team_gemm.gemm_into) costs 25-100% more on these shapes: its per-call layout lookup
and its output pass (three passes per row) are as long as the products themselves
(one thread, 136 -> 136 channels, group 4, 28x28: 0.26 ms against 0.17 for the bare
products). Same BLAS products and same order of additions: results equal the
general path's. One output row or column per group stays there (its GEMV path).
"""
import functools
import math

import numpy as np

from ..math.epilogue import bias_values
from ..math.team_gemm import numpy_product_pass
from ..runtime.blas import gemm_entry
from ..runtime.packed_weights import DerivedWeights
from ..runtime.jit import call_gemm, compiled, per_team, prange, serial_variant, team, team_blocks, team_size
from .direct_conv import PIXELS, block_channels, pack_weights
from .stem_conv import _NO_RESIDUAL, row_lanes, rows_kernel

# Column blocks narrower than this are not split between threads (BLAS packs the
# whole weight block for each).
_MIN_BLOCK_COLS = 128
# Products smaller than this (multiply-adds) run on the calling thread: a parallel
# region costs more than it saves (team_gemm.py's threshold).
_MIN_PARALLEL_MACS = 1 << 20


@compiled(parallel=True)
def _grouped_gemm(gemm, ilp64, x, w, out, bias, has_bias, res, has_res, relu, cols, blocks):
    """out[g] = w[g] @ x[g] (+ bias[g * M + r] per row r, + res[g], then ReLU) for x
    (G, K, P), w (G, M, K), out and res (G, M, P) (res unread unless has_res), as
    G * cols jobs (column block c of group g) split into `blocks` blocks on the team.
    The caller checked every shape, contiguity, K, M, P >= 1 and that bias holds G * M
    values when has_bias."""
    groups, k_in, p = x.shape
    m = w.shape[1]
    item = out.itemsize
    jobs = groups * cols
    for t in prange(blocks):
        for job in range(jobs * t // blocks, jobs * (t + 1) // blocks):
            g = job // cols
            c = job % cols
            p0, p1 = p * c // cols, p * (c + 1) // cols
            if p1 == p0:
                continue
            call_gemm(gemm, ilp64, False, False, m, p1 - p0, k_in, 1.0, w.ctypes.data + g * m * k_in * item, k_in,
                      x.ctypes.data + (g * k_in * p + p0) * item, p, 0.0, out.ctypes.data + (g * m * p + p0) * item,
                      p, out)
            if not (has_bias or has_res or relu):
                continue
            for r in range(m):
                row = out[g, r, p0:p1]
                # without a bias, -0.0: adding it leaves every value (and zero's sign) as it is
                v = bias[g * m + r] if has_bias else -bias[0]
                if has_res:
                    extra = res[g, r, p0:p1]
                    if relu:
                        for j in range(p1 - p0):
                            y = row[j] + v + extra[j]
                            row[j] = y - y if y < 0 else y   # NaN stays NaN, as in team_gemm
                    else:
                        for j in range(p1 - p0):
                            row[j] = row[j] + v + extra[j]
                elif relu:
                    for j in range(p1 - p0):
                        y = row[j] + v
                        row[j] = y - y if y < 0 else y   # NaN stays NaN, as in team_gemm
                else:
                    for j in range(p1 - p0):
                        row[j] = row[j] + v


@_grouped_gemm.numpy_twin
def _grouped_gemm_numpy(gemm, ilp64, x, w, out, bias, has_bias, res, has_res, relu, cols, blocks):
    numpy_product_pass(w, x, out, bias, has_bias, res, has_res, relu)


_grouped_gemm_serial = serial_variant(_grouped_gemm, "_grouped_gemm_serial")


def grouped_pointwise(x3, w3, out3, bias=None, residual=None, relu=False):
    """See the module docstring. x3, w3, out3 C-contiguous of one float dtype with a
    direct BLAS entry (checked here, before the compiled loop)."""
    groups, k_in, p = x3.shape
    m = w3.shape[1]
    dtype = out3.dtype
    entry = gemm_entry(dtype)
    if (entry is None or w3.shape != (groups, m, k_in) or out3.shape != (groups, m, p) or min(groups, m, k_in, p) < 1
            or not (x3.dtype == w3.dtype == dtype)
            or not (x3.flags.c_contiguous and w3.flags.c_contiguous and out3.flags.c_contiguous)):
        raise ValueError("grouped pointwise operands %s @ %s -> %s (%s, %s, %s) do not agree"
                         % (list(w3.shape), list(x3.shape), list(out3.shape), w3.dtype, x3.dtype, dtype))
    b = bias_values(bias, dtype)
    if bias is not None and b.size != groups * m:
        raise ValueError("bias of %d values for %d output channels" % (b.size, groups * m))
    if residual is None:
        res = out3[:0]
    else:
        res = np.ascontiguousarray(residual, dtype=dtype).reshape(out3.shape)
    threads = team_size()
    if threads == 1 or groups * m * k_in * p < _MIN_PARALLEL_MACS:
        cols, blocks, kernel = 1, 1, _grouped_gemm_serial
    else:
        # whole groups per thread when they share out evenly, else column blocks too
        cols = 1 if groups % threads == 0 else max(1, min(threads, p // _MIN_BLOCK_COLS))
        blocks, kernel = min(threads, groups * cols), _grouped_gemm
    with team():
        kernel(entry.gemm, entry.ilp64, x3, w3, out3, b, bias is not None, res, residual is not None, relu,
               cols, blocks)
    return out3


# float32 maps of at least this many pixels take the register-blocked direct kernel
# (stem_conv._stem_rows: 4 output channels x 24 pixels in registers through the group's
# reduction, bias / residual / ReLU on the way out, groups over the team; with 16-lane
# registers _stem_rows_wide's 8 channels x 48 pixels: 1 thread, Intel AVX-512, ms 4 -> 8
# channels, 60 -> 240 g3 at 28x28 0.098 -> 0.078, 120 -> 480 g3 at 14x14 0.085 -> 0.071,
# 960 -> 240 g3 at 7x7 0.119 -> 0.084, 24 -> 60 g3 at 56x56 0.059 -> 0.060) instead of a
# BLAS GEMM per group. ShuffleNet's layers, one thread, CPU time, fastest of 200 calls
# on the shared 2-CPU Zen 3 VM, ms BLAS -> direct (onnxruntime): 136 -> 136 at 28x28
# 0.141 -> 0.108 (0.116), 272 -> 272 at 14x14 0.118 -> 0.098 (0.107), 272 -> 272 at 7x7
# 0.050 -> 0.036 (0.039), 544 -> 544 at 7x7 0.124 -> 0.114 (0.103), 24 -> 112 at 56x56
# 0.215 -> 0.179 (0.119). DIRECT_MIN_PIXELS = a huge value switches it off.
DIRECT_MIN_PIXELS = PIXELS


@functools.lru_cache(maxsize=64)
def _row_offsets(k_in, p):
    """Where input channel k of a group starts in its (K * P) rows: the direct kernel's taps."""
    return np.arange(k_in, dtype=np.int64) * p


def _pack_groups(w3, channels):
    """(G, M, K) -> (G, ceil(M/channels), K, channels): direct_conv.pack_weights per group."""
    return np.stack([pack_weights(w3[g], channels) for g in range(w3.shape[0])])


def direct_grouped_pointwise_plan(x_shape, m, group, strides, out_spatial, dtype):
    """conv.py's compute(x, w, out, scratch, bias=None, relu=False, residual=None) for a
    grouped 1x1 convolution of float32 maps of DIRECT_MIN_PIXELS or more (more than
    one output channel a group) through the direct kernel: per image, one call of
    stem_conv._stem_rows with a row of P outputs per group; None elsewhere. The
    weights are packed once per weight array. conv_nchw has made x float32, w
    C-contiguous float32, out's images and the residual C-contiguous of the plan's
    shapes; the bias's length is checked here (the kernel reads M values)."""
    n, c = x_shape[:2]
    p = math.prod(out_spatial)
    if (np.dtype(dtype) != np.float32 or group < 2 or m // group == 1 or p < max(2, DIRECT_MIN_PIXELS)
            or gemm_entry(dtype) is None):
        return None
    mg, k_in = m // group, c // group
    sub = None if all(s == 1 for s in strides) else \
        (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    offsets = _row_offsets(k_in, p)
    lanes = row_lanes(p)
    # 8-channel blocks where registers are 16 lanes (stem_conv._stem_rows_wide)
    channels = block_channels(mg)
    packed = DerivedWeights(lambda w: _pack_groups(w.reshape(group, mg, k_in), channels))
    work = mg * k_in * p

    def setup():
        blocks = team_blocks(group, work)
        return blocks, rows_kernel(channels, blocks)
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        if sub is not None:
            x = x[sub]
        wpack = packed(w)
        b = bias_values(bias, np.float32)
        if bias is not None and b.size != m:
            raise ValueError("bias of %d values for %d output channels" % (b.size, m))
        blocks, kernel = per_team(setups, setup)
        for i in range(n):
            res = _NO_RESIDUAL if residual is None else residual[i].reshape(group, mg, p)
            kernel(np.ascontiguousarray(x[i]).reshape(group, k_in * p), offsets, wpack, b, bias is not None, res,
                   residual is not None, relu, out[i].reshape(group, mg, 1, p), p, blocks, lanes, 1, 1)
    compute.channels = channels
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute


def grouped_pointwise_product(m, group, out_spatial, dtype):
    """The product conv.py's pointwise plan runs per image, in team_gemm.gemm_into's
    argument order (w3, x3, out3, bias, residual, relu), for a grouped 1x1 convolution;
    None where this path does not cover the case (group 1, one output channel per
    group, a 1x1 map, a dtype without a direct BLAS entry)."""
    p = math.prod(out_spatial)
    # one output row or column per group is a matrix-vector product: team_gemm calls
    # GEMV there (OpenBLAS's GEMM is 2-3x slower on it)
    if group < 2 or m // group == 1 or p == 1 or gemm_entry(dtype) is None:
        return None
    def grouped_product(w3, x3, out3, bias, residual, relu):
        return grouped_pointwise(x3, w3, out3, bias, residual, relu)
    return grouped_product
