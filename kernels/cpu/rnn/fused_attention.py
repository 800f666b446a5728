"""An LSTM decoder with attention (rnn_cell.LSTMWithAttention, Regular, Recurrent
or Dot attention) over a whole sequence, forward and backward through time, for
RecurrentNetwork's fused path (operators/rnn/fused_attention_run.py).

Per decoder step t (E = encoder_output_dim, T_enc encoder steps):
    gates_t = [h_{t-1}, ctx_{t-1}] @ W^T + b + x_t
    h_t, c_t = LSTMUnit(h_{t-1}, c_{t-1}, gates_t, seq_lengths, t)
    q_t = h_t @ Wd^T + bd                                  (Dot with D == E: q_t = h_t)
    Recurrent: q_t = (ctx_{t-1} @ Wc^T + bc) + (h_t @ Wd^T + bd), then as Regular
    SoftCoverage: Regular with s_t = tanh((wenc + q_t) + cw * cov_{t-1}^T) and a fourth
             state cov_t = cov_{t-1} + weights_t [N, T_enc]
    Regular: s_t = tanh(wenc + q_t) [T_enc, N, E]; logits_t = s_t @ v^T + bv
    Dot:     logits_t[n, j] = enc_t[n, :, j] . q_t[n]
    weights_t = softmax over j of logits_t (j >= encoder_lengths[n] masked to -inf)
    ctx_t[n] = enc_t[n] @ weights_t[n]

The loop over time is Python; each step is a few whole-batch NumPy/BLAS calls and
the LSTM unit is LSTMUnit's own compiled kernel (kernels/cpu/rnn/lstm.py), so
there is no per-op dispatch, no step workspace and no link copying per step.
Backward runs t = T-1 .. 0 once; the parameter gradients that need nothing from
later steps (W, b, Wd, bd, v, bv, the encoder outputs' transposed gradient) are
single GEMMs / einsums over all steps after the loop, which equals the step net's
per-step sums up to float rounding.

float32 and C-contiguous arrays only; the caller (fused_attention_run.py) checks
every shape before calling.
"""
import math

import numpy as np

from ..math.elementwise import softmax_2d
from ..math.gemm import matmul
from ..math.team_gemm import gemm_into
from ..math.elementwise_grad import softmax_grad
from ..runtime.jit import LazyGlobal, compiled
from .lstm import lstm_unit, lstm_unit_gradient

LANES_8 = LazyGlobal("..runtime.simd", "LANES_8")
vload_f32 = LazyGlobal("..runtime.simd", "vload_f32")
vstore_f32_at = LazyGlobal("..runtime.simd", "vstore_f32_at")
vadd = LazyGlobal("..runtime.simd", "vadd")
vmuls = LazyGlobal("..runtime.simd", "vmuls")
vtanh = LazyGlobal("..runtime.simd", "vtanh")
address = LazyGlobal("..runtime.simd", "address")


@compiled
def _scores(wenc, q, cw, cov, has_cov, v, bv, s, logits):
    """Regular-family attention of one step, one pass over [T_enc, N, E]:
    s[j, r] = tanh((wenc[j, r] + q[r]) (+ cw[j, r] * cov[r, j])), logits[r, j] =
    s[j, r] . v + bv. All C-contiguous float32 (cw, cov unused without has_cov)."""
    t_enc, n, e = wenc.shape
    count, last = (e + 7) // 8, e - 8
    for j in range(t_enc):
        for r in range(n):
            row = 4 * (j * n + r) * e
            if e >= 8:
                for k in range(count):        # the last block overlaps the one before: same values
                    off = 4 * min(8 * k, last)
                    x = vadd(vload_f32(LANES_8, address(wenc) + row + off),
                             vload_f32(LANES_8, address(q) + 4 * r * e + off))
                    if has_cov:
                        x = vadd(x, vmuls(vload_f32(LANES_8, address(cw) + row + off), cov[r, j]))
                    vstore_f32_at(address(s) + row + off, vtanh(x))
            else:
                for k in range(e):
                    x = wenc[j, r, k] + q[r, k]
                    if has_cov:
                        x = x + cw[j, r, k] * cov[r, j]
                    s[j, r, k] = np.float32(math.tanh(x))
            acc = np.float32(0.0)
            srow = s[j, r]
            for k in range(e):
                acc += srow[k] * v[k]
            logits[r, j] = acc + bv


@_scores.numpy_twin
def _scores_numpy(wenc, q, cw, cov, has_cov, v, bv, s, logits):
    np.add(wenc, q, out=s)
    if has_cov:
        s += cw * cov.T[:, :, None]
    np.tanh(s, out=s)
    t_enc, n, e = s.shape
    logits[...] = (s.reshape(t_enc * n, e) @ v + bv).reshape(t_enc, n).T


@compiled
def _scores_backward(dl, v, s, cw, cov, has_cov, dwenc, dq, dcw, dcov):
    """_scores' gradient for logits' gradient dl [N, T_enc]: dz = dl[r, j] v (1 - s^2);
    dwenc += dz; dq[r] = sum_j dz (written); with has_cov dcw += dz cov[r, j] and
    dcov[r, j] += dz . cw[j, r]."""
    t_enc, n, e = s.shape
    for r in range(n):
        dqr = dq[r]
        for k in range(e):
            dqr[k] = np.float32(0.0)
    for j in range(t_enc):
        for r in range(n):
            c = dl[r, j]
            srow, dwrow, dqr = s[j, r], dwenc[j, r], dq[r]
            for k in range(e):
                dz = c * v[k] * (np.float32(1.0) - srow[k] * srow[k])
                dwrow[k] += dz
                dqr[k] += dz
            if has_cov:
                acc = np.float32(0.0)
                cwrow, dcwrow, cv = cw[j, r], dcw[j, r], cov[r, j]
                for k in range(e):
                    dz = c * v[k] * (np.float32(1.0) - srow[k] * srow[k])
                    dcwrow[k] += dz * cv
                    acc += dz * cwrow[k]
                dcov[r, j] += acc


@_scores_backward.numpy_twin
def _scores_backward_numpy(dl, v, s, cw, cov, has_cov, dwenc, dq, dcw, dcov):
    dz = dl.T[:, :, None] * v
    dz *= np.float32(1.0) - s * s
    dwenc += dz
    dq[...] = dz.sum(axis=0)
    if has_cov:
        dcw += dz * cov.T[:, :, None]
        dcov += (dz * cw).sum(axis=2).T


class AttentionWeights:
    """The parameters of one attention decoder: w [4D, D + E], b [4D]; wd [E, D] and
    bd [E] or None (Dot with D == E); wc [E, E], bc [E] (Recurrent) or None; wenc
    [T_enc, N, E], v [1, E], bv [1] (Regular and Recurrent: `regular` set; None for
    Dot); cw [T_enc, N, E] (SoftCoverage's coverage weights) or None; enc_t [N, E,
    T_enc]; enc_len [N] int or None."""
    __slots__ = ("regular", "w", "b", "wd", "bd", "wc", "bc", "wenc", "v", "bv", "cw", "enc_t", "enc_len")

    def __init__(self, regular, w, b, wd, bd, wc, bc, wenc, v, bv, cw, enc_t, enc_len):
        self.regular, self.w, self.b, self.wd, self.bd, self.wc, self.bc = regular, w, b, wd, bd, wc, bc
        self.wenc, self.v, self.bv, self.cw, self.enc_t, self.enc_len = wenc, v, bv, cw, enc_t, enc_len

    def masked(self):
        """[N, T_enc] bool: the encoder steps past each row's length, or None."""
        if self.enc_len is None:
            return None
        return np.arange(self.enc_t.shape[2])[None, :] >= self.enc_len[:, None]


class AttentionSaved:
    """What the forward keeps for the backward and for the step workspaces: per step
    gates [T, N, 4D], q [T, N, E], logits [T, N, T_enc] (before the mask), weights
    [T, N, T_enc], and for Regular summed = s_t [T, T_enc, N, E]."""
    __slots__ = ("gates", "q", "logits", "weights", "summed")

    def __init__(self, gates, q, logits, weights, summed):
        self.gates, self.q, self.logits, self.weights, self.summed = gates, q, logits, weights, summed


def attention_lstm_sequence(x, p, hs, cs, ctxs, covs, seq_lengths, forget_bias, drop_states):
    """Forward over x [T, N, 4D] (the input projection). hs, cs [T + 1, N, D], ctxs
    [T + 1, N, E] and (SoftCoverage, else None) covs [T + 1, N, T_enc] hold the
    initial states at step 0; steps 1..T are written.
    Returns an AttentionSaved."""
    steps, n, d = x.shape[0], x.shape[1], hs.shape[2]
    e, t_enc = p.enc_t.shape[1], p.enc_t.shape[2]
    saved = AttentionSaved(np.empty((steps, n, 4 * d), np.float32), np.empty((steps, n, e), np.float32),
                           np.empty((steps, n, t_enc), np.float32), np.empty((steps, n, t_enc), np.float32),
                           np.empty((steps, t_enc, n, e), np.float32) if p.regular else None)
    masked = p.masked()
    enc_rows = p.enc_t.transpose(0, 2, 1)                  # [N, T_enc, E]
    for t in range(steps):
        gates = saved.gates[t]
        gemm_into(np.concatenate([hs[t], ctxs[t]], axis=1), p.w.T, gates)
        gates += p.b
        gates += x[t]
        h, c = lstm_unit(hs[t][None], cs[t][None], gates[None], seq_lengths, t, forget_bias, drop_states)
        hs[t + 1], cs[t + 1] = h[0], c[0]
        q = saved.q[t]
        if p.wd is not None:
            gemm_into(hs[t + 1], p.wd.T, q)
            q += p.bd
        else:
            q[...] = hs[t + 1]
        if p.wc is not None:
            q[...] = (matmul(ctxs[t], p.wc.T) + p.bc) + q
        logits = saved.logits[t]
        if p.regular:
            cov = covs[t] if p.cw is not None else logits
            _scores(p.wenc, q, p.wenc if p.cw is None else p.cw, cov, p.cw is not None, p.v[0], p.bv[0],
                    saved.summed[t], logits)
        else:
            np.matmul(enc_rows, q[:, :, None], out=logits[:, :, None])
        scores = logits if masked is None else np.where(masked, np.float32(-np.inf), logits)
        with np.errstate(invalid="ignore"):          # a row with every step masked: NaN, as the step net gives
            saved.weights[t] = softmax_2d(scores.copy())
        np.matmul(p.enc_t, saved.weights[t][:, :, None], out=ctxs[t + 1][:, :, None])
        if p.cw is not None:
            np.add(covs[t], saved.weights[t], out=covs[t + 1])
    return saved


def attention_lstm_sequence_gradient(x_shape, p, hs, cs, ctxs, covs, saved, seq_lengths, forget_bias,
                                     drop_states, dhs, dcs, dctxs, dcovs):
    """Backward through time. dhs, dcs, dctxs, dcovs: the gradients arriving from outside
    ([T + 1, N, *], step t + 1 for step t's outputs), updated in place: on return
    step 0 holds the initial states' gradients. Returns {role: gradient} for
    'input' (the input projection's, [T, N, 4D]), 'weight', 'bias', 'wd_w', 'wd_b',
    'wc_w', 'wc_b', 'wenc', 'cw', 'v', 'bv', 'enc_t' (those the decoder has)."""
    steps, n, d = x_shape[0], x_shape[1], hs.shape[2]
    e, t_enc = p.enc_t.shape[1], p.enc_t.shape[2]
    masked = p.masked()
    dgates = np.empty((steps, n, 4 * d), np.float32)
    dlogits = np.empty((steps, n, t_enc), np.float32)
    dq = np.empty((steps, n, e), np.float32)
    dwenc = np.zeros((t_enc, n, e), np.float32) if p.regular else None
    dcw = np.zeros((t_enc, n, e), np.float32) if p.cw is not None else None
    enc_rows = p.enc_t.transpose(0, 2, 1)
    for t in range(steps - 1, -1, -1):
        dctx = dctxs[t + 1]
        dweights = np.matmul(enc_rows, dctx[:, :, None])[:, :, 0]           # [N, T_enc]
        if p.cw is not None:
            dweights += dcovs[t + 1]                 # cov_t = cov_{t-1} + weights_t
            dcovs[t] += dcovs[t + 1]
        dl = softmax_grad(saved.weights[t], dweights, 1)
        if masked is not None:
            dl = np.where(masked, np.float32(0.0), dl)
        dlogits[t] = dl
        if p.regular:
            has_cov = p.cw is not None
            _scores_backward(dl, p.v[0], saved.summed[t], p.cw if has_cov else dwenc, covs[t] if has_cov else dl,
                             has_cov, dwenc, dq[t], dcw if has_cov else dwenc, dcovs[t] if has_cov else dl)
        else:
            np.matmul(p.enc_t, dl[:, :, None], out=dq[t][:, :, None])
        dh = dhs[t + 1] + (matmul(dq[t], p.wd) if p.wd is not None else dq[t])
        if p.wc is not None:
            dctxs[t] += matmul(dq[t], p.wc)
        dh_prev, dc_prev, dg = lstm_unit_gradient(cs[t][None], saved.gates[t][None], cs[t + 1][None],
                                                  hs[t + 1][None], dcs[t + 1][None], dh[None], seq_lengths, t,
                                                  forget_bias, drop_states)
        dgates[t] = dg[0]
        dcat = matmul(dg[0], p.w)                                             # [N, D + E]
        dhs[t] += dh_prev[0] + dcat[:, :d]
        dcs[t] += dc_prev[0]
        dctxs[t] += dcat[:, d:]
    flat_g = dgates.reshape(steps * n, 4 * d)
    cat = np.concatenate([hs[:steps], ctxs[:steps]], axis=2).reshape(steps * n, d + e)
    grads = {"input": dgates, "weight": matmul(flat_g.T, cat), "bias": flat_g.sum(axis=0)}
    # enc_t: the context's product with every step's weights, and Dot's logits' with q
    by_row = lambda a: a.transpose(1, 0, 2)  # noqa: E731    [T, N, k] -> [N, T, k]
    enc_grad = np.matmul(by_row(dctxs[1:]).transpose(0, 2, 1), by_row(saved.weights))
    if p.regular:
        flat_l = dlogits.transpose(0, 2, 1).reshape(-1)                       # [T, T_enc, N] rows
        grads.update(wenc=dwenc, v=(flat_l @ saved.summed.reshape(-1, e))[None, :],
                     bv=np.array([flat_l.sum()], np.float32))
        if p.cw is not None:
            grads["cw"] = dcw
    else:
        enc_grad += np.matmul(by_row(saved.q).transpose(0, 2, 1), by_row(dlogits))
    grads["enc_t"] = enc_grad.astype(np.float32, copy=False)
    flat_q = dq.reshape(steps * n, e)
    if p.wd is not None:
        grads.update(wd_w=matmul(flat_q.T, hs[1:].reshape(steps * n, d)), wd_b=flat_q.sum(axis=0))
    if p.wc is not None:
        grads.update(wc_w=matmul(flat_q.T, ctxs[:steps].reshape(steps * n, e)), wc_b=flat_q.sum(axis=0))
    return grads
