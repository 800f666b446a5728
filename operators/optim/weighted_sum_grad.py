"""WeightedSum's gradient (Caffe2's GetWeightedSumGradient in utility_ops):
WeightedSumGradient(dY, X_0, w_0, X_1, w_1, ...) -> dX_0, dX_1, ... and, with
grad_on_w=1, dw_0, dw_1, ... after them."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.optim import dense as D
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._optim_common import same_size, scalar


def _outputs_fit(n_in, n_out):
    pairs = (n_in - 1) // 2
    return n_out in (pairs, 2 * pairs)


def _infer(ctx, ins):
    pairs = (len(ins) - 1) // 2
    dw = TensorType((1,), ins[2].dtype) if ins[2].known else ins[2]
    return ([ins[0]] * pairs + [dw] * pairs)[:ctx.n_outputs]


register_schema(OpSchema(
    "WeightedSumGradient", num_inputs=lambda n: n > 0 and n % 2 == 1, num_outputs=(1, None),
    inputs_outputs_check=_outputs_fit, inputs=("dY", "X_0", "weight_0"), outputs=("dX_0",),
    args=(Arg("grad_on_w", "bool", False, doc="also output each weight's gradient (after the dX_i)"),),
    inference=_infer,
    doc="Gradient of WeightedSum: dX_i = weight_i * dY (dY's shape and type); with grad_on_w=1 also "
        "dw_i = sum(dY * X_i), one float32 value each."))


@register_kernel("WeightedSumGradient")
def weighted_sum_gradient(ctx):
    pairs = (ctx.n_inputs - 1) // 2
    grad_on_w = ctx.bool("grad_on_w")
    if ctx.n_outputs != (2 * pairs if grad_on_w else pairs):
        raise ctx.error("%d pairs (X_i, weight_i) give %d outputs with grad_on_w=%d, got %d"
                        % (pairs, 2 * pairs if grad_on_w else pairs, grad_on_w, ctx.n_outputs))

    def run(dy, *pairs_in):
        if not isinstance(dy, np.ndarray) or dy.dtype not in (np.float32, np.float16):
            raise ctx.input_error(0, "dY must be a float32 or float16 tensor, got %s"
                                  % getattr(dy, "dtype", type(dy).__name__))
        weights = [np.float32(scalar(ctx, 2 * k + 2, pairs_in[2 * k + 1], "weight_%d must hold one value" % k))
                   for k in range(pairs)]
        xs = pairs_in[0::2]
        if grad_on_w:
            for k, x in enumerate(xs):
                same_size(ctx, 2 * k + 1, x, dy.size, "dY '%s'" % ctx.inputs[0])
        dxs, dws = D.weighted_sum_grad(dy, xs, weights, grad_on_w)
        out = tuple(dxs) + tuple(dws)
        return out[0] if len(out) == 1 else out
    return run


@register_gradient("WeightedSum")
def _weighted_sum_maker(g):
    n = len(g.def_.input)
    grad_on_w = bool(g.arg("grad_on_w", 0))
    # dw_i reads X_i: with grad_on_w an in-place X_0 (overwritten by Y) is a named error
    ins = [g.GO(0)] + [g.input_value(i) if grad_on_w and i % 2 == 0 else g.I(i) for i in range(n)]
    outs = [g.GI(i) for i in range(0, n, 2)]
    if grad_on_w:
        outs += [g.GI(i) for i in range(1, n, 2)]
    return [g.op("WeightedSumGradient", ins, outs)]
