"""Detectron's data-movement ops (modules/detectron, and AffineChannel as
caffe2/operators has it): BatchPermutation, SampleAs, SpatialNarrowAs,
UpsampleNearest and AffineChannel, each with its gradient op and maker."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import detectron_layout as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Range, Rank

DT = caffe2_pb2.TensorProto


def _like(i):
    return lambda ctx, ins: [ins[i]]


def _index_vector(ctx, index, v, n, what):
    """int64 copy of an integer vector of n values."""
    if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu":
        raise ctx.input_error(index, "%s must be an integer tensor, got %s" % (what, getattr(v, "dtype", type(v))))
    if v.ndim != 1 or v.shape[0] != n:
        raise ctx.input_error(index, "%s must be a vector of %d values (one per row of %s), got shape %s"
                              % (what, n, ctx.inputs[0], list(v.shape)))
    return v.astype(np.int64)


def _check_grad_shape(ctx, index, dy, want, what="dY"):
    if dy.shape != tuple(want):
        raise ctx.input_error(index, "%s must be shaped %s, got %s" % (what, list(want), list(dy.shape)))


# ----------------------------------------------------------------- BatchPermutation

register_schema(OpSchema(
    "BatchPermutation", num_inputs=2, num_outputs=1, inputs=("X", "indices"), outputs=("Y",),
    inference=_like(0), checks=(Rank(0, 1),),
    doc="Y[i] = X[indices[i]]: the rows of X [N, ...] in the order of indices (int [N], meant to be a "
        "permutation of 0..N-1; the gradient assumes one)."))

register_schema(OpSchema(
    "BatchPermutationGradient", num_inputs=2, num_outputs=1, inputs=("indices", "dY"), outputs=("dX",),
    inference=_like(1), checks=(Rank(1, 1),),
    doc="Gradient of BatchPermutation: dX[indices[i]] = dY[i] (repeated indices add up)."))


def _permutation(ctx, index, indices, n):
    idx = _index_vector(ctx, index, indices, n, "indices")
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise ctx.input_error(index, "indices must lie in [0, %d), got %d" % (n, bad[0]))
    return idx


@register_kernel("BatchPermutation")
def batch_permutation(ctx):
    def run(x, indices):
        return K.batch_permutation(x, _permutation(ctx, 1, indices, x.shape[0]))
    return run


@register_kernel("BatchPermutationGradient")
def batch_permutation_gradient(ctx):
    def run(indices, dy):
        return K.batch_permutation_gradient(_permutation(ctx, 0, indices, dy.shape[0]), dy)
    return run


@register_gradient("BatchPermutation")
def _batch_permutation_grad(g):
    return [g.op("BatchPermutationGradient", [g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SampleAs

def _sample_as_infer(ctx, ins):
    x = ins[0]
    if not x.known or not x.dims:
        return [UNKNOWN]
    return [TensorType(None, x.dtype)]


register_schema(OpSchema(
    "SampleAs", num_inputs=2, num_outputs=1, inputs=("X", "labels"), outputs=("Y",), inference=_sample_as_infer,
    checks=(Rank(0, 1),),
    doc="The rows of X [N, ...] whose label (int [N]) is > 0, in order (Mask R-CNN's foreground "
        "sampling)."))

register_schema(OpSchema(
    "SampleAsGradient", num_inputs=3, num_outputs=1, inputs=("X", "labels", "dY"), outputs=("dX",),
    inference=_like(0), checks=(Rank(0, 1),),
    doc="Gradient of SampleAs: dY's rows go back to the rows of X with label > 0, 0 elsewhere."))


@register_kernel("SampleAs")
def sample_as(ctx):
    def run(x, labels):
        return K.sample_as(x, _index_vector(ctx, 1, labels, x.shape[0], "labels"))
    return run


@register_kernel("SampleAsGradient")
def sample_as_gradient(ctx):
    def run(x, labels, dy):
        lab = _index_vector(ctx, 1, labels, x.shape[0], "labels")
        _check_grad_shape(ctx, 2, dy, (int(np.count_nonzero(lab > 0)),) + x.shape[1:])
        return K.sample_as_gradient(x.shape, lab, dy, x.dtype)
    return run


@register_gradient("SampleAs")
def _sample_as_grad(g):
    return [g.op("SampleAsGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- SpatialNarrowAs

def _narrowed_dims(a, b):
    """The output dims (None when the shapes do not allow narrowing)."""
    if len(a) != 4 or len(b) not in (3, 4) or a[0] != b[0]:
        return None
    hw = b[-2:]
    if len(b) == 4 and b[1] != a[1]:
        return None
    if hw[0] > a[2] or hw[1] > a[3]:
        return None
    return (a[0], a[1], hw[0], hw[1])


def _narrow_infer(ctx, ins):
    a, b = ins
    if not a.known or not b.known:
        return [UNKNOWN]
    dims = _narrowed_dims(a.dims, b.dims)
    return [TensorType(dims, a.dtype) if dims else UNKNOWN]


register_schema(OpSchema(
    "SpatialNarrowAs", num_inputs=2, num_outputs=1, inputs=("A", "B"), outputs=("C",), inference=_narrow_infer,
    checks=(DTypes(0, np.float32, np.int32), Rank(0, 4, 4), Rank(1, 3, 4)),
    doc="A [N, C, H0, W0] narrowed to B's spatial size (B: [N, C, H1, W1] or [N, H1, W1], H1 <= H0, "
        "W1 <= W0) by dropping rows and columns at the bottom and right."))

register_schema(OpSchema(
    "SpatialNarrowAsGradient", num_inputs=3, num_outputs=1, inputs=("A", "B", "dC"), outputs=("dA",),
    inference=_like(0), checks=(DTypes(0, np.float32, np.int32), Rank(0, 4, 4), Rank(1, 3, 4)),
    doc="Gradient of SpatialNarrowAs: dC in A's top-left window, 0 elsewhere."))


def _narrow_dims(ctx, a, b):
    dims = _narrowed_dims(a.shape, b.shape)
    if dims is None:
        raise ctx.error("cannot narrow A %s to B %s: B must be [N, C, H1, W1] or [N, H1, W1] with A's N (and "
                        "C), and H1 <= H0, W1 <= W0" % (list(a.shape), list(b.shape)), blob=ctx.inputs[1])
    return dims


@register_kernel("SpatialNarrowAs")
def spatial_narrow_as(ctx):
    def run(a, b):
        dims = _narrow_dims(ctx, a, b)
        return K.spatial_narrow_as(a, dims[2], dims[3])
    return run


@register_kernel("SpatialNarrowAsGradient")
def spatial_narrow_as_gradient(ctx):
    def run(a, b, dc):
        _check_grad_shape(ctx, 2, dc, _narrow_dims(ctx, a, b), "dC")
        return K.spatial_narrow_as_gradient(a.shape, dc, a.dtype)
    return run


@register_gradient("SpatialNarrowAs")
def _spatial_narrow_as_grad(g):
    return [g.op("SpatialNarrowAsGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- UpsampleNearest

_UP_ARGS = (Arg("scale", "int", 2, check=Range(1, None), doc="integer upsampling factor"),)


def _upsample_infer(ctx, ins):
    x = ins[0]
    if not x.known or len(x.dims) not in (3, 4):
        return [UNKNOWN]
    s = ctx.int("scale")
    return [TensorType(tuple(x.dims[:-2]) + (x.dims[-2] * s, x.dims[-1] * s), x.dtype)]


register_schema(OpSchema(
    "UpsampleNearest", num_inputs=1, num_outputs=1, args=_UP_ARGS, inputs=("X",), outputs=("Y",),
    inference=_upsample_infer, checks=(DTypes(0, "float32"), Rank(0, 3, 4)),
    doc="Nearest-neighbour upsampling of X [N, C, H, W] (or [C, H, W]) by an integer factor: Y [N, C, "
        "scale * H, scale * W] with Y[..., h, w] = X[..., h / scale, w / scale]."))

register_schema(OpSchema(
    "UpsampleNearestGradient", num_inputs=2, num_outputs=1, args=_UP_ARGS, inputs=("X", "dY"), outputs=("dX",),
    inference=_like(0), checks=(DTypes("*", "float32"), Rank(0, 3, 4)),
    doc="Gradient of UpsampleNearest: each dX value is the sum of its scale x scale block of dY."))


def _up_scale(ctx):
    s = ctx.int("scale")
    if s < 1:
        raise ctx.error("scale must be >= 1, got %d" % s)
    return s


@register_kernel("UpsampleNearest")
def upsample_nearest(ctx):
    s = _up_scale(ctx)
    return lambda x: K.upsample_nearest(x, s)


@register_kernel("UpsampleNearestGradient")
def upsample_nearest_gradient(ctx):
    s = _up_scale(ctx)

    def run(x, dy):
        _check_grad_shape(ctx, 1, dy, x.shape[:-2] + (x.shape[-2] * s, x.shape[-1] * s))
        return K.upsample_nearest_gradient(dy, s)
    return run


@register_gradient("UpsampleNearest")
def _upsample_nearest_grad(g):
    return [g.op("UpsampleNearestGradient", [g.I(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- AffineChannel

_AFFINE_ARGS = (Arg("order", "string", "NCHW", doc="NCHW or NHWC"),
                Arg("is_learnable", "bool", False, doc="1: scale and bias get gradients"))


def _affine_order(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NHWC"


def _channels(ctx, x, nhwc):
    return x.shape[-1] if nhwc else x.shape[1]


def _check_per_channel(ctx, index, v, c, what):
    if v.size != c:
        raise ctx.input_error(index, "%s must hold one value per channel (%d), got shape %s" % (what, c, list(v.shape)))
    return v.reshape(c)


register_schema(OpSchema(
    "AffineChannel", num_inputs=3, num_outputs=1, args=_AFFINE_ARGS, allow_inplace={(0, 0)},
    inputs=("X", "scale", "bias"), outputs=("Y",), inference=_like(0),
    checks=(DTypes("*", "float32"), Rank(0, 2)),
    doc="Y = X * scale[c] + bias[c] per channel c of X (NCHW: [N, C, ...]; NHWC: [N, ..., C]); the fixed "
        "form of spatial batch normalisation. With is_learnable scale and bias get gradients."))

register_schema(OpSchema(
    "AffineChannelGradient", num_inputs=(2, 3), num_outputs=(1, 3), args=_AFFINE_ARGS, allow_inplace={(0, 0)},
    inputs=("dY", "X or scale", "scale"), outputs=("dX", "dscale", "dbias"), inference=_like(0),
    checks=(DTypes("*", "float32"),),
    doc="Gradient of AffineChannel: (dY, scale) -> dX, or with is_learnable (dY, X, scale) -> (dX, dscale, "
        "dbias)."))


@register_kernel("AffineChannel")
def affine_channel(ctx):
    nhwc = _affine_order(ctx)

    def run(x, scale, bias):
        c = _channels(ctx, x, nhwc)
        return K.affine_channel(x, _check_per_channel(ctx, 1, scale, c, "scale"),
                                _check_per_channel(ctx, 2, bias, c, "bias"), nhwc)
    return run


@register_kernel("AffineChannelGradient")
def affine_channel_gradient(ctx):
    nhwc = _affine_order(ctx)
    learnable = ctx.bool("is_learnable")
    if learnable and (ctx.n_inputs != 3 or ctx.n_outputs != 3):
        raise ctx.error("with is_learnable=1 the gradient takes (dY, X, scale) and gives (dX, dscale, dbias)")
    if not learnable and (ctx.n_inputs != 2 or ctx.n_outputs != 1):
        raise ctx.error("with is_learnable=0 the gradient takes (dY, scale) and gives dX")

    def run(dy, *rest):
        if dy.ndim < 2:
            raise ctx.input_error(0, "dY must have at least 2 dims, got shape %s" % list(dy.shape))
        x = rest[0] if learnable else None
        if x is not None and x.shape != dy.shape:
            raise ctx.input_error(1, "X must be shaped like dY %s, got %s" % (list(dy.shape), list(x.shape)))
        scale = _check_per_channel(ctx, len(rest), rest[-1], _channels(ctx, dy, nhwc), "scale")
        dx, dscale, dbias = K.affine_channel_gradient(dy, x, scale, nhwc)
        return (dx, dscale, dbias) if learnable else dx
    return run


@register_gradient("AffineChannel")
def _affine_channel_grad(g):
    if g.arg("is_learnable", False):
        return [g.op("AffineChannelGradient", [g.GO(0), g.input_value(0), g.I(1)], [g.GI(0), g.GI(1), g.GI(2)])]
    return [g.op("AffineChannelGradient", [g.GO(0), g.I(1)], [g.GI(0)])]
