"""caffe2.python.layers.batch_mse_loss: BatchMSELoss, the batch mean of
0.5 * ||prediction - label||^2 (SquaredL2Distance, AveragedLoss)."""
import numpy as np

from .. import schema
from .layers import ModelLayer
from .tags import Tags


class BatchMSELoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_mse_loss", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("prediction", schema.Scalar())),
                                       input_record), "BatchMSELoss needs label and prediction fields"
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        prediction = self.input_record.prediction
        label = self.input_record.label()
        if self.input_record.label.field_type().base != prediction.field_type().base:
            label = net.Cast(label, net.NextScopedBlob("cast_label"),
                             to=schema.data_type_for_dtype(prediction.field_type()))
        if len(self.input_record.label.field_type().shape) == 0 and prediction.field_type().shape == (1,):
            label = net.ExpandDims(label, net.NextScopedBlob("expanded_label"), dims=[1])
        label = net.StopGradient(label, net.NextScopedBlob("stopped_label"))
        l2 = net.SquaredL2Distance([label, prediction()], net.NextScopedBlob("l2"))
        net.AveragedLoss(l2, self.output_schema.field_blobs())
