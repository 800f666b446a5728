"""Caffe2's rules for binary elementwise ops (comparisons, logic, Pow): the legacy
`broadcast=1, axis=k` form and NumPy broadcasting otherwise, plus the dtype checks
every caffe2-domain elementwise op shares. Used by the caffe2_* operator modules."""
import math

import numpy as np

from caffe2py.registry import Arg, TensorType

BINARY_ARGS = (
    Arg("broadcast", "int", 0, doc="1: Caffe2's legacy broadcast (B's shape is a contiguous run of A's "
                                   "dims starting at `axis`); 0: NumPy broadcasting"),
    Arg("axis", "int", -1, doc="legacy broadcast: the dim of A that B's first dim matches (-1: suffix)"),
    Arg("axis_str", "string", "", doc="legacy broadcast: the axis as a letter of `order`"),
    Arg("order", "string", "NCHW", doc="the layout that axis_str refers to"))

FLOATS = (np.float16, np.float32, np.float64)
NUMERIC = (np.int32, np.int64) + FLOATS
INTS = (np.int32, np.int64)


def check_dtype(ctx, index, x, allowed):
    """x's dtype must be one of `allowed` (numpy types), else a named error."""
    if x.dtype.type not in allowed:
        raise ctx.input_error(index, "%s does not support dtype %s (supported: %s)"
                              % (ctx.type, x.dtype, ", ".join(np.dtype(t).name for t in allowed)))


def legacy_axis(ctx):
    """The broadcast axis of a broadcast=1 op from `axis` / `axis_str` + `order`
    (plan time; -1 means B matches A's trailing dims)."""
    axis, axis_str = ctx.int("axis"), ctx.string("axis_str")
    if not axis_str:
        return axis
    if ctx.has("axis") and axis != -1:
        raise ctx.error("arguments axis and axis_str cannot be used together")
    order = ctx.string("order")
    if len(axis_str) != 1 or axis_str not in order:
        raise ctx.error("axis_str '%s' is not one letter of order '%s'" % (axis_str, order))
    return order.index(axis_str)


def legacy_view(ctx, a_shape, b_shape, axis):
    """The shape B is viewed as so that NumPy broadcasting computes Caffe2's legacy
    broadcast of B against A: a one-element B is a scalar; otherwise B (leading and
    trailing 1-dims ignored) must equal A's dims from `axis` exactly."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if math.prod(b_shape) == 1:
        return ()
    if len(b_shape) > len(a_shape):
        raise ctx.input_error(1, "with broadcast=1, B (shape %s) must not have more dims than A (shape %s)"
                              % (list(b_shape), list(a_shape)))
    if axis == -1:
        axis = len(a_shape) - len(b_shape)
    if not 0 <= axis <= len(a_shape) - len(b_shape):
        raise ctx.error("broadcast axis %d is out of range [0, %d] for A of shape %s and B of shape %s"
                        % (axis, len(a_shape) - len(b_shape), list(a_shape), list(b_shape)))
    start, end = 0, len(b_shape)
    while start < end and b_shape[start] == 1:
        start += 1
    while end > start and b_shape[end - 1] == 1:
        end -= 1
    for i in range(start, end):
        if a_shape[axis + i] != b_shape[i]:
            raise ctx.input_error(1, "with broadcast=1 and axis %d, B of shape %s does not match A of shape %s "
                                     "(dim %d of B is %d, dim %d of A is %d)"
                                  % (axis, list(b_shape), list(a_shape), i, b_shape[i], axis + i,
                                     a_shape[axis + i]))
    return (1,) * (axis + start) + b_shape[start:end] + (1,) * (len(a_shape) - axis - end)


def numpy_shape(ctx, a_shape, b_shape):
    """NumPy broadcasting of A and B, or a named error."""
    try:
        return tuple(np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    except ValueError:
        raise ctx.error("shapes %s of '%s' and %s of '%s' do not broadcast (NumPy rules; pass broadcast=1 "
                        "for Caffe2's legacy broadcasting)"
                        % (list(a_shape), ctx.inputs[0], list(b_shape), ctx.inputs[1])) from None


def binary_inference(out_dtype=None):
    """Inference for a broadcasting binary op; out_dtype None keeps A's type."""
    def infer(ctx, ins):
        a, b = ins
        dtype = a.dtype if out_dtype is None else out_dtype
        if ctx.bool("broadcast"):
            legacy_view(ctx, a.dims, b.dims, legacy_axis(ctx))
            return [TensorType(a.dims, dtype)]
        return [TensorType(numpy_shape(ctx, a.dims, b.dims), dtype)]
    return infer


def binary_runner(ctx, fn, allowed, same_dtype=True):
    """The run function of a Caffe2 binary op: checks dtypes and in-place rules,
    then applies fn(a, b_view) with the broadcast the op's arguments select."""
    legacy = ctx.bool("broadcast")
    axis = legacy_axis(ctx) if legacy else -1
    out = ctx.outputs[0]
    if legacy and ctx.inputs[1] == out and ctx.inputs[0] != out:
        raise ctx.error("with broadcast=1 only input 0 may be the output (in place)")
    inplace_a = ctx.inputs[0] == out
    inplace_b = ctx.inputs[1] == out and not inplace_a

    def run(a, b):
        check_dtype(ctx, 0, a, allowed)
        if same_dtype and b.dtype != a.dtype:
            raise ctx.input_error(1, "dtype %s differs from A's %s; %s needs both of one type"
                                  % (b.dtype, a.dtype, ctx.type))
        check_dtype(ctx, 1, b, allowed)
        if legacy:
            return fn(a, b.reshape(legacy_view(ctx, a.shape, b.shape, axis)))
        shape = numpy_shape(ctx, a.shape, b.shape)
        if (inplace_a and shape != a.shape) or (inplace_b and shape != b.shape):
            raise ctx.error("in place, the output shape %s must equal the shape of the input it replaces"
                            % list(shape))
        return fn(a, b)
    return run
