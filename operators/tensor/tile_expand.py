"""Caffe2's NumpyTile (np.tile with the repeats as a tensor) and Expand (broadcast X
to a shape given as a tensor) with ExpandGradient(dY, X) -> dX.
Kernels: kernels/cpu/tensor/tile_expand.py."""
import math

import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.tensor import tile_expand as K
from caffe2py.registry import UNKNOWN, Cost, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import output_size_problem

from .._common import same_as_input


def _copy_cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(bytes_read=4 * n)


def _int_vector(ctx, index, v):
    if v.ndim != 1 or v.dtype.kind not in "iu":
        raise ctx.input_error(index, "must be a 1-D integer tensor, got %s of shape %s"
                              % (v.dtype, list(v.shape)))
    return [int(s) for s in v]


def _check_size(ctx, shape, itemsize):
    problem = output_size_problem(list(shape), itemsize)
    if problem:
        raise ctx.error("output shape %s: %s" % (list(shape), problem))


register_schema(OpSchema(
    "NumpyTile", num_inputs=2, num_outputs=1, inputs=("input", "repeats"), outputs=("tiled_data",),
    inference=lambda ctx, ins: [UNKNOWN], cost=_copy_cost,
    doc="np.tile(input, repeats): repeats is a 1-D integer tensor with one count (>= 0) per axis "
        "of input."))


@register_kernel("NumpyTile")
def numpy_tile(ctx):
    def run(x, repeats):
        reps = _int_vector(ctx, 1, repeats)
        if len(reps) != x.ndim:
            raise ctx.input_error(1, "repeats has %d values; input has %d axes" % (len(reps), x.ndim))
        if any(r < 0 for r in reps):
            raise ctx.input_error(1, "repeats must be >= 0, got %s" % reps)
        _check_size(ctx, [d * r for d, r in zip(x.shape, reps)], x.itemsize)
        return np.tile(x, reps)
    return run


register_schema(OpSchema(
    "Expand", num_inputs=2, num_outputs=1, inputs=("X", "shape"), outputs=("Y",),
    inference=lambda ctx, ins: [UNKNOWN], cost=_copy_cost,
    doc="X broadcast (NumPy rules) with the 1-D integer tensor shape; a -1 in shape keeps X's "
        "size on that axis, and shape may have fewer axes than X."))
register_schema(OpSchema(
    "ExpandGradient", num_inputs=2, num_outputs=1, inputs=("dY", "X"), outputs=("dX",),
    inference=same_as_input(1), cost=_copy_cost,
    doc="Gradient of Expand: dY summed over the axes Expand broadcast, in X's shape."))


@register_kernel("Expand")
def expand(ctx):
    def run(x, shape):
        dims = _int_vector(ctx, 1, shape)
        out_shape = K.expanded_shape(x.shape, dims)
        if out_shape is None:
            raise ctx.input_error(1, "shape %s does not broadcast with X's shape %s" % (dims, list(x.shape)))
        _check_size(ctx, out_shape, x.itemsize)
        return K.expand(x, out_shape)
    return run


@register_kernel("ExpandGradient")
def expand_gradient(ctx):
    def run(dy, x):
        if K.expanded_shape(x.shape, dy.shape) != dy.shape:
            raise ctx.input_error(0, "shape %s is not an expansion of X's %s" % (list(dy.shape), list(x.shape)))
        return K.expand_grad(dy, x.shape)
    return run


@register_gradient("Expand")
def _expand_gradient(g):
    return [g.op("ExpandGradient", [g.GO(0), g.I(0)], [g.GI(0)])]
