"""Caffe2's elementwise math and activation ops in the caffe2 domain: Ceil, Floor,
Sin, Cos, Sign, Sqr, Softsign, Softplus, Elu, Selu, LeakyRelu, ThresholdedRelu,
Logit, Swish, Scale, ReplaceNaN, StumpFunc, Mod, PRelu, ElementwiseLinear,
SquareRootDivide, Pow (legacy broadcast), Max, Min, Accumulate and Cast (Caffe2's
DataType enum). Where an ONNX op computes the same thing its kernel is used; the
argument names and defaults here are Caffe2's."""
import math

import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.kernels.cpu.math import pointwise as pw
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import BINARY_ARGS, FLOATS, INTS, NUMERIC, check_dtype, legacy_axis, legacy_view
from .._common import same_as_input

DT = caffe2_pb2.TensorProto


def pointwise_cost(flops_per_element=1, n_inputs=1):
    def cost(ctx, ins):
        t = ins[0]
        n = math.prod(t.dims) if t.known else 0
        return Cost(flops=flops_per_element * n, bytes_read=4 * n * n_inputs, bytes_written=4 * n)
    return cost


def register_unary(op_type, make, allowed, doc, args=(), flops=1):
    """make(ctx) -> fn(x), built once at plan time (argument checks go there)."""
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, args=args,
        inference=same_as_input(0), cost=pointwise_cost(flops), inputs=("X",), outputs=("Y",), doc=doc))

    @register_kernel(op_type)
    def factory(ctx):
        fn = make(ctx)

        def run(x):
            check_dtype(ctx, 0, x, allowed)
            return fn(x)
        return run
    factory.__name__ = op_type.lower()


def keep_dtype(fn):
    """fn in float32 for float16 input, result in the input's dtype."""
    return om.via_float32(lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False))


register_unary("Ceil", lambda ctx: np.ceil, FLOATS, "Round each element up to an integer value.")
register_unary("Floor", lambda ctx: np.floor, FLOATS, "Round each element down to an integer value.")
register_unary("Sin", lambda ctx: keep_dtype(np.sin), FLOATS, "Sine of each element (radians).", flops=4)
register_unary("Cos", lambda ctx: keep_dtype(np.cos), FLOATS, "Cosine of each element (radians).", flops=4)
register_unary("Sign", lambda ctx: np.sign, NUMERIC, "-1, 0 or 1 by each element's sign (NaN stays NaN).")
register_unary("Sqr", lambda ctx: np.square, FLOATS, "Each element squared.")
register_unary("Softsign", lambda ctx: pw.softsign, FLOATS, "x / (1 + |x|).", flops=3)
register_unary("Softplus", lambda ctx: keep_dtype(om.softplus), FLOATS, "log(1 + exp(x)).", flops=4)
register_unary("Swish", lambda ctx: pw.swish, FLOATS, "x * sigmoid(x).", flops=5)
register_unary(
    "Elu", lambda ctx: keep_dtype(lambda x: om.elu(x, ctx.float("alpha"))), FLOATS,
    "x for x > 0, alpha * (exp(x) - 1) otherwise.", args=(Arg("alpha", "float", 1.0),), flops=4)
register_unary(
    "Selu", lambda ctx: keep_dtype(lambda x: om.selu(x, ctx.float("alpha"), ctx.float("scale"))), FLOATS,
    "scale * x for x > 0, scale * alpha * (exp(x) - 1) otherwise.",
    args=(Arg("alpha", "float", 1.6732632423543772848170429916717),
          Arg("scale", "float", 1.0507009873554804934193349852946)), flops=5)
register_unary(
    "LeakyRelu", lambda ctx: keep_dtype(lambda x: om.leaky_relu(x, ctx.float("alpha"))), FLOATS,
    "x for x >= 0, alpha * x otherwise.", args=(Arg("alpha", "float", 0.01),), flops=2)
register_unary(
    "ThresholdedRelu", lambda ctx: keep_dtype(lambda x: om.thresholded_relu(x, ctx.float("alpha"))), FLOATS,
    "x for x > alpha, 0 otherwise.", args=(Arg("alpha", "float", 1.0),))
register_unary(
    "Logit", lambda ctx: lambda x: pw.logit(x, ctx.float("eps")), FLOATS,
    "log(p / (1 - p)) with p = x clamped to [eps, 1 - eps].", args=(Arg("eps", "float", 1e-6),), flops=4)


def _scale(ctx):
    scale = ctx.float("scale")
    return om.via_float32(lambda x: x * x.dtype.type(scale))


register_unary("Scale", _scale, FLOATS, "scale * x.", args=(Arg("scale", "float", 1.0),))


@register_gradient("Scale")
def _scale_gradient(g):
    return [g.op("Scale", [g.GO(0)], [g.GI(0)])]


def _elementwise_power(ctx):
    exponent = np.float32(ctx.float("exponent"))     # Caffe2 reads the exponent as a float

    def power(x):
        with np.errstate(invalid="ignore", divide="ignore"):   # NaN / inf as C's pow gives them
            return np.power(x, exponent.astype(x.dtype))
    return keep_dtype(power)


register_unary("ElementwisePower", _elementwise_power, FLOATS,
               "x ** exponent (an older Caffe2 op; Pow is the broadcasting one).",
               args=(Arg("exponent", "float", 0.0),), flops=4)


register_unary("ReplaceNaN", lambda ctx: lambda x: pw.replace_nan(x, ctx.float("value")), FLOATS,
                "x with every NaN replaced by `value`.", args=(Arg("value", "float", 0.0),))


def _mod(ctx):
    divisor = ctx.int("divisor")
    if divisor == 0:
        raise ctx.error("argument divisor must not be 0")
    follow = ctx.bool("sign_follow_divisor")

    def run(x):
        info = np.iinfo(x.dtype)
        if not info.min <= divisor <= info.max:   # Caffe2 reads divisor as the data's type and refuses this too
            raise ctx.error("divisor %d does not fit X's type %s [%d, %d]" % (divisor, x.dtype, info.min, info.max))
        return pw.c_mod(x, divisor, follow)
    return run


register_unary("Mod", _mod, INTS,
                "x % divisor with C's truncation (the result has x's sign), or the divisor's sign with "
                "sign_follow_divisor=1. int32 or int64.",
                args=(Arg("divisor", "int", 0, doc="nonzero"), Arg("sign_follow_divisor", "bool", False)))


# ----------------------------------------------------------------- StumpFunc

register_schema(OpSchema(
    "StumpFunc", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",),
    args=(Arg("threshold", "float", 0.0), Arg("low_value", "float", 0.0), Arg("high_value", "float", 0.0)),
    inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.FLOAT)], cost=pointwise_cost(1),
    doc="low_value where x <= threshold, high_value elsewhere (float32 output)."))


@register_kernel("StumpFunc")
def stump_func(ctx):
    threshold, low, high = ctx.float("threshold"), ctx.float("low_value"), ctx.float("high_value")

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        return pw.stump(x, threshold, low, high)
    return run


# ----------------------------------------------------------------- PRelu

register_schema(OpSchema(
    "PRelu", num_inputs=2, num_outputs=1, allow_inplace={(0, 0)}, inputs=("X", "Slope"), outputs=("Y",),
    args=(Arg("order", "string", "NCHW", doc="where the channel dim is: 1 (NCHW) or last (NHWC)"),),
    inference=same_as_input(0), cost=pointwise_cost(2, 2),
    doc="x for x > 0, slope * x otherwise; Slope holds one value shared by all channels or one per "
        "channel (C = dim 1 for NCHW, the last dim for NHWC)."))


@register_kernel("PRelu")
def prelu(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)

    def run(x, slope):
        check_dtype(ctx, 0, x, FLOATS)
        if slope.dtype != x.dtype:
            raise ctx.input_error(1, "dtype %s differs from X's %s" % (slope.dtype, x.dtype))
        axis = 1 if order == "NCHW" else x.ndim - 1
        if x.ndim < 2 and order == "NCHW":
            raise ctx.input_error(0, "NCHW PRelu needs X of at least 2 dims, got shape %s" % list(x.shape))
        if slope.size != 1 and slope.size != x.shape[axis]:
            raise ctx.input_error(1, "Slope has %d values; it must hold 1 or one per channel (%d, dim %d of X %s)"
                                  % (slope.size, x.shape[axis], axis, list(x.shape)))
        return pw.prelu(x, slope, axis)
    return run


# ----------------------------------------------------------------- ElementwiseLinear

register_schema(OpSchema(
    "ElementwiseLinear", num_inputs=3, num_outputs=1, inputs=("X", "w", "b"), outputs=("Y",),
    args=(Arg("axis", "int", 1, doc="X is viewed as (prod(dims[:axis]), D); w and b have D values"),),
    inference=same_as_input(0), cost=pointwise_cost(2, 1),
    doc="Y = w * X + b per column of X viewed as a 2-D (N, D) matrix."))


def linear_axis(ctx, x, axis, index=0):
    """ElementwiseLinear's axis for X, negative counting from the end as Caffe2's
    canonical axis (axis = ndim, a D of 1, is kept from before)."""
    if not -x.ndim <= axis <= x.ndim:
        raise ctx.input_error(index, "axis %d is out of range [%d, %d] for X of shape %s"
                              % (axis, -x.ndim, x.ndim, list(x.shape)))
    return axis % x.ndim if axis < 0 else axis


@register_kernel("ElementwiseLinear")
def elementwise_linear(ctx):
    axis_arg = ctx.int("axis")

    def run(x, w, b):
        check_dtype(ctx, 0, x, FLOATS)
        axis = linear_axis(ctx, x, axis_arg)
        d = math.prod(x.shape[axis:])
        for index, v in ((1, w), (2, b)):
            if v.ndim != 1 or v.shape[0] != d:
                raise ctx.input_error(index, "must be 1-D with D = %d values (X %s from axis %d), got shape %s"
                                      % (d, list(x.shape), axis, list(v.shape)))
            if v.dtype != x.dtype:
                raise ctx.input_error(index, "dtype %s differs from X's %s" % (v.dtype, x.dtype))
        return pw.elementwise_linear(x, w, b, axis)
    return run


# ----------------------------------------------------------------- SquareRootDivide

register_schema(OpSchema(
    "SquareRootDivide", num_inputs=2, num_outputs=1, allow_inplace={(0, 0)}, inputs=("data", "scale"),
    outputs=("Y",), inference=same_as_input(0), cost=pointwise_cost(1, 1),
    doc="Row i of data (its first dim) divided by sqrt(scale[i]); rows with scale 0 are copied. "
        "scale is int32, int64 or float32, one non-negative value per row."))


@register_kernel("SquareRootDivide")
def square_root_divide(ctx):
    def run(data, scale):
        check_dtype(ctx, 0, data, FLOATS)
        check_dtype(ctx, 1, scale, (np.int32, np.int64, np.float32))
        if data.ndim < 1 or scale.ndim != 1 or scale.shape[0] != data.shape[0]:
            raise ctx.input_error(1, "must be 1-D with one value per row of data (%d), got shape %s"
                                  % (data.shape[0] if data.ndim else 0, list(scale.shape)))
        if (scale < 0).any():
            raise ctx.input_error(1, "scale values must be >= 0, got %s" % scale[scale < 0][0])
        return pw.square_root_divide(data, scale)
    return run


# ----------------------------------------------------------------- Pow

register_schema(OpSchema(
    "Pow", num_inputs=(1, 2), num_outputs=1, allow_inplace={(0, 0), (1, 0)}, inputs=("X", "exponent"),
    outputs=("Y",), args=(Arg("exponent", "float", None, doc="the exponent when there is no second input"),)
    + BINARY_ARGS, inference=same_as_input(0), cost=pointwise_cost(4, 1),
    doc="X ** exponent elementwise; the exponent is the argument or input 1. With input 1, broadcast=0 "
        "needs equal shapes and broadcast=1 applies Caffe2's legacy rule (input 1 a scalar or a "
        "contiguous run of X's dims from `axis`). float only."))


@register_kernel("Pow")
def pow_kernel(ctx):
    if ctx.n_inputs == 1:
        if not ctx.has("exponent"):
            raise ctx.error("with one input, argument exponent is required")
        exponent = ctx.float("exponent")

        def run_scalar(x):
            check_dtype(ctx, 0, x, FLOATS)
            return om.via_float32(lambda v: np.power(v, v.dtype.type(exponent)))(x)
        return run_scalar
    if ctx.has("exponent"):
        raise ctx.error("takes the exponent from argument exponent or from input 1, not both")
    legacy = ctx.bool("broadcast")
    axis = legacy_axis(ctx) if legacy else -1
    if legacy and ctx.inputs[1] == ctx.outputs[0]:
        raise ctx.error("with broadcast=1 only input 0 may be the output (in place)")

    def run(x, e):
        check_dtype(ctx, 0, x, FLOATS)
        if e.dtype != x.dtype:
            raise ctx.input_error(1, "dtype %s differs from X's %s" % (e.dtype, x.dtype))
        if legacy:
            e = e.reshape(legacy_view(ctx, x.shape, e.shape, axis))
        elif e.shape != x.shape:
            raise ctx.input_error(1, "shape %s differs from X's %s (set broadcast=1 for Caffe2's broadcasting)"
                                  % (list(e.shape), list(x.shape)))
        return np.power(x, e)
    return run


# ----------------------------------------------------------------- Max / Min

def _register_variadic(op_type, ufunc, doc):
    register_schema(OpSchema(
        op_type, num_inputs=(1, None), num_outputs=1, allow_inplace={(0, 0)}, inference=same_as_input(0),
        cost=lambda ctx, ins: Cost(flops=(len(ins) - 1) * (math.prod(ins[0].dims) if ins[0].known else 0)),
        doc=doc))

    @register_kernel(op_type)
    def factory(ctx):
        def run(*xs):
            check_dtype(ctx, 0, xs[0], NUMERIC)
            out = np.array(xs[0], copy=True)
            for k, x in enumerate(xs[1:], 1):
                if x.shape != out.shape or x.dtype != out.dtype:
                    raise ctx.input_error(k, "%s %s differs from input 0's %s %s; %s needs one shape and type"
                                          % (x.dtype, list(x.shape), out.dtype, list(out.shape), op_type))
                ufunc(out, x, out=out)
            return out
        return run


_register_variadic("Max", np.maximum, "Elementwise maximum of the inputs (one shape and type; NaN wins).")
_register_variadic("Min", np.minimum, "Elementwise minimum of the inputs (one shape and type; NaN wins).")


# ----------------------------------------------------------------- Accumulate

register_schema(OpSchema(
    "Accumulate", num_inputs=1, num_outputs=1, inputs=("input",), outputs=("output",),
    args=(Arg("gamma", "float", 1.0),), inference=same_as_input(0), cost=pointwise_cost(2, 2),
    reads_outputs=True,
    doc="output = gamma * output + input when the output blob already holds a tensor of the input's "
        "shape and type; otherwise output = input (the accumulator starts from zeros)."))


@register_kernel("Accumulate")
def accumulate(ctx):
    gamma = ctx.float("gamma")

    def run(x, previous):
        check_dtype(ctx, 0, x, FLOATS)
        if not isinstance(previous, np.ndarray) or previous.shape != x.shape or previous.dtype != x.dtype:
            return np.array(x, copy=True)
        return (previous * x.dtype.type(gamma) + x).astype(x.dtype, copy=False)
    return run


# ----------------------------------------------------------------- Cast

_CAST_TARGETS = {DT.FLOAT: np.float32, DT.DOUBLE: np.float64, DT.FLOAT16: np.float16, DT.INT32: np.int32,
                 DT.INT64: np.int64, DT.INT16: np.int16, DT.INT8: np.int8, DT.UINT8: np.uint8,
                 DT.UINT16: np.uint16, DT.BOOL: np.bool_}
_CASTABLE = tuple(_CAST_TARGETS.values())


def data_type_value(value, name, fail):
    """Caffe2's DataType from an argument value: an enum value, or its name in any
    case; fail(message) makes the error raised for anything else."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        try:
            value = DT.DataType.Value(value.upper())
        except ValueError:
            raise fail("unknown '%s' argument '%s' (expected a TensorProto.DataType name: %s)"
                       % (name, value, ", ".join(DT.DataType.keys()))) from None
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        raise fail("'%s' must be one TensorProto.DataType (its value or name), got %r" % (name, value))
    value = int(value)
    if value not in DT.DataType.values():
        raise fail("unknown '%s' value %d (expected a TensorProto.DataType: %s)"
                   % (name, value, ", ".join("%s=%d" % kv for kv in DT.DataType.items())))
    return value


def cast_target(ctx, name="to"):
    """Caffe2's DataType from `to`: an enum value, or its name in any case."""
    value = data_type_value(ctx.arg(name, DT.FLOAT), name, ctx.error)
    if value not in _CAST_TARGETS and value != DT.STRING:
        raise ctx.error("casting to %s is not supported" % DT.DataType.Name(value))
    return value


register_schema(OpSchema(
    "Cast", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, inputs=("input",), outputs=("output",),
    args=(Arg("to", "any", DT.FLOAT, doc="target TensorProto.DataType: the enum value or its name"),
          Arg("from_type", "any", None, doc="accepted and ignored (the input's type is used)")),
    inference=lambda ctx, ins: [TensorType(ins[0].dims, cast_target(ctx))], cost=pointwise_cost(1),
    doc="Converts the input to the type `to` (FLOAT, DOUBLE, FLOAT16, INT8/16/32/64, UINT8/16, BOOL) "
        "as C++'s static_cast does: floats to integers truncate, nonzero to bool is True; STRING "
        "writes each number as std::to_string does (a string tensor)."))


def _to_strings(x):
    """Numbers as C++'s std::to_string writes them (integers and bools as integers,
    floats with six decimals), as bytes: Caffe2's string tensors."""
    if x.dtype.kind == "f":
        text = ["%f" % v for v in x.reshape(-1).tolist()]
    else:
        text = [str(int(v)) for v in x.reshape(-1).tolist()]
    out = np.empty(x.size, dtype=object)
    out[:] = [t.encode() for t in text]
    return out.reshape(x.shape)


@register_kernel("Cast")
def cast(ctx):
    target = cast_target(ctx)

    def run(x):
        check_dtype(ctx, 0, x, _CASTABLE)
        if target == DT.STRING:           # later Caffe2 casts numbers to strings
            return _to_strings(x)
        return x.astype(_CAST_TARGETS[target])
    return run
