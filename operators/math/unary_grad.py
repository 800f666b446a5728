"""Gradients of the unary elementwise ops (elementwise.py, caffe2_math.py,
caffe2_unary.py), as Caffe2 made them:

- ops whose gradient is an existing op: Exp -> Mul(Y, dY); Log -> Div(dY, X);
  Negative -> Negative(dY); Sqr -> Scale(dY -> dY, scale=2) then Mul(dY, X);
  Sqrt -> Scale(dY -> dX, scale=0.5) then Div(dX, Y);
- ops with their own <Op>Gradient op, whose inputs (in Caffe2's order, which is not
  the same for every op) are listed in GRADIENT_OPS below;
- Sign must not be differentiated (Caffe2's SHOULD_NOT_DO_GRADIENT).

A maker that reads the forward input X refuses an op run in place (X is gone by
then), as Caffe2's Softsign maker and its backward pass builder do."""
from caffe2py.gradients import register_gradient, should_not_do_gradient
from caffe2py.kernels.cpu.math import unary_grad as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, SameDType

from .._caffe2_binary import FLOATS, NUMERIC
from .._common import elementwise_cost, same_as_input

_X_DY, _DY_X, _Y_DY, _DY_Y, _X_Y_DY = ("X", "dY"), ("dY", "X"), ("Y", "dY"), ("dY", "Y"), ("X", "Y", "dY")
_ALPHA = Arg("alpha", "float", 1.0)

# gradient op: (forward op, Caffe2's inputs, kernel, arguments the kernel reads, dtypes, rule)
GRADIENT_OPS = {
    "AbsGradient": ("Abs", _X_DY, K.abs_grad, (), NUMERIC, "sign(X) dY"),
    "SinGradient": ("Sin", _X_DY, K.sin_grad, (), FLOATS, "cos(X) dY"),
    "CosGradient": ("Cos", _X_DY, K.cos_grad, (), FLOATS, "-sin(X) dY"),
    "TanGradient": ("Tan", _X_DY, K.tan_grad, (), FLOATS, "dY / cos(X)^2"),
    "AsinGradient": ("Asin", _DY_X, K.asin_grad, (), FLOATS, "dY / sqrt(1 - X^2)"),
    "AcosGradient": ("Acos", _X_DY, K.acos_grad, (), FLOATS, "-dY / sqrt(1 - X^2)"),
    "AtanGradient": ("Atan", _X_DY, K.atan_grad, (), FLOATS, "dY / (1 + X^2)"),
    "SinhGradient": ("Sinh", _DY_X, K.sinh_grad, (), FLOATS, "cosh(X) dY"),
    "CoshGradient": ("Cosh", _DY_X, K.cosh_grad, (), FLOATS, "sinh(X) dY"),
    "Log1pGradient": ("Log1p", _X_DY, K.log1p_grad, (), FLOATS, "dY / (1 + X)"),
    "CubeGradient": ("Cube", _DY_X, K.cube_grad, (), NUMERIC, "3 X^2 dY"),
    "ErfGradient": ("Erf", _X_DY, K.erf_grad, (), FLOATS, "2 / sqrt(pi) exp(-X^2) dY"),
    "SoftsignGradient": ("Softsign", _X_DY, K.softsign_grad, (), FLOATS, "dY / (1 + |X|)^2"),
    "LogitGradient": ("Logit", _X_DY, K.logit_grad, (Arg("eps", "float", 1e-6),), FLOATS,
                      "dY / (X (1 - X)) for X in [eps, 1 - eps], else 0"),
    "GeluGradient": ("Gelu", _DY_X, K.gelu_grad, (Arg("fast_gelu", "bool", False),), FLOATS,
                     "dY (P(Z <= X) + X pdf(X)), or the tanh form's derivative with fast_gelu"),
    "SwishGradient": ("Swish", _X_Y_DY, K.swish_grad, (), FLOATS, "dY (Y + sigmoid(X) (1 - Y))"),
    "MishGradient": ("Mish", _X_Y_DY, K.mish_grad, (), FLOATS,
                     "dY (tanh(sp) + X sigmoid(X) (1 - tanh(sp)^2)), sp = softplus(X)"),
    "SoftplusGradient": ("Softplus", _Y_DY, K.softplus_grad, (), FLOATS, "dY (1 - exp(-Y))"),
    "EluGradient": ("Elu", _Y_DY, K.elu_grad, (_ALPHA,), FLOATS, "dY (Y + alpha) where Y < 0, else dY"),
    "SeluGradient": ("Selu", _Y_DY, K.selu_grad,
                     (Arg("alpha", "float", 1.6732632423543772848170429916717),
                      Arg("scale", "float", 1.0507009873554804934193349852946)), FLOATS,
                     "scale dY where Y > 0, else dY (Y + scale alpha)"),
    "LeakyReluGradient": ("LeakyRelu", _Y_DY, K.leaky_relu_grad, (Arg("alpha", "float", 0.01),), FLOATS,
                          "dY where Y >= 0, else alpha dY"),
    "ThresholdedReluGradient": ("ThresholdedRelu", _Y_DY, K.thresholded_relu_grad, (), FLOATS,
                                "dY where Y != 0, else 0"),
    "HardSigmoidGradient": ("HardSigmoid", _Y_DY, K.hard_sigmoid_grad, (Arg("alpha", "float", 0.2),), FLOATS,
                            "alpha dY where 0 < Y < 1, else 0"),
    "RSqrtGradient": ("RSqrt", _DY_Y, K.rsqrt_grad, (), FLOATS, "-0.5 Y^3 dY"),
    "CbrtGradient": ("Cbrt", _DY_Y, K.cbrt_grad, (), FLOATS, "dY / (3 Y^2)"),
    "ReciprocalGradient": ("Reciprocal", _Y_DY, K.reciprocal_grad, (), FLOATS, "-Y^2 dY"),
}


def _read_args(ctx, args):
    """The kernel's keyword arguments, read once at plan time (the forward op's,
    copied onto the gradient op by the maker)."""
    return {a.name: (ctx.bool(a.name) if a.type == "bool" else ctx.float(a.name)) for a in args}


def _check_same_shapes(ctx, arrays):
    first = arrays[0].shape
    for index, a in enumerate(arrays[1:], 1):
        if a.shape != first:
            raise ctx.input_error(index, "shape %s differs from '%s''s %s; %s needs one shape"
                                  % (list(a.shape), ctx.inputs[0], list(first), ctx.type))


# Caffe2's own SeluGradient op asks only for as many dY values as Y has, and gives dX
# Y's shape (the other gradients run on one broadcast-free shape)
_SAME_SIZE = {"SeluGradient"}


def _same_size_as_y(ctx, y, dy):
    if dy.size != y.size:
        raise ctx.input_error(1, "has %d values, '%s' has %d; %s needs one per value"
                              % (dy.size, ctx.inputs[0], y.size, ctx.type))
    return y, dy.reshape(y.shape)


def _register_gradient_op(grad_type, forward, inputs, fn, args, dtypes, rule):
    dy_index = inputs.index("dY")
    same_size = grad_type in _SAME_SIZE
    register_schema(OpSchema(
        grad_type, num_inputs=len(inputs), num_outputs=1, allow_inplace={(dy_index, 0)},
        args=args, checks=(DTypes("*", *dtypes), SameDType("*")),
        inference=same_as_input(0 if same_size else dy_index), cost=elementwise_cost, inputs=inputs,
        outputs=("dX",),
        doc="Gradient of %s: dX = %s." % (forward, rule)))

    @register_kernel(grad_type)
    def factory(ctx):
        kwargs = _read_args(ctx, args)

        def run(*arrays):
            if same_size:
                arrays = _same_size_as_y(ctx, *arrays)
            else:
                _check_same_shapes(ctx, arrays)
            return fn(*arrays, **kwargs)
        return run
    factory.__name__ = grad_type

    @register_gradient(forward)
    def maker(g):
        blobs = {"X": g.input_value(0) if "X" in inputs else None, "Y": g.O(0), "dY": g.GO(0)}
        return [g.op(grad_type, [blobs[name] for name in inputs], [g.GI(0)])]


for _grad_type, _entry in GRADIENT_OPS.items():
    _register_gradient_op(_grad_type, *_entry)


# ----------------------------------------------------------------- gradients made of other ops

@register_gradient("Exp")
def _exp_gradient(g):
    return [g.op("Mul", [g.O(0), g.GO(0)], [g.GI(0)])]


@register_gradient("Log")
def _log_gradient(g):
    return [g.op("Div", [g.GO(0), g.input_value(0)], [g.GI(0)])]


@register_gradient("Negative")
def _negative_gradient(g):
    return [g.op("Negative", [g.GO(0)], [g.GI(0)])]


@register_gradient("Sqr")
def _sqr_gradient(g):
    # Caffe2 scales dY in place before multiplying by X
    x = g.input_value(0)
    return [g.op("Scale", [g.GO(0)], [g.GO(0)], scale=2.0),
            g.op("Mul", [g.GO(0), x], [g.GI(0)])]


@register_gradient("Sqrt")
def _sqrt_gradient(g):
    dx = g.GI(0)
    return [g.op("Scale", [g.GO(0)], [dx], scale=0.5),
            g.op("Div", [dx, g.O(0)], [dx])]


should_not_do_gradient("Sign")
