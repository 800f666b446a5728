"""ONNX RNN, GRU, LSTM (forward, reverse, bidirectional; sequence_lens,
initial states, peepholes, clip, custom activations, layout 0/1)."""
import numpy as np

from caffe2py.kernels.cpu.onnx import rnn as rk

from .onnx_base import onnx_op

_DEFAULT_ACTS = {"RNN": ["Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"] * 2,
                 "LSTM": ["Sigmoid", "Tanh", "Tanh"] * 2}
_PER_DIR = {"RNN": 1, "GRU": 2, "LSTM": 3}


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
        clip = ctx.float("clip", None)
        layout = ctx.int("layout", 0)
        lbr = bool(ctx.int("linear_before_reset", 0))
        input_forget = bool(ctx.int("input_forget", 0))

        def run(x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
            if kind != "LSTM":
                c0 = p = None
            if layout:
                x = np.swapaxes(x, 0, 1)
                h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
                c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
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
