"""Gradients of the Caffe2 math ops in caffe2_math.py, as Caffe2's makers write them:
  Pow with the `exponent` argument -> Pow(X, exponent - 1), Mul by dY, Scale by exponent;
    with an exponent input -> ConstantFill / Sub / Pow / Mul for dX and Log / Mul /
    (SumReduceLike when `broadcast` is given) for dexponent;
  Max, Min -> MaxGradient, MinGradient (Y, dY, X_0, X_1, ...: every input equal to Y
    gets dY);
  PRelu -> PReluGradient (Y, dY, X, Slope -> dX, dSlope);
  ElementwiseLinear -> ElementwiseLinearGradient (dY, X, w -> dX, dw, db);
  SquareRootDivide -> SquareRootDivide(dY, scale) (scale gets no gradient);
  Cast -> Cast back to `from_type` (required, as in Caffe2).
Gradients that need an input the op overwrote (in place) are named errors."""
import numpy as np

from caffe2py.args import make_argument
from caffe2py.errors import Caffe2Error
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import caffe2_math_grad as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .caffe2_math import DT, data_type_value, linear_axis


def _same_shape(ctx, index, value, like_index, like):
    if value.shape != like.shape:
        raise ctx.input_error(index, "shape %s differs from '%s' %s" % (list(value.shape), ctx.inputs[like_index],
                                                                       list(like.shape)))


# ----------------------------------------------------------------- Max / Min

def _select_infer(ctx, ins):
    return [ins[i + 2] for i in range(ctx.n_outputs)]


for _op in ("Max", "Min"):
    register_schema(OpSchema(
        _op + "Gradient", num_inputs=(3, None), num_outputs=(1, None),
        inputs_outputs_check=lambda n_in, n_out: n_out <= n_in - 2,
        inference=_select_infer, inputs=("Y", "dY", "X_0"), outputs=("dX_0",),
        doc="Gradient of %s: dX_i = dY where X_i equals Y, else 0 (every input tied with the "
            "result gets the whole gradient, as in Caffe2)." % _op))

    @register_kernel(_op + "Gradient")
    def _select_grad(ctx):
        n_out = ctx.n_outputs

        def run(y, dy, *xs):
            _same_shape(ctx, 1, dy, 0, y)
            for k, x in enumerate(xs[:n_out]):
                _same_shape(ctx, k + 2, x, 0, y)
            grads = K.select_grad(y, dy, xs[:n_out])
            return grads[0] if n_out == 1 else tuple(grads)
        return run

    @register_gradient(_op)
    def _select_maker(g, op=_op):
        n = len(g.def_.input)
        xs = [g.input_value(i) for i in range(n)]
        return [g.op(op + "Gradient", [g.O(0), g.GO(0)] + xs, [g.GI(i) for i in range(n)])]


# ----------------------------------------------------------------- PRelu

register_schema(OpSchema(
    "PReluGradient", num_inputs=4, num_outputs=2, inputs=("Y", "dY", "X", "Slope"), outputs=("dX", "dSlope"),
    args=(Arg("order", "string", "NCHW"),),
    inference=lambda ctx, ins: [ins[2], ins[3]],
    doc="Gradient of PRelu: dX = dY where X > 0, else Slope * dY; dSlope = the sum of dY * X where "
        "X <= 0, per channel (dim 1 for NCHW, the last for NHWC) or over all for a shared slope."))


@register_kernel("PReluGradient")
def prelu_gradient(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)

    def run(y, dy, x, slope):
        check_dtype(ctx, 2, x, FLOATS)
        _same_shape(ctx, 1, dy, 2, x)
        if x.ndim < 2:
            raise ctx.input_error(2, "PRelu's gradient needs X of at least 2 dims, got shape %s" % list(x.shape))
        axis = 1 if order == "NCHW" else x.ndim - 1
        if slope.size != 1 and slope.size != x.shape[axis]:
            raise ctx.input_error(3, "Slope has %d values; it must hold 1 or one per channel (%d)"
                                  % (slope.size, x.shape[axis]))
        if slope.dtype != x.dtype or dy.dtype != x.dtype:
            raise ctx.error("X, dY and Slope must share one dtype, got %s, %s and %s" % (x.dtype, dy.dtype, slope.dtype))
        return K.prelu_grad(dy, x, slope, axis)
    return run


@register_gradient("PRelu")
def _prelu_maker(g):
    return [g.op("PReluGradient", [g.O(0), g.GO(0), g.input_value(0), g.I(1)], [g.GI(0), g.GI(1)])]


# ----------------------------------------------------------------- ElementwiseLinear

register_schema(OpSchema(
    "ElementwiseLinearGradient", num_inputs=3, num_outputs=3, inputs=("dY", "X", "w"), outputs=("dX", "dw", "db"),
    args=(Arg("axis", "int", 1, doc="the forward's axis"),),
    inference=lambda ctx, ins: [ins[1], ins[2], ins[2]],
    doc="Gradient of ElementwiseLinear with X viewed as (N, D) at axis: dX = dY * w, dw = the column "
        "sums of dY * X, db = the column sums of dY."))


@register_kernel("ElementwiseLinearGradient")
def elementwise_linear_gradient(ctx):
    axis_arg = ctx.int("axis")

    def run(dy, x, w):
        check_dtype(ctx, 1, x, FLOATS)
        _same_shape(ctx, 0, dy, 1, x)
        axis = linear_axis(ctx, x, axis_arg, index=1)
        d = int(np.prod(x.shape[axis:], dtype=np.int64))
        if w.ndim != 1 or w.shape[0] != d:
            raise ctx.input_error(2, "must be 1-D with D = %d values (X %s from axis %d), got shape %s"
                                  % (d, list(x.shape), axis, list(w.shape)))
        return K.elementwise_linear_grad(dy, x, w, axis)
    return run


@register_gradient("ElementwiseLinear")
def _elementwise_linear_maker(g):
    return [g.op("ElementwiseLinearGradient", [g.GO(0), g.input_value(0), g.I(1)], [g.GI(0), g.GI(1), g.GI(2)])]


# ----------------------------------------------------------------- SquareRootDivide

@register_gradient("SquareRootDivide")
def _square_root_divide_maker(g):
    return [g.op("SquareRootDivide", [g.GO(0), g.I(1)], [g.GI(0)])]


# ----------------------------------------------------------------- Cast

@register_gradient("Cast", copy_arguments=False)
def _cast_maker(g):
    def fail(message):
        return Caffe2Error("%s: %s" % (g.label, message))
    if not g.has_arg("from_type"):
        raise fail("argument 'from_type' (the input's TensorProto.DataType) is required for the gradient "
                   "of Cast (as in Caffe2): the gradient casts dY back to it")
    to = data_type_value(g.arg("to", DT.FLOAT), "to", fail)
    from_type = data_type_value(g.arg("from_type"), "from_type", fail)
    return [g.op("Cast", [g.GO(0)], [g.GI(0)], to=from_type, from_type=to)]


# ----------------------------------------------------------------- Pow

def _forward_or(g, name, default):
    """The forward op's Argument `name` as it is, or one with Caffe2's default."""
    for a in g.def_.arg:
        if a.name == name:
            return a
    return make_argument(name, default)


@register_gradient("Pow", copy_arguments=False)
def _pow_maker(g):
    x, dy = g.I(0), g.GO(0)
    dx = g.GI(0)
    if g.has_arg("exponent"):                  # dX = exponent * X^(exponent - 1) * dY
        exponent = np.float32(g.arg("exponent"))
        if x != g.O(0):
            power = exponent - np.float32(1)
        else:                                  # in place: X is gone, Y^((e - 1) / e) = X^(e - 1)
            if abs(exponent) <= 1e-12:
                raise Caffe2Error("%s: in place with exponent %g, the gradient cannot recover X from Y"
                                  % (g.label, exponent))
            power = (exponent - np.float32(1)) / exponent
        # in place, dY and dX are one blob (X_grad): Caffe2 wrote the power over dY and
        # then squared it; the power goes to a blob of its own here
        powered = dx + "_autogen_pow" if dx == dy else dx
        return [g.op("Pow", [x], [powered], exponent=float(power)),
                g.op("Mul", [powered, dy], [dx]),
                g.op("Scale", [dx], [dx], scale=float(exponent))]
    if x == g.O(0) or g.I(1) == g.O(0):
        raise Caffe2Error("%s: the gradient cannot be computed when Pow runs in place (as in Caffe2)" % g.label)
    e, y, de = g.I(1), g.O(0), g.GI(1)
    legacy = g.has_arg("broadcast")            # Caffe2 keys on the argument's presence, not its value
    axes = [_forward_or(g, "axis", -1), _forward_or(g, "axis_str", ""), _forward_or(g, "order", "NCHW")]
    bcast = [_forward_or(g, "broadcast", 0)] + axes if legacy else None
    pre = de + "_autogen_pre_red"              # dexponent before summing over broadcast axes
    ops = [g.op("ConstantFill", [e], [de], value=1.0),
           g.op("Sub", [e, de], [de]),                             # exponent - 1, in dexponent's blob
           g.op("Pow", [x, de], [dx], args=bcast),
           g.op("Mul", [dx, dy], [dx]),
           g.op("Mul", [dx, e], [dx], args=bcast),                 # dX = exponent * X^(exponent-1) * dY
           g.op("Log", [x], [pre]),
           g.op("Mul", [pre, y], [pre])]                           # dexponent = log(X) * Y * dY
    if legacy:
        return ops + [g.op("Mul", [pre, dy], [pre]), g.op("SumReduceLike", [pre, e], [de], args=axes)]
    return ops + [g.op("Mul", [pre, dy], [de])]
