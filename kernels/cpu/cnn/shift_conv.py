"""Stride-1 2-D convolution as one GEMM per row tile plus a compiled shift-add.

Public:
    shift_plan(x_shape, w_shape, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False), or None when the kernel
        does not cover the case (float32/float64, group 1, non-negative pads).

With the input padded and each channel's rows flattened (row length wp), kernel tap
(ky, kx) of output (y, x) reads flat position (y * wp + x) + ky * dh * wp + kx * dw:
the same position shifted by a constant per tap. So

    Z = W_taps (taps * M, C) @ X_flat (C, L)       one GEMM, no im2col copy
    Y[m, p] = bias[m] + sum over taps t of Z[t, m, p + offset_t]

and the sum is one compiled pass that reads each Z value once (then drops the columns
past each row's end and applies ReLU). The GEMM has the same multiply count as
im2col's (M, taps * C) @ (taps * C, L) but taps times more rows and no copy of the
input taps times over; that wins when outputs are fewer than inputs or the map is
small (DenseNet's 128 -> 32 3x3: 28x28 1.37 -> 0.55 ms, 7x7 0.15 -> 0.06 ms against
the tap-stack path). Output rows are tiled so a tile's Z stays cache-sized.
"""
import numpy as np

from ..runtime.blas import gemm_entry
from ..runtime.buffers import team_work
from ..runtime.packed_weights import DerivedWeights
from ..math.epilogue import bias_values
from ..runtime.jit import call_gemm, compiled, prange, team, team_blocks, team_size, thread_id
from ..tensor.layout import copy_planes
from ..math.team_gemm import gemm_into

# Z tiles are kept around this size so the shift-add reads them from cache.
_Z_TILE_BYTES = 1 << 20
# Per layer, 2-CPU Zen 5 VM, ms tiles / fused: 128 -> 32 at 56x56 2.00 / 1.71, 14x14
# 0.21 / 0.18, 7x7 0.069 / 0.071; but 256 -> 64 at 14x14 0.50 / 0.52 and 512 -> 128 at
# 7x7 0.67 / 0.84.
_FUSED = True
_FUSED_MAX_WEIGHTS = 50_000          # taps * M * C


@compiled(fastmath=("contract", "reassoc"))
def _shift_add_channel(z, o, offsets, b, acc, dst, wp, relu):
    """Output channel o's rows dst (rows, OW) from z (taps, M, Lz), the GEMM over the
    flattened padded rows starting at dst's first row: dst[y, x] = b + sum over taps t
    of z[t, o, y * wp + x + offsets[t]], then ReLU when relu. acc: rows * wp scratch."""
    taps = z.shape[0]
    length = dst.shape[0] * wp
    ow = dst.shape[1]
    if taps == 9:
        # 3x3 in one pass (nine streams, acc written once)
        t0 = z[0, o, offsets[0]:offsets[0] + length]
        t1 = z[1, o, offsets[1]:offsets[1] + length]
        t2 = z[2, o, offsets[2]:offsets[2] + length]
        t3 = z[3, o, offsets[3]:offsets[3] + length]
        t4 = z[4, o, offsets[4]:offsets[4] + length]
        t5 = z[5, o, offsets[5]:offsets[5] + length]
        t6 = z[6, o, offsets[6]:offsets[6] + length]
        t7 = z[7, o, offsets[7]:offsets[7] + length]
        t8 = z[8, o, offsets[8]:offsets[8] + length]
        for i in range(length):
            acc[i] = b + t0[i] + t1[i] + t2[i] + t3[i] + t4[i] + t5[i] + t6[i] + t7[i] + t8[i]
    else:
        for i in range(length):
            acc[i] = b
        for tap_index in range(taps):
            tap = z[tap_index, o, offsets[tap_index]:offsets[tap_index] + length]
            for i in range(length):
                acc[i] += tap[i]
    for y in range(dst.shape[0]):
        src = acc[y * wp:y * wp + ow]
        row = dst[y]
        for i in range(ow):
            v = src[i]
            row[i] = 0.0 if relu and v < 0 else v


@compiled(fastmath=("contract", "reassoc"), parallel=True)
def _shift_add(z, offsets, bias, out, y0, y1, wp, relu, blocks):
    """Output rows y0..y1 of out (M, OH, OW) from z (taps, M, Lz), the GEMM over the
    flattened padded rows starting at row y0 (see _shift_add_channel), channels split
    in `blocks` blocks. bias has M values."""
    m = z.shape[1]
    for t in prange(blocks):
        acc = np.empty((y1 - y0) * wp, z.dtype)
        for o in range(m * t // blocks, m * (t + 1) // blocks):
            _shift_add_channel(z, o, offsets, bias[o], acc, out[o, y0:y1], wp, relu)


@_shift_add.numpy_twin
def _shift_add_numpy(z, offsets, bias, out, y0, y1, wp, relu, blocks):
    taps, m = z.shape[0], z.shape[1]
    length = (y1 - y0) * wp
    acc = np.repeat(bias[:m].reshape(m, 1), length, axis=1).astype(z.dtype)
    for t in range(taps):
        acc += z[t, :, offsets[t]:offsets[t] + length]
    vals = acc.reshape(m, y1 - y0, wp)[:, :, :out.shape[2]]
    if relu:
        np.maximum(vals, vals.dtype.type(0), out=vals)
    out[:, y0:y1] = vals


@compiled(fastmath=("contract", "reassoc"), parallel=True)
def _shift_rows(gemm, ilp64, flat, wt, offsets, bias, out, wp, relu, per, blocks, work, stride):
    """The whole shift conv in `blocks` blocks of `per` output rows, each on one team
    thread: Z = wt (taps*M, C) @ the block's flattened padded rows, then the shift-add
    (+ bias, ReLU) of that Z into out (M, OH, OW). Buffers from the thread's region of
    `work`, from thread_id() * stride (buffers.team_work; caller-owned, see blas.py)."""
    c = flat.shape[0]
    tm = wt.shape[0]
    taps = offsets.shape[0]
    m, oh, ow = out.shape
    span = offsets[taps - 1]
    item = out.itemsize
    for blk in prange(blocks):
        y0 = blk * per
        y1 = min(oh, y0 + per)
        if y1 <= y0:
            continue
        length = (y1 - y0) * wp
        zlen = length + span
        mine = work[thread_id() * stride:thread_id() * stride + stride]   # this thread's region
        z = mine[0:tm * zlen].reshape(taps, m, zlen)
        acc = mine[tm * (per * wp + span):tm * (per * wp + span) + length]
        call_gemm(gemm, ilp64, False, False, tm, zlen, c, 1.0, wt.ctypes.data, c, flat.ctypes.data + y0 * wp * item,
                  flat.shape[1], 0.0, z.ctypes.data, zlen, out)
        for o in range(m):
            _shift_add_channel(z, o, offsets, bias[o], acc, out[o, y0:y1], wp, relu)


@_shift_rows.numpy_twin
def _shift_rows_numpy(gemm, ilp64, flat, wt, offsets, bias, out, wp, relu, per, blocks, work, stride):
    taps = offsets.shape[0]
    m, oh = out.shape[0], out.shape[1]
    zlen = oh * wp + int(offsets[taps - 1])
    z = (wt @ flat[:, :zlen]).reshape(taps, m, zlen)
    _shift_add_numpy(z, offsets, bias, out, 0, oh, wp, relu, 1)


def shift_plan(x_shape, w_shape, pads, dilations, out_spatial, dtype):
    """See the module docstring."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64) or len(out_spatial) != 2 or min(pads) < 0 \
            or w_shape[1] != x_shape[1]:
        return None
    n, c, h, w_in = x_shape
    m, _, kh, kw = w_shape
    dh, dw = dilations
    oh, ow = out_spatial
    pt, pl = pads[0], pads[1]
    wp = max(pl + w_in, ow + (kw - 1) * dw)       # the padded row length
    hp = max(pt + h, oh + (kh - 1) * dh)
    rows = hp + 1                                  # the last tap of the last row runs one row on
    taps = kh * kw
    offsets = np.array([ky * dh * wp + kx * dw for ky in range(kh) for kx in range(kw)], np.int64)
    span = int(offsets[-1])
    item = dtype.itemsize
    rows_per_tile = max(1, min(oh, _Z_TILE_BYTES // max(1, taps * m * wp * item)))
    tiles = [(y, min(oh, y + rows_per_tile)) for y in range(0, oh, rows_per_tile)]
    interior = (slice(None), slice(pt, pt + h), slice(pl, pl + w_in))
    # the weights as a (taps * M, C) matrix, tap-major
    tap_major = DerivedWeights(lambda w: np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(taps * m, c)))

    # per team thread: blocks of output rows, GEMM and shift-add each (one region),
    # while the weights are small; bigger layers split each tile's GEMM over the team
    entry = gemm_entry(dtype) if _FUSED and taps * m * c <= _FUSED_MAX_WEIGHTS else None
    per = max(1, min(-(-oh // team_size()), rows_per_tile))
    blocks = team_size() * -(-oh // (team_size() * per))
    per = -(-oh // blocks)
    blocks = -(-oh // per)
    work_size = taps * m * (per * wp + span) + per * wp

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wt = tap_major(w)
        b = np.zeros(m, dtype) if bias is None else bias_values(bias, dtype)
        layout = (pt, pl, h, w_in)
        for i in range(n):
            xp = scratch.zeros(("shift_pad", layout), (c, rows, wp), dtype)
            copy_planes(x[i], xp[interior])
            flat = xp.reshape(c, rows * wp)
            if entry is not None:
                work, stride = team_work(work_size, dtype)
                with team():
                    _shift_rows(entry.gemm, entry.ilp64, flat, wt, offsets, b, out[i], wp, relu, per, blocks, work,
                                stride)
                continue
            for y0, y1 in tiles:
                length = (y1 - y0) * wp + span
                z = scratch.empty("shift_z", (taps * m, length), dtype)
                gemm_into(wt, flat[:, y0 * wp:y0 * wp + length], z)
                _shift_add(z.reshape(taps, m, length), offsets, b, out[i], y0, y1, wp, relu,
                           team_blocks(m, taps * (y1 - y0) * wp))
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute
