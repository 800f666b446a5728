"""caffe2.python.layers.fc: FC, a fully connected layer (the FC operator).

input: a Scalar of shape (..., D) per example; the dims from `axis` - 1 on are
flattened into the D inputs. Weights w (output_dims x D) and bias b start
uniform in +-sqrt(numerator / D) unless weight_init / bias_init say otherwise.
"""
import math

import numpy as np

from .. import schema
from .layers import ModelLayer
from .sampling_trainable_mixin import SamplingTrainableMixin


class FC(SamplingTrainableMixin, ModelLayer):

    def __init__(self, model, input_record, output_dims, weight_init=None, bias_init=None, weight_optim=None,
                 bias_optim=None, name="fc", weight_reg=None, bias_reg=None, axis=1, transposed=False,
                 uniform_weight_init_scale_numerator=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "FC expects a Scalar input, got %r" % (input_record,)
        shape = input_record.field_types()[0].shape
        assert len(shape) > 0, "FC needs the input's inner shape (its field type), got %r" % (input_record,)
        assert axis >= 1, "axis %d should be >= 1" % axis
        self.axis = axis
        self.transposed = transposed
        input_dims = int(np.prod(shape[axis - 1:]))
        assert input_dims > 0, "FC: the input has no features (shape %s)" % (shape,)
        scale = math.sqrt(uniform_weight_init_scale_numerator / input_dims)
        weight_init = weight_init or ("UniformFill", {"min": -scale, "max": scale})
        bias_init = bias_init or ("UniformFill", {"min": -scale, "max": scale})
        weight_shape = [input_dims, output_dims] if transposed else [output_dims, input_dims]
        self.w = self.create_param(param_name="w", shape=weight_shape, initializer=weight_init,
                                   optimizer=weight_optim, regularizer=weight_reg)
        self.b = self.create_param(param_name="b", shape=[output_dims], initializer=bias_init,
                                   optimizer=bias_optim, regularizer=bias_reg)
        output_shape = list(shape[:axis - 1]) + [output_dims]
        self.output_schema = schema.Scalar((np.float32, output_shape), self.get_next_blob_reference("output"))

    @property
    def param_blobs(self):
        return [self.w, self.b]

    def _add_ops(self, net, params):
        op = net.FCTransposed if self.transposed else net.FC
        op(self.input_record.field_blobs() + list(params), self.output_schema.field_blobs(), axis=self.axis,
           **self.kwargs)
