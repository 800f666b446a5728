"""caffe2.python.layers.conv: Conv, a 2-D convolution of an input Scalar (H, W, C)
for NHWC, (C, H, W) for NCHW, with output_dim filters (kernel Xavier-filled, bias
0 by default). A padding left None is 0, or with stride 1 (kernel - 1) // 2 (the
size-keeping padding of an odd kernel). The output's schema names only the
channels; H and W follow from the input."""
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
        assert len(input_dims) >= 1, "Conv needs the input's inner shape (at least its channels)"
        for name_, value in (("kernel_h", kernel_h), ("kernel_w", kernel_w), ("stride_h", stride_h),
                             ("stride_w", stride_w)):
            assert isinstance(value, int) and value > 0, "%s should be a positive integer, got %r" % (name_, value)
        assert order in ("NHWC", "NCHW"), "order should be NHWC or NCHW, got %s" % order
        self.output_dim = output_dim
        self.kernel_h, self.kernel_w = kernel_h, kernel_w
        self.stride_h, self.stride_w = stride_h, stride_w
        auto_h = (kernel_h - 1) // 2 if stride_h == 1 else 0
        auto_w = (kernel_w - 1) // 2 if stride_w == 1 else 0
        self.pad_t = auto_h if pad_t is None else pad_t
        self.pad_b = auto_h if pad_b is None else pad_b
        self.pad_l = auto_w if pad_l is None else pad_l
        self.pad_r = auto_w if pad_r is None else pad_r
        for name_, value in (("pad_t", self.pad_t), ("pad_b", self.pad_b), ("pad_l", self.pad_l),
                             ("pad_r", self.pad_r)):
            assert isinstance(value, int) and value >= 0, "%s should be an integer >= 0, got %r" % (name_, value)
        self.order = order
        input_c = input_dims[-1] if order == "NHWC" else input_dims[0]
        assert input_c > 0, "the input has no channels"
        kernel_shape = ([output_dim, kernel_h, kernel_w, input_c] if order == "NHWC"
                        else [output_dim, input_c, kernel_h, kernel_w])
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
