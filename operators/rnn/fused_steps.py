"""Recognising the step nets RecurrentNetwork can run as one compiled pass.

rnn_cell.LSTM's step net is (names vary with the scope):

    FC(h_prev, W, b) -> gates            axis=2
    Sum(gates, input_t) -> gates         (either order)
    LSTMUnit(h_prev, c_prev, gates[, seq_lengths], timestep) -> h, c

with links h_prev/h -> the hidden state tensor (offsets 0/1), c_prev/c -> the cell
state tensor (0/1) and input_t -> the op's input 0 (offset 0), and W, b,
seq_lengths inputs of the op. `recognise_lstm` finds that shape when the op is
created (plan time) and returns an LSTMStepPlan; anything else (another cell, extra
links, an argument the fused kernel does not model) gives None and the op keeps
the generic step-net loop. `recognise_lstm_backward` does the same for the backward
step net recurrent.py derives from it (LSTMUnitGradient, FCGradient, Sum, and the
recomputed forward ops of memory_optimization). MILSTM and gru_cell.GRU steps are
recognised the same way, and so are stacks of one of these layer kinds (MultiRNNCell:
each layer's ops, the layers above 0 preceded by the FC projecting the lower layer's new
hidden state) with their backward nets (per layer from the top, then the projection's
FCGradient and the Sum into the lower layer's hidden-state gradient). LSTM stacks may have
residual layers (MultiRNNCell's residual_output_layers: a Sum of a layer's new hidden state
and its input, which the next layer projects); their backward net must be what
caffe2py/recurrent.py derives from the step net.

rnn_cell.LSTMWithAttention's step nets are recognised in fused_attention_steps.py
(kind 'lstm_attention', run by fused_attention_run.py).

CAFFE2PY_RNN_FUSED=0 turns the fused path off (read at every run), so tests can
compare the two paths on the same net.
"""
import os

_FC_ARGS = {"axis": 2, "axis_w": 1}
_UNIT_ARGS = ("forget_bias", "drop_states", "sequence_lengths")


def fused_enabled():
    return os.environ.get("CAFFE2PY_RNN_FUSED", "1").strip() != "0"


class LSTMStepPlan:
    """What the fused LSTM needs to know about a recognised step net."""
    __slots__ = ("h_prev", "c_prev", "h", "c", "gates", "input_t", "h_states", "c_states", "weight", "bias",
                 "seq", "weight_name", "forget_bias", "drop_states", "unit_args", "mi")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])


def arg_values(op):
    """{name: value} of every argument of an OperatorDef (f, i, s, ints, strings; None
    for anything else)."""
    out = {}
    for a in op.arg:
        if a.HasField("f"):
            out[a.name] = a.f
        elif a.HasField("i"):
            out[a.name] = a.i
        elif a.HasField("s"):
            out[a.name] = a.s.decode() if isinstance(a.s, bytes) else a.s
        elif a.ints:
            out[a.name] = list(a.ints)
        elif a.strings:
            out[a.name] = [v.decode() for v in a.strings]
        else:
            out[a.name] = None
    return out


def _args(op):
    """{name: value} of an OperatorDef's scalar arguments (None for anything else)."""
    return {k: v if isinstance(v, (int, float)) else None for k, v in arg_values(op).items()}


def _link_map(links):
    """{internal: (external, offset)} when every link is one step wide and no internal
    name repeats; None otherwise."""
    out = {}
    for link in links:
        if link.window != 1 or link.internal in out:
            return None
        out[link.internal] = (link.external, link.offset)
    return out


def recognise_lstm(step_def, links, states, state_inputs, timestep, op_inputs):
    """An LSTMStepPlan when step_def is rnn_cell's LSTM step (see the module
    docstring), else None. op_inputs: the RecurrentNetwork op's input names."""
    link = _link_map(links)
    if link is None or len(step_def.op) != 3:
        return None
    return _one_cell(_lstm_layer(list(step_def.op), link, timestep, op_inputs, states, None), link, states,
                     state_inputs)


def _one_cell(plan, link, states, state_inputs):
    """plan when it is the whole step net of a one-layer cell: its links are exactly the
    cell's input, h and c (previous and new), its recurrent states its h and c; else None."""
    if (plan is None or set(link) != {plan.h_prev, plan.h, plan.c_prev, plan.c, plan.input_t}
            or sorted(states) != sorted([plan.h_states, plan.c_states]) or len(state_inputs) != 2):
        return None
    return plan


def _param_index(name, op_inputs, states):
    """The op input holding a parameter (or the lengths), None when it is not one."""
    if name not in op_inputs or name in states or op_inputs.index(name) == 0:
        return None
    return op_inputs.index(name)


def _lstm_layer(ops, link, timestep, op_inputs, states, input_name):
    """One layer's FC, Sum, LSTMUnit as an LSTMStepPlan (links checked for its own
    blobs only); its input is the op's input 0 through a link, or the blob input_name."""
    if [op.type for op in ops] != ["FC", "Sum", "LSTMUnit"]:
        return None
    fc, add, unit = ops
    if len(fc.input) != 3 or len(fc.output) != 1 or any(op.engine for op in ops):
        return None
    fc_args = _args(fc)
    if any(k not in _FC_ARGS or v != _FC_ARGS[k] for k, v in fc_args.items()) or fc_args.get("axis") != 2:
        return None
    h_prev, weight, bias = fc.input
    gates = fc.output[0]
    if len(add.input) != 2 or list(add.output) != [gates] or add.arg:
        return None
    others = [b for b in add.input if b != gates]
    if len(others) != 1:
        return None
    input_t = others[0]
    unit_args = _args(unit)
    if any(k not in _UNIT_ARGS or v is None for k, v in unit_args.items()):
        return None
    with_seq = bool(unit_args.get("sequence_lengths", 1))
    if len(unit.input) != (5 if with_seq else 4) or len(unit.output) != 2:
        return None
    if unit.input[0] != h_prev or unit.input[2] != gates or unit.input[-1] != timestep:
        return None
    c_prev = unit.input[1]
    seq = unit.input[3] if with_seq else None
    h, c = unit.output
    if any(name not in link for name in (h_prev, h, c_prev, c)):
        return None
    h_states, c_states = link[h_prev][0], link[c_prev][0]
    if (link[h_prev] != (h_states, 0) or link[h] != (h_states, 1) or link[c_prev] != (c_states, 0)
            or link[c] != (c_states, 1) or h_states == c_states or h_states not in states
            or c_states not in states):
        return None
    if input_name is None:
        if link.get(input_t) != (op_inputs[0], 0):
            return None
    elif input_t != input_name:
        return None
    names = [h_prev, c_prev, h, c, gates, input_t, weight, bias, timestep] + ([seq] if seq else [])
    if len(set(names)) != len(names):
        return None
    index = {role: _param_index(name, op_inputs, states) if name else None
             for role, name in (("weight", weight), ("bias", bias), ("seq", seq))}
    if index["weight"] is None or index["bias"] is None or (seq and index["seq"] is None):
        return None
    return LSTMStepPlan(h_prev=h_prev, c_prev=c_prev, h=h, c=c, gates=gates, input_t=input_t, h_states=h_states,
                        c_states=c_states, weight=index["weight"], bias=index["bias"], seq=index["seq"],
                        weight_name=weight, forget_bias=float(unit_args.get("forget_bias", 0.0)),
                        drop_states=bool(unit_args.get("drop_states", 0)), unit_args=unit_args, mi=None)


_MI_TYPES = ["FC", "ElementwiseLinear", "Mul", "ElementwiseLinear", "Sum", "LSTMUnit"]


def recognise_milstm(step_def, links, states, state_inputs, timestep, op_inputs):
    """An LSTMStepPlan with `mi` set when step_def is rnn_cell.MILSTM's step:
    FC(h_prev) -> pre; ElementwiseLinear(input_t, alpha, beta1) -> scaled;
    Mul(scaled, pre) -> mixed; ElementwiseLinear(input_t, beta2, b) -> input_part;
    Sum(mixed, input_part) -> gates; LSTMUnit. Else None."""
    link = _link_map(links)
    if link is None:
        return None
    return _one_cell(_milstm_layer(list(step_def.op), link, timestep, op_inputs, states, None), link, states,
                     state_inputs)


def _milstm_layer(ops, link, timestep, op_inputs, states, input_name):
    """One MILSTM layer's six ops as an LSTMStepPlan with `mi` (links checked for its own
    blobs only); its input is the op's input 0 through a link, or the blob input_name."""
    from caffe2py.proto import caffe2_pb2
    if [op.type for op in ops] != _MI_TYPES:
        return None
    fc, el1, mul, el2, add, unit = ops
    if len(el1.input) != 3 or len(el2.input) != 3 or el1.input[0] != el2.input[0] or len(fc.output) != 1:
        return None
    if _args(el1) != {"axis": 2} or _args(el2) != {"axis": 2} or len(el1.output) != 1 or len(el2.output) != 1:
        return None
    input_t, pre, scaled, part = el1.input[0], fc.output[0], el1.output[0], el2.output[0]
    if list(mul.input) != [scaled, pre] or len(mul.output) != 1 or mul.arg:
        return None
    mixed = mul.output[0]
    if len(add.output) != 1 or not _sum_ok(add, mixed, part, add.output[0]):
        return None
    gates = add.output[0]
    # the same checks as an LSTM whose FC writes the gates and adds input_t
    fake_fc = caffe2_pb2.OperatorDef()
    fake_fc.CopyFrom(fc)
    fake_fc.output[:] = [gates]
    fake_sum = caffe2_pb2.OperatorDef(type="Sum", input=[gates, input_t], output=[gates])
    plan = _lstm_layer([fake_fc, fake_sum, unit], link, timestep, op_inputs, states, input_name)
    if plan is None:
        return None
    names = [plan.h_prev, plan.c_prev, plan.h, plan.c, gates, input_t, pre, scaled, mixed, part]
    if len(set(names)) != len(names):
        return None
    index = [_param_index(name, op_inputs, states) for name in list(el1.input[1:]) + list(el2.input[1:])]
    if None in index or len(set(index + [plan.weight, plan.bias])) != 6:
        return None
    plan.mi = dict(pre=pre, scaled=scaled, mixed=mixed, part=part,
                   params=dict(zip(("alpha", "beta1", "beta2", "bias2"), index)),
                   names=dict(zip(("alpha", "beta1", "beta2", "bias2"), list(el1.input[1:]) + list(el2.input[1:]))))
    return plan


_MI_BACKWARD_TYPES = sorted(["LSTMUnitGradient", "ElementwiseLinearGradient", "MulGradient",
                             "ElementwiseLinearGradient", "Sum", "FCGradient", "Sum"])


def recognise_milstm_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """{op input index: role} when the backward step net is the registry's gradient
    of plan's MILSTM step net, else None."""
    forward_outputs = {plan.gates, plan.h, plan.c, plan.mi["pre"], plan.mi["scaled"], plan.mi["mixed"],
                       plan.mi["part"]}
    ops = [op for op in step_def.op if not set(op.output) <= forward_outputs]
    if sorted(op.type for op in ops) != _MI_BACKWARD_TYPES:
        return None
    unit = [op for op in ops if op.type == "LSTMUnitGradient"][0]
    if _args(unit) != plan.unit_args or len(unit.output) != 3 or list(unit.input[:2]) != [plan.h_prev, plan.c_prev]:
        return None
    h_grad, c_grad = unit.input[-2], unit.input[-1]
    hp_grad, cp_grad = unit.output[0], unit.output[1]
    link = _link_map(backward_links)
    states_h, states_c = plan.h_states + "_grad", plan.c_states + "_grad"
    if link is None:
        return None
    rest = {k: v for k, v in link.items() if k not in (h_grad, hp_grad, c_grad, cp_grad)}
    if (link.get(h_grad) != (states_h, 1) or link.get(hp_grad) != (states_h, 0) or link.get(c_grad) != (states_c, 1)
            or link.get(cp_grad) != (states_c, 0) or list(rest.values()) != [(input_grad, 0)]):
        return None
    grads = {}
    for op in ops:
        if op.type == "FCGradient" and len(op.output) == 3 and op.input[1] == plan.weight_name:
            grads["weight"], grads["bias"] = op.output[0], op.output[1]
        elif op.type == "ElementwiseLinearGradient" and len(op.output) == 3:
            if op.input[2] == plan.mi["names"]["alpha"]:
                grads["alpha"], grads["beta1"] = op.output[1], op.output[2]
            elif op.input[2] == plan.mi["names"]["beta2"]:
                grads["beta2"], grads["bias2"] = op.output[1], op.output[2]
    index = dict(plan.mi["params"], weight=plan.weight, bias=plan.bias)
    if len(grads) != 6 or not param_grads or len(params) != len(param_grads):
        return None
    roles = {}
    for k, name in zip(params, param_grads):
        role = [r for r, i in index.items() if i == k]
        if len(role) != 1 or grads[role[0]] != name:
            return None
        roles[k] = role[0]
    return roles


class LSTMStackPlan:
    """Stacked LSTM or MILSTM layers in one step net (rnn_cell's MultiRNNCell; every
    layer of one kind, `layers[l].mi` set for MILSTM): layer l > 0 projects the layer
    below's output with its own FC (`i2h`, op inputs `i2h_params`, weight names
    `i2h_weights`) before its recurrent FC. `residual[l]`: for an LSTM layer l > 0 in
    residual_output_layers below the top, the Sum adding its input to its new hidden
    state (what layer l + 1 projects; None otherwise); `step_def` the forward step net
    (a residual stack's backward net is checked against recurrent.py's derivation)."""
    __slots__ = ("layers", "i2h", "i2h_params", "i2h_weights", "residual", "step_def")

    def __init__(self, layers, i2h, i2h_params, i2h_weights, residual=None, step_def=None):
        self.layers, self.i2h, self.i2h_params, self.i2h_weights = layers, i2h, i2h_params, i2h_weights
        self.residual = residual or [None] * len(layers)
        self.step_def = step_def

    @property
    def h_states(self):
        return self.layers[0].h_states

    @property
    def has_residual(self):
        return any(self.residual)


class GRUStackPlan(LSTMStackPlan):
    """The same for stacked gru_cell.GRU layers (GRUStepPlans)."""
    __slots__ = ()


def _layer_input(layer):
    return layer.blobs["input_t"] if isinstance(layer, GRUStepPlan) else layer.input_t


def _layer_output(layer):
    """The layer's new hidden state (what the next layer's projection reads)."""
    return layer.blobs["h"] if isinstance(layer, GRUStepPlan) else layer.h


def _layer_names(layer):
    """(linked step blobs, state tensors, step blobs of its own) of a recognised layer."""
    if isinstance(layer, GRUStepPlan):
        own = [v for k, v in layer.blobs.items() if k not in ("input_t", "timestep")]
        return {layer.blobs["h_prev"], layer.blobs["h"]}, [layer.h_states], own
    own = [layer.h_prev, layer.h, layer.c_prev, layer.c, layer.gates]
    if layer.mi:
        own += [layer.mi[k] for k in ("pre", "scaled", "mixed", "part")]
    return {layer.h_prev, layer.h, layer.c_prev, layer.c}, [layer.h_states, layer.c_states], own


def recognise_lstm_stack(step_def, links, states, state_inputs, timestep, op_inputs):
    """An LSTMStackPlan for a step net of two or more LSTM (or MILSTM) layers, else None
    (residual layers: LSTM only)."""
    mi = [op.type for op in step_def.op[:6]] == _MI_TYPES
    return _recognise_stack(step_def, links, states, state_inputs, timestep, op_inputs,
                            6 if mi else 3, _milstm_layer if mi else _lstm_layer, LSTMStackPlan, residual=not mi)


def recognise_gru_stack(step_def, links, states, state_inputs, timestep, op_inputs):
    """A GRUStackPlan for a step net of two or more gru_cell.GRU layers, else None."""
    return _recognise_stack(step_def, links, states, state_inputs, timestep, op_inputs, 11, _gru_layer,
                            GRUStackPlan)


def _recognise_stack(step_def, links, states, state_inputs, timestep, op_inputs, width, layer_fn, plan_class,
                     residual=False):
    """Layers of `width` ops each (layer_fn recognises one), every layer above 0 preceded
    by the FC projecting the output of the layer below: its new hidden state, or with
    `residual` allowed, for a layer l > 0, the Sum of that and the layer's own input
    (MultiRNNCell's residual_output_<l>); a plan_class or None."""
    ops = list(step_def.op)
    link = _link_map(links)
    if link is None or len(ops) < width:
        return None
    layers = [layer_fn(ops[:width], link, timestep, op_inputs, states, None)]
    layer_inputs = [None]                   # the blob each layer's projection reads
    sums = [None]
    i2h, i2h_params, projections = [], [], []
    pos = width
    while pos < len(ops):
        prev = layers[-1]
        if prev is None:
            return None
        below = _layer_output(prev)
        add = ops[pos]
        if residual and len(layers) > 1 and add.type == "Sum" and len(add.output) == 1:
            if not _sum_ok(add, below, layer_inputs[-1], add.output[0]) or add.engine:
                return None
            sums[-1] = below = add.output[0]
            pos += 1
        if pos + 1 + width > len(ops):
            return None
        proj = ops[pos]
        if proj.type != "FC" or not _fc_ok(proj, below):
            return None
        i2h.append(proj.output[0])
        params = [_param_index(name, op_inputs, states) for name in proj.input[1:]]
        if None in params:
            return None
        i2h_params.append(params)
        projections.append(proj)
        layer_inputs.append(below)
        sums.append(None)
        layers.append(layer_fn(ops[pos + 1:pos + 1 + width], link, timestep, op_inputs, states, proj.output[0]))
        pos += 1 + width
    if len(layers) < 2 or layers[-1] is None:
        return None
    linked = {_layer_input(layers[0])}
    state_names, step_blobs = [], []
    for layer in layers:
        layer_linked, layer_states, own = _layer_names(layer)
        linked |= layer_linked
        state_names += layer_states
        step_blobs += own
    if (set(link) != linked or sorted(states) != sorted(state_names) or len(set(state_names)) != len(state_names)
            or len(state_inputs) != len(states) or len(set(i2h)) != len(i2h)):
        return None
    step_blobs += i2h + [_layer_input(layers[0])] + [name for name in sums if name]
    if len(set(step_blobs)) != len(step_blobs):
        return None
    if any(sums):
        return plan_class(layers, i2h, i2h_params, [proj.input[1] for proj in projections], sums, step_def)
    return plan_class(layers, i2h, i2h_params, [proj.input[1] for proj in projections])


def recognise_lstm_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """Whether the backward step net is the gradient of plan's step net that
    recurrent.py builds, with its gradient links; then {op input index: param
    grad role ('weight' or 'bias')}, else None."""
    forward_outputs = {plan.gates, plan.h, plan.c}
    ops = [op for op in step_def.op
           if not (op.type in ("FC", "Sum", "LSTMUnit") and set(op.output) <= forward_outputs)]
    link = _link_map(backward_links)
    found = None if link is None else _stack_layer_backward(plan, ops, link)
    if found is None:
        return None
    gates_grad, grads, want = found
    if link != {**want, gates_grad: (input_grad, 0)}:
        return None
    roles = {}
    if not param_grads or len(param_grads) != len(params):
        return None
    for k, name in zip(params, param_grads):
        if k not in grads or grads[k][1] != name:
            return None
        roles[k] = grads[k][0]
    return roles


# --------------------------------------------------------------------------- GRU

_GRU_TYPES = {
    True: ["Split", "FC", "Sum", "Sigmoid", "FC", "Sum", "FC", "Mul", "Sum", "Concat", "GRUUnit"],
    False: ["Split", "FC", "Sum", "Sigmoid", "FC", "Sum", "Mul", "FC", "Sum", "Concat", "GRUUnit"],
}
_GRU_UNIT_ARGS = ("drop_states", "sequence_lengths")


class GRUStepPlan:
    """What the fused GRU needs to know about a recognised gru_cell step net: the
    step blob names (`blobs`, by role), the parameter inputs and the unit's options."""
    __slots__ = ("lbr", "blobs", "h_states", "params", "seq", "drop_states", "unit_args", "fc_params")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])


def _fc_ok(op, x):
    args = _args(op)
    return (len(op.input) == 3 and len(op.output) == 1 and op.input[0] == x and args.get("axis") == 2
            and all(k in _FC_ARGS and v == _FC_ARGS[k] for k, v in args.items()))


def _sum_ok(op, a, b, out):
    return len(op.input) == 2 and sorted(op.input) == sorted([a, b]) and list(op.output) == [out] and not op.arg


def recognise_gru(step_def, links, states, state_inputs, timestep, op_inputs):
    """A GRUStepPlan when step_def is gru_cell.GRU's step (either linear_before_reset),
    else None."""
    link = _link_map(links)
    if link is None:
        return None
    plan = _gru_layer(list(step_def.op), link, timestep, op_inputs, states, None)
    if (plan is None or set(link) != {plan.blobs["h_prev"], plan.blobs["h"], plan.blobs["input_t"]}
            or list(states) != [plan.h_states] or len(state_inputs) != 1):
        return None
    return plan


def _gru_layer(ops, link, timestep, op_inputs, states, input_name):
    """One GRU layer's eleven ops as a GRUStepPlan (links checked for its own blobs
    only); its input is the op's input 0 through a link, or the blob input_name."""
    types = [op.type for op in ops]
    lbr = True if types == _GRU_TYPES[True] else False if types == _GRU_TYPES[False] else None
    if lbr is None or any(op.engine for op in ops):
        return None
    split, fc_r, sum_r, sig, fc_z, sum_z, op6, op7, sum_n, concat, unit = ops
    if len(split.input) != 1 or len(split.output) != 3 or _args(split) != {"axis": 2}:
        return None
    input_t = split.input[0]
    x_r, x_z, x_n = split.output
    h_prev = unit.input[0] if unit.input else None
    if not (_fc_ok(fc_r, h_prev) and _fc_ok(fc_z, h_prev)):
        return None
    r, z = fc_r.output[0], fc_z.output[0]
    if not (_sum_ok(sum_r, r, x_r, r) and _sum_ok(sum_z, z, x_z, z)):
        return None
    if len(sig.input) != 1 or list(sig.input) != [r] or len(sig.output) != 1 or sig.arg:
        return None
    rs = sig.output[0]
    if lbr:
        fc_n, mul = op6, op7
        if not _fc_ok(fc_n, h_prev):
            return None
        og = fc_n.output[0]
        mul_in = [rs, og]
    else:
        mul, fc_n = op6, op7
        mul_in = [rs, h_prev]
    if list(mul.input) != mul_in or len(mul.output) != 1 or mul.arg:
        return None
    mixed = mul.output[0]
    if lbr:
        summed_from = mixed
    else:
        if not _fc_ok(fc_n, mixed):
            return None
        og = fc_n.output[0]
        summed_from = og
    if len(sum_n.output) != 1 or not _sum_ok(sum_n, summed_from, x_n, sum_n.output[0]):
        return None
    summed = sum_n.output[0]
    if list(concat.input) != [r, z, summed] or len(concat.output) != 2 or _args(concat) != {"axis": 2}:
        return None
    gates, dims = concat.output
    unit_args = _args(unit)
    if any(k not in _GRU_UNIT_ARGS or v is None for k, v in unit_args.items()):
        return None
    with_seq = bool(unit_args.get("sequence_lengths", 1))
    if len(unit.input) != (4 if with_seq else 3) or len(unit.output) != 1:
        return None
    if unit.input[1] != gates or unit.input[-1] != timestep:
        return None
    seq = unit.input[2] if with_seq else None
    h = unit.output[0]
    if h_prev not in link or h not in link:
        return None
    h_states = link[h_prev][0]
    if link[h_prev] != (h_states, 0) or link[h] != (h_states, 1) or h_states not in states:
        return None
    if (link.get(input_t) != (op_inputs[0], 0)) if input_name is None else (input_t != input_name):
        return None
    blobs = dict(h_prev=h_prev, h=h, input_t=input_t, x_r=x_r, x_z=x_z, x_n=x_n, r=r, z=z, rs=rs, og=og,
                 mixed=mixed, summed=summed, gates=gates, dims=dims, timestep=timestep)
    fc_params = [(fc_r.input[1], fc_r.input[2]), (fc_z.input[1], fc_z.input[2]), (fc_n.input[1], fc_n.input[2])]
    names = list(blobs.values()) + [n for pair in fc_params for n in pair] + ([seq] if seq else [])
    if len(set(names)) != len(names):
        return None
    params = []
    for name in [n for pair in fc_params for n in pair] + ([seq] if seq else []):
        if name not in op_inputs or name in states or op_inputs.index(name) == 0:
            return None
        params.append(op_inputs.index(name))
    return GRUStepPlan(lbr=lbr, blobs=blobs, h_states=h_states, params=params[:6],
                       seq=params[6] if seq else None, drop_states=bool(unit_args.get("drop_states", 0)),
                       unit_args=unit_args, fc_params=fc_params)


_GRU_BACKWARD_TYPES = sorted(["GRUUnitGradient", "Split", "MulGradient", "FCGradient", "FCGradient", "FCGradient",
                              "SigmoidGradient", "Sum", "Sum", "Concat"])


def recognise_gru_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """{op input index: k} (k: position among W_r, b_r, W_z, b_z, W_n, b_n) when the
    backward step net is the registry's gradient of plan's step net, else None."""
    forward_outputs = {b for b in plan.blobs.values()}
    ops = [op for op in step_def.op if not set(op.output) <= forward_outputs]
    link = _link_map(backward_links)
    found = None if link is None else _gru_layer_backward(plan, ops, link)
    if found is None:
        return None
    layer_input_grad, grads, links = found
    links[layer_input_grad] = (input_grad, 0)
    if link != links or not param_grads or len(params) != len(param_grads):
        return None
    roles = {}
    for k, name in zip(params, param_grads):
        if k not in grads or grads[k][1] != name:
            return None
        roles[k] = grads[k][0]
    return roles


def _gru_layer_backward(layer, ops, link):
    """One GRU layer's ten gradient ops (GRUUnitGradient, Split, MulGradient, three
    FCGradients, SigmoidGradient, two Sums, Concat; in any order): (the layer input's
    gradient, {op input: (k, gradient name)} with k the position among W_r, b_r, W_z,
    b_z, W_n, b_n, {state gradient link: its window}), or None."""
    if sorted(op.type for op in ops) != _GRU_BACKWARD_TYPES:
        return None
    unit = [op for op in ops if op.type == "GRUUnitGradient"][0]
    if _args(unit) != layer.unit_args or len(unit.output) != 2 or unit.input[0] != layer.blobs["h_prev"]:
        return None
    h_grad, hp_grad = unit.input[-1], unit.output[0]
    concat = [op for op in ops if op.type == "Concat"][0]
    states_grad = layer.h_states + "_grad"
    links = {h_grad: (states_grad, 1), hp_grad: (states_grad, 0)}
    if any(link.get(k) != v for k, v in links.items()):
        return None
    grad_names = {}
    for op in ops:
        if op.type == "FCGradient":
            for w, b in layer.fc_params:
                if op.input[1] == w and len(op.output) == 3:
                    grad_names[w], grad_names[b] = op.output[0], op.output[1]
    wanted = [n for pair in layer.fc_params for n in pair]
    if len(grad_names) != 6 or len(concat.output) < 1:
        return None
    grads = {k: (role, grad_names[wanted[role]]) for role, k in enumerate(layer.params)}
    return concat.output[0], grads, links


def _stack_layer_backward(layer, ops, link):
    """One LSTM layer's LSTMUnitGradient, FCGradient and Sum in a backward step net
    (a single layer's, recognise_lstm_backward, or one of a stack's); returns (the layer input's gradient,
    {op input: (role, gradient name)}, {backward link: its window}) or None."""
    if [op.type for op in ops] != ["LSTMUnitGradient", "FCGradient", "Sum"]:
        return None
    unit, fcg, add = ops
    head = [layer.h_prev, layer.c_prev, layer.gates] + ([None] if layer.seq is not None else [])
    if len(unit.input) != len(head) + 5 or _args(unit) != layer.unit_args or len(unit.output) != 3:
        return None
    if [b for b, want in zip(unit.input, head) if want is not None] != [b for b in head if b is not None]:
        return None
    if list(unit.input[len(head) + 1:len(head) + 3]) != [layer.h, layer.c]:
        return None
    h_grad, c_grad = unit.input[-2], unit.input[-1]
    hp_grad, cp_grad, gates_grad = unit.output
    if list(fcg.input) != [layer.h_prev, layer.weight_name, gates_grad] or len(fcg.output) != 3:
        return None
    w_grad, b_grad, fc_h_grad = fcg.output
    if sorted(add.input) != sorted([hp_grad, fc_h_grad]) or list(add.output) != [hp_grad]:
        return None
    links = _state_grad_links(layer, h_grad, hp_grad, c_grad, cp_grad, link)
    if links is None:
        return None
    return gates_grad, {layer.weight: ("weight", w_grad), layer.bias: ("bias", b_grad)}, links


def _state_grad_links(layer, h_grad, hp_grad, c_grad, cp_grad, link):
    want = {h_grad: (layer.h_states + "_grad", 1), hp_grad: (layer.h_states + "_grad", 0),
            c_grad: (layer.c_states + "_grad", 1), cp_grad: (layer.c_states + "_grad", 0)}
    return want if all(link.get(k) == v for k, v in want.items()) else None


def _stack_milstm_layer_backward(layer, ops, link):
    """_stack_layer_backward for an MILSTM layer's seven gradient ops (LSTMUnitGradient,
    the two ElementwiseLinearGradients, MulGradient, FCGradient and the two Sums adding the
    split input and hidden-state gradients), checked op by op, in any order."""
    if sorted(op.type for op in ops) != _MI_BACKWARD_TYPES:
        return None
    by_type = {}
    for op in ops:
        by_type.setdefault(op.type, []).append(op)
    (unit,), (mul,), (fcg,) = by_type["LSTMUnitGradient"], by_type["MulGradient"], by_type["FCGradient"]
    mi, names = layer.mi, layer.mi["names"]
    if (_args(unit) != layer.unit_args or len(unit.output) != 3 or list(unit.input[:3]) != [layer.h_prev,
                                                                                            layer.c_prev, layer.gates]):
        return None
    hp_grad, cp_grad, gates_grad = unit.output
    els = {op.input[2]: op for op in by_type["ElementwiseLinearGradient"] if len(op.input) == 3 and len(op.output) == 3}
    el_part, el_scaled = els.get(names["beta2"]), els.get(names["alpha"])
    if (el_part is None or el_scaled is None or list(mul.input) != [gates_grad, mi["scaled"], mi["pre"]]
            or len(mul.output) != 2 or list(el_part.input[:2]) != [gates_grad, layer.input_t]
            or list(el_scaled.input[:2]) != [mul.output[0], layer.input_t]
            or list(fcg.input) != [layer.h_prev, layer.weight_name, mul.output[1]] or len(fcg.output) != 3):
        return None
    input_grad = el_part.output[0]
    sums = by_type["Sum"]
    if not any(_sum_ok(op, input_grad, el_scaled.output[0], input_grad) for op in sums):
        return None
    if not any(_sum_ok(op, hp_grad, fcg.output[2], hp_grad) for op in sums):
        return None
    links = _state_grad_links(layer, unit.input[-2], hp_grad, unit.input[-1], cp_grad, link)
    if links is None:
        return None
    index = mi["params"]
    grads = {layer.weight: ("weight", fcg.output[0]), layer.bias: ("bias", fcg.output[1]),
             index["alpha"]: ("alpha", el_scaled.output[1]), index["beta1"]: ("beta1", el_scaled.output[2]),
             index["beta2"]: ("beta2", el_part.output[1]), index["bias2"]: ("bias2", el_part.output[2])}
    return input_grad, grads, links


def recognise_lstm_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """{op input index: (layer, role)} when the backward step net is what recurrent.py
    derives from plan's stacked step net, else None (see _recognise_stack_backward).
    Roles: the layer's ('weight', 'bias', MILSTM's 'alpha', 'beta1', 'beta2', 'bias2'),
    'i2h_weight', 'i2h_bias'."""
    if plan.has_residual:
        return _recognise_residual_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad)
    if plan.layers[0].mi:
        return _recognise_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad,
                                         7, 6, _stack_milstm_layer_backward)
    return _recognise_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad,
                                     3, 2, _stack_layer_backward)


def recognise_gru_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """As recognise_lstm_stack_backward for a GRUStackPlan; the layers' roles are the
    positions among W_r, b_r, W_z, b_z, W_n, b_n."""
    return _recognise_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad,
                                     10, 6, _gru_layer_backward)


def _recognise_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad, width, per_layer,
                              check):
    """Per layer, top first: the layer's `width` gradient ops (`check` recognises them),
    then for layers above 0 the input projection's FCGradient (of the lower layer's new
    hidden state) and the Sum adding its hidden-state gradient to the lower layer's.
    Recomputed forward ops (memory_optimization) are left out first."""
    forward_outputs = set(plan.i2h)
    for layer in plan.layers:
        forward_outputs |= set(_layer_names(layer)[2])
    ops = [op for op in step_def.op if not set(op.output) <= forward_outputs]
    link = _link_map(backward_links)
    if link is None or len(ops) != (width + 2) * len(plan.layers) - 2:
        return None
    grads, wanted_links, start = {}, {}, 0
    for l in range(len(plan.layers) - 1, -1, -1):
        found = check(plan.layers[l], ops[start:start + width], link)
        if found is None:
            return None
        layer_input_grad, layer_grads, layer_links = found
        wanted_links.update(layer_links)
        grads.update({k: (l, role, name) for k, (role, name) in layer_grads.items()})
        start += width
        if l == 0:
            wanted_links[layer_input_grad] = (input_grad, 0)
            continue
        fcg, add = ops[start:start + 2]
        start += 2
        below = plan.layers[l - 1]
        wi, bi = plan.i2h_params[l - 1]
        if (fcg.type != "FCGradient" or len(fcg.output) != 3 or add.type != "Sum"
                or list(fcg.input) != [_layer_output(below), plan.i2h_weights[l - 1], layer_input_grad]):
            return None
        below_h_grad = [k for k, v in link.items() if v == (below.h_states + "_grad", 1)]
        if len(below_h_grad) != 1 or not _sum_ok(add, below_h_grad[0], fcg.output[2], below_h_grad[0]):
            return None
        grads[wi], grads[bi] = (l, "i2h_weight", fcg.output[0]), (l, "i2h_bias", fcg.output[1])
    if (link != wanted_links or not param_grads or len(param_grads) != len(params)
            or len(grads) != (per_layer + 2) * len(plan.layers) - 2):   # a parameter shared by two roles: generic
        return None
    roles = {}
    for k, name in zip(params, param_grads):
        if k not in grads or grads[k][2] != name:
            return None
        roles[k] = grads[k][:2]
    return roles


def _op_key(op):
    return (op.type, list(op.input), list(op.output), op.engine, sorted(a.SerializeToString() for a in op.arg))


def _recognise_residual_stack_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """A residual LSTM stack's backward step net and links must be exactly what
    recurrent.py derives from plan's step net (its residual Sums make the summing of the
    hidden-state gradients vary with the layers; the derivation is tested against torch);
    then the roles of recognise_lstm_stack_backward."""
    from caffe2py import recurrent
    link = _link_map(backward_links)
    if link is None:
        return None
    forward_outputs = {b for op in plan.step_def.op for b in op.output}
    recompute = [b for op in step_def.op if set(op.output) <= forward_outputs for b in op.output]
    state_links = []
    for layer in plan.layers:
        state_links += [(layer.h_prev, layer.h, layer.h_states + "_grad"),
                        (layer.c_prev, layer.c, layer.c_states + "_grad")]
    try:
        ops, links = recurrent.derived_backward_step(plan.step_def, state_links,
                                                     [(plan.layers[0].input_t, input_grad)], recompute)
    except Exception:       # noqa: BLE001 - a step net the derivation refuses is not ours to run
        return None
    if [_op_key(op) for op in ops] != [_op_key(op) for op in step_def.op]:
        return None
    if _link_map([_Link(*x) for x in links]) != link:
        return None
    # each parameter's role, its name in the step net, and the gradient the derivation gives it
    by_name = {op.output[0]: op for op in plan.step_def.op if op.type == "FC"}
    roles, names = {}, {}
    for l, layer in enumerate(plan.layers):
        fc = next(op for op in plan.step_def.op if op.type == "FC" and op.input[0] == layer.h_prev)
        roles[layer.weight], roles[layer.bias] = (l, "weight"), (l, "bias")
        names[layer.weight], names[layer.bias] = (fc.input[1], 0), (fc.input[1], 1)
        if l:
            proj = by_name[plan.i2h[l - 1]]
            wi, bi = plan.i2h_params[l - 1]
            roles[wi], roles[bi] = (l, "i2h_weight"), (l, "i2h_bias")
            names[wi], names[bi] = (proj.input[1], 0), (proj.input[1], 1)
    if len(roles) != 4 * len(plan.layers) - 2 or sorted(params) != sorted(roles) or len(param_grads) != len(params):
        return None                 # a parameter shared by two roles: generic
    for k, name in zip(params, param_grads):
        if _param_grad_name(ops, *names[k]) != name:
            return None
    return {k: roles[k] for k in params}


class _Link:
    __slots__ = ("internal", "external", "offset", "window")

    def __init__(self, internal, external, offset):
        self.internal, self.external, self.offset, self.window = internal, external, offset, 1


def _param_grad_name(ops, weight, output):
    """The gradient the derived backward ops give an FC's weight (output 0) or bias
    (output 1): its FCGradient's outputs."""
    for op in ops:
        if op.type == "FCGradient" and len(op.input) == 3 and op.input[1] == weight and len(op.output) == 3:
            return op.output[output]
    return None


RECOGNISE_BACKWARD = {"lstm": recognise_lstm_backward, "gru": recognise_gru_backward,
                      "milstm": recognise_milstm_backward, "lstm_stack": recognise_lstm_stack_backward,
                      "gru_stack": recognise_gru_stack_backward}


# (kind, recogniser) in the order they are tried; modules above this one add their
# kinds with register_kind (fused_attention_steps.py: 'lstm_attention')
_RECOGNISERS = [("lstm", recognise_lstm), ("gru", recognise_gru), ("lstm_stack", recognise_lstm_stack),
                ("milstm", recognise_milstm), ("gru_stack", recognise_gru_stack)]


def register_kind(kind, forward, backward):
    """A step-net kind recognised by another module (which imports this one, so this
    one cannot import it): forward(step_def, links, ...) -> plan or None, backward as
    RECOGNISE_BACKWARD's values."""
    if all(k != kind for k, _ in _RECOGNISERS):
        _RECOGNISERS.append((kind, forward))
    RECOGNISE_BACKWARD[kind] = backward


def recognise(step_def, links, states, state_inputs, timestep, op_inputs):
    """(kind, plan) of a step net the fused path runs ('lstm', 'gru', 'milstm', 'lstm_stack'
    (LSTM or MILSTM layers), 'gru_stack', and the registered kinds: 'lstm_attention'), or
    (None, None); fused_run.py has <kind>_forward / <kind>_backward."""
    for kind, fn in _RECOGNISERS:
        plan = fn(step_def, links, states, state_inputs, timestep, op_inputs)
        if plan is not None:
            return kind, plan
    return None, None
