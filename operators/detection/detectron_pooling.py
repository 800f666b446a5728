"""Detectron's RoI pooling ops (modules/detectron): PSRoIPool (R-FCN) and RoIPoolF
(Fast R-CNN), with their gradients. Caffe2 registered both on the CPU without a CPU
implementation ("No CPU implementation for now"); here they run on the CPU, compiled
on the thread team (kernels/cpu/detection/ps_roi_pool.py, roi_pool.py).

Regions are [batch_index, x1, y1, x2, y2] rows in input-image coordinates. Every
index the compiled loops use (batch column, mapping channels, argmaxes) is checked
here first."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import ps_roi_pool as PS
from caffe2py.kernels.cpu.detection import roi_pool as RP
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import Range

from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto


def _pooled_types(r, channels, ph, pw, n_outputs):
    if not r.known or len(r.dims) != 2 or channels is None:
        return [UNKNOWN] * n_outputs
    y = (r.dims[0], channels, ph, pw)
    return [TensorType(y, DT.FLOAT), TensorType(y, DT.INT32)][:n_outputs]


def _check_integer_map(ctx, index, a, want, lo, hi, what):
    """An integer tensor shaped `want` with values in [lo, hi)."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "iu" or a.shape != tuple(want):
        raise ctx.input_error(index, "%s must be an integer tensor shaped %s (the forward op's output 1), got %s %s"
                              % (what, list(want), getattr(a, "dtype", type(a).__name__),
                                 list(getattr(a, "shape", []))))
    if a.size and (a.min() < lo or a.max() >= hi):
        raise ctx.input_error(index, "%s must lie in [%d, %d), got a value %d"
                              % (what, lo, hi, a[(a < lo) | (a >= hi)].flat[0]))


def _check_dy(ctx, index, dy, want):
    chk.float_tensor(ctx, index, dy, "dY")
    if dy.shape != tuple(want):
        raise ctx.input_error(index, "dY must be shaped like the forward output %s, got %s"
                              % (list(want), list(dy.shape)))


# ----------------------------------------------------------------- PSRoIPool

_PS_ARGS = (
    Arg("spatial_scale", "float", 1.0, check=Range(0.0, None),
        doc="feature map scale relative to the image (0.0625 for stride 16)"),
    Arg("group_size", "int", 1, check=Range(1, None), doc="pooled_h = pooled_w = group_size"),
    Arg("output_dim", "int", 1, check=Range(1, None),
        doc="channels of Y (classes, or 4 for class-agnostic box regression)"))


def _ps_infer(ctx, ins):
    g = ctx.int("group_size")
    return _pooled_types(ins[1], ctx.int("output_dim"), g, g, ctx.n_outputs)


def _ps_cost(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4 or len(r.dims) != 2:
        return Cost()
    g = ctx.int("group_size")
    out = r.dims[0] * ctx.int("output_dim") * g * g
    window = max(1, x.dims[2] * x.dims[3] // (g * g))
    return Cost(flops=float(out * window), bytes_read=4.0 * out * window, bytes_written=8.0 * out)


register_schema(OpSchema(
    "PSRoIPool", num_inputs=2, num_outputs=2, args=_PS_ARGS, inputs=("X", "RoIs"),
    outputs=("Y", "argmaxes"), inference=_ps_infer, cost=_ps_cost,
    doc="Position-sensitive RoI pooling (R-FCN). X [N, C, H, W] with C = group_size^2 * output_dim, "
        "RoIs [R, 5] = [batch_index, x1, y1, x2, y2]. Y [R, output_dim, group_size, group_size]: bin "
        "(c, ph, pw) averages channel (c * group_size + ph) * group_size + pw over the bin; argmaxes "
        "(int32, same shape) records that channel."))

register_schema(OpSchema(
    "PSRoIPoolGradient", num_inputs=4, num_outputs=1, args=_PS_ARGS, inputs=("X", "RoIs", "argmaxes", "dY"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of PSRoIPool: each dY value spread evenly over its bin's window of the channel "
        "argmaxes names."))


def _ps_setup(ctx):
    scale = ctx.float("spatial_scale")
    if not scale > 0:
        raise ctx.error("spatial_scale must be positive, got %g" % scale)
    g, d = chk.positive(ctx, "group_size", "output_dim")
    return scale, g, d


def _ps_check(ctx, x, r, g, d):
    chk.float_tensor(ctx, 0, x, "X", ndim=4)
    chk.rois(ctx, 1, r, x.shape[0], cols=(5,))
    if x.shape[1] < d * g * g:
        raise ctx.input_error(0, "X must have at least group_size^2 * output_dim = %d channels, got %d"
                              % (d * g * g, x.shape[1]))


@register_kernel("PSRoIPool")
def ps_roi_pool(ctx):
    scale, g, d = _ps_setup(ctx)

    def run(x, r):
        _ps_check(ctx, x, r, g, d)
        return PS.ps_roi_pool(x, r, scale, g, d)
    return run


@register_kernel("PSRoIPoolGradient")
def ps_roi_pool_gradient(ctx):
    scale, g, d = _ps_setup(ctx)

    def run(x, r, mapping, dy):
        _ps_check(ctx, x, r, g, d)
        want = (r.shape[0], d, g, g)
        _check_integer_map(ctx, 2, mapping, want, 0, x.shape[1], "argmaxes (mapping channels)")
        _check_dy(ctx, 3, dy, want)
        return PS.ps_roi_pool_gradient(x.shape, r, mapping, dy, scale, g)
    return run


@register_gradient("PSRoIPool")
def _ps_roi_pool_grad(g):
    return [g.op("PSRoIPoolGradient", [g.I(0), g.I(1), g.O(1), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- RoIPoolF

_F_ARGS = (
    Arg("spatial_scale", "float", 1.0, doc="maps region coordinates onto the feature map"),
    Arg("pooled_h", "int", 1, check=Range(1, None), doc="output height"),
    Arg("pooled_w", "int", 1, check=Range(1, None), doc="output width"))


def _f_infer(ctx, ins):
    x = ins[0]
    c = x.dims[1] if x.known and len(x.dims) == 4 else None
    return _pooled_types(ins[1], c, ctx.int("pooled_h"), ctx.int("pooled_w"), ctx.n_outputs)


register_schema(OpSchema(
    "RoIPoolF", num_inputs=2, num_outputs=2, args=_F_ARGS, inputs=("X", "RoIs"), outputs=("Y", "argmaxes"),
    inference=_f_infer,
    doc="RoI max pooling as in Fast R-CNN (Detectron's RoIPoolF): X [N, C, H, W], RoIs [R, 5] = "
        "[batch_index, x1, y1, x2, y2] (corners rounded after spatial_scale, regions at least 1x1). "
        "Y [R, C, pooled_h, pooled_w] and the int32 argmaxes (flat position in the H x W plane, -1 for "
        "an empty bin, whose Y is 0)."))

register_schema(OpSchema(
    "RoIPoolFGradient", num_inputs=4, num_outputs=1, args=_F_ARGS, inputs=("X", "RoIs", "argmaxes", "dY"),
    outputs=("dX",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of RoIPoolF: each dY value added at its bin's argmax."))


def _f_check(ctx, x, r):
    chk.float_tensor(ctx, 0, x, "X", ndim=4)
    chk.rois(ctx, 1, r, x.shape[0], cols=(5,))


@register_kernel("RoIPoolF")
def roi_pool_f(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")
    scale = ctx.float("spatial_scale")

    def run(x, r):
        _f_check(ctx, x, r)
        return RP.roi_pool(x, r, scale, ph, pw)
    return run


@register_kernel("RoIPoolFGradient")
def roi_pool_f_gradient(ctx):
    ph, pw = chk.positive(ctx, "pooled_h", "pooled_w")

    def run(x, r, argmax, dy):
        _f_check(ctx, x, r)
        want = (r.shape[0], x.shape[1], ph, pw)
        _check_integer_map(ctx, 2, argmax, want, -1, x.shape[2] * x.shape[3], "argmaxes")
        _check_dy(ctx, 3, dy, want)
        return RP.roi_pool_gradient(x.shape, r, argmax, dy)
    return run


@register_gradient("RoIPoolF")
def _roi_pool_f_grad(g):
    return [g.op("RoIPoolFGradient", [g.I(0), g.I(1), g.O(1), g.GO(0)], [g.GI(0)])]
