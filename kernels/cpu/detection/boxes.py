"""Box arithmetic of Detectron (caffe2/operators/generate_proposals_op_util_boxes.h),
in float32 as Caffe2 computes it.

Upright boxes are [x1, y1, x2, y2]; rotated boxes are [ctr_x, ctr_y, w, h, angle in
degrees, counter-clockwise]. `plus_one` is Caffe2's legacy_plus_one: the "+ 1" in a
box's width and height (pixel-inclusive corners) that Detectron models were trained
with. `x2_offset` is what the transform subtracts from the new x2 / y2: plus_one in
late Caffe2; the older `correct_transform_coords` argument set it on its own.
"""
import math

import numpy as np

F32 = np.float32
# Caffe2's BBOX_XFORM_CLIP_DEFAULT: largest log-space width/height delta
BBOX_XFORM_CLIP = F32(math.log(1000.0 / 16.0))


def transform_upright(boxes, deltas, weights, plus_one, x2_offset, clip=BBOX_XFORM_CLIP):
    """New [x1, y1, x2, y2] boxes from boxes (M, 4) and deltas (M, 4) = [dx, dy, dw, dh]."""
    boxes = boxes.astype(F32, copy=False)
    deltas = deltas.astype(F32, copy=False)
    wx, wy, ww, wh = (F32(w) for w in weights)
    widths = boxes[:, 2] - boxes[:, 0] + F32(plus_one)
    heights = boxes[:, 3] - boxes[:, 1] + F32(plus_one)
    ctr_x = boxes[:, 0] + F32(0.5) * widths
    ctr_y = boxes[:, 1] + F32(0.5) * heights
    dx = deltas[:, 0] / wx
    dy = deltas[:, 1] / wy
    dw = np.minimum(deltas[:, 2] / ww, clip)
    dh = np.minimum(deltas[:, 3] / wh, clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    pred_w = np.exp(dw) * widths
    pred_h = np.exp(dh) * heights
    out = np.empty((boxes.shape[0], 4), F32)
    out[:, 0] = pred_ctr_x - F32(0.5) * pred_w
    out[:, 1] = pred_ctr_y - F32(0.5) * pred_h
    out[:, 2] = pred_ctr_x + F32(0.5) * pred_w - F32(x2_offset)
    out[:, 3] = pred_ctr_y + F32(0.5) * pred_h - F32(x2_offset)
    return out


def transform_rotated(boxes, deltas, weights, angle_bound_on, angle_lo, angle_hi, clip=BBOX_XFORM_CLIP):
    """New [ctr_x, ctr_y, w, h, angle] boxes from boxes (M, 5) and deltas (M, 5) =
    [dx, dy, dw, dh, da (radians)]; angles wrapped into [angle_lo, angle_hi] by one
    period (angle_hi - angle_lo, a multiple of 180) when angle_bound_on."""
    boxes = boxes.astype(F32, copy=False)
    deltas = deltas.astype(F32, copy=False)
    wx, wy, ww, wh = (F32(w) for w in weights)
    out = np.empty((boxes.shape[0], 5), F32)
    out[:, 0] = deltas[:, 0] / wx * boxes[:, 2] + boxes[:, 0]
    out[:, 1] = deltas[:, 1] / wy * boxes[:, 3] + boxes[:, 1]
    out[:, 2] = np.exp(np.minimum(deltas[:, 2] / ww, clip)) * boxes[:, 2]
    out[:, 3] = np.exp(np.minimum(deltas[:, 3] / wh, clip)) * boxes[:, 3]
    out[:, 4] = (deltas[:, 4] * F32(180.0 / math.pi)) + boxes[:, 4]
    if angle_bound_on:
        period = F32(angle_hi - angle_lo)
        angles = out[:, 4]
        low, high = angles < angle_lo, angles > angle_hi
        angles[low] += period
        angles[high] -= period
    return out


def clip_upright(boxes, height, width, plus_one):
    """Corners clamped into [0, width - plus_one] x [0, height - plus_one]."""
    out = np.empty_like(boxes, dtype=F32)
    xmax, ymax = F32(width - plus_one), F32(height - plus_one)
    out[:, 0] = np.maximum(np.minimum(boxes[:, 0], xmax), F32(0))
    out[:, 1] = np.maximum(np.minimum(boxes[:, 1], ymax), F32(0))
    out[:, 2] = np.maximum(np.minimum(boxes[:, 2], xmax), F32(0))
    out[:, 3] = np.maximum(np.minimum(boxes[:, 3], ymax), F32(0))
    return out


def ctrwh_to_xyxy(boxes, plus_one):
    half_w = (boxes[:, 2] - F32(plus_one)) / F32(2)
    half_h = (boxes[:, 3] - F32(plus_one)) / F32(2)
    return np.stack([boxes[:, 0] - half_w, boxes[:, 1] - half_h,
                     boxes[:, 0] + half_w, boxes[:, 1] + half_h], axis=1).astype(F32)


def xyxy_to_ctrwh(boxes, plus_one):
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / F32(2), (boxes[:, 1] + boxes[:, 3]) / F32(2),
                     boxes[:, 2] - boxes[:, 0] + F32(plus_one),
                     boxes[:, 3] - boxes[:, 1] + F32(plus_one)], axis=1).astype(F32)


def clip_rotated(boxes, height, width, angle_thresh, plus_one):
    """Rotated boxes within angle_thresh degrees of upright are clipped like upright
    ones; the others are left alone (Caffe2 does not clip tilted boxes)."""
    out = boxes.astype(F32, copy=True)
    upright = np.abs(boxes[:, 4]) <= angle_thresh
    if upright.any():
        xyxy = clip_upright(ctrwh_to_xyxy(out[upright], plus_one), height, width, plus_one)
        out[upright, :4] = xyxy_to_ctrwh(xyxy, plus_one)
    return out


def clip(boxes, height, width, plus_one, angle_thresh=1.0):
    if boxes.shape[1] == 4:
        return clip_upright(boxes, height, width, plus_one)
    return clip_rotated(boxes, height, width, angle_thresh, plus_one)


def filter_small(boxes, min_size, im_info, plus_one):
    """Row indices of boxes with both sides >= min_size * im_scale whose centre lies
    inside the image (im_info = [height, width, scale])."""
    min_size = min_size * float(im_info[2])
    if boxes.shape[1] == 4:
        ws = boxes[:, 2] - boxes[:, 0] + F32(plus_one)
        hs = boxes[:, 3] - boxes[:, 1] + F32(plus_one)
        x_ctr = boxes[:, 0] + ws / F32(2)
        y_ctr = boxes[:, 1] + hs / F32(2)
    else:
        ws, hs, x_ctr, y_ctr = boxes[:, 2], boxes[:, 3], boxes[:, 0], boxes[:, 1]
    keep = (ws >= min_size) & (hs >= min_size) & (x_ctr < F32(im_info[1])) & (y_ctr < F32(im_info[0]))
    return np.flatnonzero(keep)


def areas(boxes, plus_one):
    return (boxes[:, 2] - boxes[:, 0] + F32(plus_one)) * (boxes[:, 3] - boxes[:, 1] + F32(plus_one))
