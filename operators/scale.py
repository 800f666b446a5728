"""Scale: Y = scale * X, and its gradient (Scale of dY by the same factor)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._common import elementwise_cost, same_as_input

register_schema(OpSchema(
    "Scale", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("scale", "float", 1.0, doc="the multiplier"),),
    inference=same_as_input(0), cost=elementwise_cost, inputs=("input",), outputs=("output",),
    doc="output = scale * input (float tensors keep their dtype)."))


@register_kernel("Scale")
def scale(ctx):
    factor = ctx.float("scale")

    def run(x):
        if x.dtype.kind != "f":
            raise ctx.input_error(0, "Scale takes a float tensor, got %s" % x.dtype)
        return x * x.dtype.type(factor)
    return run


@register_gradient("Scale")
def _scale_maker(g):
    return [g.op("Scale", [g.GO(0)], [g.GI(0)])]
