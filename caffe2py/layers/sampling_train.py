"""caffe2.python.layers.sampling_train: SamplingTrain, train a layer on sampled rows.

input_record: Struct(input, indices, sampling_prob). The wrapped layer (e.g. "FC",
a SamplingTrainableMixin) is built from `input` but not added to the model: in
training its parameters' rows `indices` are gathered and it computes only those
outputs, minus log(sampling_prob) when subtract_log_prob (the sampled-softmax
correction); prediction uses the full parameters.
"""
from .. import schema
from . import layers as layer_registry
from .layers import ModelLayer
from .sampling_trainable_mixin import SamplingTrainableMixin


class SamplingTrain(ModelLayer):

    def __init__(self, model, input_record, prediction_layer, output_dims, subtract_log_prob=True,
                 name="sampling_train", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        layer_class = layer_registry.get_layer_class(prediction_layer)
        assert issubclass(layer_class, SamplingTrainableMixin), \
            "%s cannot be sampled (it is not a SamplingTrainableMixin)" % prediction_layer
        assert "indices" in input_record and isinstance(input_record.indices, schema.Scalar), \
            "SamplingTrain needs a Scalar `indices` field"
        assert "sampling_prob" in input_record and isinstance(input_record.sampling_prob, schema.Scalar), \
            "SamplingTrain needs a Scalar `sampling_prob` field"
        self._prediction_layer = layer_class(model, input_record.input, output_dims, **kwargs)
        self._prediction_layer.train_param_blobs = [
            model.net.NextBlob(str(blob) + "_sampled") for blob in self._prediction_layer.param_blobs]
        self.params = self._prediction_layer.params
        self.subtract_log_prob = subtract_log_prob
        self.output_schema = self._prediction_layer.output_schema

    def add_ops(self, net):
        self._prediction_layer.add_ops(net)

    def add_train_ops(self, net):
        for full, sampled in zip(self._prediction_layer.param_blobs, self._prediction_layer.train_param_blobs):
            net.Gather([full, self.input_record.indices()], sampled)
        self._prediction_layer.add_train_ops(net)
        if not self.subtract_log_prob:
            return
        log_q = net.Log(self.input_record.sampling_prob(), net.NextScopedBlob("log_q"))
        net.Sub([self.output_schema(), log_q], self.output_schema(), broadcast=1)
