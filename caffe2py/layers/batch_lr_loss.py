"""caffe2.python.layers.batch_lr_loss: BatchLRLoss, the logistic-regression loss.

input: Struct(label, logit[, prediction][, weight][, log_variance]). Per example:
xent = sigmoid cross entropy(logit, label), labels mapped to pos_label_target /
neg_label_target when those differ from 1 / 0 (log_D_trick / unjoined_lr_loss pick
the op's variants), then
- focal_gamma != 0: xent * (y + p - 2 y p)^gamma with p the `prediction` field
  (the factor without gradient when stop_grad_in_focal_factor);
- jsd_weight > 0: (1 - jsd_weight) xent + jsd_weight BernoulliJSD(prediction,
  label); homotopy_weighting: the weights move from (1, 0) as the "inv" learning
  rate schedule (gamma 1e-6, power 0.1) of the layer's own counter;
- a log_variance field s: 0.5 (exp(-s) loss + uncertainty_penalty s);
- a weight field: loss * weight.
loss = mean over the batch (sum with average_loss=False). Not in the predict net.
"""
import numpy as np

from .. import core, schema
from ._loss_util import as_float32, example_weights, label_like
from .layers import ModelLayer
from .tags import Tags


class BatchLRLoss(ModelLayer):

    def __init__(self, model, input_record, name="batch_lr_loss", average_loss=True, jsd_weight=0.0,
                 pos_label_target=1.0, neg_label_target=0.0, homotopy_weighting=False, log_D_trick=False,
                 unjoined_lr_loss=False, uncertainty_penalty=1.0, focal_gamma=0.0, stop_grad_in_focal_factor=False,
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert schema.is_schema_subset(schema.Struct(("label", schema.Scalar()), ("logit", schema.Scalar())),
                                       input_record), "BatchLRLoss needs label and logit fields"
        self.average_loss = average_loss
        assert 0 <= jsd_weight <= 1, "jsd_weight must be in [0, 1], got %s" % jsd_weight
        self.jsd_fuse = jsd_weight > 0 or homotopy_weighting
        if self.jsd_fuse:
            assert "prediction" in input_record, "jsd_weight / homotopy_weighting need a prediction field"
            self._init_weights(jsd_weight, homotopy_weighting)
        self.homotopy_weighting = homotopy_weighting
        assert 0 <= neg_label_target <= pos_label_target <= 1, \
            "need 0 <= neg_label_target <= pos_label_target <= 1, got %s, %s" % (neg_label_target, pos_label_target)
        self.pos_label_target = pos_label_target
        self.neg_label_target = neg_label_target
        assert not (log_D_trick and unjoined_lr_loss), "log_D_trick and unjoined_lr_loss exclude each other"
        self.log_D_trick = log_D_trick
        self.unjoined_lr_loss = unjoined_lr_loss
        assert uncertainty_penalty >= 0, "uncertainty_penalty must be >= 0, got %s" % uncertainty_penalty
        self.uncertainty_penalty = uncertainty_penalty
        if focal_gamma != 0:
            assert "prediction" in input_record, "focal_gamma needs a prediction field"
        self.focal_gamma = focal_gamma
        self.stop_grad_in_focal_factor = stop_grad_in_focal_factor
        self.tags.update([Tags.EXCLUDE_FROM_PREDICTION])
        self.output_schema = schema.Scalar(np.float32, self.get_next_blob_reference("output"))

    def _init_weights(self, jsd_weight, homotopy_weighting):
        if not homotopy_weighting:
            self.jsd_weight = self.model.add_global_constant("%s_jsd_weight" % self.name, jsd_weight)
            self.xent_weight = self.model.add_global_constant("%s_xent_weight" % self.name, 1.0 - jsd_weight)
            return

        def counter_param(suffix, initializer, shape):
            return self.create_param(param_name="%s_%s" % (self.name, suffix), shape=shape, initializer=initializer,
                                     optimizer=self.model.NoOptim)

        self.mutex = counter_param("mutex", ("CreateMutex",), None)
        self.counter = counter_param("counter", ("ConstantFill", {"value": 0, "dtype": core.DataType.INT64}), [1])
        self.xent_weight = counter_param("xent_weight", ("ConstantFill", {"value": 1.0}), [1])
        self.jsd_weight = counter_param("jsd_weight", ("ConstantFill", {"value": 0.0}), [1])

    def _update_weights(self, net):
        # xent weight 1 at iteration 0, 0.5^0.1 at 1e6, 1e-3^0.1 at 1e9
        net.AtomicIter([self.mutex, self.counter], [self.counter])
        net.LearningRate([self.counter], [self.xent_weight], base_lr=1.0, policy="inv", gamma=1e-6, power=0.1)
        net.Sub([self.model.global_constants["ONE"], self.xent_weight], [self.jsd_weight])

    def _focal_factor(self, net, label):
        """(y + p - 2 y p)^gamma: how wrong the prediction p is."""
        label = net.StopGradient([label], [net.NextScopedBlob("label_stop_gradient")])
        prediction = self.input_record.prediction()
        y_plus_p = net.Add([prediction, label], net.NextScopedBlob("y_plus_p"))
        two_yp = net.Scale(net.Mul([prediction, label], net.NextScopedBlob("yp")), net.NextScopedBlob("two_yp"),
                           scale=2.0)
        wrongness = net.Sub([y_plus_p, two_yp], net.NextScopedBlob("y_plus_p_sub_two_yp"))
        factor = net.Pow(wrongness, net.NextScopedBlob("focal_factor"), exponent=float(self.focal_gamma))
        if self.stop_grad_in_focal_factor:
            factor = net.StopGradient([factor], [net.NextScopedBlob("focal_factor_stop_gradient")])
        # the factor is per example, like the cross entropy
        return net.FlattenToVec(factor, net.NextScopedBlob("focal_factor_vector"))

    def _uncertainty_weighted(self, net, loss):
        """0.5 (exp(-s) loss + uncertainty_penalty s), s the log_variance field."""
        log_variance = net.FlattenToVec(self.input_record.log_variance(), net.NextScopedBlob("log_variance_vector"))
        neg = net.Negative([log_variance], net.NextScopedBlob("neg_log_variance"))
        # exp overflows float32 above 88
        neg = net.Clip([neg], net.NextScopedBlob("clipped_neg_log_variance"), max=88.0)
        scaled_loss = net.Mul([net.Exp([neg], net.NextScopedBlob("exp_neg_log_variance")), loss],
                              net.NextScopedBlob("exp_neg_log_variance_loss"))
        penalty = net.Scale(log_variance, net.NextScopedBlob("penalized_uncertainty"),
                            scale=float(self.uncertainty_penalty))
        doubled = net.Add([scaled_loss, penalty], net.NextScopedBlob("uncertainty_loss_2x"))
        return net.Scale(doubled, net.NextScopedBlob("uncertainty_loss"), scale=0.5)

    def add_ops(self, net):
        record = self.input_record
        label = as_float32(net, record.label, "label_float32")
        label = label_like(net, label, record.label, record.logit)
        if self.pos_label_target != 1.0 or self.neg_label_target != 0.0:
            label = net.StumpFunc(label, net.NextScopedBlob("smoothed_label"), threshold=0.5,
                                  low_value=self.neg_label_target, high_value=self.pos_label_target)
        loss = net.SigmoidCrossEntropyWithLogits([record.logit(), label], net.NextScopedBlob("cross_entropy"),
                                                 log_D_trick=self.log_D_trick,
                                                 unjoined_lr_loss=self.unjoined_lr_loss)
        if self.focal_gamma != 0:
            loss = net.Mul([loss, self._focal_factor(net, label)], net.NextScopedBlob("focal_loss"))
        if self.jsd_fuse:
            jsd = net.BernoulliJSD([record.prediction(), label], net.NextScopedBlob("jsd"))
            jsd = net.FlattenToVec(jsd, net.NextScopedBlob("jsd_vector"))
            if self.homotopy_weighting:
                self._update_weights(net)
            loss = net.WeightedSum([loss, self.xent_weight, jsd, self.jsd_weight], net.NextScopedBlob("loss"))
        if "log_variance" in record:
            loss = self._uncertainty_weighted(net, loss)
        weight = example_weights(net, record)
        if weight is not None:
            loss = net.Mul([loss, weight], net.NextScopedBlob("weighted_cross_entropy"))
        if self.average_loss:
            net.AveragedLoss(loss, self.output_schema.field_blobs())
        else:
            net.ReduceFrontSum(loss, self.output_schema.field_blobs())
