"""LearningRate (caffe2/sgd/learning_rate_op): base_lr * multiplier(iter) for Caffe2's
policies. Caffe2's optimizers pass base_lr = -rate: the update ops add lr * step.

Caffe2 only DCHECKs most policy arguments (a release build divides by a zero stepsize);
here every such condition is a named error at plan time. `multistep` is Caffe's
(BVLC) policy, which the issue asks for; late Caffe2 itself has no such policy.
"""
import numpy as np

from caffe2py.kernels.cpu.optim import lr_policies as P
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._optim_common import iteration

FLOAT = caffe2_pb2.TensorProto.FLOAT

# argument name -> (type, default), as Caffe2 reads them (per policy; sub-policies of
# `composite` read them with the prefix sub_policy_<k>_)
_DEFAULTS = {
    "active_first": ("bool", True), "active_period": ("int", -1), "inactive_period": ("int", -1),
    "num_iter": ("int", 0), "start_multiplier": ("float", 0.0), "gamma": ("float", 0.0),
    "power": ("float", 0.0), "end_multiplier": ("float", 0.0), "stepsize": ("int", 0),
    "stepsizes": ("ints", None), "multiplier_1": ("float", 1.0), "multiplier_2": ("float", 1.0),
    "max_iter": ("int", -1), "multiplier": ("float", 0.5), "m1": ("float", 0.5), "n1": ("int", 0),
    "m2": ("float", 0.5), "n2": ("int", 0), "m3": ("float", 0.5), "max_lr": ("float", None),
    "decay": ("float", 1.0), "min_lr": ("float", 0.1), "period": ("int", 50), "t_mult": ("float", 1.0),
    "lr_shrink": ("float", 0.99), "start_warmup_multiplier": ("float", 0.1),
    "constant_warmup_num_iter": ("int", 10000000), "linear_warmup_num_iter": ("int", 10000000),
    "cyclical_max_lr": ("float", 0.05), "cyclical_step_size": ("int", 1000000),
    "cyclical_decay": ("float", 1.0), "cosine_max_lr": ("float", 0.5), "cosine_min_lr": ("float", 0.1),
    "cosine_period": ("int", 50), "cosine_t_mult": ("float", 1.0), "cosine_lr_shrink": ("float", 0.99),
}
_MAX_LR_DEFAULT = {"cyclical": 0.005, "cosine": 0.5}

register_schema(OpSchema(
    "LearningRate", num_inputs=1, num_outputs=1, inputs=("iter",), outputs=("lr",),
    args=(Arg("base_lr", "float", None, required=True, doc="multiplied by the policy's value; "
                                                          "negative for descent"),
          Arg("policy", "string", None, required=True,
              doc="fixed, step, multistep, exp, inv, poly, linearWarmup, constantWarmup, alter, "
                  "hill, gate, pieceWarmup, composite, cyclical, cosine, constantThenLinearWarmup, "
                  "compositeCyclical, compositeCosine"),
          Arg("sub_policy_num_iters", "ints", None, doc="composite: iterations of each sub-policy"))
    + tuple(Arg(name, kind, default) for name, (kind, default) in _DEFAULTS.items()),
    inference=lambda ctx, ins: [TensorType((1,), FLOAT)],
    doc="lr = base_lr * policy(iter) for the int64 iteration counter, float32 of shape [1] (the "
        "shape Caffe2's shape inference gives it; late Caffe2 kernels wrote a 0-d scalar). Policies "
        "(multiplier at iteration t): fixed 1; step gamma^floor(t/stepsize); multistep "
        "gamma^#(stepsizes <= t); exp gamma^t; inv (1 + gamma t)^-power; poly (1 - t/max_iter)^power; "
        "linearWarmup start_multiplier + (1 - start_multiplier) t/num_iter until num_iter, then 1; "
        "constantWarmup multiplier until num_iter, then 1; and Caffe2's alter, hill, gate, "
        "pieceWarmup, composite (sub_policy_<k>_* arguments), cyclical, cosine, "
        "constantThenLinearWarmup, compositeCyclical, compositeCosine."))


class _Args:
    """Reads one policy's arguments (with a prefix inside composite) and checks them."""

    def __init__(self, ctx, prefix, policy):
        self.ctx, self.prefix, self.policy = ctx, prefix, policy

    def __call__(self, name, default=None):
        kind, fallback = _DEFAULTS[name]
        if default is None:
            default = fallback
        key = self.prefix + name
        if kind == "ints":
            return self.ctx.ints(key, default)
        if kind == "bool":
            return self.ctx.bool(key, default)
        return getattr(self.ctx, kind)(key, default)

    def need(self, ok, what):
        if not ok:
            raise self.ctx.error("policy '%s': %s" % (self.policy, what))


def _policy(ctx, policy, prefix, base_lr):
    a = _Args(ctx, prefix, policy)
    if policy == "fixed":
        return P.fixed()
    if policy == "alter":
        active, inactive = a("active_period"), a("inactive_period")
        a.need(active >= 0 and inactive >= 0 and active + inactive > 0,
               "active_period and inactive_period must be >= 0 and not both 0")
        return P.alter(active, inactive, a("active_first"))
    if policy == "hill":
        n, start, gamma, power, end = (a("num_iter"), a("start_multiplier"), a("gamma"), a("power"),
                                       a("end_multiplier"))
        a.need(n > 0 and gamma > 0 and power > 0, "num_iter, gamma and power must be positive")
        a.need(0 <= start <= 1 and 0 <= end <= 1, "start_multiplier and end_multiplier must be in [0, 1]")
        return P.hill(n, start, gamma, power, end)
    if policy == "step":
        stepsize, gamma = a("stepsize"), a("gamma")
        a.need(stepsize > 0 and gamma > 0, "stepsize and gamma must be positive")
        return P.step(stepsize, gamma)
    if policy == "multistep":
        stepsizes, gamma = a("stepsizes") or [], a("gamma")
        a.need(len(stepsizes) > 0 and gamma > 0, "needs a non-empty stepsizes list and gamma > 0")
        return P.multistep(stepsizes, gamma)
    if policy == "exp":
        gamma = a("gamma")
        a.need(gamma > 0, "gamma must be positive")
        return P.exp(gamma)
    if policy == "gate":
        return P.gate(a("multiplier_1"), a("multiplier_2"), a("num_iter"))
    if policy == "inv":
        gamma, power = a("gamma"), a("power")
        a.need(gamma > 0 and power > 0, "gamma and power must be positive")
        return P.inv(gamma, power)
    if policy == "poly":
        power, max_iter = a("power"), a("max_iter")
        a.need(power > 0 and max_iter > 0, "power and max_iter must be positive")
        return P.poly(power, max_iter)
    if policy == "linearWarmup":
        start = a("start_multiplier")
        a.need(start >= 0, "start_multiplier must be >= 0")
        return P.linear_warmup(start, a("num_iter"))
    if policy == "constantWarmup":
        multiplier = a("multiplier")
        a.need(multiplier > 0, "multiplier must be positive")
        return P.constant_warmup(multiplier, a("num_iter"))
    if policy == "pieceWarmup":
        return P.piece_warmup(a("m1"), a("n1"), a("m2"), a("n2"), a("m3"))
    if policy == "cyclical":
        max_lr, stepsize, decay = a("max_lr", _MAX_LR_DEFAULT["cyclical"]), a("stepsize"), a("decay")
        a.need(stepsize > 0 and base_lr != 0, "stepsize and base_lr must be non-zero (stepsize > 0)")
        return P.cyclical(base_lr, max_lr, stepsize, decay)
    if policy == "cosine":
        max_lr, min_lr = a("max_lr", _MAX_LR_DEFAULT["cosine"]), a("min_lr")
        period, t_mult, shrink = a("period"), a("t_mult"), a("lr_shrink")
        a.need(max_lr >= min_lr and period > 0 and t_mult > 0,
               "needs max_lr >= min_lr, period > 0 and t_mult > 0")
        return P.cosine(min_lr, max_lr, period, t_mult, shrink)
    if policy == "constantThenLinearWarmup":
        return P.constant_then_linear_warmup(a("start_warmup_multiplier"), a("constant_warmup_num_iter"),
                                             a("linear_warmup_num_iter"))
    if policy == "compositeCyclical":
        step_size = a("cyclical_step_size")
        a.need(step_size > 0 and base_lr != 0, "cyclical_step_size and base_lr must be non-zero")
        return P.composite_cyclical(base_lr, a("start_warmup_multiplier"), a("constant_warmup_num_iter"),
                                    a("linear_warmup_num_iter"), a("cyclical_max_lr"), step_size,
                                    a("cyclical_decay"))
    if policy == "compositeCosine":
        max_lr, min_lr, period, t_mult = (a("cosine_max_lr"), a("cosine_min_lr"), a("cosine_period"),
                                          a("cosine_t_mult"))
        a.need(max_lr >= min_lr and period > 0 and t_mult > 0,
               "needs cosine_max_lr >= cosine_min_lr, cosine_period > 0 and cosine_t_mult > 0")
        return P.composite_cosine(a("start_warmup_multiplier"), a("constant_warmup_num_iter"),
                                  a("linear_warmup_num_iter"), min_lr, max_lr, period, t_mult,
                                  a("cosine_lr_shrink"))
    if policy == "composite":
        if prefix:
            raise ctx.error("defining composite LR policy as a subpolicy of composite LR policy is not allowed")
        return _composite(ctx, base_lr)
    raise ctx.error("unknown learning rate policy '%s'%s" % (policy, " (sub-policy %s)" % prefix if prefix else ""))


def _composite(ctx, base_lr):
    counts = ctx.ints("sub_policy_num_iters") or []
    if not counts:
        raise ctx.error("policy 'composite': must specify at least one sub learning rate policy "
                        "(sub_policy_num_iters)")
    items = []
    for k, count in enumerate(counts):
        if count <= 0:
            raise ctx.error("policy 'composite': the number of iterations for sub learning rate "
                            "policy %d should be positive, got %d" % (k, count))
        prefix = "sub_policy_%d_" % k
        sub = ctx.string(prefix + "policy", "")
        items.append((count, ctx.float(prefix + "lr_scale", 1.0), _policy(ctx, sub, prefix, base_lr)))
    return P.composite(items)


@register_kernel("LearningRate")
def learning_rate(ctx):
    base_lr = ctx.float("base_lr")
    policy = ctx.string("policy", "")
    if not policy:
        raise ctx.error("must specify a learning rate policy")
    multiplier = _policy(ctx, policy, "", base_lr)

    def run(it):
        return np.array([base_lr * multiplier(iteration(ctx, 0, it))], dtype=np.float32)
    return run
