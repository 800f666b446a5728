"""Caffe2's image layout ops in the caffe2 domain: NCHW2NHWC, NHWC2NCHW, SpaceToBatch,
BatchToSpace, PadImage (with PadImageGradient), and DepthConcat / DepthSplit, Caffe2's
old names of Concat / Split (aliases sharing their kernels). Kernels:
kernels/cpu/tensor/image_layout.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.tensor import image_layout as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_alias, register_kernel, register_schema

from . import tensor as _tensor_ops  # noqa: F401  (Concat and Split, aliased below)
from .._common import conv_geometry
from .._gradient_hooks import delegate_gradient, register_gradient


def _copy_cost(ctx, ins):
    n = float(math.prod(ins[0].dims)) if ins[0].known else 0.0
    return Cost(bytes_read=4 * n, bytes_written=4 * n)


# ----------------------------------------------------------------- NCHW2NHWC / NHWC2NCHW

def _switch_dims(ctx, dims, to_nhwc):
    if len(dims) < 3:
        raise ctx.input_error(0, "needs at least 3 dims (N, C, spatial...), got shape %s" % list(dims))
    if to_nhwc:
        return (dims[0],) + tuple(dims[2:]) + (dims[1],)
    return (dims[0], dims[-1]) + tuple(dims[1:-1])


def _register_switch(op_type, to_nhwc, inverse):
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, inputs=("data",), outputs=("output",), cost=_copy_cost,
        inference=lambda ctx, ins: [TensorType(_switch_dims(ctx, ins[0].dims, to_nhwc), ins[0].dtype)],
        doc="Moves the channel dim %s (input at least 3-D)." % ("from 1 to the end" if to_nhwc else
                                                               "from the end to 1")))

    @register_kernel(op_type)
    def switch(ctx):
        def run(x):
            _switch_dims(ctx, x.shape, to_nhwc)
            return np.ascontiguousarray(np.moveaxis(x, 1, -1) if to_nhwc else np.moveaxis(x, -1, 1))
        return run

    @register_gradient(op_type)
    def _maker(g):
        return [g.op(inverse, [g.GO(0)], [g.GI(0)])]


_register_switch("NCHW2NHWC", True, "NHWC2NCHW")
_register_switch("NHWC2NCHW", False, "NCHW2NHWC")


# ----------------------------------------------------------------- SpaceToBatch / BatchToSpace

_SPACE_ARGS = (Arg("pad", "int", 0, doc="default for the four pads"), Arg("pad_t", "int"), Arg("pad_l", "int"),
               Arg("pad_b", "int"), Arg("pad_r", "int"), Arg("block_size", "int", 2),
               Arg("order", "string", "NCHW", doc="NCHW only"))


def _space_args(ctx):
    """(pads (t, l, b, r), block) checked at plan time. Each pad_* defaults to `pad`
    (Caffe2's kernel read `pad` for pad_l, pad_b and pad_r; every name counts here)."""
    if ctx.string("order") != "NCHW":
        raise ctx.error("only order NCHW is supported, got '%s'" % ctx.string("order"))
    pad = ctx.int("pad")
    pads = tuple(ctx.int(name, pad) for name in ("pad_t", "pad_l", "pad_b", "pad_r"))
    block = ctx.int("block_size")
    if block < 1 or min(pads) < 0:
        raise ctx.error("block_size must be >= 1 and pads >= 0, got block_size %d and pads %s" % (block, list(pads)))
    return pads, block


def _space_to_batch_dims(ctx, dims):
    (pt, pl, pb, pr), block = _space_args(ctx)
    if len(dims) != 4:
        raise ctx.input_error(0, "must be 4-D NCHW, got shape %s" % list(dims))
    h, w = dims[2] + pt + pb, dims[3] + pl + pr
    if h % block or w % block:
        raise ctx.input_error(0, "padded height %d and width %d must be multiples of block_size %d"
                              % (h, w, block))
    return (dims[0] * block * block, dims[1], h // block, w // block)


def _batch_to_space_dims(ctx, dims):
    (pt, pl, pb, pr), block = _space_args(ctx)
    if len(dims) != 4:
        raise ctx.input_error(0, "must be 4-D NCHW, got shape %s" % list(dims))
    if dims[0] % (block * block):
        raise ctx.input_error(0, "batch %d is not a multiple of block_size^2 = %d" % (dims[0], block * block))
    h, w = dims[2] * block - pt - pb, dims[3] * block - pl - pr
    if h < 0 or w < 0:
        raise ctx.error("pads %s exceed the unpadded size %d x %d" % ([pt, pl, pb, pr], dims[2] * block,
                                                                       dims[3] * block))
    return (dims[0] // (block * block), dims[1], h, w)


def _register_space(op_type, dims_fn, kernel, inverse, doc):
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, args=_SPACE_ARGS, inputs=("X",), outputs=("Y",), cost=_copy_cost,
        inference=lambda ctx, ins: [TensorType(dims_fn(ctx, ins[0].dims), ins[0].dtype)], doc=doc))

    @register_kernel(op_type)
    def factory(ctx):
        pads, block = _space_args(ctx)

        def run(x):
            dims_fn(ctx, x.shape)
            return kernel(x, pads, block)
        return run

    @register_gradient(op_type)
    def _maker(g):
        return [g.op(inverse, [g.GO(0)], [g.GI(0)])]


_register_space("SpaceToBatch", _space_to_batch_dims, K.space_to_batch, "BatchToSpace",
                "Zero-pads a 4-D NCHW X by pad_t/pad_l/pad_b/pad_r, then moves each block_size x block_size "
                "block of pixels into the batch: Y[(bh * block_size + bw) * N + n, c, h, w] = "
                "padded X[n, c, h * block_size + bh, w * block_size + bw].")
_register_space("BatchToSpace", _batch_to_space_dims, K.batch_to_space, "SpaceToBatch",
                "The inverse of SpaceToBatch: the batch (a multiple of block_size^2) goes back into "
                "block_size x block_size blocks of pixels, then the pads are cropped.")


# ----------------------------------------------------------------- PadImage

_PAD_ARGS = (Arg("mode", "string", "constant", doc="constant, reflect or edge"),
             Arg("value", "float", 0.0, doc="the constant of mode constant"),
             Arg("pad", "int", 0), Arg("pads", "ints"), Arg("pad_t", "int"), Arg("pad_l", "int"),
             Arg("pad_b", "int"), Arg("pad_r", "int"), Arg("order", "string", "NCHW"))
_MODES = ("constant", "reflect", "edge")


def _pad_args(ctx):
    """(mode, value, pads (t, l, b, r), spatial axes) checked at plan time."""
    mode = ctx.string("mode")
    if mode not in _MODES:
        raise ctx.error("mode must be one of %s, got '%s'" % (", ".join(_MODES), mode))
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    for name in ("kernel", "stride", "dilation"):
        if ctx.has(name) and ctx.int(name) != 1:
            raise ctx.error("PadImage only pads: argument %s must be 1 if given, got %d" % (name, ctx.int(name)))
    for name in ("kernels", "strides", "dilations"):
        if ctx.has(name) and any(v != 1 for v in ctx.ints(name)):
            raise ctx.error("PadImage only pads: argument %s must be all 1 if given, got %s" % (name, ctx.ints(name)))
    if ctx.int("legacy_pad", 0) != 0:
        raise ctx.error("PadImage takes explicit pads only, not legacy_pad %d" % ctx.int("legacy_pad", 0))
    _, _, pads, _ = conv_geometry(ctx, 2)
    if len(pads) != 4:
        raise ctx.error("pads must be 4 values (top, left, bottom, right), got %s" % list(pads))
    axes = (2, 3) if order == "NCHW" else (1, 2)
    return mode, ctx.float("value"), tuple(pads), axes


def _check_sources(ctx, pads, mode, axes, image_dims, what):
    """Reflect and edge read the pixel Caffe2's formula names; refuse pads for which it
    names none (Caffe2 would read outside the image: large reflect pads, an empty image)."""
    if mode == "constant":
        return
    for axis, before, after in ((axes[0], pads[0], pads[2]), (axes[1], pads[1], pads[3])):
        size = image_dims[axis]
        src = K.source_index(size, before, after, mode)
        if src.size and (src.min() < 0 or src.max() >= size):
            raise ctx.input_error(0, "%s padding %s reads outside %s dim %d of size %d (reflect takes a "
                                     "top/left pad up to 2 * size - 2 and a bottom/right one up to size - 1; "
                                     "edge needs a non-empty dim)" % (mode, list(pads), what, axis, size))


def _padded_dims(ctx, dims, grow):
    _, _, (pt, pl, pb, pr), (ha, wa) = _pad_args(ctx)
    if len(dims) != 4:
        raise ctx.input_error(0, "must be 4-D, got shape %s" % list(dims))
    out = list(dims)
    sign = 1 if grow else -1
    out[ha] += sign * (pt + pb)
    out[wa] += sign * (pl + pr)
    if min(out) < 0:
        raise ctx.input_error(0, "shape %s is smaller than the pads %s" % (list(dims), [pt, pl, pb, pr]))
    return tuple(out)


register_schema(OpSchema(
    "PadImage", num_inputs=1, num_outputs=1, args=_PAD_ARGS, inputs=("X",), outputs=("Y",), cost=_copy_cost,
    inference=lambda ctx, ins: [TensorType(_padded_dims(ctx, ins[0].dims, True), ins[0].dtype)],
    doc="Pads the two spatial dims of a 4-D NCHW or NHWC X (pad / pads [t, l, b, r] / pad_t.. as Conv; "
        "a negative pad crops that side, in every mode, as Caffe2): mode constant fills `value`, "
        "reflect mirrors without repeating the edge (Caffe2's index formula: a top/left pad up to "
        "2 * size - 2, a bottom/right one up to size - 1), "
        "edge repeats the edge."))
register_schema(OpSchema(
    "PadImageGradient", num_inputs=1, num_outputs=1, args=_PAD_ARGS, inputs=("dY",), outputs=("dX",),
    inference=lambda ctx, ins: [TensorType(_padded_dims(ctx, ins[0].dims, False), ins[0].dtype)],
    doc="Gradient of PadImage: each gradient value added to the input pixel its output copied "
        "(pixels a negative pad cropped get 0)."))


@register_kernel("PadImage")
def pad_image(ctx):
    mode, value, pads, axes = _pad_args(ctx)

    def run(x):
        _padded_dims(ctx, x.shape, True)
        if mode == "constant" and x.dtype.kind in "iu" and not (
                float(value).is_integer() and np.iinfo(x.dtype).min <= value <= np.iinfo(x.dtype).max):
            raise ctx.input_error(0, "is %s; the pad value %r is not one of its values" % (x.dtype, value))
        _check_sources(ctx, pads, mode, axes, x.shape, "the input's")
        return K.pad_image(x, pads, mode, value, axes)
    return run


@register_kernel("PadImageGradient")
def pad_image_gradient(ctx):
    mode, _, pads, axes = _pad_args(ctx)

    def run(dy):
        dims = _padded_dims(ctx, dy.shape, False)
        if dy.size:
            _check_sources(ctx, pads, mode, axes, dims, "the forward input's")
        return K.pad_image_gradient(dy, pads, mode, axes)
    return run


@register_gradient("PadImage")
def _pad_image_maker(g):
    return [g.op("PadImageGradient", [g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- DepthConcat / DepthSplit

register_alias("DepthConcat", "Concat", num_outputs=2,
               doc="Caffe2's old name of Concat (two outputs: the result and each input's size along the axis).")
register_alias("DepthSplit", "Split", doc="Caffe2's old name of Split.")

# Caffe2 gives them Concat's and Split's gradients
delegate_gradient("DepthConcat", "Concat")
delegate_gradient("DepthSplit", "Split")
