"""Caffe2's HeatmapMaxKeypoint (Mask R-CNN keypoints; `should_output_softmax`).
Kernel: kernels/cpu/detection/heatmap_keypoint.py."""
from caffe2py.kernels.cpu.detection import heatmap_keypoint as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from .._gradient_hooks import should_not_do_gradient
from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto


def _infer(ctx, ins):
    maps = ins[0]
    if not maps.known or len(maps.dims) != 4:
        return [UNKNOWN]
    return [TensorType((maps.dims[0], 4, maps.dims[1]), DT.FLOAT)]


register_schema(OpSchema(
    "HeatmapMaxKeypoint", num_inputs=2, num_outputs=1,
    args=(Arg("should_output_softmax", "bool", False,
              doc="row 3 holds the heatmap's softmax at the maximum (else 0)"),),
    inputs=("heatmaps", "bboxes"), outputs=("keypoints",), inference=_infer,
    doc="Keypoints from heatmaps [N, K, S, S] and boxes [N, >= 4] = [x0, y0, x1, y1, ...]: each heatmap's first "
        "maximum, moved by one Newton step on the quadratic fitted to its 3x3 neighbourhood (mirrored at "
        "the border; the step clipped to 1.5 pixels; none when the fit is flat), then mapped into the box "
        "(box sides at least 1). Output [N, 4, K]: x, y, the fitted score, and the softmax probability (0 without should_output_softmax)."))
should_not_do_gradient("HeatmapMaxKeypoint")


@register_kernel("HeatmapMaxKeypoint")
def heatmap_max_keypoint(ctx):
    softmax = ctx.bool("should_output_softmax")

    def run(maps, boxes):
        chk.float_tensor(ctx, 0, maps, "heatmaps", ndim=4)
        n, _, h, w = maps.shape
        if h != w or h < 2:
            raise ctx.input_error(0, "heatmaps must be square and at least 2x2, got %s" % list(maps.shape))
        chk.float_tensor(ctx, 1, boxes, "bboxes")
        if boxes.ndim != 2 or boxes.shape[0] != n or boxes.shape[1] < 4:
            raise ctx.input_error(1, "bboxes must be [N, >= 4] with N = %d, got %s" % (n, list(boxes.shape)))
        chk.finite(ctx, 1, boxes, "bboxes")
        return K.heatmap_max_keypoint(maps, boxes, softmax)
    return run
