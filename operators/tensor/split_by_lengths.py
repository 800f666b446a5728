"""Caffe2's SplitByLengths: split along axis into n outputs, output i covering the
i-th equal share of the lengths entries. Its gradient is Split's (dY parts
concatenated back), reused from tensor_grad.py."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, register_kernel, register_schema

from .tensor_grad import _split_maker

register_schema(OpSchema(
    "SplitByLengths", num_inputs=2, num_outputs=(1, None), inputs=("input", "legnths"), outputs=("outputs",),
    args=(Arg("axis", "int", 0), Arg("order", "string", None),
          Arg("use_scaling_lengths", "bool", False,
              doc="scale the lengths so they sum to input's size along axis")),
    inference=lambda ctx, ins: [UNKNOWN] * len(ctx.outputs), cost=lambda ctx, ins: Cost(),
    doc="The lengths (a 1-D integer tensor whose entry count is a multiple of the number of "
        "outputs n) split into n equal groups of entries; output i is the slice of input along axis "
        "covering group i's total length. Without use_scaling_lengths the lengths must sum to the "
        "axis size; with it, to a divisor of the axis size, each length scaled by the quotient."))


@register_kernel("SplitByLengths")
def split_by_lengths(ctx):
    n = len(ctx.outputs)
    scaling = ctx.bool("use_scaling_lengths")
    order = ctx.string("order")
    if order not in (None, "", "NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)

    def run(x, lengths):
        axis = ctx.int("axis") if ctx.has("axis") or not order else (1 if order == "NCHW" else x.ndim - 1)
        if not -x.ndim <= axis < x.ndim:
            raise ctx.error("axis %d out of range for a %d-D input" % (axis, x.ndim))
        axis %= x.ndim
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
            raise ctx.input_error(1, "must be a 1-D integer tensor, got %s of shape %s"
                                  % (lengths.dtype, list(lengths.shape)))
        if lengths.size % n:
            raise ctx.input_error(1, "has %d entries, not a multiple of the %d outputs" % (lengths.size, n))
        if (lengths < 0).any():
            raise ctx.input_error(1, "lengths must be >= 0")
        total, size = int(lengths.sum()), x.shape[axis]
        factor = 1
        if scaling and total and total != size:
            if size % total:
                raise ctx.input_error(1, "lengths sum to %d, which does not divide the axis size %d" % (total, size))
            factor = size // total
        if total * factor != size:
            raise ctx.input_error(1, "lengths sum to %d; input has %d along axis %d" % (total, size, axis))
        bounds = np.concatenate([[0], np.cumsum(lengths)]) * factor
        group = lengths.size // n
        parts = tuple(np.ascontiguousarray(np.take(x, np.arange(bounds[i * group], bounds[(i + 1) * group]), axis=axis))
                      for i in range(n))
        return parts[0] if n == 1 else parts
    return run


register_gradient("SplitByLengths")(_split_maker)
