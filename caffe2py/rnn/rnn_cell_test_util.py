"""Helpers Caffe2's RNN operator tests import (caffe2.python.rnn.rnn_cell_test_util):
NumPy activations for references, and _prepare_rnn, which builds a recurrent net
with a cell builder and feeds its initial states and sequence lengths."""
import numpy as np

from .. import scope, workspace
from ..model_helper import ModelHelper


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def tanh(x):
    # written through sigmoid, as the references of Caffe2's tests are
    return 2.0 * sigmoid(2.0 * x) - 1


def _initial_state(n, d, two_d):
    shape = (n, d) if two_d else (1, n, d)
    return np.random.randn(*shape).astype(np.float32)


def _prepare_rnn(t, n, dim_in, create_rnn, outputs_with_grads, forget_bias, memory_optim=False,
                 forward_only=False, drop_states=False, T=None, two_d_initial_states=None, dim_out=None,
                 num_states=2, **kwargs):
    """Build `create_rnn(model, input, seq_lengths, states, ...)` in a ModelHelper named
    'external' for sequences of at most t steps and batch n; returns (its outputs, the
    net, [state_0/layer_0, state_1/layer_0, ..., input_blob]). Each layer has num_states
    initial states (2 for LSTMs: hidden and cell; 1 for GRUs and basic RNNs), fed here
    as (n, d) or (1, n, d) at random unless two_d_initial_states says; the sequence
    lengths are fed with values in [1, t]; the input blob is left to the caller."""
    dim_out = [dim_in] if dim_out is None else dim_out
    if two_d_initial_states is None:
        two_d_initial_states = bool(np.random.randint(2))
    model = ModelHelper(name="external")
    states = []
    for layer, d in enumerate(dim_out):
        for i in range(num_states):
            state = model.net.AddExternalInput("state_%d/layer_%d" % (i, layer))
            workspace.FeedBlob(state, _initial_state(n, d, two_d_initial_states))
            states.append(state)
    # the cell builders must work under a name scope too
    with scope.NameScope("test_name_scope"):
        input_blob, seq_lengths = model.net.AddScopedExternalInputs("input_blob", "seq_lengths")
        outputs = create_rnn(model, input_blob, seq_lengths, states, dim_in=dim_in, dim_out=dim_out,
                             scope="external/recurrent", outputs_with_grads=outputs_with_grads,
                             memory_optimization=memory_optim, forget_bias=forget_bias,
                             forward_only=forward_only, drop_states=drop_states,
                             static_rnn_unroll_size=T, **kwargs)
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob(seq_lengths, np.random.randint(1, t + 1, size=(n,)).astype(np.int32))
    return outputs, model.net, states + [input_blob]
