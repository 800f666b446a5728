"""caffe2.python.layers.constant_weight: ConstantWeight, sum_i w_i * input_i with
fixed weights (global constants; 1 / n each by default)."""
import numpy as np

from .. import schema
from .layers import ModelLayer


class ConstantWeight(ModelLayer):

    def __init__(self, model, input_record, weights=None, name="constant_weight", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("constant_weight"))
        self.data = self.input_record.field_blobs()
        self.num = len(self.data)
        weights = weights if weights is not None else [1.0 / self.num] * self.num
        assert len(weights) == self.num, "%d weights for %d inputs" % (len(weights), self.num)
        self.weights = [self.model.add_global_constant("%s_weight_%d" % (self.name, i), float(weights[i]))
                        for i in range(self.num)]

    def add_ops(self, net):
        net.WeightedSum([b for pair in zip(self.data, self.weights) for b in pair], self.output_schema())
