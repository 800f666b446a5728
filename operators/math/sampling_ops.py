"""Caffe2's samplers: UniqueUniformFill, WeightedSample, WeightedMultiSampling, and the
dataset reader's SortAndShuffle (UniformIntFill and RangeFill are in fills.py). Random ops
draw from a generator seeded by the op's device_option.random_seed (fresh entropy when
unset), made once per plan."""
import numpy as np

from caffe2py.kernels.cpu.recsys import selection as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ..recsys._checks import call, check_rank
from ..tensor.fills import _FILL_ARGS, check_fill_args, _fill_inference, _rng, _shape

DT = caffe2_pb2.TensorProto


# --------------------------------------------------------------------------- UniqueUniformFill

register_schema(OpSchema(
    "UniqueUniformFill", num_inputs=(0, 2), num_outputs=1, allow_inplace={(0, 0)},
    inputs=("shape", "avoid"), outputs=("output",),
    args=_FILL_ARGS + (Arg("min", "int", None, required=True, doc="smallest value"),
                       Arg("max", "int", None, required=True, doc="largest value"),
                       Arg("dtype", "int", DT.INT32, doc="INT32 or INT64")),
    inference=_fill_inference(lambda ctx: ctx.int("dtype", DT.INT32)),
    doc="Distinct uniform samples from [min, max] (inclusive), none of them in the optional second input."))


@register_kernel("UniqueUniformFill")
def unique_uniform_fill(ctx):
    check_fill_args(ctx)
    dtype = {DT.INT32: np.int32, DT.INT64: np.int64}.get(ctx.int("dtype"))
    if dtype is None:
        raise ctx.error("Unexpected 'dtype' argument value: %d (INT32 or INT64)" % ctx.int("dtype"))
    lo, hi = ctx.int("min"), ctx.int("max")
    if lo >= hi:
        raise ctx.error("Max value should be bigger than min value.")
    rng = _rng(ctx)

    def run(shape_input=None, avoid=None):
        shape = _shape(ctx, () if shape_input is None else (shape_input,))
        count = int(np.prod(shape, dtype=np.int64))
        avoid = np.zeros(0, np.int64) if avoid is None else avoid
        return call(ctx, {"avoid": 1}, K.unique_uniform, count, lo, hi, avoid, rng, dtype).reshape(shape)
    return run


# --------------------------------------------------------------------------- weighted sampling

register_schema(OpSchema(
    "WeightedSample", num_inputs=(1, 2), num_outputs=(1, 2), inputs=("sampling_weights", "sampling_values"),
    outputs=("sampled_indexes", "sampled_values"), inputs_outputs_check=lambda i, o: i == o,
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],), DT.INT32), TensorType((ins[0].dims[0],), DT.FLOAT)],
    doc="Per row of sampling_weights [B, D] (non-negative) an index drawn with probability proportional to "
        "its weight (int32 [B]); with sampling_values [B, D], also the value at that index."))


@register_kernel("WeightedSample")
def weighted_sample(ctx):
    rng = _rng(ctx)

    def run(weights, values=None):
        check_rank(ctx, 0, weights, 2, "sampling_weights")
        if weights.dtype != np.float32:
            raise ctx.input_error(0, "sampling_weights must be float32, got %s" % weights.dtype)
        if values is not None and values.shape != weights.shape:
            raise ctx.input_error(1, "The sampling weights tensor and the sampling values tensor must have the "
                                     "same dimensions.")
        if weights.size == 0:
            empty = np.zeros(0, np.int32)
            return (empty, np.zeros(0, np.float32)) if values is not None else empty
        if (weights < 0).any():
            raise ctx.input_error(0, "All weights must be non-negative numbers.")
        idx, picked = K.weighted_sample(weights, values, rng)
        return (idx, picked) if values is not None else idx
    return run


register_schema(OpSchema(
    "WeightedMultiSampling", num_inputs=(1, 2), num_outputs=1, inputs=("sampling_cdf", "shape_tensor"),
    outputs=("sampled_indexes",), args=(Arg("num_samples", "int", 0, doc="samples to draw (without input 1)"),),
    inference=lambda ctx, ins: [TensorType(tuple(ins[1].dims) if len(ins) > 1 else (ctx.int("num_samples"),),
                                           DT.INT32)],
    doc="Indices (int32) drawn from the cumulative distribution sampling_cdf (sorted, its last value the "
        "total); num_samples of them, or as many as input 1 has values, shaped like it."))


@register_kernel("WeightedMultiSampling")
def weighted_multi_sampling(ctx):
    if ctx.n_inputs == 2 and ctx.has("num_samples"):
        raise ctx.error("New shape is specified by the input blob, do not pass in the argument `num_samples`.")
    count_arg = ctx.int("num_samples")
    if count_arg < 0:
        raise ctx.error("num_samples must be >= 0, got %d" % count_arg)
    rng = _rng(ctx)

    def run(cdf, shape_tensor=None):
        if cdf.ndim != 1:
            raise ctx.input_error(0, "Input should be 1-D vector")
        shape = (count_arg,) if shape_tensor is None else shape_tensor.shape
        if cdf.size == 0:
            return np.zeros(0, np.int32)
        if cdf[0] < 0 or (np.diff(cdf) < 0).any():
            raise ctx.input_error(0, "sampling_cdf must be non-negative and sorted")
        count = int(np.prod(shape, dtype=np.int64))
        return K.weighted_multi_sampling(cdf.astype(np.float32), count, rng).reshape(shape)
    return run


# --------------------------------------------------------------------------- SortAndShuffle

register_schema(OpSchema(
    "SortAndShuffle", num_inputs=(1, None), num_outputs=1, inputs=("cursor", "dataset_field_0"),
    outputs=("indices",),
    args=(Arg("sort_by_field_idx", "int", 1, doc="the top-level field to sort records by (-1: no sort)"),
          Arg("batch_size", "int", 1, doc="records per batch"),
          Arg("shuffle_size", "int", 1, doc="batches per shuffled chunk")),
    inference=lambda ctx, ins: [TensorType(None, DT.INT64)],
    doc="Record order for ReadRandomBatch: records sorted by field sort_by_field_idx (int32, a top-level "
        "field), shuffled within chunks of batch_size * shuffle_size, then whole batches shuffled "
        "(int64). Input 0 is a TreeCursor, then one blob per dataset field. Without device_option."
        "random_seed the order is Caffe2's own (libstdc++'s std::shuffle with a default-seeded "
        "minstd_rand0 per shuffle), the same on every run; with one, a shuffle seeded by it."))


@register_kernel("SortAndShuffle")
def sort_and_shuffle(ctx):
    from caffe2py.kernels.cpu.io.dataset import TreeCursor
    field = ctx.int("sort_by_field_idx")
    batch, shuffle = ctx.int("batch_size"), ctx.int("shuffle_size")
    if field < -1:
        raise ctx.error("sort_by_field_idx must be >= -1, got %d" % field)
    if batch <= 0 or shuffle <= 0:
        raise ctx.error("batch_size and shuffle_size must be > 0, got %d and %d" % (batch, shuffle))
    has_seed = ctx.op_def.HasField("device_option") and ctx.op_def.device_option.HasField("random_seed")
    seed = ctx.op_def.device_option.random_seed if has_seed else 0

    def run(cursor, *fields):
        if not isinstance(cursor, TreeCursor):
            raise ctx.input_error(0, "must be a TreeCursor (made by CreateTreeCursor), got %s"
                                  % type(cursor).__name__)
        names = cursor.it.fields
        if len(fields) != len(names):
            raise ctx.error("the cursor has %d fields (%s); the op got %d field blobs"
                            % (len(names), ", ".join(names), len(fields)))
        if field >= len(names):
            raise ctx.error("sort_by_field_idx %d is past the cursor's %d fields" % (field, len(names)))
        source = fields[field] if field != -1 else fields[0]
        if np.ndim(source) < 1:
            raise ctx.input_error(1 + max(field, 0), "a dataset field must be at least 1-D")
        values = None
        if field != -1:
            if cursor.it.length_field_of[field] != -1:
                raise ctx.input_error(1 + field, "must sort by a field at the root level, '%s' is not"
                                      % names[field])
            if source.ndim != 1 or source.dtype.kind not in "iu":
                raise ctx.input_error(1 + field, "the sort field must be a 1-D int tensor, got %s %s"
                                      % (source.dtype, list(source.shape)))
            values = source
        rng = np.random.default_rng(seed) if has_seed else None       # unseeded: Caffe2's exact order
        return K.sort_and_shuffle(source.shape[0], values, batch, shuffle, rng)
    return run
