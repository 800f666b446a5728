"""caffe2.python.layers.random_fourier_features: RandomFourierFeatures (Rahimi &
Recht), approximating the Gaussian kernel of `bandwidth`: output =
sqrt(2 / output_dims) * cos(input . W^T + b), W Gaussian with std 1 / bandwidth,
b uniform in [0, 2 pi); W and b stay fixed unless given optimizers."""
import numpy as np

from .. import schema
from .layers import ModelLayer


class RandomFourierFeatures(ModelLayer):

    def __init__(self, model, input_record, output_dims, sigma, w_init=None, b_init=None,
                 name="random_fourier_features", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "RandomFourierFeatures takes a Scalar"
        input_dims = input_record.field_type().shape[0]
        assert input_dims >= 1, "expected input dimensions >= 1, got %s" % input_dims
        self.output_dims = output_dims
        assert self.output_dims >= 1, "expected output dimensions >= 1, got %s" % self.output_dims
        self.output_schema = schema.Scalar((np.float32, (self.output_dims,)), self.get_next_blob_reference("output"))
        assert sigma > 0.0, "expected bandwidth > 0, got %s" % sigma
        w_init = w_init or ("GaussianFill", {"mean": 0.0, "std": 1.0 / sigma})
        b_init = b_init or ("UniformFill", {"min": 0.0, "max": 2 * np.pi})
        self.w = self.create_param(param_name="w", shape=[self.output_dims, input_dims], initializer=w_init,
                                   optimizer=model.NoOptim)
        self.b = self.create_param(param_name="b", shape=[self.output_dims], initializer=b_init,
                                   optimizer=model.NoOptim)

    def add_ops(self, net):
        projected = net.FC(self.input_record.field_blobs() + [self.w, self.b], net.NextScopedBlob("fc_output"))
        cosine = net.Cos(projected, net.NextScopedBlob("cos"))
        net.Scale(cosine, self.output_schema.field_blobs(), scale=np.sqrt(2.0 / self.output_dims))
