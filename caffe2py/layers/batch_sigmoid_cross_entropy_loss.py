"""caffe2.python.layers.batch_sigmoid_cross_entropy_loss: BatchSigmoidCrossEntropyLoss,
the batch mean of the sigmoid cross entropy of prediction (logits) and label, both
of one shape (averaged over the inner dims first)."""
import numpy as np

from .. import schema
from .layers import ModelLayer
from .tags import Tags


class BatchSigmoidCrossEntropyLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_sigmoid_cross_entropy_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("prediction", schema.Scalar())),
                                       input_record), "BatchSigmoidCrossEntropyLoss needs label and prediction"
        assert input_record.prediction.field_type().shape == input_record.label.field_type().shape, \
            "label and prediction must have the same shape"
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        xent = net.SigmoidCrossEntropyWithLogits([self.input_record.prediction(), self.input_record.label()],
                                                 net.NextScopedBlob("cross_entropy"))
        net.AveragedLoss(xent, self.output_schema.field_blobs())
