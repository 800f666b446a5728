"""MaxPoolGradient and AveragePoolGradient (Caffe2's names; inputs X, Y, dY as
Caffe2's GetPoolGradient gives them) and the pooling makers. Arguments are the
forward's: kernel / stride / pad spellings, dilations (max), legacy_pad (3 =
ceil), ceil_mode, count_include_pad, global_pooling, NCHW or NHWC."""
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.cnn import pool_grad as K
from caffe2py.kernels.cpu.cnn.pool import pool_output_shape
from caffe2py.registry import OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Rank, SameDType

from .._common import same_as_input
from .nn import _POOL_ARGS, _from_nchw, _nchw, _pool_geometry, _to_nchw, check_pool_window


def _register(op_type, kind):
    register_schema(OpSchema(
        op_type + "Gradient", num_inputs=3, num_outputs=1, args=_POOL_ARGS,
        checks=(DTypes("*", "float"), SameDType("*"), Rank("*", 3)), inference=same_as_input(0), inputs=("X", "Y", "dY"), outputs=("dX",),
        doc="Gradient of %s. %s" % (op_type, "Every input equal to its window's maximum gets the window's "
                                    "gradient (ties all do, as Caffe2's CPU kernel)." if kind == "max" else
                                    "Each window's gradient is spread over the cells its divisor counted.")))

    @register_kernel(op_type + "Gradient")
    def pool_gradient(ctx):
        check_pool_window(ctx)
        nchw = _nchw(ctx)
        include_pad = ctx.bool("count_include_pad")
        is_global = ctx.bool("global_pooling")

        def run(x, y, dy):
            xc, yc, dyc = (v if nchw else _to_nchw(v) for v in (x, y, dy))
            if xc.ndim < 3:
                raise ctx.input_error(0, "pooling needs (N, C, spatial...) input, got shape %s" % list(x.shape))
            if yc.shape != dyc.shape or yc.shape[:2] != xc.shape[:2] or yc.ndim != xc.ndim:
                raise ctx.input_error(2, "gradient of shape %s does not match the pooled output %s of input %s"
                                      % (list(dy.shape), list(y.shape), list(x.shape)))
            if is_global:
                if any(d != 1 for d in yc.shape[2:]):
                    raise ctx.input_error(1, "a global pool's output has spatial size 1, got %s" % list(y.shape))
                dx = K.global_pool_backward(xc, yc, dyc, kind)
            else:
                kernel, strides, pads, dil, ceil = _pool_geometry(ctx, list(xc.shape[2:]))
                if len(kernel) != xc.ndim - 2 or min(kernel) <= 0 or min(pads) < 0:
                    raise ctx.error("kernel %s / pads %s do not suit %d-D input '%s'"
                                    % (kernel, pads, x.ndim, ctx.inputs[0]))
                expected = pool_output_shape(xc.shape[2:], kernel, strides, pads,
                                             dil if kind == "max" else [1] * len(kernel), ceil)
                if tuple(yc.shape[2:]) != tuple(expected):
                    raise ctx.input_error(1, "pooled output of spatial shape %s does not match the windows "
                                          "(expected %s)" % (list(yc.shape[2:]), list(expected)))
                if kind == "max":
                    dx = K.max_pool_backward(xc, yc, dyc, kernel, strides, pads, dil, ceil)
                else:
                    dx = K.average_pool_backward(xc.shape, dyc, kernel, strides, pads, include_pad, ceil)
            return dx if nchw else _from_nchw(dx)
        return run

    @register_gradient(op_type)
    def _pool_maker(g):
        return [g.op(op_type + "Gradient", [g.input_value(0), g.O(0), g.GO(0)], [g.GI(0)])]


_register("MaxPool", "max")
_register("AveragePool", "average")
