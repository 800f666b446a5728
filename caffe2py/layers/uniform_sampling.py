"""caffe2.python.layers.uniform_sampling: UniformSampling, for sampled softmax.

input: the ids (int32) that must be among the samples. output: Struct(samples:
those ids followed by distinct ids drawn uniformly from [0, num_elements) up to
num_samples in all, sampling_prob: num_samples / num_elements for each).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class UniformSampling(ModelLayer):

    def __init__(self, model, input_record, num_samples, num_elements, name="uniform_sampling", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert 0 < num_samples <= num_elements, \
            "need 0 < num_samples (%s) <= num_elements (%s)" % (num_samples, num_elements)
        assert isinstance(input_record, schema.Scalar), "UniformSampling takes a Scalar"
        self.num_elements = num_elements
        self.num_samples = self.create_param(param_name="num_samples", shape=(1,), initializer=(
            "GivenTensorInt64Fill", {"values": [num_samples]}), optimizer=model.NoOptim)
        self.sampling_prob = self.create_param(param_name="prob", shape=(num_samples,), initializer=(
            "ConstantFill", {"value": float(num_samples) / num_elements, "dtype": core.DataType.FLOAT}),
            optimizer=model.NoOptim)
        self.output_schema = schema.Struct(
            ("samples", schema.Scalar(np.int32, self.get_next_blob_reference("samples"))),
            ("sampling_prob", schema.Scalar(np.float32, self.sampling_prob)))

    def add_ops(self, net):
        net.StopGradient(self.sampling_prob, self.sampling_prob)
        shape = net.Shape([self.input_record()], net.NextScopedBlob("shape"))
        shape = net.Sub([self.num_samples, shape], shape)
        extra = net.UniqueUniformFill([shape, self.input_record()], net.NextScopedBlob("samples_before_concat"),
                                      min=0, max=self.num_elements - 1, input_as_shape=True)
        net.Concat([self.input_record(), extra], [self.output_schema.samples(), net.NextScopedBlob("split_info")],
                   axis=0)
        net.StopGradient(self.output_schema.samples(), self.output_schema.samples())
