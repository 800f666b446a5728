"""What each fusable elementwise op computes per element, for the executor's fusion
of elementwise chains (caffe2py/fusion.py). Every statement mirrors the op's NumPy
kernel operation by operation, in the same order and in the same float type (literals
are `lit(v)`: v rounded to the chain's dtype, as NumPy's weak scalars are), so the
fused result is bitwise the unfused one; the rules marked exact=False use numba's
exp/log/tanh, which differ from NumPy's SIMD versions by about an ulp.

NumPy's maximum(a, b) is `a if a > b or a is NaN else b` (so maximum(-0., 0.) is 0.
and maximum(0., -0.) is -0.), minimum likewise: the same selects here.

CUDA forms (`cuda=`): only the ops with a CUDA kernel (operators/math/cuda_math.py:
Add, Sub, Mul, Div, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Abs, Negative) can sit in a
CUDA chain, and each form is
that kernel's expression (kernels/cuda/tensor/tensor_ops.cu apply_binary /
apply_unary) in float, so the fused kernel computes what the ops compute. Arithmetic
is written with the __f*_rn intrinsics, which nvcc never contracts into an FMA
(a * b + c across two statements otherwise may be; the unfused ops round twice).

Add/Sub/Mul/DivGradient have two outputs each (`n_out=2`): fused while all their
inputs share one shape (no broadcast operand to sum over).

Reductions (`reduce=`): ReduceSum / ReduceMean with axes [last] (keepdims either way;
Caffe2's, and ONNX's while axes is an attribute) and ReduceBackSum / ReduceBackMean
with num_reduce_dim 1 and no lengths, as a CPU
chain's last op: the loop sums each row in float64 (vectorised, in an order of LLVM's
choosing), where NumPy sums pairwise in the chain's type, so results agree to float
rounding, not bitwise."""
import numpy as np

from caffe2py.fusion import ElementwiseRule, register_rule

from .._common import legacy_broadcast_shape
from .._caffe2_binary import legacy_axis

F, B = "f", "b"


# `|` on the two tests, not `or`: no branch, so LLVM vectorises the select
def _maximum(a, b):
    return "(%s if ((%s > %s) | (%s != %s)) else %s)" % (a, a, b, a, a, b)


def _minimum(a, b):
    return "(%s if ((%s < %s) | (%s != %s)) else %s)" % (a, a, b, a, a, b)


# ----------------------------------------------------------------- shape rules

def _unary_shape(shapes):
    return shapes[0], shapes


def _same_shapes(shapes):
    return (shapes[0], shapes) if all(s == shapes[0] for s in shapes) else None


def _numpy_shapes(shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes)), shapes
    except ValueError:
        return None


def _legacy_shapes(axis):
    """Caffe2's broadcast=1: B viewed so that it matches A's dims from `axis`."""
    def shape(shapes):
        a, b = shapes
        try:
            view = tuple(legacy_broadcast_shape(a, b, axis))
        except ValueError:
            return None
        if tuple(np.broadcast_shapes(a, view)) != tuple(a):
            return None
        return a, (a, view)
    return shape


def _onnx_binary_shapes(ctx):
    if ctx.op_version < 7 and ctx.int("broadcast", 0) == 1:
        axis = ctx.int("axis", -1)

        def legacy(shapes):
            a, b = shapes
            if a != b:
                try:
                    b = tuple(legacy_broadcast_shape(a, b, axis))
                except ValueError:
                    return None
            return _numpy_shapes((a, b))
        return legacy
    return _numpy_shapes


def _unary(statement, exact=True, kinds=(F,), out=F):
    """statement: format with {x} (the input) and {o} (the output local)."""
    def emit(args, o, lit):
        return [statement(args[0], o, lit)]
    return ElementwiseRule(emit, _unary_shape, kinds, out, exact)


_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}


def _binary_emit(symbol):
    return lambda args, o, lit: ["%s = %s %s %s" % (o, args[0], symbol, args[1])]


_CUDA_BINARY = {"Add": "__fadd_rn", "Sub": "__fsub_rn", "Mul": "__fmul_rn", "Div": "__fdiv_rn"}


def _cuda_binary(op_type):
    return lambda args, o, lit: ["%s = %s(%s, %s);" % (o, _CUDA_BINARY[op_type], args[0], args[1])]


# tensor_ops.cu's apply_unary, expression for expression
_CUDA_UNARY = {
    "Relu": lambda x: "fmaxf(%s, 0.0f)" % x,
    "Sigmoid": lambda x: "1.0f / (1.0f + expf(-%s))" % x,
    "Tanh": lambda x: "tanhf(%s)" % x,
    "Exp": lambda x: "expf(%s)" % x,
    "Log": lambda x: "logf(%s)" % x,
    "Sqrt": lambda x: "sqrtf(%s)" % x,
    "Abs": lambda x: "fabsf(%s)" % x,
    "Negative": lambda x: "-%s" % x,
}


def _cuda_unary(op_type):
    expr = _CUDA_UNARY[op_type]
    return lambda args, o, lit: ["%s = %s;" % (o, expr(args[0]))]


def _sigmoid(x, o, lit):
    # kernels/cpu/math/elementwise.sigmoid: e = exp(-|x|), then one of two quotients
    e = o + "e"
    return ("%s = math.exp(-abs(%s))\n%s = %s / (%s + %s) if %s >= %s else %s / (%s + %s)"
            % (e, x, o, lit(1), lit(1), e, x, lit(0), e, lit(1), e))


def _relu(x, o, lit):
    return "%s = %s" % (o, _maximum(x, lit(0)))


def _lines(text):
    return text.split("\n")


def _unary_lines(make, exact=True, cuda=None):
    def emit(args, o, lit):
        return _lines(make(args[0], o, lit))
    return ElementwiseRule(emit, _unary_shape, (F,), F, exact, cuda=cuda)


_UNARY = {
    "Relu": (_relu, True),
    "Abs": (lambda x, o, lit: "%s = abs(%s)" % (o, x), True),
    "Sqrt": (lambda x, o, lit: "%s = math.sqrt(%s)" % (o, x), True),     # IEEE: correctly rounded
    "Sigmoid": (_sigmoid, False),
    "Tanh": (lambda x, o, lit: "%s = math.tanh(%s)" % (o, x), False),
    "Exp": (lambda x, o, lit: "%s = math.exp(%s)" % (o, x), False),
    "Log": (lambda x, o, lit: "%s = math.log(%s)" % (o, x), False),
}


def _register_unaries(domain, names):
    for name, (make, exact) in _UNARY.items():
        # CUDA kernels exist for the Caffe2 ops only
        cuda = _cuda_unary(name) if domain == "" and name in _CUDA_UNARY else None
        register_rule(names.get(name, name), domain)(
            lambda ctx, make=make, exact=exact, cuda=cuda: _unary_lines(make, exact, cuda))


# ----------------------------------------------------------------- Caffe2 ops

def _caffe2_binary(op_type, symbol):
    def make(ctx):
        shape = _legacy_shapes(legacy_axis(ctx)) if ctx.bool("broadcast") else _numpy_shapes
        return ElementwiseRule(_binary_emit(symbol), shape, (F, F), cuda=_cuda_binary(op_type))
    return make


for _op, _symbol in _BINARY.items():
    register_rule(_op)(_caffe2_binary(_op, _symbol))
_register_unaries("", {})
register_rule("Negative")(lambda ctx: _unary_lines(lambda x, o, lit: "%s = -%s" % (o, x),
                                                    cuda=_cuda_unary("Negative")))


@register_rule("Scale")
def _scale(ctx):
    scale = ctx.float("scale")
    return _unary_lines(lambda x, o, lit: "%s = %s * %s" % (o, x, lit(scale)))


@register_rule("Sum")
def _caffe2_sum(ctx):
    n = len(ctx.inputs)

    def emit(args, o, lit):
        return ["%s = %s" % (o, " + ".join(args[:1]))] + ["%s = %s + %s" % (o, o, a) for a in args[1:]]
    return ElementwiseRule(emit, _same_shapes, (F,) * n)


def _leaky_relu(ctx):
    alpha = ctx.float("alpha", 0.01)
    return _unary_lines(lambda x, o, lit: "%s = %s * %s if %s < %s else %s" % (o, x, lit(alpha), x, lit(0), x))


register_rule("LeakyRelu")(_leaky_relu)

# gradients (elementwise_grad.py): inputs Y, dY of one shape
_GRADIENTS = {
    "ReluGradient": lambda y, dy, o, lit: "%s = %s if %s > %s else %s" % (o, dy, y, lit(0), lit(0)),
    "SigmoidGradient": lambda y, dy, o, lit: "%s = %s * %s * (%s - %s)" % (o, dy, y, lit(1), y),
    "TanhGradient": lambda y, dy, o, lit: "%s = %s * (%s - %s * %s)" % (o, dy, lit(1), y, y),
}
for _op, _make in _GRADIENTS.items():
    register_rule(_op)(lambda ctx, make=_make: ElementwiseRule(
        lambda args, o, lit: [make(args[0], args[1], o, lit)], _same_shapes, (F, F)))



# Add/Sub/Mul/DivGradient (elementwise_grad.py's binary_grads): two outputs, elementwise
# only while dC, A and B (and Div's C) have one shape; a broadcast operand's gradient is
# a sum over the broadcast axes, which these rules decline (the op then runs alone)
_BINARY_GRADIENTS = {
    "AddGradient": lambda dc, a, b, c, lit: (dc, dc),
    "SubGradient": lambda dc, a, b, c, lit: (dc, "-%s" % dc),
    "MulGradient": lambda dc, a, b, c, lit: ("%s * %s" % (dc, b), "%s * %s" % (dc, a)),
    # NumPy's -dc * c / b: (-dc * c) / b
    "DivGradient": lambda dc, a, b, c, lit: ("%s / %s" % (dc, b), "(-%s * %s) / %s" % (dc, c, b)),
}


def _binary_gradient(formula, n_inputs):
    def make(ctx):
        if len(ctx.inputs) != n_inputs:
            return None         # DivGradient's legacy (B, C, dC) form
        def emit(args, outs, lit):
            dc, a, b = args[:3]
            da, db = formula(dc, a, b, args[3] if len(args) > 3 else None, lit)
            return ["%s = %s" % (outs[0], da), "%s = %s" % (outs[1], db)]
        return ElementwiseRule(emit, _same_shapes, (F,) * n_inputs, n_out=2)
    return make


for _op, _formula in _BINARY_GRADIENTS.items():
    register_rule(_op)(_binary_gradient(_formula, 4 if _op == "DivGradient" else 3))


# ----------------------------------------------------------------- ONNX ops

_ONNX = "ai.onnx"


def _onnx_binary(symbol):
    return lambda ctx: ElementwiseRule(_binary_emit(symbol), _onnx_binary_shapes(ctx), (F, F))


for _op, _symbol in _BINARY.items():
    register_rule(_op, _ONNX)(_onnx_binary(_symbol))

_COMPARISONS = {"Greater": ">", "Less": "<", "Equal": "==", "GreaterOrEqual": ">=", "LessOrEqual": "<="}
for _op, _symbol in _COMPARISONS.items():
    register_rule(_op, _ONNX)(lambda ctx, symbol=_symbol: ElementwiseRule(
        _binary_emit(symbol), _onnx_binary_shapes(ctx), (F, F), B))

_register_unaries(_ONNX, {})
register_rule("Neg", _ONNX)(lambda ctx: _unary_lines(lambda x, o, lit: "%s = -%s" % (o, x)))
register_rule("Reciprocal", _ONNX)(lambda ctx: _unary_lines(lambda x, o, lit: "%s = %s / %s" % (o, lit(1), x)))
register_rule("Identity", _ONNX)(lambda ctx: _unary_lines(lambda x, o, lit: "%s = %s" % (o, x)))
register_rule("LeakyRelu", _ONNX)(_leaky_relu)


@register_rule("Where", _ONNX)
def _where(ctx):
    return ElementwiseRule(lambda args, o, lit: ["%s = %s if %s else %s" % (o, args[1], args[0], args[2])],
                           _numpy_shapes, (B, F, F))


@register_rule("Clip", _ONNX)
def _clip(ctx):
    if ctx.op_version < 11:
        lo, hi = ctx.float("min", -np.inf), ctx.float("max", np.inf)

        def emit(args, o, lit):
            # np.clip(x, lo, hi) on floats: maximum with lo, then minimum with hi
            return ["%s = %s" % (o, _maximum(args[0], lit(lo))), "%s = %s" % (o, _minimum(o, lit(hi)))]
        return ElementwiseRule(emit, _unary_shape, (F,))
    if len(ctx.inputs) != 3 or not all(ctx.inputs):
        return None

    def emit3(args, o, lit):
        return ["%s = %s" % (o, _maximum(args[0], args[1])), "%s = %s" % (o, _minimum(o, args[2]))]
    return ElementwiseRule(emit3, _numpy_shapes, (F, F, F))


def _variadic(combine, mean=False):
    def make(ctx):
        n = len(ctx.inputs)

        def emit(args, o, lit):
            lines = ["%s = %s" % (o, args[0])]
            lines += ["%s = %s" % (o, combine(o, a)) for a in args[1:]]
            if mean:
                lines.append("%s = %s / %s" % (o, o, lit(n)))
            return lines
        return ElementwiseRule(emit, _numpy_shapes, (F,) * n)
    return make


register_rule("Sum", _ONNX)(_variadic(lambda a, b: "%s + %s" % (a, b)))
register_rule("Mean", _ONNX)(_variadic(lambda a, b: "%s + %s" % (a, b), mean=True))
register_rule("Max", _ONNX)(_variadic(_maximum))
register_rule("Min", _ONNX)(_variadic(_minimum))


@register_rule("Cast", _ONNX)
def _cast(ctx):
    to = ctx.arg("to")
    if not isinstance(to, int):
        return None
    from caffe2py.kernels.cpu.math.onnx_math import onnx_dtype
    target = onnx_dtype(int(to))
    if target is None:
        return None
    target = np.dtype(target)
    if target == np.bool_:
        return ElementwiseRule(lambda args, o, lit: ["%s = %s != %s" % (o, args[0], lit(0))],
                               _unary_shape, (F,), B)
    if target.kind != "f":
        return None
    return ElementwiseRule(lambda args, o, lit: ["%s = %s" % (o, args[0])], _unary_shape, (F,),
                           accepts=lambda dtype: dtype == target)


# ----------------------------------------------------------------- reductions at a chain's end

def _last_axis_reduction(kind, out_shape):
    """out_shape(in_shape) -> the reduced shape, or None when the op reduces other axes."""
    def make_rule():
        def shape(shapes):
            (x,) = shapes
            out = out_shape(tuple(x))
            return None if out is None else (out, shapes)
        return ElementwiseRule(lambda args, o, lit: ["%s = %s" % (o, args[0])], shape, (F,), reduce=kind)
    return make_rule


def _known_rank(ctx):
    types = ctx.input_types
    t = types[0] if types else None
    return len(t.dims) if t is not None and getattr(t, "known", False) else None


def _reduce_last(kind, onnx_axes_input_since=None):
    def make(ctx):
        keep = ctx.bool("keepdims", True)
        axes = ctx.ints("axes") if ctx.has("axes") else None
        if onnx_axes_input_since is not None:
            if ctx.op_version >= onnx_axes_input_since or ctx.int("noop_with_empty_axes", 0):
                return None     # axes from an input (a run-time value), or maybe a copy
        # joined to a chain only when the reduced axis is surely the last one: a group
        # whose reduction turns out to be over other axes runs wholly unfused
        rank = _known_rank(ctx)
        if axes is None or len(axes) != 1 or axes[0] != -1:
            if rank is None or (axes is None and rank != 1):
                return None
            if axes is not None and (len(axes) != 1 or not -rank <= axes[0] < rank or axes[0] % rank != rank - 1):
                return None

        def out_shape(x):
            nd = len(x)
            if nd == 0:
                return None
            if axes is None:
                if nd != 1:
                    return None
            elif len(axes) != 1 or not -nd <= axes[0] < nd or axes[0] % nd != nd - 1:
                return None
            return x[:-1] + ((1,) if keep else ())
        return _last_axis_reduction(kind, out_shape)()
    return make


def _reduce_back(kind):
    def make(ctx):
        if len(ctx.inputs) != 1:
            return None         # lengths: per-row extents, not a whole-row reduction
        from .caffe2_reduce import num_reduce_dims
        if num_reduce_dims(ctx) != 1:
            return None
        return _last_axis_reduction(kind, lambda x: x[:-1] if x else None)()
    return make


register_rule("ReduceSum")(_reduce_last("sum"))
register_rule("ReduceMean")(_reduce_last("mean"))
register_rule("ReduceBackSum")(_reduce_back("sum"))
register_rule("ReduceBackMean")(_reduce_back("mean"))
# ONNX: axes an attribute (ReduceSum before opset 13, ReduceMean before 18), as
# onnx_math's factory reads it
register_rule("ReduceSum", _ONNX)(_reduce_last("sum", onnx_axes_input_since=13))
register_rule("ReduceMean", _ONNX)(_reduce_last("mean", onnx_axes_input_since=18))
