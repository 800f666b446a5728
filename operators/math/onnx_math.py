"""ONNX elementwise ops: arithmetic with broadcasting (and opset<7's legacy
`broadcast`/`axis` form), comparisons, unary math and activations, variadic
Sum/Max/Min/Mean, Clip, Cast, reductions and ArgMax/ArgMin."""
import numpy as np

from caffe2py.kernels.cpu.math import elementwise as ew
from caffe2py.kernels.cpu.math import onnx_math as om

from .._common import legacy_broadcast_shape
from caffe2py.registry import Arg
from caffe2py.schema_rules import OneOf, Rank, Scalar, broadcast_problem

from .._onnx_rules import OnnxBroadcast

from ..onnx_base import axis_of, onnx_op

# ----------------------------------------------------------------- binary

_BROADCAST = OnnxBroadcast()

_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": om.divide, "Pow": om.power,
          "Mod": None}
_LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Equal": np.equal,
          "Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
          "LessOrEqual": np.less_equal, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
          "BitwiseXor": np.bitwise_xor}


def _binary_factory(fn):
    def factory(ctx):
        legacy = ctx.op_version < 7 and ctx.int("broadcast", 0) == 1
        axis = ctx.int("axis", -1)
        if ctx.type == "Mod":
            f = om.fmod if ctx.int("fmod", 0) else om.mod
        elif ctx.type == "BitShift":
            left = ctx.string("direction", "LEFT") == "LEFT"
            f = np.left_shift if left else np.right_shift
        else:
            f = fn

        def run(a, b):
            if legacy and b.shape != a.shape:
                try:
                    b = b.reshape(legacy_broadcast_shape(a.shape, b.shape, axis))
                except ValueError as exc:
                    raise ctx.input_error(1, str(exc)) from None
            problem = broadcast_problem((a.shape, b.shape))
            if problem:
                raise ctx.error("input " + problem)
            return np.asarray(f(a, b))
        return run
    return factory


for _name, _fn in list(_ARITH.items()) + list(_LOGIC.items()) + [("BitShift", None)]:
    onnx_op(_name, (1, None), checks=(_BROADCAST,))(_binary_factory(_fn))


# ----------------------------------------------------------------- unary

def _keep(fn):
    """Unary float op whose output keeps the input dtype."""
    return lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False)


_UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Exp": _keep(np.exp), "Log": _keep(np.log), "Sqrt": _keep(np.sqrt),
    "Reciprocal": _keep(np.reciprocal), "Floor": np.floor, "Ceil": np.ceil, "Relu": ew.relu,
    "Sigmoid": om.via_float32(ew.sigmoid), "Tanh": _keep(np.tanh), "Sign": np.sign, "Softplus": _keep(om.softplus),
    "Softsign": _keep(lambda x: x / (1 + np.abs(x))), "Not": np.logical_not, "Identity": lambda x: x,
    "Sin": _keep(np.sin), "Cos": _keep(np.cos), "Tan": _keep(np.tan), "Asin": _keep(np.arcsin),
    "Acos": _keep(np.arccos), "Atan": _keep(np.arctan), "Sinh": _keep(np.sinh), "Cosh": _keep(np.cosh),
    "Asinh": _keep(np.arcsinh), "Acosh": _keep(np.arccosh), "Atanh": _keep(np.arctanh),
    "Erf": _keep(om.erf), "Round": np.round, "IsNaN": np.isnan, "BitwiseNot": np.invert,
}


def _unary_factory(fn):
    def factory(ctx):
        return fn
    return factory


for _name, _fn in _UNARY.items():
    onnx_op(_name, (1, None))(_unary_factory(_fn))


@onnx_op("IsInf", (10, None))
def is_inf(ctx):
    pos, neg = ctx.int("detect_positive", 1), ctx.int("detect_negative", 1)
    return lambda x: (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def _activation(fn, **defaults):
    def factory(ctx):
        params = {k: ctx.float(k, v) for k, v in defaults.items()}
        return lambda x: np.asarray(fn(x, **params)).astype(x.dtype, copy=False)
    return factory


onnx_op("Elu", (1, None))(_activation(om.elu, alpha=1.0))
onnx_op("Selu", (1, None))(_activation(om.selu, alpha=1.67326319217681884765625,
                                       gamma=1.05070102214813232421875))
onnx_op("LeakyRelu", (1, None))(_activation(om.leaky_relu, alpha=0.01))
onnx_op("ThresholdedRelu", (10, None))(_activation(om.thresholded_relu, alpha=1.0))
onnx_op("HardSigmoid", (1, None))(_activation(om.hard_sigmoid, alpha=0.2, beta=0.5))
onnx_op("Shrink", (9, None))(_activation(om.shrink, lambd=0.5, bias=0.0))
onnx_op("Celu", (12, None))(_activation(om.celu, alpha=1.0))


@onnx_op("HardSwish", (14, None))
def hard_swish(ctx):
    return lambda x: (x * om.hard_sigmoid(x, 1 / 6, 0.5)).astype(x.dtype, copy=False)


@onnx_op("PRelu", (1, None))
def prelu(ctx):
    def run(x, slope):
        # Opset < 7 exports give one slope per channel as a 1-D (C,) tensor for an
        # (N, C, ...) input; that broadcasts over channels, not the last axis.
        if ctx.op_version < 7 and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1] \
                and slope.size != 1:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        try:
            return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)
        except ValueError:
            raise ctx.input_error(1, "slope of shape %s does not broadcast to X of shape %s"
                                  % (list(slope.shape), list(x.shape))) from None
    return run


@onnx_op("Clip", (1, 10), (11, None), checks=(Scalar((1, 2), any_shape=False),))
def clip(ctx):
    if ctx.op_version < 11:
        lo, hi = ctx.float("min", -np.inf), ctx.float("max", np.inf)
        return lambda x: np.clip(x, lo, hi).astype(x.dtype, copy=False)

    def run(x, lo=None, hi=None):
        out = x
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
        return np.asarray(out).astype(x.dtype, copy=False)
    return run


# ----------------------------------------------------------------- variadic

_VARIADIC = {"Sum": np.add, "Max": np.maximum, "Min": np.minimum, "Mean": np.add}


def _variadic_factory(fn):
    def factory(ctx):
        mean = ctx.type == "Mean"

        def run(*xs):
            problem = broadcast_problem([x.shape for x in xs])
            if problem:
                raise ctx.error("input " + problem)
            out = xs[0]
            for x in xs[1:]:
                out = fn(out, x)
            if mean:
                out = out / np.asarray(len(xs), dtype=out.dtype)
            return np.array(out) if len(xs) == 1 else np.asarray(out)
        return run
    return factory


for _name, _fn in _VARIADIC.items():
    onnx_op(_name, (1, None), checks=(_BROADCAST,))(_variadic_factory(_fn))


# ----------------------------------------------------------------- Cast

@onnx_op("Cast", (1, None))
def cast(ctx):
    to = ctx.arg("to")
    if isinstance(to, str):   # opset 1 spelled the type as a string
        from onnx import TensorProto
        if to.upper() not in TensorProto.DataType.keys():
            raise ctx.error("Cast to '%s': not an ONNX data type name" % to)
        to = TensorProto.DataType.Value(to.upper())
    if not isinstance(to, int):
        raise ctx.error("Cast needs the attribute 'to' (an ONNX data type), got %r" % (to,))
    dtype = om.onnx_dtype(int(to))
    if dtype is None:
        raise ctx.error("Cast to ONNX data type %s is not supported" % to)
    saturate, round_mode = bool(ctx.int("saturate", 1)), _round_mode(ctx)
    return lambda x: _cast(ctx, x, dtype, saturate, round_mode)


def _cast(ctx, x, dtype, saturate, round_mode):
    try:
        return om.cast(x, dtype, saturate, round_mode)
    except ValueError as exc:          # a string that is not a number
        raise ctx.input_error(0, str(exc)) from None


def _round_mode(ctx):
    """Cast's round_mode (opset 25: only casts to float8e8m0 use it)."""
    mode = ctx.string("round_mode", "up")
    if mode not in om._E8M0_ROUND_MODES:
        raise ctx.error("round_mode must be one of %s, got '%s'" % (", ".join(om._E8M0_ROUND_MODES), mode))
    return mode


@onnx_op("CastLike", (15, None))
def cast_like(ctx):
    saturate, round_mode = bool(ctx.int("saturate", 1)), _round_mode(ctx)
    return lambda x, like: _cast(ctx, x, like.dtype, saturate, round_mode)


# ----------------------------------------------------------------- reductions

_REDUCE = {"ReduceSum": om.reduce_sum, "ReduceMean": om.reduce_mean, "ReduceMax": om.reduce_max,
           "ReduceMin": om.reduce_min, "ReduceProd": om.reduce_prod, "ReduceL1": om.reduce_l1,
           "ReduceL2": om.reduce_l2, "ReduceLogSum": om.reduce_log_sum,
           "ReduceLogSumExp": om.reduce_log_sum_exp, "ReduceSumSquare": om.reduce_sum_square}
# Opset from which `axes` moved from attribute to optional input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_factory(fn):
    def factory(ctx):
        keepdims = bool(ctx.int("keepdims", 1))
        noop_empty = bool(ctx.int("noop_with_empty_axes", 0))
        axes_as_input = ctx.op_version >= _AXES_INPUT_SINCE.get(ctx.type, 18)
        attr_axes = None if axes_as_input else ctx.ints("axes", None)

        def run(x, axes=None):
            axes = attr_axes if not axes_as_input else (None if axes is None else axes.tolist())
            if not axes:
                if noop_empty:
                    return x.copy()
                axes = list(range(x.ndim))
            axes = tuple(sorted({axis_of(ctx, int(a), x.ndim) for a in axes}))
            return np.asarray(fn(x, axes, keepdims))
        return run
    return factory


for _name, _fn in _REDUCE.items():
    onnx_op(_name, (1, None), checks=(Rank(1, 1, 1),),
            # onnxruntime reads keepdims=3 as 0, NumPy's bool() as 1: refuse what the spec does not define
            args=(Arg("keepdims", "int", 1, check=OneOf(0, 1)),
                  Arg("noop_with_empty_axes", "int", 0, check=OneOf(0, 1))))(_reduce_factory(_fn))


def _arg_factory(find):
    def factory(ctx):
        axis, keepdims = ctx.int("axis", 0), bool(ctx.int("keepdims", 1))
        last = bool(ctx.int("select_last_index", 0))

        def run(x):
            a = axis_of(ctx, axis, x.ndim)
            if x.shape[a] == 0:
                raise ctx.input_error(0, "axis %d of shape %s is empty: there is no element to pick"
                                      % (a, list(x.shape)))
            if last:
                flipped = np.flip(x, axis=a)
                idx = x.shape[a] - 1 - find(flipped, axis=a)
            else:
                idx = find(x, axis=a)
            idx = idx.astype(np.int64)
            return np.expand_dims(idx, a) if keepdims else idx
        return run
    return factory


onnx_op("ArgMax", (1, None), checks=(Rank(0, 1),))(_arg_factory(np.argmax))
onnx_op("ArgMin", (1, None), checks=(Rank(0, 1),))(_arg_factory(np.argmin))
