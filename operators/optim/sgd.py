"""Plain and momentum SGD: WeightedSum, ScatterWeightedSum, MomentumSGD,
MomentumSGDUpdate, SparseMomentumSGDUpdate (Caffe2's utility_ops / momentum_sgd_op).

Caffe2's build_sgd descends with a negative learning rate (LearningRate's base_lr is
-rate) through WeightedSum([param, ONE, grad, lr]); the momentum ops take a positive
rate and subtract."""
import numpy as np

from caffe2py import inplace
from caffe2py.kernels.cpu.optim import dense as D
from caffe2py.kernels.cpu.optim import sparse as S
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._optim_common import (as_rows, float32, like_inputs, same_size, scalar,
                            sparse_slices)

F32 = np.float32


# ----------------------------------------------------------------- WeightedSum

register_schema(OpSchema(
    "WeightedSum", num_inputs=lambda n: n > 0 and n % 2 == 0, num_outputs=1, allow_inplace={(0, 0)},
    inputs=("data_0", "weight_0"), outputs=("output",), inference=like_inputs(0),
    args=(Arg("grad_on_w", "bool", False, doc="(used by WeightedSumGradient)"),),
    doc="Y = sum_i weight_i * X_i over pairs (X_0, weight_0, X_1, weight_1, ...): X_i of equal "
        "size (float32 or float16), weight_i one float each. Only X_0 may be the output."))


@register_kernel("WeightedSum")
def weighted_sum(ctx):
    pairs = ctx.n_inputs // 2

    def run(*inputs):
        xs, ws = inputs[0::2], []
        x0 = xs[0]
        if not isinstance(x0, np.ndarray) or x0.dtype not in (np.float32, np.float16):
            raise ctx.input_error(0, "X_0 must be a float32 or float16 tensor, got %s"
                                  % getattr(x0, "dtype", type(x0).__name__))
        if x0.size == 0:
            raise ctx.input_error(0, "X_0 must not be empty")
        for k in range(pairs):
            x = xs[k]
            if k and (not isinstance(x, np.ndarray) or x.dtype != x0.dtype):
                raise ctx.input_error(2 * k, "X_%d must be %s like X_0, got %s"
                                      % (k, x0.dtype, getattr(x, "dtype", type(x).__name__)))
            if k:
                same_size(ctx, 2 * k, x, x0.size, "X_0 '%s'" % ctx.inputs[0])
            ws.append(F32(scalar(ctx, 2 * k + 1, inputs[2 * k + 1], "weight_%d must hold one value" % k)))
        return D.weighted_sum(xs, ws)
    return run


# ----------------------------------------------------------------- ScatterWeightedSum

register_schema(OpSchema(
    "ScatterWeightedSum", num_inputs=lambda n: n >= 5 and n % 2 == 1, num_outputs=1,
    enforce_inplace={(0, 0)}, inputs=("X_0", "Weight_0", "Indices", "X_1", "Weight_1"),
    outputs=("X_0",), inference=like_inputs(0),
    doc="In place on X_0: for each i, X_0[INDICES[i]] = Weight_0 * X_0[INDICES[i]] + sum_k "
        "Weight_k * X_k[i] (X_k shaped INDICES.shape + X_0.shape[1:]). Indices apply one after "
        "another as in Caffe2: a duplicated index is scaled by Weight_0 once per occurrence and "
        "gets every slice added. float32 tables; an out-of-range index raises before any write."))


@register_kernel("ScatterWeightedSum")
def scatter_weighted_sum(ctx):
    pairs = (ctx.n_inputs - 3) // 2

    def run(table, weight0, indices, *rest):
        if isinstance(table, np.ndarray) and table.size == 0:
            raise ctx.input_error(0, "X_0 must not be empty")
        rows = block = flat = None
        slices = []
        for k in range(pairs):
            x = rest[2 * k]
            rows, block, flat = sparse_slices(ctx, 0, 2, 3 + 2 * k, table, indices, x)
            w = F32(scalar(ctx, 4 + 2 * k, rest[2 * k + 1], "Weight_%d must hold one value" % (k + 1)))
            slices.append((np.ascontiguousarray(x).reshape(flat.size, block), w))
        w0 = F32(scalar(ctx, 1, weight0, "Weight_0 must hold one value"))
        table = inplace.claim(table)
        rows2d = as_rows(table, rows, block)
        saved = inplace.row_buffer(rows2d, flat)
        S.scatter_weighted_sum(rows2d, flat, w0, slices, saved)
        inplace.remember_rows(rows2d, flat, saved)
        return table
    return run


# ----------------------------------------------------------------- MomentumSGD(Update)

_MOMENTUM_ARGS = (Arg("momentum", "float", 0.0, doc="momentum coefficient"),
                  Arg("nesterov", "bool", False, doc="Nesterov accelerated gradient"))

register_schema(OpSchema(
    "MomentumSGD", num_inputs=3, num_outputs=2, allow_inplace={(0, 0), (1, 1)},
    inputs=("grad", "moment", "lr"), outputs=("output_grad", "output_moment"), args=_MOMENTUM_ARGS,
    inference=like_inputs(0, 1),
    doc="(step, moment') from (grad, moment, lr): step = lr * grad + momentum * moment = moment', "
        "or with nesterov moment' = momentum * moment + lr * grad and step = (1 + momentum) * "
        "moment' - momentum * moment. Does not touch the parameter."))

register_schema(OpSchema(
    "MomentumSGDUpdate", num_inputs=4, num_outputs=3, allow_inplace={(0, 0), (1, 1), (3, 2)},
    inputs=("grad", "moment", "lr", "param"), outputs=("output_grad", "output_moment", "output_param"),
    args=_MOMENTUM_ARGS, inference=like_inputs(0, 1, 3),
    doc="MomentumSGD plus param' = param - step."))


def _dense_momentum(ctx, grad, moment, lr, momentum, nesterov):
    float32(ctx, 0, grad)
    float32(ctx, 1, moment)
    same_size(ctx, 1, moment, grad.size, "grad '%s'" % ctx.inputs[0])
    rate = F32(scalar(ctx, 2, lr, "lr must hold one value"))
    return D.momentum_sgd(grad, moment.reshape(grad.shape), rate, momentum, nesterov)


@register_kernel("MomentumSGD")
def momentum_sgd(ctx):
    momentum, nesterov = F32(ctx.float("momentum")), ctx.bool("nesterov")

    def run(grad, moment, lr):
        step, new = _dense_momentum(ctx, grad, moment, lr, momentum, nesterov)
        return step, new.reshape(moment.shape)
    return run


@register_kernel("MomentumSGDUpdate")
def momentum_sgd_update(ctx):
    momentum, nesterov = F32(ctx.float("momentum")), ctx.bool("nesterov")

    def run(grad, moment, lr, param):
        float32(ctx, 3, param)
        same_size(ctx, 3, param, grad.size, "grad '%s'" % ctx.inputs[0])
        step, new = _dense_momentum(ctx, grad, moment, lr, momentum, nesterov)
        return step, new.reshape(moment.shape), param - step.reshape(param.shape)
    return run


register_schema(OpSchema(
    "SparseMomentumSGDUpdate", num_inputs=5, num_outputs=3, allow_inplace={(0, 0)},
    enforce_inplace={(1, 1), (3, 2)}, inputs=("grad", "moment", "lr", "param", "indices"),
    outputs=("output_grad", "output_moment", "output_param"), args=_MOMENTUM_ARGS,
    inference=like_inputs(0, 1, 3),
    doc="MomentumSGDUpdate on the rows of param and moment named by indices (grad holds one row "
        "per index), in place; output_grad gets the steps. Indices apply in order (a duplicate "
        "sees the first update's moment)."))


@register_kernel("SparseMomentumSGDUpdate")
def sparse_momentum_sgd_update(ctx):
    momentum, nesterov = F32(ctx.float("momentum")), ctx.bool("nesterov")

    def run(grad, moment, lr, param, indices):
        rows, block, flat = sparse_slices(ctx, 3, 4, 0, param, indices, grad)
        float32(ctx, 1, moment)
        same_size(ctx, 1, moment, param.size, "param '%s'" % ctx.inputs[3])
        rate = F32(scalar(ctx, 2, lr, "lr must hold one value"))
        param = inplace.claim(param)
        moment = inplace.claim(moment)
        p2, m2 = as_rows(param, rows, block), as_rows(moment, rows, block)
        saved = inplace.row_buffer(p2, flat), inplace.row_buffer(m2, flat)
        steps = S.sparse_momentum_sgd(p2, m2, flat, np.ascontiguousarray(grad).reshape(flat.size, block),
                                      rate, momentum, nesterov, None if saved[0] is None else saved)
        for table, rows_saved in zip((p2, m2), saved):
            inplace.remember_rows(table, flat, rows_saved)
        return steps.reshape(grad.shape), moment, param
    return run
