"""Caffe2's RoIAlignRotated and RoIAlignRotatedGradient: RoIAlign over rotated regions
[batch_index, center_x, center_y, width, height, angle] ([R, 5] without the batch
column: image 0). Kernels: kernels/cpu/detection/roi_align_rotated.py."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import roi_align_rotated as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, OpSchema, TensorType, register_kernel, register_schema

from . import _detection_checks as chk
from .roi_ops import _ALIGN_ARGS, MAX_SAMPLES_PER_REGION

DT = caffe2_pb2.TensorProto


def _infer(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4 or len(r.dims) != 2:
        return [UNKNOWN]
    ph, pw = ctx.int("pooled_h"), ctx.int("pooled_w")
    if ctx.string("order") == "NHWC":
        return [TensorType((r.dims[0], ph, pw, x.dims[3]), DT.FLOAT)]
    return [TensorType((r.dims[0], x.dims[1], ph, pw), DT.FLOAT)]


register_schema(OpSchema(
    "RoIAlignRotated", num_inputs=2, num_outputs=1, args=_ALIGN_ARGS, inputs=("X", "RoIs"), outputs=("Y",),
    inference=_infer,
    doc="RoIAlign over rotated regions: RoIs [R, 6] = [batch_index, center_x, center_y, width, height, "
        "angle] (angle in degrees, counter-clockwise), or [R, 5] for image 0. Each bin's samples are "
        "rotated about the region's centre before the bilinear read. Y [R, C, pooled_h, pooled_w] "
        "(NHWC: [R, pooled_h, pooled_w, C])."))
register_schema(OpSchema(
    "RoIAlignRotatedGradient", num_inputs=3, num_outputs=1, args=_ALIGN_ARGS, inputs=("X", "RoIs", "dY"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of RoIAlignRotated with respect to X."))


def _setup(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")
    scale = ctx.float("spatial_scale")
    if not scale > 0:
        raise ctx.error("spatial_scale must be positive, got %g" % scale)
    return ph, pw, scale, ctx.int("sampling_ratio"), ctx.bool("aligned"), chk.storage_order(ctx)


def _prepare(ctx, x, r, ph, pw, scale, ratio, aligned, nhwc):
    """X as NCHW and the regions with a batch column, after the checks."""
    chk.float_tensor(ctx, 0, x, "X", ndim=4)
    chk.rois(ctx, 1, r, x.shape[0], cols=(5, 6))
    if r.shape[1] == 5:
        r = np.concatenate([np.zeros((r.shape[0], 1), np.float32), r], axis=1)
    g = K.region_geometry(r, scale, ph, pw, ratio, aligned)
    if aligned and r.shape[0] and (g["sizes"] < 0).any():
        raise ctx.input_error(1, "RoIs must not have a negative size with aligned=1")
    samples = g["grid"][:, 0] * g["grid"][:, 1] * ph * pw
    if samples.size and samples.max() > MAX_SAMPLES_PER_REGION:
        k = int(np.argmax(samples))
        raise ctx.input_error(1, "RoI row %d needs %d samples; more than %d per region is refused"
                              % (k, samples[k], MAX_SAMPLES_PER_REGION))
    return (x.transpose(0, 3, 1, 2) if nhwc else x), r


@register_kernel("RoIAlignRotated")
def roi_align_rotated(ctx):
    ph, pw, scale, ratio, aligned, nhwc = _setup(ctx)

    def run(x, r):
        xc, r6 = _prepare(ctx, x, r, ph, pw, scale, ratio, aligned, nhwc)
        y = K.forward(xc, r6, scale, ph, pw, ratio, aligned)
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if nhwc else y
    return run


@register_kernel("RoIAlignRotatedGradient")
def roi_align_rotated_gradient(ctx):
    ph, pw, scale, ratio, aligned, nhwc = _setup(ctx)

    def run(x, r, dy):
        xc, r6 = _prepare(ctx, x, r, ph, pw, scale, ratio, aligned, nhwc)
        chk.float_tensor(ctx, 2, dy, "dY")
        want = (r.shape[0], ph, pw, x.shape[3]) if nhwc else (r.shape[0], x.shape[1], ph, pw)
        if dy.shape != want:
            raise ctx.input_error(2, "dY must be shaped like RoIAlignRotated's output %s, got %s"
                                  % (list(want), list(dy.shape)))
        d = dy.transpose(0, 3, 1, 2) if nhwc else dy
        dx = K.backward(xc.shape, r6, d, scale, ph, pw, ratio, aligned)
        return np.ascontiguousarray(dx.transpose(0, 2, 3, 1)) if nhwc else dx
    return run


@register_gradient("RoIAlignRotated")
def _roi_align_rotated_grad(g):
    return [g.op("RoIAlignRotatedGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]
