"""caffe2.python.layers.batch_softmax_loss: BatchSoftmaxLoss (SoftmaxWithLoss).

input: Struct(label (class index; a probability row with label_prob), prediction
(logits)[, weight]). output: Struct(softmax, loss). label_smoothing_matrix (K x K):
class i's target is row i (label_prob then holds). The loss is the weighted mean
over the batch (divided by the weights' sum, or by the batch size with
average_by_batch_size), times scale. Not in the predict net.
"""
import numpy as np

from .. import core, schema
from ._loss_util import as_float32
from .layers import ModelLayer
from .tags import Tags


class BatchSoftmaxLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_softmax_loss", label_smoothing_matrix=None, label_prob=False,
                 scale=1.0, average_by_batch_size=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("prediction", schema.Scalar())),
                                       input_record), "BatchSoftmaxLoss needs label and prediction fields"
        self.label_prob = label_prob
        self.scale = scale
        self.average_by_batch_size = average_by_batch_size
        self.label_smoothing_matrix = None
        if label_smoothing_matrix is not None:
            self._add_smoothing_constants(label_smoothing_matrix)
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Struct(
            ("softmax", schema.Scalar(input_record.prediction.field_type(), self.get_next_blob_reference("softmax"))),
            ("loss", schema.Scalar(np.float32, self.get_next_blob_reference("loss"))))

    def _add_smoothing_constants(self, matrix):
        matrix = np.array(matrix).astype(np.float32)
        assert matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1], \
            "label_smoothing_matrix must be square, got shape %s" % (matrix.shape,)
        self.label_smoothing_matrix = self.model.add_global_constant(
            "%s_label_smoothing_matrix" % self.name, array=matrix, dtype=np.dtype(np.float32))
        self.label_dim = self.model.add_global_constant("%s_label_dim" % self.name, array=matrix.shape[0],
                                                        dtype=np.dtype(np.int64))
        self.label_prob = True         # the smoothed targets are distributions

    def _smoothed_label(self, net):
        label = self.input_record.label()
        if self.input_record.label.field_type().base != np.int64:
            label = net.Cast([label], [net.NextScopedBlob("int64_label")], to=core.DataType.INT64)
        one_hot = net.OneHot([label, self.label_dim], [net.NextScopedBlob("one_hot_label")])
        return net.MatMul([one_hot, self.label_smoothing_matrix], net.NextScopedBlob("smoothed_label"))

    def add_ops(self, net):
        record = self.input_record
        if self.label_smoothing_matrix is not None:
            label = self._smoothed_label(net)
        elif self.label_prob:
            label = as_float32(net, record.label, "float_label")
        elif record.label.field_type().base != np.int32:
            label = net.Cast(record.label(), net.NextScopedBlob("int32_label"), to=core.DataType.INT32)
        else:
            label = record.label()
        inputs = [record.prediction(), label]
        weight = None
        if "weight" in record:
            weight = as_float32(net, record.weight, "weight_float32")
            weight = net.FlattenToVec(weight, net.NextScopedBlob("weight_vector"))
            inputs.append(weight)
        softmax, loss = self.output_schema.softmax(), self.output_schema.loss()
        if weight is not None and self.average_by_batch_size:
            # the op divides by the weights' sum: rescale to a division by the batch size
            weighted_mean = net.NextScopedBlob("weight_normalized_loss")
            net.SoftmaxWithLoss(inputs, [softmax, weighted_mean], label_prob=int(self.label_prob), scale=self.scale)
            mean_weight = net.ReduceFrontMean(weight, net.NextScopedBlob("mean_weight"), num_reduce_dim=1)
            net.Mul([weighted_mean, mean_weight], loss)
        else:
            net.SoftmaxWithLoss(inputs, [softmax, loss], label_prob=int(self.label_prob), scale=self.scale)
