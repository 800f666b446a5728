"""caffe2.python.layers.batch_huber_loss: BatchHuberLoss, the batch mean of
(weight *) huber(|label - prediction|): 0.5 min(e, delta)^2 + delta max(e - delta, 0).
prediction is (N, 1) per batch (squeezed), label (N,)."""
import numpy as np

from .. import core, schema
from ._loss_util import example_weights
from .layers import ModelLayer
from .tags import Tags


class BatchHuberLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_huber_loss", delta=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert delta > 0, "delta must be > 0, got %s" % delta
        self._delta = delta
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("prediction", schema.Scalar())),
                                       input_record), "BatchHuberLoss needs label and prediction fields"
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def add_ops(self, net):
        record = self.input_record
        prediction = net.Squeeze(record.prediction(), net.NextScopedBlob("squeezed_prediction"), dims=[1])
        label = record.label()
        if record.label.field_type().base != record.prediction.field_type().base:
            label = net.Cast(label, net.NextScopedBlob("cast_label"),
                             to=schema.data_type_for_dtype(record.prediction.field_type()))
        delta = net.ConstantFill(label, net.NextScopedBlob("delta"), value=self._delta, dtype=core.DataType.FLOAT)
        label = net.StopGradient(label, net.NextScopedBlob("stopped_label"))
        delta = net.StopGradient(delta, net.NextScopedBlob("stopped_delta"))
        error = net.L1Distance([label, prediction], net.NextScopedBlob("abs_error"))
        clipped = net.Min([error, delta], net.NextScopedBlob("min_error_delta"))
        quadratic = net.Scale(net.Sqr(clipped, net.NextScopedBlob("squared_error")),
                              net.NextScopedBlob("huber_quadratic_term"), scale=0.5)
        linear = net.Mul([net.Sub([error, clipped], net.NextScopedBlob("excess_error")), delta],
                         net.NextScopedBlob("huber_linear_term"))
        huber = net.Add([quadratic, linear], net.NextScopedBlob("huber_dist"))
        weight = example_weights(net, record)
        if weight is not None:
            huber = net.Mul([huber, weight], net.NextScopedBlob("weighted_huber_distance"))
        net.AveragedLoss(huber, self.output_schema.field_blobs())
