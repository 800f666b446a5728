"""Caffe2's selection ops in the caffe2 domain: ArgMax, ArgMin (`axis`, `keepdims`) and
TopK (`k` or a k input, `axis`; values, int64 indices and optionally indices into the
flattened input), with TopKGradient. Kernels: kernels/cpu/math/reduce.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.math import reduce as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import NUMERIC, check_dtype
from .._gradient_hooks import register_gradient, should_not_do_gradient

DT = caffe2_pb2.TensorProto


def canonical_axis(ctx, axis, ndim, index=0):
    """Caffe2's arg/top-k axis rule: -1 is the last dim, other values must be in [0, ndim)."""
    if axis == -1 and ndim > 0:
        return ndim - 1
    if not 0 <= axis < ndim:
        raise ctx.input_error(index, "axis %d is out of range for a %d-D input (valid: -1 and [0, %d])"
                              % (axis, ndim, ndim - 1))
    return axis


def _select_cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(flops=n, bytes_read=4 * n)


# ----------------------------------------------------------------- ArgMax / ArgMin

def _arg_dims(ctx, dims):
    axis = canonical_axis(ctx, ctx.int("axis"), len(dims))
    keep = ctx.bool("keepdims")
    return tuple(dims[:axis]) + ((1,) if keep else ()) + tuple(dims[axis + 1:])


def _register_arg(op_type, largest):
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Indices",),
        args=(Arg("axis", "int", -1, doc="-1: the last dim"),
              Arg("keepdims", "bool", True, doc="keep the reduced dim with size 1")),
        inference=lambda ctx, ins: [TensorType(_arg_dims(ctx, ins[0].dims), DT.INT64)], cost=_select_cost,
        doc="int64 index of the first %s value along `axis` (NaN counts as the %s, as in NumPy; 0 for an "
            "empty axis). int32, int64, float and double." % ("largest" if largest else "smallest",
                                                             "largest" if largest else "smallest")))

    @register_kernel(op_type)
    def arg(ctx):
        keep = ctx.bool("keepdims")
        axis_arg = ctx.int("axis")

        def run(x):
            check_dtype(ctx, 0, x, NUMERIC)
            return K.arg_extreme(x, canonical_axis(ctx, axis_arg, x.ndim), keep, largest)
        return run


_register_arg("ArgMax", True)
_register_arg("ArgMin", False)
should_not_do_gradient("ArgMax", "ArgMin")


# ----------------------------------------------------------------- TopK

def _k_arg(ctx):
    k = ctx.int("k")
    if k == -1 and ctx.n_inputs == 2:
        return None                     # from input 1 at run time
    if k < 1:
        raise ctx.error("k must be >= 1 (argument k, or k=-1 with k as input 1), got %d" % k)
    if ctx.n_inputs == 2:
        raise ctx.error("k is given both as argument (%d) and as input 1; give one" % k)
    return k


def _topk_infer(ctx, ins):
    x = ins[0].dims
    k = _k_arg(ctx)
    if k is None:
        return [UNKNOWN] * ctx.n_outputs
    axis = canonical_axis(ctx, ctx.int("axis"), len(x))
    dims = tuple(x[:axis]) + (k,) + tuple(x[axis + 1:])
    outs = [TensorType(dims, ins[0].dtype), TensorType(dims, DT.INT64)]
    if ctx.n_outputs == 3:
        outs.append(TensorType((math.prod(dims),), DT.INT64))
    return outs


register_schema(OpSchema(
    "TopK", num_inputs=(1, 2), num_outputs=(2, 3), inputs=("X", "k"),
    outputs=("Values", "Indices", "Flattened_indices"),
    args=(Arg("k", "int", -1, doc="how many; -1 reads it from input 1 (an int64 scalar)"),
          Arg("axis", "int", -1, doc="-1: the last dim")),
    inference=_topk_infer, cost=_select_cost,
    doc="The k largest values along `axis`, largest first (equal values in index order), their int64 "
        "indices along that axis and, as an optional third output, their positions in X flattened (1-D). "
        "With k larger than the dim, values are padded with 0 and indices with -1. NaN ranks highest."))
register_schema(OpSchema(
    "TopKGradient", num_inputs=3, num_outputs=1, args=(Arg("axis", "int", -1),),
    inputs=("dValues", "Indices", "X"), outputs=("dX",), inference=lambda ctx, ins: [ins[2]],
    doc="Gradient of TopK: dX is zero except at the selected indices, which get dValues."))


def _k_input(ctx, blob):
    blob = np.asarray(blob)
    if blob.size != 1 or blob.dtype.kind not in "iu":
        raise ctx.input_error(1, "k must be one integer, got %s of shape %s" % (blob.dtype, list(blob.shape)))
    k = int(blob.reshape(-1)[0])
    if k < 1:
        raise ctx.input_error(1, "k must be >= 1, got %d" % k)
    return k


@register_kernel("TopK")
def top_k(ctx):
    k_arg = _k_arg(ctx)
    axis_arg = ctx.int("axis")
    flat = ctx.n_outputs == 3

    def run(x, k_blob=None):
        check_dtype(ctx, 0, x, NUMERIC)
        k = k_arg if k_blob is None else _k_input(ctx, k_blob)
        axis = canonical_axis(ctx, axis_arg, x.ndim)
        values, indices = K.top_k(x, k, axis)
        if not flat:
            return values, indices
        return values, indices, K.flat_indices(indices, x.shape, axis)
    return run


@register_kernel("TopKGradient")
def top_k_gradient(ctx):
    axis_arg = ctx.int("axis")

    def run(dvalues, indices, x):
        axis = canonical_axis(ctx, axis_arg, x.ndim, 2)
        want = tuple(x.shape[:axis]) + (dvalues.shape[axis] if dvalues.ndim == x.ndim else -1,) \
            + tuple(x.shape[axis + 1:])
        if dvalues.shape != want or indices.shape != dvalues.shape:
            raise ctx.input_error(0, "dValues %s and Indices %s must have X's shape %s but for dim %d"
                                  % (list(dvalues.shape), list(indices.shape), list(x.shape), axis))
        check_dtype(ctx, 1, indices, (np.int64, np.int32))
        if indices.size and (indices.max() >= x.shape[axis] or indices.min() < -1):
            bad = indices[(indices >= x.shape[axis]) | (indices < -1)].reshape(-1)[0]
            raise ctx.input_error(1, "index %d is out of range for dim %d of X (size %d; -1 marks padding)"
                                  % (bad, axis, x.shape[axis]))
        return K.top_k_gradient(dvalues, indices, x.shape, axis)
    return run


@register_gradient("TopK")
def _top_k_maker(g):
    return [g.op("TopKGradient", [g.GO(0), g.O(1), g.input_value(0)], [g.GI(0)])]
