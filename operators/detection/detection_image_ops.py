"""Image ops of the detection models: ResizeNearest (+ gradient), Im2Col, Col2Im and
RMACRegions (caffe2/operators/resize_op, im2col_op, rmac_regions_op)."""
import numpy as np

from caffe2py.gradients import register_gradient, should_not_do_gradient
from caffe2py.kernels.cpu.detection import image_ops as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto
F32 = np.float32


# ----------------------------------------------------------------- ResizeNearest

_RESIZE_ARGS = (Arg("width_scale", "float", 1.0), Arg("height_scale", "float", 1.0),
                Arg("order", "string", "NCHW", doc="NCHW or NHWC"))


def _resize_infer(ctx, ins):
    x = ins[0]
    if not x.known or len(x.dims) != 4 or ctx.n_inputs > 1:
        return [UNKNOWN]
    nhwc = ctx.string("order") == "NHWC"
    ha, wa = (1, 2) if nhwc else (2, 3)
    dims = list(x.dims)
    dims[ha] = K.resize_output_size(dims[ha], ctx.float("height_scale"))
    dims[wa] = K.resize_output_size(dims[wa], ctx.float("width_scale"))
    return [TensorType(tuple(dims), x.dtype)]


register_schema(OpSchema(
    "ResizeNearest", num_inputs=(1, 2), num_outputs=1, args=_RESIZE_ARGS, inputs=("X", "scales"),
    outputs=("Y",), inference=_resize_infer,
    doc="Nearest-neighbour resize of a 4-D float32 X: output height int(H * height_scale), width "
        "int(W * width_scale); output (y, x) copies input (min(int(y / height_scale), H - 1), "
        "min(int(x / width_scale), W - 1)). The optional scales input [height_scale, width_scale] "
        "overrides the arguments."))

register_schema(OpSchema(
    "ResizeNearestGradient", num_inputs=(2, 3), num_outputs=1, args=_RESIZE_ARGS,
    inputs=("dY", "X", "scales"), outputs=("dX",), inference=lambda ctx, ins: [ins[1]],
    doc="Gradient of ResizeNearest: each dY value added at the input position it was copied from."))


def _scales(ctx, index, ins, hs, ws):
    if len(ins) <= index:
        return hs, ws
    s = ins[index]
    if not isinstance(s, np.ndarray) or s.ndim != 1 or s.size != 2 or s.dtype != np.float32:
        raise ctx.input_error(index, "scales must be a float32 vector [height_scale, width_scale]")
    return float(s[0]), float(s[1])


def _check_scales(ctx, index, hs, ws):
    if not (hs > 0 and ws > 0 and np.isfinite(hs) and np.isfinite(ws)):
        raise ctx.input_error(index if index is not None else 0,
                              "height_scale and width_scale must be positive, got %g and %g" % (hs, ws))


@register_kernel("ResizeNearest")
def resize_nearest(ctx):
    nhwc = chk.storage_order(ctx)
    hs0, ws0 = ctx.float("height_scale"), ctx.float("width_scale")

    def run(x, *rest):
        chk.float_tensor(ctx, 0, x, "X", ndim=4)
        hs, ws = _scales(ctx, 1, (x,) + rest, hs0, ws0)
        _check_scales(ctx, 1 if rest else None, hs, ws)
        return K.resize_nearest(x, hs, ws, nhwc)
    return run


@register_kernel("ResizeNearestGradient")
def resize_nearest_gradient(ctx):
    nhwc = chk.storage_order(ctx)
    hs0, ws0 = ctx.float("height_scale"), ctx.float("width_scale")

    def run(dy, x, *rest):
        chk.float_tensor(ctx, 0, dy, "dY", ndim=4)
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ctx.input_error(1, "X must be 4-D")
        hs, ws = _scales(ctx, 2, (dy, x) + rest, hs0, ws0)
        _check_scales(ctx, 2 if rest else None, hs, ws)
        same = (0, 3) if nhwc else (0, 1)
        if any(dy.shape[a] != x.shape[a] for a in same):
            raise ctx.input_error(0, "dY %s and X %s differ in batch or channels" % (list(dy.shape), list(x.shape)))
        return K.resize_nearest_gradient(dy, x.shape, hs, ws, nhwc)
    return run


@register_gradient("ResizeNearest")
def _resize_nearest_grad(g):
    ins = [g.GO(0), g.I(0)] + ([g.I(1)] if len(g.def_.input) > 1 else [])
    return [g.op("ResizeNearestGradient", ins, [g.GI(0)])]


# ----------------------------------------------------------------- Im2Col / Col2Im

_IM2COL_ARGS = (Arg("kernel", "int", 0), Arg("kernel_h", "int"), Arg("kernel_w", "int"),
                Arg("dilation", "int", 1), Arg("dilation_h", "int"), Arg("dilation_w", "int"),
                Arg("stride", "int", 1), Arg("stride_h", "int"), Arg("stride_w", "int"),
                Arg("pad", "int", 0), Arg("order", "string", "NCHW"))


def _geometry(ctx):
    def pick(name, default):
        base = ctx.int(name, default)
        return ctx.int(name + "_h", base), ctx.int(name + "_w", base)
    kernel, dilation, stride = pick("kernel", 0), pick("dilation", 1), pick("stride", 1)
    pad = ctx.int("pad", 0)
    for what, pair in (("kernel", kernel), ("dilation", dilation), ("stride", stride)):
        if min(pair) <= 0:
            raise ctx.error("%s must be positive, got %s" % (what, list(pair)))
    if pad < 0:
        raise ctx.error("pad must be >= 0, got %d" % pad)
    return kernel, dilation, stride, pad


def _col_shape(ctx, image_dims, geom, nhwc):
    (kh, kw), (dh, dw), (sh, sw), pad = geom
    n, c, h, w = (image_dims[0], image_dims[3], image_dims[1], image_dims[2]) if nhwc else image_dims
    if h < dh * (kh - 1) + 1 or w < dw * (kw - 1) + 1:
        return None
    oh, ow = K.conv_out_size(h, kh, dh, sh, pad), K.conv_out_size(w, kw, dw, sw, pad)
    return (n, oh, ow, kh * kw * c) if nhwc else (n, c * kh * kw, oh, ow)


def _im2col_infer(ctx, ins):
    x = ins[0]
    if not x.known or len(x.dims) != 4:
        return [UNKNOWN]
    try:
        shape = _col_shape(ctx, x.dims, _geometry(ctx), ctx.string("order") == "NHWC")
    except Exception:          # noqa: BLE001 - bad arguments are reported when the op runs
        return [UNKNOWN]
    return [UNKNOWN if shape is None else TensorType(shape, x.dtype)]


register_schema(OpSchema(
    "Im2Col", num_inputs=1, num_outputs=1, args=_IM2COL_ARGS, inputs=("X",), outputs=("Y",),
    inference=_im2col_infer,
    doc="The convolution patches of a 4-D X as columns: NCHW [N, C, H, W] -> [N, C*kh*kw, out_h, out_w] "
        "(rows ordered c, kernel row, kernel column); NHWC [N, H, W, C] -> [N, out_h, out_w, kh*kw*C]. "
        "Zero padding pad on every side; H and W must hold the dilated kernel."))

register_schema(OpSchema(
    "Col2Im", num_inputs=2, num_outputs=1, args=_IM2COL_ARGS, inputs=("X", "Z"), outputs=("Y",),
    inference=lambda ctx, ins: [TensorType(ins[1].dims, ins[0].dtype) if ins[1].known else UNKNOWN],
    doc="The adjoint of Im2Col: columns X summed back into an image shaped like Z (overlapping "
        "patches add up)."))


def _image_dims(ctx, index, a, nhwc):
    if not isinstance(a, np.ndarray) or a.ndim != 4:
        raise ctx.input_error(index, "must be 4-D, got %s" % list(np.shape(a)))


@register_kernel("Im2Col")
def im2col(ctx):
    geom = _geometry(ctx)
    nhwc = chk.storage_order(ctx)

    def run(x):
        _image_dims(ctx, 0, x, nhwc)
        if _col_shape(ctx, x.shape, geom, nhwc) is None:
            raise ctx.input_error(0, "the dilated kernel %s does not fit the image %s" % (list(geom[0]), list(x.shape)))
        return K.im2col(x, geom[0], geom[1], geom[2], geom[3], nhwc)
    return run


@register_kernel("Col2Im")
def col2im(ctx):
    geom = _geometry(ctx)
    nhwc = chk.storage_order(ctx)

    def run(x, z):
        _image_dims(ctx, 1, z, nhwc)
        shape = _col_shape(ctx, z.shape, geom, nhwc)
        if shape is None:
            raise ctx.input_error(1, "the dilated kernel %s does not fit the image %s" % (list(geom[0]), list(z.shape)))
        if not isinstance(x, np.ndarray) or x.size != int(np.prod(shape)):
            raise ctx.input_error(0, "must hold %d values (columns %s), got shape %s"
                                  % (int(np.prod(shape)), list(shape), list(np.shape(x))))
        return K.col2im(np.asarray(x), z.shape, geom[0], geom[1], geom[2], geom[3], nhwc)
    return run


@register_gradient("Im2Col")
def _im2col_grad(g):
    return [g.op("Col2Im", [g.GO(0), g.I(0)], [g.GI(0)])]


@register_gradient("Col2Im")
def _col2im_grad(g):
    return [g.op("Im2Col", [g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- RMACRegions

def _rmac_infer(ctx, ins):
    x = ins[0]
    if not x.known or len(x.dims) != 4:
        return [UNKNOWN]
    return [TensorType(K.rmac_regions(x.dims[0], x.dims[2], x.dims[3], ctx.int("scales"),
                                      ctx.float("overlap")).shape, DT.FLOAT)]


register_schema(OpSchema(
    "RMACRegions", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("RMAC_REGIONS",),
    args=(Arg("scales", "int", 3, doc="number of scales"), Arg("overlap", "float", 0.4,
                                                               doc="overlap of neighbouring regions")),
    inference=_rmac_infer,
    doc="The fixed grid of RMAC regions (arXiv 1511.05879) for a 4-D NCHW X: rows [batch_index, x1, y1, "
        "x2, y2] in RoIPool's format, the same regions repeated for every image."))


@register_kernel("RMACRegions")
def rmac_regions(ctx):
    scales, overlap = ctx.int("scales"), ctx.float("overlap")

    def run(x):
        if not isinstance(x, np.ndarray):
            raise ctx.input_error(0, "must be a tensor")
        if x.size == 0:
            return np.zeros((0, 5), F32)
        if x.ndim != 4:
            raise ctx.input_error(0, "must be 4-D NCHW, got shape %s" % list(x.shape))
        return K.rmac_regions(x.shape[0], x.shape[2], x.shape[3], scales, overlap)
    return run


should_not_do_gradient("RMACRegions")
