"""CropAndResize (`crop_height`, `crop_width`, `method` 0/"bilinear" or 1/"nearest",
`extrapolation_value`) and CropAndResizeGradient (with respect to the image).
Kernels: kernels/cpu/detection/crop_and_resize.py."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.detection import crop_and_resize as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto

_ARGS = (Arg("crop_height", "int", required=True, doc="output height"),
         Arg("crop_width", "int", required=True, doc="output width"),
         Arg("method", "any", 0, doc="0 or 'bilinear'; 1 or 'nearest'"),
         Arg("extrapolation_value", "float", 0.0, doc="value of samples outside the image"))


def _infer(ctx, ins):
    x, r = ins[0], ins[1]
    if not x.known or not r.known or len(x.dims) != 4 or len(r.dims) != 2:
        return [UNKNOWN]
    return [TensorType((r.dims[0], x.dims[1], ctx.int("crop_height"), ctx.int("crop_width")), DT.FLOAT)]


register_schema(OpSchema(
    "CropAndResize", num_inputs=2, num_outputs=1, args=_ARGS, inputs=("image", "rois"), outputs=("crops",),
    inference=_infer,
    doc="Crops boxes out of an NCHW image and resizes each to crop_height x crop_width: rois [R, 5] = "
        "[batch_index, x1, y1, x2, y2] with coordinates normalised to [0, 1] (x * (W - 1) is the pixel). "
        "Output pixel i of an axis samples lo * (L - 1) + i * (hi - lo) * (L - 1) / (crop - 1) (the box "
        "centre when crop is 1), bilinearly or from the nearest pixel; samples outside the image are "
        "extrapolation_value; boxes with a batch index outside the batch stay 0."))
register_schema(OpSchema(
    "CropAndResizeGradient", num_inputs=3, num_outputs=1, args=_ARGS, inputs=("image", "rois", "dY"),
    outputs=("dimage",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of CropAndResize with respect to the image (the rois get none)."))


def _setup(ctx):
    ch, cw = chk.positive(ctx, "crop_height", "crop_width")
    method = ctx.arg("method")
    if isinstance(method, bytes):
        method = method.decode()
    names = {"bilinear": K.BILINEAR, "nearest": K.NEAREST}
    if isinstance(method, str):
        if method.lower() not in names:
            raise ctx.error("method must be 'bilinear' or 'nearest', got %r" % method)
        method = names[method.lower()]
    if method not in (K.BILINEAR, K.NEAREST):
        raise ctx.error("method must be 0 (bilinear) or 1 (nearest), got %r" % method)
    return ch, cw, int(method), ctx.float("extrapolation_value")


def _boxes(ctx, image, rois, image_index, rois_index):
    chk.float_tensor(ctx, image_index, image, "image", ndim=4)
    chk.float_tensor(ctx, rois_index, rois, "rois")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise ctx.input_error(rois_index, "rois must be [R, 5], got shape %s" % list(rois.shape))
    chk.finite(ctx, rois_index, rois, "rois")
    batch = rois[:, 0].astype(np.int64)
    return batch, (batch >= 0) & (batch < image.shape[0])


@register_kernel("CropAndResize")
def crop_and_resize(ctx):
    ch, cw, method, extrapolation = _setup(ctx)

    def run(image, rois):
        batch, keep = _boxes(ctx, image, rois, 0, 1)
        return K.crop_and_resize(image, rois, batch, keep, ch, cw, method, extrapolation)
    return run


@register_kernel("CropAndResizeGradient")
def crop_and_resize_gradient(ctx):
    ch, cw, method, _ = _setup(ctx)

    def run(image, rois, dy):
        batch, keep = _boxes(ctx, image, rois, 0, 1)
        want = (rois.shape[0], image.shape[1], ch, cw)
        if dy.shape != want:
            raise ctx.input_error(2, "dY must be shaped like the crops %s, got %s" % (list(want), list(dy.shape)))
        return K.crop_and_resize_gradient(dy, image.shape, rois, batch, keep, method)
    return run


@register_gradient("CropAndResize")
def _crop_and_resize_grad(g):
    return [g.op("CropAndResizeGradient", [g.I(0), g.I(1), g.GO(0)], [g.GI(0)])]
