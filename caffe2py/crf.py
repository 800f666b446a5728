"""Caffe2's caffe2.python.crf: a linear-chain CRF loss built from ops.

CRFWithLoss(model, num_classes, transitions_blob=None) keeps a (C + 2) x (C + 2)
transition matrix (C tags plus a begin and an end tag; a model parameter, filled
uniformly in [-1, 1] when no blob is given). For a sentence of T words with
unary scores P (T x C) and labels y,

    loss = log sum over all tag paths exp(score(path)) - score(y)

where a path is padded with the begin tag in front and the end tag behind, and
score(path) adds the unary score of each tag and the transition score of each
consecutive pair. The partition term runs the forward algorithm as a
RecurrentNetwork op (its step: logsumexp over the previous tag of
prev + input + transitions), so the loss has gradients for P and the transitions.

As in Caffe2, one sentence at a time (batch size 1).
"""
import numpy as np

from . import core, recurrent
from .cnn import CNNModelHelper

# Score of the impossible entries: the begin/end columns of real words, and the
# real tags of the begin/end rows.
_LOW_SCORE = -1000.0


class CRFWithLoss:
    def __init__(self, model, num_classes, transitions_blob=None):
        self.model = model
        self.num_classes = num_classes
        self.num_classes_padded = num_classes + 2
        if not transitions_blob:
            transitions_blob = model.param_init_net.UniformFill(
                [], [core.ScopedBlobReference("crf_transitions")],
                shape=[self.num_classes_padded, self.num_classes_padded], min=-1.0, max=1.0)
        self.transitions = transitions_blob
        model.params.append(self.transitions)

    # -- the loss
    def crf_loss(self, predictions, labels, seq_lengths=None):
        """Blob of the loss (a scalar) for predictions (T x C) and labels (T,)."""
        net = self.model.net
        # The transitions are a shared parameter an optimizer may update while
        # this net runs; read them once.
        transitions = net.Copy(self.transitions, core.ScopedBlobReference("transitions_snapshot"))
        unary = self._label_scores_sum(predictions, labels)
        padded_predictions = self._pad_predictions(predictions)
        padded_labels = self._pad_labels(labels)
        binary = self._label_transitions_sum(padded_labels, transitions)
        path_score = net.Add([binary, unary], core.ScopedBlobReference("path_total"))

        first_row = self.model.param_init_net.ConstantFill([], shape=[1], value=0)
        initial_state = net.Gather([padded_predictions, first_row],
                                   core.ScopedBlobReference("rnn_initial"), dense_gradient=True)
        later_rows, _ = net.RemovePadding([padded_predictions], padding_width=1,
                                          end_padding_width=0, outputs=2)
        steps = net.ExpandDims([later_rows], core.ScopedBlobReference("rnn_input_data"), dims=[1])
        # The recurrent op gets its own copy of the matrix (Caffe2 does the same to keep
        # RecurrentNetworkGradient from accumulating into the snapshot).
        transitions_copy = net.Copy(transitions, core.ScopedBlobReference("transitions_copy"))
        all_paths = self._log_partition(steps, initial_state, transitions_copy)
        return net.Sub([all_paths, path_score], core.ScopedBlobReference("crf_loss"))

    def _pad_predictions(self, predictions):
        """(T + 2) x (C + 2) scores: a begin row on top, an end row below, and two
        impossible columns for the begin and end tags on every word."""
        init, net = self.model.param_init_net, self.model.net
        c = self.num_classes
        begin_row = np.array([[_LOW_SCORE] * c + [0.0, _LOW_SCORE]], dtype=np.float32)
        end_row = np.array([[_LOW_SCORE] * c + [_LOW_SCORE, 0.0]], dtype=np.float32)
        begin_row = init.GivenTensorFill([], "b_scores", shape=[1, c + 2], values=begin_row)
        end_row = init.GivenTensorFill([], "e_scores", shape=[1, c + 2], values=end_row)

        first = init.ConstantFill([], shape=[1], value=0)
        num_words = net.Cast(net.Gather([net.Shape([predictions]), first]), to="int32")
        one_per_word = net.LengthsRangeFill(num_words)
        column = net.ExpandDims(net.ConstantFill([one_per_word], value=_LOW_SCORE), dims=[1])
        widened, _ = net.Concat([predictions, column, column], outputs=2, axis=1)
        padded, _ = net.Concat([begin_row, widened, end_row], outputs=2, axis=0)
        return padded

    def _pad_labels(self, labels):
        init, net = self.model.param_init_net, self.model.net
        begin = init.ConstantFill([], shape=[1], value=self.num_classes)
        end = init.ConstantFill([], shape=[1], value=self.num_classes + 1)
        padded, _ = net.Concat([begin, net.Cast([labels], to="int64"), end], axis=0, outputs=2)
        return padded

    def _label_transitions_sum(self, padded_labels, transitions, seq_lengths=None):
        """Sum of transitions[y[t], y[t + 1]] over the padded label path: the matrix
        is flattened and read at y[t] * (C + 2) + y[t + 1]."""
        net = self.model.net
        to_tags, _ = net.RemovePadding([padded_labels], outputs=2, padding_width=1, end_padding_width=0)
        from_tags, _ = net.RemovePadding([padded_labels], outputs=2, padding_width=0, end_padding_width=1)
        row_width = net.ConstantFill([from_tags], value=self.num_classes_padded)
        flat_ids = net.Add([net.Mul([from_tags, row_width]), to_tags])
        entries = net.Gather([net.FlattenToVec([transitions]), flat_ids], dense_gradient=True)
        return self.model.ReduceFrontSum(entries)

    def _label_scores_sum(self, predictions, labels):
        """Sum of predictions[t, y[t]]: a one-hot mask of the labels dotted with the scores."""
        init, net = self.model.param_init_net, self.model.net
        num_tags = init.ConstantFill([], shape=[1], value=self.num_classes)
        one_hot = net.OneHot([net.Cast([labels], to="int64"), num_tags])
        dots = net.DotProduct([net.FlattenToVec(one_hot), net.FlattenToVec(predictions)])
        return net.ReduceFrontSum([dots])

    def _log_partition(self, steps, initial_state, transitions, seq_lengths=None):
        """log sum exp of the forward algorithm's last state: a scalar blob."""
        init, net = self.model.param_init_net, self.model.net
        last = self.build_crf_net(steps, initial_state, transitions)
        last, _ = net.Reshape([last], outputs=2, shape=(self.num_classes_padded,))
        one_segment = init.ConstantFill([], value=0, shape=[self.num_classes_padded],
                                        dtype=core.DataType.INT32)
        total = net.SortedSegmentRangeLogSumExp([last, one_segment])
        total, _ = net.Reshape(total, outputs=2, shape=())
        return total

    # -- the forward algorithm as a recurrent net
    def build_crf_net(self, input_blob, initial_state, transitions):
        """Append the RecurrentNetwork op of the forward algorithm to the model's net.

        input_blob: T x 1 x (C + 2) scores (batch size 1); initial_state:
        1 x (C + 2); returns the blob of the last step's state (1 x 1 x (C + 2)).
        Step t: state[j] = logsumexp_i(prev[i] + input[j] + transitions[i, j]).
        """
        scope = "crf_net"
        n = self.num_classes_padded

        def scoped(name):
            # The step net's blobs are named by hand: the recurrent op maps them
            # between the step net and the outer net by these exact names.
            return "%s/%s" % (scope, name)

        step = CNNModelHelper(name="crf_step", param_model=self.model)
        input_t, prev_state, _ = step.net.AddExternalInputs("input_t", "cell_t_prev", transitions)
        one_segment = step.param_init_net.ConstantFill(
            [], [scoped("zero_segment_id")], value=0, shape=[n], dtype=core.DataType.INT32)
        step.param_init_net.AddExternalOutput(one_segment)

        prev_column = step.net.Transpose(prev_state, [scoped("prev_transpose")], axes=(0, 2, 1))
        prev_tiled = step.net.Tile(prev_column, [scoped("prev_tiled")], tiles=n, axis=2)
        input_tiled = step.net.Tile(input_t, [scoped("input_t_tiled")], tiles=n, axis=1)
        summed = step.net.Add([prev_tiled, input_tiled], [scoped("input_with_prev")])
        scores = step.net.Add([summed, transitions], [scoped("prev_with_transitions")],
                              broadcast=1, use_grad_hack=1)
        scores, _ = step.net.Reshape(
            scores, [scoped("all_with_transitions_reshaped"), scoped("all_with_transitions_orig")],
            shape=(n, n))
        state = step.net.SortedSegmentRangeLogSumExp([scores, one_segment], [scoped("cell_t")])
        step.net.AddExternalOutputs(state)

        _, last = recurrent.recurrent_net(
            net=self.model.net, cell_net=step.net,
            inputs=[(input_t, input_blob)],
            initial_cell_inputs=[(prev_state, initial_state)],
            links={prev_state: state},
            scope=scope, outputs_with_grads=(1,))
        return last

    # -- decoding
    def update_predictions(self, classes):
        """A blob of the predictions (T x C) with, on each word, the scores of its best
        tag and of its tag on the Viterbi path swapped, so an argmax reads the path."""
        padded = self._pad_predictions(classes)
        return self.model.net.Python(_swap_in_viterbi_path)(
            [padded, self.transitions], core.ScopedBlobReference("post_crf_classes"))


def viterbi_path(scores, transitions):
    """The highest-scoring tag sequence for scores (T x K) and transitions (K x K)."""
    scores = np.asarray(scores, dtype=np.float64)
    best = scores[0].copy()
    back = np.zeros(scores.shape, dtype=np.int64)
    for t in range(1, len(scores)):
        candidates = best[:, None] + transitions
        back[t] = np.argmax(candidates, axis=0)
        best = scores[t] + np.max(candidates, axis=0)
    path = [int(np.argmax(best))]
    for t in range(len(scores) - 1, 0, -1):
        path.append(int(back[t][path[-1]]))
    return path[::-1]


def _swap_in_viterbi_path(inputs, outputs):
    scores = np.array(inputs[0].data, dtype=np.float64)
    path = viterbi_path(scores, np.asarray(inputs[1].data))
    for t, tag in enumerate(path):
        best = int(np.argmax(scores[t]))
        scores[t, tag], scores[t, best] = scores[t, best], scores[t, tag]
    # drop the begin/end rows and columns
    result = scores[1:-1, :-2]
    outputs[0].reshape(result.shape)
    outputs[0].data[...] = result
