"""caffe2.python.layers.batch_softmax_loss: BatchSoftmaxLoss (SoftmaxWithLoss).

input: Struct(label (class index; a probability row with label_prob), prediction
(logits)[, weight]). output: Struct(softmax, loss). Not in the predict net.
"""
import numpy as np

from .. import core, schema
from ._loss_util import as_float32
from .layers import ModelLayer
from .tags import Tags


class BatchSoftmaxLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_softmax_loss", label_prob=False, scale=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("prediction", schema.Scalar())),
                                       input_record), "BatchSoftmaxLoss needs label and prediction fields"
        self.label_prob = label_prob
        self.scale = scale
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Struct(
            ("softmax", schema.Scalar(input_record.prediction.field_type(), self.get_next_blob_reference("softmax"))),
            ("loss", schema.Scalar(np.float32, self.get_next_blob_reference("loss"))))

    def add_ops(self, net):
        label = self.input_record.label()
        if self.label_prob:
            label = as_float32(net, self.input_record.label, "float_label")
        elif self.input_record.label.field_type().base != np.int32:
            label = net.Cast(label, net.NextScopedBlob("int32_label"), to=core.DataType.INT32)
        inputs = [self.input_record.prediction(), label]
        if "weight" in self.input_record:
            weight = as_float32(net, self.input_record.weight, "weight_float32")
            inputs.append(net.FlattenToVec(weight, net.NextScopedBlob("weight_vector")))
        net.SoftmaxWithLoss(inputs, self.output_schema.field_blobs(), label_prob=int(self.label_prob),
                            scale=self.scale)
