"""caffe2.python.layers.homotopy_weight: HomotopyWeight, alpha * x + beta * y with
weights that move from x towards y over training.

alpha + beta = min_weight + max_weight throughout; alpha starts at max_weight and
falls as min + (max - min) * lr(t), lr(t) = (1 + gamma t)^-power (the "inv"
learning-rate policy of an iteration counter the layer owns), with gamma and
power chosen so that lr = 1/2 at t = half_life and 1/4 at t = quad_life (which
must exceed 2 * half_life).
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class HomotopyWeight(ModelLayer):

    def __init__(self, model, input_record, name="homotopy_weight", min_weight=0.0, max_weight=1.0,
                 half_life=1e6, quad_life=3e6, atomic_iter=False, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("homotopy_weight"))
        data = self.input_record.field_blobs()
        assert len(data) == 2, "HomotopyWeight takes two inputs, got %d" % len(data)
        self.x, self.y = data
        self.use_atomic_iter = atomic_iter
        if atomic_iter:
            self.mutex = self.create_param(param_name="%s_mutex" % self.name, shape=None,
                                           initializer=("CreateMutex",), optimizer=self.model.NoOptim)
        self.counter = self.create_param(param_name="%s_counter" % self.name, shape=[1], initializer=(
            "ConstantFill", {"value": 0, "dtype": core.DataType.INT64}), optimizer=self.model.NoOptim)
        assert max_weight > min_weight, "max_weight (%s) must exceed min_weight (%s)" % (max_weight, min_weight)
        self.min_weight = float(min_weight)
        self.max_weight = float(max_weight)
        assert half_life > 0 and quad_life > 2 * half_life, \
            "need half_life > 0 and quad_life > 2 * half_life, got %s, %s" % (half_life, quad_life)
        # (1 + g h)^-p = 1/2 and (1 + g q)^-p = 1/4  =>  1 + g q = (1 + g h)^2
        self.gamma = float(quad_life - 2 * half_life) / (half_life ** 2)
        self.power = float(np.log(2.0) / np.log(1.0 + self.gamma * half_life))

    def _update_weight(self, net):
        if self.use_atomic_iter:
            net.AtomicIter([self.mutex, self.counter], [self.counter])
        else:
            net.Iter(self.counter, self.counter)
        lr = net.LearningRate([self.counter], net.NextScopedBlob("lr"), base_lr=1.0, policy="inv",
                              gamma=self.gamma, power=self.power)
        spread = net.Scale(lr, net.NextScopedBlob("scaled_lr"), scale=self.max_weight - self.min_weight)
        low = net.ConstantFill([spread], net.NextScopedBlob("min_weight"), value=self.min_weight)
        high = net.ConstantFill([spread], net.NextScopedBlob("max_weight"), value=self.max_weight)
        alpha = net.Add([spread, low], net.NextScopedBlob("alpha"))
        beta = net.Sub([high, spread], net.NextScopedBlob("beta"))
        return alpha, beta

    def add_ops(self, net):
        alpha, beta = self._update_weight(net)
        net.WeightedSum([self.x, alpha, self.y, beta], self.output_schema())
