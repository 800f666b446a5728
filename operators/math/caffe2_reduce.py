"""Caffe2's reductions in the caffe2 domain: ReduceSum, ReduceMean, ReduceMax, ReduceMin,
ReduceL1, ReduceL2 (`axes`, `keepdims`), ReduceFront{Sum,Mean,Max} and
ReduceBack{Sum,Mean,Max} (`num_reduce_dim` leading / trailing dims, optional lengths),
ReduceTailSum, SumElements, SumElementsInt, SumSqrElements, SumInt, SumReduceLike and
ColwiseMax, with the gradient ops Caffe2 registers for them. Kernels:
kernels/cpu/math/reduce.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.math import reduce as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import BINARY_ARGS, FLOATS, INTS, NUMERIC, check_dtype, legacy_axis, legacy_view
from .._gradient_hooks import register_gradient, should_not_do_gradient

DT = caffe2_pb2.TensorProto


def _reduce_cost(ctx, ins):
    """One read of every input element, one flop per element (Caffe2's reduce cost)."""
    t = ins[0]
    n = float(math.prod(t.dims)) if t.known else 0.0
    return Cost(flops=n, bytes_read=4 * n, bytes_written=4.0)


# ----------------------------------------------------------------- Reduce{Sum,Mean,Max,Min,L1,L2}

_REDUCE_ARGS = (Arg("axes", "ints", None, doc="dims to reduce (negative counts from the end); none: all"),
                Arg("keepdims", "int", 1, doc="1: reduced dims stay with size 1; 0: they are removed"))


def reduce_axes(ctx, ndim):
    """The `axes` argument as a sorted tuple of distinct dims of an ndim-D input."""
    if not ctx.has("axes"):
        return tuple(range(ndim))
    axes = ctx.ints("axes")
    for a in axes:
        if not -ndim <= a < ndim:
            raise ctx.error("axes %s: axis %d is out of range for a %d-D input (valid: [%d, %d])"
                            % (list(axes), a, ndim, -ndim, ndim - 1))
    return tuple(sorted({a % ndim for a in axes}))


def _reduced_dims(ctx, dims):
    axes = reduce_axes(ctx, len(dims))
    keep = ctx.bool("keepdims")
    return tuple(1 if i in axes else d for i, d in enumerate(dims) if keep or i not in axes)


_REDUCERS = {   # op type -> (kernel kind, dtypes Caffe2 accepts (plus float16), doc)
    "ReduceSum": ("sum", NUMERIC, "the sum"),
    "ReduceMean": ("mean", FLOATS, "the mean"),
    "ReduceMax": ("max", NUMERIC, "the maximum"),
    "ReduceMin": ("min", NUMERIC, "the minimum"),
    "ReduceL1": ("l1", FLOATS, "the L1 norm (sum of absolute values)"),
    "ReduceL2": ("l2", FLOATS, "the L2 norm (square root of the sum of squares)"),
}


def _register_reducer(op_type, kind, allowed, what):
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, args=_REDUCE_ARGS, inputs=("X",), outputs=("Y",),
        inference=lambda ctx, ins: [TensorType(_reduced_dims(ctx, ins[0].dims), ins[0].dtype)],
        cost=_reduce_cost,
        doc="Y = %s of X over `axes` (all dims when absent). keepdims=1 (default) keeps each reduced "
            "dim with size 1. %s." % (what, ", ".join(np.dtype(t).name for t in allowed))))
    register_schema(OpSchema(
        op_type + "Gradient", num_inputs=3, num_outputs=1, args=_REDUCE_ARGS, inputs=("dY", "X", "Y"),
        outputs=("dX",), inference=lambda ctx, ins: [ins[1]],
        doc="Gradient of %s: dX from dY, the forward input X and output Y." % op_type))

    @register_kernel(op_type)
    def reducer(ctx):
        keep = ctx.bool("keepdims")

        def run(x):
            check_dtype(ctx, 0, x, allowed)
            return K.reduce_axes(x, reduce_axes(ctx, x.ndim), keep, kind)
        return run

    @register_kernel(op_type + "Gradient")
    def reducer_gradient(ctx):
        def run(dy, x, y):
            for index, v in ((0, dy), (1, x), (2, y)):     # the forward's dtype rule holds here too
                check_dtype(ctx, index, v, allowed)
            axes = reduce_axes(ctx, x.ndim)
            want = math.prod(1 if i in axes else d for i, d in enumerate(x.shape))
            for index, v in ((0, dy), (2, y)):
                if v.size != want:
                    raise ctx.input_error(index, "has %d values; the reduction of X %s over axes %s has %d"
                                          % (v.size, list(x.shape), list(axes), want))
            return K.reduce_axes_gradient(dy, x, y, axes, kind)
        return run

    @register_gradient(op_type)
    def _maker(g):
        return [g.op(op_type + "Gradient", [g.GO(0), g.input_value(0), g.O(0)], [g.GI(0)])]


for _type, (_kind, _allowed, _what) in _REDUCERS.items():
    _register_reducer(_type, _kind, _allowed, _what)


# ----------------------------------------------------------------- ReduceFront* / ReduceBack*

_FRONT_BACK_ARGS = (
    Arg("num_reduce_dim", "int", 1, doc="how many leading (Front) or trailing (Back) dims to reduce; "
                                        "the name Caffe2's kernels read"),
    Arg("num_reduce_dims", "int", None, doc="the name in Caffe2's schema docs, which its kernels never "
                                            "read: accepted only when it agrees with num_reduce_dim"))


def num_reduce_dims(ctx):
    """Caffe2's kernels read `num_reduce_dim` (default 1); its docs say `num_reduce_dims`,
    which Caffe2 silently ignored. A documented-name value that would change the result
    is refused rather than ignored."""
    n = ctx.int("num_reduce_dim")
    if ctx.has("num_reduce_dims") and ctx.int("num_reduce_dims") != n:
        raise ctx.error("num_reduce_dims=%d: Caffe2's kernels read the argument num_reduce_dim (here %d) and "
                        "ignore num_reduce_dims; name it num_reduce_dim" % (ctx.int("num_reduce_dims"), n))
    return n


def _front_back_view(ctx, shape, front):
    """(rows, cols, output shape) of the (rows, cols) view of X for a Front / Back reduce."""
    n = num_reduce_dims(ctx)
    if not 0 <= n <= len(shape):
        raise ctx.input_error(0, "num_reduce_dim %d is out of range [0, %d] for a %d-D input"
                              % (n, len(shape), len(shape)))
    split = n if front else len(shape) - n
    rows, cols = math.prod(shape[:split]), math.prod(shape[split:])
    out = tuple(shape[split:]) if front else tuple(shape[:split])
    return rows, cols, out


def _lengths(ctx, index, lengths, rows, cols, front, kind):
    """lengths as int64, one per result, each within the reduced extent."""
    if num_reduce_dims(ctx) != 1:
        raise ctx.input_error(index, "with a lengths input num_reduce_dim must be 1, got %d" % num_reduce_dims(ctx))
    check_dtype(ctx, index, lengths, INTS)
    want, extent = (cols, rows) if front else (rows, cols)
    if lengths.size != want:
        raise ctx.input_error(index, "has %d lengths; need one per output value (%d %s)"
                              % (lengths.size, want, "columns" if front else "rows"))
    lengths = lengths.reshape(-1).astype(np.int64)
    low = 0 if kind == "sum" else 1
    if lengths.size and extent and (lengths.min() < low or lengths.max() > extent):
        bad = lengths[(lengths < low) | (lengths > extent)][0]
        raise ctx.input_error(index, "length %d is out of range [%d, %d]%s" % (
            bad, low, extent, "" if low == 0 else " (%s of no elements is undefined)" % kind))
    return lengths


_FRONT_BACK = {   # op type -> (front?, kind, dtypes)
    "ReduceFrontSum": (True, "sum", NUMERIC), "ReduceBackSum": (False, "sum", NUMERIC),
    "ReduceFrontMean": (True, "mean", NUMERIC), "ReduceBackMean": (False, "mean", NUMERIC),
    "ReduceFrontMax": (True, "max", FLOATS), "ReduceBackMax": (False, "max", FLOATS),
}


def _register_front_back(op_type, front, kind, allowed):
    side = "first" if front else "last"
    register_schema(OpSchema(
        op_type, num_inputs=(1, 2), num_outputs=1, args=_FRONT_BACK_ARGS, inputs=("data_in", "lengths"),
        outputs=("data_out",), cost=_reduce_cost,
        inference=lambda ctx, ins: [TensorType(_front_back_view(ctx, ins[0].dims, front)[2], ins[0].dtype)],
        doc="The %s of X over its %s num_reduce_dim dims. With `lengths` (num_reduce_dim 1; one int per "
            "output value) output i reduces only the first lengths[i] entries. %s; integer means truncate."
            % (kind, side, ", ".join(np.dtype(t).name for t in allowed))))
    grad_inputs = ("dY", "X", "Y", "lengths") if kind == "max" else ("dY", "X", "lengths")

    def grad_infer(ctx, ins):
        if kind != "max" and len(ins[1].dims) == 1 and ins[1].dtype == DT.INT64:
            return [UNKNOWN]                # input 1 holds X's shape (old models): values, not types
        return [TensorType(ins[1].dims, ins[0].dtype)]

    register_schema(OpSchema(
        op_type + "Gradient", num_inputs=(len(grad_inputs) - 1, len(grad_inputs)), num_outputs=1,
        args=_FRONT_BACK_ARGS, inputs=grad_inputs, outputs=("dX",), inference=grad_infer,
        doc="Gradient of %s. Input 1 is the forward input X (or, as in models saved before Caffe2 "
            "changed it, X's shape as a 1-D int64 tensor)." % op_type))

    @register_kernel(op_type)
    def front_back(ctx):
        def run(x, lengths=None):
            check_dtype(ctx, 0, x, allowed)
            rows, cols, out = _front_back_view(ctx, x.shape, front)
            if lengths is not None:
                lengths = _lengths(ctx, 1, lengths, rows, cols, front, kind)
            return K.front_back(x.reshape(rows, cols), front, kind, lengths).reshape(out)
        return run

    @register_kernel(op_type + "Gradient")
    def front_back_gradient(ctx):
        def run(dy, x, *rest):
            y = rest[0] if kind == "max" else None
            lengths = rest[-1] if len(rest) > (1 if kind == "max" else 0) else None
            # Input 1 is X, or (models from before Caffe2 changed it) X's shape as 1-D int64
            shape = tuple(int(v) for v in x) if kind != "max" and x.ndim == 1 and x.dtype == np.int64 \
                else x.shape
            if min(shape, default=0) < 0:
                raise ctx.input_error(1, "holds X's shape %s, which has a negative dim" % list(shape))
            rows, cols, out = _front_back_view(ctx, shape, front)
            if dy.size != math.prod(out):
                raise ctx.input_error(0, "has %d values; the reduction of %s has %d" % (dy.size, list(shape),
                                                                                         math.prod(out)))
            if lengths is not None:
                lengths = _lengths(ctx, ctx.n_inputs - 1, lengths, rows, cols, front, kind)
            x2 = None
            if kind == "max":
                if y.size != dy.size:
                    raise ctx.input_error(2, "has %d values, dY has %d" % (y.size, dy.size))
                x2 = x.reshape(rows, cols)
            return K.front_back_gradient(dy, rows, cols, front, kind, lengths, x2, y).reshape(shape)
        return run

    @register_gradient(op_type)
    def _maker(g):
        ins = [g.GO(0), g.input_value(0)] + ([g.O(0)] if kind == "max" else [])
        ins += [g.I(1)] if len(g.def_.input) == 2 else []
        return [g.op(op_type + "Gradient", ins, [g.GI(0)])]


for _type, (_front, _kind, _allowed) in _FRONT_BACK.items():
    _register_front_back(_type, _front, _kind, _allowed)


# ----------------------------------------------------------------- ReduceTailSum

register_schema(OpSchema(
    "ReduceTailSum", num_inputs=1, num_outputs=1, inputs=("mat",), outputs=("output",), cost=_reduce_cost,
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[:1]), ins[0].dtype)],
    doc="output[i] = the sum of X[i] over all its trailing dims (X at least 1-D; output [X.dims[0]])."))


@register_kernel("ReduceTailSum")
def reduce_tail_sum(ctx):
    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        if x.ndim < 1:
            raise ctx.input_error(0, "must be at least 1-D, got a scalar")
        return K.front_back(x.reshape(x.shape[0], math.prod(x.shape[1:])), False, "sum")
    return run


# ----------------------------------------------------------------- SumElements / SumSqrElements / SumElementsInt

def _scalar_of(dtype):
    return lambda ctx, ins: [TensorType((), dtype if dtype is not None else ins[0].dtype)]


register_schema(OpSchema(
    "SumElements", num_inputs=1, num_outputs=1, args=(Arg("average", "bool", False, doc="divide by the count"),),
    inputs=("X",), outputs=("sum",), inference=_scalar_of(None), cost=_reduce_cost,
    doc="The sum (average=1: the mean) of all elements of X, as a 0-d tensor of X's float type."))
register_schema(OpSchema(
    "SumSqrElements", num_inputs=1, num_outputs=1, args=(Arg("average", "bool", False),),
    inputs=("X",), outputs=("sum",), inference=_scalar_of(None), cost=_reduce_cost,
    doc="The sum (average=1: the mean) of the squares of all elements of X, as a 0-d tensor."))
register_schema(OpSchema(
    "SumElementsInt", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("sum",),
    inference=_scalar_of(DT.INT32), cost=_reduce_cost,
    doc="The sum of all elements of the int32 tensor X, as a 0-d int32 tensor (wrapping on overflow)."))
register_schema(OpSchema(
    "SumElementsGradient", num_inputs=2, num_outputs=1, args=(Arg("average", "bool", False),),
    inputs=("X", "dsum"), outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of SumElements: every element of dX is dsum (divided by X's size with average=1)."))


def _mean_or_sum(total, count, average):
    if not average:
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / total.dtype.type(count)).astype(total.dtype)


@register_kernel("SumElements")
def sum_elements(ctx):
    average = ctx.bool("average")

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        return _mean_or_sum(K.reduce_axes(x, tuple(range(x.ndim)), False, "sum"), x.size, average)
    return run


@register_kernel("SumSqrElements")
def sum_sqr_elements(ctx):
    average = ctx.bool("average")

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        total = np.asarray(np.vdot(wide.reshape(-1), wide.reshape(-1))).astype(x.dtype)
        return _mean_or_sum(total, x.size, average)
    return run


@register_kernel("SumElementsInt")
def sum_elements_int(ctx):
    def run(x):
        check_dtype(ctx, 0, x, (np.int32,))
        return np.asarray(np.sum(x, dtype=np.int32))
    return run


@register_kernel("SumElementsGradient")
def sum_elements_gradient(ctx):
    average = ctx.bool("average")

    def run(x, dsum):
        if dsum.size != 1:
            raise ctx.input_error(1, "must hold one value, got shape %s" % list(dsum.shape))
        value = dsum.reshape(-1)[0] / (max(x.size, 1) if average else 1)
        return np.full(x.shape, value, dtype=dsum.dtype)
    return run


@register_gradient("SumElements")
def _sum_elements_maker(g):
    return [g.op("SumElementsGradient", [g.input_value(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SumInt

register_schema(OpSchema(
    "SumInt", num_inputs=(1, None), num_outputs=1, allow_inplace={(0, 0)}, inputs=("input",), outputs=("sum",),
    inference=lambda ctx, ins: [ins[0]],
    cost=lambda ctx, ins: Cost(flops=(len(ins) - 1) * (math.prod(ins[0].dims) if ins[0].known else 0)),
    doc="Elementwise sum of integer tensors of one shape and type (int32 or int64)."))


@register_kernel("SumInt")
def sum_int(ctx):
    def run(*xs):
        check_dtype(ctx, 0, xs[0], INTS)
        out = np.array(xs[0], copy=True)
        for k, x in enumerate(xs[1:], 1):
            if x.shape != out.shape or x.dtype != out.dtype:
                raise ctx.input_error(k, "%s %s differs from input 0's %s %s; SumInt adds tensors of one shape "
                                      "and type" % (x.dtype, list(x.shape), out.dtype, list(out.shape)))
            out += x
        return out
    return run


# ----------------------------------------------------------------- SumReduceLike

def _sum_reduce_like_axes(ctx, a_shape, b_shape):
    """A's dims that SumReduceLike sums over: those B (viewed with Caffe2's legacy
    broadcast at `axis`) does not span."""
    view = legacy_view(ctx, a_shape, b_shape, legacy_axis(ctx))
    if view == ():
        return tuple(range(len(a_shape)))
    return tuple(i for i, d in enumerate(view) if d == 1)


register_schema(OpSchema(
    "SumReduceLike", num_inputs=2, num_outputs=1, inputs=("A", "B"), outputs=("C",),
    args=tuple(a for a in BINARY_ARGS if a.name != "broadcast"),
    inference=lambda ctx, ins: (_sum_reduce_like_axes(ctx, ins[0].dims, ins[1].dims),
                                [TensorType(ins[1].dims, ins[0].dtype)])[1],
    cost=_reduce_cost,
    doc="C (B's shape, A's type) = A summed over the dims that B does not span, B placed on A's dims "
        "from `axis` (Caffe2's legacy broadcast; -1: B matches A's trailing dims; a one-element B sums "
        "everything). float and double."))


@register_kernel("SumReduceLike")
def sum_reduce_like(ctx):
    legacy_axis(ctx)                       # axis / axis_str / order checked at plan time

    def run(a, b):
        check_dtype(ctx, 0, a, FLOATS)
        axes = _sum_reduce_like_axes(ctx, a.shape, b.shape)
        return K.reduce_axes(a, axes, True, "sum").reshape(b.shape)
    return run


# ----------------------------------------------------------------- ColwiseMax

register_schema(OpSchema(
    "ColwiseMax", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",), cost=_reduce_cost,
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], ins[0].dims[2]), ins[0].dtype)]
    if len(ins[0].dims) == 3 else [UNKNOWN],
    doc="Y[b, n] = max over m of X[b, m, n] for a 3-D X (batch, M, N)."))
register_schema(OpSchema(
    "ColwiseMaxGradient", num_inputs=3, num_outputs=1, inputs=("X", "Y", "dY"), outputs=("dX",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of ColwiseMax: dY goes to every entry equal to its column's maximum."))


def _check_3d(ctx, x):
    if x.ndim != 3:
        raise ctx.input_error(0, "must be 3-D (batch, M, N), got shape %s" % list(x.shape))


@register_kernel("ColwiseMax")
def colwise_max(ctx):
    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        _check_3d(ctx, x)
        return K.reduce_axes(x, (1,), False, "max")
    return run


@register_kernel("ColwiseMaxGradient")
def colwise_max_gradient(ctx):
    def run(x, y, dy):
        _check_3d(ctx, x)
        want = (x.shape[0], x.shape[2])
        for index, v in ((1, y), (2, dy)):
            if v.shape != want:
                raise ctx.input_error(index, "shape %s differs from %s (X %s without its dim 1)"
                                      % (list(v.shape), list(want), list(x.shape)))
        return K.reduce_axes_gradient(dy, x, y, (1,), "max")
    return run


@register_gradient("ColwiseMax")
def _colwise_max_maker(g):
    return [g.op("ColwiseMaxGradient", [g.input_value(0), g.O(0), g.GO(0)], [g.GI(0)])]


should_not_do_gradient("SumElementsInt", "SumInt")
