"""caffe2.python.layers.adaptive_weight: AdaptiveWeight, losses combined with
trained weights (Kendall et al.'s uncertainty weighting).

With mu_i = log(1 / (2 w_i)) trained from the initial weights w_i (1 / n each by
default): output = sum_i 0.5 exp(-mu_i) x_i + sum_i mu_i, i.e. sum_i w_i x_i +
log(1 / (2 w_i)) at the start. The mu term keeps the weights from collapsing to 0.
"""
import numpy as np

from .. import core, schema
from .layers import ModelLayer


class AdaptiveWeight(ModelLayer):

    def __init__(self, model, input_record, name="adaptive_weight", optimizer=None, weights=None,
                 estimation_method="log_std", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        # Caffe2's other estimation methods (inv_var with its positivity options)
        # are not provided: refuse them rather than compute log_std instead
        if estimation_method != "log_std":
            raise NotImplementedError("AdaptiveWeight: estimation_method %r is not provided by caffe2py "
                                      "(only 'log_std')" % (estimation_method,))
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("adaptive_weight"))
        self.data = self.input_record.field_blobs()
        self.num = len(self.data)
        self.optimizer = optimizer
        if weights is None:
            weights = [1.0 / self.num] * self.num
        assert len(weights) == self.num, "%d weights for %d inputs" % (len(weights), self.num)
        assert min(weights) > 0, "initial weights must be positive"
        self.weights = np.array(weights).astype(np.float32)
        values = np.log(1.0 / 2.0 / self.weights)
        self.mu = self.create_param(param_name="mu", shape=[self.num], initializer=(
            "GivenTensorFill", {"values": values.tolist(), "dtype": core.DataType.FLOAT}), optimizer=self.optimizer)

    def _concat_data(self, net):
        # one value per input, whatever the inputs' shapes (scalars fed as 0-d)
        reshaped = []
        for index, blob in enumerate(self.data):
            out, _ = net.Reshape([blob], [net.NextScopedBlob("reshaped_data_%d" % index),
                                          net.NextScopedBlob("new_shape_%d" % index)], shape=[1])
            reshaped.append(out)
        concated, _ = net.Concat(reshaped, [net.NextScopedBlob("concated_data"),
                                            net.NextScopedBlob("concated_new_shape")], axis=0)
        return concated

    def add_ops(self, net):
        x = self._concat_data(net)
        mu_neg = net.Negative(self.mu, net.NextScopedBlob("mu_neg"))
        mu_neg_exp = net.Exp(mu_neg, net.NextScopedBlob("mu_neg_exp"))
        weight = net.Scale(mu_neg_exp, net.NextScopedBlob("weight"), scale=0.5)
        weighted = net.Mul([weight, x], net.NextScopedBlob("weighted_x"))
        weighted_sum = net.SumElements(weighted, net.NextScopedBlob("weighted_x_sum"))
        regularizer = net.SumElements(self.mu, net.NextScopedBlob("reg"))
        net.Add([weighted_sum, regularizer], self.output_schema())
