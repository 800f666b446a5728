"""A whole LSTM sequence in one compiled pass, forward and backward through time
(the fused path of RecurrentNetwork, operators/rnn/fused_steps.py).

The step net rnn_cell.LSTM builds is, per timestep t,
    gates_t = (h_{t-1} @ W^T + b) + x_t          (FC, then Sum with the input projection)
    h_t, c_t = LSTMUnit(h_{t-1}, c_{t-1}, gates_t, seq_lengths, t)
Here the loop over t runs in machine code: the recurrent product is one call per
step (OpenBLAS's GEMV for one row; otherwise math/packed_gemm.py's product on W
packed once per sequence, as OpenBLAS's GEMM would repack W on every step),
and the gate math is the same vector code as LSTMUnit's (8 columns at a time,
vsigmoid / vtanh). A row's recurrence reads only that row's states, so the batch
is cut into one block of rows per team thread and each thread runs the whole
sequence for its block with its own single-threaded GEMMs: no barrier per step
(splitting each step's GEMM by columns instead would need two per step). float32 only; every shape is checked by
the Python wrappers before the loop (the compiled loop has no bounds checks).

Backward keeps the forward's per-step gates and states and runs t = T-1 .. 0 once:
LSTMUnitGradient's math per row, then dh_{t-1} += dgates_t @ W. The weight and bias
gradients are not summed per step: dW = sum_t dgates_t^T h_{t-1} is one GEMM over
all T * N rows after the loop (split over the team) (and db one column sum), as the step net's summed
FCGradients would give up to float rounding.
"""
import math

import numpy as np

from ..runtime.blas import gemm_entry
from ..math.gemm import matmul
from ..math.packed_gemm import pack_columns, packed_product
from ..runtime.jit import LazyGlobal, call_gemv, compiled, prange, team, team_blocks

LANES_8 = LazyGlobal(".simd", "LANES_8")
vload_f32 = LazyGlobal(".simd", "vload_f32")
vstore_f32_at = LazyGlobal(".simd", "vstore_f32_at")
vsplat = LazyGlobal(".simd", "vsplat")
vadds = LazyGlobal(".simd", "vadds")
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
def _project(gates, t, h, x, w, wp, b, mi, pre, alpha, beta1, beta2, bias2, r0, r1, gemm, gemv, ilp64):
    """gates[t, r0:r1] = (h[t, r0:r1] @ w^T + b) + x[t, r0:r1], the step net's FC and Sum;
    with mi (MILSTM) pre[t] = h[t] @ w^T + b and gates[t] = (alpha x + beta1) pre + (beta2 x + bias2)."""
    n, g4 = gates.shape[1], gates.shape[2]
    d = w.shape[1]
    out = (pre if mi else gates).ctypes.data + 4 * (t * n + r0) * g4
    hp = h.ctypes.data + 4 * (t * n + r0) * d
    if r1 - r0 == 1:
        call_gemv(gemv, ilp64, False, g4, d, w.ctypes.data, d, hp, 1, out, 1, gates)
    else:
        packed_product(hp, d, r1 - r0, wp, g4, out, g4)
    for r in range(r0, r1):
        row = gates[t, r]
        xr = x[t, r]
        if mi:
            p = pre[t, r]
            for j in range(g4):
                v = p[j] + b[j]
                p[j] = v
                row[j] = (xr[j] * alpha[j] + beta1[j]) * v + (xr[j] * beta2[j] + bias2[j])
        else:
            for j in range(g4):
                row[j] = (row[j] + b[j]) + xr[j]


@compiled
def _lstm_forward(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2, bias2,
                  r0, r1, gemm, gemv, ilp64):
    """Batch rows r0..r1 of: hs, cs [T + 1, N, D] (step 0 the initial state, filled
    here for 1..T), gates [T, N, 4D] (written) from x [T, N, 4D], w [4D, D], b [4D];
    seq [N] int64. With mi (MILSTM): pre [T, N, 4D] written, alpha, beta1, beta2,
    bias2 [4D] read. Rows never read each other's state, so row blocks may run on
    different threads."""
    steps, n, d = x.shape[0], x.shape[1], w.shape[1]
    zero = np.float32(0.0)
    fb = np.float32(forget_bias)
    count, last = (d + 7) // 8, d - 8
    for t in range(steps):
        _project(gates, t, hs, x, w, wp, b, mi, pre, alpha, beta1, beta2, bias2, r0, r1, gemm, gemv, ilp64)
        for r in range(r0, r1):
            g = address(gates) + 4 * (t * n + r) * 4 * d
            hp = address(hs) + 4 * (t * n + r) * d
            cp = address(cs) + 4 * (t * n + r) * d
            ho = hp + 4 * n * d
            co = cp + 4 * n * d
            valid = not has_seq or t < seq[r]
            if d >= 8:
                for q in range(count):
                    j = 4 * min(8 * q, last)
                    if valid:
                        i = vsigmoid(vload_f32(LANES_8, g + j))
                        f = vsigmoid(vadds(vload_f32(LANES_8, g + 4 * d + j), fb))
                        o = vsigmoid(vload_f32(LANES_8, g + 8 * d + j))
                        gg = vtanh(vload_f32(LANES_8, g + 12 * d + j))
                        c = vadd(vmul(f, vload_f32(LANES_8, cp + j)), vmul(i, gg))
                        vstore_f32_at(co + j, c)
                        vstore_f32_at(ho + j, vmul(o, vtanh(c)))
                    elif drop:
                        vstore_f32_at(co + j, vsplat(LANES_8, zero))
                        vstore_f32_at(ho + j, vsplat(LANES_8, zero))
                    else:
                        vstore_f32_at(co + j, vload_f32(LANES_8, cp + j))
                        vstore_f32_at(ho + j, vload_f32(LANES_8, hp + j))
            else:
                gr = gates[t, r]
                for j in range(d):
                    if valid:
                        c = (_sig(gr[d + j] + fb) * cs[t, r, j]
                             + _sig(gr[j]) * np.float32(math.tanh(gr[3 * d + j])))
                        cs[t + 1, r, j] = c
                        hs[t + 1, r, j] = _sig(gr[2 * d + j]) * np.float32(math.tanh(c))
                    else:
                        cs[t + 1, r, j] = zero if drop else cs[t, r, j]
                        hs[t + 1, r, j] = zero if drop else hs[t, r, j]


def _sigmoid_numpy(v):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-v))


def _valid_numpy(seq, has_seq, t, n):
    return ((t < seq[:n]) if has_seq else np.ones(n, bool))[:, None]


@_lstm_forward.numpy_twin
def _lstm_forward_numpy(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2,
                        bias2, r0, r1, gemm, gemv, ilp64):
    d = w.shape[1]
    zero = np.float32(0.0)
    x, hs, cs, gates, pre, seq = x[:, r0:r1], hs[:, r0:r1], cs[:, r0:r1], gates[:, r0:r1], pre[:, r0:r1], seq[r0:r1]
    for t in range(x.shape[0]):
        if mi:
            pre[t] = hs[t] @ w.T + b
            gates[t] = (x[t] * alpha + beta1) * pre[t] + (x[t] * beta2 + bias2)
        else:
            gates[t] = (hs[t] @ w.T + b) + x[t]
        g = gates[t]
        with np.errstate(all="ignore"):
            c = (_sigmoid_numpy(g[:, d:2 * d] + np.float32(forget_bias)) * cs[t]
                 + _sigmoid_numpy(g[:, :d]) * np.tanh(g[:, 3 * d:]))
            h = _sigmoid_numpy(g[:, 2 * d:3 * d]) * np.tanh(c)
        valid = _valid_numpy(seq, has_seq, t, x.shape[1])
        cs[t + 1] = np.where(valid, c, zero if drop else cs[t])
        hs[t + 1] = np.where(valid, h, zero if drop else hs[t])


@compiled(parallel=True)
def _lstm_forward_team(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2, bias2,
                       bounds, gemm, gemv, ilp64):
    """_lstm_forward on row blocks bounds[k]..bounds[k + 1], one per team thread."""
    for k in prange(bounds.shape[0] - 1):
        _lstm_forward(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2, bias2,
                      bounds[k], bounds[k + 1], gemm, gemv, ilp64)


@_lstm_forward_team.numpy_twin
def _lstm_forward_team_numpy(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2,
                             bias2, bounds, gemm, gemv, ilp64):
    for k in range(bounds.shape[0] - 1):
        _lstm_forward_numpy(x, w, wp, b, hs, cs, gates, seq, has_seq, forget_bias, drop, mi, pre, alpha, beta1, beta2,
                            bias2, bounds[k], bounds[k + 1], gemm, gemv, ilp64)


@compiled
def _lstm_backward(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit, dc_unit,
                   mi, x, alpha, beta1, dpre, r0, r1, gemm, gemv, ilp64):
    """Backward through time, for batch rows r0..r1 (independent of the others).
    dhs, dcs [T + 1, N, D] hold the gradients arriving from
    outside (step t + 1 for the output of step t); each step adds what flows back, so
    on return dhs[0], dcs[0] are the initial states' gradients. dgates [T, N, 4D] is
    written (the gates' gradient). dh_fc, dh_unit, dc_unit: [N, D] scratch. With mi
    (MILSTM) the recurrent product's gradient dpre [T, N, 4D] = dgates (alpha x + beta1)
    is written too and feeds dh."""
    steps, n, d = gates.shape[0], gates.shape[1], w.shape[1]
    zero = np.float32(0.0)
    one = np.float32(1.0)
    fb = np.float32(forget_bias)
    count, last = (d + 7) // 8, d - 8
    zeros = vsplat(LANES_8, zero)
    ones = vsplat(LANES_8, one)
    for t in range(steps - 1, -1, -1):
        for r in range(r0, r1):
            g = address(gates) + 4 * (t * n + r) * 4 * d
            dg = address(dgates) + 4 * (t * n + r) * 4 * d
            cp = address(cs) + 4 * (t * n + r) * d
            cc = cp + 4 * n * d
            dhr = address(dhs) + 4 * ((t + 1) * n + r) * d
            dcr = address(dcs) + 4 * ((t + 1) * n + r) * d
            dhp = address(dh_unit) + 4 * r * d
            dcp = address(dc_unit) + 4 * r * d
            valid = not has_seq or t < seq[r]
            if d >= 8:
                for q in range(count):
                    j = 4 * min(8 * q, last)
                    if valid:
                        i = vsigmoid(vload_f32(LANES_8, g + j))
                        f = vsigmoid(vadds(vload_f32(LANES_8, g + 4 * d + j), fb))
                        o = vsigmoid(vload_f32(LANES_8, g + 8 * d + j))
                        gg = vtanh(vload_f32(LANES_8, g + 12 * d + j))
                        tc = vtanh(vload_f32(LANES_8, cc + j))
                        dh = vload_f32(LANES_8, dhr + j)
                        dc = vadd(vload_f32(LANES_8, dcr + j), vmul(vmul(dh, o), vsub(ones, vmul(tc, tc))))
                        vstore_f32_at(dcp + j, vmul(dc, f))
                        vstore_f32_at(dhp + j, zeros)
                        vstore_f32_at(dg + j, vmul(vmul(dc, gg), vmul(i, vsub(ones, i))))
                        vstore_f32_at(dg + 4 * d + j, vmul(vmul(dc, vload_f32(LANES_8, cp + j)),
                                                           vmul(f, vsub(ones, f))))
                        vstore_f32_at(dg + 8 * d + j, vmul(vmul(dh, tc), vmul(o, vsub(ones, o))))
                        vstore_f32_at(dg + 12 * d + j, vmul(vmul(dc, i), vsub(ones, vmul(gg, gg))))
                    else:
                        for part in range(4):
                            vstore_f32_at(dg + 4 * part * d + j, zeros)
                        vstore_f32_at(dcp + j, zeros if drop else vload_f32(LANES_8, dcr + j))
                        vstore_f32_at(dhp + j, zeros if drop else vload_f32(LANES_8, dhr + j))
            else:
                gr, dgr = gates[t, r], dgates[t, r]
                for j in range(d):
                    dh = dhs[t + 1, r, j]
                    if valid:
                        i = _sig(gr[j])
                        f = _sig(gr[d + j] + fb)
                        o = _sig(gr[2 * d + j])
                        gg = np.float32(math.tanh(gr[3 * d + j]))
                        tc = np.float32(math.tanh(cs[t + 1, r, j]))
                        dc = dcs[t + 1, r, j] + dh * o * (one - tc * tc)
                        dc_unit[r, j] = dc * f
                        dh_unit[r, j] = zero
                        dgr[j] = dc * gg * i * (one - i)
                        dgr[d + j] = dc * cs[t, r, j] * f * (one - f)
                        dgr[2 * d + j] = dh * tc * o * (one - o)
                        dgr[3 * d + j] = dc * i * (one - gg * gg)
                    else:
                        for part in range(4):
                            dgr[part * d + j] = zero
                        dc_unit[r, j] = zero if drop else dcs[t + 1, r, j]
                        dh_unit[r, j] = zero if drop else dh
        # the FC's input gradient: dgates[t] @ w (MILSTM: dpre[t] @ w)
        if mi:
            for r in range(r0, r1):
                dg, dp, xr = dgates[t, r], dpre[t, r], x[t, r]
                for j in range(4 * d):
                    dp[j] = dg[j] * (xr[j] * alpha[j] + beta1[j])
        src = (dpre if mi else dgates).ctypes.data + 4 * (t * n + r0) * 4 * d
        dst = dh_fc.ctypes.data + 4 * r0 * d
        if r1 - r0 == 1:
            call_gemv(gemv, ilp64, True, 4 * d, d, w.ctypes.data, d, src, 1, dst, 1, dh_fc)
        else:
            packed_product(src, 4 * d, r1 - r0, wp, d, dst, d)
        for r in range(r0, r1):
            dh_row, dc_row = dhs[t, r], dcs[t, r]
            a, u, c = dh_fc[r], dh_unit[r], dc_unit[r]
            for j in range(d):
                dh_row[j] += u[j] + a[j]
                dc_row[j] += c[j]


@_lstm_backward.numpy_twin
def _lstm_backward_numpy(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit,
                         dc_unit,
                         mi, x, alpha, beta1, dpre, r0, r1, gemm, gemv, ilp64):
    d = w.shape[1]
    one, zero = np.float32(1.0), np.float32(0.0)
    rows = slice(r0, r1)
    hs, cs, gates, dhs, dcs, dgates, dpre = (a[:, rows] for a in (hs, cs, gates, dhs, dcs, dgates, dpre))
    x = x[:, rows] if mi else x
    seq, dh_unit, dc_unit = seq[rows], dh_unit[rows], dc_unit[rows]
    for t in range(gates.shape[0] - 1, -1, -1):
        g = gates[t]
        with np.errstate(all="ignore"):
            i, f = _sigmoid_numpy(g[:, :d]), _sigmoid_numpy(g[:, d:2 * d] + np.float32(forget_bias))
            o, gg = _sigmoid_numpy(g[:, 2 * d:3 * d]), np.tanh(g[:, 3 * d:])
            tc = np.tanh(cs[t + 1])
            dh = dhs[t + 1]
            dc = dcs[t + 1] + dh * o * (one - tc * tc)
            dg = np.concatenate([dc * gg * i * (one - i), dc * cs[t] * f * (one - f),
                                 dh * tc * o * (one - o), dc * i * (one - gg * gg)], axis=1)
        valid = _valid_numpy(seq, has_seq, t, g.shape[0])
        dgates[t] = np.where(valid, dg, zero)
        dc_unit[...] = np.where(valid, dc * f, zero if drop else dcs[t + 1])
        dh_unit[...] = np.where(valid | drop, zero, dh)
        if mi:
            dpre[t] = dgates[t] * (x[t] * alpha + beta1)
        dhs[t] += dh_unit + (dpre[t] if mi else dgates[t]) @ w
        dcs[t] += dc_unit


@compiled(parallel=True)
def _lstm_backward_team(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit,
                        dc_unit,
                        mi, x, alpha, beta1, dpre, bounds, gemm, gemv, ilp64):
    """_lstm_backward on row blocks bounds[k]..bounds[k + 1], one per team thread."""
    for k in prange(bounds.shape[0] - 1):
        _lstm_backward(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit, dc_unit,
                       mi, x, alpha, beta1, dpre, bounds[k], bounds[k + 1], gemm, gemv, ilp64)


@_lstm_backward_team.numpy_twin
def _lstm_backward_team_numpy(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit,
                              dc_unit, mi, x, alpha, beta1, dpre, bounds, gemm, gemv, ilp64):
    for k in range(bounds.shape[0] - 1):
        _lstm_backward_numpy(w, wp, hs, cs, gates, seq, has_seq, forget_bias, drop, dhs, dcs, dgates, dh_fc, dh_unit,
                             dc_unit, mi, x, alpha, beta1, dpre, bounds[k], bounds[k + 1], gemm, gemv, ilp64)


def _entry():
    entry = gemm_entry(np.float32)
    if entry is None:
        return 0, 0, False
    return entry.gemm, entry.gemv, entry.ilp64


def available():
    """Whether the fused kernels can run here (they call OpenBLAS directly)."""
    return gemm_entry(np.float32) is not None


def _seq_array(seq_lengths, n):
    if seq_lengths is None:
        return np.zeros(max(n, 1), np.int64), False
    return np.ascontiguousarray(np.asarray(seq_lengths).reshape(n), dtype=np.int64), True


def _check(cond, what):
    if not cond:
        raise ValueError("fused LSTM: " + what)


def _packed(b, rows):
    """b packed for packed_product (the per-step products of two rows or more), or an
    empty stand-in when every block has one row (those steps run GEMV)."""
    return pack_columns(b) if rows > 1 else np.zeros((0, 1, 16), np.float32)


def batch_blocks(n, work_per_row):
    """Row bounds [0, .., n] splitting a batch of n sequences over the team: each block
    runs the whole sequence for its rows with no synchronisation (a row's recurrence
    reads only its own states), so blocks need no barrier per step."""
    blocks = team_blocks(n, work_per_row)
    return np.linspace(0, n, blocks + 1).round().astype(np.int64)


def run_on_blocks(serial, parallel, bounds, *args):
    """serial(*args, 0, n, <blas>) for one block (no parallel region), else
    parallel(*args, bounds, <blas>); inside team() so OpenBLAS stays on one thread."""
    gemm, gemv, ilp64 = _entry()
    _check(gemm != 0, "no direct BLAS entry point")
    with team():
        if len(bounds) == 2:
            serial(*args, bounds[0], bounds[1], gemm, gemv, ilp64)
        else:
            parallel(*args, bounds, gemm, gemv, ilp64)


def lstm_sequence(x, w, b, hs, cs, seq_lengths, forget_bias, drop_states, mi=None):
    """Forward over the whole sequence. x [T, N, 4D] the input projection; w [4D, D];
    b [4D]; hs, cs [T + 1, N, D] with step 0 the initial state (steps 1..T written).
    mi: MILSTM's (alpha, beta1, beta2, bias2), each [4D], or None.
    Returns gates [T, N, 4D] (each step's pre-activation gates, the step net's gates_t)
    and, with mi, pre [T, N, 4D] (h_{t-1} @ w^T + b), else None.
    All float32 and C-contiguous (the caller makes them so)."""
    steps, n, g4 = x.shape
    d = g4 // 4
    checks = [(x, (steps, n, 4 * d)), (w, (4 * d, d)), (b, (4 * d,)), (hs, (steps + 1, n, d)), (cs, (steps + 1, n, d))]
    checks += [(v, (4 * d,)) for v in (mi or ())]
    for a, shape in checks:
        _check(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == shape,
               "expected a C-contiguous float32 %s, got %s %s" % (list(shape), a.dtype, list(a.shape)))
    gates = np.empty((steps, n, 4 * d), np.float32)
    pre = np.empty((steps, n, 4 * d), np.float32) if mi else None
    if steps and n and d:
        seq, has_seq = _seq_array(seq_lengths, n)
        alpha, beta1, beta2, bias2 = mi or (b, b, b, b)
        run_on_blocks(_lstm_forward, _lstm_forward_team, batch_blocks(n, steps * 4 * d * d),
                      x, w, _packed(w.T, n), b, hs, cs, gates, seq, has_seq, float(forget_bias), bool(drop_states),
                      mi is not None,
                      gates if pre is None else pre, alpha, beta1, beta2, bias2)
    return gates, pre


def lstm_sequence_gradient(w, hs, cs, gates, seq_lengths, forget_bias, drop_states, dhs, dcs, mi=None):
    """Backward through time for lstm_sequence's results. dhs, dcs [T + 1, N, D]: the
    gradients arriving from outside (updated in place; on return step 0 holds the
    initial states' gradients). mi: MILSTM's (x, alpha, beta1, pre), or None.
    Returns (dgates [T, N, 4D], dpre, dw [4D, D], db [4D]): dgates the gradient of
    the gates (the input projection's for LSTM), dpre that of h @ w^T + b (dgates
    itself without mi)."""
    steps, n, g4 = gates.shape
    d = g4 // 4
    checks = [(w, (4 * d, d)), (gates, (steps, n, 4 * d)), (hs, (steps + 1, n, d)), (cs, (steps + 1, n, d)),
              (dhs, (steps + 1, n, d)), (dcs, (steps + 1, n, d))]
    if mi:
        checks += [(mi[0], (steps, n, 4 * d)), (mi[1], (4 * d,)), (mi[2], (4 * d,)), (mi[3], (steps, n, 4 * d))]
    for a, shape in checks:
        _check(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == shape,
               "expected a C-contiguous float32 %s, got %s %s" % (list(shape), a.dtype, list(a.shape)))
    dgates = np.zeros_like(gates)
    dpre = np.zeros_like(gates) if mi else dgates
    if steps and n and d:
        seq, has_seq = _seq_array(seq_lengths, n)
        scratch = np.empty((3, n, d), np.float32)
        x, alpha, beta1 = mi[:3] if mi else (gates, w[0], w[0])
        run_on_blocks(_lstm_backward, _lstm_backward_team, batch_blocks(n, steps * 4 * d * d),
                      w, _packed(w, n), hs, cs, gates, seq, has_seq, float(forget_bias), bool(drop_states), dhs, dcs,
                      dgates,
                      scratch[0], scratch[1], scratch[2], mi is not None, x, alpha, beta1, dpre)
    flat = dpre.reshape(steps * n, 4 * d)
    dw = matmul(flat.T, hs[:steps].reshape(steps * n, d))       # one product over all steps, on the team
    db = flat.sum(axis=0)
    return dgates, dpre, dw, db
