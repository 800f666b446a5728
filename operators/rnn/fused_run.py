"""RecurrentNetwork / RecurrentNetworkGradient on a recognised LSTM, MILSTM or GRU step
net, or a stack of such layers: the whole sequence in one compiled pass per layer
(kernels/cpu/rnn/fused_lstm.py, fused_gru.py) instead of one step-net run per timestep.

The results are the generic path's: the same state tensors (hence the same
all-step and last-step outputs), and the same gradients of the input projection,
W, b and the initial states. The step workspaces get the blobs the generic loop
leaves there (timestep, the linked blobs, gates_t; as views of the sequence
tensors), but only when something looks at them (RecurrentNetworkBlobFetcher, a
generic gradient op): ScratchWorkspaces fills them on first access, so a training
step pays nothing for them.

Both functions return None when the run's values are outside what the kernel does
(float16, initial states of several steps, non-integer lengths, ...); the caller
then runs the generic loop, which also gives the errors for bad inputs.
"""
import collections

import numpy as np

from caffe2py.kernels.cpu.math import gemm
from caffe2py.kernels.cpu.rnn import fused_gru
from caffe2py.kernels.cpu.rnn import fused_lstm as K


class FusedLSTMRecord:
    """What a fused forward run leaves in the scratch blob for its gradient."""
    __slots__ = ("plan", "x", "w", "hs", "cs", "gates", "seq", "pre", "mi")

    def __init__(self, plan, x, w, hs, cs, gates, seq, pre=None, mi=None):
        self.plan, self.x, self.w, self.hs, self.cs, self.gates, self.seq = plan, x, w, hs, cs, gates, seq
        self.pre, self.mi = pre, mi        # MILSTM: h @ w^T + b per step; (alpha, beta1, beta2, bias2)


def _float32(a):
    return isinstance(a, np.ndarray) and a.dtype == np.float32


def _lengths(plan, inputs, batch):
    """The sequence lengths as the kernel takes them; False when they do not fit."""
    if plan.seq is None:
        return None
    seq = inputs[plan.seq]
    if not isinstance(seq, np.ndarray) or seq.dtype.kind not in "iu" or seq.size != batch:
        return False
    return seq


def _lstm_layer_ok(plan, inputs, x, hs, cs):
    """The layer's (w, b, lengths) when the kernel can run it on input projection x,
    else None."""
    w, b = inputs[plan.weight], inputs[plan.bias]
    if not all(_float32(a) for a in (x, w, b, hs, cs)) or x.ndim != 3 or hs.ndim != 3:
        return None
    steps, batch, d = x.shape[0], x.shape[1], hs.shape[2]
    if (x.shape[2] != 4 * d or w.shape != (4 * d, d) or b.shape != (4 * d,) or hs.shape != (steps + 1, batch, d)
            or cs.shape != hs.shape or not (hs.flags.c_contiguous and cs.flags.c_contiguous)):
        return None
    seq = _lengths(plan, inputs, batch)
    if seq is False:
        return None
    return np.ascontiguousarray(w), np.ascontiguousarray(b), seq


def lstm_forward(plan, inputs, blobs, scratch, step_workspaces, timestep, has_backward):
    """Runs the sequence; fills blobs[state tensors] (already made by the caller with
    their initial step). Returns True, or None to ask for the generic loop."""
    if not K.available():
        return None
    x, hs, cs = inputs[0], blobs.get(plan.h_states), blobs.get(plan.c_states)
    ok = _lstm_layer_ok(plan, inputs, x, hs, cs)
    if ok is None:
        return None
    w, b, seq = ok
    mi = _milstm_values(plan, inputs, b)
    if mi is False:
        return None
    x = np.ascontiguousarray(x)
    gates, pre = K.lstm_sequence(x, w, b, hs, cs, seq, plan.forget_bias, plan.drop_states, mi)
    scratch.set_fused(FusedLSTMRecord(plan, x, w, hs, cs, gates, seq, pre, mi),
                      lambda: _fill_step_workspaces(plan, x, hs, cs, gates, step_workspaces, timestep, has_backward,
                                                    pre=pre, mi=mi))
    return True


milstm_forward = lstm_forward         # the plan's `mi` says which


def _milstm_values(plan, inputs, b):
    """MILSTM's (alpha, beta1, beta2, bias2) as the kernel takes them, None for an LSTM,
    False when they do not fit."""
    if plan.mi is None:
        return None
    mi = tuple(inputs[plan.mi["params"][role]] for role in ("alpha", "beta1", "beta2", "bias2"))
    if not all(_float32(v) and v.shape == b.shape for v in mi):
        return False
    return tuple(np.ascontiguousarray(v) for v in mi)


def _milstm_input_grads(dgates, x, pre, mi):
    """MILSTM's ElementwiseLinear and Mul gradients summed over all steps: the gradient
    of the layer input x and {role: gradient} of alpha, beta1, beta2, bias2."""
    alpha, beta1, beta2, bias2 = mi
    d_scaled = dgates * pre
    input_grad = dgates * beta2 + d_scaled * alpha
    return input_grad, dict(alpha=(d_scaled * x).sum(axis=(0, 1)), beta1=d_scaled.sum(axis=(0, 1)),
                            beta2=(dgates * x).sum(axis=(0, 1)), bias2=dgates.sum(axis=(0, 1)))


class FusedStackRecord:
    """What a fused stacked forward keeps for its gradient: a StackLayerRecord (LSTM,
    MILSTM) or GRUStackLayerRecord per layer, bottom first; `outputs[l]` what layer l + 1
    projects, [T, N, D] (an LSTM stack's: layer l's new hidden states, plus its input
    for a residual layer)."""
    __slots__ = ("plan", "layers", "outputs")

    def __init__(self, plan, layers, outputs=None):
        self.plan, self.layers, self.outputs = plan, layers, outputs


# one layer of a fused stacked run: its input projection x, recurrent weight w, states
# hs / cs, per-step gates, lengths, and for MILSTM pre (h @ w^T + b per step) and mi
StackLayerRecord = collections.namedtuple("StackLayerRecord", "x w hs cs gates seq pre mi")


def lstm_stack_forward(plan, inputs, blobs, scratch, step_workspaces, timestep, has_backward):
    """Stacked layers one after the other over the whole sequence: layer l's input
    projection of layer l - 1's states is one product over all steps."""
    if not K.available():
        return None
    x = inputs[0]
    if not _float32(x) or x.ndim != 3:
        return None
    steps, batch = x.shape[0], x.shape[1]
    states = [(blobs.get(layer.h_states), blobs.get(layer.c_states)) for layer in plan.layers]
    d_in = None
    for l, (layer, (hs, cs)) in enumerate(zip(plan.layers, states)):    # check every layer before running
        if not (_float32(hs) and hs.ndim == 3):
            return None
        d = hs.shape[2]
        shape = x.shape if l == 0 else (steps, batch, 4 * d)
        ok = _lstm_layer_ok(layer, inputs, np.empty(shape, np.float32) if l else x, hs, cs)
        if ok is None or _milstm_values(layer, inputs, ok[1]) is False:
            return None
        if l:
            wi, bi = (inputs[k] for k in plan.i2h_params[l - 1])
            if not (_float32(wi) and _float32(bi) and wi.shape == (4 * d, d_in) and bi.shape == (4 * d,)):
                return None
            if plan.residual[l] and d != d_in:      # the Sum's shapes: the generic loop reports it
                return None
        d_in = d
    layers, outputs = [], []
    for l, (layer, (hs, cs)) in enumerate(zip(plan.layers, states)):
        if l == 0:
            proj = np.ascontiguousarray(x)
        else:
            proj = _projection(plan, l, inputs, outputs[l - 1])
        w, b, seq = _lstm_layer_ok(layer, inputs, proj, hs, cs)
        mi = _milstm_values(layer, inputs, b)
        gates, pre = K.lstm_sequence(proj, w, b, hs, cs, seq, layer.forget_bias, layer.drop_states, mi)
        layers.append(StackLayerRecord(proj, w, hs, cs, gates, seq, pre, mi))
        # residual_output_<l>: the layer's new hidden states plus its input
        outputs.append(hs[1:] + outputs[l - 1] if plan.residual[l] else hs[1:])

    def fill():
        for layer, r in zip(plan.layers, layers):
            _fill_step_workspaces(layer, r.x, r.hs, r.cs, r.gates, step_workspaces, timestep, has_backward,
                                  pre=r.pre, mi=r.mi)
        for name, out in zip(plan.residual, outputs):
            if name:
                for t in _filled_steps(x.shape[0], has_backward):
                    step_workspaces[t if has_backward else t % 2][name] = out[t:t + 1]
    scratch.set_fused(FusedStackRecord(plan, layers, outputs), fill)
    return True


def lstm_stack_backward(record, roles, inputs, n_go, per_step, last_step, states, state_inputs, blobs,
                        input_grad_name):
    """lstm_backward for a stack, layer by layer from the top: each layer's backward
    through time (lstm_sequence_gradient), then its input projection's gradient as
    whole-sequence products: dW_i2h, db_i2h, and the lower layer's hidden-state
    gradient at steps 1..T (added to what arrives from outside before that layer runs)."""
    plan, layers = record.plan, record.layers
    x = layers[0].x
    forward_x = inputs[n_go]
    if not isinstance(forward_x, np.ndarray) or forward_x.shape != x.shape:
        return None
    if sorted(states) != sorted(n for layer in plan.layers for n in (layer.h_states, layer.c_states)):
        return None
    grads = _stack_state_grads(plan, layers, blobs, inputs, per_step, last_step, with_cells=True)
    if grads is None or not _projection_weights_ok(plan, layers, inputs, n_go):
        return None
    by_role = {}
    input_grad = None
    output_grad = None              # the gradient of what layer l + 1 projects (record.outputs[l])
    for l in range(len(layers) - 1, -1, -1):
        layer, r = plan.layers[l], layers[l]
        if output_grad is not None:
            grads[layer.h_states][1:] += output_grad
        mi = None if r.mi is None else (r.x, r.mi[0], r.mi[1], r.pre)
        dgates, _, dw, db = K.lstm_sequence_gradient(r.w, r.hs, r.cs, r.gates, r.seq, layer.forget_bias,
                                                     layer.drop_states, grads[layer.h_states],
                                                     grads[layer.c_states], mi)
        by_role[l, "weight"], by_role[l, "bias"] = dw, db
        layer_input_grad = dgates
        if mi is not None:
            layer_input_grad, mi_grads = _milstm_input_grads(dgates, r.x, r.pre, r.mi)
            by_role.update({(l, role): g for role, g in mi_grads.items()})
        if l == 0:
            input_grad = layer_input_grad
            break
        below_grad = _projection_grads(l, inputs[n_go + plan.i2h_params[l - 1][0]], layer_input_grad,
                                       record.outputs[l - 1], by_role)
        if plan.residual[l]:        # the residual Sum hands its gradient to the layer's input too
            below_grad += output_grad
        output_grad = below_grad
    return gradient_outputs(input_grad, by_role, grads, roles, inputs, n_go, states, state_inputs, blobs,
                          input_grad_name)


def gradient_outputs(input_grad, by_role, grads, roles, inputs, n_go, states, state_inputs, blobs, input_grad_name):
    """The gradient op's outputs (input projection, parameters in `roles` order, initial
    states), leaving the state and input gradients in blobs as the generic loop does.
    by_role: {role: gradient} (or a list indexed by role), views allowed."""
    for name, g in grads.items():
        blobs[name + "_grad"] = g
    blobs[input_grad_name] = input_grad
    outputs = [input_grad]
    for k, role in roles:
        outputs.append(np.ascontiguousarray(by_role[role]).reshape(np.shape(inputs[n_go + k])))
    return tuple(outputs + _initial_state_grads(grads, inputs, n_go, states, state_inputs))


def _projection(plan, l, inputs, below):
    """Layer l's input: FC(below, W_i2h, b_i2h) over all steps (below [T, N, D]: steps
    1..T of the lower layer's states, or its residual sums) as one product on the thread team."""
    wi, bi = (inputs[k] for k in plan.i2h_params[l - 1])
    steps, batch = below.shape[0], below.shape[1]
    flat = np.ascontiguousarray(below).reshape(steps * batch, -1)
    return gemm.fc(flat, np.ascontiguousarray(wi), bi).reshape(steps, batch, -1)


def _projection_weights_ok(plan, layers, inputs, n_go):
    """Whether each projection weight still has the shape the forward ran with."""
    for l in range(1, len(layers)):
        wi = inputs[n_go + plan.i2h_params[l - 1][0]]
        if not _float32(wi) or wi.shape != (layers[l].x.shape[2], layers[l - 1].hs.shape[2]):
            return False
    return True


def _projection_grads(l, wi, layer_input_grad, below, by_role):
    """The gradient of layer l's projection FC(below, W_i2h, b_i2h) over all steps as
    whole-sequence products: by_role[l, 'i2h_weight' / 'i2h_bias']; returns the gradient
    of below [T, N, D] (for the lower layer's hidden state at steps 1..T, before that
    layer runs)."""
    steps, batch = below.shape[0], below.shape[1]
    flat = layer_input_grad.reshape(steps * batch, -1)
    by_role[l, "i2h_weight"] = gemm.matmul(flat.T, np.ascontiguousarray(below).reshape(steps * batch, -1))
    by_role[l, "i2h_bias"] = flat.sum(axis=0)
    return gemm.matmul(flat, np.ascontiguousarray(wi)).reshape(steps, batch, -1)


def _filled_steps(steps, has_backward):
    """The steps whose workspaces the generic loop leaves: every step's with a backward
    net, else the last two (two alternating workspaces)."""
    return range(steps) if has_backward else range(max(0, steps - 2), steps)


def _fill_step_workspaces(plan, x, hs, cs, gates, step_workspaces, timestep, has_backward, pre=None, mi=None):
    """The step workspaces as the generic loop leaves them (views, not copies): every
    step's with a backward net, else the two alternating ones holding the last steps."""
    steps = x.shape[0]
    for t in _filled_steps(steps, has_backward):
        ws = step_workspaces[t if has_backward else t % 2]
        ws[timestep] = np.array([t], np.int32)
        s = slice(t, t + 1)
        blobs = [(plan.h_prev, hs[s]), (plan.h, hs[t + 1:t + 2]), (plan.c_prev, cs[s]), (plan.c, cs[t + 1:t + 2]),
                 (plan.input_t, x[s]), (plan.gates, gates[s])]
        if mi is not None:
            alpha, beta1, beta2, bias2 = mi
            scaled = x[s] * alpha + beta1
            blobs += [(plan.mi["pre"], pre[s]), (plan.mi["scaled"], scaled), (plan.mi["mixed"], scaled * pre[s]),
                      (plan.mi["part"], x[s] * beta2 + bias2)]
        for name, value in blobs:
            ws[name] = value


def lstm_backward(record, roles, inputs, n_go, per_step, last_step, states, state_inputs, blobs, input_grad_name):
    """The gradient op's outputs (input projection, parameters in `roles` order,
    initial states) from the fused forward's record, or None for the generic loop."""
    plan = record.plan
    x, hs, cs = record.x, record.hs, record.cs
    steps, batch, d = hs.shape[0] - 1, hs.shape[1], hs.shape[2]
    forward_x = inputs[n_go]
    if not isinstance(forward_x, np.ndarray) or forward_x.shape != x.shape:
        return None
    if blobs.get(plan.h_states) is not hs or blobs.get(plan.c_states) is not cs:
        return None                 # the states were replaced since: the generic path reads them
    if sorted(states) != sorted([plan.h_states, plan.c_states]):
        return None
    grads = _state_grads(hs, inputs, states, per_step, last_step)
    if grads is None:
        return None
    mi = None if record.mi is None else (x, record.mi[0], record.mi[1], record.pre)
    dgates, _, dw, db = K.lstm_sequence_gradient(record.w, hs, cs, record.gates, record.seq, plan.forget_bias,
                                                 plan.drop_states, grads[plan.h_states], grads[plan.c_states], mi)
    by_role = {"weight": dw, "bias": db}
    input_grad = dgates
    if mi is not None:
        input_grad, mi_grads = _milstm_input_grads(dgates, x, record.pre, record.mi)
        by_role.update(mi_grads)
    return gradient_outputs(input_grad, by_role, grads, roles, inputs, n_go, states, state_inputs, blobs,
                            input_grad_name)


milstm_backward = lstm_backward


def _state_grads(hs, inputs, states, per_step, last_step):
    """{state: [T + 1, N, D] gradient} holding what arrives from outside (the all-step
    output's gradient at steps 1..T, the last-step output's at T); None when an
    output gradient has a shape the generic loop would treat differently."""
    steps, batch, d = hs.shape[0] - 1, hs.shape[1], hs.shape[2]
    grads = {}
    for name in states:
        g = np.zeros_like(hs)
        if name in last_step:
            value = np.asarray(inputs[last_step[name]])
            if value.size != batch * d:
                return None
            g[-1] += value.reshape(batch, d)
        if name in per_step:
            value = np.asarray(inputs[per_step[name]])
            if value.shape != (steps, batch, d):
                return None
            g[1:] += value
        grads[name] = g
    return grads


def _stack_state_grads(plan, layers, blobs, inputs, per_step, last_step, with_cells):
    """Every layer's state gradients (_state_grads), or None when a layer's state
    tensors were replaced since the forward (the generic path reads them) or an output
    gradient does not fit."""
    grads = {}
    for layer, r in zip(plan.layers, layers):
        if blobs.get(layer.h_states) is not r.hs or (with_cells and blobs.get(layer.c_states) is not r.cs):
            return None
        names = [layer.h_states, layer.c_states] if with_cells else [layer.h_states]
        layer_grads = _state_grads(r.hs, inputs, names, per_step, last_step)
        if layer_grads is None:
            return None
        grads.update(layer_grads)
    return grads


def _initial_state_grads(grads, inputs, n_go, states, state_inputs):
    outputs = []
    for name, k in zip(states, state_inputs):
        init = np.asarray(inputs[n_go + k])
        g = grads[name]
        if init.ndim >= 2:
            outputs.append(np.ascontiguousarray(g[:1].reshape(init.shape)))
        else:
            outputs.append(g[0].sum(axis=0).astype(init.dtype))
    return outputs


# --------------------------------------------------------------------------- GRU

class FusedGRURecord:
    __slots__ = ("plan", "x", "w3", "wn", "hs", "saved", "seq")

    def __init__(self, plan, x, w3, wn, hs, saved, seq):
        self.plan, self.x, self.w3, self.wn, self.hs, self.saved, self.seq = plan, x, w3, wn, hs, saved, seq


def _gru_layer_ok(plan, inputs, x, hs):
    """The layer's (w3, wn, b, lengths) as gru_sequence takes them when the kernel can
    run it on input projection x, else None."""
    params = [inputs[k] for k in plan.params]          # W_r, b_r, W_z, b_z, W_n, b_n
    if not all(_float32(a) for a in [x, hs] + params) or x.ndim != 3 or hs.ndim != 3:
        return None
    steps, batch, d = x.shape[0], x.shape[1], hs.shape[2]
    if (x.shape[2] != 3 * d or hs.shape != (steps + 1, batch, d) or not hs.flags.c_contiguous
            or any(w.shape != (d, d) for w in params[0::2]) or any(b.shape != (d,) for b in params[1::2])):
        return None
    seq = _lengths(plan, inputs, batch)
    if seq is False:
        return None
    w_r, b_r, w_z, b_z, w_n, b_n = params
    w3 = np.concatenate([w_r, w_z, w_n] if plan.lbr else [w_r, w_z])
    return w3, np.ascontiguousarray(w_n), np.concatenate([b_r, b_z, b_n]), seq


def gru_forward(plan, inputs, blobs, scratch, step_workspaces, timestep, has_backward):
    """As lstm_forward, for a recognised gru_cell step net."""
    if not fused_gru.available():
        return None
    x, hs = inputs[0], blobs.get(plan.h_states)
    ok = _gru_layer_ok(plan, inputs, x, hs)
    if ok is None:
        return None
    w3, wn, b, seq = ok
    x = np.ascontiguousarray(x)
    saved = fused_gru.gru_sequence(x, w3, wn, b, hs, seq, plan.lbr, plan.drop_states)
    scratch.set_fused(FusedGRURecord(plan, x, w3, wn, hs, saved, seq),
                      lambda: _fill_gru_workspaces(plan, x, hs, saved, step_workspaces, timestep, has_backward))
    return True


def _fill_gru_workspaces(plan, x, hs, saved, step_workspaces, timestep, has_backward):
    gates, og, rs, mh = saved
    steps, d = x.shape[0], hs.shape[2]
    b = plan.blobs
    dims = np.array([d, d, d], np.int32)
    for t in (range(steps) if has_backward else range(max(0, steps - 2), steps)):
        ws = step_workspaces[t if has_backward else t % 2]
        ws[timestep] = np.array([t], np.int32)
        s = slice(t, t + 1)
        mixed = rs[s] * og[s] if plan.lbr else mh[s]
        for name, value in ((b["h_prev"], hs[s]), (b["h"], hs[t + 1:t + 2]), (b["input_t"], x[s]),
                            (b["x_r"], x[s, :, :d]), (b["x_z"], x[s, :, d:2 * d]), (b["x_n"], x[s, :, 2 * d:]),
                            (b["r"], gates[s, :, :d]), (b["z"], gates[s, :, d:2 * d]), (b["rs"], rs[s]),
                            (b["og"], og[s]), (b["mixed"], mixed), (b["summed"], gates[s, :, 2 * d:]),
                            (b["gates"], gates[s]), (b["dims"], dims)):
            ws[name] = value


def gru_backward(record, roles, inputs, n_go, per_step, last_step, states, state_inputs, blobs, input_grad_name):
    """As lstm_backward, for gru_forward's record."""
    plan = record.plan
    hs = record.hs
    d = hs.shape[2]
    forward_x = inputs[n_go]
    if not isinstance(forward_x, np.ndarray) or forward_x.shape != record.x.shape:
        return None
    if blobs.get(plan.h_states) is not hs or list(states) != [plan.h_states]:
        return None
    grads = _state_grads(hs, inputs, states, per_step, last_step)
    if grads is None:
        return None
    dgates, dw3, dwn, db = fused_gru.gru_sequence_gradient(record.w3, record.wn, hs, record.saved, record.seq,
                                                           plan.lbr, plan.drop_states, grads[plan.h_states])
    by_role = [dw3[:d], db[:d], dw3[d:2 * d], db[d:2 * d], dw3[2 * d:] if plan.lbr else dwn, db[2 * d:]]
    return gradient_outputs(dgates, by_role, grads, roles, inputs, n_go, states, state_inputs, blobs,
                            input_grad_name)


# --------------------------------------------------------------------------- stacked GRU

# one layer of a fused stacked GRU run: its input projection x, the kernel's weights
# (w3, wn, concatenated b), states hs, gru_sequence's saved values and the lengths
GRUStackLayerRecord = collections.namedtuple("GRUStackLayerRecord", "x w3 wn hs saved seq")


def gru_stack_forward(plan, inputs, blobs, scratch, step_workspaces, timestep, has_backward):
    """As lstm_stack_forward, for stacked gru_cell layers."""
    if not fused_gru.available():
        return None
    x = inputs[0]
    if not _float32(x) or x.ndim != 3:
        return None
    steps, batch = x.shape[0], x.shape[1]
    states = [blobs.get(layer.h_states) for layer in plan.layers]
    d_in = None
    for l, (layer, hs) in enumerate(zip(plan.layers, states)):    # check every layer before running
        if not (_float32(hs) and hs.ndim == 3):
            return None
        d = hs.shape[2]
        if _gru_layer_ok(layer, inputs, np.empty((steps, batch, 3 * d), np.float32) if l else x, hs) is None:
            return None
        if l:
            wi, bi = (inputs[k] for k in plan.i2h_params[l - 1])
            if not (_float32(wi) and _float32(bi) and wi.shape == (3 * d, d_in) and bi.shape == (3 * d,)):
                return None
        d_in = d
    layers = []
    for l, (layer, hs) in enumerate(zip(plan.layers, states)):
        proj = np.ascontiguousarray(x) if l == 0 else _projection(plan, l, inputs, states[l - 1][1:])
        w3, wn, b, seq = _gru_layer_ok(layer, inputs, proj, hs)
        saved = fused_gru.gru_sequence(proj, w3, wn, b, hs, seq, layer.lbr, layer.drop_states)
        layers.append(GRUStackLayerRecord(proj, w3, wn, hs, saved, seq))

    def fill():
        for layer, r in zip(plan.layers, layers):
            _fill_gru_workspaces(layer, r.x, r.hs, r.saved, step_workspaces, timestep, has_backward)
    scratch.set_fused(FusedStackRecord(plan, layers), fill)
    return True


def gru_stack_backward(record, roles, inputs, n_go, per_step, last_step, states, state_inputs, blobs,
                       input_grad_name):
    """As lstm_stack_backward, for gru_stack_forward's record."""
    plan, layers = record.plan, record.layers
    forward_x = inputs[n_go]
    if not isinstance(forward_x, np.ndarray) or forward_x.shape != layers[0].x.shape:
        return None
    if sorted(states) != sorted(layer.h_states for layer in plan.layers):
        return None
    grads = _stack_state_grads(plan, layers, blobs, inputs, per_step, last_step, with_cells=False)
    if grads is None or not _projection_weights_ok(plan, layers, inputs, n_go):
        return None
    by_role = {}
    input_grad = None
    for l in range(len(layers) - 1, -1, -1):
        layer, r = plan.layers[l], layers[l]
        d = r.hs.shape[2]
        dgates, dw3, dwn, db = fused_gru.gru_sequence_gradient(r.w3, r.wn, r.hs, r.saved, r.seq, layer.lbr,
                                                               layer.drop_states, grads[layer.h_states])
        per_role = [dw3[:d], db[:d], dw3[d:2 * d], db[d:2 * d], dw3[2 * d:] if layer.lbr else dwn, db[2 * d:]]
        by_role.update({(l, k): np.ascontiguousarray(g) for k, g in enumerate(per_role)})
        if l == 0:
            input_grad = dgates
            break
        grads[plan.layers[l - 1].h_states][1:] += _projection_grads(
            l, inputs[n_go + plan.i2h_params[l - 1][0]], dgates, layers[l - 1].hs[1:], by_role)
    return gradient_outputs(input_grad, by_role, grads, roles, inputs, n_go, states, state_inputs, blobs,
                          input_grad_name)


# LSTMWithAttention's lstm_attention_forward / lstm_attention_backward are set here by
# fused_attention_run.py when it is imported (it imports this module's helpers).
