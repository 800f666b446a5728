"""caffe2.python.layers.batch_distill_lr_loss: BatchDistillLRLoss, logistic loss
against the true label and a teacher's label: (1 - teacher_weight) * mean xent(logit,
label) + teacher_weight * mean xent(logit, teacher_label), each example weighted by
`weight` when given."""
import numpy as np

from .. import schema
from ._loss_util import as_float32, example_weights, label_like
from .layers import ModelLayer
from .tags import Tags


class BatchDistillLRLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_distill_lr_loss", teacher_weight=0.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert 0 <= teacher_weight <= 1, "teacher_weight must be in [0, 1], got %s" % teacher_weight
        assert schema.is_schema_subset(schema.Struct(("teacher_label", schema.Scalar()), ("label", schema.Scalar()),
                                                     ("logit", schema.Scalar())), input_record), \
            "BatchDistillLRLoss needs teacher_label, label and logit fields"
        self._teacher_weight = teacher_weight
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def _xent(self, net, field, name):
        label = label_like(net, as_float32(net, field, name + "_float32"), field, self.input_record.logit)
        label = net.StopGradient(label, net.NextScopedBlob(name + "_stop_gradient"))
        return net.SigmoidCrossEntropyWithLogits([self.input_record.logit(), label], net.NextScopedBlob(name + "_xent"))

    def add_ops(self, net):
        true_xent = net.Scale(self._xent(net, self.input_record.label, "label"), net.NextScopedBlob("scaled_true_xent"),
                              scale=1.0 - self._teacher_weight)
        teacher_xent = net.Scale(self._xent(net, self.input_record.teacher_label, "teacher_label"),
                                 net.NextScopedBlob("scaled_teacher_xent"), scale=self._teacher_weight)
        weight = example_weights(net, self.input_record)
        if weight is not None:
            true_xent = net.Mul([true_xent, weight], net.NextScopedBlob("weighted_true_xent"))
            teacher_xent = net.Mul([teacher_xent, weight], net.NextScopedBlob("weighted_teacher_xent"))
        true_loss = net.AveragedLoss(true_xent, net.NextScopedBlob("true_loss"))
        teacher_loss = net.AveragedLoss(teacher_xent, net.NextScopedBlob("teacher_loss"))
        net.Add([true_loss, teacher_loss], self.output_schema.field_blobs())
