"""caffe2.python.layers.fc: FC, a fully connected layer (the FC operator).

input: a Scalar of shape (..., D) per example; the dims from `axis` - 1 on are
flattened into the D inputs. Weights w (output_dims x D) and bias b start
uniform in +-sqrt(numerator / D) unless weight_init / bias_init say otherwise.
max_fc_size caps the weights of one FC op: the outputs are split into FCs of at
most max_fc_size // D outputs each (parameters w_sub_<i>, b_sub_<i>), concatenated.
"""
import math

import numpy as np

from .. import schema
from .layers import ModelLayer
from .sampling_trainable_mixin import SamplingTrainableMixin


class FC(SamplingTrainableMixin, ModelLayer):

    def __init__(self, model, input_record, output_dims, weight_init=None, bias_init=None, weight_optim=None,
                 bias_optim=None, name="fc", weight_reg=None, bias_reg=None, max_fc_size=None, axis=1,
                 transposed=False, uniform_weight_init_scale_numerator=1.0, **kwargs):
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
        self.output_dim_vec = self.calculate_fc_output_dims(max_fc_size, input_dims, output_dims)
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            weight_shape = [input_dims, output_dims] if transposed else [output_dims, input_dims]
            self.w = self.create_param(param_name="w", shape=weight_shape, initializer=weight_init,
                                       optimizer=weight_optim, regularizer=weight_reg)
            self.b = self.create_param(param_name="b", shape=[output_dims], initializer=bias_init,
                                       optimizer=bias_optim, regularizer=bias_reg)
        else:
            assert not transposed, "FC: max_fc_size splits do not support transposed weights"
            self.w_vec = [self.create_param(param_name="w_sub_%d" % i, shape=[dims, input_dims],
                                            initializer=weight_init, optimizer=weight_optim, regularizer=weight_reg)
                          for i, dims in enumerate(self.output_dim_vec)]
            self.b_vec = [self.create_param(param_name="b_sub_%d" % i, shape=[dims], initializer=bias_init,
                                            optimizer=bias_optim, regularizer=bias_reg)
                          for i, dims in enumerate(self.output_dim_vec)]
        output_shape = list(shape[:axis - 1]) + [output_dims]
        self.output_schema = schema.Scalar((np.float32, output_shape), self.get_next_blob_reference("output"))

    @staticmethod
    def calculate_fc_output_dims(max_fc_size, input_size, output_size):
        """The output sizes of the FC ops holding at most max_fc_size weights each
        (None: one FC)."""
        if not max_fc_size or max_fc_size < 0:
            return None
        assert max_fc_size >= input_size, \
            "FC splits along the outputs, so max_fc_size (%d) must be >= the input size (%d)" % (
                max_fc_size, input_size)
        per_fc = max_fc_size // input_size
        count = (output_size - 1) // per_fc + 1
        sizes = [per_fc] * (count - 1)
        return sizes + [output_size - sum(sizes)]

    @property
    def param_blobs(self):
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            return [self.w, self.b]
        return self.w_vec + self.b_vec

    def _add_ops(self, net, params):
        params = list(params)
        if self.output_dim_vec is None or len(self.output_dim_vec) == 1:
            op = net.FCTransposed if self.transposed else net.FC
            op(self.input_record.field_blobs() + params, self.output_schema.field_blobs(), axis=self.axis,
               **self.kwargs)
            return
        half = len(params) // 2
        parts = [net.FC(self.input_record.field_blobs() + [w, b], [net.NextScopedBlob("output_sub_%d" % i)],
                        axis=self.axis, **self.kwargs)
                 for i, (w, b) in enumerate(zip(params[:half], params[half:]))]
        output = self.output_schema.field_blobs()[0]
        net.Concat(parts, [output, str(output) + "_concat_dims"], axis=self.axis)
