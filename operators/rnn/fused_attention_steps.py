"""Recognising rnn_cell.LSTMWithAttention's step nets (every attention type)
for RecurrentNetwork's fused path (fused_attention_run.py).

The step net AttentionCell builds around an LSTMCell is, per decoder step t:

    Concat(h_prev, ctx_prev) -> cat, cat_dims                          axis=2
    FC(cat, W, b) -> gates;  Sum(gates, input_t) -> gates
    LSTMUnit(h_prev, c_prev, gates[, seq_lengths], timestep) -> h, c
    Regular: FC(h, Wd, bd) -> wd; Squeeze(wd) -> wd (dims 0);
             Add(wenc, wd) -> sum (broadcast); Tanh(sum) -> sum;
             FC(sum, v, bv) -> logits; Transpose(logits) -> logits_t  (axes 1, 0, 2)
    Recurrent: FC(ctx_prev, Wc, bc) -> wpc; Squeeze(wpc); FC(h, Wd, bd) -> wd;
             Squeeze(wd); Add(wpc, wd) -> query; then Regular's Add(wenc, query) ...
    SoftCoverage: Regular with, after its Add, Squeeze(cov_prev) -> cov_2d (dims 0);
             Transpose(cov_2d) -> cov_t; Mul(cw, cov_t) -> scaled (broadcast, axis 0);
             Add(sum, scaled) -> sum; and after the Reshape Squeeze(weights) ->
             weights_2d (dims 2); Add(cov_prev, weights_2d) -> cov (broadcast)
    Dot:     [FC(h, Wd, bd) -> wd when D != E;] Squeeze(wd or h) -> q (dims 0);
             ExpandDims(q) -> q (dims 2); BatchMatMul(enc_t, q) -> logits_t (trans_a)
    [SequenceMask(logits_t, encoder_lengths) -> masked]                mode sequence
    Softmax(masked or logits_t) -> weights                             axis=1
    BatchMatMul(enc_t, weights) -> ctx; Reshape(ctx) -> ctx, old_shape  shape [1, -1, E]
    Copy(h) -> h_ext

with links h_prev/h_ext, c_prev/c, ctx_prev/ctx (and cov_prev/cov) to the state tensors and
input_t to the op's input 0; W, b, Wd, bd, Wc, bc, wenc (the encoder projection),
cw (the coverage weights), v, bv, enc_t (the transposed encoder outputs) and the
lengths are op inputs. Anything else (MILSTM decoders, other arguments)
gives None, and the op keeps the generic step loop.
"""
from . import fused_steps
from .fused_steps import _link_map, _param_index, arg_values

_UNIT_ARGS = ("forget_bias", "drop_states", "sequence_lengths")


class AttentionStepPlan:
    """The roles of a recognised attention step net's blobs (`blobs`), the op input
    index of each parameter (`params`: weight, bias, [wd_w, wd_b,] [wc_w, wc_b,]
    [wenc, v, bv,] [cw,] enc_t) and its name (`param_names`), the lengths' inputs (`seq`, `enc_len`),
    the LSTM unit's options and E (`dims`, from the Reshape)."""
    __slots__ = ("kind", "blobs", "params", "seq", "enc_len", "h_states", "c_states", "ctx_states", "cov_states",
                 "forget_bias", "drop_states", "unit_args", "dims", "param_names")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])


class _Ops:
    """Consumes a step net's ops in order, checking each one's type, inputs, output
    count and arguments."""

    def __init__(self, ops):
        self.ops, self.k, self.last = list(ops), 0, None

    def peek(self):
        return self.ops[self.k].type if self.k < len(self.ops) else None

    def take(self, op_type, inputs, n_outputs, args=None, optional_args=None, engine_ok=False):
        """The op's outputs, or None when it is not the expected one. inputs: names,
        None for 'any name' (read back from the op)."""
        if self.k >= len(self.ops):
            return None
        op = self.ops[self.k]
        if op.type != op_type or len(op.input) != len(inputs) or len(op.output) != n_outputs:
            return None
        if op.engine and not engine_ok:
            return None
        if any(want is not None and got != want for got, want in zip(op.input, inputs)):
            return None
        values = arg_values(op)
        optional = optional_args or {}
        want_args = args or {}
        for name, value in values.items():
            if name in want_args:
                if value != want_args[name]:
                    return None
            elif name not in optional or value not in optional[name]:
                return None
        if any(name not in values for name in want_args):
            return None
        self.k += 1
        self.last = op
        return list(op.output)

    def done(self):
        return self.k == len(self.ops)


_FC = {"axis": 2}
_FC_OPT = {"axis_w": (1,)}


def _take_fc(ops, x):
    out = ops.take("FC", [x, None, None], 1, _FC, _FC_OPT)
    return None if out is None else (out[0], ops.last.input[1], ops.last.input[2])


def recognise_lstm_attention(step_def, links, states, state_inputs, timestep, op_inputs):
    """An AttentionStepPlan when step_def is LSTMWithAttention's step (any attention
    type; see the module docstring), else None."""
    ops = _Ops(step_def.op)
    b, params = {}, {}
    decoder = _take_decoder(ops, b, params, timestep)
    if decoder is None:
        return None
    unit_args, seq = decoder
    kind = _take_scores(ops, b, params)
    if kind is None:
        return None
    context = _take_context(ops, b, params, kind)
    if context is None:
        return None
    enc_len, dims = context
    pairs = _state_links(links, b, kind, states, state_inputs, op_inputs)
    if pairs is None:
        return None
    names = [v for k, v in b.items() if not (k == "wd" and v == b["h"]) and not (k == "query" and v == b["wd"])]
    names += list(params.values())
    names += [n for n in (seq, enc_len) if n]
    if len(set(names)) != len(names):
        return None
    index = {role: _param_index(name, op_inputs, states) for role, name in params.items()}
    lengths = {role: _param_index(name, op_inputs, states) if name else None
               for role, name in (("seq", seq), ("enc_len", enc_len))}
    if None in index.values() or (seq and lengths["seq"] is None) or (enc_len and lengths["enc_len"] is None):
        return None
    return AttentionStepPlan(kind=kind, blobs=b, params=index, seq=lengths["seq"], enc_len=lengths["enc_len"],
                             h_states=pairs["h_prev"], c_states=pairs["c_prev"], ctx_states=pairs["ctx_prev"],
                             cov_states=pairs.get("cov_prev"),
                             forget_bias=float(unit_args.get("forget_bias", 0.0)),
                             drop_states=bool(unit_args.get("drop_states", 0)), unit_args=unit_args, dims=dims,
                             param_names=params)


def _take_decoder(ops, b, params, timestep):
    """Concat, FC, Sum, LSTMUnit: (the unit's arguments, the lengths' name or None),
    or None. Fills b and params."""
    out = ops.take("Concat", [None, None], 2, {"axis": 2})
    if out is None:
        return None
    b["h_prev"], b["ctx_prev"] = ops.last.input
    b["cat"], b["cat_dims"] = out
    fc = _take_fc(ops, b["cat"])
    if fc is None:
        return None
    b["gates"], weight, bias = fc
    sum_op = ops.ops[ops.k] if ops.peek() == "Sum" else None
    if sum_op is None or len(sum_op.input) != 2 or b["gates"] not in sum_op.input:
        return None
    others = [n for n in sum_op.input if n != b["gates"]]
    if len(others) != 1 or ops.take("Sum", list(sum_op.input), 1) != [b["gates"]]:
        return None
    b["input_t"] = others[0]
    unit = ops.ops[ops.k] if ops.peek() == "LSTMUnit" else None
    if unit is None:
        return None
    unit_args = arg_values(unit)
    if any(k not in _UNIT_ARGS or not isinstance(v, (int, float)) for k, v in unit_args.items()):
        return None
    with_seq = bool(unit_args.get("sequence_lengths", 1))
    head = [b["h_prev"], None, b["gates"]] + ([None] if with_seq else []) + [timestep]
    out = ops.take("LSTMUnit", head, 2, optional_args={k: (unit_args.get(k),) for k in _UNIT_ARGS})
    if out is None:
        return None
    b["c_prev"] = unit.input[1]
    seq = unit.input[3] if with_seq else None
    b["h"], b["c"] = out
    b["timestep"] = timestep
    params.update(weight=weight, bias=bias)
    return unit_args, seq


def _take_scores(ops, b, params):
    """The attention logits' ops: the kind ('regular', 'recurrent', 'coverage', 'dot')
    or None. Fills b and params."""
    kind = None
    if ops.peek() == "FC" and ops.ops[ops.k].input[0] == b["ctx_prev"]:
        # Recurrent: the previous context's projection joins the decoder state's
        fc = _take_fc(ops, b["ctx_prev"])
        if fc is None:
            return None
        b["wpc"], params["wc_w"], params["wc_b"] = fc
        if ops.take("Squeeze", [b["wpc"]], 1, {"dims": [0]}) != [b["wpc"]]:
            return None
        fc = _take_fc(ops, b["h"])
        if fc is None:
            return None
        b["wd"], params["wd_w"], params["wd_b"] = fc
        if ops.take("Squeeze", [b["wd"]], 1, {"dims": [0]}) != [b["wd"]]:
            return None
        out = ops.take("Add", [b["wpc"], b["wd"]], 1)
        if out is None:
            return None
        b["query"] = out[0]
        kind = "recurrent"
    elif ops.peek() == "FC":
        fc = _take_fc(ops, b["h"])
        if fc is None:
            return None
        b["wd"], params["wd_w"], params["wd_b"] = fc
        if ops.peek() == "Squeeze" and ops.ops[ops.k].output[0] == b["wd"]:
            kind = "regular"
        else:
            kind = "dot"
    elif ops.peek() == "Squeeze":
        kind = "dot"
        b["wd"] = b["h"]             # Dot attention with D == E: no projection
    if kind in ("regular", "recurrent"):
        if kind == "regular":
            if ops.take("Squeeze", [b["wd"]], 1, {"dims": [0]}) != [b["wd"]]:
                return None
            b["query"] = b["wd"]
        out = ops.take("Add", [None, b["query"]], 1, {"broadcast": 1}, {"use_grad_hack": (0, 1)})
        if out is None:
            return None
        params["wenc"] = ops.last.input[0]
        b["summed"] = out[0]
        if kind == "regular" and ops.peek() == "Squeeze":
            # SoftCoverage: + coverage_weights * the previous coverage, inside the tanh
            out = ops.take("Squeeze", [None], 1, {"dims": [0]})
            if out is None:
                return None
            b["cov_prev"], b["cov_2d"] = ops.last.input[0], out[0]
            out = ops.take("Transpose", [b["cov_2d"]], 1, optional_args={"axes": ([1, 0],)})
            if out is None:
                return None
            b["cov_t"] = out[0]
            out = ops.take("Mul", [None, b["cov_t"]], 1, {"broadcast": 1, "axis": 0})
            if out is None:
                return None
            params["cw"], b["scaled_cov"] = ops.last.input[0], out[0]
            if ops.take("Add", [b["summed"], b["scaled_cov"]], 1) != [b["summed"]]:
                return None
            kind = "coverage"
        if ops.take("Tanh", [b["summed"]], 1) != [b["summed"]]:
            return None
        fc = _take_fc(ops, b["summed"])
        if fc is None:
            return None
        b["logits"], params["v"], params["bv"] = fc
        out = ops.take("Transpose", [b["logits"]], 1, {"axes": [1, 0, 2]})
        if out is None:
            return None
        b["logits_t"] = out[0]
    elif kind == "dot":
        out = ops.take("Squeeze", [b["wd"]], 1, {"dims": [0]})
        if out is None:
            return None
        b["query"] = out[0]
        if ops.take("ExpandDims", [b["query"]], 1, {"dims": [2]}) != [b["query"]]:
            return None
        out = ops.take("BatchMatMul", [None, b["query"]], 1, {"trans_a": 1})
        if out is None:
            return None
        params["enc_t"] = ops.last.input[0]
        b["logits_t"] = out[0]
    return kind


def _take_context(ops, b, params, kind):
    """[SequenceMask,] Softmax, BatchMatMul, Reshape[, the coverage's Squeeze and Add],
    Copy: (the encoder lengths' name or None, E) or None. Fills b and params."""
    enc_len = None
    softmax_in = b["logits_t"]
    if ops.peek() == "SequenceMask":
        out = ops.take("SequenceMask", [b["logits_t"], None], 1, optional_args={"mode": ("sequence",)})
        if out is None:
            return None
        enc_len = ops.last.input[1]
        b["masked"] = softmax_in = out[0]
    out = ops.take("Softmax", [softmax_in], 1, {"axis": 1}, engine_ok=True)
    if out is None:
        return None
    b["weights"] = out[0]
    out = ops.take("BatchMatMul", [params.get("enc_t"), b["weights"]], 1)
    if out is None:
        return None
    params["enc_t"] = ops.last.input[0]
    b["ctx"] = out[0]
    reshape = ops.ops[ops.k] if ops.peek() == "Reshape" else None
    shape = arg_values(reshape).get("shape") if reshape is not None else None
    if shape is None or len(shape) != 3 or shape[:2] != [1, -1]:
        return None
    dims = shape[2]
    out = ops.take("Reshape", [b["ctx"]], 2, {"shape": [1, -1, dims]})
    if out is None or out[0] != b["ctx"]:
        return None
    b["old_shape"] = out[1]
    if kind == "coverage":
        out = ops.take("Squeeze", [b["weights"]], 1, {"dims": [2]})
        if out is None:
            return None
        b["weights_2d"] = out[0]
        out = ops.take("Add", [b["cov_prev"], b["weights_2d"]], 1, {"broadcast": 1})
        if out is None:
            return None
        b["cov"] = out[0]
    out = ops.take("Copy", [b["h"]], 1)
    if out is None or not ops.done():
        return None
    b["h_ext"] = out[0]
    return enc_len, dims


def _state_links(links, b, kind, states, state_inputs, op_inputs):
    """{role of the previous state: its state tensor} when the links are the cell's
    (each state's previous and new blob at offsets 0 and 1, input_t to input 0), else None."""
    state_pairs = [("h_prev", "h_ext"), ("c_prev", "c"), ("ctx_prev", "ctx")]
    if kind == "coverage":
        state_pairs.append(("cov_prev", "cov"))
    link = _link_map(links)
    if link is None or set(link) != {b[role] for pair in state_pairs for role in pair} | {b["input_t"]}:
        return None
    pairs = {}
    for prev, new in state_pairs:
        external = link[b[prev]][0]
        if link[b[prev]] != (external, 0) or link[b[new]] != (external, 1) or external not in states:
            return None
        pairs[prev] = external
    if (link[b["input_t"]] != (op_inputs[0], 0) or len(set(pairs.values())) != len(pairs)
            or sorted(states) != sorted(pairs.values()) or len(state_inputs) != len(pairs)):
        return None
    return pairs


_BACKWARD_TYPES = {
    "regular": ["Copy", "Reshape", "BatchMatMul", "BatchMatMul", "SoftmaxGradient", "Transpose", "FCGradient",
                "TanhGradient", "AddGradient", "ExpandDims", "FCGradient", "Sum", "LSTMUnitGradient",
                "FCGradient", "Split", "Sum"],
    "recurrent": ["Copy", "Reshape", "BatchMatMul", "BatchMatMul", "SoftmaxGradient", "Transpose", "FCGradient",
                  "TanhGradient", "AddGradient", "AddGradient", "ExpandDims", "FCGradient", "Sum", "ExpandDims",
                  "FCGradient", "LSTMUnitGradient", "FCGradient", "Split", "Sum", "Sum"],
    "coverage": ["Copy", "AddGradient", "ExpandDims", "Reshape", "BatchMatMul", "BatchMatMul", "Sum",
                 "SoftmaxGradient", "Transpose", "FCGradient", "TanhGradient", "AddGradient", "MulGradient",
                 "Transpose", "ExpandDims", "Sum", "AddGradient", "ExpandDims", "FCGradient", "Sum",
                 "LSTMUnitGradient", "FCGradient", "Split", "Sum"],
    "dot": ["Copy", "Reshape", "BatchMatMul", "BatchMatMul", "SoftmaxGradient", "BatchMatMul", "BatchMatMul",
            "Sum", "Squeeze", "ExpandDims", "Sum", "LSTMUnitGradient", "FCGradient", "Split", "Sum"],
}
_FORWARD_TYPES = {"Concat", "FC", "Sum", "LSTMUnit", "Squeeze", "Add", "Mul", "Tanh", "Transpose", "ExpandDims",
                  "BatchMatMul", "SequenceMask", "Softmax", "Reshape", "Copy"}


def _backward_types(plan):
    types = list(_BACKWARD_TYPES[plan.kind])
    if plan.kind == "dot" and "wd_w" in plan.params:
        types.append("FCGradient")
    if plan.enc_len is not None:
        types.append("SequenceMask")
    return sorted(types)


def recognise_lstm_attention_backward(plan, step_def, backward_links, params, param_grads, input_grad):
    """{op input index: role} when the backward step net is the registry's gradient
    of plan's step net (recurrent.py's links), else None."""
    b = plan.blobs
    forward_outputs = set(b.values())
    ops = [op for op in step_def.op if not (op.type in _FORWARD_TYPES and set(op.output) <= forward_outputs)]
    if sorted(op.type for op in ops) != _backward_types(plan):
        return None
    unit = [op for op in ops if op.type == "LSTMUnitGradient"][0]
    if (arg_values(unit) != plan.unit_args or len(unit.output) != 3
            or list(unit.input[:3]) != [b["h_prev"], b["c_prev"], b["gates"]]):
        return None
    hp_grad, cp_grad, gates_grad = unit.output
    split = [op for op in ops if op.type == "Split"][0]
    if len(split.output) != 2:
        return None
    link = _link_map(backward_links)
    if link is None:
        return None
    h_g, c_g, ctx_g = plan.h_states + "_grad", plan.c_states + "_grad", plan.ctx_states + "_grad"
    want = {(h_g, 1), (h_g, 0), (c_g, 1), (c_g, 0), (ctx_g, 1), (ctx_g, 0), (input_grad, 0)}
    if plan.cov_states is not None:
        want |= {(plan.cov_states + "_grad", 1), (plan.cov_states + "_grad", 0)}
    if (len(link) != len(want) or set(link.values()) != want or link.get(hp_grad) != (h_g, 0)
            or link.get(cp_grad) != (c_g, 0) or link.get(gates_grad) != (input_grad, 0)
            or link.get(unit.input[-1]) != (c_g, 1)):
        return None
    ctx_prev_grad = [k for k, v in link.items() if v == (ctx_g, 0)][0]
    if plan.kind == "recurrent":        # the Split's part plus the previous context projection's
        if not any(op.type == "Sum" and list(op.output) == [ctx_prev_grad] and split.output[1] in op.input
                   for op in ops):
            return None
    elif split.output[1] != ctx_prev_grad:
        return None
    grads = {}
    for op in ops:
        if op.type == "FCGradient" and len(op.output) == 3:
            for w_role, b_role in (("weight", "bias"), ("wd_w", "wd_b"), ("v", "bv"), ("wc_w", "wc_b")):
                if plan.param_names.get(w_role) == op.input[1]:
                    grads[w_role], grads[b_role] = op.output[0], op.output[1]
        elif op.type == "AddGradient" and len(op.output) == 2 and op.input[1] == plan.param_names.get("wenc"):
            grads["wenc"] = op.output[0]
        elif op.type == "MulGradient" and len(op.output) == 2 and op.input[1] == plan.param_names.get("cw"):
            grads["cw"] = op.output[0]
        elif op.type == "BatchMatMul" and list(op.input[1:]) == [b["weights"]] and len(op.output) == 1:
            grads["enc_t"] = op.output[0]
    if set(grads) != set(plan.params) or not param_grads or len(params) != len(param_grads):
        return None
    roles = {}
    for k, grad_name in zip(params, param_grads):
        role = [r for r, i in plan.params.items() if i == k]
        if len(role) != 1 or grads[role[0]] != grad_name:
            return None
        roles[k] = role[0]
    return roles


fused_steps.register_kind("lstm_attention", recognise_lstm_attention, recognise_lstm_attention_backward)
