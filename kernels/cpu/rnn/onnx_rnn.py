"""ONNX RNN, GRU and LSTM cells run over a sequence (one direction at a time).

Shapes follow the ONNX layout 0: X (seq, batch, input), weights per direction
W (G*H, input), R (G*H, H), bias Wb + Rb (G*H each). Gate order: LSTM i, o, f,
c; GRU z, r, h. Batch entries shorter than the sequence (sequence_lens) stop
updating their state and output zeros past their length."""
import numpy as np

from ..math.elementwise import sigmoid


def _act(name, alpha, beta):
    name = name.lower()
    table = {
        "sigmoid": sigmoid,
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: np.where(x < 0, alpha * x, x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x < 0, alpha * np.expm1(np.minimum(x, 0)), x),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.logaddexp(0, x),
    }
    if name not in table:
        raise ValueError("unknown RNN activation '%s'" % name)
    return table[name]


# Default alpha/beta of the activations that take them.
_DEFAULTS = {"leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0), "hardsigmoid": (0.2, 0.5),
             "elu": (1.0, 0.0), "affine": (1.0, 0.0), "scaledtanh": (1.0, 1.0)}


def activations(names, alphas, betas):
    out, ia, ib = [], 0, 0
    for name in names:
        da, db = _DEFAULTS.get(name.lower(), (0.0, 0.0))
        takes_alpha = name.lower() in _DEFAULTS
        takes_beta = name.lower() in ("affine", "scaledtanh", "hardsigmoid")
        a = alphas[ia] if takes_alpha and ia < len(alphas) else da
        b = betas[ib] if takes_beta and ib < len(betas) else db
        ia += takes_alpha
        ib += takes_beta
        out.append(_act(name, a, b))
    return out


def run_direction(kind, x, w, r, b, h0, c0, p, lengths, reverse, acts, clip, hidden,
                  linear_before_reset=False, input_forget=False):
    """(Y (seq, batch, H), h_last, c_last) for one direction."""
    seq, batch, _ = x.shape
    dtype = x.dtype
    h = np.zeros((batch, hidden), dtype) if h0 is None else h0.astype(dtype)
    c = np.zeros((batch, hidden), dtype) if c0 is None else c0.astype(dtype)
    n_gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    wb = np.zeros(n_gates * hidden, dtype) if b is None else b[:n_gates * hidden]
    rb = np.zeros(n_gates * hidden, dtype) if b is None else b[n_gates * hidden:]
    lens = np.full(batch, seq, np.int64) if lengths is None else lengths.astype(np.int64)
    y = np.zeros((seq, batch, hidden), dtype)
    xw = x @ w.T + wb                      # input projections for every step at once
    clip_fn = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    for step in range(seq):
        # Reverse direction walks each sequence backwards from its own last element.
        t_idx = (lens - 1 - step) if reverse else np.full(batch, step)
        active = step < lens
        t_safe = np.clip(t_idx, 0, seq - 1)
        xt = xw[t_safe, np.arange(batch)]
        if kind == "RNN":
            h_new = acts[0](clip_fn(xt + h @ r.T + rb))
        elif kind == "GRU":
            H = hidden
            rz = xt[:, :2 * H] + h @ r[:2 * H].T + rb[:2 * H]
            z = acts[0](clip_fn(rz[:, :H]))
            rr = acts[0](clip_fn(rz[:, H:]))
            if linear_before_reset:
                hh = acts[1](clip_fn(xt[:, 2 * H:] + rr * (h @ r[2 * H:].T + rb[2 * H:])))
            else:
                hh = acts[1](clip_fn(xt[:, 2 * H:] + (rr * h) @ r[2 * H:].T + rb[2 * H:]))
            h_new = (1 - z) * hh + z * h
        else:
            H = hidden
            gates = xt + h @ r.T + rb
            pi, po, pf = (p[:H], p[H:2 * H], p[2 * H:]) if p is not None else (0, 0, 0)
            i = acts[0](clip_fn(gates[:, :H] + pi * c))
            f = acts[0](clip_fn(gates[:, 2 * H:3 * H] + pf * c))
            if input_forget:
                f = 1 - i
            g = acts[1](clip_fn(gates[:, 3 * H:]))
            c_new = f * c + i * g
            o = acts[0](clip_fn(gates[:, H:2 * H] + po * c_new))
            h_new = o * acts[2](c_new)
            c = np.where(active[:, None], c_new, c).astype(dtype, copy=False)
        h = np.where(active[:, None], h_new, h).astype(dtype, copy=False)
        rows = np.nonzero(active)[0]
        y[t_safe[rows], rows] = h[rows]
    return y, h, c
