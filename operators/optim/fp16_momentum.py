"""FP16MomentumSGDUpdate (caffe2/sgd/fp16_momentum_sgd_op; CUDA-only in Caffe2, here on
the CPU too): MomentumSGDUpdate for float16 tables, computed in float32 and stored back
in each input's dtype (float16, or float32 as with Caffe2's fp32_update)."""
import numpy as np

from caffe2py.kernels.cpu.optim import dense as D
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._optim_common import like_inputs, same_size, scalar

F32 = np.float32

register_schema(OpSchema(
    "FP16MomentumSGDUpdate", num_inputs=4, num_outputs=3, allow_inplace={(0, 0), (1, 1), (3, 2)},
    inputs=("grad", "moment", "lr", "param"), outputs=("output_grad", "output_moment", "output_param"),
    args=(Arg("momentum", "float", 0.0), Arg("weight_decay", "float", 0.0, doc="g' = g + weight_decay * param"),
          Arg("nesterov", "bool", False), Arg("fp32_update", "bool", False, doc="accepted; the update is "
                                                                                 "always computed in float32")),
    inference=like_inputs(0, 1, 3),
    doc="g' = grad + weight_decay * param; step = lr * g' + momentum * moment (= moment'), or with "
        "nesterov moment' = momentum * moment + lr * g' and step = (1 + momentum) * moment' - momentum * "
        "moment; param' = param - step. float16 (or float32) tensors, float32 arithmetic."))


@register_kernel("FP16MomentumSGDUpdate")
def fp16_momentum_sgd_update(ctx):
    momentum, wd, nesterov = F32(ctx.float("momentum")), F32(ctx.float("weight_decay")), ctx.bool("nesterov")

    def run(grad, moment, lr, param):
        for k, a in ((0, grad), (1, moment), (3, param)):
            if not isinstance(a, np.ndarray) or a.dtype not in (np.float16, np.float32):
                raise ctx.input_error(k, "must be a float16 or float32 tensor, got %s"
                                      % getattr(a, "dtype", type(a).__name__))
        same_size(ctx, 1, moment, grad.size, "grad '%s'" % ctx.inputs[0])
        same_size(ctx, 3, param, grad.size, "grad '%s'" % ctx.inputs[0])
        rate = F32(scalar(ctx, 2, lr, "lr must hold one value"))
        w = param.astype(F32).reshape(grad.shape)
        g = grad.astype(F32) + wd * w if wd else grad.astype(F32)
        step, new = D.momentum_sgd(g, moment.astype(F32).reshape(grad.shape), rate, momentum, nesterov)
        return (step.astype(grad.dtype), new.reshape(moment.shape).astype(moment.dtype),
                (w - step).reshape(param.shape).astype(param.dtype))
    return run
