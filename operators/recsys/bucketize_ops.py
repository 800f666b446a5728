"""Caffe2's BatchBucketize (chosen float feature columns to bucket ids by per-column
boundaries) and BisectPercentile (feature columns to percentiles by per-column
piecewise-linear curves given as arguments). Kernels: kernels/cpu/recsys/bucketize.py."""
import numpy as np

from caffe2py.kernels.cpu.recsys import bucketize as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from ._checks import check_int_vector, check_rank

DT = caffe2_pb2.TensorProto
_COST = lambda ctx, ins: Cost()  # noqa: E731


def _check_float_matrix(ctx, index, x):
    check_rank(ctx, index, x, 2, "input")
    if x.dtype.kind != "f":
        raise ctx.input_error(index, "must be a float tensor, got %s" % x.dtype)


register_schema(OpSchema(
    "BatchBucketize", num_inputs=4, num_outputs=1, inputs=("float_features", "indices", "boundaries", "lengths"),
    outputs=("bucktized_feat",), inference=lambda ctx, ins: [TensorType(None, DT.INT32)], cost=_COST,
    doc="int32 (N, len(indices)): column i is float_features[:, indices[i]] bucketed by its "
        "lengths[i] sorted boundaries (the next slice of boundaries): the count of boundaries "
        "strictly below the value."))


@register_kernel("BatchBucketize")
def batch_bucketize(ctx):
    def run(feature, indices, boundaries, lengths):
        _check_float_matrix(ctx, 0, feature)
        check_int_vector(ctx, 1, indices, "indices")
        check_int_vector(ctx, 3, lengths, "lengths")
        if boundaries.ndim != 1:
            raise ctx.input_error(2, "must be 1-D, got shape %s" % list(boundaries.shape))
        if len(indices) != len(lengths):
            raise ctx.input_error(3, "has %d values; indices has %d" % (len(lengths), len(indices)))
        if len(indices) and (indices.min() < 0 or indices.max() >= feature.shape[1]):
            raise ctx.input_error(1, "values must be in [0, %d), got %s" % (feature.shape[1], indices.tolist()))
        if (lengths < 0).any() or lengths.sum() != boundaries.size:
            raise ctx.input_error(3, "lengths must be >= 0 and sum to the %d boundaries, got %s"
                                  % (boundaries.size, lengths.tolist()))
        return K.batch_bucketize(feature, indices, boundaries, lengths)
    return run


register_schema(OpSchema(
    "BisectPercentile", num_inputs=1, num_outputs=1, inputs=("raw_values",), outputs=("percentile",),
    args=(Arg("percentile_raw", "floats", (), doc="each column's sorted raw values, concatenated"),
          Arg("percentile_mapping", "floats", (), doc="the percentile at each raw value"),
          Arg("percentile_lower", "floats", ()), Arg("percentile_upper", "floats", ()),
          Arg("lengths", "ints", (), doc="raw values per column")),
    inference=lambda ctx, ins: [ins[0] if ins[0].known else UNKNOWN], cost=_COST,
    doc="Each value of column j of the (N, D) input mapped by column j's curve: 0 below its first "
        "raw value, 1 above its last, percentile_mapping on a raw value, and between raw values k "
        "and k + 1 linear from percentile_upper[k] to percentile_lower[k + 1]."))


@register_kernel("BisectPercentile")
def bisect_percentile(ctx):
    curves = [np.asarray(ctx.floats(name), np.float64) for name in
              ("percentile_raw", "percentile_mapping", "percentile_lower", "percentile_upper")]
    lengths = [int(n) for n in ctx.ints("lengths")]
    if any(n <= 0 for n in lengths):
        raise ctx.error("lengths must be > 0, got %s" % lengths)
    for name, c in zip(("percentile_raw", "percentile_mapping", "percentile_lower", "percentile_upper"), curves):
        if c.size != sum(lengths):
            raise ctx.error("%s has %d values; lengths sum to %d" % (name, c.size, sum(lengths)))
    offsets = np.cumsum([0] + lengths)
    raw = curves[0]
    for a, b in zip(offsets[:-1], offsets[1:]):
        if (np.diff(raw[a:b]) <= 0).any():
            raise ctx.error("percentile_raw must be strictly increasing within each column")

    def run(x):
        _check_float_matrix(ctx, 0, x)
        if x.shape[1] != len(lengths):
            raise ctx.input_error(0, "has %d columns; lengths gives %d" % (x.shape[1], len(lengths)))
        return K.bisect_percentile(x, *curves, lengths)
    return run
