"""Caffe2's caffe2.python.attention: the attention step of rnn_cell.AttentionCell.

Shapes (T_enc encoder steps, N batch, E = encoder_output_dim): the encoder
outputs transposed are [N, E, T_enc]; weighted encoder outputs [T_enc, N, E];
the decoder state at step t [1, N, D]. Each function returns the attention
context [1, N, E], the attention weights [N, T_enc, 1] and the blobs that may
be recomputed on the backward pass.

- Regular (Bahdanau): logits_j = v . tanh(W_enc s_j + W_dec h_t)
- Recurrent: the previous context is added inside the tanh, through W_ctx
- Dot: logits_j = s_j . (W_dec h_t) (W_dec only when D != E)
- SoftCoverage: Regular plus the accumulated attention weights (coverage)
  scaled by coverage weights inside the tanh; also returns the new coverage.
Encoder lengths, when given, mask the logits past each sequence's end.
"""
from . import brew


class AttentionType:
    Regular, Recurrent, Dot, SoftCoverage = tuple(range(4))


def s(scope, name):
    return "{}/{}".format(str(scope), str(name))


def _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim,
                           attention_weights_3d, scope):
    # [N, E, T_enc] x [N, T_enc, 1] -> [N, E, 1] -> [1, N, E]
    context = model.net.BatchMatMul([encoder_outputs_transposed, attention_weights_3d],
                                    s(scope, "attention_weighted_encoder_context"))
    context, _ = model.net.Reshape(
        context, [context, s(scope, "attention_weighted_encoder_context_old_shape")],
        shape=[1, -1, encoder_output_dim])
    return context


def _calc_attention_weights(model, attention_logits_transposed, scope, encoder_lengths=None):
    if encoder_lengths is not None:
        attention_logits_transposed = model.net.SequenceMask(
            [attention_logits_transposed, encoder_lengths], ["masked_attention_logits"], mode="sequence")
    # softmax over the encoder steps: [N, T_enc, 1]
    return brew.softmax(model, attention_logits_transposed, s(scope, "attention_weights_3d"),
                        engine="CUDNN", axis=1)


def _calc_attention_logits_from_sum_match(model, decoder_hidden_encoder_outputs_sum,
                                          encoder_output_dim, scope):
    summed = model.net.Tanh(decoder_hidden_encoder_outputs_sum, decoder_hidden_encoder_outputs_sum)
    logits = brew.fc(model, summed, s(scope, "attention_logits"), dim_in=encoder_output_dim,
                     dim_out=1, axis=2, freeze_bias=True)           # [T_enc, N, 1]
    return brew.transpose(model, logits, s(scope, "attention_logits_transposed"), axes=[1, 0, 2])


def _apply_fc_weight_for_sum_match(model, input, dim_in, dim_out, scope, name):  # noqa: A002
    output = brew.fc(model, input, s(scope, name), dim_in=dim_in, dim_out=dim_out, axis=2)
    return model.net.Squeeze(output, output, dims=[0])               # [N, dim_out]


def apply_recurrent_attention(model, encoder_output_dim, encoder_outputs_transposed,
                              weighted_encoder_outputs, decoder_hidden_state_t,
                              decoder_hidden_state_dim, attention_weighted_encoder_context_t_prev,
                              scope, encoder_lengths=None):
    weighted_prev_context = _apply_fc_weight_for_sum_match(
        model, attention_weighted_encoder_context_t_prev, encoder_output_dim, encoder_output_dim,
        scope, "weighted_prev_attention_context")
    weighted_decoder_state = _apply_fc_weight_for_sum_match(
        model, decoder_hidden_state_t, decoder_hidden_state_dim, encoder_output_dim, scope,
        "weighted_decoder_hidden_state")
    partial = model.net.Add([weighted_prev_context, weighted_decoder_state],
                            s(scope, "decoder_hidden_encoder_outputs_sum_tmp"))
    summed = model.net.Add([weighted_encoder_outputs, partial],
                           s(scope, "decoder_hidden_encoder_outputs_sum"), broadcast=1)
    logits = _calc_attention_logits_from_sum_match(model, summed, encoder_output_dim, scope)
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    return context, weights, [summed]


def apply_regular_attention(model, encoder_output_dim, encoder_outputs_transposed,
                            weighted_encoder_outputs, decoder_hidden_state_t, decoder_hidden_state_dim,
                            scope, encoder_lengths=None):
    weighted_decoder_state = _apply_fc_weight_for_sum_match(
        model, decoder_hidden_state_t, decoder_hidden_state_dim, encoder_output_dim, scope,
        "weighted_decoder_hidden_state")
    summed = model.net.Add([weighted_encoder_outputs, weighted_decoder_state],
                           s(scope, "decoder_hidden_encoder_outputs_sum"), broadcast=1, use_grad_hack=1)
    logits = _calc_attention_logits_from_sum_match(model, summed, encoder_output_dim, scope)
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    return context, weights, [summed]


def apply_dot_attention(model, encoder_output_dim, encoder_outputs_transposed, decoder_hidden_state_t,
                        decoder_hidden_state_dim, scope, encoder_lengths=None):
    if decoder_hidden_state_dim != encoder_output_dim:
        weighted = brew.fc(model, decoder_hidden_state_t, s(scope, "weighted_decoder_hidden_state"),
                           dim_in=decoder_hidden_state_dim, dim_out=encoder_output_dim, axis=2)
    else:
        weighted = decoder_hidden_state_t
    squeezed = model.net.Squeeze(weighted, s(scope, "squeezed_weighted_decoder_hidden_state"), dims=[0])
    column = model.net.ExpandDims(squeezed, squeezed, dims=[2])       # [N, E, 1]
    logits = model.net.BatchMatMul([encoder_outputs_transposed, column], s(scope, "attention_logits"),
                                   trans_a=1)                          # [N, T_enc, 1]
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    return context, weights, []


def apply_soft_coverage_attention(model, encoder_output_dim, encoder_outputs_transposed,
                                  weighted_encoder_outputs, decoder_hidden_state_t,
                                  decoder_hidden_state_dim, scope, encoder_lengths, coverage_t_prev,
                                  coverage_weights):
    weighted_decoder_state = _apply_fc_weight_for_sum_match(
        model, decoder_hidden_state_t, decoder_hidden_state_dim, encoder_output_dim, scope,
        "weighted_decoder_hidden_state")
    summed = model.net.Add([weighted_encoder_outputs, weighted_decoder_state],
                           s(scope, "decoder_hidden_encoder_outputs_sum"), broadcast=1)
    coverage_2d = model.net.Squeeze(coverage_t_prev, s(scope, "coverage_t_prev_2d"), dims=[0])
    coverage_transposed = brew.transpose(model, coverage_2d, s(scope, "coverage_t_prev_transposed"))
    scaled = model.net.Mul([coverage_weights, coverage_transposed], s(scope, "scaled_coverage_weights"),
                           broadcast=1, axis=0)
    summed = model.net.Add([summed, scaled], summed)
    logits = _calc_attention_logits_from_sum_match(model, summed, encoder_output_dim, scope)
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    weights_2d = model.net.Squeeze(weights, s(scope, "attention_weights_2d"), dims=[2])
    coverage_t = model.net.Add([coverage_t_prev, weights_2d], s(scope, "coverage_t"), broadcast=1)
    return context, weights, [summed], coverage_t
