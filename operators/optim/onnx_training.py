"""ONNX optimizer steps (domain ai.onnx.preview.training): Adagrad, Momentum,
Adam. Inputs are R (learning rate), T (step count), then the tensors of each
group (X..., G..., and the optimizer's state) as the spec orders them."""
import numpy as np

from caffe2py.kernels.cpu.optim import onnx_optim as ok

from ..onnx_base import onnx_op

DOMAIN = "ai.onnx.preview.training"


def _groups(ctx, args, n_groups):
    rest = args[2:]
    if len(rest) % n_groups:
        raise ctx.error("%d tensor inputs do not split into %d equal groups" % (len(rest), n_groups))
    k = len(rest) // n_groups
    return [rest[i * k:(i + 1) * k] for i in range(n_groups)]


@onnx_op("Adagrad", (1, None), domain=DOMAIN)
def adagrad(ctx):
    decay, eps, norm = ctx.float("decay_factor", 0.0), ctx.float("epsilon", 0.0), ctx.float("norm_coefficient", 0.0)

    def run(*args):
        r, t = float(args[0]), float(args[1])
        xs, gs, hs = _groups(ctx, args, 3)
        results = [ok.adagrad(r, t, x, g, h, decay, eps, norm) for x, g, h in zip(xs, gs, hs)]
        return tuple([x for x, _ in results] + [h for _, h in results])
    return run


@onnx_op("Momentum", (1, None), domain=DOMAIN)
def momentum(ctx):
    alpha, beta = ctx.float("alpha"), ctx.float("beta")
    nesterov = ctx.string("mode", "standard") == "nesterov"
    norm = ctx.float("norm_coefficient", 0.0)

    def run(*args):
        r, t = float(args[0]), float(args[1])
        xs, gs, vs = _groups(ctx, args, 3)
        results = [ok.momentum(r, t, x, g, v, alpha, beta, norm, nesterov) for x, g, v in zip(xs, gs, vs)]
        return tuple([x for x, _ in results] + [v for _, v in results])
    return run


@onnx_op("Adam", (1, None), domain=DOMAIN)
def adam(ctx):
    alpha, beta = ctx.float("alpha", 0.9), ctx.float("beta", 0.999)
    eps = ctx.float("epsilon", 1e-6)
    norm, norm_post = ctx.float("norm_coefficient", 0.0), ctx.float("norm_coefficient_post", 0.0)

    def run(*args):
        r, t = float(args[0]), float(args[1])
        xs, gs, vs, hs = _groups(ctx, args, 4)
        results = [ok.adam(r, t, x, g, v, h, alpha, beta, eps, norm, norm_post)
                   for x, g, v, h in zip(xs, gs, vs, hs)]
        return tuple([o[0] for o in results] + [o[1] for o in results] + [o[2] for o in results])
    return run
