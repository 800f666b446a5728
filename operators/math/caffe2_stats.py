"""Caffe2's statistics ops in the caffe2 domain: AccumulateHistogram, ChannelStats and
ChannelBackpropStats. Kernels: kernels/cpu/math/stats.py."""
import math

import numpy as np

from caffe2py.kernels.cpu.math import stats as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import output_size_problem

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import should_not_do_gradient

DT = caffe2_pb2.TensorProto


def _read_cost(ctx, ins):
    n = float(sum(math.prod(t.dims) for t in ins if t.known))
    return Cost(flops=2 * n, bytes_read=4 * n)


# ----------------------------------------------------------------- AccumulateHistogram

def _hist_infer(ctx, ins):
    t = TensorType((ctx.int("num_buckets") + 2,), DT.INT64)
    return [t, t]


register_schema(OpSchema(
    "AccumulateHistogram", num_inputs=1, num_outputs=2, inputs=("X",), outputs=("CurHist", "AccHist"),
    args=(Arg("lower_bound", "float", 0.0), Arg("upper_bound", "float", 1.0),
          Arg("num_buckets", "int", 1, doc="equal-width buckets in [lower_bound, upper_bound)")),
    inference=_hist_infer, cost=_read_cost,
    doc="Histogram (int64, num_buckets + 2 counts) of X's values: index 0 counts values below "
        "lower_bound, 1..num_buckets the buckets, the last values >= upper_bound; NaN is not counted. "
        "CurHist is this run's histogram, AccHist the sum over every run of this op in this net (the "
        "op keeps it, as Caffe2's did)."))


@register_kernel("AccumulateHistogram")
def accumulate_histogram(ctx):
    lower, upper, buckets = ctx.float("lower_bound"), ctx.float("upper_bound"), ctx.int("num_buckets")
    if buckets <= 0:
        raise ctx.error("num_buckets must be > 0, got %d" % buckets)
    if not upper > lower:
        raise ctx.error("upper_bound (%g) must be greater than lower_bound (%g)" % (upper, lower))
    too_big = output_size_problem([buckets + 2], 8)
    if too_big:
        raise ctx.error("num_buckets %d: %s" % (buckets, too_big))
    accumulated = np.zeros(buckets + 2, np.int64)     # this op instance's running total

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        current = K.histogram(x, lower, upper, buckets)
        accumulated[:] += current
        return current, accumulated.copy()
    return run


# ----------------------------------------------------------------- ChannelStats / ChannelBackpropStats

def _channels(ctx, dims, nchw):
    if len(dims) < 2:
        raise ctx.input_error(0, "needs (N, C, ...) or (N, ..., C) input, got shape %s" % list(dims))
    return dims[1] if nchw else dims[-1]


def _order(ctx):
    order = ctx.string("order")
    if order not in ("NCHW", "NHWC"):
        raise ctx.error("order must be NCHW or NHWC, got '%s'" % order)
    return order == "NCHW"


def _as_ncs(x, nchw):
    """x as (N, C, S) (NCHW) or, for NHWC, as (N * S, C, 1)."""
    if nchw:
        return x.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1], 1)


register_schema(OpSchema(
    "ChannelStats", num_inputs=1, num_outputs=2, inputs=("X",), outputs=("sum", "sumsq"),
    args=(Arg("order", "string", "NCHW"),),
    inference=lambda ctx, ins: [TensorType((_channels(ctx, ins[0].dims, _order(ctx)),), ins[0].dtype)] * 2,
    cost=_read_cost,
    doc="Per channel: the sum of X's elements and the sum of their squares (shape [C]); they combine "
        "across batches into a mean and variance for SpatialBN."))
register_schema(OpSchema(
    "ChannelBackpropStats", num_inputs=4, num_outputs=2, inputs=("X", "mean", "inv_std", "output_grad"),
    outputs=("scale_grad", "bias_grad"),
    inference=lambda ctx, ins: [TensorType((_channels(ctx, ins[0].dims, True),), ins[0].dtype)] * 2,
    cost=_read_cost,
    doc="SpatialBN's per-channel scale and bias gradients for NCHW X (3-D to 5-D), the saved mean and "
        "inverse std (one per channel) and the output gradient: sum(dY * (X - mean) * inv_std) and sum(dY)."))


@register_kernel("ChannelStats")
def channel_stats(ctx):
    nchw = _order(ctx)

    def run(x):
        check_dtype(ctx, 0, x, FLOATS)
        _channels(ctx, x.shape, nchw)
        return K.channel_sums(_as_ncs(x, nchw))
    return run


@register_kernel("ChannelBackpropStats")
def channel_backprop_stats(ctx):
    def run(x, mean, inv_std, dy):
        check_dtype(ctx, 0, x, FLOATS)
        if not 3 <= x.ndim <= 5:
            raise ctx.input_error(0, "must be 3-D to 5-D NCHW, got shape %s" % list(x.shape))
        c = x.shape[1]
        for k, v in ((1, mean), (2, inv_std)):
            if v.size != c:
                raise ctx.input_error(k, "has %d values; X has %d channels" % (v.size, c))
        if dy.shape != x.shape:
            raise ctx.input_error(3, "shape %s differs from X's %s" % (list(dy.shape), list(x.shape)))
        return K.channel_backprop_stats(_as_ncs(x, True), mean, inv_std, _as_ncs(dy, True))
    return run


should_not_do_gradient("ChannelStats", "ChannelBackpropStats")


# ----------------------------------------------------------------- Histogram

register_schema(OpSchema(
    "Histogram", num_inputs=(1, None), num_outputs=1, inputs=("X",), outputs=("histogram",),
    args=(Arg("bin_edges", "floats", None, required=True, doc="strictly increasing, at least 2"),),
    inference=lambda ctx, ins: [TensorType((max(len(ctx.floats("bin_edges") or ()) - 1, 0),), DT.INT64)],
    cost=_read_cost,
    doc="int64 counts of every input's values per bin [bin_edges[i], bin_edges[i + 1]); values "
        "outside [bin_edges[0], bin_edges[-1]) and NaN are not counted."))


@register_kernel("Histogram")
def histogram(ctx):
    edges = np.asarray(ctx.floats("bin_edges") or (), np.float64)
    if edges.size < 2:
        raise ctx.error("Number of bin edges must be greater than or equal to 2, got %d" % edges.size)
    if (np.diff(edges) <= 0).any():
        raise ctx.error("bin_edges must be a strictly increasing sequence of values")

    def run(*tensors):
        counts = np.zeros(edges.size - 1, np.int64)
        for index, x in enumerate(tensors):
            if x.dtype.kind not in "fiu":
                raise ctx.input_error(index, "must be a numeric tensor, got %s" % x.dtype)
            counts += K.bin_counts(x, edges)
        return counts
    return run


# ----------------------------------------------------------------- SelfBinningHistogram

register_schema(OpSchema(
    "SelfBinningHistogram", num_inputs=(1, None), num_outputs=2, inputs=("X",),
    outputs=("histogram_values", "histogram_counts"),
    args=(Arg("num_bins", "int", 1, doc=">= 1; the outputs have num_bins + 1 entries"),
          Arg("bin_spacing", "string", "linear", doc="linear or logarithmic"),
          Arg("logspacing_start", "float", 1e-24, doc="the first bin start with logarithmic spacing"),
          Arg("abs", "bool", False, doc="bin the absolute values")),
    inference=lambda ctx, ins: [TensorType((ctx.int("num_bins") + 1,), ins[0].dtype),
                                TensorType((ctx.int("num_bins") + 1,), DT.INT64)],
    cost=_read_cost,
    doc="A histogram whose bins come from the data: histogram_values are num_bins + 1 bin starts "
        "between the inputs' minimum and just above their maximum (linear, or logarithmic from "
        "max(minimum, logspacing_start)), histogram_counts the values of every input in each bin "
        "(with logarithmic spacing values below the first start count in bin 0)."))


@register_kernel("SelfBinningHistogram")
def self_binning_histogram(ctx):
    num_bins = ctx.int("num_bins")
    if num_bins < 1:
        raise ctx.error("Number of bins must be greater than or equal to 1.")
    spacing = ctx.string("bin_spacing")
    if spacing not in ("linear", "logarithmic"):
        raise ctx.error("bin_spacing must be linear or logarithmic, got '%s'" % spacing)
    too_big = output_size_problem([num_bins + 1], 8)
    if too_big:
        raise ctx.error("num_bins %d: %s" % (num_bins, too_big))
    log_start, use_abs = ctx.float("logspacing_start"), ctx.bool("abs")
    if spacing == "logarithmic" and not log_start > 0:
        raise ctx.error("logspacing_start must be > 0, got %g" % log_start)

    def run(*tensors):
        for index, x in enumerate(tensors):
            check_dtype(ctx, index, x, (np.float32, np.float64))
        values = np.concatenate([x.reshape(-1) for x in tensors])
        values = np.abs(values) if use_abs else values
        if np.isnan(values).any():
            raise ctx.error("inputs hold NaN")
        dtype = tensors[0].dtype
        lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        edges = K.self_binning_edges(lo, hi, num_bins, spacing == "logarithmic", log_start, dtype)
        return edges, K.counts_below_edges(values, edges)
    return run
