"""Winograd F(m x m, 3x3) convolution: stride-1 3x3 layers with fewer multiplies.

Public:
    winograd_tile(kernel, strides, dilations, pads, group, c, m, out_spatial) -> 4, 2 or 0
        which variant conv._plan uses for a layer (0: none).
    winograd_plan(x_shape, w_shape, pads, out_spatial, tile, dtype)
        -> compute(x, w, out, scratch, bias=None, relu=False, residual=None)
    winograd_filter(w, tile) -> the transformed filters (a^2, M, C)

A 3x3 stride-1 convolution computed on (m+2)x(m+2) input tiles that each give mxm
outputs: a^2 = (m+2)^2 GEMMs of (M, C) @ (C, tiles) replace one of (M, 9C) @ (9C, m^2
tiles), 2.25x (m=2) or 4x (m=4) fewer multiplies. The tile transforms B^T d B and
A^T Y A are linear maps, so each is one more GEMM with a Kronecker-product matrix
(a^2 x a^2 in, m^2 x a^2 out) on all tiles at once, after a compiled copy gathers
the tiles; another compiled pass scatters the output tiles into the map with bias
and ReLU. Matrices: Lavin & Gray, 2015.
"""
import numpy as np

from ..runtime.buffers import team_work, temp_buffer
from ..runtime.packed_weights import DerivedWeights
from ..runtime.blas import gemm_entry
from ..math.epilogue import bias_values
from ..runtime.jit import call_gemm, compiled, per_team, prange, team, team_blocks, team_size, thread_id
from ..tensor.layout import copy_planes
from ..math.team_gemm import gemm_into


_WINOGRAD = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}

# Which tile, from per-layer timings of the 3x3 layers of the light_* models on a
# 2-CPU Zen 5 VM with every GEMM, gather and scatter on the team (2026-11-24, ms,
# best direct path vs F(2x2) vs F(4x4)): Winograd wins from C*M/(C+M) >= 12
# (16 -> 64 at 55x55: 0.56 / 0.76 / 0.51; 48 -> 192 at 13x13: 0.30 / 0.27 / 0.28;
# 64 -> 96 at 14x14: 0.27 / 0.19 / 0.19). F(4x4) from 27x27 outputs (32 -> 128:
# 0.48 / 0.45 / 0.38; 64 -> 64 at 28x28: 0.65 / 0.54 / 0.44), and from 14x14 while
# the mix stays below 64 (96 -> 128: 0.47 / 0.33 / 0.31); with more channels its 36
# transformed filters cost more than its fewer multiplies save (256 -> 256 at 14x14:
# 1.81 / 1.34 / 1.62; 192 -> 320 at 7x7: 0.68 / 0.52 / 0.79).
WINOGRAD_MIN_MIX = 12
WINOGRAD_F4_MIN_OUTPUT = 27
WINOGRAD_F4_SMALL_OUTPUT, WINOGRAD_F4_SMALL_MAX_MIX = 14, 64
# Tiles gathered per chunk are kept around this size so the transform GEMMs stay in cache.
_WINOGRAD_CHUNK_BYTES = 2 << 20
# Per layer, 2-CPU Zen 5 VM, ms chunked / fused: 16 -> 64 at 55x55 0.72 / 0.55, 128 -> 160
# at 14x14 0.42 / 0.36, 128 -> 128 at 28x28 0.93 / 0.84, but 256 -> 256 at 14x14
# 1.28 / 1.36 and 512 -> 512 at 7x7 2.86 / 3.43.
_FUSE_CHUNKS = True
_FUSE_MAX_PRODUCT = 50_000          # M * C
# The fused path's work split (winograd_plan). 2 threads, per layer, tile rows -> output
# channels, ms (2-CPU Zen 3 VM; RESULTS.md "Winograd work split"): F(2x2) at 14x14
# 128 -> 160 0.688 -> 0.611, 128 -> 192 0.553 -> 0.487, 192 -> 256 1.081 -> 0.819, the
# others 1.01-1.05x; F(4x4) (a^2 = 36 repeated per part) at 28x28 64 -> 64 0.617 -> 0.713.
SPLIT_CHANNELS_BELOW_ROWS = 4       # tile rows per thread (0: always split tile rows)
SPLIT_MAX_REPEAT = 0.2              # largest a^2 / M (the repeated transform's share)


def winograd_tile(kernel, strides, dilations, pads, group, c, m, out_spatial):
    """The output tile size m of the Winograd variant to use (2 or 4), or 0 for none."""
    if not (tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and group == 1 and min(pads) >= 0):
        return 0
    mix = c * m / float(c + m)
    if mix < WINOGRAD_MIN_MIX:
        return 0
    size = min(out_spatial)
    if size >= WINOGRAD_F4_MIN_OUTPUT or (size >= WINOGRAD_F4_SMALL_OUTPUT and mix < WINOGRAD_F4_SMALL_MAX_MIX):
        return 4
    return 2


def winograd_filter(w, tile=2):
    """G g G^T for every (M, C) 3x3 filter, as (a^2, M, C) in w's dtype (float64 math)."""
    _, g, _ = _WINOGRAD[tile]
    a = g.shape[0]
    m, c = w.shape[:2]
    u = np.kron(g, g) @ w.reshape(m * c, 9).T.astype(np.float64)
    return u.reshape(a * a, m, c).astype(w.dtype)


def winograd_plan(x_shape, w_shape, pads, out_spatial, tile, dtype):
    n, c, h, w_in = x_shape
    m = w_shape[0]
    oh, ow = out_spatial
    bt, _, at = _WINOGRAD[tile]
    a = tile + 2
    th, tw = -(-oh // tile), -(-ow // tile)
    buf_shape = (c, th * tile + 2, tw * tile + 2)        # zero-bordered padded input
    interior = (slice(None), slice(pads[0], pads[0] + h), slice(pads[1], pads[1] + w_in))
    t_in = np.kron(bt, bt).astype(dtype)                 # (a^2, a^2)
    t_out = np.kron(at, at).astype(dtype)                # (m^2, a^2)
    item = np.dtype(dtype).itemsize
    rows_per_chunk = max(1, min(th, _WINOGRAD_CHUNK_BYTES // max(1, a * a * max(c, m) * tw * item)))
    chunks = [(r, min(th, r + rows_per_chunk)) for r in range(0, th, rows_per_chunk)]
    transformed = DerivedWeights(lambda w: winograd_filter(w, tile))

    # The fused pipeline (one chunk of tile rows per thread from gather to scatter) wins
    # while the products are small; with many channels the chunked path's batched
    # products, split by tile position over the team, use BLAS better (timings below).
    entry = gemm_entry(dtype) if _FUSE_CHUNKS and m * c <= _FUSE_MAX_PRODUCT else None
    # chunks of tile rows: cache-sized, and a multiple of the team so the threads balance;
    # maps of fewer tile rows than SPLIT_CHANNELS_BELOW_ROWS per thread split the output
    # channels instead (every thread then runs products as wide as the chunk), where
    # repeating the gather and input transform per part costs little: that transform is
    # a^2 / M of the products' work
    cap = max(1, _WINOGRAD_CHUNK_BYTES // max(1, a * a * max(c, m) * tw * item))
    team_threads = team_size()
    if team_threads > 1 and th < SPLIT_CHANNELS_BELOW_ROWS * team_threads and a * a <= SPLIT_MAX_REPEAT * m:
        m_parts = team_threads
        fused_chunks = -(-th // cap)
    else:
        m_parts = 1
        fused_chunks = team_threads * -(-th // (team_threads * cap))
    fused_rows = -(-th // fused_chunks)
    fused_chunks = -(-th // fused_rows)
    fused_work = (2 * a * a * max(c, m) + tile * tile * m) * fused_rows * tw

    def padded_input():
        """This thread's zero-bordered input buffer and its interior (only ever rewritten)."""
        xp = np.zeros(buf_shape, dtype)
        return xp, xp[interior]
    setups = {}

    def compute(x, w, out, scratch, bias=None, relu=False, residual=None):
        """bias: (M,) or None; relu: clamp at zero; both applied on the way out."""
        u = transformed(w)
        b = bias_values(bias, dtype)
        xp, xp_interior = per_team(setups, padded_input)
        for i in range(n):
            copy_planes(x[i], xp_interior)
            if entry is not None:
                work, stride = team_work(fused_work, dtype)
                with team():
                    _winograd_chunks(entry.gemm, entry.ilp64, xp, u, t_in, t_out, out[i], b, bias is not None, relu,
                                     tile, fused_rows, fused_chunks, m_parts, work, stride)
                continue
            for r0, r1 in chunks:
                rows = r1 - r0
                cols = rows * tw
                d = temp_buffer("wg_d", (a * a, c * cols), dtype)
                _gather_tiles(xp, d.reshape(a, a, c, rows, tw), r0, tile, team_blocks(c, a * a * cols))
                v = temp_buffer("wg_v", (a * a, c, cols), dtype)
                gemm_into(t_in, d, v.reshape(a * a, c * cols))
                prod = temp_buffer("wg_m", (a * a, m, cols), dtype)
                gemm_into(u, v, prod)
                y = temp_buffer("wg_y", (tile, tile, m, rows, tw), dtype)
                gemm_into(t_out, prod.reshape(a * a, m * cols), y.reshape(tile * tile, m * cols))
                _scatter_tiles(y, b, bias is not None, out[i], r0 * tile, relu, team_blocks(m, tile * tile * cols))
    compute.m_parts = m_parts if entry is not None else 1     # tests
    compute.takes_stand_ins = True    # reads w only through DerivedWeights (packed_weights.py)
    return compute


@compiled
def _gather_channel(xp, d, c, first_row, tile):
    """d[p, q, c, ty, tx] = xp[c, (first_row + ty) * tile + p, tx * tile + q]: the
    (tile + 2)^2 values of every tile of channel c. d (a, a, C, rows, tw)."""
    a, rows, tw = d.shape[0], d.shape[3], d.shape[4]
    for p in range(a):
        for ty in range(rows):
            src = xp[c, (first_row + ty) * tile + p]
            for q in range(a):
                dst = d[p, q, c, ty]
                if tile == 4:          # constant strides vectorise
                    for tx in range(tw):
                        dst[tx] = src[tx * 4 + q]
                elif tile == 2:
                    for tx in range(tw):
                        dst[tx] = src[tx * 2 + q]
                else:
                    for tx in range(tw):
                        dst[tx] = src[tx * tile + q]


@compiled
def _scatter_channel(y, o, b, out, first_row, relu):
    """out[o, first_row + ty * tile + p, tx * tile + q] = [relu](y[p, q, o, ty, tx] + b)
    for output channel o of the output tiles y (tile, tile, M, rows, tw), dropping
    what lies past the map's edge."""
    tile, rows, tw = y.shape[0], y.shape[3], y.shape[4]
    oh, ow = out.shape[1], out.shape[2]
    for ty in range(rows):
        for p in range(tile):
            oy = first_row + ty * tile + p
            if oy >= oh:
                continue
            dst = out[o, oy]
            for q in range(tile):
                src = y[p, q, o, ty]
                count = min(tw, (ow - q + tile - 1) // tile)
                for tx in range(count):
                    v = src[tx] + b
                    dst[tx * tile + q] = 0.0 if relu and v < 0 else v


@compiled(parallel=True)
def _gather_tiles(xp, d, first_row, tile, blocks):
    """_gather_channel for every channel, channels split over the team."""
    c_count = d.shape[2]
    for t in prange(blocks):
        for c in range(c_count * t // blocks, c_count * (t + 1) // blocks):
            _gather_channel(xp, d, c, first_row, tile)


def _tiles_view(xp, first_row, tile, a, rows, tw):
    """(a, a, C, rows, tw) read-only view: [p, q, c, ty, tx] = xp[c, (first_row + ty) * tile + p, tx * tile + q]."""
    sc, sy, sx = xp.strides
    return np.lib.stride_tricks.as_strided(xp[:, first_row * tile:], (a, a, xp.shape[0], rows, tw),
                                           (sy, sx, sc, tile * sy, tile * sx), writeable=False)


@_gather_tiles.numpy_twin
def _gather_tiles_numpy(xp, d, first_row, tile, blocks):
    a, rows, tw = d.shape[0], d.shape[3], d.shape[4]
    d[...] = _tiles_view(xp, first_row, tile, a, rows, tw)


@compiled(parallel=True)
def _scatter_tiles(y, bias, has_bias, out, first_row, relu, blocks):
    """_scatter_channel for every output channel (bias[o] added when has_bias),
    channels split over the team."""
    m = y.shape[2]
    for t in prange(blocks):
        for o in range(m * t // blocks, m * (t + 1) // blocks):
            _scatter_channel(y, o, bias[o] if has_bias else bias[0] * 0, out, first_row, relu)


@_scatter_tiles.numpy_twin
def _scatter_tiles_numpy(y, bias, has_bias, out, first_row, relu, blocks):
    tile, _, m, rows, tw = y.shape
    maps = y.transpose(2, 3, 0, 4, 1).reshape(m, rows * tile, tw * tile)    # [o, ty*tile + p, tx*tile + q]
    if has_bias:
        maps = maps + bias[:m].reshape(m, 1, 1)
    nr = min(rows * tile, out.shape[1] - first_row)
    nc = min(tw * tile, out.shape[2])
    vals = maps[:, :nr, :nc]
    out[:, first_row:first_row + nr, :nc] = np.maximum(vals, vals.dtype.type(0)) if relu else vals


@compiled(parallel=True)
def _winograd_chunks(gemm, ilp64, xp, u, t_in, t_out, out, bias, has_bias, relu, tile, rows_per_chunk, chunks,
                     m_parts, work, stride):
    """The whole Winograd pipeline, chunk by chunk of tile rows, each chunk on one team
    thread from start to end: gather its tiles, transform them (a GEMM with
    kron(B^T, B^T)), the a^2 products with the transformed filters, the output
    transform (a GEMM with kron(A^T, A^T)), and scatter into out with bias and ReLU.
    With m_parts > 1 every chunk is m_parts work items, each computing the products,
    output transform and scatter of its share of the output channels (the gather and
    input transform repeated per item): maps of few tile rows then keep every thread
    busy without cutting the products' columns.
    Single-threaded GEMMs in the thread's own region of `work` (buffers.team_work: 2 *
    a^2 * max(C, M) * rows_per_chunk * tw + tile^2 * M * rows_per_chunk * tw values from
    thread_id() * stride): no join between the steps, and a chunk's data stays in its
    thread's cache. xp (C, Hp, Wp) padded input;
    u (a^2, M, C); out (M, OH, OW). (The buffers come from the caller: an array made in
    here is freed after its last use as an array, which may come before the GEMM that
    reads its pointer; see blas.py.)"""
    a2, m, c = u.shape
    a = tile + 2
    th = -(-out.shape[1] // tile)
    tw = -(-out.shape[2] // tile)
    item = out.itemsize
    for work_item in prange(chunks * m_parts):
        chunk = work_item // m_parts
        part = work_item - chunk * m_parts
        m0 = m * part // m_parts
        mp = m * (part + 1) // m_parts - m0
        r0 = chunk * rows_per_chunk
        rows = min(th, r0 + rows_per_chunk) - r0
        if rows <= 0 or mp <= 0:
            continue
        cols = rows * tw
        mine = work[thread_id() * stride:thread_id() * stride + stride]   # this thread's region
        big = a2 * max(c, m) * cols
        d = mine[0:a2 * c * cols].reshape(a2, c * cols)
        v = mine[big:big + a2 * c * cols].reshape(a2, c * cols)
        prod = mine[0:a2 * mp * cols].reshape(a2, mp, cols)        # d is spent once v exists
        y = mine[2 * big:2 * big + tile * tile * mp * cols].reshape(tile * tile, mp * cols)
        d5 = d.reshape(a, a, c, rows, tw)
        for ci in range(c):
            _gather_channel(xp, d5, ci, r0, tile)
        call_gemm(gemm, ilp64, False, False, a2, c * cols, a2, 1.0, t_in.ctypes.data, a2, d.ctypes.data, c * cols,
                  0.0, v.ctypes.data, c * cols, out)
        for e in range(a2):
            call_gemm(gemm, ilp64, False, False, mp, cols, c, 1.0, u.ctypes.data + (e * m + m0) * c * item, c,
                      v.ctypes.data + e * c * cols * item, cols, 0.0, prod.ctypes.data + e * mp * cols * item, cols,
                      out)
        call_gemm(gemm, ilp64, False, False, tile * tile, mp * cols, a2, 1.0, t_out.ctypes.data, a2,
                  prod.ctypes.data, mp * cols, 0.0, y.ctypes.data, mp * cols, out)
        y5 = y.reshape(tile, tile, mp, rows, tw)
        part_out = out[m0:m0 + mp]
        for o in range(mp):
            _scatter_channel(y5, o, bias[m0 + o] if has_bias else bias[0] * 0, part_out, r0 * tile, relu)


@_winograd_chunks.numpy_twin
def _winograd_chunks_numpy(gemm, ilp64, xp, u, t_in, t_out, out, bias, has_bias, relu, tile, rows_per_chunk, chunks,
                           m_parts, work, stride):
    """All tiles at once: gather, input transform, the a^2 products, output transform, scatter."""
    a2, m, c = u.shape
    a = tile + 2
    th, tw = -(-out.shape[1] // tile), -(-out.shape[2] // tile)
    cols = th * tw
    d = np.ascontiguousarray(_tiles_view(xp, 0, tile, a, th, tw)).reshape(a2, c * cols)
    v = (t_in @ d).reshape(a2, c, cols)
    prod = np.matmul(u, v)                                   # (a^2, M, cols)
    y = (t_out @ prod.reshape(a2, m * cols)).reshape(tile, tile, m, th, tw)
    _scatter_tiles_numpy(y, bias, has_bias, out, 0, relu, 1)
