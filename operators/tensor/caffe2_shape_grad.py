"""Gradients of Caffe2's shape ops (caffe2_shape.py), as Caffe2 makes them:
  ExpandDims -> Squeeze(dY) and Squeeze -> ExpandDims(dY), both with the forward's `dims`;
  PrependDim -> MergeDim(dY), no arguments copied (MergeDim itself has no gradient in
    Caffe2, so none here either);
  Slice -> SliceGradient(X, dY), or SliceGradient(X, starts, ends, dY) when starts and
    ends were inputs: zeros of X's shape with dY in the sliced window.
ResizeLike, HasElements, IsEmpty, UnsafeCoalesce and ScatterAssign refuse a gradient
(SHOULD_NOT_DO_GRADIENT); Size, Range and DiagonalFill stop one (NO_GRADIENT)."""
import numpy as np

from caffe2py.gradients import no_gradient, register_gradient, should_not_do_gradient
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .caffe2_shape import slice_arguments, slice_blob_bounds, slice_bounds


@register_gradient("ExpandDims")
def _expand_dims_maker(g):
    return [g.op("Squeeze", [g.GO(0)], [g.GI(0)])]


@register_gradient("Squeeze")
def _squeeze_maker(g):
    return [g.op("ExpandDims", [g.GO(0)], [g.GI(0)])]


@register_gradient("PrependDim", copy_arguments=False)
def _prepend_dim_maker(g):
    return [g.op("MergeDim", [g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SliceGradient

register_schema(OpSchema(
    "SliceGradient", num_inputs={2, 4}, num_outputs=1, inputs=("X", "starts", "ends", "dY"), outputs=("dX",),
    args=(Arg("starts", "ints", None, doc="start index per dim"), Arg("ends", "ints", None, doc="end index per dim")),
    inference=lambda ctx, ins: [TensorType(ins[0].dims, ins[-1].dtype)],
    doc="Gradient of Slice: inputs (X, dY) with the forward's starts/ends arguments, or (X, starts, ends, "
        "dY); dX has X's shape, dY in the sliced window and zeros elsewhere."))


@register_kernel("SliceGradient")
def slice_gradient(ctx):
    arg_starts, arg_ends = slice_arguments(ctx, 2)

    def run(x, *rest):
        dy = rest[-1]
        bounds = (slice_bounds(ctx, x.shape, arg_starts, arg_ends) if arg_starts is not None
                  else slice_blob_bounds(ctx, x.shape, rest[0], rest[1]))
        window = tuple(e - s for s, e in bounds)
        if dy.shape != window:
            raise ctx.input_error(ctx.n_inputs - 1, "has shape %s; the slice of X %s is %s"
                                  % (list(dy.shape), list(x.shape), list(window)))
        dx = np.zeros(x.shape, dy.dtype)
        dx[tuple(slice(s, e) for s, e in bounds)] = dy
        return dx
    return run


@register_gradient("Slice")
def _slice_maker(g):
    inputs = [g.I(0), g.I(1), g.I(2)] if len(g.def_.input) > 1 else [g.I(0)]
    return [g.op("SliceGradient", inputs + [g.GO(0)], [g.GI(0)])]


should_not_do_gradient("ResizeLike", "HasElements", "IsEmpty", "UnsafeCoalesce", "ScatterAssign")
no_gradient("Size", "Range", "DiagonalFill")
