"""DropoutGrad (Caffe2's name) and the Dropout maker: in training the gradient
passes where the mask kept the value, scaled by 1 / (1 - ratio) as the forward;
with is_test=1 it passes unchanged."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from .._common import elementwise_cost, same_as_input

register_schema(OpSchema(
    "DropoutGrad", num_inputs=(1, 2), num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("ratio", "float", 0.5), Arg("is_test", "bool", False)),
    inference=same_as_input(0), cost=elementwise_cost, inputs=("dY", "mask"), outputs=("dX",),
    doc="Gradient of Dropout: dX = dY * mask / (1 - ratio) in training, dY with is_test=1."))


@register_kernel("DropoutGrad")
def dropout_grad(ctx):
    ratio, is_test = ctx.float("ratio"), ctx.bool("is_test")
    if not is_test and ctx.n_inputs != 2:
        raise ctx.error("in training (is_test=0) the gradient needs the mask as input 1")
    if not 0.0 <= ratio < 1.0:
        raise ctx.error("ratio must be in [0, 1), got %g" % ratio)

    def run(dy, mask=None):
        if is_test:
            return dy
        if mask.shape != dy.shape:
            raise ctx.input_error(1, "mask of shape %s does not match the gradient's %s"
                                  % (list(mask.shape), list(dy.shape)))
        scale = dy.dtype.type(1.0 / (1.0 - ratio))
        return np.where(mask.astype(bool, copy=False), dy * scale, dy.dtype.type(0))
    return run


@register_gradient("Dropout")
def _dropout_maker(g):
    if g.arg("is_test", 0):
        return [g.op("DropoutGrad", [g.GO(0)], [g.GI(0)])]
    if len(g.def_.output) < 2:
        from caffe2py.errors import Caffe2Error
        raise Caffe2Error("%s: a training Dropout needs its mask output for the gradient" % g.label)
    return [g.op("DropoutGrad", [g.GO(0), g.O(1)], [g.GI(0)])]
