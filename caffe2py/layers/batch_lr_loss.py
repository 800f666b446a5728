"""caffe2.python.layers.batch_lr_loss: BatchLRLoss, the logistic-regression loss.

input: Struct(label, logit[, weight]). loss = mean (or sum, average_loss=False)
over the batch of weight * sigmoid cross entropy(logit, label), labels mapped to
pos_label_target / neg_label_target when those differ from 1 / 0. Not in the
predict net.
"""
import numpy as np

from .. import schema
from ._loss_util import as_float32, example_weights, label_like
from .layers import ModelLayer
from .tags import Tags


class BatchLRLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_lr_loss", average_loss=True, pos_label_target=1.0,
                 neg_label_target=0.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("logit", schema.Scalar())),
                                       input_record), "BatchLRLoss needs label and logit fields"
        self.average_loss = average_loss
        self.pos_label_target = pos_label_target
        self.neg_label_target = neg_label_target
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        record = self.input_record
        label = as_float32(net, record.label, "label_float32")
        label = label_like(net, label, record.label, record.logit)
        if self.pos_label_target != 1.0 or self.neg_label_target != 0.0:
            label = net.StumpFunc(label, net.NextScopedBlob("smoothed_label"), threshold=0.5,
                                  low_value=self.neg_label_target, high_value=self.pos_label_target)
        label = net.StopGradient(label, net.NextScopedBlob("label_stop_gradient"))
        xent = net.SigmoidCrossEntropyWithLogits([record.logit(), label], net.NextScopedBlob("cross_entropy"))
        weight = example_weights(net, record)
        if weight is not None:
            xent = net.Mul([xent, weight], net.NextScopedBlob("weighted_cross_entropy"))
        if self.average_loss:
            net.AveragedLoss(xent, self.output_schema.field_blobs())
        else:
            net.ReduceFrontSum(xent, self.output_schema.field_blobs())
