"""GRU unit forward and backward (Caffe2's GRUUnit / GRUUnitGradient).

Gates per row are [reset | update | output], each D wide, pre-activation; the
reset gate was already applied by the step net, so the unit reads only update
(u) and output (o): H = H_prev * sigmoid(u) + tanh(o) * (1 - sigmoid(u)). Rows
at or past their sequence length keep H_prev (zeros with drop_states). Math in
float32; results are converted back to the input's dtype.
"""
import numpy as np


def _sigmoid(x):
    return 0.5 * np.tanh(0.5 * x) + 0.5     # no exp overflow for large |x|


def _valid(n, seq_lengths, t):
    if seq_lengths is None:
        return np.ones(n, bool)
    return t < np.asarray(seq_lengths).reshape(n)


def gru_unit(h_prev, gates, seq_lengths, t, drop_states=False):
    """h_prev [1, N, D], gates [1, N, 3D] -> H [1, N, D]."""
    n, d = h_prev.shape[1], h_prev.shape[2]
    hp = h_prev.reshape(n, d).astype(np.float32, copy=False)
    g = gates.reshape(n, 3 * d).astype(np.float32, copy=False)
    u = _sigmoid(g[:, d:2 * d])
    h = hp * u + np.tanh(g[:, 2 * d:]) * (1.0 - u)
    valid = _valid(n, seq_lengths, t)
    if not valid.all():
        h[~valid] = 0.0 if drop_states else hp[~valid]
    return h.astype(h_prev.dtype, copy=False).reshape(h_prev.shape)


def gru_unit_gradient(h_prev, gates, seq_lengths, t, dh, drop_states=False):
    """(dH_prev, dGates) for gru_unit; the reset part of dGates is zero."""
    n, d = h_prev.shape[1], h_prev.shape[2]
    hp = h_prev.reshape(n, d).astype(np.float32, copy=False)
    g = gates.reshape(n, 3 * d).astype(np.float32, copy=False)
    dh2 = dh.reshape(n, d).astype(np.float32, copy=False)
    u = _sigmoid(g[:, d:2 * d])
    o = np.tanh(g[:, 2 * d:])
    dh_prev = dh2 * u
    dgates = np.zeros((n, 3 * d), np.float32)
    dgates[:, d:2 * d] = dh2 * (hp - o) * u * (1.0 - u)
    dgates[:, 2 * d:] = dh2 * (1.0 - u) * (1.0 - o * o)
    valid = _valid(n, seq_lengths, t)
    if not valid.all():
        dh_prev[~valid] = 0.0 if drop_states else dh2[~valid]
        dgates[~valid] = 0.0
    return (dh_prev.astype(h_prev.dtype, copy=False).reshape(h_prev.shape),
            dgates.astype(gates.dtype, copy=False).reshape(gates.shape))
