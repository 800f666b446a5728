"""Caffe2's caffe2.python.recurrent: wrap a step net into a RecurrentNetwork op.

    recurrent_net(net, cell_net, inputs=[(input_t, input_seq)],
                  initial_cell_inputs=[(hidden_t_prev, h0), ...],
                  links={hidden_t_prev: hidden_t, ...}, timestep=timestep, scope="lstm")

For every recurrent input `x_prev` linked to the cell output `x`, the op keeps a
state tensor `<scope>/<x_prev>_states` of T + 1 steps (step t read as x_prev,
step t + 1 written as x) and outputs `<x>_all` (steps 1..T) and `<x>_last`
(step T). Blobs the cell net reads that are neither the input, the states nor
the timestep (its parameters) become further inputs of the op.

The backward step net (Caffe2 derives it from the gradient registry) is built
when caffe2py has a gradient registry (`core.GradientRegistry`); until then the
op is forward-only and a warning says so.
"""
import logging

from . import core

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
    if not forward_only:
        raise NotImplementedError("backward step nets need the gradient registry")  # see module doc

    all_inputs = [i[1] for i in inputs] + [x[1] for x in initial_cell_inputs] + references
    all_outputs = []
    forward_links, aliases, recurrent_states = [], [], []
    for cell_input, _ in initial_cell_inputs:
        cell_input = str(cell_input)
        state = s(cell_input + "_states")
        cell_output = links[cell_input]
        forward_links.append((cell_input, state, 0))
        forward_links.append((cell_output, state, 1))
        aliases.append((state, str(cell_output) + "_all", 1))
        aliases.append((state, str(cell_output) + "_last", -1))
        all_outputs.extend([str(cell_output) + "_all", str(cell_output) + "_last"])
        recurrent_states.append(state)
    for input_t, input_blob in inputs:
        forward_links.append((str(input_t), str(input_blob), 0))

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
        outputs_with_grads=list(outputs_with_grads),
        recompute_blobs_on_backward=[str(b) for b in (recompute_blobs_on_backward or [])],
    )
    return results[:-1]


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
