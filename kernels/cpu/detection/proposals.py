"""Region proposals (Caffe2's GenerateProposals) and the FPN collect/distribute step
(CollectAndDistributeFpnRpnProposals), after Detectron's Python implementations.

Per image: take the pre_nms_topN best anchor scores (scores are [A, H, W], anchor
a at cell (h, w) is anchors[a] shifted by (w, h) * feat_stride), apply the box
deltas, clip to the image, drop boxes smaller than min_size or centred outside the
image, then greedy NMS keeping at most post_nms_topN. The NMS of all images runs
in one call on the team (nms.nms_segments).
"""
import math

import numpy as np

from . import boxes as B
from .nms import nms_segments

F32 = np.float32


def top_order(scores, pre_nms_topN):
    """Indices of the scores from highest to lowest, the first pre_nms_topN of them
    (all when pre_nms_topN <= 0); ties keep index order."""
    order = np.argsort(-scores, kind="stable")
    if 0 < pre_nms_topN < scores.size:
        order = order[:pre_nms_topN]
    return order


def candidates_one_image(scores, deltas, im_info, anchors, feat_stride, pre_nms_topN, min_size,
                         plus_one, x2_offset, angle_bound, clip_angle_thresh):
    """(boxes [K, d], scores [K]) of one image before NMS, in falling score order.
    scores [A, H, W]; deltas [A * d, H, W]; anchors [A, d] (d = 4, or 5 rotated);
    angle_bound = (on, lo, hi)."""
    A, H, W = scores.shape
    d = anchors.shape[1]
    flat = scores.reshape(-1)
    order = top_order(flat, pre_nms_topN)
    a, cell = np.divmod(order, H * W)
    h, w = np.divmod(cell, W)
    sorted_deltas = deltas.reshape(A, d, H * W)[a, :, cell]
    shift_x = w.astype(F32) * F32(feat_stride)
    shift_y = h.astype(F32) * F32(feat_stride)
    shifted = anchors[a].astype(F32)
    shifted[:, 0] += shift_x
    shifted[:, 1] += shift_y
    if d == 4:
        shifted[:, 2] += shift_x
        shifted[:, 3] += shift_y
        proposals = B.transform_upright(shifted, sorted_deltas, (1.0, 1.0, 1.0, 1.0), plus_one, x2_offset)
    else:
        proposals = B.transform_rotated(shifted, sorted_deltas, (1.0, 1.0, 1.0, 1.0), *angle_bound)
    # Caffe2 passes the image size to an int parameter: truncated
    proposals = B.clip(proposals, int(im_info[0]), int(im_info[1]), plus_one, clip_angle_thresh)
    keep = B.filter_small(proposals, min_size, im_info, plus_one)
    return proposals[keep], flat[order][keep]


def generate_proposals(scores, deltas, im_info, anchors, spatial_scale, pre_nms_topN, post_nms_topN,
                       nms_thresh, min_size, plus_one, x2_offset, angle_bound=(True, -90, 90),
                       clip_angle_thresh=1.0):
    """(rois [R, 1 + d] = batch index + box, roi_probs [R]) for scores [N, A, H, W],
    deltas [N, A * d, H, W], im_info [N, 3], anchors [A, d]."""
    N = scores.shape[0]
    d = anchors.shape[1]
    feat_stride = F32(1.0) / F32(spatial_scale)
    per_image = [candidates_one_image(scores[i], deltas[i], im_info[i], anchors, feat_stride, pre_nms_topN,
                                      min_size, plus_one, x2_offset, angle_bound, clip_angle_thresh)
                 for i in range(N)]
    starts = np.zeros(N + 1, np.int64)
    starts[1:] = np.cumsum([p[0].shape[0] for p in per_image])
    all_boxes = np.concatenate([p[0] for p in per_image]) if N else np.zeros((0, d), F32)
    all_scores = np.concatenate([p[1] for p in per_image]) if N else np.zeros(0, F32)
    limit = post_nms_topN if post_nms_topN > 0 else -1
    keep, counts = nms_segments(all_boxes, starts, nms_thresh, plus_one, np.full(N, limit, np.int64))
    rows = np.concatenate([starts[i] + keep[starts[i]:starts[i] + counts[i]] for i in range(N)]) if N \
        else np.zeros(0, np.int64)
    rois = np.empty((rows.size, 1 + d), F32)
    rois[:, 0] = np.repeat(np.arange(N, dtype=F32), counts)
    rois[:, 1:] = all_boxes[rows]
    return rois, all_scores[rows].astype(F32)


def fpn_levels(boxes, k_min, k_max, canonical_scale, canonical_level, plus_one):
    """FPN level of each [x1, y1, x2, y2] box: floor(lvl0 + log2(sqrt(area) / s0 + 1e-6))
    clipped to [k_min, k_max] (float32, as Caffe2)."""
    s = np.sqrt(B.areas(boxes, plus_one))
    levels = np.floor(F32(canonical_level) + np.log(s / F32(canonical_scale) + F32(1e-6)) / F32(math.log(2)))
    return np.clip(levels, k_min, k_max).astype(np.int64)


def collect_and_distribute(rois_list, scores_list, post_nms_topN, roi_min_level, roi_max_level,
                           canonical_scale, canonical_level, plus_one):
    """(rois [R, 5] best-first, [rois of each level], rois_idx_restore int32)."""
    rois = np.concatenate([np.asarray(r, F32).reshape(-1, 5) for r in rois_list]) if rois_list \
        else np.zeros((0, 5), F32)
    scores = np.concatenate([np.asarray(s, F32).reshape(-1) for s in scores_list]) if scores_list \
        else np.zeros(0, F32)
    order = np.argsort(-scores, kind="stable")
    if 0 < post_nms_topN < order.size:
        order = order[:post_nms_topN]
    rois = rois[order]
    levels = fpn_levels(rois[:, 1:5], roi_min_level, roi_max_level, canonical_scale, canonical_level, plus_one)
    per_level, order_idx = [], []
    for lvl in range(roi_min_level, roi_max_level + 1):
        idx = np.flatnonzero(levels == lvl)
        per_level.append(rois[idx])
        order_idx.append(idx)
    restore = np.argsort(np.concatenate(order_idx), kind="stable").astype(np.int32)
    return rois, per_level, restore
