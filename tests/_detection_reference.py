"""Plain NumPy references for the detection op tests, written from Detectron's
definitions (float64, loops where that reads clearer); never calls caffe2py."""
import math

import numpy as np


def bilinear(plane, y, x):
    """Caffe2's RoIAlign sample: 0 outside [-1, H] x [-1, W], else clamped bilinear."""
    H, W = plane.shape
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return 0.0
    y, x = min(max(y, 0.0), H - 1.0), min(max(x, 0.0), W - 1.0)
    y0, x0 = int(math.floor(y)), int(math.floor(x))
    y1, x1 = min(y0 + 1, H - 1), min(x0 + 1, W - 1)
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * plane[y0, x0] + (1 - ly) * lx * plane[y0, x1]
            + ly * (1 - lx) * plane[y1, x0] + ly * lx * plane[y1, x1])


def roi_align(x, rois, scale, ph, pw, ratio, aligned, nhwc=False):
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    x = x.astype(np.float64)
    R, C = rois.shape[0], x.shape[1]
    out = np.zeros((R, C, ph, pw))
    off = 0.5 if aligned else 0.0
    for r in range(R):
        b = int(rois[r, 0]) if rois.shape[1] == 5 else 0
        x1, y1, x2, y2 = (float(v) * scale - off for v in rois[r, -4:])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else int(math.ceil(rh / ph))
        gw = ratio if ratio > 0 else int(math.ceil(rw / pw))
        for i in range(ph):
            for j in range(pw):
                for c in range(C):
                    acc = 0.0
                    for iy in range(gh):
                        yy = y1 + i * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            xx = x1 + j * bw + (ix + 0.5) * bw / gw
                            acc += bilinear(x[b, c], yy, xx)
                    out[r, c, i, j] = acc / max(gh * gw, 1)
    return out.transpose(0, 2, 3, 1) if nhwc else out


def iou(a, b, plus_one):
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + plus_one, 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + plus_one, 0.0)
    inter = w * h
    area = lambda z: (z[2] - z[0] + plus_one) * (z[3] - z[1] + plus_one)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def nms(boxes, scores, thresh, plus_one, top_n=-1):
    """Greedy NMS over rows sorted by falling score (ties by index); kept row indices."""
    order = sorted(range(len(scores)), key=lambda k: (-scores[k], k))
    keep = []
    while order:
        if 0 <= top_n <= len(keep):
            break
        i = order.pop(0)
        keep.append(i)
        order = [j for j in order if iou(boxes[i], boxes[j], plus_one) <= thresh]
    return keep


def transform(boxes, deltas, weights=(1.0, 1.0, 1.0, 1.0), plus_one=1.0, offset=1.0,
              clip=math.log(1000.0 / 16.0)):
    boxes, deltas = boxes.astype(np.float64), deltas.astype(np.float64)
    w = boxes[:, 2] - boxes[:, 0] + plus_one
    h = boxes[:, 3] - boxes[:, 1] + plus_one
    cx, cy = boxes[:, 0] + 0.5 * w, boxes[:, 1] + 0.5 * h
    dx, dy = deltas[:, 0] / weights[0], deltas[:, 1] / weights[1]
    dw, dh = np.minimum(deltas[:, 2] / weights[2], clip), np.minimum(deltas[:, 3] / weights[3], clip)
    pcx, pcy, pw, ph = dx * w + cx, dy * h + cy, np.exp(dw) * w, np.exp(dh) * h
    return np.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw - offset, pcy + 0.5 * ph - offset], 1)


def clip_boxes(boxes, height, width, plus_one=1.0):
    out = boxes.copy()
    out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, width - plus_one)
    out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, height - plus_one)
    return out


def generate_proposals(scores, deltas, im_info, anchors, spatial_scale, pre_n, post_n, thresh, min_size,
                       plus_one=1.0):
    """Detectron's GenerateProposalsOp.proposals_for_one_image, per image."""
    stride = 1.0 / spatial_scale
    rois, probs = [], []
    for i in range(scores.shape[0]):
        A, H, W = scores.shape[1:]
        shift_x, shift_y = np.meshgrid(np.arange(W) * stride, np.arange(H) * stride)
        shifts = np.stack([shift_x.ravel(), shift_y.ravel(), shift_x.ravel(), shift_y.ravel()], 1)
        all_anchors = (anchors[None, :, :] + shifts[:, None, :]).reshape(-1, 4)        # (H*W*A) order
        d = deltas[i].reshape(A, 4, H, W).transpose(2, 3, 0, 1).reshape(-1, 4)
        s = scores[i].transpose(1, 2, 0).reshape(-1)
        order = sorted(range(s.size), key=lambda k: (-s[k], (k % A) * H * W + k // A))
        if 0 < pre_n < len(order):
            order = order[:pre_n]
        props = transform(all_anchors[order], d[order], plus_one=plus_one, offset=plus_one)
        props = clip_boxes(props, int(im_info[i, 0]), int(im_info[i, 1]), plus_one)
        sc = s[order]
        ws = props[:, 2] - props[:, 0] + plus_one
        hs = props[:, 3] - props[:, 1] + plus_one
        ms = min_size * im_info[i, 2]
        keep = np.flatnonzero((ws >= ms) & (hs >= ms) & (props[:, 0] + ws / 2 < im_info[i, 1])
                               & (props[:, 1] + hs / 2 < im_info[i, 0]))
        props, sc = props[keep], sc[keep]
        k = nms(props, sc, thresh, plus_one, post_n if post_n > 0 else -1)
        rois.append(np.concatenate([np.full((len(k), 1), i), props[k]], 1))
        probs.append(sc[k])
    return np.concatenate(rois).reshape(-1, 5), np.concatenate(probs)


def box_with_nms_limit(scores, boxes, score_thresh, thresh, per_image, plus_one=1.0):
    """One image, class 0 background, one box group per class."""
    dets = []
    for j in range(1, scores.shape[1]):
        idx = np.flatnonzero(scores[:, j] > score_thresh)
        b = boxes[idx, 4 * j:4 * j + 4]
        k = nms(b, scores[idx, j], thresh, plus_one, per_image if per_image > 0 else -1)
        dets += [(scores[idx[m], j], j, idx[m]) for m in k]
    if 0 < per_image < len(dets):
        best = sorted(range(len(dets)), key=lambda m: (-dets[m][0], m))[:per_image]
        chosen = [dets[m] for m in best]
        dets = [d for j in range(1, scores.shape[1]) for d in chosen if d[1] == j]
    s = np.array([d[0] for d in dets], np.float64)
    bx = np.array([boxes[d[2], 4 * d[1]:4 * d[1] + 4] for d in dets], np.float64).reshape(-1, 4)
    cls = np.array([d[1] for d in dets], np.float64)
    return s, bx, cls, np.array([d[2] for d in dets])
