"""Learning-rate policies: multiplier(iteration) functions of Caffe2's LearningRate op
(caffe2/sgd/learning_rate_functors.h). The op outputs base_lr * multiplier(iter).

Each factory takes the policy's parameters (already validated by the op) and returns
a function of the int iteration. `cosine` returns a learning rate rather than a
multiplier, as Caffe2's does (the op still multiplies it by base_lr).
"""
import math


def fixed():
    return lambda it: 1.0


def alter(active_period, inactive_period, active_first):
    """1 for active_period iterations, 0 for inactive_period (or the other way round)."""
    first = active_period if active_first else inactive_period

    def f(it):
        in_first = it % (active_period + inactive_period) < first
        return float(in_first == bool(active_first))
    return f


def step(stepsize, gamma):
    return lambda it: gamma ** (it // stepsize)


def multistep(stepsizes, gamma):
    """gamma ** (how many of the sorted stepsizes are <= it): Caffe's multistep."""
    marks = sorted(stepsizes)
    return lambda it: gamma ** sum(1 for s in marks if it >= s)


def exp(gamma):
    return lambda it: gamma ** it


def gate(multiplier_1, multiplier_2, num_iter):
    return lambda it: multiplier_2 if it >= num_iter else multiplier_1


def inv(gamma, power):
    return lambda it: (1.0 + gamma * it) ** (-power)


def poly(power, max_iter):
    return lambda it: (1.0 - it / max_iter) ** power


def linear_warmup(start_multiplier, num_iter):
    def f(it):
        if it >= num_iter:
            return 1.0
        return start_multiplier + (1.0 - start_multiplier) * it / num_iter
    return f


def constant_warmup(multiplier, num_iter):
    return lambda it: 1.0 if it >= num_iter else multiplier


def piece_warmup(m1, n1, m2, n2, m3):
    return lambda it: m1 if it < n1 else (m2 if it < n2 else m3)


def hill(num_iter, start_multiplier, gamma, power, end_multiplier):
    """Linear warmup for num_iter iterations, then inv decay, bounded below."""
    warm, decay = linear_warmup(start_multiplier, num_iter), inv(gamma, power)
    return lambda it: warm(it) if it < num_iter else max(end_multiplier, decay(it - num_iter))


def composite(items):
    """items: (num_iter, lr_scale, policy) in order; policy k runs from iteration
    1 + the previous num_iters on (Caffe2 counts from 1; iteration 0 uses the first),
    on the global iteration, times its lr_scale."""
    starts, start = [], 1
    for num_iter, scale, policy in items:
        starts.append((start, scale, policy))
        start += num_iter

    def f(it):
        chosen = starts[0]
        for entry in starts:
            if entry[0] <= it:
                chosen = entry
        return chosen[2](it) * chosen[1]
    return f


def cyclical(base_lr, max_lr, stepsize, decay):
    """Triangle of period 2 * stepsize between 1 and |max_lr| / |base_lr|, its height
    times decay per completed cycle."""
    def f(it):
        cycle = it // (2 * stepsize) + 1
        x = abs(it / stepsize - 2 * cycle + 1)
        return 1.0 + (abs(max_lr) / abs(base_lr) - 1.0) * max(0.0, 1.0 - x) * decay ** (it // (2 * stepsize))
    return f


def cosine(min_lr, max_lr, period, t_mult, lr_shrink):
    """SGDR: cosine from max_lr down to min_lr per period (periods grow by t_mult;
    both bounds shrink by lr_shrink per restart)."""
    def f(it):
        if t_mult != 1.0:
            i = math.floor(math.log(1.0 - it / period * (1.0 - t_mult)) / math.log(t_mult))
            t_i = t_mult ** i * period
            t_curr = it - (1.0 - t_mult ** i) / (1.0 - t_mult) * period
        else:
            i = math.floor(it / period)
            t_i = period
            t_curr = it - t_i * i
        shrink = lr_shrink ** i
        lo, hi = min_lr * shrink, max_lr * shrink
        return lo + 0.5 * (hi - lo) * (1.0 + math.cos(math.pi * t_curr / t_i))
    return f


def constant_then_linear_warmup(start_multiplier, constant_num_iter, linear_num_iter):
    const = constant_warmup(start_multiplier, constant_num_iter)
    linear = linear_warmup(start_multiplier, linear_num_iter)

    def f(it):
        if it < constant_num_iter:
            return const(it)
        if it < constant_num_iter + linear_num_iter:
            return linear(it - constant_num_iter)
        return 1.0
    return f


def _after_warmup(warmup, constant_num_iter, linear_num_iter, then):
    def f(it):
        if it < constant_num_iter + linear_num_iter:
            return warmup(it)
        return then(it - constant_num_iter - linear_num_iter)
    return f


def composite_cyclical(base_lr, start_multiplier, constant_num_iter, linear_num_iter,
                       max_lr, stepsize, decay):
    warm = constant_then_linear_warmup(start_multiplier, constant_num_iter, linear_num_iter)
    return _after_warmup(warm, constant_num_iter, linear_num_iter, cyclical(base_lr, max_lr, stepsize, decay))


def composite_cosine(start_multiplier, constant_num_iter, linear_num_iter, min_lr, max_lr,
                     period, t_mult, lr_shrink):
    warm = constant_then_linear_warmup(start_multiplier, constant_num_iter, linear_num_iter)
    return _after_warmup(warm, constant_num_iter, linear_num_iter, cosine(min_lr, max_lr, period, t_mult, lr_shrink))
