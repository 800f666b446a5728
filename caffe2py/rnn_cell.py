"""Caffe2's caffe2.python.rnn_cell: recurrent cells built as step nets and run by a
RecurrentNetwork op.

    hidden_all, hidden_last, cell_all, cell_last = rnn_cell.LSTM(
        model, input_blob, seq_lengths, (h0, c0), dim_in, dim_out, scope="lstm")

The input sequence is [T, N, dim_in]; the input projection (`<scope>/i2h`, an FC
over the whole sequence) is computed once before the recurrence, the recurrent
projection (`<scope>/gates_t`) and the unit op (LSTMUnit, GRUUnit) run in the
step net. Gate layouts follow Caffe2: LSTM [i, f, o, g], GRU [r, z, n].

Cells: LSTMCell, MILSTMCell, LayerNormLSTMCell, LayerNormMILSTMCell, BasicRNNCell,
MultiRNNCell (stacked layers), DropoutCell, AttentionCell with
LSTMWithAttentionCell / MILSTMWithAttentionCell; GRUCell is in gru_cell.py.
Some cells use ops of other families (LayerNorm, ElementwiseLinear, Squeeze, the
comparisons of BasicRNN with sequence lengths); they are created here and run
when those ops are registered. UnrolledCell (static_rnn_unroll_size) applies a
cell T times in the net itself instead; cudnn_LSTM is not provided.
"""
import functools
import inspect

import numpy as np

from . import brew, core, recurrent, scope, workspace
from .attention import (AttentionType, apply_dot_attention, apply_recurrent_attention,
                        apply_regular_attention, apply_soft_coverage_attention)
from .errors import Caffe2Error
from .model_helper import ModelHelper


def _RectifyName(blob_reference_or_name):
    """A str becomes a BlobReference scoped now, so later NameScopes leave it alone."""
    if blob_reference_or_name is None:
        return None
    if isinstance(blob_reference_or_name, str):
        return core.ScopedBlobReference(blob_reference_or_name)
    if not isinstance(blob_reference_or_name, core.BlobReference):
        raise Caffe2Error("Unknown blob reference type %s" % type(blob_reference_or_name).__name__)
    return blob_reference_or_name


def _RectifyNames(names):
    return None if names is None else [_RectifyName(n) for n in names]


def _constant(value):
    return ("ConstantFill", {"value": float(value)})


def _layer_norm(model, blob_in, blob_out, dim_in, axis=1, epsilon=1e-4, initial_scale=1.0,
                initial_bias=0.0):
    """brew.layer_norm: LayerNorm with learned per-element scale and bias."""
    scale = model.create_param("%s_scale" % blob_out, [dim_in], _constant(initial_scale))
    bias = model.create_param("%s_bias" % blob_out, [dim_in], _constant(initial_bias))
    return model.net.LayerNorm([blob_in, scale, bias],
                               [blob_out, str(blob_out) + "_mean", str(blob_out) + "_std"],
                               axis=axis, epsilon=epsilon, elementwise_affine=True)


class RNNCell:
    """A recurrent cell: subclasses define one step (apply_override) and the names
    of their states; apply_over_sequence runs it over a sequence."""

    def __init__(self, name=None, forward_only=False, initializer=None):
        self.name = name
        self.recompute_blobs = []
        self.forward_only = forward_only
        self._initializer = initializer

    @property
    def initializer(self):
        return self._initializer

    @initializer.setter
    def initializer(self, value):
        self._initializer = value

    def scope(self, name):
        return self.name + "/" + name if self.name is not None else name

    def apply_over_sequence(self, model, inputs, seq_lengths=None, initial_states=None,
                            outputs_with_grads=None):
        """(output sequence, states for all steps): the latter alternates each
        state's [T, N, D] sequence and its [1, N, D] last value."""
        if initial_states is None:
            with scope.NameScope(self.name):
                if self.initializer is None:
                    raise Caffe2Error("Either initial states or initializer have to be set")
                initial_states = self.initializer.create_states(model)
        preprocessed = self.prepare_input(model, inputs)
        step_model = ModelHelper(name=self.name, param_model=model)
        input_t, timestep = step_model.net.AddScopedExternalInputs("input_t", "timestep")
        if len(initial_states) != len(self.get_state_names()):
            raise Caffe2Error("Number of initial state values provided (%d) doesn't match the number "
                              "of states (%d)" % (len(initial_states), len(self.get_state_names())))
        states_prev = step_model.net.AddScopedExternalInputs(*[s + "_prev" for s in self.get_state_names()])
        if not isinstance(states_prev, list):
            states_prev = [states_prev]
        states = self._apply(model=step_model, input_t=input_t, seq_lengths=seq_lengths,
                             states=states_prev, timestep=timestep)
        outputs = set(step_model.net.Proto().external_output)
        for state in states:
            if str(state) not in outputs:
                step_model.net.AddExternalOutput(state)
        if outputs_with_grads is None:
            outputs_with_grads = [self.get_output_state_index() * 2]
        states_for_all_steps = recurrent.recurrent_net(
            net=model.net, cell_net=step_model.net, inputs=[(input_t, preprocessed)],
            initial_cell_inputs=list(zip(states_prev, initial_states)),
            links=dict(zip((str(s) for s in states_prev), states)), timestep=timestep,
            scope=self.name, forward_only=self.forward_only, outputs_with_grads=outputs_with_grads,
            recompute_blobs_on_backward=self.recompute_blobs)
        output = self._prepare_output_sequence(model, states_for_all_steps)
        return output, states_for_all_steps

    def apply(self, model, input_t, seq_lengths, states, timestep):
        """One step, added to `model` directly (no RecurrentNetwork)."""
        input_t = self.prepare_input(model, input_t)
        states = self._apply(model, input_t, seq_lengths, states, timestep)
        return self._prepare_output(model, states), states

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        args = self._rectify_apply_inputs(input_t, seq_lengths, states, timestep, extra_inputs)
        with core.NameScope(self.name):
            return self.apply_override(model, *args)

    def _rectify_apply_inputs(self, input_t, seq_lengths, states, timestep, extra_inputs):
        input_t, seq_lengths, timestep = _RectifyNames([input_t, seq_lengths, timestep])
        states = _RectifyNames(states)
        if extra_inputs:
            names, sizes = zip(*extra_inputs)
            extra_inputs = list(zip(_RectifyNames(names), sizes))
        rectified = [input_t, seq_lengths, states, timestep]
        if "extra_inputs" in inspect.signature(self.apply_override).parameters:
            rectified.append(extra_inputs)
        return rectified

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        """One step: add the step's ops to `model`, return the new states."""
        raise NotImplementedError("Abstract method")

    def prepare_input(self, model, input_blob):
        """Work that depends on the input only, done once over the whole sequence."""
        return input_blob

    def get_output_state_index(self):
        return 0

    def get_state_names(self):
        return [self.scope(name) for name in self.get_state_names_override()]

    def get_state_names_override(self):
        raise NotImplementedError("Abstract method")

    def get_output_dim(self):
        raise NotImplementedError("Abstract method")

    def _prepare_output(self, model, states):
        return states[self.get_output_state_index()]

    def _prepare_output_sequence(self, model, state_outputs):
        return state_outputs[2 * self.get_output_state_index()]


class LSTMInitializer:
    """Initial hidden and cell states as zero parameters of size hidden_size."""

    def __init__(self, hidden_size):
        self.hidden_size = hidden_size

    def create_states(self, model):
        return [model.create_param(param_name=name, shape=[self.hidden_size], initializer=_constant(0.0))
                for name in ("initial_hidden_state", "initial_cell_state")]


class BasicRNNCell(RNNCell):
    """h_t = activation(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), activation tanh or relu."""

    def __init__(self, input_size, hidden_size, forget_bias, memory_optimization, drop_states=False,
                 initializer=None, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.drop_states = drop_states
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.activation = activation
        if activation not in ("relu", "tanh"):
            raise Caffe2Error("BasicRNNCell with unknown activation function (%s)" % activation)

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev = states[0]
        gates_t = brew.fc(model, hidden_t_prev, "gates_t", dim_in=self.hidden_size,
                          dim_out=self.hidden_size, axis=2)
        brew.sum(model, [gates_t, input_t], gates_t)
        op = model.net.Tanh if self.activation == "tanh" else model.net.Relu
        hidden_t = op(gates_t, "hidden_t")
        if seq_lengths is not None:
            # Rows past their length keep the previous state (or zeros with drop_states).
            timestep = model.net.CopyFromCPUInput(timestep, "timestep_gpu")
            valid = model.net.Cast(model.net.GT([seq_lengths, timestep], "valid_b", broadcast=1),
                                   "valid", to="float")
            invalid = model.net.Cast(model.net.LE([seq_lengths, timestep], "invalid_b", broadcast=1),
                                     "invalid", to="float")
            hidden_valid = model.net.Mul([hidden_t, valid], "hidden_valid", broadcast=1, axis=1)
            if self.drop_states:
                hidden_t = hidden_valid
            else:
                hidden_invalid = model.net.Mul([hidden_t_prev, invalid], "hidden_invalid", broadcast=1, axis=1)
                hidden_t = model.net.Add([hidden_valid, hidden_invalid], hidden_t)
        return (hidden_t,)

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size,
                       dim_out=self.hidden_size, axis=2)

    def get_state_names(self):
        return (self.scope("hidden_t"),)

    def get_output_dim(self):
        return self.hidden_size


class LSTMCell(RNNCell):
    """Caffe2's LSTM: gates = i2h(x_t) + gates_t(h_{t-1}) in [i, f, o, g] order, then LSTMUnit."""

    def __init__(self, input_size, hidden_size, forget_bias, memory_optimization, drop_states=False,
                 initializer=None, **kwargs):
        super().__init__(initializer=initializer, **kwargs)
        self.initializer = initializer or LSTMInitializer(hidden_size=hidden_size)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.forget_bias = float(forget_bias)
        self.memory_optimization = memory_optimization
        self.drop_states = drop_states
        self.gates_size = 4 * hidden_size

    def _recurrent_input(self, model, hidden_t_prev, extra_inputs, concat_name):
        """h_{t-1}, concatenated with any extra per-step inputs (attention context)."""
        if not extra_inputs:
            return hidden_t_prev, self.hidden_size
        blobs, sizes = zip(*extra_inputs)
        return (brew.concat(model, [hidden_t_prev] + list(blobs), concat_name, axis=2),
                self.hidden_size + sum(sizes))

    def _lstm_unit(self, model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths, timestep, outputs):
        inputs = [hidden_t_prev, cell_t_prev, gates_t] + ([seq_lengths] if seq_lengths is not None else [])
        return model.net.LSTMUnit(inputs + [timestep], outputs, forget_bias=self.forget_bias,
                                  drop_states=self.drop_states,
                                  sequence_lengths=(seq_lengths is not None))

    def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev, cell_t_prev = states
        fc_input, fc_dim = self._recurrent_input(model, hidden_t_prev, extra_inputs,
                                                 "gates_concatenated_input_t")
        gates_t = brew.fc(model, fc_input, "gates_t", dim_in=fc_dim, dim_out=self.gates_size, axis=2)
        brew.sum(model, [gates_t, input_t], gates_t)
        hidden_t, cell_t = self._lstm_unit(model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths,
                                           timestep, ["hidden_state", "cell_state"])
        model.net.AddExternalOutputs(hidden_t, cell_t)
        if self.memory_optimization:
            self.recompute_blobs = [gates_t]
        return hidden_t, cell_t

    def get_input_params(self):
        return {"weights": self.scope("i2h") + "_w", "biases": self.scope("i2h") + "_b"}

    def get_recurrent_params(self):
        return {"weights": self.scope("gates_t") + "_w", "biases": self.scope("gates_t") + "_b"}

    def prepare_input(self, model, input_blob):
        return brew.fc(model, input_blob, self.scope("i2h"), dim_in=self.input_size,
                       dim_out=self.gates_size, axis=2)

    def get_state_names_override(self):
        return ["hidden_t", "cell_t"]

    def get_output_dim(self):
        return self.hidden_size


class LayerNormLSTMCell(LSTMCell):
    """LSTMCell with layer normalisation of the gates before LSTMUnit."""

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev, cell_t_prev = states
        fc_input, fc_dim = self._recurrent_input(model, hidden_t_prev, extra_inputs,
                                                 self.scope("gates_concatenated_input_t"))
        gates_t = brew.fc(model, fc_input, self.scope("gates_t"), dim_in=fc_dim,
                          dim_out=self.gates_size, axis=2)
        brew.sum(model, [gates_t, input_t], gates_t)
        gates_t, _, _ = _layer_norm(model, self.scope("gates_t"), self.scope("gates_t_norm"),
                                    dim_in=self.gates_size, axis=-1)
        hidden_t, cell_t = self._lstm_unit(model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths,
                                           timestep, self.get_state_names())
        model.net.AddExternalOutputs(hidden_t, cell_t)
        if self.memory_optimization:
            self.recompute_blobs = [gates_t]
        return hidden_t, cell_t

    def get_state_names(self):
        return (self.scope("hidden_t"), self.scope("cell_t"))


class MILSTMCell(LSTMCell):
    """Multiplicative-integration LSTM: gates = (alpha * x + beta1) * W h + beta2 * x + b,
    x the projected input (arXiv:1606.06630)."""

    def _mi_gates(self, model, input_t, hidden_t_prev, extra_inputs):
        fc_input, fc_dim = self._recurrent_input(model, hidden_t_prev, extra_inputs,
                                                 self.scope("gates_concatenated_input_t"))
        prev_t = brew.fc(model, fc_input, self.scope("prev_t"), dim_in=fc_dim,
                         dim_out=self.gates_size, axis=2)
        alpha = model.create_param(self.scope("alpha"), [self.gates_size], _constant(1.0))
        beta_h = model.create_param(self.scope("beta1"), [self.gates_size], _constant(1.0))
        beta_i = model.create_param(self.scope("beta2"), [self.gates_size], _constant(1.0))
        b = model.create_param(self.scope("b"), [self.gates_size], _constant(0.0))
        scaled_input = model.net.ElementwiseLinear([input_t, alpha, beta_h],
                                                   self.scope("alpha_by_input_t_plus_beta_h"), axis=2)
        mixed = model.net.Mul([scaled_input, prev_t], self.scope("alpha_by_input_t_plus_beta_h_by_prev_t"))
        input_part = model.net.ElementwiseLinear([input_t, beta_i, b],
                                                 self.scope("beta_i_by_input_t_plus_b"), axis=2)
        return brew.sum(model, [mixed, input_part], self.scope("gates_t"))

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev, cell_t_prev = states
        gates_t = self._mi_gates(model, input_t, hidden_t_prev, extra_inputs)
        hidden_t, cell_t = self._lstm_unit(model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths,
                                           timestep, [self.scope("hidden_t_intermediate"),
                                                      self.scope("cell_t")])
        model.net.AddExternalOutputs(cell_t, hidden_t)
        if self.memory_optimization:
            self.recompute_blobs = [gates_t]
        return hidden_t, cell_t


class LayerNormMILSTMCell(MILSTMCell):
    """MILSTMCell with layer normalisation of the gates."""

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        hidden_t_prev, cell_t_prev = states
        self._mi_gates(model, input_t, hidden_t_prev, extra_inputs)
        gates_t, _, _ = _layer_norm(model, self.scope("gates_t"), self.scope("gates_t_norm"),
                                    dim_in=self.gates_size, axis=-1)
        hidden_t, cell_t = self._lstm_unit(model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths,
                                           timestep, [self.scope("hidden_t_intermediate"),
                                                      self.scope("cell_t")])
        model.net.AddExternalOutputs(cell_t, hidden_t)
        if self.memory_optimization:
            self.recompute_blobs = [gates_t]
        return hidden_t, cell_t


class DropoutCell(RNNCell):
    """Wraps a cell; applies dropout to its output (not to the recurrent state)."""

    def __init__(self, internal_cell, dropout_ratio=None, use_cudnn=False, **kwargs):
        if "is_test" not in kwargs:
            raise Caffe2Error("DropoutCell: argument 'is_test' is required")
        self.internal_cell = internal_cell
        self.dropout_ratio = dropout_ratio
        self.is_test = kwargs.pop("is_test")
        self.use_cudnn = use_cudnn
        super().__init__(**kwargs)
        self.prepare_input = internal_cell.prepare_input
        self.get_output_state_index = internal_cell.get_output_state_index
        self.get_state_names = internal_cell.get_state_names
        self.get_output_dim = internal_cell.get_output_dim
        self.mask = 0

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        return self.internal_cell._apply(model, input_t, seq_lengths, states, timestep, extra_inputs)

    def _prepare_output(self, model, states):
        output = self.internal_cell._prepare_output(model, states)
        return self._apply_dropout(model, output) if self.dropout_ratio is not None else output

    def _prepare_output_sequence(self, model, state_outputs):
        output = self.internal_cell._prepare_output_sequence(model, state_outputs)
        return self._apply_dropout(model, output) if self.dropout_ratio is not None else output

    def _apply_dropout(self, model, output):
        if self.dropout_ratio and not self.forward_only:
            with core.NameScope(self.name or ""):
                output = brew.dropout(model, output, "%s_with_dropout_mask%d" % (output, self.mask),
                                      ratio=float(self.dropout_ratio), is_test=self.is_test,
                                      use_cudnn=self.use_cudnn)
                self.mask += 1
        return output


class MultiRNNCellInitializer:
    def __init__(self, cells):
        self.cells = cells

    def create_states(self, model):
        states = []
        for i, cell in enumerate(self.cells):
            if cell.initializer is None:
                raise Caffe2Error("Either initial states or initializer have to be set")
            with core.NameScope("layer_{}".format(i)), core.NameScope(cell.name):
                states.extend(cell.initializer.create_states(model))
        return states


class MultiRNNCell(RNNCell):
    """Stacked cells; layer i's output is layer i+1's input (plus the layer's input
    for the layers in residual_output_layers; layer 0 cannot be residual)."""

    def __init__(self, cells, residual_output_layers=None, **kwargs):
        super().__init__(**kwargs)
        self.cells = cells
        self.residual_output_layers = list(residual_output_layers or [])
        per_layer_output = []
        base = 0
        for cell in cells:
            per_layer_output.append(base + cell.get_output_state_index())
            base += len(cell.get_state_names())
        # The output sums the last layer with the unbroken run of residual layers before it.
        self.output_connected_layers, self.output_indices = [], []
        for i in range(len(cells) - 1):
            if (i + 1) in self.residual_output_layers:
                self.output_connected_layers.append(i)
                self.output_indices.append(per_layer_output[i])
            else:
                self.output_connected_layers, self.output_indices = [], []
        self.output_connected_layers.append(len(cells) - 1)
        self.output_indices.append(per_layer_output[-1])
        self.state_names = []
        for i, cell in enumerate(cells):
            self.state_names.extend(map(self.layer_scoper(i), cell.get_state_names()))
        self.initializer = MultiRNNCellInitializer(cells)

    def layer_scoper(self, layer_id):
        return lambda name: "{}/layer_{}/{}".format(self.name, layer_id, name)

    def prepare_input(self, model, input_blob):
        input_blob = _RectifyName(input_blob)
        with core.NameScope(self.name or ""):
            return self.cells[0].prepare_input(model, input_blob)

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        input_t, seq_lengths, timestep = _RectifyNames([input_t, seq_lengths, timestep])
        states = _RectifyNames(states)
        counts = [len(cell.get_state_names()) for cell in self.cells]
        if len(states) != sum(counts):
            raise Caffe2Error("MultiRNNCell: %d states given, the layers have %d" % (len(states), sum(counts)))
        next_states = []
        start = 0
        layer_input = input_t
        for i, cell in enumerate(self.cells):
            with core.NameScope(self.name), core.NameScope("layer_{}".format(i)):
                layer_states = states[start:start + counts[i]]
                start += counts[i]
                prepared = cell.prepare_input(model, layer_input) if i > 0 else layer_input
                layer_next = cell._apply(model, prepared, seq_lengths, layer_states, timestep,
                                         extra_inputs=(extra_inputs if i == 0 else None))
                if i != len(self.cells) - 1:
                    layer_output = cell._prepare_output(model, layer_next)
                    if i > 0 and i in self.residual_output_layers:
                        layer_input = brew.sum(model, [layer_output, layer_input],
                                               self.scope("residual_output_{}".format(i)))
                    else:
                        layer_input = layer_output
                next_states.extend(layer_next)
        return next_states

    def get_state_names(self):
        return self.state_names

    def get_output_state_index(self):
        return sum(len(c.get_state_names()) for c in self.cells[:-1]) + self.cells[-1].get_output_state_index()

    def _connected_outputs(self, model, states, per_state, prepare, name):
        outputs, start = [], 0
        for i, cell in enumerate(self.cells):
            n = per_state * len(cell.get_state_names())
            if i in self.output_connected_layers:
                outputs.append(prepare(cell)(model, states[start:start + n]))
            start += n
        if len(outputs) > 1:
            return brew.sum(model, outputs, self.scope(name))
        return outputs[0]

    def _prepare_output(self, model, states):
        return self._connected_outputs(model, states, 1, lambda c: c._prepare_output, "residual_output")

    def _prepare_output_sequence(self, model, states):
        return self._connected_outputs(model, states, 2, lambda c: c._prepare_output_sequence,
                                       "residual_output_sequence")


class AttentionCell(RNNCell):
    """A decoder cell that attends over encoder outputs [T_enc, N, encoder_output_dim]:
    its recurrent input is concatenated with the previous attention context, and
    the new context is an extra state."""

    def __init__(self, encoder_output_dim, encoder_outputs, encoder_lengths, decoder_cell,
                 decoder_state_dim, attention_type, weighted_encoder_outputs,
                 attention_memory_optimization, **kwargs):
        super().__init__(**kwargs)
        if attention_type not in (AttentionType.Regular, AttentionType.Recurrent,
                                  AttentionType.Dot, AttentionType.SoftCoverage):
            raise Caffe2Error("unknown attention type %r" % (attention_type,))
        self.encoder_output_dim = encoder_output_dim
        self.encoder_outputs = encoder_outputs
        self.encoder_lengths = encoder_lengths
        self.decoder_cell = decoder_cell
        self.decoder_state_dim = decoder_state_dim
        self.weighted_encoder_outputs = weighted_encoder_outputs
        self.encoder_outputs_transposed = None
        self.attention_type = attention_type
        self.attention_memory_optimization = attention_memory_optimization

    def _apply(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
        coverage = self.attention_type == AttentionType.SoftCoverage
        decoder_prev_states = states[:-2] if coverage else states[:-1]
        context_prev = states[-2] if coverage else states[-1]
        if extra_inputs is not None:
            raise Caffe2Error("AttentionCell takes no extra inputs")
        decoder_states = self.decoder_cell._apply(
            model, input_t, seq_lengths, decoder_prev_states, timestep,
            extra_inputs=[(context_prev, self.encoder_output_dim)])
        self.hidden_t_intermediate = self.decoder_cell._prepare_output(model, decoder_states)
        common = dict(model=model, encoder_output_dim=self.encoder_output_dim,
                      encoder_outputs_transposed=self.encoder_outputs_transposed,
                      decoder_hidden_state_t=self.hidden_t_intermediate,
                      decoder_hidden_state_dim=self.decoder_state_dim, scope=self.name,
                      encoder_lengths=self.encoder_lengths)
        coverage_t = None
        if self.attention_type == AttentionType.Recurrent:
            context_t, self.attention_weights_3d, attention_blobs = apply_recurrent_attention(
                weighted_encoder_outputs=self.weighted_encoder_outputs,
                attention_weighted_encoder_context_t_prev=context_prev, **common)
        elif self.attention_type == AttentionType.Regular:
            context_t, self.attention_weights_3d, attention_blobs = apply_regular_attention(
                weighted_encoder_outputs=self.weighted_encoder_outputs, **common)
        elif self.attention_type == AttentionType.Dot:
            context_t, self.attention_weights_3d, attention_blobs = apply_dot_attention(**common)
        else:
            context_t, self.attention_weights_3d, attention_blobs, coverage_t = apply_soft_coverage_attention(
                weighted_encoder_outputs=self.weighted_encoder_outputs, coverage_t_prev=states[-1],
                coverage_weights=self.coverage_weights, **common)
        if self.attention_memory_optimization:
            self.recompute_blobs.extend(attention_blobs)
        output = list(decoder_states) + [context_t] + ([coverage_t] if coverage else [])
        index = self.decoder_cell.get_output_state_index()
        output[index] = model.net.Copy(output[index], self.scope("hidden_t_external"))
        model.net.AddExternalOutputs(*output)
        return output

    def get_attention_weights(self):
        return self.attention_weights_3d

    def prepare_input(self, model, input_blob):
        if self.encoder_outputs_transposed is None:
            self.encoder_outputs_transposed = brew.transpose(
                model, self.encoder_outputs, self.scope("encoder_outputs_transposed"), axes=[1, 2, 0])
        if self.weighted_encoder_outputs is None and self.attention_type != AttentionType.Dot:
            self.weighted_encoder_outputs = brew.fc(
                model, self.encoder_outputs, self.scope("weighted_encoder_outputs"),
                dim_in=self.encoder_output_dim, dim_out=self.encoder_output_dim, axis=2)
        return self.decoder_cell.prepare_input(model, input_blob)

    def build_initial_coverage(self, model):
        """Zeros [T_enc] (the shape known only at run time) and the coverage weights."""
        if self.attention_type != AttentionType.SoftCoverage:
            raise Caffe2Error("build_initial_coverage needs AttentionType.SoftCoverage")
        self.coverage_weights = brew.fc(model, self.encoder_outputs, self.scope("coverage_weights"),
                                        dim_in=self.encoder_output_dim, dim_out=self.encoder_output_dim,
                                        axis=2)
        encoder_length = model.net.Slice(model.net.Shape(self.encoder_outputs), starts=[0], ends=[1])
        return model.net.ConstantFill(encoder_length, self.scope("initial_coverage"), value=0.0,
                                      input_as_shape=1)

    def get_state_names(self):
        names = list(self.decoder_cell.get_state_names())
        names[self.get_output_state_index()] = self.scope("hidden_t_external")
        names.append(self.scope("attention_weighted_encoder_context_t"))
        if self.attention_type == AttentionType.SoftCoverage:
            names.append(self.scope("coverage_t"))
        return names

    def get_output_dim(self):
        return self.decoder_state_dim + self.encoder_output_dim

    def get_output_state_index(self):
        return self.decoder_cell.get_output_state_index()

    def _prepare_output(self, model, states):
        context = states[-2] if self.attention_type == AttentionType.SoftCoverage else states[-1]
        with core.NameScope(self.name or ""):
            return brew.concat(model, [self.hidden_t_intermediate, context],
                               "states_and_context_combination", axis=2)

    def _prepare_output_sequence(self, model, state_outputs):
        coverage = self.attention_type == AttentionType.SoftCoverage
        decoder_outputs = state_outputs[:-4] if coverage else state_outputs[:-2]
        decoder_output = self.decoder_cell._prepare_output_sequence(model, decoder_outputs)
        context_index = 2 * (len(self.get_state_names()) - (2 if coverage else 1))
        with core.NameScope(self.name or ""):
            return brew.concat(model, [decoder_output, state_outputs[context_index]],
                               "states_and_context_combination", axis=2)


class LSTMWithAttentionCell(AttentionCell):
    def __init__(self, encoder_output_dim, encoder_outputs, encoder_lengths, decoder_input_dim,
                 decoder_state_dim, name, attention_type, weighted_encoder_outputs, forget_bias,
                 lstm_memory_optimization, attention_memory_optimization, forward_only=False):
        decoder_cell = LSTMCell(input_size=decoder_input_dim, hidden_size=decoder_state_dim,
                                forget_bias=forget_bias, memory_optimization=lstm_memory_optimization,
                                name="{}/decoder".format(name), forward_only=False, drop_states=False)
        super().__init__(encoder_output_dim=encoder_output_dim, encoder_outputs=encoder_outputs,
                         encoder_lengths=encoder_lengths, decoder_cell=decoder_cell,
                         decoder_state_dim=decoder_state_dim, name=name, attention_type=attention_type,
                         weighted_encoder_outputs=weighted_encoder_outputs,
                         attention_memory_optimization=attention_memory_optimization,
                         forward_only=forward_only)


class MILSTMWithAttentionCell(AttentionCell):
    def __init__(self, encoder_output_dim, encoder_outputs, decoder_input_dim, decoder_state_dim,
                 name, attention_type, weighted_encoder_outputs, forget_bias, lstm_memory_optimization,
                 attention_memory_optimization, forward_only=False):
        decoder_cell = MILSTMCell(input_size=decoder_input_dim, hidden_size=decoder_state_dim,
                                  forget_bias=forget_bias, memory_optimization=lstm_memory_optimization,
                                  name="{}/decoder".format(name), forward_only=False, drop_states=False)
        super().__init__(encoder_output_dim=encoder_output_dim, encoder_outputs=encoder_outputs,
                         encoder_lengths=None, decoder_cell=decoder_cell,
                         decoder_state_dim=decoder_state_dim, name=name, attention_type=attention_type,
                         weighted_encoder_outputs=weighted_encoder_outputs,
                         attention_memory_optimization=attention_memory_optimization,
                         forward_only=forward_only)


def _LSTM(cell_class, model, input_blob, seq_lengths, initial_states, dim_in, dim_out, scope=None,
          outputs_with_grads=(0,), return_params=False, memory_optimization=False, forget_bias=0.0,
          forward_only=False, drop_states=False, return_last_layer_only=True,
          static_rnn_unroll_size=None, **cell_kwargs):
    """A (multi-layer) recurrent network of cell_class over input_blob [T, N, dim_in].

    dim_out: an int, or a list for stacked layers. initial_states: 2 blobs per layer
    (hidden, cell; 1 for BasicRNN/GRU), or None for zero parameters. Returns
    (hidden_all, hidden_last, cell_all, cell_last) of the last layer (of every layer
    with return_last_layer_only=False), plus a parameter dict with return_params."""
    dims = list(dim_out) if isinstance(dim_out, (list, tuple)) else [dim_out]
    layers = len(dims)
    cells = [cell_class(input_size=(dim_in if i == 0 else dims[i - 1]), hidden_size=dims[i],
                        forget_bias=forget_bias, memory_optimization=memory_optimization,
                        name=scope if layers == 1 else None, forward_only=forward_only,
                        drop_states=drop_states, **cell_kwargs)
             for i in range(layers)]
    cell = MultiRNNCell(cells, name=scope, forward_only=forward_only) if layers > 1 else cells[0]
    if static_rnn_unroll_size is not None:
        cell = UnrolledCell(cell, static_rnn_unroll_size)
    states_per_layer = 2 * len(cells[-1].get_state_names())
    outputs_with_grads = [states_per_layer * (layers - 1) + i for i in outputs_with_grads]
    _, result = cell.apply_over_sequence(model=model, inputs=input_blob, seq_lengths=seq_lengths,
                                         initial_states=initial_states,
                                         outputs_with_grads=outputs_with_grads)
    if return_last_layer_only:
        result = result[states_per_layer * (layers - 1):]
    if return_params:
        result = list(result) + [{"input": cell.get_input_params(), "recurrent": cell.get_recurrent_params()}]
    return tuple(result)


class UnrolledCell(RNNCell):
    """A cell applied T times in the net itself (Caffe2's static RNN): the input
    sequence is split into T steps, step t's ops live under the name scope
    `timestep_<t>/` with the parameters shared across steps, and each state's steps
    are concatenated back into a [T, N, D] sequence. States come out as the
    RecurrentNetwork path gives them (per state: all steps, then the last step);
    outputs not in outputs_with_grads get a ZeroGradient so a backward pass may
    start from the others only."""

    def __init__(self, cell, T):
        super().__init__(name=getattr(cell, "name", None), forward_only=getattr(cell, "forward_only", False))
        if int(T) < 1:
            raise Caffe2Error("UnrolledCell: T must be >= 1, got %r" % (T,))
        self.T = int(T)
        self.cell = cell

    def get_state_names(self):
        return self.cell.get_state_names()

    def get_output_state_index(self):
        return self.cell.get_output_state_index()

    def apply_over_sequence(self, model, inputs, seq_lengths=None, initial_states=None,
                            outputs_with_grads=None):
        from .modeling.parameter_sharing import ParameterSharing
        if initial_states is None:
            raise Caffe2Error("UnrolledCell needs initial states")
        inputs = self.cell.prepare_input(model, inputs)
        names = [str(inputs) + "_timestep_{}".format(t) for t in range(self.T)]
        steps = model.net.Split(inputs, names, axis=0)
        if self.T == 1:
            steps = [steps]
        states = list(initial_states)
        per_step = []
        for t in range(self.T):
            step_scope = "timestep_{}".format(t)
            with ParameterSharing({step_scope: ""}), scope.NameScope(step_scope):
                timestep = model.param_init_net.ConstantFill(
                    [], "timestep", value=t, shape=[1], dtype=core.DataType.INT32,
                    device_option=core.DeviceOption(core.caffe2_pb2.CPU))
                states = self.cell._apply(model=model, input_t=steps[t], seq_lengths=seq_lengths,
                                          states=states, timestep=timestep)
            per_step.append(states)
        prefix = len("timestep_0/")
        sequences = []
        for steps_of_state in zip(*per_step):
            base = str(steps_of_state[0])[prefix:]
            sequences.append(model.net.Concat(list(steps_of_state), [base + "_concat", base + "_concat_info"],
                                              axis=0)[0])
        outputs = []
        for sequence, last in zip(sequences, states):
            outputs.extend([sequence, last])
        outputs = tuple(outputs)
        with_grads = set(range(len(outputs))) if outputs_with_grads is None else set(outputs_with_grads)
        for i in sorted(set(range(len(outputs))) - with_grads):
            model.net.ZeroGradient(outputs[i], [])
        return self.cell._prepare_output_sequence(model, outputs), outputs


LSTM = functools.partial(_LSTM, LSTMCell)
BasicRNN = functools.partial(_LSTM, BasicRNNCell)
MILSTM = functools.partial(_LSTM, MILSTMCell)
LayerNormLSTM = functools.partial(_LSTM, LayerNormLSTMCell)
LayerNormMILSTM = functools.partial(_LSTM, LayerNormMILSTMCell)


def GetLSTMParamNames():
    return {"weights": ["input_gate_w", "forget_gate_w", "output_gate_w", "cell_w"],
            "biases": ["input_gate_b", "forget_gate_b", "output_gate_b", "cell_b"]}


def InitFromLSTMParams(lstm_pblobs, param_values):
    """Feed per-gate weights and biases ({'input'|'recurrent': {name: array}}) into the
    fused weight and bias blobs of an LSTM (gate order i, f, o, g)."""
    names = GetLSTMParamNames()
    for input_type, values in param_values.items():
        weights = np.concatenate([np.asarray(values[w]).reshape(-1) for w in names["weights"]])
        biases = np.concatenate([np.asarray(values[b]).reshape(-1) for b in names["biases"]])
        w_blob, b_blob = lstm_pblobs[input_type]["weights"], lstm_pblobs[input_type]["biases"]
        workspace.FeedBlob(w_blob, weights.reshape(workspace.FetchBlob(w_blob).shape).astype(np.float32))
        workspace.FeedBlob(b_blob, biases.reshape(workspace.FetchBlob(b_blob).shape).astype(np.float32))


def cudnn_LSTM(*args, **kwargs):
    raise Caffe2Error("cudnn_LSTM needs cuDNN's Recurrent op, which caffe2py does not provide; "
                      "use rnn_cell.LSTM (RecurrentNetwork + LSTMUnit)")


def LSTMWithAttention(model, decoder_inputs, decoder_input_lengths, initial_decoder_hidden_state,
                      initial_decoder_cell_state, initial_attention_weighted_encoder_context,
                      encoder_output_dim, encoder_outputs, encoder_lengths, decoder_input_dim,
                      decoder_state_dim, scope, attention_type=AttentionType.Regular,
                      outputs_with_grads=(0, 4), weighted_encoder_outputs=None,
                      lstm_memory_optimization=False, attention_memory_optimization=False,
                      forget_bias=0.0, forward_only=False):
    """An LSTM decoder with attention over encoder_outputs [T_enc, N, encoder_output_dim]
    (Bahdanau-style, arXiv:1409.0473). Returns the states for all steps: hidden
    (all, last), cell (all, last), attention context (all, last)[, coverage]."""
    cell = LSTMWithAttentionCell(
        encoder_output_dim=encoder_output_dim, encoder_outputs=encoder_outputs,
        encoder_lengths=encoder_lengths, decoder_input_dim=decoder_input_dim,
        decoder_state_dim=decoder_state_dim, name=scope, attention_type=attention_type,
        weighted_encoder_outputs=weighted_encoder_outputs, forget_bias=forget_bias,
        lstm_memory_optimization=lstm_memory_optimization,
        attention_memory_optimization=attention_memory_optimization, forward_only=forward_only)
    initial_states = [initial_decoder_hidden_state, initial_decoder_cell_state,
                      initial_attention_weighted_encoder_context]
    if attention_type == AttentionType.SoftCoverage:
        initial_states.append(cell.build_initial_coverage(model))
    _, result = cell.apply_over_sequence(model=model, inputs=decoder_inputs,
                                         seq_lengths=decoder_input_lengths,
                                         initial_states=initial_states,
                                         outputs_with_grads=outputs_with_grads)
    return result


def _layered_LSTM(model, input_blob, seq_lengths, initial_states, dim_in, dim_out, scope,
                  outputs_with_grads=(0,), return_params=False, memory_optimization=False,
                  forget_bias=0.0, forward_only=False, drop_states=False, create_lstm=None):
    """Stacked LSTMs as separate RecurrentNetwork ops, layer i scoped <scope>_layer_<i>."""
    params = dict(model=model, input_blob=input_blob, seq_lengths=seq_lengths,
                  initial_states=initial_states, dim_in=dim_in, dim_out=dim_out, scope=scope,
                  outputs_with_grads=outputs_with_grads, return_params=return_params,
                  memory_optimization=memory_optimization, forget_bias=forget_bias,
                  forward_only=forward_only, drop_states=drop_states)
    if not isinstance(dim_out, list):
        return create_lstm(**params)
    if len(dim_out) == 1:
        params["dim_out"] = dim_out[0]
        return create_lstm(**params)
    if return_params:
        raise Caffe2Error("return_params is not supported for layered_LSTM")
    for i, output_dim in enumerate(dim_out):
        params["dim_out"] = output_dim
        output, last_output, all_states, last_state = create_lstm(**params)
        params.update(input_blob=output, dim_in=output_dim, initial_states=(last_output, last_state),
                      scope=scope + "_layer_{}".format(i + 1))
    return output, last_output, all_states, last_state


layered_LSTM = functools.partial(_layered_LSTM, create_lstm=LSTM)
