"""Caffe2's sparse-feature gathers and conversions: GatherRanges, GatherRangesToDense,
SparseToDense, SparseToDenseMask, BatchSparseToDense, BatchDenseToSparse,
GatherFused8BitRowwise, and the separate-scale 8-bit row-wise family
(FloatToRowwiseQuantized8Bits, Rowwise8BitQuantizedToFloat,
SparseLengths{Sum,WeightedSum,Mean,WeightedMean}8BitsRowwise)."""
import numpy as np

from caffe2py.kernels.cpu.recsys import ranges as R
from caffe2py.kernels.cpu.recsys import rowwise8bit as Q
from caffe2py.kernels.cpu.recsys import sparse_dense as S
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from ._checks import call, check_int, check_int_vector, check_rank

DT = caffe2_pb2.TensorProto


# --------------------------------------------------------------------------- GatherRanges

def _check_ranges(ctx, index, ranges):
    check_int(ctx, index, ranges, "RANGES")
    if ranges.ndim != 3:
        raise ctx.input_error(index, "Ranges must be 3-D")
    if ranges.shape[2] != 2:
        raise ctx.input_error(index, "Ranges last dimension should be of size 2")


def _gather_ranges_cost(ctx, ins):
    data = ins[0]
    n = float(np.prod(data.dims, dtype=np.int64)) if data.known else 0.0
    return Cost(bytes_read=4 * n, bytes_written=4 * n)


register_schema(OpSchema(
    "GatherRanges", num_inputs=2, num_outputs=2, inputs=("DATA", "RANGES"), outputs=("OUTPUT", "LENGTHS"),
    # OUTPUT: Caffe2 infers DATA's size, the most the gather can give (an upper bound,
    # not the run's size; bound shape inference wants exactly that)
    inference=lambda ctx, ins: [TensorType((int(np.prod(ins[0].dims, dtype=np.int64)),), ins[0].dtype),
                                TensorType((ins[1].dims[0],), DT.INT32)],
    cost=_gather_ranges_cost,
    doc="RANGES [N, M, 2] of (start, length) into 1-D DATA: OUTPUT is every range's values concatenated "
        "(example by example, feature by feature), LENGTHS[n] the values of example n (int32)."))


@register_kernel("GatherRanges")
def gather_ranges(ctx):
    def run(data, ranges):
        if data.ndim != 1:
            raise ctx.input_error(0, "Data has to be 1-D")
        _check_ranges(ctx, 1, ranges)
        if ranges.shape[1] == 0:
            raise ctx.input_error(1, "There has to be at least one range")
        return call(ctx, {"ranges": 1}, R.gather_ranges, data, ranges)
    return run


register_schema(OpSchema(
    "GatherRangesToDense", num_inputs=(2, 3), num_outputs=(1, None), inputs=("DATA", "RANGES", "KEY"),
    outputs=("OUTPUT",),
    args=(Arg("lengths", "ints", None, required=True, doc="expected length of each feature's range"),
          Arg("min_observation", "int", 10000, doc="examples seen before the ratios are enforced"),
          Arg("max_mismatched_ratio", "float", 0.01, doc="error when more ranges have another length"),
          Arg("max_empty_ratio", "float", 1.0, doc="error when more ranges are empty (1: never)")),
    inference=lambda ctx, ins: [TensorType((ins[1].dims[0], n), ins[0].dtype) for n in ctx.ints("lengths")],
    doc="One [N, lengths[j]] output per feature j of RANGES [N, M, 2] into 1-D DATA; a range of another "
        "length (or empty) gives zeros. With KEY (int64, like DATA) each range is ordered by its keys. "
        "Counts of empty and mismatched ranges accumulate over runs and are checked against the ratios."))


@register_kernel("GatherRangesToDense")
def gather_ranges_to_dense(ctx):
    lengths = list(ctx.ints("lengths") or [])
    if not lengths:
        raise ctx.error("There has to be at least one length")
    if min(lengths) <= 0:
        raise ctx.error("Each length should be positive")
    if len(lengths) != ctx.n_outputs:
        raise ctx.error("lengths has %d entries but the op has %d outputs" % (len(lengths), ctx.n_outputs))
    min_obs = ctx.int("min_observation")
    if min_obs <= 0:
        raise ctx.error("The number of observations is at least 1")
    max_mismatch, max_empty = ctx.float("max_mismatched_ratio"), ctx.float("max_empty_ratio")
    totals = {"ranges": 0, "empty": [0] * len(lengths), "mismatched": [0] * len(lengths)}

    def run(data, ranges, key=None):
        if data.ndim != 1:
            raise ctx.input_error(0, "Data has to be 1-D")
        _check_ranges(ctx, 1, ranges)
        if key is not None:
            if key.ndim != 1:
                raise ctx.input_error(2, "Key has to be 1-D")
            if key.dtype != np.int64:
                raise ctx.input_error(2, "Key has to be type int64_t")
            if key.shape[0] != data.shape[0]:
                raise ctx.input_error(2, "KEY has %d values, DATA %d" % (key.shape[0], data.shape[0]))
        if ranges.shape[1] != len(lengths):
            raise ctx.input_error(1, "Nummber of ranges should match number of lengths")
        outs, empty, mismatched = call(ctx, {"ranges": 1}, R.gather_ranges_to_dense, data, ranges, lengths, key)
        seen = totals["ranges"] + ranges.shape[0]
        for j in range(len(lengths)):
            e, m = totals["empty"][j] + empty[j], totals["mismatched"][j] + mismatched[j]
            if max_mismatch < 1.0 and max(seen, min_obs) * max_mismatch < m:
                raise ctx.error("Ratio of range length mismatch for feature at index %d is %g (%d/%d) which "
                                "exceeds %g" % (j, m / seen, m, seen, max_mismatch))
            if max_empty < 1.0 and max(seen, min_obs) * max_empty < e:
                raise ctx.error("Ratio of empty ranges for feature at index %d is %g (%d/%d) which exceeds %g"
                                % (j, e / seen, e, seen, max_empty))
        totals["ranges"] = seen        # counted only when the run succeeds
        for j in range(len(lengths)):
            totals["empty"][j] += empty[j]
            totals["mismatched"][j] += mismatched[j]
        return tuple(outs) if len(outs) > 1 else outs[0]
    return run


# --------------------------------------------------------------------------- SparseToDense

register_schema(OpSchema(
    "SparseToDense", num_inputs=(2, 3), num_outputs=1, inputs=("indices", "values", "data_to_infer_dim"),
    outputs=("output",), args=(Arg("output_first_dim", "int", 0, doc="rows of the output (0: inferred)"),),
    inference=lambda ctx, ins: [TensorType((ins[2].dims[0],) + tuple(ins[1].dims[1:]), ins[1].dtype)
                                if len(ins) == 3 else
                                TensorType((ctx.int("output_first_dim"),) + tuple(ins[1].dims[1:]), ins[1].dtype)
                                if ctx.int("output_first_dim") > 0 else TensorType(None, ins[1].dtype)],
    doc="output[indices[i]] += values[i] (duplicates add up; other rows are zero). Rows: "
        "output_first_dim, else data_to_infer_dim.shape[0], else max(indices) + 1."))


@register_kernel("SparseToDense")
def sparse_to_dense(ctx):
    first_dim = ctx.int("output_first_dim")
    if first_dim > 0 and ctx.n_inputs != 2:
        raise ctx.error("output_first_dim and data_to_infer_dim cannot both be given")

    def run(indices, values, infer_from=None):
        check_int_vector(ctx, 0, indices, "indices")
        if values.ndim < 1:
            raise ctx.input_error(1, "values must be at least 1-D")
        if values.shape[0] != indices.shape[0]:
            raise ctx.input_error(1, "values has %d rows, indices %d" % (values.shape[0], indices.shape[0]))
        if first_dim > 0:
            n = first_dim
        elif infer_from is not None:
            if np.ndim(infer_from) < 1:
                raise ctx.input_error(2, "data_to_infer_dim must be at least 1-D")
            n = infer_from.shape[0]
        else:
            n = int(indices.max()) + 1 if indices.size else 0
        return call(ctx, {"indices": 0}, S.sparse_to_dense, indices, values, n)
    return run


register_schema(OpSchema(
    "SparseToDenseMask", num_inputs=(3, 4), num_outputs=(1, 2), inputs=("indices", "values", "default_value",
                                                                       "lengths"),
    outputs=("output", "presence_mask"),
    args=(Arg("mask", "ints", None, required=True, doc="the ids of the dense columns"),
          Arg("return_presence_mask", "bool", False, doc="second output: bool, true where an id was present"),
          Arg("max_skipped_indices", "int", 5, doc="negative ids tolerated over the op's life")),
    inference=lambda ctx, ins: [
        TensorType(((ins[3].dims[0],) if len(ins) == 4 else ()) + (len(ctx.ints("mask")),) + tuple(ins[2].dims),
                   ins[2].dtype),
        TensorType(((ins[3].dims[0],) if len(ins) == 4 else ()) + (len(ctx.ints("mask")),), DT.BOOL)],
    doc="Map<id, value> given as indices/values (per row with `lengths`) -> [rows,] len(mask) + "
        "default.shape: column j holds the value of id mask[j] (the last one), else default_value."))


@register_kernel("SparseToDenseMask")
def sparse_to_dense_mask(ctx):
    mask = list(ctx.ints("mask") or [])
    if not mask:
        raise ctx.error("mask can't be empty")
    if min(mask) < 0:
        raise ctx.error("Only positive IDs are allowed.")
    if len(set(mask)) != len(mask):
        dup = next(m for m in mask if mask.count(m) > 1)
        raise ctx.error("Duplicated id: %d" % dup)
    with_presence = ctx.bool("return_presence_mask")
    if with_presence and ctx.n_outputs != 2:
        raise ctx.error("return_presence_mask=1 needs two outputs")
    max_skipped = ctx.int("max_skipped_indices")
    state = {"skipped": 0}

    def run(indices, values, default, lengths=None):
        check_int_vector(ctx, 0, indices, "indices")
        if values.ndim < 1 or values.shape[0] != indices.shape[0]:
            raise ctx.input_error(1, "values must have one row per index (%d), got shape %s"
                                  % (indices.shape[0], list(values.shape)))
        if default.ndim + 1 != values.ndim or default.size != int(np.prod(values.shape[1:], dtype=np.int64)):
            raise ctx.input_error(2, "default_value must have values' shape without the first dimension %s, "
                                     "got %s" % (list(values.shape[1:]), list(default.shape)))
        if default.dtype != values.dtype:
            raise ctx.input_error(2, "default_value type %s differs from values' %s" % (default.dtype, values.dtype))
        if lengths is not None:
            check_int_vector(ctx, 3, lengths, "lengths")
        out, presence, skipped = call(ctx, {"lengths": 3}, S.sparse_to_dense_mask, indices, values,
                                      default.reshape(values.shape[1:]), mask, lengths)
        if skipped and state["skipped"] + skipped >= max_skipped:
            raise ctx.input_error(0, "Too many sparse indices skipped")
        state["skipped"] += skipped
        return (out, presence) if ctx.n_outputs == 2 else out
    return run


# --------------------------------------------------------------------------- Batch sparse <-> dense

register_schema(OpSchema(
    "BatchSparseToDense", num_inputs=(3, 4), num_outputs=1,
    inputs=("lengths", "indices", "values", "output_shape_inference"), outputs=("dense",),
    args=(Arg("dense_last_dim", "int", -1, doc="columns of the output (or from input 3's second dim)"),
          Arg("default_value", "float", 0.0, doc="value of the missing entries")),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], ins[3].dims[1] if len(ins) == 4
                                            else ctx.int("dense_last_dim")), ins[2].dtype)],
    doc="Row i of a [len(lengths), dense_last_dim] matrix gets values at its lengths[i] indices; the rest "
        "is default_value."))


@register_kernel("BatchSparseToDense")
def batch_sparse_to_dense(ctx):
    state = {"last_dim": ctx.int("dense_last_dim")}
    default_value = ctx.float("default_value")
    if ctx.n_inputs == 3 and state["last_dim"] < 1:
        raise ctx.error("The last dim of dense must be >= 1")

    def run(lengths, indices, values, shaper=None):
        check_int_vector(ctx, 0, lengths, "lengths")
        check_int_vector(ctx, 1, indices, "indices")
        if values.size != indices.size:
            raise ctx.input_error(2, "values has %d elements, indices %d" % (values.size, indices.size))
        last_dim = state["last_dim"]
        if shaper is not None:
            check_rank(ctx, 3, shaper, 2, "output_shape_inference")
            if last_dim == -1:
                last_dim = shaper.shape[1]
            elif last_dim != shaper.shape[1]:
                raise ctx.input_error(3, "The last dim argument is not aligned with the shape input last dim")
        out = call(ctx, {"lengths": 0, "indices": 1}, S.batch_sparse_to_dense, lengths, indices, values,
                   last_dim, default_value)
        state["last_dim"] = last_dim
        return out
    return run


register_schema(OpSchema(
    "BatchDenseToSparse", num_inputs=3, num_outputs=1, inputs=("lengths", "indices", "dense"), outputs=("values",),
    inference=lambda ctx, ins: [TensorType(tuple(ins[1].dims), ins[2].dtype)],
    doc="Inverse of BatchSparseToDense: values[k] = dense[i, indices[k]] for the indices of row i."))


@register_kernel("BatchDenseToSparse")
def batch_dense_to_sparse(ctx):
    def run(lengths, indices, dense):
        check_int_vector(ctx, 0, lengths, "lengths")
        check_int_vector(ctx, 1, indices, "indices")
        check_rank(ctx, 2, dense, 2, "dense")
        return call(ctx, {"lengths": 0, "indices": 1, "dense": 2}, S.batch_dense_to_sparse, lengths, indices, dense)
    return run


# --------------------------------------------------------------------------- 8-bit row-wise

register_schema(OpSchema(
    "GatherFused8BitRowwise", num_inputs=2, num_outputs=1, inputs=("DATA", "INDICES"), outputs=("OUTPUT",),
    inference=lambda ctx, ins: [TensorType((ins[1].dims[0], ins[0].dims[1] - 8), DT.FLOAT)],
    doc="Rows INDICES of a fused 8-bit row-wise table (D codes, float32 scale, float32 bias per row), "
        "dequantised: [len(INDICES), D] float32."))


@register_kernel("GatherFused8BitRowwise")
def gather_fused_8bit_rowwise(ctx):
    def run(data, indices):
        if data.ndim != 2:
            raise ctx.input_error(0, "DATA must be a matrix")
        if data.dtype != np.uint8:
            raise ctx.input_error(0, "DATA must be uint8 fused rows, got %s" % data.dtype)
        if data.shape[1] <= 8:
            raise ctx.input_error(0, "DATA must have more than 8 columns")
        check_int_vector(ctx, 1, indices, "INDICES")
        return call(ctx, {"indices": 1}, Q.gather_fused8, data, indices)
    return run


register_schema(OpSchema(
    "FloatToRowwiseQuantized8Bits", num_inputs=1, num_outputs=2, inputs=("input",),
    outputs=("quantized_input", "scale_bias"),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims), DT.UINT8), TensorType((ins[0].dims[0], 2), DT.FLOAT)],
    doc="8-bit row-wise quantisation of a float32 tensor viewed as [N, rest]: uint8 codes and per-row "
        "(scale, bias) = ((max - min) / 255, min)."))


@register_kernel("FloatToRowwiseQuantized8Bits")
def float_to_rowwise_quantized_8bits(ctx):
    def run(x):
        if x.dtype != np.float32:
            raise ctx.input_error(0, "input must be float32, got %s" % x.dtype)
        if x.ndim < 1:
            raise ctx.input_error(0, "input must be at least 1-D")
        return Q.quantize(x)
    return run


def _check_scale_bias(ctx, index, data, scale_bias):
    if scale_bias.ndim != 2:
        raise ctx.input_error(index, "scale_bias has to be matrix")
    if scale_bias.shape[0] != data.shape[0]:
        raise ctx.input_error(index, "scale_bias must have the same first dim as data")
    if scale_bias.shape[1] != 2:
        raise ctx.input_error(index, "the second dim of scale_bias has to be equal to 2")
    if scale_bias.dtype != np.float32:
        raise ctx.input_error(index, "scale_bias must be float32, got %s" % scale_bias.dtype)


register_schema(OpSchema(
    "Rowwise8BitQuantizedToFloat", num_inputs=2, num_outputs=1, inputs=("quantized_input", "scale_bias"),
    outputs=("output",), inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims), DT.FLOAT)],
    doc="Inverse of FloatToRowwiseQuantized8Bits: code * scale + bias per row (float32)."))


@register_kernel("Rowwise8BitQuantizedToFloat")
def rowwise_8bit_quantized_to_float(ctx):
    def run(codes, scale_bias):
        if codes.dtype != np.uint8 or codes.ndim < 1:
            raise ctx.input_error(0, "quantized_input must be a uint8 tensor, got %s %s"
                                  % (codes.dtype, list(codes.shape)))
        _check_scale_bias(ctx, 1, codes, scale_bias)
        return Q.dequantize(codes, scale_bias)
    return run


def _register_rowwise8_lookup(name, weighted, mean):
    inputs = ("DATA",) + (("SCALARS",) if weighted else ()) + ("INDICES", "LENGTHS", "scale_bias")
    i_idx, i_len, i_sb = len(inputs) - 3, len(inputs) - 2, len(inputs) - 1
    register_schema(OpSchema(
        name, num_inputs=len(inputs), num_outputs=1, inputs=inputs, outputs=("output",),
        inference=lambda ctx, ins: [TensorType((ins[i_len].dims[0],) + tuple(ins[0].dims[1:]), DT.FLOAT)],
        doc="SparseLengths%s%s over a uint8 table quantised by FloatToRowwiseQuantized8Bits, rows restored "
            "as code * scale + bias from scale_bias [N, 2]." % ("Weighted" if weighted else "",
                                                                 "Mean" if mean else "Sum")))

    @register_kernel(name)
    def factory(ctx):
        def run(*ins):
            data, indices, lengths, scale_bias = ins[0], ins[i_idx], ins[i_len], ins[i_sb]
            weights = ins[1] if weighted else None
            if data.dtype != np.uint8 or data.ndim < 1:
                raise ctx.input_error(0, "DATA must be a uint8 tensor, got %s %s" % (data.dtype, list(data.shape)))
            check_int_vector(ctx, i_idx, indices, "INDICES")
            check_int_vector(ctx, i_len, lengths, "LENGTHS")
            _check_scale_bias(ctx, i_sb, data, scale_bias)
            if weights is not None and (weights.ndim != 1 or weights.shape[0] != indices.shape[0]):
                raise ctx.input_error(1, "SCALARS must be a vector with the length of INDICES (%d), got shape %s"
                                      % (indices.shape[0], list(weights.shape)))
            return call(ctx, {"indices": i_idx, "lengths": i_len}, Q.sparse_lengths_rowwise8, data, indices,
                        lengths, scale_bias, weights, mean)
        return run


for _name, _weighted, _mean in (("SparseLengthsSum8BitsRowwise", False, False),
                                ("SparseLengthsWeightedSum8BitsRowwise", True, False),
                                ("SparseLengthsMean8BitsRowwise", False, True),
                                ("SparseLengthsWeightedMean8BitsRowwise", True, True)):
    _register_rowwise8_lookup(_name, _weighted, _mean)
