"""caffe2.python.layers.fc_without_bias: FCWithoutBias, input x w (MatMul) with
w of shape (input dims, output_dims)."""
import math

import numpy as np

from .. import schema
from .layers import ModelLayer
from .sampling_trainable_mixin import SamplingTrainableMixin


class FCWithoutBias(SamplingTrainableMixin, ModelLayer):

    def __init__(self, model, input_record, output_dims, weight_init=None, weight_optim=None,
                 name="fc_without_bias", uniform_weight_init_scale_numerator=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "FCWithoutBias expects a Scalar input"
        shape = input_record.field_types()[0].shape
        assert len(shape) > 0, "FCWithoutBias needs the input's inner shape"
        input_dims = shape[0]
        assert input_dims > 0
        scale = math.sqrt(uniform_weight_init_scale_numerator / input_dims)
        weight_init = weight_init or ("UniformFill", {"min": -scale, "max": scale})
        self.w = self.create_param(param_name="w", shape=[input_dims, output_dims], initializer=weight_init,
                                   optimizer=weight_optim)
        self.output_schema = schema.Scalar((np.float32, (output_dims,)), self.get_next_blob_reference("output"))

    @property
    def param_blobs(self):
        return [self.w]

    def _add_ops(self, net, params):
        net.MatMul(self.input_record.field_blobs() + list(params), self.output_schema.field_blobs(), **self.kwargs)
