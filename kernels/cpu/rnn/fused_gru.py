"""A whole GRU sequence (gru_cell.GRU's step net) in one compiled pass, forward and
backward through time; see fused_lstm.py for the scheme.

The step net computes, per timestep t, with x_t = [x_r | x_z | x_n] the input
projection and h = h_{t-1}:
    r_pre = (W_r h + b_r) + x_r;  z_pre = (W_z h + b_z) + x_z;  rs = sigmoid(r_pre)
    linear_before_reset:      og = W_n h + b_n;  n_pre = rs * og + x_n
    otherwise:  mh = rs * h;  og = W_n mh + b_n; n_pre = og + x_n
    gates_t = [r_pre | z_pre | n_pre];  h_t = GRUUnit: h * u + tanh(n_pre) * (1 - u), u = sigmoid(z_pre)
(rows past their length keep h, or get zeros with drop_states). The recurrent weights
come stacked, w3 = [W_r; W_z; W_n] ([W_r; W_z] without linear_before_reset, where
W_n multiplies mh in a second product per step). Saved for the backward pass and
the step workspaces: gates, og, rs (and mh).

Backward keeps dP = [dr_pre | dz_pre | d og] per step; the weight and bias
gradients are products over all T * N rows after the loop. The small helpers are
this module's own (numba's disk cache follows edits to the caller's file only).
"""
import math

import numpy as np

from ..runtime.blas import gemm_entry
from ..math.gemm import matmul
from ..math.packed_gemm import packed_product
from ..runtime.jit import LazyGlobal, call_gemv, compiled, prange
from .fused_lstm import _packed, batch_blocks, run_on_blocks

LANES_8 = LazyGlobal(".simd", "LANES_8")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vsplat = LazyGlobal(".simd", "vsplat")
vadd = LazyGlobal(".simd", "vadd")
vsub = LazyGlobal(".simd", "vsub")
vmul = LazyGlobal(".simd", "vmul")
vsigmoid = LazyGlobal(".simd", "vsigmoid")
vtanh = LazyGlobal(".simd", "vtanh")
address = LazyGlobal(".simd", "address")


@compiled(inline=True)
def _sig(x):
    return np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-x)))


@compiled
def _times_wt(out, a, lda, w, wp, n, m, k, gemm, gemv, ilp64):
    """out (n, m), C-contiguous at `out` (an address) = a (n, k; lda) @ w^T, w (m, k)
    C-contiguous, wp = w^T packed (math/packed_gemm.py; read when n > 1)."""
    if n == 1:
        call_gemv(gemv, ilp64, False, m, k, w.ctypes.data, k, a, 1, out, 1, w)
    else:
        packed_product(a, lda, n, wp, m, out, m)


@compiled
def _times_w(out, a, lda, w, wp, n, m, k, gemm, gemv, ilp64):
    """out (n, k) at `out` = a (n, m; lda) @ w, w (m, k) C-contiguous, wp = w packed."""
    if n == 1:
        call_gemv(gemv, ilp64, True, m, k, w.ctypes.data, k, a, 1, out, 1, w)
    else:
        packed_product(a, lda, n, wp, k, out, k)


@compiled
def _gru_forward(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, r0, r1, gemm, gemv, ilp64):
    """Batch rows r0..r1 of: x [T, N, 3D]; w3 [R, D] (R = 3D with lbr, else 2D); wn
    [D, D] (read without lbr); b [3D]; hs [T + 1, N, D] (step 0 given); gates
    [T, N, 3D], og, rs, mh [T, N, D] written (mh without lbr); proj [N, R] scratch."""
    steps, n, d = x.shape[0], x.shape[1], hs.shape[2]
    rows = w3.shape[0]
    zero = np.float32(0.0)
    one = np.float32(1.0)
    count, last = (d + 7) // 8, d - 8
    for t in range(steps):
        _times_wt(proj.ctypes.data + 4 * r0 * rows, hs.ctypes.data + 4 * (t * n + r0) * d, d, w3, p3, r1 - r0,
                  rows, d, gemm, gemv, ilp64)
        for r in range(r0, r1):
            g, p, xr = gates[t, r], proj[r], x[t, r]
            for j in range(2 * d):
                g[j] = (p[j] + b[j]) + xr[j]
            if lbr:
                o = og[t, r]
                for j in range(d):
                    o[j] = p[2 * d + j] + b[2 * d + j]
            s = rs[t, r]
            if d >= 8:
                ga, sa = address(gates) + 4 * (t * n + r) * 3 * d, address(rs) + 4 * (t * n + r) * d
                for q in range(count):
                    j = 4 * min(8 * q, last)
                    vstore_f32_at(sa + j, vsigmoid(vload_f32(LANES_8, ga + j)))
            else:
                for j in range(d):
                    s[j] = _sig(g[j])
        if not lbr:
            for r in range(r0, r1):
                m, s, h = mh[t, r], rs[t, r], hs[t, r]
                for j in range(d):
                    m[j] = s[j] * h[j]
            _times_wt(og.ctypes.data + 4 * (t * n + r0) * d, mh.ctypes.data + 4 * (t * n + r0) * d, d, wn, pn,
                      r1 - r0, d, d, gemm, gemv, ilp64)
            for r in range(r0, r1):
                o = og[t, r]
                for j in range(d):
                    o[j] += b[2 * d + j]
        for r in range(r0, r1):
            g, o, s, xr = gates[t, r], og[t, r], rs[t, r], x[t, r]
            if lbr:
                for j in range(d):
                    g[2 * d + j] = s[j] * o[j] + xr[2 * d + j]
            else:
                for j in range(d):
                    g[2 * d + j] = o[j] + xr[2 * d + j]
            valid = not has_seq or t < seq[r]
            h, ho = hs[t, r], hs[t + 1, r]
            if not valid:
                for j in range(d):
                    ho[j] = zero if drop else h[j]
            elif d >= 8:
                ga = address(gates) + 4 * (t * n + r) * 3 * d
                hp = address(hs) + 4 * (t * n + r) * d
                hq = hp + 4 * n * d
                ones = vsplat(LANES_8, one)
                for q in range(count):
                    j = 4 * min(8 * q, last)
                    u = vsigmoid(vload_f32(LANES_8, ga + 4 * d + j))
                    nn = vtanh(vload_f32(LANES_8, ga + 8 * d + j))
                    vstore_f32_at(hq + j, vadd(vmul(vload_f32(LANES_8, hp + j), u), vmul(nn, vsub(ones, u))))
            else:
                for j in range(d):
                    u = _sig(g[d + j])
                    ho[j] = h[j] * u + np.float32(math.tanh(g[2 * d + j])) * (one - u)


def _sigmoid_numpy(v):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-v))


@_gru_forward.numpy_twin
def _gru_forward_numpy(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, r0, r1, gemm, gemv,
                       ilp64):
    d = hs.shape[2]
    x, hs, gates, og, rs, mh = (a[:, r0:r1] for a in (x, hs, gates, og, rs, mh))
    seq = seq[r0:r1]
    for t in range(x.shape[0]):
        p = hs[t] @ w3.T
        gates[t, :, :2 * d] = (p[:, :2 * d] + b[:2 * d]) + x[t, :, :2 * d]
        with np.errstate(all="ignore"):
            rs[t] = _sigmoid_numpy(gates[t, :, :d])
            if lbr:
                og[t] = p[:, 2 * d:] + b[2 * d:]
                gates[t, :, 2 * d:] = rs[t] * og[t] + x[t, :, 2 * d:]
            else:
                mh[t] = rs[t] * hs[t]
                og[t] = mh[t] @ wn.T + b[2 * d:]
                gates[t, :, 2 * d:] = og[t] + x[t, :, 2 * d:]
            u = _sigmoid_numpy(gates[t, :, d:2 * d])
            h = hs[t] * u + np.tanh(gates[t, :, 2 * d:]) * (np.float32(1.0) - u)
        valid = ((t < seq[:x.shape[1]]) if has_seq else np.ones(x.shape[1], bool))[:, None]
        hs[t + 1] = np.where(valid, h, np.float32(0.0) if drop else hs[t])


@compiled(parallel=True)
def _gru_forward_team(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, bounds, gemm,
                      gemv, ilp64):
    """_gru_forward on row blocks bounds[k]..bounds[k + 1], one per team thread."""
    for k in prange(bounds.shape[0] - 1):
        _gru_forward(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, bounds[k],
                     bounds[k + 1], gemm, gemv, ilp64)


@_gru_forward_team.numpy_twin
def _gru_forward_team_numpy(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, bounds,
                            gemm, gemv, ilp64):
    for k in range(bounds.shape[0] - 1):
        _gru_forward_numpy(x, w3, wn, p3, pn, b, hs, gates, og, rs, mh, proj, seq, has_seq, lbr, drop, bounds[k],
                           bounds[k + 1], gemm, gemv, ilp64)


@compiled
def _gru_backward(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc, r0, r1,
                  gemm, gemv, ilp64):
    """Batch rows r0..r1 (independent of the others) of: dhs [T + 1, N, D]: gradients
    from outside, updated in place (dhs[0]: the initial
    state's on return); dgates [T, N, 3D] (the input projection's gradient) and
    dp [T, N, 3D] (the recurrent products' output gradients) written; du, dfc [N, D] scratch."""
    steps, n, d = gates.shape[0], gates.shape[1], hs.shape[2]
    rows = w3.shape[0]
    zero = np.float32(0.0)
    one = np.float32(1.0)
    count, last = (d + 7) // 8, d - 8
    for t in range(steps - 1, -1, -1):
        for r in range(r0, r1):
            valid = not has_seq or t < seq[r]
            dg, dh, uu = dgates[t, r], dhs[t + 1, r], du[r]
            if not valid:
                for j in range(3 * d):
                    dg[j] = zero
                for j in range(d):
                    uu[j] = zero if drop else dh[j]
            elif d >= 8:
                ga = address(gates) + 4 * (t * n + r) * 3 * d
                dga = address(dgates) + 4 * (t * n + r) * 3 * d
                hp = address(hs) + 4 * (t * n + r) * d
                dhp = address(dhs) + 4 * ((t + 1) * n + r) * d
                dua = address(du) + 4 * r * d
                ones = vsplat(LANES_8, one)
                for q in range(count):
                    j = 4 * min(8 * q, last)
                    u = vsigmoid(vload_f32(LANES_8, ga + 4 * d + j))
                    o = vtanh(vload_f32(LANES_8, ga + 8 * d + j))
                    dhv = vload_f32(LANES_8, dhp + j)
                    omu = vsub(ones, u)
                    vstore_f32_at(dga + 4 * d + j, vmul(vmul(dhv, vsub(vload_f32(LANES_8, hp + j), o)), vmul(u, omu)))
                    vstore_f32_at(dga + 8 * d + j, vmul(vmul(dhv, omu), vsub(ones, vmul(o, o))))
                    vstore_f32_at(dua + j, vmul(dhv, u))
            else:
                g, h = gates[t, r], hs[t, r]
                for j in range(d):
                    u = _sig(g[d + j])
                    o = np.float32(math.tanh(g[2 * d + j]))
                    dg[d + j] = dh[j] * (h[j] - o) * u * (one - u)
                    dg[2 * d + j] = dh[j] * (one - u) * (one - o * o)
                    uu[j] = dh[j] * u
        if not lbr:     # d mh = d n_pre @ W_n, into dfc
            _times_w(dfc.ctypes.data + 4 * r0 * d, dgates.ctypes.data + 4 * ((t * n + r0) * 3 * d + 2 * d), 3 * d,
                     wn, pn, r1 - r0, d, d, gemm, gemv, ilp64)
        for r in range(r0, r1):
            dg, pr, s, o, h, uu, m = dgates[t, r], dp[t, r], rs[t, r], og[t, r], hs[t, r], du[r], dfc[r]
            for j in range(d):
                ds = dg[2 * d + j]
                if lbr:
                    drs = ds * o[j]
                    pr[2 * d + j] = ds * s[j]
                else:
                    drs = m[j] * h[j]
                    uu[j] += m[j] * s[j]
                    pr[2 * d + j] = ds
                dr = drs * s[j] * (one - s[j])
                dg[j] = dr
                pr[j] = dr
                pr[d + j] = dg[d + j]
        _times_w(dfc.ctypes.data + 4 * r0 * d, dp.ctypes.data + 4 * (t * n + r0) * 3 * d, 3 * d, w3, p3, r1 - r0,
                 rows, d, gemm, gemv, ilp64)
        for r in range(r0, r1):
            out, uu, m = dhs[t, r], du[r], dfc[r]
            for j in range(d):
                out[j] += uu[j] + m[j]


@_gru_backward.numpy_twin
def _gru_backward_numpy(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc, r0, r1,
                        gemm, gemv, ilp64):
    d = hs.shape[2]
    hs, gates, og, rs, dhs, dgates, dp = (a[:, r0:r1] for a in (hs, gates, og, rs, dhs, dgates, dp))
    seq = seq[r0:r1]
    one = np.float32(1.0)
    for t in range(gates.shape[0] - 1, -1, -1):
        n = gates.shape[1]
        valid = ((t < seq[:n]) if has_seq else np.ones(n, bool))[:, None]
        dh = dhs[t + 1]
        with np.errstate(all="ignore"):
            u = _sigmoid_numpy(gates[t, :, d:2 * d])
            o = np.tanh(gates[t, :, 2 * d:])
            dz = np.where(valid, dh * (hs[t] - o) * u * (one - u), 0)
            ds = np.where(valid, dh * (one - u) * (one - o * o), 0)
            uu = np.where(valid, dh * u, 0 if drop else dh)
            s = rs[t]
            if lbr:
                drs, dog = ds * og[t], ds * s
            else:
                m = ds @ wn
                drs, dog = m * hs[t], ds
                uu = uu + m * s
            dr = drs * s * (one - s)
        dgates[t] = np.concatenate([dr, dz, ds], axis=1)
        dp[t] = np.concatenate([dr, dz, dog], axis=1)
        dhs[t] += uu + dp[t, :, :w3.shape[0]] @ w3


@compiled(parallel=True)
def _gru_backward_team(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc, bounds,
                       gemm, gemv, ilp64):
    """_gru_backward on row blocks bounds[k]..bounds[k + 1], one per team thread."""
    for k in prange(bounds.shape[0] - 1):
        _gru_backward(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc, bounds[k],
                      bounds[k + 1], gemm, gemv, ilp64)


@_gru_backward_team.numpy_twin
def _gru_backward_team_numpy(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc,
                             bounds, gemm, gemv, ilp64):
    for k in range(bounds.shape[0] - 1):
        _gru_backward_numpy(w3, wn, p3, pn, hs, gates, og, rs, seq, has_seq, lbr, drop, dhs, dgates, dp, du, dfc,
                            bounds[k], bounds[k + 1], gemm, gemv, ilp64)


def available():
    return gemm_entry(np.float32) is not None


def _check(cond, what):
    if not cond:
        raise ValueError("fused GRU: " + what)


def _f32(arrays):
    for a, shape in arrays:
        _check(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == shape,
               "expected a C-contiguous float32 %s, got %s %s" % (list(shape), a.dtype, list(a.shape)))


def _seq_array(seq_lengths, n):
    if seq_lengths is None:
        return np.zeros(max(n, 1), np.int64), False
    return np.ascontiguousarray(np.asarray(seq_lengths).reshape(n), dtype=np.int64), True


def gru_sequence(x, w3, wn, b, hs, seq_lengths, linear_before_reset, drop_states):
    """Forward. x [T, N, 3D]; w3 [3D, D] with linear_before_reset, else [2D, D] and wn
    [D, D]; b [3D]; hs [T + 1, N, D], step 0 the initial state. Returns the saved
    per-step blobs: (gates [T, N, 3D], og, rs, mh [T, N, D]; mh None with lbr)."""
    steps, n, d = x.shape[0], x.shape[1], hs.shape[2]
    lbr = bool(linear_before_reset)
    _f32([(x, (steps, n, 3 * d)), (w3, ((3 if lbr else 2) * d, d)), (b, (3 * d,)), (hs, (steps + 1, n, d))]
         + ([] if lbr else [(wn, (d, d))]))
    gates = np.empty((steps, n, 3 * d), np.float32)
    og, rs = np.empty((steps, n, d), np.float32), np.empty((steps, n, d), np.float32)
    mh = None if lbr else np.empty((steps, n, d), np.float32)
    if steps and n and d:
        seq, has_seq = _seq_array(seq_lengths, n)
        p3 = _packed(w3.T, n)
        run_on_blocks(_gru_forward, _gru_forward_team, batch_blocks(n, steps * 3 * d * d),
                      x, w3, w3 if lbr else wn, p3, p3 if lbr else _packed(wn.T, n), b, hs, gates, og, rs,
                      og if lbr else mh,
                      np.empty((n, w3.shape[0]), np.float32), seq, has_seq, lbr, bool(drop_states))
    return gates, og, rs, mh


def gru_sequence_gradient(w3, wn, hs, saved, seq_lengths, linear_before_reset, drop_states, dhs):
    """Backward through time for gru_sequence (saved: its result). dhs [T + 1, N, D]:
    gradients from outside, updated in place (step 0: the initial state's). Returns
    (dgates [T, N, 3D], dw3 like w3, dwn [D, D] or None, db [3D])."""
    gates, og, rs, mh = saved
    steps, n, d = gates.shape[0], gates.shape[1], hs.shape[2]
    lbr = bool(linear_before_reset)
    _f32([(w3, ((3 if lbr else 2) * d, d)), (hs, (steps + 1, n, d)), (dhs, (steps + 1, n, d)),
          (gates, (steps, n, 3 * d)), (og, (steps, n, d)), (rs, (steps, n, d))]
         + ([] if lbr else [(wn, (d, d)), (mh, (steps, n, d))]))
    dgates = np.zeros((steps, n, 3 * d), np.float32)
    dp = np.zeros((steps, n, 3 * d), np.float32)
    if steps and n and d:
        seq, has_seq = _seq_array(seq_lengths, n)
        scratch = np.empty((2, n, d), np.float32)
        p3 = _packed(w3, n)
        run_on_blocks(_gru_backward, _gru_backward_team, batch_blocks(n, steps * 3 * d * d),
                      w3, w3 if lbr else wn, p3, p3 if lbr else _packed(wn, n), hs, gates, og, rs, seq, has_seq,
                      lbr, bool(drop_states), dhs, dgates,
                      dp, scratch[0], scratch[1])
    flat = dp.reshape(steps * n, 3 * d)
    h_flat = hs[:steps].reshape(steps * n, d)
    rows = w3.shape[0]
    dw3 = matmul(flat[:, :rows].T, h_flat)          # products over all steps, on the team
    dwn = None if lbr else matmul(flat[:, 2 * d:].T, mh.reshape(steps * n, d))
    return dgates, dw3, dwn, flat.sum(axis=0)
