"""LearningRate: every policy against its formula (Caffe2's learning_rate_functors.h,
written out here), the output's type and shape, and the named errors."""
import math

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

ITERS = [0, 1, 2, 3, 5, 9, 10, 11, 25, 99, 100, 101, 250]


def lr_at(iteration, **kwargs):
    workspace.ResetWorkspace()
    workspace.FeedBlob("it", np.array([iteration], np.int64))
    workspace.RunOperatorOnce(core.CreateOperator("LearningRate", ["it"], ["lr"], **kwargs))
    return workspace.FetchBlob("lr")


def check(formula, base_lr=-0.1, **kwargs):
    for it in ITERS:
        got = lr_at(it, base_lr=base_lr, **kwargs)
        np.testing.assert_allclose(float(got[0]), base_lr * formula(it), rtol=2e-6, atol=1e-12,
                                   err_msg="%s at iteration %d" % (kwargs, it))


def test_output_is_one_float32():
    out = lr_at(3, base_lr=-0.5, policy="fixed")
    assert out.dtype == np.float32 and out.shape == (1,) and out[0] == -0.5


def test_fixed():
    check(lambda t: 1.0, policy="fixed")


def test_step():
    check(lambda t: 0.7 ** (t // 10), policy="step", stepsize=10, gamma=0.7)


def test_multistep():
    check(lambda t: 0.5 ** sum(t >= s for s in (10, 25, 100)), policy="multistep", stepsizes=[25, 10, 100], gamma=0.5)


def test_exp():
    gamma = float(np.float32(0.99))          # arguments are float32 in the OperatorDef
    check(lambda t: gamma ** t, policy="exp", gamma=0.99)


def test_inv():
    check(lambda t: (1 + 0.01 * t) ** -0.75, policy="inv", gamma=0.01, power=0.75)


def test_poly():
    check(lambda t: (1 - t / 300) ** 2.0, policy="poly", power=2.0, max_iter=300)


def test_linear_warmup():
    check(lambda t: 1.0 if t >= 10 else 0.2 + 0.8 * t / 10, policy="linearWarmup", start_multiplier=0.2, num_iter=10)


def test_constant_warmup():
    check(lambda t: 1.0 if t >= 11 else 0.3, policy="constantWarmup", multiplier=0.3, num_iter=11)


def test_constant_warmup_default_multiplier_is_half():
    check(lambda t: 1.0 if t >= 5 else 0.5, policy="constantWarmup", num_iter=5)


def test_alter():
    check(lambda t: 1.0 if t % 5 < 3 else 0.0, policy="alter", active_period=3, inactive_period=2)
    check(lambda t: 0.0 if t % 5 < 2 else 1.0, policy="alter", active_period=3, inactive_period=2, active_first=0)


def test_hill():
    def hill(t):
        if t < 10:
            return 0.1 + 0.9 * t / 10
        return max(0.2, (1 + 0.05 * (t - 10)) ** -1.5)
    check(hill, policy="hill", num_iter=10, start_multiplier=0.1, gamma=0.05, power=1.5, end_multiplier=0.2)


def test_gate():
    check(lambda t: 3.0 if t >= 9 else 0.25, policy="gate", multiplier_1=0.25, multiplier_2=3.0, num_iter=9)


def test_piece_warmup():
    check(lambda t: 0.1 if t < 5 else (0.4 if t < 20 else 0.9), policy="pieceWarmup",
          m1=0.1, n1=5, m2=0.4, n2=20, m3=0.9)


def test_composite_runs_each_sub_policy_on_the_global_iteration():
    # sub-policy 0 covers iterations 1..10, sub-policy 1 from 11 on (Caffe2 counts from 1)
    def composite(t):
        if t <= 10:
            return 0.9 ** t * 1.5
        return 0.5 ** (t // 4)
    check(composite, policy="composite", sub_policy_num_iters=[10, 50],
          sub_policy_0_policy="exp", sub_policy_0_gamma=0.9, sub_policy_0_lr_scale=1.5,
          sub_policy_1_policy="step", sub_policy_1_stepsize=4, sub_policy_1_gamma=0.5)


def test_cyclical():
    base, top, step = -0.1, -0.5, 10

    def cyclical(t):
        cycle = t // (2 * step) + 1
        x = abs(t / step - 2 * cycle + 1)
        return 1 + (abs(top) / abs(base) - 1) * max(0.0, 1 - x) * 0.9 ** (t // (2 * step))
    check(cyclical, base_lr=base, policy="cyclical", max_lr=top, stepsize=step, decay=0.9)


@pytest.mark.parametrize("t_mult", [1.0, 2.0])
def test_cosine(t_mult):
    lo, hi, period, shrink = 0.05, 0.5, 20, 0.9

    def cosine(t):
        if t_mult != 1.0:
            i = math.floor(math.log(1 - t / period * (1 - t_mult)) / math.log(t_mult))
            t_i = t_mult ** i * period
            t_cur = t - (1 - t_mult ** i) / (1 - t_mult) * period
        else:
            i = t // period
            t_i, t_cur = period, t - period * i
        a, b = lo * shrink ** i, hi * shrink ** i
        return a + 0.5 * (b - a) * (1 + math.cos(math.pi * t_cur / t_i))
    check(cosine, base_lr=1.0, policy="cosine", min_lr=lo, max_lr=hi, period=period, t_mult=t_mult, lr_shrink=shrink)


def test_constant_then_linear_warmup():
    def warm(t):
        if t < 5:
            return 0.2
        if t < 25:
            return 0.2 + 0.8 * (t - 5) / 20
        return 1.0
    check(warm, policy="constantThenLinearWarmup", start_warmup_multiplier=0.2,
          constant_warmup_num_iter=5, linear_warmup_num_iter=20)


def test_composite_cosine_after_warmup():
    def f(t):
        if t < 3:
            return 0.1
        if t < 10:
            return 0.1 + 0.9 * (t - 3) / 7
        u = t - 10
        i = u // 30
        a, b = 0.01 * 0.5 ** i, 0.2 * 0.5 ** i
        return a + 0.5 * (b - a) * (1 + math.cos(math.pi * (u - 30 * i) / 30))
    check(f, base_lr=1.0, policy="compositeCosine", start_warmup_multiplier=0.1, constant_warmup_num_iter=3,
          linear_warmup_num_iter=7, cosine_min_lr=0.01, cosine_max_lr=0.2, cosine_period=30, cosine_lr_shrink=0.5)


def test_learning_rate_follows_the_counter_in_a_net():
    workspace.ResetWorkspace()
    workspace.FeedBlob("it", np.array([0], np.int64))
    net = core.Net("lr_schedule")
    net.Iter("it", "it")
    net.LearningRate("it", "lr", base_lr=-1.0, policy="step", stepsize=2, gamma=0.5)
    workspace.CreateNet(net)
    seen = []
    for _ in range(6):
        workspace.RunNet(net.Name())
        seen.append(float(workspace.FetchBlob("lr")[0]))
    assert seen == [-1.0, -0.5, -0.5, -0.25, -0.25, -0.125]


@pytest.mark.parametrize("kwargs, text", [
    (dict(policy="fixed"), "required argument 'base_lr'"),
    (dict(base_lr=0.1), "required argument 'policy'"),
    (dict(base_lr=0.1, policy="sawtooth"), "unknown learning rate policy 'sawtooth'"),
    (dict(base_lr=0.1, policy="step", gamma=0.5), "policy 'step': stepsize and gamma must be positive"),
    (dict(base_lr=0.1, policy="poly", power=1.0), "policy 'poly': power and max_iter must be positive"),
    (dict(base_lr=0.1, policy="multistep", gamma=0.5), "policy 'multistep': needs a non-empty stepsizes"),
    (dict(base_lr=0.1, policy="composite"), "at least one sub learning rate policy"),
    (dict(base_lr=0.1, policy="composite", sub_policy_num_iters=[5, 0], sub_policy_0_policy="fixed",
          sub_policy_1_policy="fixed"), "sub learning rate policy 1 should be positive"),
    (dict(base_lr=0.1, policy="composite", sub_policy_num_iters=[5], sub_policy_0_policy="composite"),
     "composite LR policy as a subpolicy"),
    (dict(base_lr=0.1, policy="cosine", min_lr=0.5, max_lr=0.1), "max_lr >= min_lr"),
])
def test_bad_arguments_are_named(kwargs, text):
    with pytest.raises(Caffe2Error, match="LearningRate.*" + text):
        lr_at(1, **kwargs)


def test_iteration_must_be_one_integer():
    workspace.ResetWorkspace()
    workspace.FeedBlob("it", np.array([1.0, 2.0], np.float32))
    with pytest.raises(Caffe2Error, match="LearningRate.*blob 'it'.*one int64 value"):
        workspace.RunOperatorOnce(core.CreateOperator("LearningRate", ["it"], ["lr"], base_lr=0.1, policy="fixed"))
