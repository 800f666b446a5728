"""ONNX RNN, GRU, LSTM (forward, reverse, bidirectional; sequence_lens,
initial states, peepholes, clip, custom activations, layout 0/1)."""
import numpy as np

from caffe2py.kernels.cpu.rnn import onnx_rnn as rk

from ..onnx_base import onnx_op

_DEFAULT_ACTS = {"RNN": ["Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"] * 2,
                 "LSTM": ["Sigmoid", "Tanh", "Tanh"] * 2}
_PER_DIR = {"RNN": 1, "GRU": 2, "LSTM": 3}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _check_shapes(ctx, kind, n_dir, x, w, r, b, lengths, h0, c0, p):
    """Every input's shape against X (seq, batch, input) and R's hidden size."""
    if x.ndim != 3:
        raise ctx.input_error(0, "X must be [seq_length, batch_size, input_size], got shape %s" % list(x.shape))
    if r.ndim != 3:
        raise ctx.input_error(2, "R must be [num_directions, %d * hidden_size, hidden_size], got shape %s"
                              % (_GATES[kind], list(r.shape)))
    hidden, gates = r.shape[-1], _GATES[kind]
    if ctx.has("hidden_size") and ctx.int("hidden_size") != hidden:
        raise ctx.input_error(2, "R of shape %s disagrees with hidden_size %d" % (list(r.shape), ctx.int("hidden_size")))
    batch = x.shape[1]
    want = [(1, w, (n_dir, gates * hidden, x.shape[2]), "W"), (2, r, (n_dir, gates * hidden, hidden), "R"),
            (3, b, (n_dir, 2 * gates * hidden), "B"), (4, lengths, (batch,), "sequence_lens"),
            (5, h0, (n_dir, batch, hidden), "initial_h"), (6, c0, (n_dir, batch, hidden), "initial_c"),
            (7, p, (n_dir, 3 * hidden), "P")]
    for index, value, shape, name in want:
        if value is not None and tuple(value.shape) != shape:
            raise ctx.input_error(index, "%s must have shape %s, got %s" % (name, list(shape), list(value.shape)))
    if lengths is not None and lengths.size and (lengths.min() < 0 or lengths.max() > x.shape[0]):
        raise ctx.input_error(4, "sequence_lens must lie in [0, %d], got %s" % (x.shape[0], lengths.tolist()))


def _rnn_factory(kind):
    def factory(ctx):
        direction = ctx.string("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error("unknown direction '%s'" % direction)
        n_dir = 2 if direction == "bidirectional" else 1
        names = ctx.strings("activations", None) or _DEFAULT_ACTS[kind][:_PER_DIR[kind] * n_dir]
        try:
            acts = rk.activations(names, ctx.floats("activation_alpha", []) or [],
                                  ctx.floats("activation_beta", []) or [])
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
        per = _PER_DIR[kind]
        if len(acts) == per and n_dir == 2:
            acts = acts * 2
        if len(acts) != per * n_dir:
            raise ctx.error("%s %s needs %d activations, got %s" % (direction, kind, per * n_dir, names))
        clip = ctx.float("clip", None)
        layout = ctx.int("layout", 0)
        lbr = bool(ctx.int("linear_before_reset", 0))
        input_forget = bool(ctx.int("input_forget", 0))

        def run(x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
            if kind != "LSTM":
                c0 = p = None
            if layout:
                if x.ndim != 3 or (h0 is not None and h0.ndim != 3) or (c0 is not None and c0.ndim != 3):
                    raise ctx.error("with layout=1, X, initial_h and initial_c must be 3-D (batch first)")
                x = np.swapaxes(x, 0, 1)
                h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
                c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
            _check_shapes(ctx, kind, n_dir, x, w, r, b, lengths, h0, c0, p)
            hidden = r.shape[-1]
            ys, hs, cs = [], [], []
            for d in range(n_dir):
                reverse = direction == "reverse" or d == 1
                y, h, c = rk.run_direction(
                    kind, x, w[d], r[d], None if b is None else b[d], None if h0 is None else h0[d],
                    None if c0 is None else c0[d], None if p is None else p[d], lengths, reverse,
                    acts[d * per:(d + 1) * per], clip, hidden, lbr, input_forget)
                ys.append(y)
                hs.append(h)
                cs.append(c)
            y_all = np.stack(ys, axis=1)          # (seq, dirs, batch, H)
            h_all, c_all = np.stack(hs), np.stack(cs)
            if layout:
                y_all = y_all.transpose(2, 0, 1, 3)
                h_all, c_all = np.swapaxes(h_all, 0, 1), np.swapaxes(c_all, 0, 1)
            outs = (np.ascontiguousarray(y_all), np.ascontiguousarray(h_all), np.ascontiguousarray(c_all))
            outs = outs[:ctx.n_outputs]
            return outs if len(outs) > 1 else outs[0]
        return run
    return factory


for _kind in ("RNN", "GRU", "LSTM"):
    onnx_op(_kind, (1, None))(_rnn_factory(_kind))
