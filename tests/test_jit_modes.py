"""How kernels get machine code (kernels/cpu/runtime/jit.py): the NumPy twins agree with
the compiled kernels on every path that has one, the background mode answers first calls
with twins while a detached worker compiles into the user cache, and the cache lives
outside the install tree."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from caffe2py.kernels.cpu.cnn import conv as conv_k
from caffe2py.kernels.cpu.cnn import conv_transpose as conv_transpose_k
from caffe2py.kernels.cpu.cnn import pool as pool_k
from caffe2py.kernels.cpu.runtime import jit
from caffe2py.kernels.cpu.math import epilogue
from caffe2py.kernels.cpu.tensor import layout
from caffe2py.kernels.cpu.cnn import normalize as normalize_k
from caffe2py.kernels.cpu.math import reduce as reduce_k
from caffe2py.kernels.cpu.math.team_gemm import gemm_into

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (x shape, w shape, strides, pads, dilations, group): one geometry per conv path
CONVS = [
    ((2, 6, 7, 7), (5, 6, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),          # pointwise GEMM
    ((1, 16, 9, 9), (4, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),        # blocked direct (shift-add before)
    ((1, 128, 6, 6), (64, 128, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),     # blocked direct, chunks
    ((1, 32, 15, 15), (32, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),     # Winograd, fused chunks (> 14x14:
                                                                            # 16-lane CPUs run smaller maps blocked)
    ((1, 32, 30, 30), (40, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),     # Winograd F(4x4)
    ((1, 256, 6, 6), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),    # blocked direct, 9 chunks
    ((2, 8, 11, 11), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8),        # depthwise strided 3x3
    ((1, 8, 10, 10), (16, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 8),       # depthwise, multiplier 2
    ((1, 6, 9, 9), (12, 1, 3, 3), (2, 1), (0, 1, 2, 1), (1, 2), 6),         # depthwise strided, dilated
    ((1, 8, 20, 20), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8),       # depthwise rows kernel, serial
    ((2, 32, 40, 40), (32, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 32),    # depthwise rows kernel, team
    ((1, 4, 20, 20), (4, 1, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 4),       # depthwise phase-split, serial
    ((2, 32, 60, 60), (32, 1, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1), 32),    # depthwise phase-split, team
    ((1, 32, 60, 60), (16, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),     # direct: row phase copy on the team
    ((2, 24, 15, 15), (8, 24, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),      # blocked direct, stride 2
    ((2, 3, 15, 15), (8, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),        # flattened rows, short K
    ((2, 8, 9, 9), (6, 8, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),          # direct (short reduction), serial
    ((2, 3, 20, 60), (8, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),        # stem (3 channels), serial
    ((1, 3, 100, 122), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),    # stem, on the team
    ((1, 8, 40, 41), (9, 8, 3, 3), (2, 2), (1, 0, 0, 1), (1, 1), 1),        # direct, on the team
    ((1, 8, 9, 9), (8, 4, 3, 3), (1, 1), (1, 0, 1, 0), (1, 1), 2),          # flattened rows, grouped
    ((1, 4, 5, 6, 7), (3, 4, 2, 3, 2), (1, 2, 1), (0, 1, 0, 1, 0, 1), (1, 1, 2), 1),   # N-d im2col
]


# Paths the float32 CONVS above no longer reach now that float32 convs with C_in >= 16
# run on the blocked direct kernel (conv.blocked_direct_wins); drawn from their own
# generator so the values every later result reads stay what they were.
CONVS_BESIDE_BLOCKED = [
    ((1, 12, 9, 9), (4, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32),     # shift-add, fused rows
    ((1, 128, 6, 6), (64, 128, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float64),  # shift-add, tiles
    ((1, 240, 15, 15), (240, 240, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32),  # Winograd, gather/scatter
    ((2, 6, 15, 15), (8, 6, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, np.float32),     # flattened rows, fused
    ((1, 48, 7, 7), (20, 48, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32),    # blocked direct, 2 chunks
    ((1, 24, 64, 64), (8, 12, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2, np.float32),   # grouped taps on the team
]


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _everything():
    """Results of every kernel family with a twin, each on several paths."""
    rng = np.random.default_rng(7)
    out = []
    for x_shape, w_shape, strides, pads, dilations, group in CONVS:
        x, w, b = _rand(rng, *x_shape), _rand(rng, *w_shape), _rand(rng, w_shape[0])
        out.append(conv_k.conv_nchw(x, w, b, strides, pads, dilations, group, activation="relu"))
        out.append(conv_k.conv_nchw(x, w, None, strides, pads, dilations, group))
    # stems, grouped 1x1s and direct convs in 4- and 8-channel blocks (8 where registers
    # hold 16 lanes: forced here, as two AVX2 vectors on CPUs without AVX-512), serial and
    # on the team
    from caffe2py.kernels.cpu.cnn import direct_conv
    lanes_before = direct_conv.REGISTER_LANES
    direct_conv.REGISTER_LANES = 16
    conv_k._plan.cache_clear()
    try:
        for x_shape, w_shape, group in (((1, 3, 9, 60), (8, 3, 3, 3), 1), ((1, 3, 160, 160), (4, 3, 7, 7), 1),
                                        ((1, 3, 100, 122), (16, 3, 7, 7), 1), ((1, 8, 5, 5), (10, 4, 1, 1), 2),
                                        ((1, 8, 30, 30), (12, 2, 1, 1), 4)):
            x, w, b = _rand(rng, *x_shape), _rand(rng, *w_shape), _rand(rng, w_shape[0])
            pads = [w_shape[2] // 2] * 4
            strides = (2, 2) if group == 1 else (1, 1)
            out.append(conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), group, activation="relu"))
        for x_shape, w_shape in (((2, 8, 9, 9), (6, 8, 3, 3)), ((1, 8, 40, 41), (9, 8, 3, 3))):
            x, w, b = _rand(rng, *x_shape), _rand(rng, *w_shape), _rand(rng, w_shape[0])
            out.append(conv_k.conv_nchw(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), 1, activation="relu"))
    finally:
        direct_conv.REGISTER_LANES = lanes_before
        conv_k._plan.cache_clear()
    own = np.random.default_rng(71)
    for x_shape, w_shape, strides, pads, dilations, group, dtype in CONVS_BESIDE_BLOCKED:
        x, w, b = (_rand(own, *shape).astype(dtype) for shape in (x_shape, w_shape, w_shape[:1]))
        out.append(conv_k.conv_nchw(x, w, b, strides, pads, dilations, group, activation="relu"))
    x = _rand(rng, 2, 3, 17, 16)
    x[0, 1, 4, 5] = np.nan
    for kernel, strides, pads in (((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 2), (2, 2), (0, 0, 0, 0)),
                                  ((5, 4), (3, 2), (2, 1, 2, 1)), ((3, 3), (1, 1), (1, 1, 1, 1))):
        out.append(pool_k.max_pool(x, kernel, strides, pads))
        out.append(pool_k.average_pool(x, kernel, strides, pads, count_include_pad=False))
    out.append(pool_k.global_pool(_rand(rng, 4, 64, 9, 9), "avg"))
    # whole-plane stride-1 windows (_global_pool2d, on the team and serial); one-block
    # pools and conv copies run the kernels' serial copies
    for shape in ((4, 64, 13, 13), (1, 2, 5, 5)):
        g = _rand(rng, *shape)
        out.append(pool_k.average_pool(g, shape[2:], (1, 1), (0, 0, 0, 0)))
        out.append(pool_k.max_pool(g, shape[2:], (1, 1), (0, 0, 0, 0)))
    small = _rand(rng, 1, 2, 7, 7)
    out.append(pool_k.max_pool(small, (3, 3), (1, 1), (1, 1, 1, 1)))
    out.append(pool_k.average_pool(small, (3, 3), (2, 2), (1, 1, 1, 1)))
    out.append(conv_k.conv_nchw(small, _rand(rng, 3, 2, 3, 3), None, (1, 1), (1, 1, 1, 1), (1, 1), 1))
    out.append(conv_k.conv_nchw(small, _rand(rng, 2, 1, 3, 3), None, (2, 2), (1, 1, 1, 1), (1, 1), 2))
    # a depthwise conv reading its planes through a channel map (a folded shuffle)
    shuffled = _rand(rng, 1, 6, 7, 7)
    out.append(conv_k.conv_nchw(shuffled, _rand(rng, 6, 1, 3, 3), None, (1, 1), (1, 1, 1, 1), (1, 1), 6,
                                channel_map=np.arange(6).reshape(2, 3).T.reshape(6)))
    big = _rand(rng, 2, 32, 30, 30)           # work enough for several blocks: the team kernels
    out.append(pool_k.max_pool(big, (3, 3), (1, 1), (1, 1, 1, 1)))
    out.append(pool_k.average_pool(big, (3, 3), (1, 1), (1, 1, 1, 1)))     # stride-1 average on the team
    out.append(pool_k.average_pool(big, (3, 3), (2, 2), (1, 1, 1, 1)))
    out.append(pool_k.max_pool(big, (3, 3), (3, 3), (1, 1, 1, 1)))         # _strided_pool2d on the team
    # stride-1 pools whose output is smaller than the input (the padded-grid kernels;
    # "same"-size ones above run _same_pool2d), serial and on the team
    for g in (small, big):
        out.append(pool_k.average_pool(g, (2, 2), (2, 2), (1, 0, 1, 1), count_include_pad=True))   # _pool2x2s2
        out.append(pool_k.max_pool(g, (3, 3), (1, 1), (0, 0, 0, 0)))
        out.append(pool_k.average_pool(g, (3, 3), (1, 1), (0, 1, 0, 0), count_include_pad=True))
    # grouped 1x1 convs (grouped_pointwise.py) on BLAS (maps under 24 pixels, float64):
    # one block on the calling thread, and enough work for the team, strided, with bias and ReLU
    out.append(conv_k.conv_nchw(_rand(rng, 1, 8, 4, 5), _rand(rng, 8, 4, 1, 1), _rand(rng, 8), (1, 1),
                                (0, 0, 0, 0), (1, 1), 2, activation="relu"))
    out.append(conv_k.conv_nchw(_rand(rng, 1, 64, 80, 80).astype(np.float64),
                                _rand(rng, 64, 16, 1, 1).astype(np.float64), None, (2, 2), (0, 0, 0, 0), (1, 1), 4))
    # ... and through the direct kernel (float32 maps of 24 pixels or more): serial, on the team
    out.append(conv_k.conv_nchw(_rand(rng, 1, 8, 5, 5), _rand(rng, 6, 4, 1, 1), _rand(rng, 6), (1, 1),
                                (0, 0, 0, 0), (1, 1), 2, activation="relu"))
    out.append(conv_k.conv_nchw(_rand(rng, 1, 64, 30, 30), _rand(rng, 64, 16, 1, 1), None, (1, 1),
                                (0, 0, 0, 0), (1, 1), 4))
    wide = _rand(rng, 1, 64, 64, 64)
    out.append(conv_k.conv_nchw(wide, _rand(rng, 8, 64, 3, 3), None, (2, 2), (1, 1, 1, 1), (1, 1), 1))
    out.append(conv_k.conv_nchw(wide, _rand(rng, 8, 32, 3, 3), None, (2, 2), (1, 1, 1, 1), (1, 1), 2))
    y = _rand(rng, 2, 6, 5, 5)
    out.append(layout.concat([y, _rand(rng, 2, 3, 5, 5)], 1))
    for rows, blocks in ((5, 2), (1, 3)):        # the team copy by rows, and by columns of one row
        wide = np.zeros((rows, 11), np.float32)
        layout._copy_into(_rand(rng, rows, 7), wide[:, 2:9], blocks)
        out.append(wide)
    out.append(layout.channel_shuffle(y, 3))
    out.append(epilogue.channel_affine(y, _rand(rng, 6), _rand(rng, 6), relu=True))
    out.extend(_light_model_op_results(rng))
    out.append(epilogue.finish_channels(y.copy(), _rand(rng, 6), _rand(rng, 2, 6, 5, 5), relu=True))
    a, bm = _rand(rng, 3, 40, 30), _rand(rng, 3, 30, 20)
    out.append(gemm_into(a, bm, np.empty((3, 40, 20), np.float32), _rand(rng, 120), _rand(rng, 3, 40, 20), True))
    out.append(gemm_into(a[0, :1], bm[0], np.empty((1, 20), np.float32)))      # one row: GEMV
    # transposed convolutions: col2im with stride 1 and 2, crops, output padding, dilation, 1-D
    for x_shape, w_shape, strides, pads, dilations, group, adjs in (
            ((2, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 2, (1, 0)),
            ((1, 3, 4, 4), (3, 2, 2, 3), (1, 1), (0, 0, 0, 0), (2, 1), 1, (0, 0)),
            ((2, 2, 7), (2, 3, 4), (3,), (1, 2), (1,), 1, (2,))):
        x, w, b = _rand(rng, *x_shape), _rand(rng, *w_shape), _rand(rng, w_shape[1] * group)
        out.append(conv_transpose_k.conv_transpose(x, w, b, strides, pads, dilations, group, adjs))
    rows = _rand(rng, 33, 70)
    out.extend(normalize_k.layer_norm(rows, 1e-5))                              # Caffe2's LayerNorm rows
    out.extend(normalize_k.layer_norm(rows, 1e-3, _rand(rng, 70), _rand(rng, 70)))
    ties = np.round(_rand(rng, 40, 300))                                        # TopK rows with ties
    ties[3, 7] = np.nan
    out.extend(reduce_k.top_k(ties, 5, 1))
    return (out + _recsys_kernel_results(rng) + _pool_gradient_results(rng) + _sparse_update_results(rng)
            + _varint_results() + _lookup_results(rng) + _conversion_and_lstm_results(rng))


def _recsys_kernel_results(rng):
    """The segment, run-copy and 8-bit lookup kernels, serial and split into 2 blocks."""
    from caffe2py.kernels.cpu.recsys import ranges, rowwise8bit, segments as seg
    out = []
    data = _rand(rng, 12, 3)
    offsets = np.array([0, 3, 3, 7, 12], np.int64)
    idx, w, none = rng.integers(0, 12, 12), _rand(rng, 12), np.empty(0, np.int64)
    lowest = np.finfo(np.float32).min
    for mode in range(7):
        for src, weights in ((none, np.empty(0, np.float32)), (idx, w)):
            if mode > seg.MAX and src.size:
                continue                                   # range reducers read DATA in order
            serial, split = np.empty((4, 3), np.float32), np.empty((4, 3), np.float32)
            seg.REDUCE_SEGMENTS(data, offsets, src, weights, mode, lowest, serial, 0, 4)
            seg._reduce_runs(data, offsets, src, weights, mode, lowest, split, np.array([0, 2, 4]))
            out += [serial, split]
    ids = rng.integers(0, 5, 12)
    for fn, target, last in ((seg.SCATTER_COLUMNS, np.zeros((5, 3), np.float32), (0, 3)),
                             (seg.SCATTER_ENTRIES, np.zeros((5, 3), np.float32), (0, 12))):
        fn(data, idx, ids, w, target, *last)
        out.append(target)
    wide = np.zeros((5, 3), np.float32)
    seg._scatter_wide(data, none, ids, np.empty(0, np.float32), wide, 2)
    partial = np.zeros((2, 5, 3), np.float32)
    seg._scatter_narrow(data, idx, ids, w, partial)
    flat = np.zeros((5, 1), np.float32)
    seg.SCATTER_ENTRIES(data[:, :1].copy(), none, ids, np.empty(0, np.float32), flat, 0, 12)
    out += [wide, partial, flat, np.array(seg._min_max(rng.integers(-9, 9, 11)), np.float64)]
    src = np.arange(20, dtype=np.uint64)
    starts, lens, to = np.array([3, 0, 9, 15]), np.array([2, 0, 4, 5]), np.array([0, 2, 2, 6])
    for fn, extra in ((ranges.COPY_RUN_RANGE, (0, 4)), (ranges._copy_runs, (np.array([0, 2, 4]),))):
        dst = np.zeros(11, np.uint64)
        fn(src, starts, lens, dst, to, *extra)
        out.append(dst.astype(np.float64))
    codes = rng.integers(0, 256, (6, 4)).astype(np.uint8)
    scale_bias = _rand(rng, 6, 2)
    look = rng.integers(0, 6, 7)
    look_off = np.array([0, 2, 2, 7], np.int64)
    for mean in (False, True):
        a8, b8 = np.empty((3, 4), np.float32), np.empty((3, 4), np.float32)
        rowwise8bit.LOOKUP_SEGMENTS(codes, scale_bias, look, w[:7], look_off, mean, a8, 0, 3)
        rowwise8bit._lengths_rowwise8(codes, scale_bias, look, np.empty(0, np.float32), look_off, mean, b8,
                                      np.array([0, 1, 3]))
        out += [a8, b8]
    return out


def _pool_gradient_results(rng):
    """Max and average pool gradients (2-D float: the compiled loops): strides, pads,
    dilation, ceil mode, ties (every tied cell gets the gradient), NaN, float64."""
    from caffe2py.kernels.cpu.cnn import pool_grad
    out = []
    x = np.round(_rand(rng, 2, 3, 11, 10) * 2)              # small integers: ties in windows
    x[1, 2, 4, 5] = np.nan
    for kernel, strides, pads, dilations, ceil in (
            ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False), ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True),
            ((5, 4), (3, 2), (2, 1, 2, 1), (1, 1), False), ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
            ((3, 2), (1, 1), (2, 0, 2, 0), (2, 3), False)):
        y = pool_k.max_pool(x, kernel, strides, pads, dilations, ceil)
        dy = _rand(rng, *y.shape)
        out.append(pool_grad.max_pool_backward(x, y, dy, kernel, strides, pads, dilations, ceil))
        if dilations == (1, 1):
            for include in (False, True):
                out.append(pool_grad.average_pool_backward(x.shape, dy, kernel, strides, pads, include, ceil))
    x64 = x.astype(np.float64)
    y64 = pool_k.max_pool(x64, (2, 3), (2, 2), (0, 1, 0, 1))
    dy64 = rng.standard_normal(y64.shape)
    out.append(pool_grad.max_pool_backward(x64, y64, dy64, (2, 3), (2, 2), (0, 1, 0, 1), (1, 1), False))
    out.append(pool_grad.average_pool_backward(x64.shape, dy64, (2, 3), (2, 2), (0, 1, 0, 1), False, False))
    return out


def _sparse_update_results(rng):
    """The in-place row updates (kernels/cpu/optim/sparse.py), through the serial copies
    these small updates take (one owner block) and again through the parallel kernels."""
    from caffe2py.kernels.cpu.optim import sparse as S
    out = _sparse_update_calls(rng)
    launch = S._launch
    S._launch = lambda kernel, blocks: kernel
    try:
        return out + _sparse_update_calls(rng)
    finally:
        S._launch = launch


def _sparse_update_calls(rng):
    """Every array the updates write (tables, moments, undo buffers, returned steps),
    with repeated rows (processed in order: the second update starts from the first's
    result), no indices, int32 indices, a NaN gradient, with and without undo buffers,
    and split over 3 owners."""
    from caffe2py.kernels.cpu.optim import sparse as S
    f = np.float32
    out = []
    cases = [np.array([3, 0, 3, 5, 3, 1], np.int64), np.empty(0, np.int64), np.array([4, 2, 4], np.int32),
             np.array([0, 1, 2, 3, 4, 5, 6], np.int64)]
    for case, indices in enumerate(cases):
        n, d = indices.size, 4
        grad = _rand(rng, n, d)
        if case == 3:
            grad[2, 1] = np.nan
        for save in (False, True):
            def table(rows=7, cols=d):
                return _rand(rng, rows, cols) if cols else np.abs(_rand(rng, rows))

            def buffers(*widths):
                return tuple(np.zeros((n, w), f) if w else np.zeros(n, f) for w in widths) if save else None
            p, h = table(), np.abs(table())
            saved = buffers(d, d)
            S.sparse_adagrad(p, h, indices, grad, f(0.1), f(1e-5), f(0.01), saved)
            out += [p, h, *(saved or ())]
            p, h = table(), np.abs(table(cols=0))
            saved = buffers(d, 0)
            S.rowwise_sparse_adagrad(p, h, indices, grad, f(0.1), f(1e-5), f(0.0), saved)
            out += [p, h, *(saved or ())]
            for rowwise in (False, True):
                adam = S.rowwise_sparse_adam if rowwise else S.sparse_adam
                for with_grad in (False, True):
                    p, m1, m2 = table(), table(), np.abs(table(cols=0 if rowwise else d))
                    saved = buffers(d, d, 0 if rowwise else d)
                    steps = np.zeros((n, d), f) if with_grad else None
                    adam(p, m1, m2, indices, grad, f(0.01), f(0.9), f(0.9), f(0.999), f(1e-8), steps, saved)
                    out += [p, m1, m2, *(saved or ()), *([steps] if with_grad else [])]
            for nesterov in (False, True):
                p, m = table(), table()
                saved = buffers(d, d)
                out += [S.sparse_momentum_sgd(p, m, indices, grad, f(0.1), f(0.9), nesterov, saved), p, m,
                        *(saved or ())]
            t = table()
            saved = buffers(d)
            S.scatter_weighted_sum(t, indices, f(0.5), [(grad, f(2.0)), (grad * 3, f(-1.0))],
                                   saved[0] if save else None)
            out += [t, *(saved or ())]
        # owners split 3 ways with one-row chunks: duplicates still in order
        p, h = table(), np.abs(table())
        sw, sh = np.zeros((n, d), f), np.zeros((n, d), f)
        S._sparse_adagrad(p, h, indices, grad, f(0.1), f(1e-5), f(0.0), sw, sh, True, 1, 3)
        t = table()
        st = np.zeros((n, d), f)
        S._axpy_rows(t, indices, grad, f(0.5), st, True, 1, 3)
        out += [p, h, sw, sh, t, st]
    return out


def _varint_results():
    """Protobuf varints: one to ten bytes, negatives as ten, no values."""
    from caffe2py.kernels.cpu.io import varint
    values = np.array([0, 1, 127, 128, 300, 16383, 16384, -1, -300, 2 ** 63 - 1, -2 ** 63], np.int64)
    return [np.frombuffer(varint.encode(v), np.uint8) for v in (values, values[:1], values[7:8])] + [
        np.frombuffer(varint.encode(np.empty(0, np.int32)), np.uint8)]


def _lookup_results(rng):
    """Embedding lookups (recsys/lookup_loops.py): float32, float16, reversed and
    column-sliced tables, fused 8/4/2-bit rows; no weights, per-index and positional
    weights, mean, empty bags; cut bags merged; the index and offset checks."""
    from caffe2py.kernels.cpu.recsys import lookup_loops as loops, sparse_lengths as SL
    out = []
    f32 = _rand(rng, 30, 37)
    idx, w = rng.integers(0, 30, 25), _rand(rng, 25)
    lengths = np.array([3, 0, 7, 1, 0, 14, 0])
    codes = rng.integers(0, 256, (30, 20)).astype(np.uint8)
    sb16 = _rand(rng, 30, 2).astype(np.float16).view(np.uint8)
    tables = [(f32, "float"), (f32.astype(np.float16), "float"), (f32[::-1], "float"), (f32[:, 1:34], "float"),
              (np.concatenate([codes, _rand(rng, 30, 2).view(np.uint8)], 1), "fused8"),
              (np.concatenate([codes[:, :6], sb16], 1), "fused4"), (np.concatenate([codes[:, :3], sb16], 1), "fused2")]
    for data, layout in tables:
        for weights, positional, mean in ((None, False, True), (w, False, False), (w[:14], True, True)):
            out.append(SL.segment_reduce(data, idx, lengths, weights, positional, mean, layout))
    out.append(SL.offsets_reduce(f32, idx, np.array([5, 9, 9, 30]), True, None, False, True, "float"))
    # values of a row not contiguous: the checked path (serial copies), not lookup_one_part
    out.append(SL.segment_reduce(np.asfortranarray(f32), idx, lengths, w, False, False, "float"))
    # big enough to split in 2 parts (the parallel kernels; the calls above run the serial copies)
    many = rng.integers(0, 30, SL._PARALLEL_MIN_VALUES // 37 + 40)
    out.append(SL.segment_reduce(f32, many, np.array([many.size - 40, 40]), None, False, False, "float", threads=2))
    # cut bags: pieces in part order (head of part t, tail of part t, ...), -1 for none
    for mean in (False, True):
        merged = _rand(rng, 7, 37)
        loops.merge_partials(merged, np.array([0, 3, 3, 10, 11, 11, 25, 25]), mean, _rand(rng, 6, 37),
                             np.array([[-1, 2], [2, 5], [5, -1]], np.int64))
        out.append(merged)
    bad = np.array([0, 4, 2, 9, -1, 3, 12, 5], np.int64)
    for values, parts in ((bad, 3), (bad[:4], 2), (np.empty(0, np.int64), 1)):
        found = np.zeros(parts, np.int64)
        out += [np.array(loops.first_bad_index(values, 6, parts, found)), found]
    for values in (np.array([2, 0, 5], np.int32), np.array([2, -1, 5]), np.empty(0, np.int64)):
        offs = np.zeros(values.size + 1, np.int64)
        out += [np.array(loops.offsets_of_lengths(values, offs)), offs]
    for raw, extra in ((np.array([4, 4, 9, 12], np.int64), 0), (np.array([4, 6, 5, 8], np.int32), 1)):
        rel = np.zeros(raw.size + extra, np.int64)
        out += [np.array(loops.relative_offsets(raw, rel)), rel]
    return out


def _conversion_and_lstm_results(rng):
    """Fused rowwise quantisation both ways (8-bit with float32 or float16 scale/bias,
    4- and 2-bit packing with a partial last byte, float16 sources, rows narrower than
    one vector, inf, a NaN row: its scale and bias only), float <-> half casts
    (overflow to inf, NaN), and the LSTM unit forward and backward (scalar and vector
    widths, sequence lengths, drop_states, float16)."""
    from caffe2py.kernels.cpu.recsys import fused_rowwise as fr
    from caffe2py.kernels.cpu.rnn import lstm
    out = []
    for d in (13, 5, 3):
        x = _rand(rng, 6, d) * 4
        x[2, 1] = np.inf
        x[3] = 7.5                                          # constant row: span 0
        for src in (x, x.astype(np.float16)):
            q8 = fr.float_to_fused8(src)
            out += [q8[[0, 1, 3, 4, 5], :d], q8[:, d:].copy().view(np.float32)]
            out += [fr.fused8_to_float(q8[[0, 1, 3, 4, 5]], dtype) for dtype in (np.float32, np.float16)]
            for bits in (8, 4, 2):
                q = fr.float_to_fused_nbit(src, bits)
                nbytes = q.shape[1] - 4
                out += [q[[0, 1, 3, 4, 5], :nbytes], q[:, nbytes:].copy().view(np.float16).astype(np.float32)]
                out += [fr.fused_nbit_to_float(q[[0, 1, 3, 4, 5]], bits, dtype) for dtype in (np.float32, np.float16)]
    nan_row = _rand(rng, 2, 9)
    nan_row[1, 4] = np.nan
    for q in (fr.float_to_fused8(nan_row), fr.float_to_fused_nbit(nan_row, 4)):
        tail = q[:, -8:].copy().view(np.float32) if q.shape[1] == 17 else q[:, -4:].copy().view(np.float16)
        out += [q[0], tail.astype(np.float32)]
    big = np.concatenate([_rand(rng, 4101) * 1e4, np.array([np.nan, np.inf, 1e6, -7e4], np.float32)])
    out += [fr.float_to_half(big), fr.half_to_float(fr.float_to_half(big)), fr.float_to_half(big[:5])]
    for n, d in ((5, 3), (6, 13)):
        h_prev, c_prev, gates = _rand(rng, 1, n, d), _rand(rng, 1, n, d), _rand(rng, 1, n, 4 * d) * 3
        dc, dh = _rand(rng, 1, n, d), _rand(rng, 1, n, d)
        seq = np.array([3, 1, 4, 2, 5, 0][:n], np.int32)
        for dtype in (np.float32, np.float16):
            hp, cp, g = (a.astype(dtype) for a in (h_prev, c_prev, gates))
            for seq_lengths, drop in ((None, False), (seq, False), (seq, True)):
                h, c = lstm.lstm_unit(hp, cp, g, seq_lengths, 2, 0.5, drop)
                grads = lstm.lstm_unit_gradient(cp, g, c, h, dc.astype(dtype), dh.astype(dtype), seq_lengths, 2,
                                                 0.5, drop)
                out += [h, c, *grads]
    return out


TWINS_TESTED_ELSEWHERE = (
    "test_kernel_replay",                           # its test ops' kernels, twins checked there
    "caffe2py.kernels.cpu.detection.boxes",         # tests/test_detection_image_ops.py
    "caffe2py.kernels.cpu.detection.image_ops",
    "caffe2py.kernels.cpu.detection.nms",
    "caffe2py.kernels.cpu.detection.proposals",
    "caffe2py.kernels.cpu.detection.roi_align",
    "caffe2py.kernels.cpu.detection.roi_pool",
    "caffe2py.kernels.cpu.optim.dense_updates",     # tests/test_optim_extra_ops.py
    "caffe2py.kernels.cpu.optim.ftrl",
    "caffe2py.kernels.cpu.optim.sparse_normalize",
    "caffe2py.kernels.cpu.optim.yellowfin",
    "caffe2py.kernels.cpu.onnx_ml.trees",      # tests/test_onnx_ml_trees.py
    "caffe2py.kernels.cpu.detection.ps_roi_pool",   # tests/test_detectron_ops.py
    "caffe2py.kernels.cpu.cnn.panel_conv",          # tests/test_panel_conv.py (reached here on AVX-512 CPUs only)
    "caffe2py.kernels.cpu.cnn.pointwise_conv",      # tests/test_pointwise_conv.py (the same)
    "caffe2py.kernels.cpu.io.image_transforms",     # tests/test_image_input.py
    "caffe2py.kernels.cpu.optim.lp_regularizer",    # tests/test_caffe2_optim_extra2.py
    "caffe2py.kernels.cpu.optim.row_updates",       # tests/test_caffe2_optim_extra2.py
    "caffe2py.kernels.cpu.quant.",                  # tests/test_int8_ops.py (the Int8 GEMM twins)
    "caffe2py.kernels.cpu.quant.int8_conv",    # tests/test_int8_ops.py
    "caffe2py.kernels.cpu.rnn.fused_",         # tests/test_rnn_fused.py (fused_lstm, fused_gru)
    "caffe2py.kernels.cpu.math.packed_gemm",   # tests/test_packed_gemm.py
)

@pytest.fixture
def restore_mode():
    before = jit.jit_mode()
    yield
    jit.set_jit_mode(before)


def test_numpy_twins_agree_with_the_compiled_kernels_on_every_path(restore_mode):
    jit.set_jit_mode("inline")
    compiled = _everything()
    # every twin loaded so far, but for the families with their own twin tests (other
    # test files may have imported them before this one runs)
    twins = [k for k in jit._all_kernels
             if k.twin is not None and not k.py_func.__module__.startswith(TWINS_TESTED_ELSEWHERE)]
    used = {}

    def spy(kernel, twin):
        def call(*args):
            used[kernel.__name__] = used.get(kernel.__name__, 0) + 1
            return twin(*args)
        return call
    originals = {k: k.twin for k in twins}
    try:
        for k in twins:
            k.twin = spy(k, originals[k])
        jit.set_jit_mode("numpy")
        from_twins = _everything()
    finally:
        for k, twin in originals.items():
            k.twin = twin
    assert len(compiled) == len(from_twins)
    for i, (c, t) in enumerate(zip(compiled, from_twins)):
        assert c.shape == t.shape and c.dtype == t.dtype, i
        # different summation orders (Winograd's transforms most of all): float32 rounding
        # (inf and NaN must match exactly; the tolerance scales with the finite values)
        finite = np.abs(c[np.isfinite(c)]).astype(np.float64)
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(t, c, rtol=1e-4, atol=2e-5 * scale, err_msg="result %d" % i)
    unreached = sorted({k.__name__ for k in twins} - set(used))
    assert not unreached, "twins this test does not reach: %s" % unreached


def test_a_serial_copy_answers_with_its_kernels_twin_even_one_attached_later(restore_mode, monkeypatch):
    from caffe2py.kernels.cpu.math import team_gemm
    serial = team_gemm._gemm_blocks_serial
    assert serial.py_func.__name__ == "_gemm_blocks_serial" and "parallel" not in serial._options
    assert serial.twin is team_gemm._gemm_blocks.twin is not None
    calls = []
    monkeypatch.setattr(team_gemm._gemm_blocks, "twin", lambda *args: calls.append(len(args)))
    jit.set_jit_mode("numpy")
    serial(*range(21))
    assert calls == [21]


def _run(code, env, timeout=300):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=str(ROOT))


SCRIPT = """
    import numpy as np
    from caffe2py.kernels.cpu.tensor import layout
    from caffe2py.kernels.cpu.runtime import jit
    x = np.arange(24, dtype=np.float32).reshape(1, 6, 2, 2)
    shuffled = x.reshape(1, 2, 3, 2, 2).transpose(0, 2, 1, 3, 4).reshape(1, 6, 2, 2)
    with jit.team():
        y = layout.channel_shuffle(x, 2)
    assert np.array_equal(y, shuffled)
    print("ready" if layout._shuffle_planes.ready() else "twin")
    if WAIT:
        assert jit.wait_for_kernels(timeout=240)
        print("ready" if layout._shuffle_planes.ready() else "twin")
        assert np.array_equal(layout.channel_shuffle(x, 2), shuffled)
"""


def test_background_mode_answers_with_the_twin_and_compiles_into_the_user_cache(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, CAFFE2PY_JIT="background", CAFFE2PY_CACHE=str(cache))
    env.pop("CAFFE2PY_QUIET", None)
    first = _run(SCRIPT.replace("WAIT", "True"), env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["twin", "ready"]    # first call on NumPy, machine code after the wait
    compiled = [n for n in os.listdir(cache / "numba") if n.startswith("caffe2py.kernels.cpu.tensor.layout-")]
    assert compiled and any(f.endswith(".nbi") for f in os.listdir(cache / "numba" / compiled[0]))
    again = _run(SCRIPT.replace("WAIT", "False"), env)  # a new process loads it from the cache
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["ready"]
    assert "compiling" not in again.stderr


def test_background_notice_once_on_stderr_and_silent_when_quiet(tmp_path):
    env = dict(os.environ, CAFFE2PY_JIT="background", CAFFE2PY_CACHE=str(tmp_path / "cache"))
    env.pop("CAFFE2PY_QUIET", None)
    code = """
        import json, os
        from caffe2py.kernels.cpu.runtime import background
        os.makedirs(os.path.dirname(background._stats_path()), exist_ok=True)
        # a one-block pool runs the kernel's serial copy
        json.dump({"caffe2py.kernels.cpu.cnn.pool._strided_pool2d_serial": 5.0}, open(background._stats_path(), "w"))
        import numpy as np
        from caffe2py.kernels.cpu.cnn import pool
        from caffe2py.kernels.cpu.runtime import jit
        x = np.ones((1, 2, 9, 9), np.float64)
        for _ in range(3):
            with jit.team():    # float64 3x3/s2: the general strided kernel (float32 and 2x2/s2 have their own)
                y = pool.max_pool(x, (3, 3), (2, 2), (0, 0, 0, 0))
        print(y.shape)
    """
    loud = _run(code, env)
    assert loud.returncode == 0, loud.stderr
    notices = [line for line in loud.stderr.splitlines() if line.startswith("caffe2py: compiling")]
    assert len(notices) == 1 and "in the background" in notices[0] and "~5 s" in notices[0]
    quiet = _run(code, dict(env, CAFFE2PY_QUIET="1", CAFFE2PY_CACHE=str(tmp_path / "cache2")))
    assert quiet.returncode == 0 and "compiling" not in quiet.stderr


def _numba_files_in_tree():
    return {os.path.join(d, f) for d, _, files in os.walk(os.path.join(ROOT, "kernels"))
            for f in files if f.endswith((".nbi", ".nbc"))}


def test_inline_mode_compiles_into_the_user_cache_not_the_package(tmp_path):
    before = _numba_files_in_tree()
    env = dict(os.environ, CAFFE2PY_JIT="inline", CAFFE2PY_CACHE=str(tmp_path / "cache"))
    done = _run(SCRIPT.replace("WAIT", "False"), env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ready"]
    assert os.listdir(tmp_path / "cache" / "numba")
    assert _numba_files_in_tree() - before == set()


def test_bad_jit_mode_is_refused(restore_mode):
    with pytest.raises(ValueError, match="mode must be one of"):
        jit.set_jit_mode("eager")


def test_cache_command_reports_and_clears(tmp_path, capsys, monkeypatch):
    from caffe2py.cli import main
    monkeypatch.setenv("CAFFE2PY_CACHE", str(tmp_path / "c"))
    os.makedirs(tmp_path / "c" / "numba" / "caffe2py.kernels.cpu.x-0123", exist_ok=True)
    (tmp_path / "c" / "numba" / "caffe2py.kernels.cpu.x-0123" / "k.nbc").write_bytes(b"x" * 1000)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "c") in out and "compiled kernel modules: 1" in out and "1 files" in out
    assert main(["cache", "clear"]) == 0
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def _can_build_wheels_here():
    import importlib.util
    try:
        import setuptools
        version = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
    except (ImportError, ValueError):
        return False
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


def test_install_run_uninstall_leaves_nothing_in_site_packages(tmp_path):
    """A regular install compiles its kernels into the user cache; after uninstalling,
    site-packages holds nothing of caffe2py (pip would leave cache files behind)."""
    import site
    import sysconfig
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # the running interpreter's packages (numpy, numba, pip, setuptools) without its caffe2py
    # (an editable install's import hook is a .pth file, which the child does not run)
    parents = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] + sys.path
               if os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages")]
    with open(os.path.join(purelib, "_parent.pth"), "w") as fh:
        fh.write("\n".join(dict.fromkeys(parents)) + "\n")
    env = dict(os.environ, CAFFE2PY_CACHE=str(tmp_path / "cache"), CAFFE2PY_JIT="inline", PIP_NO_INPUT="1")
    # Without build isolation only when this interpreter can build the wheel itself
    # (setuptools before 70.1 needs the separate wheel package); else pip fetches them.
    isolation = ["--no-build-isolation"] if _can_build_wheels_here() else []
    install = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", *isolation, ROOT],
                             capture_output=True, text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert install.returncode == 0, install.stderr
    code = textwrap.dedent(SCRIPT.replace("WAIT", "False")) + "import caffe2py; print(caffe2py.__file__)\n"
    ran = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[-1].startswith(purelib)
    uninstall = subprocess.run([py, "-m", "pip", "uninstall", "-y", "caffe2py"], capture_output=True,
                               text=True, env=env, timeout=300, cwd=str(tmp_path))
    assert uninstall.returncode == 0, uninstall.stderr
    left = [n for n in os.listdir(purelib) if n.lower().startswith("caffe2py")]
    assert left == []
    assert os.listdir(tmp_path / "cache" / "numba")


def test_every_kernel_called_from_python_has_a_numpy_twin():
    """A compiled kernel without a twin makes a user's first run wait for numba (seconds
    per kernel). Only serial callees, linked into their callers' machine code, need
    none: every kernel without a twin must be called by another kernel (of any module:
    the names a kernel reads resolve in its own module's namespace)."""
    import importlib
    import pkgutil

    import caffe2py.kernels.cpu as cpu
    for info in pkgutil.walk_packages(cpu.__path__, cpu.__name__ + "."):
        importlib.import_module(info.name)
    called = set()
    for k in jit._all_kernels:
        for name in k.py_func.__code__.co_names:
            # a CompiledKernel, or the numba dispatcher compiling put in its place
            callee = getattr(k.py_func.__globals__.get(name), "py_func", None)
            if callee is not None and callee is not k.py_func:
                called.add(callee)
    lacking = [k.py_func.__module__ + "." + k.__name__ for k in jit._all_kernels
               if k.twin is None and k.py_func not in called]
    assert lacking == [], "compiled kernels without a NumPy twin (@kernel.numpy_twin): %s" % lacking


def _varint_reference(value):
    v = int(value) & (2 ** 64 - 1)             # negatives: 64-bit two's complement
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_pool_gradient_and_varint_twins_match_independent_references(restore_mode):
    """The twins alone (numpy mode) against torch's pooling gradients (distinct values,
    so max pooling has no ties) and protobuf's varint rule written out."""
    from caffe2py.kernels.cpu.cnn import pool_grad
    from caffe2py.kernels.cpu.io import varint
    jit.set_jit_mode("numpy")
    values = [0, 1, 127, 128, 300, 2 ** 35 + 5, -1, -2 ** 63]
    assert varint.encode(np.array(values, np.int64)) == b"".join(_varint_reference(v) for v in values)
    assert not varint._encode.ready()
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x = rng.permutation(2 * 3 * 11 * 10).astype(np.float32).reshape(2, 3, 11, 10)
    for kernel, strides, pads, dilations in (((3, 3), (2, 2), (1, 1), (1, 1)), ((2, 3), (1, 2), (1, 0), (2, 1))):
        xt = torch.tensor(x, requires_grad=True)
        yt = F.max_pool2d(xt, kernel, strides, pads, dilations)
        dy = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
        yt.backward(torch.tensor(dy))
        got = pool_grad.max_pool_backward(x, yt.detach().numpy(), dy, kernel, strides, pads * 2, dilations, False)
        np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
        if dilations == (1, 1):
            for include in (False, True):
                xt = torch.tensor(x, requires_grad=True)
                F.avg_pool2d(xt, kernel, strides, pads, count_include_pad=include).backward(torch.tensor(dy))
                got = pool_grad.average_pool_backward(x.shape, dy, kernel, strides, pads * 2, include, False)
                np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert not pool_grad._max_pool2d_backward.ready() and not pool_grad._average_pool2d_backward.ready()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scheduling classes and sessions as Linux has them")
def test_background_workers_yield_the_cpu_to_the_caller_and_stay_in_its_session(tmp_path, monkeypatch):
    # Linux's autogroup scheduler weighs sessions before niceness: a worker in a session of
    # its own took a whole core from the cold run it was speeding up.
    from caffe2py.kernels.cpu.runtime import background
    monkeypatch.setenv("CAFFE2PY_CACHE", str(tmp_path / "cache"))
    workers = background.start_workers()
    assert workers
    try:
        for proc in workers:
            # idle-priority workers may wait long for a core on a loaded machine
            deadline = time.monotonic() + 120
            while os.getpriority(os.PRIO_PROCESS, proc.pid) != 19 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 19
            assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
            assert os.getsid(proc.pid) == os.getsid(0)          # the caller's autogroup
            assert os.getpgid(proc.pid) == proc.pid             # but not its terminal's Ctrl-C
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:                      # the worker locks its slot once it runs
            probe = background._try_lock(background._slot_path(0))
            if probe is None:
                break
            probe.close()
            time.sleep(0.02)
        assert background.start_workers() == []                 # slots taken: nothing new
    finally:
        for proc in workers:
            proc.wait(timeout=60)                               # idle workers exit on their own


@pytest.mark.parametrize("cpus, workers", [(1, 1), (2, 1), (3, 2), (16, 4)])
def test_background_leaves_one_cpu_to_the_caller(monkeypatch, cpus, workers):
    from caffe2py.kernels.cpu.runtime import background
    monkeypatch.setattr(background.os, "cpu_count", lambda: cpus)
    assert background._worker_count() == workers


def test_a_process_whose_workers_are_starved_compiles_the_kernel_itself(tmp_path):
    # idle-priority workers get no CPU while a job keeps every core busy: such a job must
    # not stay on the NumPy twin to its end
    env = dict(os.environ, CAFFE2PY_JIT="background", CAFFE2PY_CACHE=str(tmp_path / "cache"), CAFFE2PY_QUIET="1")
    code = """
        import time
        import numpy as np
        from caffe2py.kernels.cpu.runtime import background, jit
        background.start_workers = lambda: []          # no worker ever claims the job
        jit._COMPILE_HERE_AFTER = 0.5
        from caffe2py.kernels.cpu.tensor import layout
        x = np.arange(24, dtype=np.float32).reshape(1, 6, 2, 2)
        shuffled = x.reshape(1, 2, 3, 2, 2).transpose(0, 2, 1, 3, 4).reshape(1, 6, 2, 2)
        states = []
        end = time.monotonic() + 60
        while not (states and states[-1]) and time.monotonic() < end:
            with jit.team():
                assert np.array_equal(layout.channel_shuffle(x, 2), shuffled)
            states.append(layout._shuffle_planes.ready())
            time.sleep(0.05)
        print(states[0], states[-1], len(states) > 5)
    """
    done = _run(code, env)
    assert done.returncode == 0, done.stderr
    # the twin first, for the wait (0.5 s at 0.05 s a call), then machine code
    assert done.stdout.split() == ["False", "True", "True"]


def _light_model_op_results(rng):
    """Inference batch norm (+ ReLU), softmax rows, the output passes and the global
    mean, each serial (one block) and on the team."""
    from caffe2py.kernels.cpu.cnn import norm as norm_k
    from caffe2py.kernels.cpu.math.softmax_rows import softmax_rows
    out = [softmax_rows(_rand(rng, 1, 1000)), softmax_rows(_rand(rng, 300, 200))]
    big = _rand(rng, 1, 64, 32, 32)
    out.append(epilogue.channel_affine(big, _rand(rng, 64), _rand(rng, 64), relu=True))
    out.append(epilogue.finish_channels(big.copy(), _rand(rng, 64), _rand(rng, 1, 64, 32, 32), relu=True))
    for rows, length in ((3, 36), (64, 1024)):
        dst = np.zeros((rows, 4, 7), np.float32)
        epilogue.finish_rows_into(_rand(rng, rows, length), length // 4, _rand(rng, rows), dst, 0, True)
        out.append(dst)
    out.append(pool_k.global_pool(_rand(rng, 2, 64, 20, 20), "avg"))
    for shape in ((2, 6, 5, 5), (1, 64, 32, 32)):
        x = _rand(rng, *shape)
        c = shape[1]
        stats = [_rand(rng, c) for _ in range(3)] + [np.abs(_rand(rng, c)) + 0.1]
        out.append(norm_k.batch_norm(x, *stats, 1e-5, relu=True))
        out.append(norm_k.batch_norm(x, *stats, 1e-3))
        # LRN: the scale output too, beta 0.75 (square roots) and another (a power)
        out.extend(norm_k.lrn(x, 5, 1e-3, 0.75, 1.5, return_scale=True))
        out.append(norm_k.lrn(x, 4, 1e-2, 0.6, 2.0))
    return out


def test_kernels_waiting_says_whether_a_background_compile_is_pending(monkeypatch):
    """parallel_executor's trial does not time runs while it says so (a kernel waiting for
    its background compile runs as its NumPy twin)."""
    class Queued:
        _waiting = ["sig", 0.0, 0.0]
    kernel = Queued()
    monkeypatch.setattr(jit, "_queued", [kernel])
    assert jit.kernels_waiting()
    kernel._waiting = None            # machine code loaded
    assert not jit.kernels_waiting()
    monkeypatch.setattr(jit, "_queued", [])
    assert not jit.kernels_waiting()


THREAD_ID_SCRIPT = """
    import numpy as np
    from caffe2py.kernels.cpu.cnn import conv
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    # one thread: the stride-2 depthwise kernel's serial copy, which reads get_thread_id()
    y = conv.conv_nchw(x, w, None, [2, 2], [1, 1, 1, 1], [1, 1], 16)
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    want = sum(w[:, 0, a, b].reshape(16, 1, 1) * padded[:, a:a + 31:2, b:b + 31:2]
               for a in range(3) for b in range(3))
    print("ok" if np.allclose(y[0], want, rtol=1e-4, atol=1e-4) else "wrong")
"""


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_serial_kernel_reading_thread_id_runs_from_the_disk_cache(tmp_path, mode):
    """Machine code of a serial kernel that calls numba.get_thread_id(), loaded from the
    cache in a process whose threading layer had not started, called a null pointer."""
    env = dict(os.environ, CAFFE2PY_JIT="inline", CAFFE2PY_CACHE=str(tmp_path / "cache"), CAFFE2PY_NUM_THREADS="1")
    first = _run(THREAD_ID_SCRIPT, env)
    assert first.returncode == 0 and first.stdout.split() == ["ok"], first.stderr
    again = _run(THREAD_ID_SCRIPT, dict(env, CAFFE2PY_JIT=mode))      # loads it from the cache
    assert again.returncode == 0, "returncode %d: %s" % (again.returncode, again.stderr[-2000:])
    assert again.stdout.split() == ["ok"]
