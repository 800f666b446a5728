"""Ops whose work is in the backward pass (Caffe2's negate_gradient_op and
zero_gradient_op): NegateGradient copies X forward and hands back -dY
(Negative); ZeroGradient has no outputs and gives its input a zero gradient
(ConstantFill of X's shape with 0), which the backward pass builds even though no
gradient reaches the op (as Caffe2's does)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.registry import OpSchema, register_kernel, register_schema

from .._common import same_as_input

register_schema(OpSchema(
    "NegateGradient", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, inputs=("X",), outputs=("Y",),
    inference=same_as_input(0),
    doc="Y = X; in the backward pass the gradient's sign is flipped (dX = -dY)."))


@register_kernel("NegateGradient")
def negate_gradient(ctx):
    in_place = ctx.inputs[0] == ctx.outputs[0]
    return lambda x: x if in_place else np.array(x, copy=True)


@register_gradient("NegateGradient")
def _negate_gradient_maker(g):
    return [g.op("Negative", [g.GO(0)], [g.GI(0)])]


register_schema(OpSchema(
    "ZeroGradient", num_inputs=1, num_outputs=0, inputs=("X",), inference=lambda ctx, ins: [],
    doc="No outputs; in the backward pass X gets a zero gradient of its shape."))


@register_kernel("ZeroGradient")
def zero_gradient(ctx):
    return lambda x: None


@register_gradient("ZeroGradient")
def _zero_gradient_maker(g):
    return [g.op("ConstantFill", [g.I(0)], [g.GI(0)], value=0.0)]
