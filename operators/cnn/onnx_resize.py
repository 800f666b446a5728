"""ONNX Resize (10, 11, 13, 18, 19) and Upsample (7, 9): output size from
scales or sizes (with axes and keep_aspect_ratio_policy from 18), compute in
kernels/cpu/cnn/resize.py."""
import numpy as np

from caffe2py.kernels.cpu.cnn import resize as rk

from ..onnx_base import axis_of, onnx_op

_MAX_VALUES = 1 << 31         # elements a resized output may hold


def _check_output(ctx, x, out_shape, scales):
    if not all(np.isfinite(scales)) or min(scales, default=1.0) <= 0:
        raise ctx.error("scales %s must be positive and finite" % list(scales))
    if len(out_shape) != x.ndim or min(out_shape, default=1) < 0 or \
            float(np.prod(np.maximum(np.asarray(out_shape, np.float64), 1))) > _MAX_VALUES:
        # zeros do not excuse the other dims: NumPy refuses such a shape even when it is empty
        raise ctx.error("scales/sizes give an output of shape %s for input %s (dims must be >= 0, at most "
                        "%d values)" % (out_shape, list(x.shape), _MAX_VALUES))


def _shape_and_scales(ctx, x, scales, sizes, axes, policy):
    rank = x.ndim
    axes = list(range(rank)) if not axes else [axis_of(ctx, a, rank) for a in axes]
    full_scales = [1.0] * rank
    out_shape = list(x.shape)
    if sizes is not None and np.size(sizes):
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise ctx.error("sizes has %d values for %d axes" % (len(sizes), len(axes)))
        if min(sizes) < 0 or (min(x.shape[a] for a in axes) == 0 and max(sizes) > 0):
            raise ctx.error("sizes %s must be >= 0 and can only resize non-empty dims (input %s)"
                            % (sizes, list(x.shape)))
        if policy in ("not_larger", "not_smaller"):
            ratios = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = s
                out_shape[a] = int(np.floor(x.shape[a] * s + 0.5))
        else:
            for i, a in enumerate(axes):
                out_shape[a] = sizes[i]
                full_scales[a] = sizes[i] / x.shape[a]
    elif scales is not None and np.size(scales):
        scales = [float(v) for v in np.asarray(scales).reshape(-1)]
        if len(scales) != len(axes):
            raise ctx.error("scales has %d values for %d axes" % (len(scales), len(axes)))
        if not all(np.isfinite(scales)) or min(scales, default=1.0) <= 0:
            raise ctx.error("scales %s must be positive and finite" % scales)
        for i, a in enumerate(axes):
            full_scales[a] = scales[i]
            out_shape[a] = int(np.floor(x.shape[a] * scales[i]))
    else:
        raise ctx.error("Resize needs scales or sizes")
    return out_shape, full_scales, axes


@onnx_op("Resize", (10, 10), (11, None))
def resize(ctx):
    mode = ctx.string("mode", "nearest")
    legacy = ctx.op_version < 11
    coord = "asymmetric" if legacy else ctx.string("coordinate_transformation_mode", "half_pixel")
    nearest_mode = "floor" if legacy else ctx.string("nearest_mode", "round_prefer_floor")
    cubic_a = ctx.float("cubic_coeff_a", -0.75)
    exclude = bool(ctx.int("exclude_outside", 0))
    extrapolation = ctx.float("extrapolation_value", 0.0)
    antialias = bool(ctx.int("antialias", 0))
    attr_axes = ctx.ints("axes", None)
    policy = ctx.string("keep_aspect_ratio_policy", "stretch")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error("unknown mode '%s'" % mode)

    def run(x, *rest):
        if legacy:
            roi, scales, sizes = None, rest[0], None
        else:
            rest = list(rest) + [None] * (3 - len(rest))
            roi, scales, sizes = rest
        out_shape, full_scales, axes = _shape_and_scales(ctx, x, scales, sizes, attr_axes, policy)
        _check_output(ctx, x, out_shape, full_scales)
        full_roi = None
        if roi is not None and np.size(roi) and coord == "tf_crop_and_resize":
            r = [float(v) for v in np.asarray(roi).reshape(-1)]
            full_roi = [0.0] * x.ndim + [1.0] * x.ndim
            k = len(axes)
            for i, a in enumerate(axes):
                full_roi[a], full_roi[a + x.ndim] = r[i], r[i + k]
        try:
            return rk.resize(x, out_shape, full_scales, mode, coord, nearest_mode, cubic_a, exclude,
                             extrapolation, full_roi, antialias)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run


@onnx_op("Upsample", (7, 8), (9, 9))
def upsample(ctx):
    mode = ctx.string("mode", "nearest")
    attr_scales = ctx.floats("scales", None) if ctx.op_version < 9 else None

    def run(x, scales=None):
        s = attr_scales if scales is None else [float(v) for v in scales.reshape(-1)]
        if s is None or len(s) != x.ndim:
            raise ctx.error("scales %s must hold one value per input dim (%d)" % (s, x.ndim))
        if not all(np.isfinite(s)) or min(s, default=1.0) <= 0:
            raise ctx.error("scales %s must be positive and finite" % list(s))
        out_shape = [int(np.floor(d * f)) for d, f in zip(x.shape, s)]
        _check_output(ctx, x, out_shape, s)
        try:
            return rk.resize(x, out_shape, s, mode, "asymmetric", "floor")
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return run
