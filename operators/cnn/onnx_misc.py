"""Less common ONNX ops: window functions, MaxUnpool, CenterCropPad, Col2Im,
BitCast, NonMaxSuppression, string ops (StringConcat, StringSplit,
RegexFullMatch)."""
import re

import numpy as np

from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.kernels.cpu.cnn import onnx_misc as mk

from caffe2py.registry import Arg
from caffe2py.schema_rules import Range, Rank, Scalar

from ..onnx_base import axis_of, onnx_op

_MAX_WINDOW = 1 << 26       # values a generated window / matrix may hold


def _output_dtype(ctx, default=1):
    dtype = om.onnx_dtype(ctx.int("output_datatype", default))
    if dtype is None:
        raise ctx.error("output_datatype %d is not a type caffe2py can produce" % ctx.int("output_datatype", default))
    return dtype


def _window_factory(kind):
    def factory(ctx):
        periodic = bool(ctx.int("periodic", 1))
        dtype = _output_dtype(ctx)

        def run(size):
            n = int(np.asarray(size).reshape(-1)[0])
            if not 0 <= n <= _MAX_WINDOW:
                raise ctx.input_error(0, "size must lie in [0, %d], got %d" % (_MAX_WINDOW, n))
            return mk.window(kind, n, periodic).astype(dtype)
        return run
    return factory


onnx_op("HannWindow", (17, None), checks=(Scalar(0),))(_window_factory("hann"))
onnx_op("HammingWindow", (17, None), checks=(Scalar(0),))(_window_factory("hamming"))
onnx_op("BlackmanWindow", (17, None), checks=(Scalar(0),))(_window_factory("blackman"))


@onnx_op("MaxUnpool", (9, None), args=(Arg("kernel_shape", "ints", required=True, check=Range(1)),
                                       Arg("strides", "ints", check=Range(1)), Arg("pads", "ints", check=Range(0))),
         checks=(Rank(0, 3), Rank(2, 1, 1)))
def max_unpool(ctx):
    kernel = ctx.ints("kernel_shape")

    def run(x, indices, output_shape=None):
        k = len(kernel)
        if x.ndim != k + 2 or len(ctx.ints("strides", None) or [1] * k) != k or \
                len(ctx.ints("pads", None) or [0] * (2 * k)) != 2 * k:
            raise ctx.error("kernel_shape %s, strides and pads do not fit an input of shape %s"
                            % (kernel, list(x.shape)))
        if indices.shape != x.shape:
            raise ctx.input_error(1, "indices must have X's shape %s, got %s" % (list(x.shape), list(indices.shape)))
        strides = ctx.ints("strides", None) or [1] * k
        pads = ctx.ints("pads", None) or [0] * (2 * k)
        default = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + k] + kernel[i]
                                       for i in range(k)]
        shape = default if output_shape is None else [int(v) for v in output_shape.reshape(-1)]
        if len(shape) != x.ndim or min(shape) < 0 or min(default) <= 0 or any(
                a < b for a, b in zip(shape, default)):
            raise ctx.error("output shape %s must have X's rank, and cover the unpooled shape %s"
                            % (shape, default))
        flat = indices.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= int(np.prod(default))):
            raise ctx.input_error(1, "index out of range for the unpooled shape %s" % default)
        if shape != default:   # indices count positions in the default shape
            flat = np.ravel_multi_index(np.unravel_index(flat, default), shape)
        out = np.zeros(int(np.prod(shape)), x.dtype)
        out[flat] = x.reshape(-1)
        return out.reshape(shape)
    return run


@onnx_op("CenterCropPad", (18, None))
def center_crop_pad(ctx):
    attr_axes = ctx.ints("axes", None)

    def run(x, shape):
        target = [int(v) for v in shape.reshape(-1)]
        axes = list(range(x.ndim)) if not attr_axes else [axis_of(ctx, a, x.ndim) for a in attr_axes]
        return mk.center_crop_pad(x, dict(zip(axes, target)))
    return run


@onnx_op("Col2Im", (18, None))
def col2im(ctx):
    def run(x, image_shape, block_shape):
        image = [int(v) for v in image_shape.reshape(-1)]
        block = [int(v) for v in block_shape.reshape(-1)]
        k = len(image)
        dilations = ctx.ints("dilations", None) or [1] * k
        pads = ctx.ints("pads", None) or [0] * (2 * k)
        strides = ctx.ints("strides", None) or [1] * k
        if len(block) != k:
            raise ctx.input_error(2, "block_shape %s must have one size per image dim %s" % (block, image))
        if min(image, default=1) < 0 or min(block, default=1) <= 0:
            raise ctx.input_error(1, "image_shape %s must be >= 0 and block_shape %s > 0" % (image, block))
        if len(dilations) != k or len(strides) != k or len(pads) != 2 * k:
            raise ctx.error("dilations %s, strides %s and pads %s do not suit a %d-D image"
                            % (dilations, strides, pads, k))
        if min(dilations + strides, default=1) <= 0 or min(pads, default=0) < 0:
            raise ctx.error("dilations %s and strides %s must be positive, pads %s >= 0" % (dilations, strides, pads))
        return mk.col2im(x, image, block, dilations, pads, strides)
    return run


@onnx_op("BitCast", (26, None))
def bitcast(ctx):
    dtype = om.onnx_dtype(ctx.int("to"))
    if dtype is None or dtype.kind not in "biuf":
        raise ctx.error("BitCast to ONNX type %s is not supported" % ctx.int("to"))

    def run(x):
        if x.dtype.itemsize != dtype.itemsize:
            raise ctx.input_error(0, "cannot bit-cast %s to %s: sizes differ" % (x.dtype, dtype))
        return x.copy().view(dtype)   # a copy is C-contiguous and keeps 0-d shapes
    return run


@onnx_op("NonMaxSuppression", (10, None), checks=(Rank(0, 3, 3), Rank(1, 3, 3), Scalar((2, 3, 4))))
def non_max_suppression(ctx):
    center = bool(ctx.int("center_point_box", 0))

    def run(boxes, scores, max_out=None, iou=None, score_threshold=None):
        if boxes.shape[2] != 4 or boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]:
            raise ctx.input_error(1, "boxes [batch, boxes, 4] of shape %s and scores [batch, classes, boxes] of "
                                     "shape %s do not match" % (list(boxes.shape), list(scores.shape)))
        limit = 0 if max_out is None or max_out.size == 0 else int(max_out.reshape(-1)[0])
        iou_t = 0.0 if iou is None or iou.size == 0 else float(iou.reshape(-1)[0])
        score_t = None if score_threshold is None or score_threshold.size == 0 else float(score_threshold.reshape(-1)[0])
        return mk.non_max_suppression(boxes, scores, limit, iou_t, score_t, center)
    return run


@onnx_op("StringConcat", (20, None))
def string_concat(ctx):
    def run(a, b):
        out = np.frompyfunc(lambda s, t: _text(s) + _text(t), 2, 1)(a, b)
        return np.asarray(out, dtype=object)
    return run


def _text(s):
    return s.decode() if isinstance(s, bytes) else str(s)


@onnx_op("StringSplit", (20, None))
def string_split(ctx):
    sep = ctx.string("delimiter", None) or None
    maxsplit = ctx.int("maxsplit", None)

    def run(x):
        parts = [(_text(s).split(sep, -1 if maxsplit is None else maxsplit)) if sep else
                 _text(s).split(None, -1 if maxsplit is None else maxsplit) for s in x.reshape(-1)]
        width = max([len(p) for p in parts] + [0])
        out = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            out[i, :len(p)] = p
        counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
        return out.reshape(x.shape + (width,)), counts
    return run


@onnx_op("RegexFullMatch", (20, None), args=(Arg("pattern", "string", required=True),))
def regex_full_match(ctx):
    try:
        pattern = re.compile(ctx.string("pattern"))
    except re.error as exc:
        raise ctx.error("invalid pattern: %s" % exc) from None
    return lambda x: np.vectorize(lambda s: pattern.fullmatch(_text(s)) is not None, otypes=[bool])(x)


@onnx_op("GridSample", (16, 19), (20, None))
def grid_sample(ctx):
    from caffe2py.kernels.cpu.cnn import grid as onnx_grid
    mode = ctx.string("mode", "bilinear" if ctx.op_version < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = ctx.string("padding_mode", "zeros")
    align = bool(ctx.int("align_corners", 0))
    if mode not in ("linear", "nearest", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise ctx.error("unsupported mode '%s' / padding_mode '%s'" % (mode, padding))

    def run(x, grid):
        if x.dtype.kind in "OSU":     # opset 20 allows any type; interpolating strings means nothing
            raise ctx.input_error(0, "holds strings; GridSample samples numeric tensors (as onnxruntime)")
        if grid.shape[-1] != x.ndim - 2 or grid.shape[0] != x.shape[0]:
            raise ctx.input_error(1, "grid of shape %s does not fit X of shape %s"
                                  % (list(grid.shape), list(x.shape)))
        return onnx_grid.grid_sample(x, grid, mode, padding, align)
    return run


@onnx_op("RoiAlign", (10, 15), (16, None))
def roi_align(ctx):
    from caffe2py.kernels.cpu.detection import onnx_roi
    mode = ctx.string("mode", "avg")
    out_h, out_w = ctx.int("output_height", 1), ctx.int("output_width", 1)
    ratio, scale = ctx.int("sampling_ratio", 0), ctx.float("spatial_scale", 1.0)
    half_pixel = ctx.op_version >= 16 and ctx.string("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    if mode not in ("avg", "max"):
        raise ctx.error("unknown mode '%s'" % mode)

    def run(x, rois, batch_indices):
        if batch_indices.size and (batch_indices.min() < 0 or batch_indices.max() >= x.shape[0]):
            raise ctx.input_error(2, "batch index out of range [0, %d)" % x.shape[0])
        return onnx_roi.roi_align(x, rois, batch_indices, out_h, out_w, ratio, scale, mode, half_pixel)
    return run


@onnx_op("TensorScatter", (24, None))
def tensor_scatter(ctx):
    axis = ctx.int("axis", -2)
    circular = ctx.string("mode", "linear") == "circular"

    def run(cache, update, write_indices=None):
        a = axis_of(ctx, axis, cache.ndim)
        if a == 0:
            raise ctx.error("axis must be a sequence axis, not the batch axis 0")
        out = cache.copy()
        seq, max_seq = update.shape[a], cache.shape[a]
        starts = np.zeros(cache.shape[0], np.int64) if write_indices is None else write_indices.astype(np.int64)
        for b in range(cache.shape[0]):
            pos = starts[b] + np.arange(seq)
            if circular:
                pos %= max_seq
            elif pos.size and pos[-1] >= max_seq:
                raise ctx.input_error(2, "writing %d steps at %d overflows the cache of %d" % (seq, starts[b], max_seq))
            dst = [slice(None)] * (cache.ndim - 1)
            dst[a - 1] = pos            # one batch entry at a time: axis a-1 of out[b]
            out[b][tuple(dst)] = update[b]
        return out
    return run


@onnx_op("TfIdfVectorizer", (9, None))
def tfidf_vectorizer(ctx):
    min_n, max_n = ctx.int("min_gram_length"), ctx.int("max_gram_length")
    max_skip = ctx.int("max_skip_count", 0)
    mode = ctx.string("mode", "TF")
    indexes = ctx.ints("ngram_indexes")
    pool = ctx.ints("pool_int64s", None) if ctx.has("pool_int64s") else \
        [s for s in (ctx.strings("pool_strings", []) or [])]
    counts = ctx.ints("ngram_counts")
    if min_n is None or max_n is None or not 1 <= min_n <= max_n or max_skip < 0 or not indexes or \
            min(indexes) < 0 or counts is None:
        raise ctx.error("min_gram_length %s / max_gram_length %s / max_skip_count %s / ngram_indexes %s / "
                        "ngram_counts %s do not describe n-grams" % (min_n, max_n, max_skip, indexes, counts))
    try:
        table = mk.ngram_pool(pool, counts, indexes)
    except (IndexError, ValueError):
        raise ctx.error("ngram_counts %s and ngram_indexes %s do not describe the pool of %d entries"
                        % (counts, indexes, len(pool))) from None
    weights = np.asarray(ctx.floats("weights", None) or [1.0] * (max(indexes) + 1), np.float64)
    width = max(indexes) + 1
    if weights.size < width:
        raise ctx.error("weights has %d values for %d output columns" % (weights.size, width))
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.error("unknown mode '%s'" % mode)

    def run(x):
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        items = [[_text(v) if rows.dtype.kind in "OSU" else int(v) for v in r] for r in rows]
        counts = np.stack([mk.tfidf_counts(r, table, min_n, max_n, max_skip, width) for r in items])
        if mode == "IDF":
            counts = (counts > 0) * weights
        elif mode == "TFIDF":
            counts = counts * weights
        out = counts.astype(np.float32)
        return out[0] if x.ndim == 1 else out
    return run


@onnx_op("MelWeightMatrix", (17, None), checks=(Scalar("*"),))
def mel_weight_matrix(ctx):
    dtype = _output_dtype(ctx)

    def run(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        bins, length = int(num_mel_bins.reshape(-1)[0]), int(dft_length.reshape(-1)[0])
        rate, low, high = (float(v.reshape(-1)[0]) for v in (sample_rate, lower_edge_hertz, upper_edge_hertz))
        if not (0 < bins and 0 < length and bins * (length // 2 + 1) <= _MAX_WINDOW and rate > 0
                and 0 <= low < high <= rate / 2) or not np.isfinite([rate, low, high]).all():
            raise ctx.error("num_mel_bins %d, dft_length %d, sample_rate %r and edges %r..%r do not describe a "
                            "mel filter bank (positive sizes, 0 <= lower < upper <= sample_rate / 2)"
                            % (bins, length, rate, low, high))
        num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz = bins, length, rate, low, high
        return mk.mel_weight_matrix(int(num_mel_bins), int(dft_length), float(sample_rate),
                                    float(lower_edge_hertz), float(upper_edge_hertz)).astype(dtype)
    return run
