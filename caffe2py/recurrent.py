"""Caffe2's caffe2.python.recurrent: wrap a step net into a RecurrentNetwork op.

    recurrent_net(net, cell_net, inputs=[(input_t, input_seq)],
                  initial_cell_inputs=[(hidden_t_prev, h0), ...],
                  links={hidden_t_prev: hidden_t, ...}, timestep=timestep, scope="lstm")

For every recurrent input `x_prev` linked to the cell output `x`, the op keeps a
state tensor `<scope>/<x_prev>_states` of T + 1 steps (step t read as x_prev,
step t + 1 written as x) and outputs `<x>_all` (steps 1..T) and `<x>_last`
(step T). Blobs the cell net reads that are neither the input, the states nor
the timestep (its parameters) become further inputs of the op.

Unless forward_only, the op also carries the backward step net (the cell's
gradient from the gradient registry, `core.GradientRegistry`) and the links of
the gradient tensors, which RecurrentNetworkGradient runs backwards over the
step workspaces the forward pass kept. Without a gradient registry the op is
forward-only and a warning says so.
"""
import logging

from . import core, gradients

log = logging.getLogger("caffe2py")


def _backward_available():
    return getattr(core, "GradientRegistry", None) is not None


def recurrent_net(net, cell_net, inputs, initial_cell_inputs, links, timestep=None, scope=None,
                  outputs_with_grads=(0,), recompute_blobs_on_backward=None, forward_only=False):
    """Append a RecurrentNetwork op running cell_net over the sequence to net;
    returns the outputs (x_all, x_last for every linked state), without the
    scratch blob."""
    if len(inputs) != 1:
        raise ValueError("Only one input blob is supported so far")
    op_name = net.NextName("recurrent")
    scope_name = op_name if scope is None else scope

    def s(name):
        return "%s/%s" % (scope_name, name)

    known = {str(i[0]) for i in inputs} | {str(x[1]) for x in initial_cell_inputs}
    known |= {str(x[0]) for x in initial_cell_inputs}
    if timestep is not None:
        known.add(str(timestep))
    references = [core.BlobReference(b) for b in cell_net.Proto().external_input if b not in known]

    if not forward_only and not _backward_available():
        log.warning("recurrent_net: caffe2py has no gradient registry yet; building a forward-only "
                    "RecurrentNetwork (no backward_step_net)")
        forward_only = True
    backward = None if forward_only else _BackwardStep(cell_net, recompute_blobs_on_backward)

    all_inputs = [i[1] for i in inputs] + [x[1] for x in initial_cell_inputs] + references
    all_outputs = []
    forward_links, aliases, recurrent_states = [], [], []
    for cell_input, _ in initial_cell_inputs:
        cell_input = str(cell_input)
        state = s(cell_input + "_states")
        cell_output = str(links[cell_input])
        forward_links.append((cell_input, state, 0))
        forward_links.append((cell_output, state, 1))
        aliases.append((state, cell_output + "_all", 1))
        aliases.append((state, cell_output + "_last", -1))
        # references, not strings: the net would add the current name scope a second time
        all_outputs.extend([core.BlobReference(cell_output + "_all"), core.BlobReference(cell_output + "_last")])
        recurrent_states.append(state)
        if backward is not None:
            backward.link_state(cell_input, cell_output, state + "_grad")
    for input_t, input_blob in inputs:
        forward_links.append((str(input_t), str(input_blob), 0))
        if backward is not None:
            backward.link_input(str(input_t), str(input_blob) + "_grad")
    backward_args = {} if backward is None else backward.args(references, [str(b) for b in all_inputs],
                                                              outputs_with_grads)

    cell_net.Proto().type = "simple"
    all_input_names = [str(b) for b in all_inputs]
    results = net.RecurrentNetwork(
        all_inputs,
        all_outputs + [s("step_workspaces")],
        alias_src=[a[0] for a in aliases],
        alias_dst=[a[1] for a in aliases],
        alias_offset=[a[2] for a in aliases],
        recurrent_states=recurrent_states,
        initial_recurrent_state_ids=[all_input_names.index(str(x[1])) for x in initial_cell_inputs],
        link_internal=[str(link[0]) for link in forward_links],
        link_external=[str(link[1]) for link in forward_links],
        link_offset=[link[2] for link in forward_links],
        enable_rnn_executor=1,
        step_net=cell_net.Proto(),
        timestep="timestep" if timestep is None else str(timestep),
        **backward_args
    )
    return results[:-1]


class _BackwardStep:
    """The backward step net of a cell net and its links (Caffe2's recurrent_net):
    the gradient ops of the cell from the gradient registry, plus ops recomputing
    recompute_blobs_on_backward; forward blobs it reads become its inputs; a
    gradient that reaches a blob both from a link and from inside the net is summed."""

    def __init__(self, cell_net, recompute_blobs_on_backward):
        cell = cell_net.Proto()
        self.cell = cell
        ops, self.mapping = self._gradient_ops(cell)
        self.net = core.Net("RecurrentBackwardStep")
        proto = self.net.Proto()
        self.recompute = {str(b) for b in (recompute_blobs_on_backward or [])}
        for op in cell.op:
            if self.recompute & set(op.output):
                if not set(op.output) <= self.recompute:
                    raise ValueError("recompute_blobs_on_backward must name every output of the ops it "
                                     "recomputes: %s" % list(op.output))
                proto.op.add().CopyFrom(op)
        proto.op.extend(ops)
        backward_ssa, self.backward_versions = core.get_ssa(proto)
        undefined = core.get_undefined_blobs(backward_ssa)
        _, forward_versions = core.get_ssa(cell)
        scratches = [b for b, v in forward_versions.items()
                     if v > 0 and b in undefined and b not in cell.external_output]
        proto.external_input.extend(scratches)
        proto.type = "simple"
        self.links = []

    @staticmethod
    def _gradient_ops(cell):
        """The cell's gradient ops and {blob: gradient name}, every output's gradient
        given as `<output>_grad` (what the backward links fill). When ops of the cell
        read an output and their gradient of it has another name (a pass-through
        gradient: Sum's inputs share its output's gradient, e.g. the residual Sum of
        MultiRNNCell), the registry would let that replace `<output>_grad`, losing the
        gradient from outside and from step t + 1: those outputs are built again with
        `<output>_grad` as a partial gradient, summed with what their readers hand back."""
        given = {o: o + "_grad" for o in cell.external_output}
        ops, mapping = gradients.backward_pass(cell.op, given)
        replaced = [o for o, g in given.items() if mapping.get(o) != g]
        if replaced:
            ops, mapping = gradients.backward_pass(cell.op, given, partial=replaced)
        return ops, mapping

    def link_state(self, cell_input, cell_output, states_grad):
        proto = self.net.Proto()
        self.links.append((cell_output + "_grad", states_grad, 1))
        proto.external_input.append(cell_output + "_grad")
        recurrent_input_grad = cell_input + "_grad"
        if not self.backward_versions.get(recurrent_input_grad, 0):
            # nothing writes it under that name: link whatever the registry named it
            self.links.append((str(self.mapping[cell_input]), states_grad, 0))
        else:
            self.links.append((recurrent_input_grad, states_grad, 0))

    def link_input(self, input_t, input_grad):
        self.links.append((str(self.mapping[input_t]), input_grad, 0))

    def _accumulate_linked_gradients(self):
        """A blob that is an input of the backward net (a linked gradient) and also
        written by one of its ops gets the op's value added, not replaced."""
        proto = self.net.Proto()
        ops = list(proto.op)
        del proto.op[:]
        for op in ops:
            proto.op.add().CopyFrom(op)
            for j, out in enumerate(op.output):
                if out in proto.external_input and out not in op.input:
                    accum = out + "_accum"
                    proto.op[-1].output[j] = accum
                    proto.op.add().CopyFrom(core.CreateOperator(
                        "Sum", [core.BlobReference(out), core.BlobReference(accum)], [core.BlobReference(out)]))

    def args(self, references, all_inputs, outputs_with_grads):
        proto = self.net.Proto()
        proto.external_input.extend(self.cell.external_input)
        proto.external_input.extend(self.cell.external_output)
        self._accumulate_linked_gradients()
        params = [str(r) for r in references if str(r) in self.mapping]
        args = {
            "param": [all_inputs.index(p) for p in params],
            "param_grads": [str(self.mapping[p]) for p in params],
            "backward_link_internal": [link[0] for link in self.links],
            "backward_link_external": [link[1] for link in self.links],
            "backward_link_offset": [link[2] for link in self.links],
            "outputs_with_grads": list(outputs_with_grads),
            "recompute_blobs_on_backward": sorted(self.recompute),
        }
        if len(proto.op):
            args["backward_step_net"] = proto
        return args


def derived_backward_step(cell_proto, state_links, input_links, recompute_blobs_on_backward=()):
    """(ops, links) of the backward step net recurrent_net derives from the step net
    cell_proto (a NetDef): state_links [(cell_input, cell_output, states_grad)],
    input_links [(input_t, input_grad)]; links are (internal, external, offset).
    The fused path checks a backward step net against it (fused_steps.py)."""
    cell_net = core.Net("RecurrentStep")
    cell_net.Proto().CopyFrom(cell_proto)
    backward = _BackwardStep(cell_net, list(recompute_blobs_on_backward) or None)
    for cell_input, cell_output, states_grad in state_links:
        backward.link_state(cell_input, cell_output, states_grad)
    for input_t, input_grad in input_links:
        backward.link_input(input_t, input_grad)
    backward._accumulate_linked_gradients()
    return list(backward.net.Proto().op), list(backward.links)


def set_rnn_executor_config(rnn_op, num_threads=None, max_cuda_streams=None):
    """Caffe2's executor settings; accepted (steps run one after another here)."""
    from .args import make_argument
    if rnn_op.type not in ("RecurrentNetwork", "RecurrentNetworkGradient"):
        raise ValueError("expected a RecurrentNetwork op, got %s" % rnn_op.type)
    for key, value in (("num_threads", num_threads), ("max_cuda_streams", max_cuda_streams)):
        if value is not None:
            rnn_op.arg.extend([make_argument("rnn_executor." + key, value)])


def retrieve_step_blobs(net, prefix="rnn"):
    """Copy the step workspaces' blobs of every RecurrentNetwork op of `net` into the
    current workspace (RecurrentNetworkBlobFetcher); returns their names."""
    from . import workspace
    names = []
    count = 1
    for op in net.Proto().op:
        if op.type == "RecurrentNetwork":
            blob_name = "%s_%d" % (prefix, count)
            count += 1
            workspace.RunOperatorOnce(core.CreateOperator(
                "RecurrentNetworkBlobFetcher", [op.output[-1]], [blob_name], prefix=prefix))
            names += workspace.FetchBlob(blob_name).tolist()
    return names
