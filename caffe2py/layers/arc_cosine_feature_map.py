"""caffe2.python.layers.arc_cosine_feature_map: ArcCosineFeatureMap, random
features of the arc-cosine kernel of degree s (Cho & Saul).

x = input . W^T + b with fixed random W (Gaussian, std `scale`) and b (uniform in
+-scale), not trained; output = x^s * H(x) (H the step function), computed as
Relu(x) for s = 1, Relu(Softsign(x)) = x / (1 + x) on x > 0 for s = 0, and
Relu(x)^(s - 1) * Relu(x) above. With set_weight_as_global_constant W and b are
model global constants (shared by every net, filled by create_init_net) rather
than layer parameters.
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class ArcCosineFeatureMap(ModelLayer):

    def __init__(self, model, input_record, output_dims, s=1, scale=1.0, weight_init=None, bias_init=None,
                 weight_optim=None, bias_optim=None, set_weight_as_global_constant=False,
                 initialize_output_schema=True, name="arc_cosine_feature_map", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Scalar), "ArcCosineFeatureMap takes a Scalar"
        assert len(input_record.field_types()[0].shape) > 0, "ArcCosineFeatureMap needs the input's inner shape"
        self.params = []
        self.model = model
        self.set_weight_as_global_constant = set_weight_as_global_constant
        self.input_dims = input_record.field_type().shape[0]
        assert self.input_dims >= 1, "expected input dimensions >= 1, got %s" % self.input_dims
        if initialize_output_schema:
            self.output_schema = schema.Scalar((np.float32, (output_dims,)),
                                               model.net.NextScopedBlob(name + "_output"))
        self.output_dims = output_dims
        assert self.output_dims >= 1, "expected output dimensions >= 1, got %s" % self.output_dims
        self.s = s
        assert self.s >= 0, "s must be >= 0, got %s" % self.s
        assert isinstance(self.s, int), "s must be an integer, got %r" % (self.s,)
        assert scale > 0.0, "scale must be > 0, got %s" % scale
        self.stddev = scale * np.sqrt(1.0 / self.input_dims)
        weight_init = weight_init or ("GaussianFill", {"mean": 0.0, "std": self.stddev})
        bias_init = bias_init or ("UniformFill", {"min": -1.0 * self.stddev, "max": self.stddev})
        if self.set_weight_as_global_constant:
            self.random_w = self._global_constant(name + "_fixed_rand_W", [self.output_dims, self.input_dims],
                                                  weight_init)
            self.random_b = self._global_constant(name + "_fixed_rand_b", [self.output_dims], bias_init)
        else:
            self.random_w, self.random_b = self._initialize_params("random_w", "random_b", w_init=weight_init,
                                                                   b_init=bias_init, w_optim=weight_optim,
                                                                   b_optim=bias_optim)

    def _global_constant(self, name, shape, init):
        op_type, args = init[0], dict(init[1]) if len(init) > 1 else {}
        return self.model.add_global_constant(
            name, initializer=lambda blob: core.CreateOperator(op_type, [], blob, shape=shape, **args))

    def _initialize_params(self, w_name, b_name, w_init=None, b_init=None, w_optim=None, b_optim=None):
        """Create the weight (output_dims x input_dims) and bias parameters; without
        an optimizer they stay fixed (NoOptim)."""
        w = self.create_param(param_name=w_name, shape=[self.output_dims, self.input_dims], initializer=w_init,
                              optimizer=w_optim or self.model.NoOptim)
        b = self.create_param(param_name=b_name, shape=[self.output_dims], initializer=b_init,
                              optimizer=b_optim or self.model.NoOptim)
        return w, b

    def _heaviside_with_power(self, net, input_features, output_blob, s):
        """input^s * H(input) into output_blob."""
        if s == 0:
            softsign = net.Softsign([input_features], net.NextScopedBlob("softsign"))
            return net.Relu(softsign, output_blob)
        if s == 1:
            return net.Relu([input_features], output_blob)
        relu = net.Relu([input_features], net.NextScopedBlob("relu_rand"))
        powered = net.Pow([relu], net.NextScopedBlob("pow_rand"), exponent=float(s - 1))
        return net.Mul([powered, relu], output_blob)

    def add_ops(self, net):
        input_blob = self.input_record.field_blobs()
        random_features = net.FC(input_blob + [self.random_w, self.random_b], net.NextScopedBlob("random_features"))
        self._heaviside_with_power(net, random_features, self.output_schema.field_blobs(), self.s)
