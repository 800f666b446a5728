"""RoIAlign, RoIPool and their gradients (Detectron; caffe2/operators/roi_align_op,
roi_pool_op). Regions are [batch_index, x1, y1, x2, y2] rows (RoIAlign also takes
[x1, y1, x2, y2] for one image) in input-image coordinates; spatial_scale maps them
onto the feature map."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import roi_align as RA
from caffe2py.kernels.cpu.detection import roi_pool as RP
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto
# a region whose adaptive sampling grid needs more taps than this is refused (a huge or
# badly scaled region would otherwise ask for gigabytes)
MAX_SAMPLES_PER_REGION = 1 << 24

_ALIGN_ARGS = (
    Arg("spatial_scale", "float", 1.0, doc="feature map scale relative to the image (1/16 for stride 16)"),
    Arg("pooled_h", "int", 1, doc="output height"),
    Arg("pooled_w", "int", 1, doc="output width"),
    Arg("sampling_ratio", "int", -1, doc="samples per bin side; <= 0: ceil(region size / pooled size)"),
    Arg("aligned", "bool", False, doc="shift regions by -0.5 pixel (continuous coordinates) and keep "
                                      "their size as is; 0: force regions to at least 1x1"),
    Arg("order", "string", "NCHW", doc="NCHW or NHWC"))


def _align_infer(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4:
        return [UNKNOWN]
    ph, pw = ctx.int("pooled_h"), ctx.int("pooled_w")
    n = r.dims[0] if len(r.dims) == 2 else 0
    if ctx.string("order") == "NHWC":
        return [TensorType((n, ph, pw, x.dims[3]), DT.FLOAT)]
    return [TensorType((n, x.dims[1], ph, pw), DT.FLOAT)]


def _align_cost(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4 or len(r.dims) != 2:
        return Cost()
    c = x.dims[3] if ctx.string("order") == "NHWC" else x.dims[1]
    samples = max(ctx.int("sampling_ratio"), 2) ** 2
    out = r.dims[0] * c * ctx.int("pooled_h") * ctx.int("pooled_w")
    return Cost(flops=8.0 * out * samples, bytes_read=4.0 * 4 * out * samples, bytes_written=4.0 * out)


register_schema(OpSchema(
    "RoIAlign", num_inputs=2, num_outputs=1, args=_ALIGN_ARGS, inputs=("X", "RoIs"), outputs=("Y",),
    inference=_align_infer, cost=_align_cost,
    doc="Region of Interest align (Mask R-CNN): each of pooled_h x pooled_w bins of a region "
        "averages a grid of bilinear samples of X [N, C, H, W] (NHWC: [N, H, W, C]). RoIs [R, 5] = "
        "[batch_index, x1, y1, x2, y2], or [R, 4] for image 0. Y [R, C, pooled_h, pooled_w] "
        "(NHWC: [R, pooled_h, pooled_w, C])."))

register_schema(OpSchema(
    "RoIAlignGradient", num_inputs=3, num_outputs=1, args=_ALIGN_ARGS, inputs=("X", "RoIs", "dY"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of RoIAlign with respect to X: each dY value spread back over its bin's "
        "bilinear taps."))


def _align_setup(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")
    scale = ctx.float("spatial_scale")
    if not scale > 0:
        raise ctx.error("spatial_scale must be positive, got %g" % scale)
    return ph, pw, scale, ctx.int("sampling_ratio"), ctx.bool("aligned"), chk.storage_order(ctx)


def _check_align_inputs(ctx, x, r, ph, pw, scale, ratio, aligned):
    chk.float_tensor(ctx, 0, x, "X", ndim=4)
    if r.size == 0:
        return False
    chk.rois(ctx, 1, r, x.shape[0])
    _, _, grid, sizes = RA.roi_geometry(r, scale, ph, pw, ratio, aligned)
    if aligned:
        bad = np.flatnonzero((sizes < 0).any(axis=1))
        if bad.size:
            raise ctx.input_error(1, "ROIs in ROIAlign do not have non-negative size! (row %d is %g x %g "
                                     "after scaling)" % (bad[0], sizes[bad[0], 1], sizes[bad[0], 0]))
    samples = RA.samples_per_region(grid, ph, pw)
    if samples.size and samples.max() > MAX_SAMPLES_PER_REGION:
        k = int(np.argmax(samples))
        raise ctx.input_error(1, "RoI row %d needs a %d x %d sampling grid per bin (sampling_ratio=%d, "
                                 "spatial_scale=%g); more than %d samples per region is refused"
                              % (k, grid[k, 0], grid[k, 1], ratio, scale, MAX_SAMPLES_PER_REGION))
    return True


def _empty_align_output(x, ph, pw, nhwc):
    c = x.shape[3] if nhwc else x.shape[1]
    return np.zeros((0, ph, pw, c) if nhwc else (0, c, ph, pw), np.float32)


@register_kernel("RoIAlign")
def roi_align(ctx):
    ph, pw, scale, ratio, aligned, nhwc = _align_setup(ctx)

    def run(x, r):
        if not _check_align_inputs(ctx, x, r, ph, pw, scale, ratio, aligned):
            return _empty_align_output(x, ph, pw, nhwc)
        return RA.roi_align(x, r, scale, ph, pw, ratio, aligned, nhwc)
    return run


@register_kernel("RoIAlignGradient")
def roi_align_gradient(ctx):
    ph, pw, scale, ratio, aligned, nhwc = _align_setup(ctx)

    def run(x, r, dy):
        if not _check_align_inputs(ctx, x, r, ph, pw, scale, ratio, aligned):
            return np.zeros(x.shape, np.float32)
        chk.float_tensor(ctx, 2, dy, "dY")
        want = _empty_align_output(x, ph, pw, nhwc).shape[1:]
        if dy.shape != (r.shape[0],) + want:
            raise ctx.input_error(2, "dY must be shaped like RoIAlign's output %s, got %s"
                                  % ([r.shape[0]] + list(want), list(dy.shape)))
        return RA.roi_align_gradient(x.shape, r, dy, scale, ph, pw, ratio, aligned, nhwc)
    return run


@register_gradient("RoIAlign")
def _roi_align_grad(g):
    return [g.op("RoIAlignGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- RoIPool

_POOL_ARGS = (
    Arg("is_test", "bool", False, doc="1: no argmaxes output"),
    Arg("order", "string", "NCHW", doc="only NCHW (Caffe2's CPU kernel reads NCHW)"),
    Arg("pooled_h", "int", 1), Arg("pooled_w", "int", 1),
    Arg("spatial_scale", "float", 1.0, doc="maps region coordinates onto the feature map"))


def _pool_infer(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4 or len(r.dims) != 2:
        return [UNKNOWN] * ctx.n_outputs
    y = (r.dims[0], x.dims[1], ctx.int("pooled_h"), ctx.int("pooled_w"))
    return [TensorType(y, DT.FLOAT), TensorType(y, DT.INT32)][:ctx.n_outputs]


register_schema(OpSchema(
    "RoIPool", num_inputs=2, num_outputs=(1, 2), args=_POOL_ARGS, inputs=("X", "rois"),
    outputs=("Y", "argmaxes"), inference=_pool_infer,
    doc="RoI max pooling (Fast R-CNN) of X [N, C, H, W] over rois [R, 5] = [batch_index, x1, y1, x2, "
        "y2] (corners rounded after spatial_scale): Y [R, C, pooled_h, pooled_w], and unless is_test the "
        "int32 argmaxes (flat position in the H x W plane, -1 for an empty bin)."))

register_schema(OpSchema(
    "RoIPoolGradient", num_inputs=4, num_outputs=1, args=_POOL_ARGS, inputs=("X", "rois", "argmaxes", "dY"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of RoIPool: each dY value added at its bin's argmax."))


@register_kernel("RoIPool")
def roi_pool(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")
    scale = ctx.float("spatial_scale")
    is_test = ctx.bool("is_test")
    if ctx.string("order") != "NCHW":
        raise ctx.error("RoIPool supports order NCHW only, got '%s'" % ctx.string("order"))
    if not is_test and ctx.n_outputs < 2:
        raise ctx.error("with is_test=0 RoIPool produces Y and argmaxes (2 outputs), got %d" % ctx.n_outputs)

    def run(x, r):
        chk.float_tensor(ctx, 0, x, "X", ndim=4)
        chk.rois(ctx, 1, r, x.shape[0], cols=(5,), what="rois")
        y, argmax = RP.roi_pool(x, r, scale, ph, pw)
        return (y, argmax)[:ctx.n_outputs] if ctx.n_outputs > 1 else y
    return run


@register_kernel("RoIPoolGradient")
def roi_pool_gradient(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")

    def run(x, r, argmax, dy):
        chk.float_tensor(ctx, 0, x, "X", ndim=4)
        chk.rois(ctx, 1, r, x.shape[0], cols=(5,), what="rois")
        want = (r.shape[0], x.shape[1], ph, pw)
        if not isinstance(argmax, np.ndarray) or argmax.dtype.kind not in "iu" or argmax.shape != want:
            raise ctx.input_error(2, "argmaxes must be integer, shaped %s" % list(want))
        a = argmax.astype(np.int64)
        if a.size and ((a < -1) | (a >= x.shape[2] * x.shape[3])).any():
            raise ctx.input_error(2, "argmaxes must lie in [-1, H*W = %d)" % (x.shape[2] * x.shape[3]))
        chk.float_tensor(ctx, 3, dy, "dY")
        if dy.shape != want:
            raise ctx.input_error(3, "dY must be shaped %s, got %s" % (list(want), list(dy.shape)))
        return RP.roi_pool_gradient(x.shape, r, a, dy)
    return run


@register_gradient("RoIPool")
def _roi_pool_grad(g):
    return [g.op("RoIPoolGradient", [g.I(0), g.I(1), g.O(1), g.GO(0)], [g.GI(0)])]
