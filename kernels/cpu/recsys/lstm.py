"""LSTM unit forward and backward (Caffe2's LstmUnitCpu / LstmUnitGradientCpu).

Gates per row are laid out [i | f | o | g], each D wide. Rows whose timestep is at
or past their sequence length are "invalid": they keep the previous state (or
zeros with drop_states). Math is done in float32 (float16 inputs are upconverted
and results converted back).

Speed notes: sigmoid is computed as 0.5 * tanh(0.5 x) + 0.5 over the contiguous
i, f, o block (one transcendental per element, no exp overflow; the copy out of
the gates is fused with the first multiply); rows past their sequence length are
not computed at all; row blocks are split across threads (ufuncs release the GIL).
"""
import numpy as np

from ..runtime.threads import run_split


def _valid_rows(n, seq_lengths, t):
    if seq_lengths is None:
        return None
    return np.asarray(t) < np.asarray(seq_lengths).reshape(n)


def _step(gx, cp, out_h, out_c, d, forget_bias):
    """One LSTM step for a block of rows: gx [r, 4D] (not modified), cp [r, D]."""
    r = gx.shape[0]
    ifo = np.multiply(gx[:, :3 * d], np.float32(0.5), out=np.empty((r, 3 * d), np.float32))
    if forget_bias:
        ifo[:, d:2 * d] += np.float32(0.5 * forget_bias)
    np.tanh(ifo, out=ifo)               # sigmoid(x) = 0.5 * tanh(0.5 x) + 0.5
    ifo *= np.float32(0.5)
    ifo += np.float32(0.5)
    gg = np.tanh(gx[:, 3 * d:], dtype=np.float32)
    i, f, o = ifo[:, :d], ifo[:, d:2 * d], ifo[:, 2 * d:]
    np.multiply(f, cp, out=out_c)
    i *= gg
    out_c += i
    np.tanh(out_c, out=out_h)
    out_h *= o


# rows per block: large enough to amortise NumPy call overhead, small enough for cache
_BLOCK_VALUES = 1 << 16


def lstm_unit(h_prev, c_prev, gates, seq_lengths, t, forget_bias=0.0, drop_states=False, threads=None):
    """Returns (H, C) shaped like h_prev/c_prev ([1, N, D]); gates [1, N, 4D].

    Only rows still inside their sequence are computed; the others copy the previous
    state (or zeros with drop_states), as Caffe2's per-row select does."""
    out_dtype = np.float16 if c_prev.dtype == np.float16 else np.float32
    n, d = c_prev.shape[-2], c_prev.shape[-1]
    g2 = gates.reshape(n, 4 * d)
    c2 = c_prev.reshape(n, d)
    valid = _valid_rows(n, seq_lengths, t)
    if valid is None or valid.all():
        h = np.empty((n, d), np.float32)
        c = np.empty((n, d), np.float32)
        rows = None
    else:
        fill = np.zeros if drop_states else (lambda shape, dtype: None)
        h = fill((n, d), np.float32)
        c = fill((n, d), np.float32)
        if h is None:
            h = h_prev.reshape(n, d).astype(np.float32)
            c = c2.astype(np.float32)
        rows = np.flatnonzero(valid)
    count = n if rows is None else rows.size
    step = max(1, _BLOCK_VALUES // max(1, 4 * d))
    blocks = [(b, min(count, b + step)) for b in range(0, count, step)]

    def run(block):
        lo, hi = block
        if rows is None:
            _step(g2[lo:hi], c2[lo:hi].astype(np.float32, copy=False), h[lo:hi], c[lo:hi], d, forget_bias)
            return
        sel = rows[lo:hi]
        if sel[-1] - sel[0] == sel.size - 1:     # a contiguous run of valid rows: views
            s = slice(sel[0], sel[-1] + 1)
            _step(g2[s], c2[s].astype(np.float32, copy=False), h[s], c[s], d, forget_bias)
            return
        hb = np.empty((sel.size, d), np.float32)
        cb = np.empty((sel.size, d), np.float32)
        _step(np.take(g2, sel, axis=0), np.take(c2, sel, axis=0).astype(np.float32, copy=False),
              hb, cb, d, forget_bias)
        h[sel] = hb
        c[sel] = cb

    run_split(run, blocks, threads)
    shape = c_prev.shape
    return h.astype(out_dtype, copy=False).reshape(shape), c.astype(out_dtype, copy=False).reshape(shape)


def lstm_unit_gradient(c_prev, gates, c, h, dc_out, dh_out, seq_lengths, t,
                       forget_bias=0.0, drop_states=False):
    """Returns (dH_prev, dC_prev, dGates) with the shapes of h/c_prev and gates."""
    out_dtype = np.float16 if c_prev.dtype == np.float16 else np.float32
    n, d = c_prev.shape[-2], c_prev.shape[-1]
    f32 = lambda a, cols: np.asarray(a, dtype=np.float32).reshape(n, cols)
    g = f32(gates, 4 * d)
    i = 1 / (1 + np.exp(-g[:, :d]))
    f = 1 / (1 + np.exp(-(g[:, d:2 * d] + np.float32(forget_bias))))
    o = 1 / (1 + np.exp(-g[:, 2 * d:3 * d]))
    gg = np.tanh(g[:, 3 * d:])
    cp, cc = f32(c_prev, d), f32(c, d)
    dC, dH = f32(dc_out, d), f32(dh_out, d)
    tc = np.tanh(cc)
    dc = dC + dH * o * (1 - tc * tc)
    dc_prev = dc * f
    dh_prev = np.zeros_like(dc)
    dgates = np.concatenate([dc * gg * i * (1 - i), dc * cp * f * (1 - f),
                             dH * tc * o * (1 - o), dc * i * (1 - gg * gg)], axis=1)
    valid = _valid_rows(n, seq_lengths, t)
    if valid is not None and not valid.all():
        keep = ~valid
        dgates[keep] = 0
        if drop_states:
            dh_prev[keep] = 0
            dc_prev[keep] = 0
        else:
            dh_prev[keep] = dH[keep]
            dc_prev[keep] = dC[keep]
    shape = c_prev.shape
    return (dh_prev.astype(out_dtype).reshape(shape), dc_prev.astype(out_dtype).reshape(shape),
            dgates.astype(out_dtype).reshape(gates.shape))
