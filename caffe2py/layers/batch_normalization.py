"""caffe2.python.layers.batch_normalization: BatchNormalization (SpatialBN).

input: a Scalar of shape (C,) or (C, H, W) (order NCHW; (H, W, C) for NHWC). A
(C,) input is expanded to (C, 1, 1) around SpatialBN. Parameters scale, bias
(trained) and the running mean / inverse variance (updated by the op, with
`momentum`). Training uses the batch statistics, eval and prediction the running
ones.
"""
import numpy as np

from .. import schema
from .layers import ModelLayer


class BatchNormalization(ModelLayer):

    def __init__(self, model, input_record, name="batch_normalization", scale_optim=None, bias_optim=None,
                 momentum=0.9, order="NCHW", scale_init_value=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "BatchNormalization takes a Scalar"
        self.input_shape = input_record.field_type().shape
        if len(self.input_shape) == 3:
            assert order in ("NCHW", "NHWC"), "order must be NCHW or NHWC, got %s" % order
            input_dims = self.input_shape[0] if order == "NCHW" else self.input_shape[2]
        else:
            assert len(self.input_shape) == 1, "BatchNormalization takes (C,) or (C, H, W) inputs, got %s" % (
                self.input_shape,)
            input_dims = self.input_shape[0]
        self.output_schema = schema.Scalar((np.float32, self.input_shape), self.get_next_blob_reference("output"))
        self.momentum = momentum
        self.order = order
        self.scale = self.create_param("scale", [input_dims], ("ConstantFill", {"value": scale_init_value}),
                                       scale_optim)
        self.bias = self.create_param("bias", [input_dims], ("ConstantFill", {"value": 0.0}), bias_optim)
        self.rm = self.create_param("running_mean", [input_dims], ("ConstantFill", {"value": 0.0}), model.NoOptim)
        self.riv = self.create_param("running_inv_var", [input_dims], ("ConstantFill", {"value": 1.0}),
                                     model.NoOptim)

    def _add_ops(self, net, is_test):
        output = self.output_schema.field_blobs()
        if len(self.input_shape) == 1:
            bn_input = net.ExpandDims(self.input_record.field_blobs(), net.NextScopedBlob("expand_input"), dims=[2, 3])
        else:
            bn_input = self.input_record.field_blobs()[0]
        outputs = output if is_test else output + [self.rm, self.riv, net.NextScopedBlob("bn_saved_mean"),
                                                   net.NextScopedBlob("bn_saved_iv")]
        net.SpatialBN([bn_input, self.scale, self.bias, self.rm, self.riv], outputs, momentum=self.momentum,
                      is_test=is_test, order=self.order)
        if len(self.input_shape) == 1:
            net.Squeeze(output, output, dims=[2, 3])

    def add_train_ops(self, net):
        self._add_ops(net, is_test=False)

    def add_eval_ops(self, net):
        self._add_ops(net, is_test=True)

    def add_ops(self, net):
        self.add_eval_ops(net)
