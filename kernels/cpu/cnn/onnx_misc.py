"""Compute for the less common ONNX ops: windows, crop/pad, col2im, NMS."""
import numpy as np


def window(kind, size, periodic):
    n = np.arange(size, dtype=np.float64)
    denom = size if periodic else size - 1
    denom = max(denom, 1)
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(2 * np.pi * n / denom)
    if kind == "hamming":
        return 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / denom)
    if kind == "blackman":
        return 0.42 - 0.5 * np.cos(2 * np.pi * n / denom) + 0.08 * np.cos(4 * np.pi * n / denom)
    raise ValueError("unknown window '%s'" % kind)


def center_crop_pad(x, targets):
    """targets {axis: size}: crop centred (extra element taken from the end side's
    start) or zero-pad centred."""
    out = x
    for axis, size in targets.items():
        dim = out.shape[axis]
        if size < dim:
            start = (dim - size) // 2
            index = [slice(None)] * out.ndim
            index[axis] = slice(start, start + size)
            out = out[tuple(index)]
        elif size > dim:
            before = (size - dim) // 2
            width = [(0, 0)] * out.ndim
            width[axis] = (before, size - dim - before)
            out = np.pad(out, width)
    return np.ascontiguousarray(out)


def col2im(x, image, block, dilations, pads, strides):
    """x (N, C*prod(block), L) -> (N, C, *image), summing overlapping blocks."""
    k = len(image)
    n = x.shape[0]
    bsize = int(np.prod(block))
    c = x.shape[1] // bsize
    padded = [image[i] + pads[i] + pads[i + k] for i in range(k)]
    out_blocks = [(padded[i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(k)]
    out = np.zeros((n, c) + tuple(padded), x.dtype)
    cols = x.reshape((n, c) + tuple(block) + tuple(out_blocks))
    for tap in np.ndindex(*block):
        index = (slice(None), slice(None)) + tuple(
            slice(tap[i] * dilations[i], tap[i] * dilations[i] + (out_blocks[i] - 1) * strides[i] + 1, strides[i])
            for i in range(k))
        out[index] += cols[(slice(None), slice(None)) + tap]
    crop = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(k))
    return np.ascontiguousarray(out[crop])


def _corners(boxes, center):
    if center:
        cx, cy, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        return np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)
    y1, x1, y2, x2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def non_max_suppression(boxes, scores, max_per_class, iou_threshold, score_threshold, center):
    """[num_selected, 3] rows (batch, class, box index) in ONNX's order."""
    selected = []
    corners = _corners(boxes.astype(np.float64), center)
    for b in range(scores.shape[0]):
        area = (corners[b, :, 2] - corners[b, :, 0]) * (corners[b, :, 3] - corners[b, :, 1])
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in np.argsort(-s, kind="stable") if score_threshold is None or s[i] > score_threshold]
            keep = []
            for i in order:
                if max_per_class and len(keep) >= max_per_class:
                    break
                ok = True
                for j in keep:
                    yy1 = max(corners[b, i, 0], corners[b, j, 0])
                    xx1 = max(corners[b, i, 1], corners[b, j, 1])
                    yy2 = min(corners[b, i, 2], corners[b, j, 2])
                    xx2 = min(corners[b, i, 3], corners[b, j, 3])
                    inter = max(0.0, yy2 - yy1) * max(0.0, xx2 - xx1)
                    union = area[i] + area[j] - inter
                    if union > 0 and inter / union > iou_threshold:
                        ok = False
                        break
                if ok:
                    keep.append(i)
            selected += [(b, c, i) for i in keep]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


def ngram_pool(pool, ngram_counts, ngram_indexes):
    """{(n, tuple of items): output index} from TfIdfVectorizer's flat pool."""
    table, g = {}, 0
    bounds = list(ngram_counts) + [len(pool)]
    for k in range(len(ngram_counts)):
        n = k + 1
        items = pool[bounds[k]:bounds[k + 1]]
        for start in range(0, len(items) - n + 1, n):
            table[(n, tuple(items[start:start + n]))] = ngram_indexes[g]
            g += 1
    return table


def tfidf_counts(row, table, min_n, max_n, max_skip, width):
    counts = np.zeros(width, np.float64)
    row = list(row)
    for n in range(min_n, max_n + 1):
        for skip in range(0, (max_skip if n > 1 else 0) + 1):
            step = skip + 1
            for i in range(len(row) - (n - 1) * step):
                index = table.get((n, tuple(row[i:i + (n - 1) * step + 1:step])))
                if index is not None:
                    counts[index] += 1
    return counts


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
    """(dft_length // 2 + 1, num_mel_bins) triangular filters evenly spaced in mel."""
    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def to_hz(mel):
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    bins = dft_length // 2 + 1
    low, high = to_mel(lower_hz), to_mel(upper_hz)
    # onnx spaces the num_mel_bins + 2 edge points by (high - low) / (num_mel_bins + 2)
    step = (high - low) / (num_mel_bins + 2)
    edges = np.floor((dft_length + 1) * to_hz(low + step * np.arange(num_mel_bins + 2)) / sample_rate).astype(np.int64)
    out = np.zeros((bins, num_mel_bins), np.float64)
    for i in range(num_mel_bins):
        lo, center, hi = edges[i], edges[i + 1], edges[i + 2]
        if center == lo:
            out[center, i] = 1.0
        else:
            for j in range(lo, center + 1):
                out[j, i] = (j - lo) / (center - lo)
        for j in range(center, hi):
            if hi > center:
                out[j, i] = (hi - j) / (hi - center)
    return out
