"""LSTM unit forward and backward (Caffe2's LstmUnitCpu / LstmUnitGradientCpu).

Gates per row are laid out [i | f | o | g], each D wide. Rows whose timestep is at
or past their sequence length are "invalid": they keep the previous state (or
zeros with drop_states). Math is done in float32 (float16 inputs are widened and
results rounded back).

Each is one compiled pass over the gates: rows split over the team, 8 columns at a
time in vector registers, every activation computed with simd's vector exp
(sigmoid = 1 / (1 + exp(-x)), tanh = 1 - 2 / (exp(2x) + 1): |error| < 3e-7), each input
read once and each output written once. Rows past their sequence length only copy.
Rows narrower than 8 use scalar code; otherwise the last 8 columns overlap the
chunk before (the same values are written twice), so there is no scalar tail.
"""
import math

import numpy as np

from ..runtime.jit import LazyGlobal, compiled, prange, team, team_blocks

LANES_8 = LazyGlobal(".simd", "LANES_8")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vload_f16 = LazyGlobal(".simd", "vload_f16")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vstore_f16_at = LazyGlobal(".simd", "vstore_f16_at")
vsplat = LazyGlobal(".simd", "vsplat")
vadds = LazyGlobal(".simd", "vadds")
vadd = LazyGlobal(".simd", "vadd")
vsub = LazyGlobal(".simd", "vsub")
vmul = LazyGlobal(".simd", "vmul")
vsigmoid = LazyGlobal(".simd", "vsigmoid")
vtanh = LazyGlobal(".simd", "vtanh")
load_f32 = LazyGlobal(".simd", "load_f32")
load_f16 = LazyGlobal(".simd", "load_f16")
store_f32 = LazyGlobal(".simd", "store_f32")
store_f16 = LazyGlobal(".simd", "store_f16")
address = LazyGlobal(".simd", "address")


@compiled
def _vget(base, j, half):
    """8 values from column j of the float32 / float16 (`half`) row at `base`."""
    return vload_f16(LANES_8, base + 2 * j) if half else vload_f32(LANES_8, base + 4 * j)


@compiled
def _vput(base, j, half, v):
    if half:
        vstore_f16_at(base + 2 * j, v)
    else:
        vstore_f32_at(base + 4 * j, v)


@compiled
def _get(base, j, half):
    return load_f16(base + 2 * j) if half else load_f32(base + 4 * j)


@compiled
def _put(base, j, half, x):
    if half:
        store_f16(base + 2 * j, x)
    else:
        store_f32(base + 4 * j, x)


@compiled
def _sigmoid(x):
    return np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-x)))


@compiled
def _tanh(x):
    return np.float32(math.tanh(x))


@compiled
def _chunks(d):
    """Column starts of the 8-wide chunks covering d >= 8 columns (the last overlaps)."""
    count = (d + 7) // 8
    return count, d - 8


@compiled(parallel=True)
def _forward(h_prev, c_prev, gates, seq, has_seq, t, forget_bias, drop, h_out, c_out, halves, d, blocks):
    """Rows of h_out / c_out (bytes of float32 / float16 rows) from the byte rows of
    h_prev, c_prev (D values) and gates (4D values). halves: float16 flags of
    (h_prev, c_prev, gates, outputs)."""
    n = c_prev.shape[0]
    hh, ch, gh, oh = halves[0], halves[1], halves[2], halves[3]
    zero = np.float32(0.0)
    fb = np.float32(forget_bias)
    hp0, cp0, g0 = address(h_prev), address(c_prev), address(gates)
    ho0, co0 = address(h_out), address(c_out)
    for blk in prange(blocks):
        for r in range((n * blk) // blocks, (n * (blk + 1)) // blocks):
            hp, cp, g = hp0 + r * h_prev.shape[1], cp0 + r * c_prev.shape[1], g0 + r * gates.shape[1]
            ho, co = ho0 + r * h_out.shape[1], co0 + r * c_out.shape[1]
            valid = not has_seq or t < seq[r]
            if d >= 8:
                count, last = _chunks(d)
                for q in range(count):
                    j = min(8 * q, last)
                    if valid:
                        i = vsigmoid(_vget(g, j, gh))
                        f = vsigmoid(vadds(_vget(g, d + j, gh), fb))
                        o = vsigmoid(_vget(g, 2 * d + j, gh))
                        gg = vtanh(_vget(g, 3 * d + j, gh))
                        c = vadd(vmul(f, _vget(cp, j, ch)), vmul(i, gg))
                        _vput(co, j, oh, c)
                        _vput(ho, j, oh, vmul(o, vtanh(c)))
                    elif drop:
                        _vput(co, j, oh, vsplat(LANES_8, zero))
                        _vput(ho, j, oh, vsplat(LANES_8, zero))
                    else:
                        _vput(co, j, oh, _vget(cp, j, ch))
                        _vput(ho, j, oh, _vget(hp, j, hh))
            else:
                for j in range(d):
                    if valid:
                        i = _sigmoid(_get(g, j, gh))
                        f = _sigmoid(_get(g, d + j, gh) + fb)
                        o = _sigmoid(_get(g, 2 * d + j, gh))
                        gg = _tanh(_get(g, 3 * d + j, gh))
                        c = f * _get(cp, j, ch) + i * gg
                        _put(co, j, oh, c)
                        _put(ho, j, oh, o * _tanh(c))
                    else:
                        _put(co, j, oh, zero if drop else _get(cp, j, ch))
                        _put(ho, j, oh, zero if drop else _get(hp, j, hh))


def _rows_f32(rows, half):
    """Twins' view of the kernels' byte rows: float32 values (float16 widened)."""
    return rows.view(np.float16 if half else np.float32).astype(np.float32)


def _write_rows(rows, half, values):
    rows[...] = values.astype(np.float16 if half else np.float32).view(np.uint8)


def _sigmoid_numpy(x):
    one = np.float32(1.0)
    return one / (one + np.exp(-x))


def _lstm_gates(gates, gh, d, forget_bias):
    g = _rows_f32(gates, gh)
    return (_sigmoid_numpy(g[:, :d]), _sigmoid_numpy(g[:, d:2 * d] + np.float32(forget_bias)),
            _sigmoid_numpy(g[:, 2 * d:3 * d]), np.tanh(g[:, 3 * d:4 * d]))


def _valid_rows(seq, has_seq, t, n):
    return (t < seq[:n]) if has_seq else np.ones(n, bool)


@_forward.numpy_twin
def _forward_numpy(h_prev, c_prev, gates, seq, has_seq, t, forget_bias, drop, h_out, c_out, halves, d, blocks):
    n = c_prev.shape[0]
    hh, ch, gh, oh = (bool(v) for v in halves[:4])
    with np.errstate(all="ignore"):
        i, f, o, gg = _lstm_gates(gates, gh, d, forget_bias)
        cp = _rows_f32(c_prev, ch)
        c = f * cp + i * gg
        h = o * np.tanh(c)
    valid = _valid_rows(seq, has_seq, t, n)[:, None]
    zero = np.float32(0.0)
    _write_rows(c_out, oh, np.where(valid, c, zero if drop else cp))
    _write_rows(h_out, oh, np.where(valid, h, zero if drop else _rows_f32(h_prev, hh)))


@compiled(parallel=True)
def _backward(c_prev, gates, c, dc_out, dh_out, seq, has_seq, t, forget_bias, drop, dh_prev, dc_prev, dgates,
              halves, d, blocks):
    """Rows of dh_prev, dc_prev (D) and dgates (4D) from c_prev, gates, c, dc_out,
    dh_out; halves: float16 flags of (c_prev, gates, c, dc_out, dh_out, outputs)."""
    n = c_prev.shape[0]
    cph, gh, chh, dch, dhh, oh = halves[0], halves[1], halves[2], halves[3], halves[4], halves[5]
    zero = np.float32(0.0)
    one = np.float32(1.0)
    fb = np.float32(forget_bias)
    cp0, g0, c0, dc0, dh0 = address(c_prev), address(gates), address(c), address(dc_out), address(dh_out)
    dhp0, dcp0, dg0 = address(dh_prev), address(dc_prev), address(dgates)
    for blk in prange(blocks):
        for r in range((n * blk) // blocks, (n * (blk + 1)) // blocks):
            cp, g, cc = cp0 + r * c_prev.shape[1], g0 + r * gates.shape[1], c0 + r * c.shape[1]
            dcr, dhr = dc0 + r * dc_out.shape[1], dh0 + r * dh_out.shape[1]
            dhp, dcp, dg = dhp0 + r * dh_prev.shape[1], dcp0 + r * dc_prev.shape[1], dg0 + r * dgates.shape[1]
            valid = not has_seq or t < seq[r]
            if d >= 8:
                count, last = _chunks(d)
                zeros = vsplat(LANES_8, zero)
                ones = vsplat(LANES_8, one)
                for q in range(count):
                    j = min(8 * q, last)
                    if valid:
                        i = vsigmoid(_vget(g, j, gh))
                        f = vsigmoid(vadds(_vget(g, d + j, gh), fb))
                        o = vsigmoid(_vget(g, 2 * d + j, gh))
                        gg = vtanh(_vget(g, 3 * d + j, gh))
                        tc = vtanh(_vget(cc, j, chh))
                        dh = _vget(dhr, j, dhh)
                        dc = vadd(_vget(dcr, j, dch), vmul(vmul(dh, o), vsub(ones, vmul(tc, tc))))
                        _vput(dcp, j, oh, vmul(dc, f))
                        _vput(dhp, j, oh, zeros)
                        _vput(dg, j, oh, vmul(vmul(dc, gg), vmul(i, vsub(ones, i))))
                        _vput(dg, d + j, oh, vmul(vmul(dc, _vget(cp, j, cph)), vmul(f, vsub(ones, f))))
                        _vput(dg, 2 * d + j, oh, vmul(vmul(dh, tc), vmul(o, vsub(ones, o))))
                        _vput(dg, 3 * d + j, oh, vmul(vmul(dc, i), vsub(ones, vmul(gg, gg))))
                    else:
                        for part in range(4):
                            _vput(dg, part * d + j, oh, zeros)
                        _vput(dcp, j, oh, zeros if drop else _vget(dcr, j, dch))
                        _vput(dhp, j, oh, zeros if drop else _vget(dhr, j, dhh))
            else:
                for j in range(d):
                    if valid:
                        i = _sigmoid(_get(g, j, gh))
                        f = _sigmoid(_get(g, d + j, gh) + fb)
                        o = _sigmoid(_get(g, 2 * d + j, gh))
                        gg = _tanh(_get(g, 3 * d + j, gh))
                        tc = _tanh(_get(cc, j, chh))
                        dh = _get(dhr, j, dhh)
                        dc = _get(dcr, j, dch) + dh * o * (one - tc * tc)
                        _put(dcp, j, oh, dc * f)
                        _put(dhp, j, oh, zero)
                        _put(dg, j, oh, dc * gg * i * (one - i))
                        _put(dg, d + j, oh, dc * _get(cp, j, cph) * f * (one - f))
                        _put(dg, 2 * d + j, oh, dh * tc * o * (one - o))
                        _put(dg, 3 * d + j, oh, dc * i * (one - gg * gg))
                    else:
                        for part in range(4):
                            _put(dg, part * d + j, oh, zero)
                        _put(dcp, j, oh, zero if drop else _get(dcr, j, dch))
                        _put(dhp, j, oh, zero if drop else _get(dhr, j, dhh))


@_backward.numpy_twin
def _backward_numpy(c_prev, gates, c, dc_out, dh_out, seq, has_seq, t, forget_bias, drop, dh_prev, dc_prev, dgates,
                    halves, d, blocks):
    n = c_prev.shape[0]
    cph, gh, chh, dch, dhh, oh = (bool(v) for v in halves[:6])
    one, zero = np.float32(1.0), np.float32(0.0)
    dc_in, dh = _rows_f32(dc_out, dch), _rows_f32(dh_out, dhh)
    with np.errstate(all="ignore"):
        i, f, o, gg = _lstm_gates(gates, gh, d, forget_bias)
        tc = np.tanh(_rows_f32(c, chh))
        dc = dc_in + dh * o * (one - tc * tc)
        dg = np.concatenate([dc * gg * i * (one - i), dc * _rows_f32(c_prev, cph) * f * (one - f),
                             dh * tc * o * (one - o), dc * i * (one - gg * gg)], axis=1)
    valid = _valid_rows(seq, has_seq, t, n)[:, None]
    _write_rows(dc_prev, oh, np.where(valid, dc * f, zero if drop else dc_in))
    _write_rows(dh_prev, oh, np.where(valid | drop, zero, dh))
    _write_rows(dgates, oh, np.where(valid, dg, zero))


def _byte_rows(a, n):
    """a as contiguous (n, row bytes) uint8 rows and whether it holds float16."""
    a = np.ascontiguousarray(a)
    return a.reshape(n, -1).view(np.uint8), a.dtype == np.float16


def _seq(seq_lengths, n):
    if seq_lengths is None:
        return np.zeros(1, np.int64), False
    return np.ascontiguousarray(np.asarray(seq_lengths).reshape(n), dtype=np.int64), True


def lstm_unit(h_prev, c_prev, gates, seq_lengths, t, forget_bias=0.0, drop_states=False, threads=None):
    """Returns (H, C) shaped like h_prev/c_prev ([1, N, D]); gates [1, N, 4D].

    Only rows still inside their sequence are computed; the others copy the previous
    state (or zeros with drop_states), as Caffe2's per-row select does."""
    out_dtype = np.float16 if c_prev.dtype == np.float16 else np.float32
    n, d = c_prev.shape[-2], c_prev.shape[-1]
    h = np.empty(c_prev.shape, out_dtype)
    c = np.empty(c_prev.shape, out_dtype)
    if n and d:
        (hp, hh), (cp, ch), (g, gh) = _byte_rows(h_prev, n), _byte_rows(c_prev, n), _byte_rows(gates, n)
        seq, has_seq = _seq(seq_lengths, n)
        halves = np.array([hh, ch, gh, out_dtype == np.float16])
        with team():
            _forward(hp, cp, g, seq, has_seq, int(t), float(forget_bias), bool(drop_states),
                     h.reshape(n, -1).view(np.uint8), c.reshape(n, -1).view(np.uint8), halves, d,
                     team_blocks(n, 16 * d) if threads is None else min(n, threads))
    return h, c


def lstm_unit_gradient(c_prev, gates, c, h, dc_out, dh_out, seq_lengths, t,
                       forget_bias=0.0, drop_states=False, threads=None):
    """Returns (dH_prev, dC_prev, dGates) with the shapes of h/c_prev and gates."""
    out_dtype = np.float16 if c_prev.dtype == np.float16 else np.float32
    n, d = c_prev.shape[-2], c_prev.shape[-1]
    dh_prev = np.empty(c_prev.shape, out_dtype)
    dc_prev = np.empty(c_prev.shape, out_dtype)
    dgates = np.empty(gates.shape, out_dtype)
    if n and d:
        ins = [_byte_rows(a, n) for a in (c_prev, gates, c, dc_out, dh_out)]
        seq, has_seq = _seq(seq_lengths, n)
        halves = np.array([half for _, half in ins] + [out_dtype == np.float16])
        with team():
            _backward(*[rows for rows, _ in ins], seq, has_seq, int(t), float(forget_bias), bool(drop_states),
                      dh_prev.reshape(n, -1).view(np.uint8), dc_prev.reshape(n, -1).view(np.uint8),
                      dgates.reshape(n, -1).view(np.uint8), halves, d,
                      team_blocks(n, 24 * d) if threads is None else min(n, threads))
    return dh_prev, dc_prev, dgates
