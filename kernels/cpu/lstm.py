"""LSTM unit forward and backward (Caffe2's LstmUnitCpu / LstmUnitGradientCpu).

Gates per row are laid out [i | f | o | g], each D wide. Rows whose timestep is at
or past their sequence length are "invalid": they keep the previous state (or
zeros with drop_states). Math is done in float32 (float16 inputs are upconverted
and results converted back).

Speed notes: sigmoid is computed as 0.5 * tanh(0.5 x) + 0.5 over the contiguous
i, f, o block in one pass (one transcendental per element, no exp overflow), and
the work happens in place on one scratch copy of the gates.
"""
import numpy as np


def _valid_rows(n, seq_lengths, t):
    if seq_lengths is None:
        return None
    return np.asarray(t) < np.asarray(seq_lengths).reshape(n)


def lstm_unit(h_prev, c_prev, gates, seq_lengths, t, forget_bias=0.0, drop_states=False):
    """Returns (H, C) shaped like h_prev/c_prev ([1, N, D]); gates [1, N, 4D]."""
    dtype = np.float16 if c_prev.dtype == np.float16 else np.float32
    n, d = c_prev.shape[-2], c_prev.shape[-1]
    g = np.array(gates.reshape(n, 4 * d), dtype=np.float32)   # scratch copy, modified in place
    if forget_bias:
        g[:, d:2 * d] += np.float32(forget_bias)
    ifo = g[:, :3 * d]
    ifo *= np.float32(0.5)
    np.tanh(ifo, out=ifo)
    ifo *= np.float32(0.5)
    ifo += np.float32(0.5)
    gg = g[:, 3 * d:]
    np.tanh(gg, out=gg)
    i, f, o = g[:, :d], g[:, d:2 * d], g[:, 2 * d:3 * d]
    cp = c_prev.reshape(n, d).astype(np.float32, copy=False)
    c = f * cp
    i *= gg
    c += i
    h = np.tanh(c)
    h *= o
    valid = _valid_rows(n, seq_lengths, t)
    if valid is not None and not valid.all():
        keep = ~valid
        if drop_states:
            c[keep] = 0
            h[keep] = 0
        else:
            c[keep] = cp[keep]
            h[keep] = h_prev.reshape(n, d)[keep]
    shape = c_prev.shape
    return h.astype(dtype, copy=False).reshape(shape), c.astype(dtype, copy=False).reshape(shape)


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
