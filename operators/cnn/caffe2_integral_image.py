"""Caffe2's IntegralImage (NCHW X -> N x C x (H+1) x (W+1) prefix sums) and
IntegralImageGradient. Kernels: kernels/cpu/cnn/integral_image.py."""
from caffe2py.kernels.cpu.cnn import integral_image as K
from caffe2py.registry import OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import register_gradient


def _infer(ctx, ins):
    x = ins[0]
    if not x.known or len(x.dims) != 4:
        return [TensorType(None, x.dtype)]
    n, c, h, w = x.dims
    return [TensorType((n, c, h + 1, w + 1), x.dtype)]


register_schema(OpSchema(
    "IntegralImage", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",), inference=_infer,
    doc="Integral image of a 4-D NCHW X: Y[n, c, h, w] = sum of X[n, c, :h, :w], so Y is "
        "N x C x (H+1) x (W+1) with a zero first row and column."))
register_schema(OpSchema(
    "IntegralImageGradient", num_inputs=2, num_outputs=1, inputs=("X", "dY"), outputs=("dX",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Caffe2's gradient rule for IntegralImage: dX[n, c, h, w] = sum of dY[n, c, :h+1, :w+1] "
        "(prefix sums over dY's first H rows and W columns, as Caffe2 computes it)."))


def _check_x(ctx, x, index):
    check_dtype(ctx, index, x, FLOATS)
    if x.ndim != 4:
        raise ctx.input_error(index, "must be 4-D NCHW, got shape %s" % list(x.shape))


@register_kernel("IntegralImage")
def integral_image(ctx):
    def run(x):
        _check_x(ctx, x, 0)
        return K.integral_image(x)
    return run


@register_kernel("IntegralImageGradient")
def integral_image_gradient(ctx):
    def run(x, dy):
        _check_x(ctx, x, 0)
        n, c, h, w = x.shape
        if dy.shape != (n, c, h + 1, w + 1):
            raise ctx.input_error(1, "must have shape %s (X's integral image), got %s"
                                  % ([n, c, h + 1, w + 1], list(dy.shape)))
        return K.integral_image_gradient(dy, h, w)
    return run


@register_gradient("IntegralImage")
def _integral_image_maker(g):
    return [g.op("IntegralImageGradient", [g.I(0), g.GO(0)], [g.GI(0)])]
