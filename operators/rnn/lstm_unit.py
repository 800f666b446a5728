"""LSTMUnit and LSTMUnitGradient (one LSTM timestep, gates laid out i, f, o, g)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.rnn import lstm as K
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, register_kernel, register_schema

_ARGS = (Arg("forget_bias", "float", 0.0, doc="added to the forget gate before its sigmoid"),
         Arg("sequence_lengths", "bool", True, doc="the 4th input holds per-row sequence lengths; "
                                                   "0 drops that input"),
         Arg("drop_states", "bool", False, doc="rows past their length get zero state instead of "
                                                "carrying the previous one"))


def _with_seq(ctx):
    return ctx.bool("sequence_lengths", True)


def _forward_infer(ctx, ins):
    return [ins[0], ins[1]]


def _forward_cost(ctx, ins):
    c = ins[1]
    if not c.known:
        return Cost()
    n = float(np.prod(c.dims, dtype=np.int64))
    return Cost(flops=20 * n, bytes_read=4 * 6 * n, bytes_written=4 * 2 * n)


register_schema(OpSchema(
    "LSTMUnit", num_inputs=(4, 5), num_outputs=2, args=_ARGS,
    inputs=("hidden_t_prev", "cell_t_prev", "gates", "seq_lengths", "timestep"),
    outputs=("hidden_t", "cell_t"), inference=_forward_infer, cost=_forward_cost,
    doc="One LSTM step. gates [1, N, 4D] = [i | f | o | g]; i, f, o use sigmoid (f after adding "
        "forget_bias), g uses tanh; C = f*C_prev + i*g, H = o*tanh(C). Rows with timestep >= "
        "seq_lengths[n] keep H_prev/C_prev (zeros with drop_states). seq_lengths is present unless "
        "sequence_lengths=0. float32 or float16."))

register_schema(OpSchema(
    "LSTMUnitGradient", num_inputs=(8, 9), num_outputs=3, args=_ARGS,
    inputs=("hidden_t_prev", "cell_t_prev", "gates", "seq_lengths", "timestep", "hidden_t",
            "cell_t", "hidden_t_grad", "cell_t_grad"),
    outputs=("hidden_t_prev_grad", "cell_t_prev_grad", "gates_grad"),
    inference=lambda ctx, ins: [ins[0], ins[1], ins[2]],
    doc="Gradient of LSTMUnit with respect to hidden_t_prev, cell_t_prev and gates."))


def _timestep(ctx, index, t):
    t = np.asarray(t)
    if t.size != 1:
        raise ctx.input_error(index, "timestep must hold one value, got shape %s" % list(t.shape))
    if t.dtype.kind not in "iubf":         # before any numeric test (fuzz op:13:90242)
        raise ctx.input_error(index, "timestep must be a number, got dtype %s" % t.dtype)
    value = t.reshape(-1)[0]
    if t.dtype.kind == "f" and not (np.isfinite(value) and float(value).is_integer()):
        raise ctx.input_error(index, "timestep must be a whole number, got %r" % (value,))
    return int(value)


def _check_shapes(ctx, h_prev, c_prev, gates, seq, seq_index):
    for k, a in ((0, h_prev), (1, c_prev), (2, gates)):
        if a.dtype not in (np.float32, np.float16):
            raise ctx.input_error(k, "must be float32 or float16, got %s" % a.dtype)
        if a.ndim != 3 or a.shape[0] != 1:
            raise ctx.input_error(k, "must be shaped [1, N, *], got %s" % list(a.shape))
    n, d = c_prev.shape[1], c_prev.shape[2]
    if h_prev.shape != c_prev.shape:
        raise ctx.input_error(0, "shape %s differs from cell_t_prev's %s" % (list(h_prev.shape), list(c_prev.shape)))
    if gates.shape[1] != n or gates.shape[2] != 4 * d:
        raise ctx.input_error(2, "gates must be [1, %d, %d] (4 * D), got %s" % (n, 4 * d, list(gates.shape)))
    if seq is not None and np.asarray(seq).size != n:
        raise ctx.input_error(seq_index, "seq_lengths must have N = %d entries, got %d" % (n, np.asarray(seq).size))


def _arity_check(ctx, forward):
    base = 4 if forward else 8
    want = base + (1 if _with_seq(ctx) else 0)
    if ctx.n_inputs != want:
        raise ctx.error("with sequence_lengths=%d this op takes %d inputs, got %d"
                        % (int(_with_seq(ctx)), want, ctx.n_inputs))


@register_kernel("LSTMUnit")
def lstm_unit(ctx):
    _arity_check(ctx, True)
    with_seq = _with_seq(ctx)
    forget_bias, drop = ctx.float("forget_bias"), ctx.bool("drop_states")
    t_index = 4 if with_seq else 3

    def run(h_prev, c_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        t = _timestep(ctx, t_index, rest[-1])
        _check_shapes(ctx, h_prev, c_prev, gates, seq, 3)
        return K.lstm_unit(h_prev, c_prev, gates, seq, t, forget_bias, drop)
    return run


@register_kernel("LSTMUnitGradient")
def lstm_unit_gradient(ctx):
    _arity_check(ctx, False)
    with_seq = _with_seq(ctx)
    forget_bias, drop = ctx.float("forget_bias"), ctx.bool("drop_states")
    t_index = 4 if with_seq else 3

    def run(h_prev, c_prev, gates, *rest):
        seq = rest[0] if with_seq else None
        rest = rest[1:] if with_seq else rest
        t_blob, h, c, dh, dc = rest
        t = _timestep(ctx, t_index, t_blob)
        _check_shapes(ctx, h_prev, c_prev, gates, seq, 3)
        for k, a in zip(range(t_index + 1, t_index + 5), (h, c, dh, dc)):
            if a.shape != c_prev.shape:
                raise ctx.input_error(k, "shape %s differs from cell_t_prev's %s" % (list(a.shape), list(c_prev.shape)))
        return K.lstm_unit_gradient(c_prev, gates, c, h, dc, dh, seq, t, forget_bias, drop)
    return run


@register_gradient("LSTMUnit")
def _lstm_unit_maker(g):
    # Caffe2's inputs: the forward's inputs, both outputs and both output gradients. Both
    # gradients must exist, as in Caffe2 (its GO() refuses a missing one): a cell state
    # nobody differentiates gets one from ZeroGradient(cell_t, []) (zeros), which is what
    # Caffe2's callers add; recurrent step nets get every state's gradient anyway.
    ins = [g.input_value(i) for i in range(len(g.def_.input))] + [g.O(0), g.O(1), g.GO(0), g.GO(1)]
    return [g.op("LSTMUnitGradient", ins, [g.GI(0), g.GI(1), g.GI(2)])]
