"""Quantile (caffe2/operators/quantile_op): the quantile of all values of several
tensors, by bisection. Kernel: kernels/cpu/math/quantile.py."""
import numpy as np

from caffe2py.kernels.cpu.math import quantile as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import check_dtype
from .._gradient_hooks import should_not_do_gradient

register_schema(OpSchema(
    "Quantile", num_inputs=(1, None), num_outputs=1, inputs=("X",), outputs=("quantile_value",),
    args=(Arg("quantile", "float", -1.0, doc="in [0, 1]; required (the default -1 is refused)"),
          Arg("abs", "bool", True, doc="take the quantile of the absolute values"),
          Arg("tol", "float", 1e-3, doc="> 0: bisection stops when hi - lo <= tol * (|hi| + |lo|)")),
    inference=lambda ctx, ins: [TensorType((1,), ins[0].dtype)],
    doc="A [1] tensor v of the inputs' type (float or double, all alike) such that at least "
        "ceil(n * quantile) of the n values of all inputs together (absolute values with abs) "
        "are <= v: found by bisection of [min, max], returning a midpoint whose count is "
        "exactly the target or else the bracket's upper end within tol."))

should_not_do_gradient("Quantile")


@register_kernel("Quantile")
def quantile(ctx):
    q, use_abs, tol = ctx.float("quantile"), ctx.bool("abs"), ctx.float("tol")
    if not 0.0 <= q <= 1.0:
        raise ctx.error("quantile must be in [0, 1], got %g" % q)
    if not tol > 0:
        raise ctx.error("tol must be > 0, got %g" % tol)

    def run(*tensors):
        for index, x in enumerate(tensors):
            if not isinstance(x, np.ndarray):
                raise ctx.input_error(index, "must be a tensor, got %s" % type(x).__name__)
        check_dtype(ctx, 0, tensors[0], (np.float32, np.float64))
        for index, x in enumerate(tensors[1:], 1):
            if x.dtype != tensors[0].dtype:
                raise ctx.input_error(index, "all inputs must have one type: expected %s like '%s', "
                                      "got %s" % (tensors[0].dtype, ctx.inputs[0], x.dtype))
        values = np.concatenate([x.reshape(-1) for x in tensors])
        if values.size == 0:
            raise ctx.error("the inputs hold no values; the quantile needs at least one")
        if use_abs:
            values = np.abs(values)
        try:
            value = K.bisect_quantile(values, q, tol)
        except K.PrecisionLimit:
            raise ctx.error("numeric precision at limit, unable to continue bisect")
        return np.array([value], values.dtype)
    return run
