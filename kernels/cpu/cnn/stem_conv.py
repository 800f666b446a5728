"""The stem convolutions of image models (NCHW float32, group 1, a few input channels:
3 -> 24..96 with 3x3 to 11x11 kernels at stride 1, 2 or 4), computed directly, output
row by output row.

Public:
    stem_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None), or None
        when the kernel does not cover the case (other dtypes, groups, negative pads,
        more than STEM_MAX_CHANNELS input channels, outputs narrower than a block).

Why: a stem's reduction is short (C * kh * kw = 27..363) and its output large (64 x
111 x 111 floats), so a GEMM over a tap stack spends its time writing the stack and the
output, and direct_conv.py's flat pixel blocks (24 flattened outputs that may span two
output rows) finish a third of their blocks lane by lane when the padded row is not a
multiple of 24 long. Here:
  * the input is copied once per image into its stride phases (phases.py's layout:
    zero-bordered buffers of width wq, so for every tap the inputs of consecutive
    outputs of one row are consecutive floats);
  * each output row is cut into blocks of 24 outputs (3 vectors of 8 lanes), the last
    one moved back to end at the row's end (its first lanes recompute outputs of the
    block before: same values), so every block is finished and stored as vectors;
  * a block of 4 output channels x 24 outputs is 12 accumulators in registers through
    the whole reduction (per tap 3 vector loads, 4 weights, 12 FMAs), weights packed as
    direct_conv.pack_weights does, kept per weight array; where registers are 16 lanes
    (32 of them) a stem of more than 4 outputs takes blocks of 8 channels x 48 outputs,
    24 accumulators (_stem_rows_wide, direct_conv.WIDE's rule: 3 -> 64 7x7/s2 at 224,
    1 thread, 2.02 -> 1.70 ms, onnxruntime 1.75);
  * output rows are split over the team; each thread runs one channel block over a
    tile of ROW_TILE rows, then the next block over the same rows, so its output is
    written as 4 channel planes' long runs (the prefetchers follow them) while the
    tile's input stays in L1.
"""
import numpy as np

from ..math.epilogue import bias_values
from ..runtime.packed_weights import DerivedWeights
from ..runtime.jit import LazyGlobal, compiled, per_team, prange, serial_variant, team_blocks
from .direct_conv import (PIXELS, WIDE_CHANNELS, block_channels, fma_8x1, fma_8x3, pack_weights, register_lanes,
                          row_of_four)
from .phases import tap_offsets

LANES_8 = LazyGlobal(".simd", "LANES_8")
lane_count = LazyGlobal(".simd", "lane_count")
vzeros = LazyGlobal(".simd", "vzeros")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vload_f32_even = LazyGlobal(".simd", "vload_f32_even")
vload_f32_odd = LazyGlobal(".simd", "vload_f32_odd")
vfma = LazyGlobal(".simd", "vfma")
vadds = LazyGlobal(".simd", "vadds")
vadd = LazyGlobal(".simd", "vadd")
vmax = LazyGlobal(".simd", "vmax")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
address = LazyGlobal(".simd", "address")

# A stem's tiles in _stem_rows: output rows, and pixel blocks per row (None: the whole
# row); each channel block covers a tile before the next (tests vary them)
ROW_TILE = 8
PB_TILE = None
# Input channels up to this many take the stem kernel (conv.py's dispatch says why).
STEM_MAX_CHANNELS = 4


@compiled(inline=True)
def _finish(o0, r0, at, u, b, has_residual, relu, zero, lanes):
    """Store vector u + b (+ the residual's values at `at`) [ReLU] at output `at`."""
    u = vadds(u, b)
    if has_residual:
        u = vadd(u, vload_f32(lanes, r0 + at * 4))
    if relu:            # max(0, v): NaN and -0.0 kept, as np.maximum(v, 0)
        u = vmax(zero, u)
    vstore_f32_at(o0 + at * 4, u)


@compiled(inline=True)
def _finish_four(o0, r0, first, m, oh, ow, oy, ox, nl, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32,
                 bias, bias_at, has_bias, has_residual, relu, zero, lanes):
    """Output channels first..first+3 (those below m) of a block: rows of 3 vectors at
    (oy, ox), bias[bias_at + channel]."""
    for j in range(min(4, m - first)):
        u0, u1, u2 = row_of_four(j, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32)
        o = first + j
        b = bias[bias_at + o] if has_bias else np.float32(0.0)
        at = (o * oh + oy) * ow + ox
        _finish(o0, r0, at, u0, b, has_residual, relu, zero, lanes)
        _finish(o0, r0, at + nl, u1, b, has_residual, relu, zero, lanes)
        _finish(o0, r0, at + 2 * nl, u2, b, has_residual, relu, zero, lanes)


@compiled(parallel=True)
def _stem_rows(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, blocks, lanes,
               row_tile, pb_tile):
    """For each group g: out[g] (M, OH, OW) = [relu](sum over taps k of wpack[g, ., k, .]
    * flat[g, oy * wq + ox + offsets[k]] + bias[g * M + .] + residual[g]), OW >= px.
    flat (G, L): the phase buffers of each group, long enough that (OH - 1) * wq + OW - 1
    + offsets[k] < L for every k (the caller checked); wpack (G, ceil(M/4), K, 4), zero
    past M; residual (G, M, OH * OW) when has_residual. All C-contiguous. The G * OH
    output rows in `blocks` contiguous ranges on the team (a stem has one group; a
    grouped 1x1 convolution is G groups of one row of OH * OW outputs, offsets[k] = k * P). A row is blocks of px
    = 3 * lanes outputs (24 or 48); a rest of more than one vector is one more block
    moved back to end at the row's end, a rest of one vector or less one vector moved
    back the same way (4 accumulators: half the FMA rate, so only worth it for one
    vector instead of three). Order: tiles of row_tile rows x pb_tile pixel blocks (the
    tail vector counts as block n_pb), each channel block over the whole tile."""
    groups, m, oh, ow = out.shape
    nl = lane_count(lanes)
    vb = nl * 4
    px = 3 * nl
    n_cb = wpack.shape[1]
    k_count = wpack.shape[2]
    items = groups * oh
    rest = ow % px
    n_pb = ow // px + (1 if rest > nl else 0)
    n_tail = 1 if 0 < rest <= nl else 0
    zero = vzeros(lanes)
    for t in prange(blocks):
        lo, hi = items * t // blocks, items * (t + 1) // blocks
        # tiles of row_tile rows x pb_tile pixel blocks, each channel block over a whole
        # tile before the next: a stem (row_tile ROW_TILE, whole rows) writes its output
        # as 4 channel planes' long runs, not 64 short ones (in-model, the first op of a
        # run, its output cold: resnet50's 7x7 stem 2.80 -> 2.38 ms, squeezenet's 3x3
        # 0.80 -> 0.73; alone unchanged) while the tile's input rows stay in L1; a
        # grouped 1x1 (tiles of one block) keeps its block's input in L1 for every channel
        # block (whole-row tiles there: shufflenet 7% slower)
        for tile in range(lo, hi, row_tile):
            for pb0 in range(0, n_pb + n_tail, pb_tile):
                pb1 = min(n_pb + n_tail, pb0 + pb_tile)
                for cb in range(n_cb):
                    for item in range(tile, min(hi, tile + row_tile)):
                        g = item // oh
                        oy = item - g * oh
                        x0 = address(flat) + g * flat.shape[1] * 4
                        o0 = address(out) + g * m * oh * ow * 4
                        r0 = address(residual) + (g * m * oh * ow * 4 if has_residual else 0)
                        wg = wpack[g]
                        for pb in range(pb0, min(pb1, n_pb)):
                            ox = min(pb * px, ow - px)          # the last block ends at the row's end
                            p0 = oy * wq + ox
                            a00 = a01 = a02 = a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = zero
                            for k in range(k_count):
                                at = x0 + (p0 + offsets[k]) * 4
                                v0 = vload_f32(lanes, at)
                                v1 = vload_f32(lanes, at + vb)
                                v2 = vload_f32(lanes, at + 2 * vb)
                                c0, c1, c2, c3 = wg[cb, k, 0], wg[cb, k, 1], wg[cb, k, 2], wg[cb, k, 3]
                                a00 = vfma(a00, c0, v0)
                                a01 = vfma(a01, c0, v1)
                                a02 = vfma(a02, c0, v2)
                                a10 = vfma(a10, c1, v0)
                                a11 = vfma(a11, c1, v1)
                                a12 = vfma(a12, c1, v2)
                                a20 = vfma(a20, c2, v0)
                                a21 = vfma(a21, c2, v1)
                                a22 = vfma(a22, c2, v2)
                                a30 = vfma(a30, c3, v0)
                                a31 = vfma(a31, c3, v1)
                                a32 = vfma(a32, c3, v2)
                            _finish_four(o0, r0, cb * 4, m, oh, ow, oy, ox, nl, a00, a01, a02, a10, a11, a12, a20,
                                         a21, a22, a30, a31, a32, bias, g * m, has_bias, has_residual, relu, zero,
                                         lanes)
                        for tv in range(max(pb0, n_pb), pb1):       # the tail: block n_pb
                            ox = ow - nl
                            p0 = oy * wq + ox
                            a0 = a1 = a2 = a3 = zero
                            for k in range(k_count):
                                v0 = vload_f32(lanes, x0 + (p0 + offsets[k]) * 4)
                                a0 = vfma(a0, wg[cb, k, 0], v0)
                                a1 = vfma(a1, wg[cb, k, 1], v0)
                                a2 = vfma(a2, wg[cb, k, 2], v0)
                                a3 = vfma(a3, wg[cb, k, 3], v0)
                            for j in range(min(4, m - cb * 4)):
                                o = cb * 4 + j
                                u0 = a0 if j == 0 else (a1 if j == 1 else (a2 if j == 2 else a3))
                                b = bias[g * m + o] if has_bias else np.float32(0.0)
                                _finish(o0, r0, (o * oh + oy) * ow + ox, u0, b, has_residual, relu, zero, lanes)


@compiled(parallel=True)
def _stem_rows_wide(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, blocks, lanes,
                    row_tile, pb_tile):
    """_stem_rows with blocks of 8 output channels (wpack (G, ceil(M/8), K, 8)) for
    16-lane registers: per tap 3 vector loads, 8 broadcast weights, 24 FMAs into 24 of
    the 32 registers (4 channels spend 7 loads per 12 FMAs); the tail vector of a row
    is 8 accumulators. Finished as two 4-channel halves."""
    groups, m, oh, ow = out.shape
    nl = lane_count(lanes)
    vb = nl * 4
    px = 3 * nl
    n_cb = wpack.shape[1]
    k_count = wpack.shape[2]
    items = groups * oh
    rest = ow % px
    n_pb = ow // px + (1 if rest > nl else 0)
    n_tail = 1 if 0 < rest <= nl else 0
    zero = vzeros(lanes)
    for t in prange(blocks):
        lo, hi = items * t // blocks, items * (t + 1) // blocks
        for tile in range(lo, hi, row_tile):
            for pb0 in range(0, n_pb + n_tail, pb_tile):
                pb1 = min(n_pb + n_tail, pb0 + pb_tile)
                for cb in range(n_cb):
                    for item in range(tile, min(hi, tile + row_tile)):
                        g = item // oh
                        oy = item - g * oh
                        x0 = address(flat) + g * flat.shape[1] * 4
                        o0 = address(out) + g * m * oh * ow * 4
                        r0 = address(residual) + (g * m * oh * ow * 4 if has_residual else 0)
                        w0 = address(wpack) + (g * n_cb + cb) * k_count * 32
                        for pb in range(pb0, min(pb1, n_pb)):
                            ox = min(pb * px, ow - px)          # the last block ends at the row's end
                            p0 = oy * wq + ox
                            a00 = a01 = a02 = a10 = a11 = a12 = a20 = a21 = a22 = a30 = a31 = a32 = zero
                            a40 = a41 = a42 = a50 = a51 = a52 = a60 = a61 = a62 = a70 = a71 = a72 = zero
                            wk = w0
                            for k in range(k_count):
                                at = x0 + (p0 + offsets[k]) * 4
                                v0 = vload_f32(lanes, at)
                                v1 = vload_f32(lanes, at + vb)
                                v2 = vload_f32(lanes, at + 2 * vb)
                                (a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32, a40, a41, a42, a50,
                                 a51, a52, a60, a61, a62, a70, a71, a72) = \
                                    fma_8x3(wk, v0, v1, v2, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31,
                                            a32, a40, a41, a42, a50, a51, a52, a60, a61, a62, a70, a71, a72)
                                wk += 32
                            _finish_four(o0, r0, cb * 8, m, oh, ow, oy, ox, nl, a00, a01, a02, a10, a11, a12, a20,
                                         a21, a22, a30, a31, a32, bias, g * m, has_bias, has_residual, relu, zero,
                                         lanes)
                            _finish_four(o0, r0, cb * 8 + 4, m, oh, ow, oy, ox, nl, a40, a41, a42, a50, a51, a52,
                                         a60, a61, a62, a70, a71, a72, bias, g * m, has_bias, has_residual, relu, zero,
                                         lanes)
                        for tv in range(max(pb0, n_pb), pb1):       # the tail: block n_pb
                            ox = ow - nl
                            p0 = oy * wq + ox
                            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
                            wk = w0
                            for k in range(k_count):
                                v0 = vload_f32(lanes, x0 + (p0 + offsets[k]) * 4)
                                a0, a1, a2, a3, a4, a5, a6, a7 = fma_8x1(wk, v0, a0, a1, a2, a3, a4, a5, a6, a7)
                                wk += 32
                            for j in range(min(8, m - cb * 8)):
                                o = cb * 8 + j
                                if j < 4:
                                    u0 = a0 if j == 0 else (a1 if j == 1 else (a2 if j == 2 else a3))
                                else:
                                    u0 = a4 if j == 4 else (a5 if j == 5 else (a6 if j == 6 else a7))
                                b = bias[g * m + o] if has_bias else np.float32(0.0)
                                _finish(o0, r0, (o * oh + oy) * ow + ox, u0, b, has_residual, relu, zero, lanes)


@_stem_rows.numpy_twin
def _stem_rows_numpy(flat, offsets, wpack, bias, has_bias, residual, has_residual, relu, out, wq, blocks, lanes,
                     row_tile, pb_tile):
    """Per group, all outputs at once: the taps gathered (K, OH, OW), one product."""
    groups, m, oh, ow = out.shape
    pixels = (np.arange(oh)[:, None] * wq + np.arange(ow)[None, :]).reshape(-1)
    for g in range(groups):
        taps = flat[g][offsets[:, None] + pixels[None, :]]
        w2 = wpack[g].transpose(0, 2, 1).reshape(-1, wpack.shape[2])[:m]
        y = (w2 @ taps).reshape(m, oh, ow)
        if has_bias:
            y = y + bias[g * m:(g + 1) * m].reshape(m, 1, 1)
        if has_residual:
            y = y + residual[g].reshape(m, oh, ow)
        if relu:
            y = np.maximum(y, np.float32(0))
        out[g] = y


@compiled(parallel=True)
def _stem_phases(img, buf, sh, sw, pt, pl, blocks):
    """buf[((i + pt) % sh) * sw + (j + pl) % sw, c, (i + pt) // sh, (j + pl) // sw] =
    img[c, i, j]: every stride phase of the input in one pass, each input row read once
    (phases.py copies one phase a pass, each pass re-reading the rows with scalar
    strided loads: 0.21 ms for a 3 x 224 x 224 image at stride 2, measured). buf
    (sh * sw, C, rows, wq) keeps its zero border. Input rows over the team. The caller
    checked that every destination lies inside buf."""
    c_count, h, wd = img.shape
    jobs = c_count * h
    for t in prange(blocks):
        for job in range(jobs * t // blocks, jobs * (t + 1) // blocks):
            c, i = job // h, job % h
            src = img[c, i]
            base = ((i + pt) % sh) * sw
            q = (i + pt) // sh
            if sw == 1:
                dst = buf[base, c, q, pl:pl + wd]
                for j in range(wd):
                    dst[j] = src[j]
            elif sw == 2:
                # input columns 2u, 2u + 1 go to column u + pl // 2 of phase pl % 2 and
                # column u + (pl + 1) // 2 of the other
                half = wd // 2
                even = buf[base + pl % 2, c, q, pl // 2:pl // 2 + half]
                odd = buf[base + (pl + 1) % 2, c, q, (pl + 1) // 2:(pl + 1) // 2 + half]
                if half >= 8:
                    # 16 floats -> 8 even + 8 odd (a load and a shuffle each), the last 16 moved back
                    s0, e0, d0 = address(src), address(even), address(odd)
                    for u in range(0, half, 8):
                        u = min(u, half - 8)
                        vstore_f32_at(e0 + u * 4, vload_f32_even(LANES_8, s0 + u * 8))
                        vstore_f32_at(d0 + u * 4, vload_f32_odd(LANES_8, s0 + u * 8))
                else:
                    pairs = src[0:2 * half]
                    for u in range(half):
                        even[u] = pairs[2 * u]
                        odd[u] = pairs[2 * u + 1]
                if wd % 2:
                    buf[base + pl % 2, c, q, (wd - 1 + pl) // 2] = src[wd - 1]
            else:
                for p1 in range(sw):
                    j0 = (p1 - pl) % sw
                    count = (wd - j0 + sw - 1) // sw
                    if count <= 0:
                        continue
                    dst = buf[base + p1, c, q, (pl + j0) // sw:(pl + j0) // sw + count]
                    part = src[j0:j0 + (count - 1) * sw + 1:sw]
                    for u in range(count):
                        dst[u] = part[u]


@_stem_phases.numpy_twin
def _stem_phases_numpy(img, buf, sh, sw, pt, pl, blocks):
    c_count, h, wd = img.shape
    for i in range(min(sh, h)):
        for j in range(min(sw, wd)):
            phase = ((i + pt) % sh) * sw + (j + pl) % sw
            rows, cols = range(i, h, sh), range(j, wd, sw)
            q0, r0 = (i + pt) // sh, (j + pl) // sw
            buf[phase, :, q0:q0 + len(rows), r0:r0 + len(cols)] = img[:, i::sh, j::sw]


# One block runs without a parallel region (phases.py's serial copy says why).
_stem_phases_serial = serial_variant(_stem_phases, "_stem_phases_serial")
_stem_rows_serial = serial_variant(_stem_rows, "_stem_rows_serial")
# the twin does not depend on the block width: one serves both kernels
_stem_rows_wide.numpy_twin(_stem_rows_numpy)
_stem_rows_wide_serial = serial_variant(_stem_rows_wide, "_stem_rows_wide_serial")
_NO_RESIDUAL = np.zeros((1, 1, 1), np.float32)


def rows_kernel(channels, blocks):
    """The row kernel for register blocks of `channels` output channels (4 or
    WIDE_CHANNELS): the team one for more than one block, else its serial copy."""
    if channels == WIDE_CHANNELS:
        return _stem_rows_wide if blocks > 1 else _stem_rows_wide_serial
    return _stem_rows if blocks > 1 else _stem_rows_serial


def stem_plan(x_shape, w_shape, strides, pads, dilations, out_spatial, dtype):
    """See the module docstring. Geometry is checked here, once: the compiled loop
    reads the phase buffers at precomputed offsets without bounds checks."""
    if np.dtype(dtype) != np.float32 or len(x_shape) != 4 or any(p < 0 for p in pads):
        return None
    n, c, h, wd = x_shape
    m, cw, kh, kw = w_shape
    oh, ow = out_spatial
    if cw != c or c > STEM_MAX_CHANNELS or ow < PIXELS:
        return None
    lanes = row_lanes(ow)
    (sh, sw), dw = strides, dilations[1]
    pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, wd + pl + pr
    rows, wq = -(-hp // sh), -(-wp // sw)
    plane = rows * wq
    offsets = tap_offsets(c, (kh, kw), strides, dilations, plane, wq)
    size = sh * sw * c * plane
    # the loop's last read: output (oh - 1, ow - 1) at the largest offset
    if (oh - 1) * wq + ow - 1 + int(offsets.max()) >= size or (ow - 1) + (kw - 1) * dw // sw >= wq:
        raise AssertionError("stem conv phase buffers too short")     # the layout above guarantees it
    # input (i, j) sits at padded (i + pt, j + pl): inside its phase's rows and columns
    if (h - 1 + pt) // sh >= rows or (wd - 1 + pl) // sw >= wq:
        raise AssertionError("stem conv phase buffers too small")
    channels = block_channels(m)
    packed = DerivedWeights(lambda w: pack_weights(w, channels)[None])
    px = 3 * lanes.n
    row_work = -(-m // channels) * -(-ow // px) * px * channels * c * kh * kw

    def setup():
        """(blocks, kernel, phase buffers (zero borders, the interior rewritten per image),
        the phase copy and its blocks) for this thread's team."""
        blocks = team_blocks(oh, row_work)
        copy_blocks = team_blocks(c * h, wd)
        grid = np.zeros((sh * sw, c, rows, wq), np.float32)
        return (blocks, rows_kernel(channels, blocks), grid, _stem_phases if copy_blocks > 1 else _stem_phases_serial,
                copy_blocks)
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        wpack = packed(w)
        b = bias_values(bias, np.float32)
        blocks, kernel, grid, copy, copy_blocks = per_team(setups, setup)
        for i in range(n):
            copy(x[i], grid, sh, sw, pt, pl, copy_blocks)
            res = residual[i].reshape(1, m, oh * ow) if residual is not None else _NO_RESIDUAL
            kernel(grid.reshape(1, -1), offsets, wpack, b, bias is not None, res, residual is not None, relu,
                   out[i][None], wq, blocks, lanes, ROW_TILE, PB_TILE or -(-ow // px))
    compute.channels = channels
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute


def row_lanes(width):
    """The Lanes of _stem_rows' blocks for rows of `width` outputs: the direct kernel's
    (16 on AVX-512 CPUs) where a row holds a block of 3 x 16, else 8."""
    from ..runtime import simd
    lanes = register_lanes()
    return lanes if width >= 3 * lanes.n else simd.LANES_8
