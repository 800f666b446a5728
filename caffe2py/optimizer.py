"""caffe2.python.optimizer: adds the update ops for every trained parameter of a model.

    model.AddGradientOperators([loss])          # fills model.param_to_grad
    optimizer.build_sgd(model, base_learning_rate=0.1, policy="step", stepsize=1, gamma=0.999)

The blobs are Caffe2's: `optimizer_iteration` (int64, 0 in param_init_net, stepped by
AtomicIter under `iteration_mutex` in model.net), one learning-rate blob per optimizer
(`SgdOptimizer_0_lr_cpu`: LearningRate with base_lr = -rate, so updates add lr * step),
and per parameter `<param>_momentum` (SGD with momentum), `<param>_squared_sum` or
`<param>_avg_squared_sum` (Adagrad, rowWise), `<param>_first_moment` and
`<param>_second_moment` / `<param>_avg_second_moment` (Adam). A dense gradient gets
WeightedSum / MomentumSGDUpdate / Adagrad / Adam; a GradientSlice (indices, values)
gets ScatterWeightedSum / SparseMomentumSGDUpdate / SparseAdagrad or
RowWiseSparseAdagrad / SparseAdam or RowWiseSparseAdam. FTRL (build_ftrl) keeps
`<param>_ftrl_nz` and adds Ftrl / SparseFtrl; `lars=` (SGD, Adagrad) scales each dense
parameter's learning rate by a Lars op.

Options of Caffe2's optimizers whose ops caffe2py lacks (pruning masks, SWA, EMA,
weight scaling, RAdam, lr adaption, sparse deduplication) raise a Caffe2Error naming
the option when set.
"""
import copy
import logging
from collections import defaultdict, namedtuple

import numpy as np

from . import core, scope, utils, workspace
from .errors import Caffe2Error
from .modeling import parameter_info
from .proto import caffe2_pb2

_LEARNING_RATE_INJECTION = "lr_injection"

AuxOptimizerParams = namedtuple("AuxOptimizerParams", ["local", "shared"])
_optimizer_instance_count = defaultdict(int)

log = logging.getLogger("caffe2py")


def reset_optimizer_instance_count():
    """Restart the per-class instance numbers that go into learning-rate blob names."""
    _optimizer_instance_count.clear()


def _is_slice(grad):
    """A GradientSlice (core's namedtuple of indices and values) or anything shaped so."""
    return hasattr(grad, "indices") and hasattr(grad, "values") and not isinstance(grad, core.BlobReference)


def _unsupported(option, what="the ops it needs are not in caffe2py"):
    raise Caffe2Error("optimizer option '%s' is not supported: %s" % (option, what))


def _require_ops(option, *ops):
    missing = [op for op in ops if not core.IsOperator(op)]
    if missing:
        _unsupported(option, "it needs op(s) %s, which caffe2py does not provide" % ", ".join(missing))


class Optimizer:
    def __init__(self):
        self._aux_params = AuxOptimizerParams(local=[], shared=[])
        self._instance_num = _optimizer_instance_count[self.__class__.__name__]
        _optimizer_instance_count[self.__class__.__name__] += 1
        self._lr_multiplier = None
        self._local_lr_multiplier = None
        self._local_lr_multiplier_on_gpu = False
        self._use_dedicated_lr_iteration_counter = False

    def __call__(self, net, param_init_net, param, grad=None):
        """Add the update ops for one parameter: a ParameterInfo with .grad set, or a
        blob and its gradient."""
        if grad is None:
            if not isinstance(param, parameter_info.ParameterInfo) or param.grad is None:
                raise Caffe2Error("optimizer: expected a ParameterInfo with a gradient, got %r" % (param,))
        else:
            if isinstance(param, str):
                param = core.BlobReference(param)
            param = parameter_info.ParameterInfo(param_id=None, param=param, grad=grad)
        self._run(net, param_init_net, param)

    def _run(self, net, param_init_net, param_info):
        raise Caffe2Error("%s does not implement _run" % type(self).__name__)

    def get_cpu_blob_name(self, base_str, node_name=""):
        return "%s_%d_%s%s_cpu" % (self.__class__.__name__, self._instance_num, base_str, node_name)

    def get_gpu_blob_name(self, base_str, gpu_id, node_name):
        return "%s_%d_%s%s_gpu%d" % (self.__class__.__name__, self._instance_num, base_str, node_name, gpu_id)

    @property
    def attributes(self):
        attr = copy.deepcopy(self.__dict__)
        del attr["_instance_num"]
        return attr

    @property
    def use_dedicated_lr_iteration_counter(self):
        return self._use_dedicated_lr_iteration_counter

    @use_dedicated_lr_iteration_counter.setter
    def use_dedicated_lr_iteration_counter(self, val):
        self._use_dedicated_lr_iteration_counter = val

    def make_unique_blob_name(self, base_str):
        """A blob name unique to this optimizer instance and the current device."""
        current = scope.CurrentDeviceScope()
        if current is None:
            return self.get_cpu_blob_name(base_str)
        if current.device_type == caffe2_pb2.CUDA:
            return self.get_gpu_blob_name(base_str, current.device_id, current.node_name)
        return self.get_cpu_blob_name(base_str, current.node_name)

    def build_lr(self, net, param_init_net, base_learning_rate, learning_rate_blob=None,
                 policy="fixed", iter_val=0, **kwargs):
        """(lr blob, iteration blob): the shared iteration counter and
        LearningRate(iteration) with base_lr = -base_learning_rate (descent)."""
        if learning_rate_blob is None:
            learning_rate_blob = self.make_unique_blob_name("lr")
        if self._use_dedicated_lr_iteration_counter:
            iteration = utils.BuildUniqueMutexIter(param_init_net, net, iter=utils.OPTIMIZER_ITERATION_LR_NAME,
                                                   iter_mutex=utils.ITERATION_MUTEX_LR_NAME, iter_val=iter_val)
        else:
            iteration = utils.BuildUniqueMutexIter(param_init_net, net, iter_val=iter_val)
        if not net.BlobIsDefined(learning_rate_blob):
            lr = net.LearningRate([iteration], learning_rate_blob, base_lr=-base_learning_rate,
                                  policy=policy, **kwargs)
        else:
            lr = net.GetBlobRef(learning_rate_blob)
        if self._lr_multiplier is not None:
            multiplier = net.CopyFromCPUInput(self._lr_multiplier, self.make_unique_blob_name("lr_multiplier"))
            lr = net.Mul([lr, multiplier], self.make_unique_blob_name("scaled_lr"), broadcast=1)
        if self._local_lr_multiplier is not None:
            lr = net.Mul([lr, self._local_lr_multiplier], self.make_unique_blob_name("local_scaled_lr"),
                         broadcast=1)
        return lr, iteration

    def build_non_lr_iter(self, net, param_init_net, iter_val=0):
        if not self._use_dedicated_lr_iteration_counter:
            raise Caffe2Error("build_non_lr_iter is for optimizers with a dedicated learning-rate counter")
        iteration = utils.BuildUniqueMutexIter(param_init_net, net, iter_val=iter_val)
        hint = self.make_unique_blob_name("iter_placement_hint")
        if not net.BlobIsDefined(hint):
            net.LearningRate([iteration], hint, base_lr=1.0, policy="fixed")
        return iteration

    def add_lr_multiplier(self, lr_multiplier):
        """Multiply every learning rate built from now on by this blob."""
        self._lr_multiplier = lr_multiplier

    def _add_local_lr_multiplier(self, local_lr_multiplier, is_gpu_blob=False):
        self._local_lr_multiplier = local_lr_multiplier
        self._local_lr_multiplier_on_gpu = is_gpu_blob

    def create_lars_inputs(self, param_init_net, weight_decay, trust, lr_max):
        """The Lars op's three scalar inputs, as Caffe2 fills them."""
        return (param_init_net.ConstantFill([], "weight_decay", shape=[1], value=weight_decay),
                param_init_net.ConstantFill([], "trust", shape=[1], value=trust),
                param_init_net.ConstantFill([], "lr_max", shape=[1], value=lr_max))

    def _add_lars_multiplier(self, net, param_init_net, param, grad):
        """LARS (dense gradients): this parameter's learning rate times
        Lars(param, grad) = clamp(trust / (|grad| / |param| + wd + offset), 0, lr_max)."""
        if self.lars < 0:
            raise Caffe2Error("lars must be >= 0, got %s" % self.lars)
        wd, trust, lr_max = self.create_lars_inputs(param_init_net, 0.0, 1.0, float(np.finfo(np.float32).max))
        multiplier = net.Lars([param, grad, wd, trust, lr_max], self.make_unique_blob_name(str(param) + "_lars"),
                              offset=self.lars, lr_min=0.0)
        self._add_local_lr_multiplier(multiplier)

    def _clear_local_lr_multiplier(self):
        self._local_lr_multiplier = None
        self._local_lr_multiplier_on_gpu = False

    @staticmethod
    def dedup(net, sparse_dedup_aggregator, grad):
        if not _is_slice(grad):
            raise Caffe2Error("dedup only works for sparse gradients, got %r" % (grad,))
        if sparse_dedup_aggregator:
            _require_ops("sparse_dedup_aggregator", "DeduplicateGradientSlices")
            return net.DeduplicateGradientSlices(grad, aggregator=sparse_dedup_aggregator)
        return grad

    def get_auxiliary_parameters(self):
        """AuxOptimizerParams(local=[per-parameter blobs such as moments],
        shared=[blobs all parameters share, such as the iteration counter])."""
        return self._aux_params

    def scale_learning_rate(self, *args, **kwargs):
        raise Caffe2Error("%s does not implement scale_learning_rate" % type(self).__name__)


def _param_shape(param_init_net, param):
    """The parameter's shape by schema inference over param_init_net, or None."""
    try:
        shapes, _ = workspace.InferShapesAndTypes([param_init_net])
    except Caffe2Error:
        return None
    return shapes.get(str(param))


def _one_blob(param_init_net):
    dev = scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU)
    name = "ONE_{}_{}{}".format(dev.device_type, dev.device_id, dev.node_name)
    if param_init_net.BlobIsDefined(name):
        return param_init_net.GetBlobRef(name)
    return param_init_net.ConstantFill([], name, shape=[1], value=1.0)


class SgdOptimizer(Optimizer):
    def __init__(self, base_learning_rate=0.01, policy="fixed", momentum=0.0, nesterov=True,
                 sparse_dedup_aggregator=None, lars=None, **kwargs):
        super().__init__()
        self.base_learning_rate = base_learning_rate
        self.policy = policy
        self.momentum = momentum
        self.nesterov = nesterov
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.lars = lars
        self.init_kwargs = kwargs

    def _run(self, net, param_init_net, param_info):
        param, grad = param_info.blob, param_info.grad
        if self.base_learning_rate == 0:
            return
        if self.base_learning_rate < 0:
            raise Caffe2Error("expect positive base learning rate, got %s" % self.base_learning_rate)
        self._clear_local_lr_multiplier()
        if self.lars is not None and not _is_slice(grad):
            self._add_lars_multiplier(net, param_init_net, param, grad)
        # WeightedSum adds lr * grad: a negative lr; the momentum ops subtract: a positive one
        lr_sign = -1 if self.momentum else 1
        lr, _ = self.build_lr(net, param_init_net, base_learning_rate=self.base_learning_rate * lr_sign,
                              policy=self.policy, **self.init_kwargs)
        one = _one_blob(param_init_net)
        self._aux_params.shared.append(one)
        if self.momentum > 0:
            momentum_data = param_init_net.ConstantFill(param, str(param) + "_momentum", value=0.0)
            self._aux_params.local.append(momentum_data)
        if _is_slice(grad):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            if self.momentum > 0:
                net.SparseMomentumSGDUpdate([grad.values, momentum_data, lr, param, grad.indices],
                                            [grad.values, momentum_data, param],
                                            momentum=self.momentum, nesterov=self.nesterov)
            else:
                net.ScatterWeightedSum([param, one, grad.indices, grad.values, lr], param)
        elif self.momentum > 0:
            net.MomentumSGDUpdate([grad, momentum_data, lr, param], [grad, momentum_data, param],
                                  momentum=self.momentum, nesterov=self.nesterov)
        else:
            net.WeightedSum([param, one, grad, lr], param)

    def scale_learning_rate(self, scale):
        self.base_learning_rate *= scale


class MultiPrecisionSgdOptimizer(SgdOptimizer):
    """SGD for float16 parameters with float32 master copies (PseudoFP16Initializer):
    the float16 gradient is widened, the float32 copy updated with momentum, and the
    parameter narrowed from it."""

    def __init__(self, base_learning_rate=0.1, momentum=0.0, policy="fixed", nesterov=True,
                 sparse_dedup_aggregator=None, **kwargs):
        super().__init__(base_learning_rate=base_learning_rate, policy=policy, momentum=momentum,
                         nesterov=nesterov, sparse_dedup_aggregator=sparse_dedup_aggregator, **kwargs)

    def _run(self, net, param_init_net, param_info):
        param = param_info.blob
        param_fp32 = (param_info.blob_copy or {}).get(core.DataType.FLOAT)
        if param_fp32 is None:
            return SgdOptimizer._run(self, net, param_init_net, param_info)
        grad = param_info.grad
        if self.base_learning_rate == 0:
            return None
        if self.base_learning_rate < 0:
            raise Caffe2Error("expect positive base learning rate, got %s" % self.base_learning_rate)
        if _is_slice(grad):
            raise Caffe2Error("MultiPrecisionSgd does not support sparse gradients (parameter '%s')" % param)
        lr, _ = self.build_lr(net, param_init_net, base_learning_rate=-self.base_learning_rate,
                              policy=self.policy, **self.init_kwargs)
        momentum_data = param_init_net.ConstantFill(param_fp32, str(param) + "_momentum", value=0.0)
        self._aux_params.local.append(momentum_data)
        grad_fp32 = net.HalfToFloat(grad, str(grad) + "_fp32")
        net.MomentumSGDUpdate([grad_fp32, momentum_data, lr, param_fp32], [grad_fp32, momentum_data, param_fp32],
                              momentum=self.momentum, nesterov=self.nesterov)
        net.FloatToHalf(param_fp32, param)
        return None


class WeightDecayBuilder(Optimizer):
    """grad += weight_decay * param (dense gradients)."""

    def __init__(self, weight_decay):
        super().__init__()
        self.weight_decay = weight_decay

    def _run(self, net, param_init_net, param_info):
        dev = scope.CurrentDeviceScope() or core.DeviceOption(caffe2_pb2.CPU)
        one = _one_blob(param_init_net)
        name = "wd_{}_{}".format(dev.device_type, dev.device_id)
        wd = (param_init_net.GetBlobRef(name) if param_init_net.BlobIsDefined(name)
              else param_init_net.ConstantFill([], name, shape=[1], value=float(self.weight_decay)))
        if _is_slice(param_info.grad):
            raise Caffe2Error("weight decay does not support sparse gradients (parameter '%s')" % param_info.name)
        net.WeightedSum([param_info.grad, one, param_info.blob, wd], param_info.grad)


class AdagradOptimizer(Optimizer):
    def __init__(self, alpha=0.01, epsilon=1e-4, decay=1, weight_decay=0.0, policy="fixed",
                 sparse_dedup_aggregator=None, rowWise=False, engine="", lars=None,
                 output_effective_lr=False, output_effective_lr_and_update=False,
                 pruning_options=None, swa_options=None, ema_options=None, weight_scale=None,
                 counter_halflife=-1, use_dedicated_lr_iteration_counter=False, **kwargs):
        super().__init__()
        for option, value in (("pruning_options", pruning_options), ("swa_options", swa_options),
                              ("ema_options", ema_options), ("weight_scale", weight_scale)):
            if value:
                _unsupported(option)
        if counter_halflife > 0:
            _unsupported("counter_halflife", "RowWiseCounter and the counter input are not in caffe2py")
        self.alpha = alpha
        self.epsilon = epsilon
        self.decay = decay
        self.weight_decay = float(weight_decay)
        self.policy = policy
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.rowWise = rowWise
        self.engine = engine
        self.lars = lars
        self.output_effective_lr = output_effective_lr
        self.output_effective_lr_and_update = output_effective_lr_and_update
        self.counter_halflife = counter_halflife
        self.init_kwargs = kwargs
        self.use_dedicated_lr_iteration_counter = use_dedicated_lr_iteration_counter

    def _run(self, net, param_init_net, param_info):
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        self._clear_local_lr_multiplier()
        if self.lars is not None and not _is_slice(grad):
            self._add_lars_multiplier(net, param_init_net, param, grad)
        lr, _ = self.build_lr(net, param_init_net, base_learning_rate=self.alpha, policy=self.policy,
                              **self.init_kwargs)
        shape = _param_shape(param_init_net, param)
        if self.rowWise:
            if not _is_slice(grad):
                raise Caffe2Error("Adagrad with rowWise=True needs a sparse gradient (GradientSlice) for "
                                  "parameter '%s'; rowWise is not supported for dense gradients" % param)
            if shape is None:
                raise Caffe2Error("rowWise Adagrad: cannot infer the shape of parameter '%s' from "
                                  "param_init_net" % param)
            moment = param_init_net.ConstantFill([], str(param) + "_avg_squared_sum", shape=[shape[0]], value=0.0)
        else:
            moment = param_init_net.ConstantFill([param], str(param) + "_squared_sum", value=0.0)
        self._aux_params.local.append(moment)
        # Caffe2 skips weight decay on 1-D parameters (biases)
        weight_decay = 0.0 if shape is not None and len(shape) == 1 else self.weight_decay
        extra = {"weight_decay": weight_decay} if weight_decay > 0 else {}
        if self.engine:
            extra["engine"] = self.engine
        if _is_slice(grad):
            if self.decay != 1.0:
                raise Caffe2Error("decay is not implemented for SparseAdagrad and must be 1 (parameter '%s')" % param)
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            op = "RowWiseSparseAdagrad" if self.rowWise else "SparseAdagrad"
            net.__getattr__(op)([param, moment, grad.indices, grad.values, lr], [param, moment],
                                epsilon=self.epsilon, **extra)
        else:
            outputs = [param, moment]
            if self.output_effective_lr_and_update:
                outputs += [str(param) + "_effective_lr", str(param) + "_update"]
            elif self.output_effective_lr:
                outputs.append(str(param) + "_effective_lr")
            net.Adagrad([param, moment, grad, lr], outputs, epsilon=self.epsilon, decay=float(self.decay), **extra)

    def scale_learning_rate(self, scale):
        self.alpha *= scale


class AdamOptimizer(Optimizer):
    def __init__(self, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, policy="fixed",
                 use_lr_adaption=False, lr_alpha=0.01, normalized_lr_adaption=True,
                 sparse_dedup_aggregator=None, rowWise=False, engine="", enableRAdam=False,
                 use_smart_decay=False, **kwargs):
        super().__init__()
        if use_lr_adaption:
            _require_ops("use_lr_adaption", "LearningRateAdaption")
        if enableRAdam:
            _unsupported("enableRAdam", "Rectified Adam is not implemented in caffe2py's SparseAdam")
        if use_smart_decay:
            _require_ops("use_smart_decay", "SmartDecaySparseAdam")
        self.alpha = alpha
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.policy = policy
        self.use_lr_adaption = use_lr_adaption
        self.lr_alpha = lr_alpha
        self.normalized_lr_adaption = normalized_lr_adaption
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.rowWise = rowWise
        self.engine = engine
        self.enableRAdam = enableRAdam
        self.use_smart_decay = use_smart_decay
        self.init_kwargs = kwargs

    def _run(self, net, param_init_net, param_info):
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        lr, iteration = self.build_lr(net, param_init_net, base_learning_rate=self.alpha, policy=self.policy,
                                      **self.init_kwargs)
        m1 = param_init_net.ConstantFill([param], str(param) + "_first_moment", value=0.0)
        if self.rowWise:
            if not _is_slice(grad):
                raise Caffe2Error("Adam with rowWise=True needs a sparse gradient (GradientSlice) for "
                                  "parameter '%s'; rowWise is not supported for dense gradients" % param)
            shape = _param_shape(param_init_net, param)
            if shape is None:
                raise Caffe2Error("rowWise Adam: cannot infer the shape of parameter '%s' from "
                                  "param_init_net" % param)
            m2 = param_init_net.ConstantFill([], str(param) + "_avg_second_moment", shape=[shape[0]], value=0.0)
        else:
            m2 = param_init_net.ConstantFill([param], str(param) + "_second_moment", value=0.0)
        self._aux_params.shared.append(iteration)
        self._aux_params.local.append(m1)
        self._aux_params.local.append(m2)
        hyper = dict(beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon)
        if _is_slice(grad):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            op = "RowWiseSparseAdam" if self.rowWise else "SparseAdam"
            net.__getattr__(op)([param, m1, m2, grad.indices, grad.values, lr, iteration], [param, m1, m2], **hyper)
        else:
            net.Adam([param, m1, m2, grad, lr, iteration], [param, m1, m2], **hyper)

    def scale_learning_rate(self, scale):
        self.alpha *= scale


class FtrlOptimizer(Optimizer):
    """Caffe2's FtrlOptimizer: one n_z blob per parameter (its shape plus a last axis of 2:
    the accumulated squared gradient n and the z term), no learning-rate blob."""

    def __init__(self, alpha=0.01, beta=1e-4, lambda1=0, lambda2=0, sparse_dedup_aggregator=None, engine=""):
        super().__init__()
        self.alpha = alpha
        self.beta = beta
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.engine = engine

    def _run(self, net, param_init_net, param_info):
        param, grad = param_info.blob, param_info.grad
        if self.alpha <= 0:
            return
        nz = param_init_net.ConstantFill([param], str(param) + "_ftrl_nz", extra_shape=[2], value=0.0)
        self._aux_params.local.append(nz)
        hyper = dict(engine=self.engine, alpha=self.alpha, beta=self.beta, lambda1=self.lambda1,
                     lambda2=self.lambda2)
        if _is_slice(grad):
            grad = self.dedup(net, self.sparse_dedup_aggregator, grad)
            net.SparseFtrl([param, nz, grad.indices, grad.values], [param, nz], **hyper)
        else:
            net.Ftrl([param, nz, grad], [param, nz], **hyper)

    def scale_learning_rate(self, scale):
        self.alpha *= scale


class YellowFinOptimizer(Optimizer):
    """YellowFin (arXiv 1706.03471), an automatic tuner of momentum SGD, with a
    learning rate and momentum per parameter (Caffe2's YellowFinOptimizer): the
    YellowFin op updates the parameter and its seven state blobs in place. Dense
    gradients only."""

    # persistent scalars the YellowFin op keeps (kernels/cpu/optim/yellowfin.py)
    SCALARS_MEMORY_SIZE = 5

    def __init__(self, alpha=0.1, mu=0.0, beta=0.999, curv_win_width=20, zero_debias=True, epsilon=0.1 ** 6,
                 policy="fixed", sparse_dedup_aggregator=None, **kwargs):
        super().__init__()
        self.alpha = alpha
        self.mu = mu
        self.beta = beta
        self.curv_win_width = curv_win_width
        self.zero_debias = zero_debias
        self.epsilon = epsilon
        self.policy = policy
        self.sparse_dedup_aggregator = sparse_dedup_aggregator
        self.init_kwargs = kwargs

    def _run(self, net, param_init_net, param_info):
        param, grad = param_info.blob, param_info.grad
        if not self.alpha > 0:
            raise Caffe2Error("YellowFin: alpha (the initial learning rate) must be positive, got %r" % self.alpha)
        if _is_slice(grad):
            raise Caffe2Error("YellowFin does not support sparse gradients (parameter '%s')" % param)
        name = str(param)
        moment = param_init_net.ConstantFill([param], name + "_moment", value=0.0)
        curv_win = param_init_net.ConstantFill([], name + "_curv_win", shape=[self.curv_win_width], value=0.0)
        g_avg = param_init_net.ConstantFill([param], name + "_g_avg", value=0.0)
        g2_avg = param_init_net.ConstantFill([param], name + "_g2_avg", value=0.0)
        lr_avg = param_init_net.ConstantFill([], name + "_lr_avg", shape=[1], value=self.alpha)
        mu_avg = param_init_net.ConstantFill([], name + "_mu_avg", shape=[1], value=self.mu)
        memory = param_init_net.ConstantFill([], name + "_scalars_memory", shape=[self.SCALARS_MEMORY_SIZE],
                                             value=0.0)
        iteration = utils.BuildUniqueMutexIter(param_init_net, net)
        self._aux_params.shared.append(iteration)
        self._aux_params.local.extend([moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, memory])
        state = [param, moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, memory]
        net.YellowFin(state + [grad, iteration], state, beta=self.beta, epsilon=self.epsilon,
                      curv_win_width=self.curv_win_width, zero_debias=self.zero_debias)

    def scale_learning_rate(self, scale):
        self.alpha *= scale


# ----------------------------------------------------------------- building

def _infer_blob_devices(nets):
    """{blob: DeviceOption} from the ops that produce (or read) each blob."""
    devices = {}
    for net in nets:
        for op in net.Proto().op:
            if op.HasField("device_option"):
                for blob in list(op.output) + list(op.input):
                    devices.setdefault(blob, op.device_option)
    return devices


def get_param_device(param_name, grad, param_to_device=None, default_device=None):
    """The device a parameter's update ops run on: its producer's, else its gradient's."""
    param_to_device = param_to_device or {}
    if param_name in param_to_device:
        return param_to_device[param_name]
    names = [str(grad.values), str(grad.indices)] if _is_slice(grad) else [str(grad)]
    for name in names:
        if name in param_to_device:
            return param_to_device[name]
    return default_device


def get_lr_injection():
    """The current lr_injection multiplier (needs allow_lr_injection=True at build time)."""
    return workspace.FetchBlob(_LEARNING_RATE_INJECTION)


def set_lr_injection(lr_injection_value):
    """Set lr_injection, a multiplier of every learning rate (allow_lr_injection=True)."""
    workspace.FeedBlob(_LEARNING_RATE_INJECTION, np.array([float(lr_injection_value)], dtype=np.float32))


def _calc_norm_ratio(model, params, name_scope, param_to_device, max_gradient_norm):
    """Caffe2's gradient clipping by global norm: the learning-rate multiplier
    clip_norm / max(global_norm, clip_norm), global_norm the L2 norm of every
    gradient together (a sparse gradient's values)."""
    with core.NameScope(name_scope):
        squared_sums = []
        for i, info in enumerate(params):
            device = get_param_device(str(info.blob), info.grad, param_to_device)
            with core.DeviceScope(device) if device is not None else _no_scope():
                grad = info.grad.values if _is_slice(info.grad) else info.grad
                squared = model.net.SumSqrElements(grad, "grad_{}_squared_sum".format(i))
                squared_sums.append(model.net.EnsureCPUOutput(squared))
        with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
            full_sum = model.net.Sum(squared_sums, "grad_squared_full_sum")
            global_norm = model.net.Pow(full_sum, "global_norm", exponent=0.5)
            clip_norm = model.param_init_net.ConstantFill([], "clip_norm", shape=[], value=float(max_gradient_norm))
            max_norm = model.net.Max([global_norm, clip_norm], "max_norm")
            return model.net.Div([clip_norm, max_norm], "norm_ratio")


def _build(model, optimizer, weights_only=False, use_param_info_optim=True, max_gradient_norm=None,
           allow_lr_injection=False):
    model.Validate()
    param_to_device = _infer_blob_devices([model.param_init_net, model.net])
    params = [info for info in model.GetOptimizationParamInfo()
              if not weights_only or info.blob in model.weights]
    lr_multiplier = None
    if max_gradient_norm is not None:
        _require_ops("max_gradient_norm", "SumSqrElements", "Pow", "Max")
        lr_multiplier = _calc_norm_ratio(model, params, "norm_clipped_grad_update", param_to_device,
                                         max_gradient_norm)
    if allow_lr_injection:
        if not model.net.BlobIsDefined(_LEARNING_RATE_INJECTION):
            lr_injection = model.param_init_net.ConstantFill([], _LEARNING_RATE_INJECTION, shape=[1], value=1.0)
        else:
            lr_injection = _LEARNING_RATE_INJECTION
        lr_multiplier = lr_injection if lr_multiplier is None else \
            model.net.Mul([lr_injection, lr_multiplier], "lr_multiplier", broadcast=1)
    optimizer.add_lr_multiplier(lr_multiplier)
    for info in params:
        device = get_param_device(str(info.blob), info.grad, param_to_device)
        with core.DeviceScope(device) if device is not None else _no_scope():
            if info.optimizer is not None and use_param_info_optim:
                info.optimizer(model.net, model.param_init_net, info)
            else:
                optimizer(model.net, model.param_init_net, info)
    return optimizer


class _no_scope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def add_weight_decay(model, weight_decay):
    """L2 regularisation of the model's weights: grad += weight_decay * param."""
    _build(model, WeightDecayBuilder(weight_decay=weight_decay), weights_only=True, use_param_info_optim=False)


def build_sgd(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False, **kwargs):
    """SGD (policy, momentum, nesterov, ... in kwargs) for every parameter with a gradient."""
    return _build(model, SgdOptimizer(base_learning_rate, **kwargs), max_gradient_norm=max_gradient_norm,
                  allow_lr_injection=allow_lr_injection)


def build_multi_precision_sgd(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False,
                              **kwargs):
    return _build(model, MultiPrecisionSgdOptimizer(base_learning_rate, **kwargs),
                  max_gradient_norm=max_gradient_norm, allow_lr_injection=allow_lr_injection)


def build_adagrad(model, base_learning_rate, parameters=None, max_gradient_norm=None,  # noqa: ARG001
                  allow_lr_injection=False, **kwargs):
    """Adagrad (epsilon 1e-4, decay, weight_decay, rowWise, ...) for every parameter with a gradient."""
    return _build(model, AdagradOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm=max_gradient_norm,
                  allow_lr_injection=allow_lr_injection)


def build_adam(model, base_learning_rate, max_gradient_norm=None, allow_lr_injection=False, **kwargs):
    """Adam (beta1 0.9, beta2 0.999, epsilon 1e-8, rowWise, ...) for every parameter with a gradient."""
    return _build(model, AdamOptimizer(alpha=base_learning_rate, **kwargs), max_gradient_norm=max_gradient_norm,
                  allow_lr_injection=allow_lr_injection)


def build_ftrl(model, engine="SIMD", **kwargs):
    """FTRL-proximal (alpha 0.01, beta 1e-4, lambda1, lambda2) for every parameter with a
    gradient. Caffe2 asked for its SIMD engine; caffe2py has one Ftrl kernel and runs it
    for any engine name."""
    return _build(model, FtrlOptimizer(engine=engine, **kwargs))


def build_yellowfin(model, base_learning_rate=0.1, **kwargs):
    """YellowFin for every parameter with a (dense) gradient, starting from learning
    rate base_learning_rate."""
    return _build(model, YellowFinOptimizer(alpha=base_learning_rate, **kwargs))


def build_gftrl(model, engine="", **kwargs):  # noqa: ARG001
    _require_ops("build_gftrl", "GFtrl")
