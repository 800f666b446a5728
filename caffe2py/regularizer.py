"""Caffe2's caffe2.python.regularizer: regularization of a parameter, added to nets.

    reg = L1Norm(0.1)
    term = reg(net, init_net, param, by=RegularizationBy.ON_LOSS)     # a blob to add to the loss
    reg(net, init_net, param, grad, by=RegularizationBy.AFTER_OPTIMIZER)  # a projection after the update

ON_LOSS regularizers return a blob holding their term (the layers framework adds
it to the loss): L1Norm (lambda * sum|w|), L2Norm (lambda * sum w^2, Caffe2's
LpNorm p=2 without the square root), ElasticNet (l1 * L1 + l2 * L2),
L1NormTrimmed / ElasticNetL1NormTrimmed (the L1 term without the k largest
|w| of each row: TopK works along the last axis), FCInputLpNorm (lambda * the p-norm over input features of the L2 norms of
their weight columns), GroupL1Norm (lambda * sum over groups of sqrt(group size)
* the L2 norm of the group's columns), LogBarrier (-discount * sum log w, the
discount following a learning-rate policy of the shared iteration counter).

AFTER_OPTIMIZER regularizers change the parameter after its update: MaxNorm and
ConstantNorm (rows of a sparse parameter scaled to at most / exactly `norm`),
LogBarrier (w kept above 0) and BoundedGradientProjection (w kept in [lb, ub],
open ends moved in by epsilon); for a sparse gradient only its rows.
A regularizer that has nothing to do for one of the two returns None.
"""
import numpy as np

from . import core, utils


class RegularizationBy:
    AFTER_OPTIMIZER = "after_optimizer"
    ON_LOSS = "on_loss"


class Regularizer:
    def __init__(self):
        self.kEpsilon = 1e-9

    def __call__(self, net, param_init_net, param, grad=None, by=None):
        assert isinstance(param, core.BlobReference), "the parameter must be a BlobReference"
        allowed = utils.EnumClassKeyVals(RegularizationBy).values()
        assert by in allowed, "Regularizer of type {} is called with invalid by={}, not in {}".format(
            self.__class__, by, list(allowed))
        run = getattr(self, "_run_" + by, None)
        assert run is not None, "Regularizer of type {} does not implement function {}".format(
            self.__class__, "_run_" + by)
        return run(net, param_init_net, param, grad)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        return None

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        return None

    def _feature_grouping(self, param, net):
        return None

    def _ensure_clipped(self, net, param, grad=None, min=None, max=None, open_range=False,  # noqa: A002
                        left_open=False, right_open=False):
        if min is not None and (open_range or left_open):
            min = min + self.kEpsilon  # noqa: A001
        if max is not None and (open_range or right_open):
            max = max - self.kEpsilon  # noqa: A001
        inputs = [param, grad.indices, grad.values] if isinstance(grad, core.GradientSlice) else [param]
        net.EnsureClipped(inputs, [param], min=min, max=max)


def _nonnegative(reg_lambda):
    assert reg_lambda >= 0, "factor ahead of regularization should be 0 or positive"
    return reg_lambda


class L1Norm(Regularizer):
    def __init__(self, reg_lambda):
        super().__init__()
        self.reg_lambda = _nonnegative(reg_lambda)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_l1_regularization")
        net.LpNorm([param], [out], p=1)
        net.Scale([out], [out], scale=self.reg_lambda)
        return out


class FCInputLpNorm(Regularizer):
    def __init__(self, reg_lambda, p_value=0.5):
        super().__init__()
        self.reg_lambda = _nonnegative(reg_lambda)
        assert p_value >= 0, "p_value factor should be 0 or positive"
        self.p_value = p_value

    def _feature_grouping(self, param, net):
        """The L2 norm of each input feature's weights (over the output rows)."""
        squared = net.Mul([param, param], [net.NextScopedBlob("param_mul")])
        summed = net.ReduceFrontSum([squared], [net.NextScopedBlob("param_reduced")])
        return net.Pow([summed], [net.NextScopedBlob("grouped_feature_weight_vec")], exponent=0.5)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_dense_feature_regularization")
        grouped = self._feature_grouping(param, net)
        raised = net.Pow([grouped], [net.NextScopedBlob("lp_vec_raised")], exponent=self.p_value)
        summed = net.ReduceFrontSum([raised], [net.NextScopedBlob("lp_vec_summed")])
        lp = net.Pow([summed], [net.NextScopedBlob("lp_vec")], exponent=1.0 / self.p_value)
        net.Scale([lp], [out], scale=self.reg_lambda)
        return out


def _trimmed_l1(net, param, k, out):
    """sum|w| less the k largest |w| of each row (of the last axis), into out."""
    absolute = net.Abs([param], [net.NextScopedBlob("abs")])
    total = net.SumElements([absolute], [net.NextScopedBlob("sum_abs")], average=False)
    top, _, _ = net.TopK([absolute], [net.NextScopedBlob("topk"), net.NextScopedBlob("id"),
                                      net.NextScopedBlob("flat_id")], k=k)
    top_sum = net.SumElements([top], [net.NextScopedBlob("topk_sum")], average=False)
    net.Sub([total, top_sum], [out])
    return out


class L1NormTrimmed(Regularizer):
    """The trimmed lasso (arXiv:1708.04527): the k largest weights are free."""

    def __init__(self, reg_lambda, k):
        super().__init__()
        self.reg_lambda = _nonnegative(reg_lambda)
        assert isinstance(k, int), "k should be an interger as expected #. after selection"
        assert k >= 1, "k should be larger than 1"
        self.k = k

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = _trimmed_l1(net, param, self.k, net.NextScopedBlob(param + "_l1_trimmed_regularization"))
        net.Scale([out], [out], scale=self.reg_lambda)
        return out


class L2Norm(Regularizer):
    def __init__(self, reg_lambda):
        super().__init__()
        self.reg_lambda = _nonnegative(reg_lambda)

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_l2_regularization")
        net.LpNorm([param], [out], p=2)
        net.Scale([out], [out], scale=self.reg_lambda)
        return out


class ElasticNet(Regularizer):
    def __init__(self, l1, l2):
        super().__init__()
        self.l1 = l1
        self.l2 = l2

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_elastic_net_regularization")
        l2_blob = net.NextScopedBlob(param + "_l2_blob")
        l1_blob = net.NextScopedBlob(param + "_l1_blob")
        net.LpNorm([param], [l2_blob], p=2)
        net.LpNorm([param], [l1_blob], p=1)
        net.Scale([l2_blob], [l2_blob], scale=self.l2)
        net.Scale([l1_blob], [l1_blob], scale=self.l1)
        net.Add([l1_blob, l2_blob], [out])
        return out


class ElasticNetL1NormTrimmed(Regularizer):
    def __init__(self, l1, l2, k):
        super().__init__()
        self.l1 = l1
        self.l2 = l2
        self.k = k

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        out = net.NextScopedBlob(param + "_elastic_net_l1_trimmed_regularization")
        l2_blob = net.NextScopedBlob(param + "_l2_blob")
        net.LpNorm([param], [l2_blob], p=2)
        net.Scale([l2_blob], [l2_blob], scale=self.l2)
        l1_blob = _trimmed_l1(net, param, self.k, net.NextScopedBlob(param + "_l1_blob"))
        net.Scale([l1_blob], [l1_blob], scale=self.l1)
        net.Add([l1_blob, l2_blob], [out])
        return out


class _SparseRowNorm(Regularizer):
    USE_MAX_NORM = True

    def __init__(self, norm=1.0):
        super().__init__()
        self.norm = norm

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        assert self.norm > 0, "norm should be bigger than 0."
        if not isinstance(grad, core.GradientSlice):
            raise NotImplementedError("%s is not supported for dense parameters" % type(self).__name__)
        net.SparseNormalize([param, grad.indices], [param], use_max_norm=self.USE_MAX_NORM, norm=self.norm)


class MaxNorm(_SparseRowNorm):
    """Rows updated by a sparse gradient are shrunk to L2 norm at most `norm`."""
    USE_MAX_NORM = True


class ConstantNorm(_SparseRowNorm):
    """Rows updated by a sparse gradient are scaled to L2 norm `norm`."""
    USE_MAX_NORM = False


class LogBarrier(Regularizer):
    """The log barrier (Nocedal & Wright, Numerical Optimization, ch. 19): keeps
    the parameter positive."""

    def __init__(self, reg_lambda, discount_policy="inv", discount_options=None):
        super().__init__()
        assert reg_lambda > 0, "factor ahead of regularization should be 0 or positive"
        self.reg_lambda = reg_lambda
        self.discount_policy = discount_policy
        self.discount_options = discount_options or {"gamma": 1.0, "power": 1.0}

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        iteration = utils.BuildUniqueMutexIter(param_init_net, net)
        # minimizing: the discount is negative
        discount = net.NextScopedBlob(param + "_log_barrier_discount")
        net.LearningRate([iteration], [discount], base_lr=-self.reg_lambda, policy=self.discount_policy,
                         **self.discount_options)
        # the parameter may start (or drift) at or below 0: log of at least epsilon
        positive = net.NextScopedBlob(param + "_non_neg")
        net.Clip([param], [positive], min=self.kEpsilon)
        logs = net.NextScopedBlob(param + "_log")
        net.Log([positive], [logs])
        log_sum = net.NextScopedBlob(param + "_log_sum")
        net.SumElements([logs], [log_sum])
        out = net.NextScopedBlob(param + "_log_barrier")
        net.Mul([log_sum, discount], [out], broadcast=1)
        return out

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        self._ensure_clipped(net, param, grad, min=0, open_range=True)


class BoundedGradientProjection(Regularizer):
    """Projects the parameter back into [lb, ub] after each update (Nocedal &
    Wright, ch. 16); an open end is moved in by epsilon."""

    def __init__(self, lb=None, ub=None, left_open=False, right_open=False, epsilon=None):
        super().__init__()
        lb = float(lb) if lb is not None else None
        ub = float(ub) if ub is not None else None
        epsilon = float(epsilon) if epsilon is not None else self.kEpsilon
        assert epsilon > 0, "Bounded Gradient Projection with invalid eps={eps}".format(eps=epsilon)
        assert lb is None or ub is None or (
            lb + (epsilon if left_open else 0.0) <= ub - (epsilon if right_open else 0.0)), \
            "Bounded Gradient Projection with invalid {lp}ub={ub}, lb={lb}{rp}, eps={eps}".format(
                lb=lb, ub=ub, lp="(" if left_open else "[", rp=")" if right_open else "]", eps=epsilon)
        self.left_open = left_open
        self.right_open = right_open
        self.kEpsilon = epsilon
        self.lb = lb
        self.ub = ub

    def _run_after_optimizer(self, net, param_init_net, param, grad):
        self._ensure_clipped(net, param, grad, min=self.lb, max=self.ub, left_open=self.left_open,
                             right_open=self.right_open)


class GroupL1Norm(Regularizer):
    """Group sparsity (Scardapane et al., Neurocomputing 241, 2017): the columns of
    a weight matrix (output_dim x input_dim) form consecutive groups of the given
    sizes; the term is lambda * sum_g sqrt(size_g) * ||W[:, g]||_2.
    stabilizing_val is added under the square root."""

    def __init__(self, reg_lambda, groups, stabilizing_val=0):
        super().__init__()
        assert reg_lambda >= 0, "regularization weight should be 0 or positive"
        assert isinstance(groups, list), "groups needs to be a list"
        self.reg_lambda = reg_lambda
        self.groups = groups
        self.stabilizing_val = stabilizing_val

    def _run_on_loss(self, net, param_init_net, param, grad=None):
        squared = net.Sqr(param)
        column_sums = net.ReduceSum(squared, axes=[0], keepdims=0)
        group_sums = net.LengthsSum([column_sums, net.GivenTensorIntFill(
            [], 1, shape=[len(self.groups)], values=self.groups)])
        if self.stabilizing_val:
            net.Add([group_sums, net.ConstantFill([], 1, value=self.stabilizing_val)], [group_sums], broadcast=1)
        norms = net.Sqrt(group_sums)
        # the group-size weight and lambda in one product
        scaled = net.Mul([norms, net.GivenTensorFill(
            [], shape=[len(self.groups)], values=(np.sqrt(self.groups) * self.reg_lambda).tolist())],
            ["normalized_l2_norm_scaled"])
        return net.LpNorm(scaled, ["group_l1_nrom"], p=1)
