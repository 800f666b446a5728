"""GRUUnit and GRUUnitGradient (one GRU timestep; gates laid out reset, update,
output). Owned here because rnn_cell.GRU needs it; see kernels/cpu/rnn/gru.py."""
import numpy as np

from caffe2py.kernels.cpu.rnn import gru as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

_ARGS = (Arg("drop_states", "bool", False, doc="rows past their length get a zero state instead of "
                                                "carrying the previous one"),
         Arg("sequence_lengths", "bool", True, doc="input 2 holds per-row sequence lengths; "
                                                   "0 drops that input"))

register_schema(OpSchema(
    "GRUUnit", num_inputs=(3, 4), num_outputs=1, args=_ARGS,
    inputs=("hidden_prev", "gates", "seq_lengths", "t"), outputs=("hidden",),
    inference=lambda ctx, ins: [ins[0]],
    doc="One GRU step: gates [1, N, 3D] = [reset | update | output] (pre-activation, the reset "
        "gate already applied by the step net); H = H_prev * sigmoid(u) + tanh(o) * (1 - sigmoid(u)). "
        "Rows with t >= seq_lengths[n] keep H_prev (zeros with drop_states)."))

register_schema(OpSchema(
    "GRUUnitGradient", num_inputs=(5, 6), num_outputs=2, args=_ARGS,
    inputs=("hidden_prev", "gates", "seq_lengths", "t", "hidden", "hidden_grad"),
    outputs=("hidden_prev_grad", "gates_grad"),
    inference=lambda ctx, ins: [ins[0], ins[1]],
    doc="Gradient of GRUUnit with respect to hidden_prev and gates (the reset part is zero)."))


def _arity(ctx, base):
    with_seq = ctx.bool("sequence_lengths")
    want = base + (1 if with_seq else 0)
    if ctx.n_inputs != want:
        raise ctx.error("with sequence_lengths=%d this op takes %d inputs, got %d"
                        % (int(with_seq), want, ctx.n_inputs))
    return with_seq


def _check(ctx, h_prev, gates, seq, t_blob, t_index):
    for k, a in ((0, h_prev), (1, gates)):
        if not isinstance(a, np.ndarray) or a.dtype not in (np.float32, np.float16) or a.ndim != 3 or a.shape[0] != 1:
            raise ctx.input_error(k, "must be a float32/float16 [1, N, *] tensor, got %s %s"
                                  % (getattr(a, "dtype", type(a).__name__), list(np.shape(a))))
    n, d = h_prev.shape[1], h_prev.shape[2]
    if gates.shape[1] != n or gates.shape[2] != 3 * d:
        raise ctx.input_error(1, "gates must be [1, %d, %d] (3 * D), got %s" % (n, 3 * d, list(gates.shape)))
    if seq is not None and np.asarray(seq).size != n:
        raise ctx.input_error(2, "seq_lengths must have N = %d entries, got %d" % (n, np.asarray(seq).size))
    t = np.asarray(t_blob)
    if t.size != 1 or t.dtype.kind not in "iu":
        raise ctx.input_error(t_index, "timestep must be one integer, got %s %s" % (t.dtype, list(t.shape)))
    return int(t.reshape(-1)[0])


@register_kernel("GRUUnit")
def gru_unit(ctx):
    with_seq = _arity(ctx, 3)
    drop = ctx.bool("drop_states")
    t_index = 3 if with_seq else 2

    def run(h_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        t = _check(ctx, h_prev, gates, seq, rest[-1], t_index)
        return K.gru_unit(h_prev, gates, seq, t, drop)
    return run


@register_kernel("GRUUnitGradient")
def gru_unit_gradient(ctx):
    with_seq = _arity(ctx, 5)
    drop = ctx.bool("drop_states")
    t_index = 3 if with_seq else 2

    def run(h_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        t_blob, h, dh = rest[-3:]
        t = _check(ctx, h_prev, gates, seq, t_blob, t_index)
        if np.shape(dh) != h_prev.shape:
            raise ctx.input_error(t_index + 2, "shape %s differs from hidden_prev's %s"
                                  % (list(np.shape(dh)), list(h_prev.shape)))
        return K.gru_unit_gradient(h_prev, gates, seq, t, dh, drop)
    return run


try:
    from caffe2py.gradients import register_gradient
except ImportError:          # a build without the gradient registry
    register_gradient = None

if register_gradient is not None:
    @register_gradient("GRUUnit")
    def _gru_unit_gradient(g):
        # Caffe2's GetGRUUnitGradient: the forward's inputs, its output and the output's gradient
        ins = [g.input_value(i) for i in range(len(g.def_.input))] + [g.O(0), g.GO(0)]
        return [g.op("GRUUnitGradient", ins, [g.GI(0), g.GI(1)])]
