"""RecurrentNetwork and RecurrentNetworkBlobFetcher: run a step net once per
timestep (Caffe2's recurrent_network_op).

Caffe2 links blobs by sharing memory: before step t, each link's internal blob is
made a window [t + offset, t + offset + window) of its external tensor, and a
step op that writes the internal blob writes the external tensor through it.
caffe2py kernels return new arrays instead of writing into shared memory, so the
op applies the links itself: it sets each internal blob to a view of its window
before the step, and after the step copies back every internal blob the step net
replaced into the window (an external tensor the op did not create, such as one
of its inputs, is copied before it is written, so no caller's array changes).

Workspaces follow Caffe2: the op's workspace holds the recurrent state tensors
([T + L, N, D], L initial steps); a shared workspace (kept in the last output,
the scratch blob, with the step workspaces) sits between it and the step
workspaces, which are per timestep when a backward step net exists (so the
backward pass can read every step's activations) and two alternating ones
otherwise. See docs/rnn.md.
"""
import numpy as np
from google.protobuf import text_format

from caffe2py.blob_scopes import SharedBlobs
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ..control.control_flow import build_subnet
from . import fused_run, step_segments
from . import fused_attention_run, fused_attention_steps  # noqa: F401  (add the 'lstm_attention' kind)
from .step_loop import StepLoop, StepWorkspace
from .fused_steps import RECOGNISE_BACKWARD, fused_enabled, recognise

_STRING = caffe2_pb2.TensorProto.STRING


class ScratchWorkspaces:
    """The value of RecurrentNetwork's last output: its step workspaces and the
    shared workspace above them, kept between runs (the gradient op reads them)."""

    def __init__(self):
        self._step_workspaces = []
        self.shared = SharedBlobs()
        self.fused = None           # a fused run's record (fused_run.py), for its gradient
        self._fill = None           # fills the step workspaces of the last fused run, once

    @property
    def step_workspaces(self):
        if self._fill is not None:
            fill, self._fill = self._fill, None
            fill()
        return self._step_workspaces

    def set_fused(self, record, fill):
        """After a fused run: its record, and how to fill the step workspaces when
        something looks at them."""
        self.fused, self._fill = record, fill

    def clear_fused(self):
        self.fused = self._fill = None

    def __repr__(self):
        return "ScratchWorkspaces(%d step workspaces)" % len(self.step_workspaces)


class Link:
    __slots__ = ("internal", "external", "offset", "window")

    def __init__(self, internal, external, offset, window):
        self.internal, self.external, self.offset, self.window = internal, external, offset, window


def net_argument(ctx, name):
    """A NetDef argument given as a NetDef (Argument.n) or as protobuf text (Argument.s)."""
    if not ctx.has(name):
        return None
    net = ctx.net(name)
    if net is not None:
        return net
    text = ctx.arg(name)
    if isinstance(text, str) and text:
        try:
            return text_format.Parse(text, caffe2_pb2.NetDef())
        except text_format.ParseError as exc:
            raise ctx.error("argument '%s' is not a valid NetDef: %s" % (name, exc)) from None
    return None


def read_links(ctx, internal_arg, external_arg, offset_arg, window_arg=None):
    internal = ctx.strings(internal_arg, [])
    external = ctx.strings(external_arg, [])
    offset = ctx.ints(offset_arg, [])
    window = ctx.ints(window_arg, None) if window_arg else None
    if window is None:
        window = [1] * len(offset)
    if not len(internal) == len(external) == len(offset) == len(window):
        raise ctx.error("%s/%s/%s/%s must have the same length, got %d/%d/%d/%d"
                        % (internal_arg, external_arg, offset_arg, window_arg or "window",
                           len(internal), len(external), len(offset), len(window)))
    for name, o, w in zip(internal, offset, window):
        if o < 0 or w < 0:
            raise ctx.error("link '%s' needs offset >= 0 and window >= 0, got %d and %d" % (name, o, w))
    return [Link(*fields) for fields in zip(internal, external, offset, window)]


def read_aliases(ctx):
    src, dst, offset = ctx.strings("alias_src", []), ctx.strings("alias_dst", []), ctx.ints("alias_offset", [])
    if len(src) != len(offset):
        raise ctx.error("alias_src/alias_offset mismatch: %d vs %d" % (len(src), len(offset)))
    if len(dst) != len(offset):
        raise ctx.error("alias_dst/alias_offset mismatch: %d vs %d" % (len(dst), len(offset)))
    return list(zip(src, dst, offset))


def initial_states(ctx, state_input, seq_len, batch, index):
    """The [T + L, N, D] state tensor whose first L steps hold the initial value:
    a [D] vector (the same for every row), [N, D], or [L, N, D]."""
    init = np.asarray(state_input)
    if not 1 <= init.ndim <= 3:
        raise ctx.input_error(index, "an initial recurrent state must be 1-D to 3-D, got shape %s"
                              % list(init.shape))
    if init.dtype.kind != "f":
        raise ctx.input_error(index, "an initial recurrent state must be float, got %s" % init.dtype)
    length = init.shape[0] if init.ndim == 3 else 1
    states = np.empty((seq_len + length, batch, init.shape[-1]), init.dtype)
    if init.ndim >= 2:
        if init.shape[-2] != batch:
            raise ctx.input_error(index, "an initial recurrent state must have batch size %d, got shape %s"
                                  % (batch, list(init.shape)))
        states[:length] = init.reshape(length, batch, init.shape[-1])
    else:
        states[0] = init
    return states


register_schema(OpSchema(
    "RecurrentNetwork", num_inputs=(1, None), num_outputs=(2, None),
    args=(Arg("step_net", "net", required=True, doc="the net run at every timestep (NetDef or its text)"),
          Arg("backward_step_net", "net", doc="its gradient net; its presence keeps one workspace per step"),
          Arg("recurrent_states", "strings", [], doc="names of the [T + L, N, D] state tensors"),
          Arg("initial_recurrent_state_ids", "ints", [], doc="for each state, the input holding its initial value"),
          Arg("link_internal", "strings", [], doc="step-net blob names bound to a window of an external blob"),
          Arg("link_external", "strings", [], doc="the external blobs"),
          Arg("link_offset", "ints", [], doc="window start relative to the timestep"),
          Arg("link_window", "ints", None, doc="window lengths (default 1)"),
          Arg("alias_src", "strings", [], doc="state tensors exposed as outputs"),
          Arg("alias_dst", "strings", [], doc="the output names"),
          Arg("alias_offset", "ints", [], doc="first step exposed (negative: from the end)"),
          Arg("timestep", "string", "timestep", doc="name of the int32 [1] timestep blob of the step net"),
          Arg("recompute_blobs_on_backward", "strings", [], doc="step blobs kept once, shared by all steps"),
          Arg("param", "ints", [], doc="(backward) inputs that are parameters"),
          Arg("outputs_with_grads", "ints", [0], doc="(backward) outputs receiving gradients"),
          Arg("enable_rnn_executor", "bool", False, doc="accepted; steps run one after another")),
    doc="Runs step_net for t = 0 .. T-1 over input 0 [T, N, ...], carrying recurrent states; "
        "outputs are aliases of the state tensors plus the scratch-workspaces blob (last)."))


@register_kernel("RecurrentNetwork")
def recurrent_network(ctx):
    ctx.use_workspace()
    step_def = net_argument(ctx, "step_net")
    if step_def is None:
        raise ctx.error("argument 'step_net' (a NetDef or its text form) must be given")
    timestep = ctx.string("timestep")
    links = read_links(ctx, "link_internal", "link_external", "link_offset", "link_window")
    aliases = read_aliases(ctx)
    states = ctx.strings("recurrent_states", [])
    state_inputs = ctx.ints("initial_recurrent_state_ids", [])
    if len(states) != len(state_inputs):
        raise ctx.error("recurrent_states/initial_recurrent_state_ids mismatch: %d vs %d"
                        % (len(states), len(state_inputs)))
    for k in state_inputs:
        if not 0 <= k < ctx.n_inputs:
            raise ctx.error("initial_recurrent_state_ids: input %d does not exist (%d inputs)" % (k, ctx.n_inputs))
    outputs = ctx.outputs[:-1]
    alias_dst = {dst for _, dst, _ in aliases}
    has_backward = net_argument(ctx, "backward_step_net") is not None
    recompute = ctx.strings("recompute_blobs_on_backward", [])

    step_def = caffe2_pb2.NetDef.FromString(step_def.SerializeToString())
    step_def.external_input.append(timestep)
    for link in links:
        step_def.external_input.extend([link.internal, link.external])
    step_loop = StepLoop(ctx, links, [build_subnet(ctx, piece, "step_net")
                                      for piece in step_segments.segments(step_def, links)], "timestep")
    scratch_name = ctx.outputs[-1]
    kind, fused_plan = recognise(net_argument(ctx, "step_net"), links, states, state_inputs, timestep, ctx.inputs)

    def run(blobs, *inputs):
        seq = inputs[0]
        if not isinstance(seq, np.ndarray) or seq.ndim < 2:
            raise ctx.input_error(0, "the input sequence must be [T, N, ...], got shape %s" % list(np.shape(seq)))
        seq_len, batch = seq.shape[0], seq.shape[1]
        owned = set()
        for name, k in zip(states, state_inputs):
            tensor = initial_states(ctx, inputs[k], seq_len, batch, k)
            owned.add(id(tensor))
            blobs[name] = tensor
        scratch = blobs.get(scratch_name)
        if not isinstance(scratch, ScratchWorkspaces):
            scratch = ScratchWorkspaces()
        shared = scratch.shared
        shared.rebind(blobs)
        for name in recompute:
            shared.create_local(name)
        scratch.clear_fused()
        step_wss = scratch.step_workspaces
        cycle = None if has_backward else 2
        wanted = seq_len if has_backward else 2
        while len(step_wss) < wanted:
            step_wss.append(StepWorkspace(shared))
        fused = (fused_plan is not None and fused_enabled()
                 and getattr(fused_run, kind + "_forward")(fused_plan, inputs, blobs, scratch, step_wss, timestep,
                                                           has_backward))
        if not fused:
            step_loop.run(shared, blobs, owned, step_wss, cycle, seq_len, timestep=timestep)
        aliased = {}
        for src, dst, offset in aliases:
            tensor = blobs.get(src)
            if not isinstance(tensor, np.ndarray):
                raise ctx.error("alias source '%s' is not a tensor" % src)
            start = offset if offset >= 0 else tensor.shape[0] + offset
            if not 0 <= start <= tensor.shape[0]:
                raise ctx.error("alias '%s' -> '%s': offset %d is outside its %d steps"
                                % (src, dst, offset, tensor.shape[0]))
            aliased[dst] = tensor[start:]
        values = [aliased[name] if name in alias_dst else blobs.get(name) for name in outputs]
        return tuple(values) + (scratch,)
    return run


register_schema(OpSchema(
    "RecurrentNetworkBlobFetcher", num_inputs=1, num_outputs=1,
    args=(Arg("prefix", "string", "rnn", doc="prefix of the copied blobs' names"),),
    inputs=("ScratchWorkspaceBlob",), outputs=("blob_names",),
    doc="Copies every blob of every step workspace of a RecurrentNetwork into the workspace as "
        "<prefix>_<name><step> and outputs those names (1-D strings)."))


@register_kernel("RecurrentNetworkBlobFetcher")
def recurrent_network_blob_fetcher(ctx):
    ctx.use_workspace()
    prefix = ctx.string("prefix")

    def run(blobs, scratch):
        if not isinstance(scratch, ScratchWorkspaces):
            raise ctx.input_error(0, "expected the scratch-workspaces blob of a RecurrentNetwork, got %s"
                                  % type(scratch).__name__)
        names = []
        for i, ws in enumerate(scratch.step_workspaces):
            for name, value in ws.local.items():
                if not isinstance(value, np.ndarray):
                    continue
                new_name = "%s_%s%d" % (prefix, name, i)
                blobs[new_name] = value.copy()
                names.append(new_name)
        out = np.empty(len(names), dtype=object)
        out[:] = names
        return out
    return run


# --------------------------------------------------------------------------- RecurrentNetworkGradient

register_schema(OpSchema(
    "RecurrentNetworkGradient", num_inputs=(1, None), num_outputs=(1, None),
    args=(Arg("backward_step_net", "net", doc="the gradient of the step net (NetDef or its text)"),
          Arg("backward_link_internal", "strings", [], doc="gradient blobs of the step net linked to ..."),
          Arg("backward_link_external", "strings", [], doc="... windows of these gradient tensors"),
          Arg("backward_link_offset", "ints", [], doc="window start relative to the timestep"),
          Arg("param", "ints", [], doc="forward inputs that are parameters"),
          Arg("param_grads", "strings", [], doc="names the backward step net gives the parameter gradients"),
          Arg("outputs_with_grads", "ints", [0], doc="forward outputs whose gradients are inputs"),
          Arg("timestep", "string", "timestep", doc="the step nets' timestep blob (as in the forward)")),
    doc="Gradient of RecurrentNetwork: runs the backward step net for t = T-1 .. 0 in the forward "
        "pass's step workspaces. Inputs: the gradients of the outputs_with_grads outputs, then every "
        "forward input and output; outputs: the gradients of the input sequence, the parameters and "
        "the initial recurrent states."))


def _renamed(net_def, old, new):
    for op in net_def.op:
        op.input[:] = [new if b == old else b for b in op.input]
        op.output[:] = [new if b == old else b for b in op.output]


@register_kernel("RecurrentNetworkGradient")
def recurrent_network_gradient(ctx):
    ctx.use_workspace()
    step_def = net_argument(ctx, "backward_step_net")
    if step_def is None:
        raise ctx.error("argument 'backward_step_net' (a NetDef or its text form) must be given")
    timestep = ctx.string("timestep")
    grad_inputs = ctx.ints("outputs_with_grads", [0])
    n_go = len(grad_inputs)
    if ctx.n_inputs < n_go + 2:
        raise ctx.error("takes the %d output gradient(s), then the forward's inputs and outputs (at least the "
                        "input sequence and the step workspaces): got %d inputs" % (n_go, ctx.n_inputs))
    links = (read_links(ctx, "link_internal", "link_external", "link_offset", "link_window")
             + read_links(ctx, "backward_link_internal", "backward_link_external", "backward_link_offset"))
    states = ctx.strings("recurrent_states", [])
    state_inputs = ctx.ints("initial_recurrent_state_ids", [])
    params = ctx.ints("param", [])
    param_grads = ctx.strings("param_grads", [])
    if param_grads and len(param_grads) != len(params):
        raise ctx.error("param/param_grads mismatch: %d vs %d" % (len(params), len(param_grads)))
    if len(states) != len(state_inputs):
        raise ctx.error("recurrent_states/initial_recurrent_state_ids mismatch")
    if ctx.n_outputs != 1 + len(params) + len(state_inputs):
        raise ctx.error("needs %d outputs (input, %d parameters, %d initial states), has %d"
                        % (1 + len(params) + len(state_inputs), len(params), len(state_inputs), ctx.n_outputs))
    aliases = read_aliases(ctx)
    # The gradients of the state sequences: `x_all` (offset 1) feeds every step, `x_last`
    # (offset -1) the last one.
    per_step, last_step = {}, {}
    for j, (src, _dst, offset) in enumerate(aliases):
        if j in grad_inputs:
            if offset not in (1, -1):
                raise ctx.error("alias %d has offset %d; gradients need 1 or -1" % (j, offset))
            (per_step if offset == 1 else last_step)[src] = grad_inputs.index(j)

    step_def = caffe2_pb2.NetDef.FromString(step_def.SerializeToString())
    step_def.external_input.append(timestep)
    for link in links:
        step_def.external_input.extend([link.internal, link.external])
    # Each step's parameter gradients are written under a private name and summed here.
    accumulate = []
    for i, k in enumerate(params):
        out_name = ctx.outputs[1 + i]
        step_name = param_grads[i] if param_grads else out_name
        tmp = step_name + "_tmpstep"
        _renamed(step_def, step_name, tmp)
        accumulate.append((out_name, tmp, n_go + k))
    step_loop = StepLoop(ctx, links, [build_subnet(ctx, step_def, "backward_step_net")], "backward timestep")
    input_grad_name = ctx.outputs[0]
    scratch_index = ctx.n_inputs - 1
    kind, fused_plan = recognise(net_argument(ctx, "step_net") or caffe2_pb2.NetDef(),
                                 read_links(ctx, "link_internal", "link_external", "link_offset", "link_window"),
                                 states, state_inputs, timestep, ctx.inputs[n_go:])
    roles = None
    if fused_plan is not None:
        roles = RECOGNISE_BACKWARD[kind](
            fused_plan, net_argument(ctx, "backward_step_net"),
            read_links(ctx, "backward_link_internal", "backward_link_external", "backward_link_offset"),
            params, param_grads, input_grad_name)
    roles = None if roles is None else [(k, roles[k]) for k in params]

    def run(blobs, *inputs):
        seq = inputs[n_go]
        if not isinstance(seq, np.ndarray) or seq.ndim < 2:
            raise ctx.input_error(n_go, "the input sequence must be [T, N, ...]")
        seq_len = seq.shape[0]
        scratch = inputs[scratch_index]
        if not isinstance(scratch, ScratchWorkspaces):
            raise ctx.input_error(scratch_index, "expected the scratch-workspaces blob of the forward op")
        record = scratch.fused
        if (roles is not None and record is not None and type(record.plan) is type(fused_plan)
                and record.plan.h_states == fused_plan.h_states and fused_enabled()):
            result = getattr(fused_run, kind + "_backward")(record, roles, inputs, n_go, per_step, last_step,
                                                             states, state_inputs, blobs, input_grad_name)
            if result is not None:
                return result if len(result) > 1 else result[0]
        if len(scratch.step_workspaces) < seq_len:
            raise ctx.error("the forward pass kept %d step workspaces for %d steps (was it built with a "
                            "backward_step_net?)" % (len(scratch.step_workspaces), seq_len))
        scratch.shared.rebind(blobs)
        owned = set()
        sums = {}
        for out_name, tmp, k in accumulate:
            sums[out_name] = np.zeros_like(inputs[k])
        grads = {}
        for name in states:
            forward = blobs.get(name)
            if not isinstance(forward, np.ndarray) or forward.ndim != 3:
                raise ctx.error("recurrent state '%s' of the forward pass is missing or not 3-D" % name)
            g = np.zeros_like(forward)
            if name in last_step:
                g[-1] += np.asarray(inputs[last_step[name]]).reshape(g.shape[1:])
            grads[name] = blobs[name + "_grad"] = g
            owned.add(id(g))
        input_grad = np.zeros_like(seq)
        blobs[input_grad_name] = input_grad
        owned.add(id(input_grad))
        step_grads = [(grads[name], inputs[k]) for name, k in per_step.items()]
        step_sums = [(sums[out_name], tmp) for out_name, tmp, _ in accumulate]

        def add_output_gradients(t):
            for grad, output_grad in step_grads:
                grad[t + 1] += output_grad[t]

        def add_parameter_gradients(t, ws):
            for total, tmp in step_sums:
                value = ws.get(tmp)
                if value is not None:
                    total += np.asarray(value).reshape(total.shape)

        step_loop.run(scratch.shared, blobs, owned, scratch.step_workspaces, None, seq_len, reverse=True,
                      before=add_output_gradients if step_grads else None,
                      after=add_parameter_gradients if step_sums else None)
        outputs = [blobs[input_grad_name]] + [sums[out_name] for out_name, _, _ in accumulate]
        for name, k in zip(states, state_inputs):
            init = np.asarray(inputs[n_go + k])
            g = blobs[name + "_grad"]
            length = init.shape[0] if init.ndim == 3 else 1
            if init.ndim >= 2:
                outputs.append(np.ascontiguousarray(g[:length].reshape(init.shape)))
            else:
                outputs.append(g[0].sum(axis=0).astype(init.dtype))
        return tuple(outputs) if len(outputs) > 1 else outputs[0]
    return run


# --------------------------------------------------------------------------- gradient makers

try:
    from caffe2py.gradients import register_gradient, should_not_do_gradient
except ImportError:          # a build without the gradient registry: forward only
    register_gradient = should_not_do_gradient = None

if register_gradient is not None:
    @register_gradient("RecurrentNetwork")
    def _recurrent_network_gradient(g):
        """Caffe2's GetRecurrentNetworkGradient: the gradients of outputs_with_grads,
        every forward input and output in; the gradients of the input sequence, the
        parameters and the initial states out."""
        helper_ints = lambda name, default: [int(v) for v in (g.arg(name, default) or [])]  # noqa: E731
        params = helper_ints("param", [])
        recurrent = helper_ints("initial_recurrent_state_ids", [])
        with_grads = helper_ints("outputs_with_grads", [0])
        if not with_grads:
            raise Caffe2Error("%s: outputs_with_grads is empty" % g.label)
        inputs = [g.GO(i) for i in with_grads] + list(g.def_.input) + list(g.def_.output)
        outputs = [g.GI(0)] + [g.GI(i) for i in params] + [g.GI(i) for i in recurrent]
        return [g.op("RecurrentNetworkGradient", inputs, outputs)]

    should_not_do_gradient("RecurrentNetworkBlobFetcher")
