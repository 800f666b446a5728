"""Greedy and soft non-maximum suppression (Detectron's nms_cpu / soft_nms_cpu), for
upright [x1, y1, x2, y2] and rotated [ctr_x, ctr_y, w, h, angle] boxes.

Many independent suppressions run in one call: BoxWithNMSLimit has one per (image,
class), GenerateProposals one per image. The caller gathers each segment's candidate
boxes into one array (segment s is rows starts[s]:starts[s+1], greedy NMS wants them
sorted by falling score) and the compiled kernels spread the segments over the team.

    keep, counts = nms_segments(boxes, starts, thresh, plus_one, limits)
    keep, counts, scores = soft_nms_segments(boxes, scores, starts, ...)

keep[starts[s]:starts[s] + counts[s]] are the kept rows of segment s, as positions
within the segment, in the order they were kept. A box is dropped when its overlap
with a kept one is not <= thresh (so a NaN overlap drops it, as in Caffe2).

Rotated overlaps: each box becomes its four corners (Caffe2's vertex construction,
angle counter-clockwise); the intersection of two boxes is one clipped against the
other (Sutherland-Hodgman, both convex), its area by the shoelace formula.
Callers check shapes and finiteness first (the loops have no bounds checks).
"""
import numpy as np

from ..runtime.jit import compiled, prange, team_blocks

F32 = np.float32


# ----------------------------------------------------------------- overlaps

@compiled(inline=True)
def _iou_upright(b, i, j, plus_one):
    area_i = (b[i, 2] - b[i, 0] + plus_one) * (b[i, 3] - b[i, 1] + plus_one)
    area_j = (b[j, 2] - b[j, 0] + plus_one) * (b[j, 3] - b[j, 1] + plus_one)
    w = min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0]) + plus_one
    h = min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1]) + plus_one
    if w < 0:
        w = w * 0
    if h < 0:
        h = h * 0
    inter = w * h
    return inter / (area_i + area_j - inter)


@compiled(inline=True)
def _corners(b, i, pts):
    """The four corners of rotated box i into pts[0:4] (Caffe2's order)."""
    theta = -b[i, 4] * 0.01745329251
    cos_half = np.cos(theta) * 0.5
    sin_half = np.sin(theta) * 0.5
    cx, cy, w, h = b[i, 0], b[i, 1], b[i, 2], b[i, 3]
    pts[0, 0] = cx - sin_half * h - cos_half * w
    pts[0, 1] = cy + cos_half * h - sin_half * w
    pts[1, 0] = cx + sin_half * h - cos_half * w
    pts[1, 1] = cy - cos_half * h - sin_half * w
    pts[2, 0] = 2 * cx - pts[0, 0]
    pts[2, 1] = 2 * cy - pts[0, 1]
    pts[3, 0] = 2 * cx - pts[1, 0]
    pts[3, 1] = 2 * cy - pts[1, 1]


@compiled
def _poly_area(p, n):
    s = 0.0
    for k in range(n):
        k1 = (k + 1) % n
        s += p[k, 0] * p[k1, 1] - p[k1, 0] * p[k, 1]
    return abs(s) * 0.5


@compiled
def _clip_polygon(subject, n, a, b, orient, out):
    """Part of polygon subject[0:n] on the inner side of the directed edge a -> b
    (orient: +1 counter-clockwise clip polygon, -1 clockwise) into out; returns its size."""
    m = 0
    ex, ey = b[0] - a[0], b[1] - a[1]
    for k in range(n):
        px, py = subject[k, 0], subject[k, 1]
        qx, qy = subject[(k + 1) % n, 0], subject[(k + 1) % n, 1]
        sp = orient * (ex * (py - a[1]) - ey * (px - a[0]))
        sq = orient * (ex * (qy - a[1]) - ey * (qx - a[0]))
        if sp >= 0:
            out[m, 0] = px
            out[m, 1] = py
            m += 1
        if (sp >= 0) != (sq >= 0):
            t = sp / (sp - sq)
            out[m, 0] = px + t * (qx - px)
            out[m, 1] = py + t * (qy - py)
            m += 1
    return m


@compiled
def _iou_rotated(b, i, j, pi, pj, work_a, work_b):
    area_i = b[i, 2] * b[i, 3]
    area_j = b[j, 2] * b[j, 3]
    _corners(b, i, pi)
    _corners(b, j, pj)
    # orientation of the clip polygon pj
    cross = (pj[1, 0] - pj[0, 0]) * (pj[2, 1] - pj[0, 1]) - (pj[1, 1] - pj[0, 1]) * (pj[2, 0] - pj[0, 0])
    orient = 1.0 if cross >= 0 else -1.0
    for k in range(4):
        work_a[k, 0] = pi[k, 0]
        work_a[k, 1] = pi[k, 1]
    n = 4
    for e in range(4):
        if n == 0:
            break
        n = _clip_polygon(work_a, n, pj[e], pj[(e + 1) % 4], orient, work_b)
        for k in range(n):
            work_a[k, 0] = work_b[k, 0]
            work_a[k, 1] = work_b[k, 1]
    inter = _poly_area(work_a, n) if n > 2 else 0.0
    return inter / (area_i + area_j - inter)


# ----------------------------------------------------------------- greedy NMS

@compiled(parallel=True)
def _nms_segments(boxes, starts, thresh, plus_one, limits, keep, counts, blocks):
    segments = starts.shape[0] - 1
    rotated = boxes.shape[1] == 5
    for t in prange(blocks):
        pi = np.empty((4, 2))
        pj = np.empty((4, 2))
        work_a = np.empty((16, 2))
        work_b = np.empty((16, 2))
        for s in range(t, segments, blocks):
            lo = starts[s]
            n = starts[s + 1] - lo
            seg = boxes[lo:lo + n]
            dropped = np.zeros(n, np.bool_)
            kept = 0
            for a in range(n):
                if dropped[a]:
                    continue
                if limits[s] >= 0 and kept >= limits[s]:
                    break
                keep[lo + kept] = a
                kept += 1
                for c in range(a + 1, n):
                    if dropped[c]:
                        continue
                    if rotated:
                        ovr = _iou_rotated(seg, a, c, pi, pj, work_a, work_b)
                    else:
                        ovr = _iou_upright(seg, a, c, plus_one)
                    if not ovr <= thresh:
                        dropped[c] = True
            counts[s] = kept


def _overlaps_numpy(seg, a, rest, plus_one):
    """Overlap of box a with the boxes `rest` (positions) of one segment."""
    if seg.shape[1] == 4:
        b = seg.astype(F32)
        area = (b[:, 2] - b[:, 0] + plus_one) * (b[:, 3] - b[:, 1] + plus_one)
        w = np.maximum(np.minimum(b[rest, 2], b[a, 2]) - np.maximum(b[rest, 0], b[a, 0]) + plus_one, F32(0))
        h = np.maximum(np.minimum(b[rest, 3], b[a, 3]) - np.maximum(b[rest, 1], b[a, 1]) + plus_one, F32(0))
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            return inter / (area[a] + area[rest] - inter)
    return np.array([_rotated_iou_numpy(seg[a], seg[c]) for c in rest], np.float64)


def _rotated_corners_numpy(box):
    theta = -float(box[4]) * 0.01745329251
    ch, sh = np.cos(theta) * 0.5, np.sin(theta) * 0.5
    cx, cy, w, h = (float(v) for v in box[:4])
    p0 = (cx - sh * h - ch * w, cy + ch * h - sh * w)
    p1 = (cx + sh * h - ch * w, cy - ch * h - sh * w)
    return [p0, p1, (2 * cx - p0[0], 2 * cy - p0[1]), (2 * cx - p1[0], 2 * cy - p1[1])]


def _rotated_iou_numpy(bi, bj):
    """The same overlap as _iou_rotated, one pair at a time in Python."""
    poly = _rotated_corners_numpy(bi)
    clip_pts = _rotated_corners_numpy(bj)
    (x0, y0), (x1, y1), (x2, y2) = clip_pts[:3]
    orient = 1.0 if (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0) >= 0 else -1.0
    for e in range(4):
        if not poly:
            break
        (ax, ay), (bx, by) = clip_pts[e], clip_pts[(e + 1) % 4]
        side = [orient * ((bx - ax) * (py - ay) - (by - ay) * (px - ax)) for px, py in poly]
        out = []
        for k, (px, py) in enumerate(poly):
            qx, qy = poly[(k + 1) % len(poly)]
            sp, sq = side[k], side[(k + 1) % len(poly)]
            if sp >= 0:
                out.append((px, py))
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((px + t * (qx - px), py + t * (qy - py)))
        poly = out
    inter = 0.0
    if len(poly) > 2:
        inter = abs(sum(poly[k][0] * poly[(k + 1) % len(poly)][1] - poly[(k + 1) % len(poly)][0] * poly[k][1]
                        for k in range(len(poly)))) * 0.5
    area_i, area_j = float(bi[2]) * float(bi[3]), float(bj[2]) * float(bj[3])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.float64(inter) / np.float64(area_i + area_j - inter)


@_nms_segments.numpy_twin
def _nms_segments_numpy(boxes, starts, thresh, plus_one, limits, keep, counts, blocks):
    for s in range(starts.shape[0] - 1):
        lo, hi = starts[s], starts[s + 1]
        seg = boxes[lo:hi]
        order = np.arange(hi - lo)
        kept = 0
        while order.size:
            if limits[s] >= 0 and kept >= limits[s]:
                break
            a = order[0]
            keep[lo + kept] = a
            kept += 1
            ovr = _overlaps_numpy(seg, a, order[1:], plus_one)
            order = order[1:][ovr <= thresh]
        counts[s] = kept


def nms_segments(boxes, starts, thresh, plus_one, limits=None):
    """Greedy NMS of every segment (rows sorted by falling score); limits[s] >= 0 stops
    a segment after that many keeps. Returns (keep positions, counts)."""
    boxes = np.ascontiguousarray(boxes, dtype=F32)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    segments = starts.size - 1
    limits = np.full(segments, -1, np.int64) if limits is None else np.ascontiguousarray(limits, np.int64)
    keep = np.zeros(max(boxes.shape[0], 1), np.int64)
    counts = np.zeros(segments, np.int64)
    if segments:
        largest = int(np.max(np.diff(starts))) if segments else 0
        work = 5 * largest * (64 if boxes.shape[1] == 5 else 1)
        _nms_segments(boxes, starts, F32(thresh), F32(plus_one), limits, keep, counts,
                      team_blocks(segments, work))
    return keep, counts


# ----------------------------------------------------------------- soft NMS

@compiled(parallel=True)
def _soft_nms_segments(boxes, scores, starts, sigma, thresh, min_score, method, plus_one, limits,
                       keep, counts, blocks):
    segments = starts.shape[0] - 1
    rotated = boxes.shape[1] == 5
    for t in prange(blocks):
        pi = np.empty((4, 2))
        pj = np.empty((4, 2))
        work_a = np.empty((16, 2))
        work_b = np.empty((16, 2))
        for s in range(t, segments, blocks):
            lo = starts[s]
            n = starts[s + 1] - lo
            seg = boxes[lo:lo + n]
            sc = scores[lo:lo + n]
            pending = np.arange(n)
            m = n
            kept = 0
            while m > 0:
                if limits[s] >= 0 and kept >= limits[s]:
                    break
                best = 0
                for q in range(1, m):
                    if sc[pending[q]] > sc[pending[best]]:
                        best = q
                a = pending[best]
                keep[lo + kept] = a
                kept += 1
                pending[best] = pending[0]
                pending[0] = a
                r = 0
                for q in range(1, m):
                    c = pending[q]
                    if rotated:
                        ovr = _iou_rotated(seg, a, c, pi, pj, work_a, work_b)
                    else:
                        ovr = _iou_upright(seg, a, c, plus_one)
                    if method == 1:
                        weight = (1.0 - ovr) if ovr > thresh else 1.0
                    elif method == 2:
                        weight = np.exp(-1.0 * ovr * ovr / sigma)
                    else:
                        weight = 0.0 if ovr > thresh else 1.0
                    sc[c] = sc[c] * weight
                    if sc[c] >= min_score:
                        pending[r] = c
                        r += 1
                m = r
            counts[s] = kept


@_soft_nms_segments.numpy_twin
def _soft_nms_segments_numpy(boxes, scores, starts, sigma, thresh, min_score, method, plus_one, limits,
                             keep, counts, blocks):
    for s in range(starts.shape[0] - 1):
        lo, hi = starts[s], starts[s + 1]
        seg, sc = boxes[lo:hi], scores[lo:hi]
        pending = np.arange(hi - lo)
        kept = 0
        while pending.size:
            if limits[s] >= 0 and kept >= limits[s]:
                break
            best = int(np.argmax(sc[pending]))
            a = pending[best]
            keep[lo + kept] = a
            kept += 1
            pending[best] = pending[0]
            pending[0] = a
            rest = pending[1:]
            ovr = _overlaps_numpy(seg, a, rest, plus_one)
            if method == 1:
                weight = np.where(ovr > thresh, 1.0 - ovr, 1.0)
            elif method == 2:
                weight = np.exp(-1.0 * ovr * ovr / sigma)
            else:
                weight = np.where(ovr > thresh, 0.0, 1.0)
            sc[rest] = (sc[rest] * weight).astype(sc.dtype)
            pending = rest[sc[rest] >= min_score]
        counts[s] = kept


def soft_nms_segments(boxes, scores, starts, sigma, thresh, min_score, method, plus_one, limits=None):
    """Soft-NMS of every segment (method 1 linear, 2 gaussian, else hard); returns
    (keep positions, counts, updated scores)."""
    boxes = np.ascontiguousarray(boxes, dtype=F32)
    scores = np.array(scores, dtype=F32, copy=True)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    segments = starts.size - 1
    limits = np.full(segments, -1, np.int64) if limits is None else np.ascontiguousarray(limits, np.int64)
    keep = np.zeros(max(boxes.shape[0], 1), np.int64)
    counts = np.zeros(segments, np.int64)
    if segments:
        largest = int(np.max(np.diff(starts)))
        _soft_nms_segments(boxes, scores, starts, F32(sigma), F32(thresh), F32(min_score), int(method),
                           F32(plus_one), limits, keep, counts, team_blocks(segments, 5 * largest))
    return keep, counts, scores
