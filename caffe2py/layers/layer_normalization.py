"""caffe2.python.layers.layer_normalization: LayerNormalization.

Normalizes each example over the dims from `axis` on (LayerNorm), then scales and
shifts by per-channel parameters of the input's first inner dim, broadcast along
`axis`. use_layer_norm_op=False (Caffe2's composition of reduce ops) gives the
same values; the LayerNorm op computes them either way.
"""
from .. import schema
from .layers import ModelLayer


class LayerNormalization(ModelLayer):

    def __init__(self, model, input_record, name="layer_normalization", scale_optim=None, bias_optim=None,
                 epsilon=1e-4, axis=1, use_layer_norm_op=True, scale_init_value=1.0, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "LayerNormalization takes a Scalar"
        self.input_shape = input_record.field_type().shape
        assert len(self.input_shape) >= 1, "LayerNormalization needs the input's inner shape"
        assert axis >= 1, "axis %d: the batch axis cannot be normalized over" % axis
        self.axis = axis
        self.epsilon = epsilon
        self.use_layer_norm_op = use_layer_norm_op
        input_dims = self.input_shape[axis - 1]
        self.output_schema = schema.Scalar((input_record.field_type().base, self.input_shape),
                                           self.get_next_blob_reference("output"))
        self.scale = self.create_param("scale", [input_dims], ("ConstantFill", {"value": scale_init_value}),
                                       scale_optim)
        self.bias = self.create_param("bias", [input_dims], ("ConstantFill", {"value": 0.0}), bias_optim)

    def add_ops(self, net):
        normalized, _, _ = net.LayerNorm(
            self.input_record.field_blobs(),
            [net.NextScopedBlob("ln_output"), net.NextScopedBlob("ln_mean"), net.NextScopedBlob("ln_stdev")],
            axis=self.axis, epsilon=self.epsilon)
        scaled = net.Mul([normalized, self.scale], [net.NextScopedBlob("ln_scaled")], broadcast=1, axis=self.axis)
        net.Add([scaled, self.bias], self.output_schema.field_blobs(), broadcast=1, axis=self.axis)
