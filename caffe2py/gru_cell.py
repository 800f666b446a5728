"""Caffe2's caffe2.python.gru_cell: a GRU built as a step net with GRUUnit.

The input projection `<scope>/i2h` gives [x_r | x_z | x_n] (3 * hidden_size);
the step net adds the recurrent projections of the previous hidden state
(`reset_gate_t`, `update_gate_t`, `output_gate_t`), applies the reset gate and
GRUUnit finishes the step. With linear_before_reset=True the reset gate scales
the recurrent projection after the linear layer, n = tanh(x_n + r * (W_hn h + b_hn)),
which is torch.nn.GRU's (and cuDNN's) formula; with False it scales h before it.
"""
import functools

from . import brew, rnn_cell


class GRUCell(rnn_cell.RNNCell):
    def __init__(self, input_size, hidden_size, forget_bias, memory_optimization, drop_states=False,
                 linear_before_reset=False, **kwargs):
        super().__init__(**kwargs)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.forget_bias = float(forget_bias)      # accepted, unused (as in Caffe2)
        self.memory_optimization = memory_optimization
        self.drop_states = drop_states
        self.linear_before_reset = linear_before_reset

    def _fc(self, model, blob, name):
        return brew.fc(model, blob, self.scope(name), dim_in=self.hidden_size,
                       dim_out=self.hidden_size, axis=2)

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev = states[0]
        x_reset, x_update, x_output = model.net.Split(
            [input_t], [self.scope("input_t_reset"), self.scope("input_t_update"),
                        self.scope("input_t_output")], axis=2)
        # the projections are made reset, update, output, as in Caffe2: their weights and
        # biases follow in that order among the RecurrentNetwork op's inputs
        reset = model.net.Sum([self._fc(model, hidden_t_prev, "reset_gate_t"), x_reset],
                              self.scope("reset_gate_t"))
        reset_sigmoid = model.net.Sigmoid(reset, self.scope("reset_gate_t_sigmoid"))
        update = model.net.Sum([self._fc(model, hidden_t_prev, "update_gate_t"), x_update],
                               self.scope("update_gate_t"))
        if self.linear_before_reset:
            output = model.net.Mul([reset_sigmoid, self._fc(model, hidden_t_prev, "output_gate_t")],
                                   self.scope("output_gate_t_mul"))
        else:
            modified = model.net.Mul([reset_sigmoid, hidden_t_prev], self.scope("modified_hidden_t_prev"))
            output = self._fc(model, modified, "output_gate_t")
        output = model.net.Sum([output, x_output], self.scope("output_gate_t_summed"))
        gates_t, _ = model.net.Concat([reset, update, output],
                                      [self.scope("gates_t"), self.scope("_gates_t_concat_dims")], axis=2)
        inputs = [hidden_t_prev, gates_t] + ([seq_lengths] if seq_lengths is not None else []) + [timestep]
        hidden_t = model.net.GRUUnit(inputs, list(self.get_state_names()),
                                     drop_states=self.drop_states,
                                     sequence_lengths=(seq_lengths is not None))
        model.net.AddExternalOutputs(hidden_t)
        return (hidden_t,)

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size,
                       dim_out=3 * self.hidden_size, axis=2)

    def get_state_names(self):
        return (self.scope("hidden_t"),)

    def get_output_dim(self):
        return self.hidden_size


GRU = functools.partial(rnn_cell._LSTM, GRUCell)
