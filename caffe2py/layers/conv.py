"""caffe2.python.layers.conv: Conv, a 2-D convolution of an NHWC input Scalar
(H, W, C) with output_dim filters (kernel Xavier-filled, bias 0 by default). The
output's schema names only the channels; H and W follow from the input."""
import numpy as np

from .. import schema
from .layers import ModelLayer


class Conv(ModelLayer):

    def __init__(self, model, input_record, output_dim, kernel_h, kernel_w, stride_h, stride_w, pad_b=None,
                 pad_l=None, pad_r=None, pad_t=None, order="NHWC", kernel_init=None, bias_init=None,
                 kernel_optim=None, bias_optim=None, name="conv", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "Conv takes a Scalar"
        input_dims = input_record.field_type().shape
        assert len(input_dims) == 3, "Conv takes (H, W, C) inputs, got inner shape %s" % (input_dims,)
        assert kernel_h > 0 and kernel_w > 0, "kernel sizes must be > 0"
        assert stride_h > 0 and stride_w > 0, "strides must be > 0"
        assert order == "NHWC", "Conv layers take NHWC inputs only"
        self.output_dim = output_dim
        self.kernel_h, self.kernel_w = kernel_h, kernel_w
        self.stride_h, self.stride_w = stride_h, stride_w
        self.pad_b, self.pad_l = pad_b or 0, pad_l or 0
        self.pad_r, self.pad_t = pad_r or 0, pad_t or 0
        self.order = order
        input_c = input_dims[-1]
        assert input_c > 0, "the input has no channels"
        kernel_shape = [output_dim, kernel_h, kernel_w, input_c]
        self.kernel_init = kernel_init or ("XavierFill", {})
        self.bias_init = bias_init or ("ConstantFill", {"value": 0.0})
        self.kernel = self.create_param(param_name="conv_kernel", shape=kernel_shape, initializer=self.kernel_init,
                                        optimizer=kernel_optim)
        self.bias = self.create_param(param_name="conv_bias", shape=[output_dim], initializer=self.bias_init,
                                      optimizer=bias_optim)
        self.output_schema = schema.Scalar((np.float32, (output_dim,)), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        net.Conv(self.input_record.field_blobs() + [self.kernel, self.bias], self.output_schema.field_blobs(),
                 kernel_h=self.kernel_h, kernel_w=self.kernel_w, stride_h=self.stride_h, stride_w=self.stride_w,
                 pad_t=self.pad_t, pad_l=self.pad_l, pad_b=self.pad_b, pad_r=self.pad_r, order=self.order)
