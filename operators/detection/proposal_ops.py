"""Detectron's box ops: BBoxTransform, BoxWithNMSLimit, GenerateProposals (and its
alias GenerateProposalsCPP), CollectAndDistributeFpnRpnProposals.

legacy_plus_one (default 1, Caffe2's late argument) is the "+ 1" of pixel-inclusive
box widths. The transform's x2/y2 offset follows it, unless the op sets the older
correct_transform_coords argument, which then decides the offset alone (Caffe2
before legacy_plus_one: widths always "+ 1", x2 offset 1 only when it was set)."""
import numpy as np

from caffe2py.gradients import should_not_do_gradient
from caffe2py.kernels.cpu.detection import boxes as B
from caffe2py.kernels.cpu.detection import nms as NMS
from caffe2py.kernels.cpu.detection import proposals as P
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from . import _detection_checks as chk

DT = caffe2_pb2.TensorProto
F32 = np.float32

_ANGLE_ARGS = (
    Arg("angle_bound_on", "bool", True, doc="rotated boxes: wrap angles into [angle_bound_lo, angle_bound_hi]"),
    Arg("angle_bound_lo", "int", -90), Arg("angle_bound_hi", "int", 90),
    Arg("clip_angle_thresh", "float", 1.0, doc="rotated boxes within this many degrees of upright are "
                                               "clipped like upright ones (< 0: none)"))
_PLUS_ONE = Arg("legacy_plus_one", "bool", True, doc="box width = x2 - x1 + 1 (Detectron's convention)")
_CORRECT = Arg("correct_transform_coords", "bool", False,
               doc="older spelling: when set, x2/y2 of transformed boxes are offset by -1; when present, "
                   "it alone decides that offset")


def _x2_offset(ctx, plus_one):
    if ctx.has("correct_transform_coords"):
        return 1.0 if ctx.bool("correct_transform_coords") else 0.0
    return 1.0 if plus_one else 0.0


def _angle_bound(ctx):
    on, lo, hi = ctx.bool("angle_bound_on"), ctx.int("angle_bound_lo"), ctx.int("angle_bound_hi")
    period = hi - lo
    if on and (period <= 0 or period % 180):
        raise ctx.error("angle_bound_hi - angle_bound_lo must be a positive multiple of 180, got %d" % period)
    return on, lo, hi


# ----------------------------------------------------------------- BBoxTransform

def _bbox_infer(ctx, ins):
    outs = [ins[1]]
    if ctx.n_outputs > 1:
        outs.append(TensorType((ins[2].dims[0],), DT.FLOAT) if ins[2].known and ins[2].dims else UNKNOWN)
    return outs


register_schema(OpSchema(
    "BBoxTransform", num_inputs=3, num_outputs=(1, 2), inputs=("rois", "deltas", "im_info"),
    outputs=("box_out", "roi_batch_splits"), inference=_bbox_infer,
    args=(Arg("weights", "floats", [1.0, 1.0, 1.0, 1.0], doc="[wx, wy, ww, wh] the deltas are divided by"),
          Arg("apply_scale", "bool", True, doc="scale the transformed boxes back to the input image space"),
          Arg("rotated", "bool", False, doc="boxes are [ctr_x, ctr_y, w, h, angle]"),
          _CORRECT, _PLUS_ONE) + _ANGLE_ARGS,
    doc="Applies box regression deltas [M, 4K] to the proposals rois ([M, 4] for one image, or [M, 5] "
        "with the image index first, grouped by image in increasing order) for each of K classes: boxes "
        "are taken to the image scale (divided by im_info's scale), transformed, clipped to the image "
        "(height and width divided by the scale, rounded) and multiplied by the scale again when "
        "apply_scale. im_info [batch, 3] = [height, width, scale]. roi_batch_splits: RoIs per image."))


@register_kernel("BBoxTransform")
def bbox_transform(ctx):
    weights = [float(w) for w in ctx.floats("weights")]
    if len(weights) != 4:
        raise ctx.error("weights size %d must be 4." % len(weights))
    if any(w == 0 for w in weights):
        raise ctx.error("weights must be non-zero, got %s" % weights)
    apply_scale, rotated = ctx.bool("apply_scale"), ctx.bool("rotated")
    plus_one = 1.0 if ctx.bool("legacy_plus_one") else 0.0
    x2_offset = _x2_offset(ctx, plus_one)
    angle = _angle_bound(ctx)
    clip_thresh = ctx.float("clip_angle_thresh")
    d = 5 if rotated else 4

    def run(rois, deltas, im_info):
        chk.float_tensor(ctx, 0, rois, "rois", ndim=2)
        chk.float_tensor(ctx, 1, deltas, "deltas", ndim=2)
        chk.float_tensor(ctx, 2, im_info, "im_info", ndim=2)
        m = rois.shape[0]
        if rois.shape[1] not in (d, d + 1):
            raise ctx.input_error(0, "rois must be [M, %d] or [M, %d], got %s" % (d, d + 1, list(rois.shape)))
        if deltas.shape[0] != m or deltas.shape[1] % d:
            raise ctx.input_error(1, "deltas must be [%d, %d * K], got %s" % (m, d, list(deltas.shape)))
        if im_info.shape[1] != 3:
            raise ctx.input_error(2, "im_info must be [batch, 3], got %s" % list(im_info.shape))
        chk.finite(ctx, 2, im_info, "im_info")
        batch = im_info.shape[0]
        if rois.shape[1] == d:
            if batch != 1:
                raise ctx.input_error(2, "rois without a batch column need exactly one image, im_info "
                                         "has %d" % batch)
            ids = np.zeros(m, np.int64)
        else:
            ids = rois[:, 0].astype(np.int64)
            if m and ((ids < 0).any() or (ids >= batch).any() or (np.diff(ids) < 0).any()):
                raise ctx.input_error(0, "batch indices must lie in [0, %d) and be grouped in increasing "
                                         "order" % batch)
        if (im_info[:, 2] <= 0).any():
            raise ctx.input_error(2, "im_info scales must be positive")
        counts = np.bincount(ids, minlength=batch)
        boxes = rois[:, rois.shape[1] - d:]
        out = np.empty(deltas.shape, F32)
        offset = 0
        for i in range(batch):
            n = int(counts[i])
            scale_before = F32(im_info[i, 2])
            scale_after = scale_before if apply_scale else F32(1)
            img_h = int(F32(im_info[i, 0]) / scale_before + F32(0.5))
            img_w = int(F32(im_info[i, 1]) / scale_before + F32(0.5))
            cur = boxes[offset:offset + n].astype(F32, copy=True)
            cur[:, :4] /= scale_before
            for k in range(deltas.shape[1] // d):
                dk = deltas[offset:offset + n, k * d:(k + 1) * d]
                if d == 4:
                    t = B.transform_upright(cur, dk, weights, plus_one, x2_offset)
                else:
                    t = B.transform_rotated(cur, dk, weights, *angle)
                t = B.clip(t, img_h, img_w, plus_one, clip_thresh)
                t[:, :4] *= scale_after
                out[offset:offset + n, k * d:(k + 1) * d] = t
            offset += n
        if ctx.n_outputs > 1:
            return out, counts.astype(F32)
        return out
    return run


# ----------------------------------------------------------------- BoxWithNMSLimit

def _nms_limit_infer(ctx, ins):
    outs = [TensorType(None, DT.FLOAT), TensorType(None, DT.FLOAT), TensorType(None, DT.FLOAT)]
    if ctx.n_outputs > 3:
        n = (ins[2].dims[0],) if len(ins) > 2 and ins[2].known and ins[2].dims else (1,)
        outs.append(TensorType(n, DT.FLOAT))
    if ctx.n_outputs > 4:
        outs.append(TensorType(None, DT.INT32))
        ncls = ins[0].dims[1] if ins[0].known and len(ins[0].dims) >= 2 else None
        outs.append(TensorType(None if ncls is None else outs[3].dims + (ncls,), DT.INT32))
    return outs[:ctx.n_outputs]


register_schema(OpSchema(
    "BoxWithNMSLimit", num_inputs=(2, 3), num_outputs=(3, 6), inputs=("scores", "boxes", "batch_splits"),
    outputs=("scores", "boxes", "classes", "batch_splits", "keeps", "keeps_size"),
    inference=_nms_limit_infer,
    args=(Arg("score_thresh", "float", 0.05), Arg("nms", "float", 0.3, doc="IoU threshold"),
          Arg("detections_per_im", "int", 100, doc="at most this many detections per image over all "
                                                   "classes (<= 0: no limit)"),
          Arg("soft_nms_enabled", "bool", False), Arg("soft_nms_method", "string", "linear",
                                                      doc="linear or gaussian"),
          Arg("soft_nms_sigma", "float", 0.5), Arg("soft_nms_min_score_thres", "float", 0.001),
          Arg("rotated", "bool", False, doc="boxes are [ctr_x, ctr_y, w, h, angle]"),
          Arg("cls_agnostic_bbox_reg", "bool", False, doc="one box per row shared by all classes"),
          Arg("input_boxes_include_bg_cls", "bool", True,
              doc="boxes have a background column group; 0: scores' last column is the background"),
          Arg("output_classes_include_bg_cls", "bool", True, doc="output class ids count the background "
                                                                 "as 0"),
          _PLUS_ONE),
    doc="Per image (batch_splits, default one image) and per foreground class: keep boxes scoring above "
        "score_thresh, apply NMS (or soft-NMS), then keep the detections_per_im best over all classes. "
        "scores [n, num_classes] (column 0 background), boxes [n, num_box_classes * 4 (5 rotated)]. "
        "Outputs are grouped by image then class: scores [k], boxes [k, 4], classes [k] (float), "
        "batch_splits [batch], keeps [k] (input rows, int32) and keeps_size [batch, num_classes]."))


def _as_2d(ctx, index, a, what):
    chk.float_tensor(ctx, index, a, what)
    if a.ndim == 4 and a.shape[2] == 1 and a.shape[3] == 1:
        return a.reshape(a.shape[0], a.shape[1])
    if a.ndim != 2:
        raise ctx.input_error(index, "%s must be 2-D (or [n, m, 1, 1]), got shape %s" % (what, list(a.shape)))
    return a


@register_kernel("BoxWithNMSLimit")
def box_with_nms_limit(ctx):
    score_thresh, nms_thresh = ctx.float("score_thresh"), ctx.float("nms")
    per_image = ctx.int("detections_per_im")
    soft, method_name = ctx.bool("soft_nms_enabled"), ctx.string("soft_nms_method")
    if method_name not in ("linear", "gaussian"):
        raise ctx.error("Unexpected soft_nms_method '%s' (linear or gaussian)" % method_name)
    method = 1 if method_name == "linear" else 2
    sigma, min_score = ctx.float("soft_nms_sigma"), ctx.float("soft_nms_min_score_thres")
    d = 5 if ctx.bool("rotated") else 4
    agnostic = ctx.bool("cls_agnostic_bbox_reg")
    boxes_bg = ctx.bool("input_boxes_include_bg_cls")
    out_bg = ctx.bool("output_classes_include_bg_cls")
    plus_one = 1.0 if ctx.bool("legacy_plus_one") else 0.0
    fg_start = 1 if boxes_bg else 0

    def box_col(j):
        return 0 if agnostic else (j if boxes_bg else j - 1)

    def run(scores, boxes, *rest):
        scores = _as_2d(ctx, 0, scores, "scores")
        boxes = _as_2d(ctx, 1, boxes, "boxes")
        n, num_classes = scores.shape
        if boxes.shape[0] != n:
            raise ctx.input_error(1, "boxes has %d rows, scores %d" % (boxes.shape[0], n))
        want = (box_col(num_classes - 1) + 1) * d if num_classes else 0
        if boxes.shape[1] != want:
            raise ctx.input_error(1, "boxes must have %d columns for %d classes (%d per box), got %d"
                                  % (want, num_classes, d, boxes.shape[1]))
        splits = np.array([n], np.int64)
        if rest:
            s = rest[0]
            if not isinstance(s, np.ndarray) or s.ndim != 1 or s.dtype not in (np.float32, np.int32):
                raise ctx.input_error(2, "batch_splits must be a 1-D float32 or int32 tensor")
            if s.size and ((s < 0).any() or (np.floor(s) != s).any()):
                raise ctx.input_error(2, "batch_splits must hold non-negative whole counts")
            splits = s.astype(np.int64)
            if splits.sum() != n:
                raise ctx.input_error(2, "batch_splits sum to %d, but there are %d boxes" % (splits.sum(), n))
        chk.finite(ctx, 1, boxes, "boxes")
        batch = splits.size
        offsets = np.concatenate([[0], np.cumsum(splits)])
        # one segment per (image, foreground class): candidate rows above the threshold
        seg_rows, seg_boxes, seg_scores, starts = [], [], [], [0]
        for b in range(batch):
            lo, hi = offsets[b], offsets[b + 1]
            for j in range(1, num_classes):
                col = scores[lo:hi, j - 1 + fg_start]
                idx = np.flatnonzero(col > score_thresh)
                if not soft:
                    idx = idx[np.argsort(-col[idx], kind="stable")]
                seg_rows.append(idx)
                seg_boxes.append(boxes[lo:hi, box_col(j) * d:(box_col(j) + 1) * d][idx])
                seg_scores.append(col[idx])
                starts.append(starts[-1] + idx.size)
        starts = np.array(starts, np.int64)
        cand_boxes = np.concatenate(seg_boxes) if seg_boxes else np.zeros((0, d), F32)
        cand_scores = np.concatenate(seg_scores) if seg_scores else np.zeros(0, F32)
        if soft:
            keep, counts, new_scores = NMS.soft_nms_segments(cand_boxes, cand_scores, starts, sigma, nms_thresh,
                                                             min_score, method, plus_one)
        else:
            limit = per_image if per_image > 0 else -1
            keep, counts = NMS.nms_segments(cand_boxes, starts, nms_thresh, plus_one,
                                            np.full(starts.size - 1, limit, np.int64))
            new_scores = cand_scores
        out_scores, out_boxes, out_classes, out_keeps = [], [], [], []
        keeps_size = np.zeros((batch, num_classes), np.int32)
        per_batch = np.zeros(batch, F32)
        s = 0
        for b in range(batch):
            kept = []          # per class: (positions into the candidates, scores)
            for j in range(1, num_classes):
                lo = starts[s]
                pos = lo + keep[lo:lo + counts[s]]
                kept.append((pos, new_scores[pos]))
                s += 1
            total = sum(p.size for p, _ in kept)
            if per_image > 0 and total > per_image:
                cls = np.concatenate([np.full(p.size, j, np.int64) for j, (p, _) in enumerate(kept)])
                allpos = np.concatenate([p for p, _ in kept])
                allsc = np.concatenate([sc for _, sc in kept])
                best = np.argsort(-allsc, kind="stable")[:per_image]
                # rebuilt per class in falling score order, as Caffe2 pushes them back
                kept = [(allpos[best][cls[best] == j],) for j in range(num_classes - 1)]
                kept = [(p, new_scores[p]) for (p,) in kept]
                total = per_image
            per_batch[b] = total
            for j, (pos, sc) in enumerate(kept, start=1):
                rows = pos - starts[(b * (num_classes - 1)) + j - 1]
                input_rows = seg_rows[b * (num_classes - 1) + j - 1][rows]
                out_scores.append(sc.astype(F32))
                out_boxes.append(cand_boxes[pos])
                out_classes.append(np.full(pos.size, j - (0 if out_bg else 1), F32))
                out_keeps.append(input_rows.astype(np.int32))
                keeps_size[b, j] = pos.size
        outs = [np.concatenate(out_scores) if out_scores else np.zeros(0, F32),
                np.concatenate(out_boxes) if out_boxes else np.zeros((0, d), F32),
                np.concatenate(out_classes) if out_classes else np.zeros(0, F32),
                per_batch,
                np.concatenate(out_keeps) if out_keeps else np.zeros(0, np.int32),
                keeps_size]
        return tuple(outs[:ctx.n_outputs])
    return run


# ----------------------------------------------------------------- GenerateProposals

_PROPOSAL_ARGS = (
    Arg("spatial_scale", "float", 1.0 / 16, doc="feature map scale (1 / stride)"),
    Arg("pre_nms_topN", "int", 6000, doc="best-scoring anchors kept before NMS (<= 0: all)"),
    Arg("post_nms_topN", "int", 300, doc="proposals kept after NMS per image (<= 0: all)"),
    Arg("nms_thresh", "float", 0.7), Arg("min_size", "float", 16.0, doc="minimum box side, times the "
                                                                          "image scale"),
    _CORRECT, _PLUS_ONE) + _ANGLE_ARGS


def _proposals_infer(ctx, ins):
    return [TensorType(None, DT.FLOAT), TensorType(None, DT.FLOAT)]     # sizes depend on the data


for _name in ("GenerateProposals", "GenerateProposalsCPP"):
    register_schema(OpSchema(
        _name, num_inputs=4, num_outputs=2, inputs=("scores", "bbox_deltas", "im_info", "anchors"),
        outputs=("rois", "rois_probs"), args=_PROPOSAL_ARGS, inference=_proposals_infer,
        doc="RPN proposals: for each image, the pre_nms_topN best of scores [N, A, H, W] (anchor a at "
            "cell (h, w) is anchors[a] [A, 4] shifted by (w, h) / spatial_scale), transformed by "
            "bbox_deltas [N, 4A, H, W], clipped to im_info [N, 3] = [height, width, scale], filtered by "
            "min_size, then NMS at nms_thresh keeping post_nms_topN. rois [R, 5] = [image index, x1, y1, "
            "x2, y2], rois_probs [R]. Rotated anchors [A, 5] give rois [R, 6]."
            + (" (The name Caffe2 gave its C++ port of the Python op; same kernel.)"
               if _name.endswith("CPP") else "")))


def _generate_proposals(ctx):
    scale = ctx.float("spatial_scale")
    if not scale > 0:
        raise ctx.error("spatial_scale must be positive, got %g" % scale)
    pre, post = ctx.int("pre_nms_topN"), ctx.int("post_nms_topN")
    thresh, min_size = ctx.float("nms_thresh"), ctx.float("min_size")
    plus_one = 1.0 if ctx.bool("legacy_plus_one") else 0.0
    x2_offset = _x2_offset(ctx, plus_one)
    angle = _angle_bound(ctx)
    clip_thresh = ctx.float("clip_angle_thresh")

    def run(scores, deltas, im_info, anchors):
        chk.float_tensor(ctx, 0, scores, "scores", ndim=4)
        chk.float_tensor(ctx, 3, anchors, "anchors", ndim=2)
        n, a, h, w = scores.shape
        d = anchors.shape[1]
        if d not in (4, 5) or anchors.shape[0] != a:
            raise ctx.input_error(3, "anchors must be [A = %d, 4 or 5], got %s" % (a, list(anchors.shape)))
        chk.float_tensor(ctx, 1, deltas, "bbox_deltas", ndim=4)
        if deltas.shape != (n, d * a, h, w):
            raise ctx.input_error(1, "bbox_deltas must be %s, got %s" % ([n, d * a, h, w], list(deltas.shape)))
        chk.float_tensor(ctx, 2, im_info, "im_info", ndim=2)
        if im_info.shape != (n, 3):
            raise ctx.input_error(2, "im_info must be [%d, 3], got %s" % (n, list(im_info.shape)))
        for k, (arr, what) in enumerate(((deltas, "bbox_deltas"), (im_info, "im_info"), (anchors, "anchors"))):
            chk.finite(ctx, k + 1, arr, what)
        return P.generate_proposals(scores, deltas, im_info, anchors, scale, pre, post, thresh, min_size,
                                    plus_one, x2_offset, angle, clip_thresh)
    return run


register_kernel("GenerateProposals")(_generate_proposals)
register_kernel("GenerateProposalsCPP")(_generate_proposals)


# ----------------------------------------------------------------- FPN collect / distribute

def _fpn_levels(ctx):
    rpn_min, rpn_max = ctx.int("rpn_min_level"), ctx.int("rpn_max_level")
    roi_min, roi_max = ctx.int("roi_min_level"), ctx.int("roi_max_level")
    return rpn_min, rpn_max, roi_min, roi_max


def _collect_infer(ctx, ins):
    outs = [TensorType(None, DT.FLOAT)] * (ctx.n_outputs - 1) + [TensorType(None, DT.INT32)]
    return outs


register_schema(OpSchema(
    "CollectAndDistributeFpnRpnProposals", num_inputs=(2, None), num_outputs=(3, None),
    inputs=("rpn_rois_fpn2", "rpn_rois_fpn3", "rpn_rois_fpn4", "rpn_rois_fpn5", "rpn_rois_fpn6",
            "rpn_roi_probs_fpn2", "rpn_roi_probs_fpn3", "rpn_roi_probs_fpn4", "rpn_roi_probs_fpn5",
            "rpn_roi_probs_fpn6"),
    outputs=("rois", "rois_fpn2", "rois_fpn3", "rois_fpn4", "rois_fpn5", "rois_idx_restore"),
    inference=_collect_infer,
    args=(Arg("roi_canonical_scale", "int", 224), Arg("roi_canonical_level", "int", 4),
          Arg("roi_max_level", "int", 5), Arg("roi_min_level", "int", 2),
          Arg("rpn_max_level", "int", 6), Arg("rpn_min_level", "int", 2),
          Arg("rpn_post_nms_topN", "int", 2000), _PLUS_ONE),
    doc="Merges the RPN proposals of FPN levels rpn_min_level..rpn_max_level (rois [n, 5] inputs, then "
        "their probability inputs), keeps the rpn_post_nms_topN best, and assigns each to level "
        "floor(canonical_level + log2(sqrt(area) / canonical_scale + 1e-6)) clipped to [roi_min_level, "
        "roi_max_level]. Outputs: the kept rois best-first, the rois of each level (in that order), and "
        "rois_idx_restore (int32) that puts the concatenated level outputs back in rois' order."))


@register_kernel("CollectAndDistributeFpnRpnProposals")
def collect_and_distribute(ctx):
    rpn_min, rpn_max, roi_min, roi_max = _fpn_levels(ctx)
    if roi_max < roi_min:
        raise ctx.error("roi_max_level %d must be greater than or equal to roi_min_level %d." % (roi_max, roi_min))
    if rpn_max < rpn_min:
        raise ctx.error("rpn_max_level %d must be greater than or equal to rpn_min_level %d." % (rpn_max, rpn_min))
    rpn_levels, roi_levels = rpn_max - rpn_min + 1, roi_max - roi_min + 1
    if ctx.n_inputs != 2 * rpn_levels:
        raise ctx.error("takes 2 * (rpn_max_level - rpn_min_level + 1) = %d inputs, got %d"
                        % (2 * rpn_levels, ctx.n_inputs))
    if ctx.n_outputs != roi_levels + 2:
        raise ctx.error("produces roi_max_level - roi_min_level + 3 = %d outputs, got %d"
                        % (roi_levels + 2, ctx.n_outputs))
    post = ctx.int("rpn_post_nms_topN")
    scale, level = ctx.int("roi_canonical_scale"), ctx.int("roi_canonical_level")
    plus_one = 1.0 if ctx.bool("legacy_plus_one") else 0.0

    def run(*ins):
        rois_in, probs_in = ins[:rpn_levels], ins[rpn_levels:]
        for k, r in enumerate(rois_in):
            chk.float_tensor(ctx, k, r, "rpn rois")
            if r.ndim != 2 or r.shape[1] != 5:
                raise ctx.input_error(k, "rpn rois must be [n, 5], got %s" % list(r.shape))
            chk.finite(ctx, k, r, "rpn rois")
            p = probs_in[k]
            chk.float_tensor(ctx, rpn_levels + k, p, "rpn roi probs")
            if p.size != r.shape[0]:
                raise ctx.input_error(rpn_levels + k, "holds %d probabilities for %d rois" % (p.size, r.shape[0]))
        rois, per_level, restore = P.collect_and_distribute(list(rois_in), list(probs_in), post, roi_min,
                                                            roi_max, scale, level, plus_one)
        widths = rois[:, 3] - rois[:, 1] + F32(plus_one)
        heights = rois[:, 4] - rois[:, 2] + F32(plus_one)
        if ((widths * heights) < 0).any():
            raise ctx.input_error(0, "Negative areas founds in the rpn rois")
        return tuple([rois] + per_level + [restore])
    return run


should_not_do_gradient("BBoxTransform", "BoxWithNMSLimit", "GenerateProposals", "GenerateProposalsCPP",
                       "CollectAndDistributeFpnRpnProposals")
