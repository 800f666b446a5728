"""Caffe2's feature-processing ops: BatchBoxCox, BatchOneHot, BatchBucketOneHot, OneHot,
SegmentOneHot, Percentile, PiecewiseLinearTransform, NGramFromCategorical,
MergeIdLists, KeySplit."""
import numpy as np

from caffe2py.kernels.cpu.recsys import feature as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._checks import call, check_int, check_int_vector, check_rank, scalar_of, type_name

DT = caffe2_pb2.TensorProto


# --------------------------------------------------------------------------- BatchBoxCox

register_schema(OpSchema(
    "BatchBoxCox", num_inputs=3, num_outputs=1, allow_inplace={(0, 0)}, inputs=("data", "lambda1", "lambda2"),
    outputs=("output",), args=(Arg("min_block_size", "int", 256, doc="rows per vectorised block (speed only)"),),
    inference=lambda ctx, ins: [ins[0]],
    doc="Box-Cox per column of data [N, D]: ln(x + lambda2) if lambda1 == 0, else ((x + lambda2)^lambda1 - 1) "
        "/ lambda1, with x + lambda2 clamped below at 1e-6. float or double."))


@register_kernel("BatchBoxCox")
def batch_box_cox(ctx):
    def run(data, lambda1, lambda2):
        if data.dtype not in (np.float32, np.float64):
            raise ctx.input_error(0, "data must be float or double, got %s" % type_name(data.dtype))
        if data.ndim < 1:
            raise ctx.input_error(0, "data must be at least 1-D")
        if data.size == 0:
            return data.copy()
        width = data.size // data.shape[0]
        for i, lam in ((1, lambda1), (2, lambda2)):
            if lam.size != width:
                raise ctx.input_error(i, "must have D = %d values, got %d" % (width, lam.size))
            if lam.dtype != data.dtype:
                raise ctx.input_error(i, "must have data's type %s, got %s" % (data.dtype, lam.dtype))
        return K.box_cox(data, lambda1, lambda2)
    return run


# --------------------------------------------------------------------------- one-hot family

register_schema(OpSchema(
    "BatchOneHot", num_inputs=3, num_outputs=1, inputs=("data", "lengths", "values"), outputs=("output",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], ins[2].dims[0]), ins[0].dtype)],
    doc="Column j of data [N, D] one-hot against its lengths[j] dictionary values (consecutive in "
        "`values`): output [N, sum(lengths)] of data's type."))


@register_kernel("BatchOneHot")
def batch_one_hot(ctx):
    def run(data, lengths, values):
        if data.ndim < 1:
            raise ctx.input_error(0, "data must be at least 1-D")
        check_int_vector(ctx, 1, lengths, "lengths")
        if values.dtype != data.dtype:
            raise ctx.input_error(2, "values must have data's type %s, got %s" % (data.dtype, values.dtype))
        return call(ctx, {"lengths": 1, "values": 2}, K.batch_one_hot, data, lengths, values)
    return run


register_schema(OpSchema(
    "BatchBucketOneHot", num_inputs=3, num_outputs=1, inputs=("data", "lengths", "boundaries"),
    outputs=("output",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], ins[2].dims[0] + ins[1].dims[0]), DT.FLOAT)],
    doc="Column j of data [N, D] bucketised by its lengths[j] sorted boundaries (right-inclusive buckets; "
        "a value on a repeated boundary goes to the middle bucket of the run) and one-hot over "
        "lengths[j] + 1 columns: output [N, sum(lengths) + D] float."))


@register_kernel("BatchBucketOneHot")
def batch_bucket_one_hot(ctx):
    def run(data, lengths, boundaries):
        if data.ndim < 1:
            raise ctx.input_error(0, "data must be at least 1-D")
        if data.dtype != np.float32:
            raise ctx.input_error(0, "data must be float32, got %s" % data.dtype)
        check_int_vector(ctx, 1, lengths, "lengths")
        return call(ctx, {"lengths": 1, "boundaries": 2}, K.batch_bucket_one_hot, data, lengths, boundaries)
    return run


def _index_size(ctx, index, tensor):
    size = int(scalar_of(ctx, index, tensor, "index_size_tensor"))
    if size <= 0:
        raise ctx.input_error(index, "index size must be > 0, got %d" % size)
    return size


register_schema(OpSchema(
    "OneHot", num_inputs=2, num_outputs=1, inputs=("indices", "index_size_tensor"), outputs=("one_hots",),
    inference=lambda ctx, ins: [TensorType(None, DT.FLOAT)],
    doc="[len(indices), index_size] float with 1.0 at each example's index."))


@register_kernel("OneHot")
def one_hot(ctx):
    def run(indices, size):
        check_int(ctx, 0, indices, "indices")
        return call(ctx, {"indices": 0}, K.one_hot, indices, _index_size(ctx, 1, size))
    return run


register_schema(OpSchema(
    "SegmentOneHot", num_inputs=3, num_outputs=1, inputs=("lengths", "indices", "index_size_tensor"),
    outputs=("one_hots",), inference=lambda ctx, ins: [TensorType(None, DT.FLOAT)],
    doc="[len(lengths), index_size] float: row i has 1.0 at every index of segment i."))


@register_kernel("SegmentOneHot")
def segment_one_hot(ctx):
    def run(lengths, indices, size):
        check_int_vector(ctx, 0, lengths, "lengths")
        check_int_vector(ctx, 1, indices, "indices")
        return call(ctx, {"lengths": 0, "indices": 1}, K.segment_one_hot, lengths, indices,
                    _index_size(ctx, 2, size))
    return run


# --------------------------------------------------------------------------- Percentile

register_schema(OpSchema(
    "Percentile", num_inputs=3, num_outputs=1, inputs=("original_values", "value_to_pct", "lengths"),
    outputs=("percentile_values",), inference=lambda ctx, ins: [ins[0]],
    doc="Percentile of each value of original_values [N, F] from column j's sorted (value, percentile) "
        "samples (lengths[j] rows of value_to_pct [S, 2]): exact -> its percentile, between -> linear, "
        "above all -> 1, below all -> 0."))


@register_kernel("Percentile")
def percentile(ctx):
    def run(values, value_pct, lengths):
        check_rank(ctx, 0, values, 2, "original_values")
        if values.dtype != np.float32:
            raise ctx.input_error(0, "original_values must be float32, got %s" % values.dtype)
        check_rank(ctx, 1, value_pct, 2, "value_to_pct")
        if value_pct.shape[1] != 2:
            raise ctx.input_error(1, "value_to_pct must have 2 columns, got %d" % value_pct.shape[1])
        check_int_vector(ctx, 2, lengths, "lengths")
        return call(ctx, {"lengths": 2}, K.percentile, values, value_pct, lengths)
    return run


# --------------------------------------------------------------------------- PiecewiseLinearTransform

register_schema(OpSchema(
    "PiecewiseLinearTransform", num_inputs={1, 4}, num_outputs=1,
    inputs=("predictions", "bounds", "slopes", "intercepts"), outputs=("transforms",),
    args=(Arg("bounds", "floats", None, doc="per column, pieces + 1 sorted bounds"),
          Arg("slopes", "floats", None, doc="per column, pieces slopes"),
          Arg("intercepts", "floats", None, doc="per column, pieces intercepts"),
          Arg("binary", "bool", False, doc="predictions are [N] or [N, 2] binary scores: one group, "
                                           "applied to the positive column, the negative is 1 - positive")),
    inference=lambda ctx, ins: [ins[0]],
    doc="Each column of predictions [N, M] through its piecewise linear function (pieces (b_i, b_i+1], values "
        "outside the bounds clamped to them); parameters from the arguments or inputs 1-3."))


def _pieces(ctx, n_bounds, n_slopes, n_intercepts, binary):
    if n_slopes != n_intercepts:
        raise ctx.error("slopes (%d) and intercepts (%d) must have the same size" % (n_slopes, n_intercepts))
    groups = n_bounds - n_slopes
    if groups <= 0:
        raise ctx.error("bounds must have one more value per group than slopes")
    if binary and groups != 1:
        raise ctx.error("binary=1 takes one group of functions, got %d" % groups)
    if n_slopes % groups or n_slopes // groups == 0:
        raise ctx.error("%d slopes do not split into %d groups" % (n_slopes, groups))
    return groups, n_slopes // groups


def _check_sorted(ctx, bounds, groups, pieces):
    b = np.asarray(bounds).reshape(groups, pieces + 1)
    if (np.diff(b, axis=1) < 0).any():
        raise ctx.error("bounds must be sorted for each group")


@register_kernel("PiecewiseLinearTransform")
def piecewise_linear_transform(ctx):
    binary = ctx.bool("binary")
    given = [ctx.floats(n) or [] for n in ("bounds", "slopes", "intercepts")]
    from_args = sum(1 for g in given if g)
    if from_args not in (0, 3):
        raise ctx.error("bounds, slopes, intercepts must be all set or all not set")
    if from_args == 3:
        if ctx.n_inputs != 1:
            raise ctx.error("the parameters are given as arguments; the op takes 1 input, got %d" % ctx.n_inputs)
        groups, pieces = _pieces(ctx, *(len(g) for g in given), binary)
        _check_sorted(ctx, given[0], groups, pieces)
        fixed = [np.asarray(g, np.float32) for g in given]
    elif ctx.n_inputs != 4:
        raise ctx.error("without bounds/slopes/intercepts arguments the op takes 4 inputs, got %d" % ctx.n_inputs)

    def run(x, *params):
        if x.dtype != np.float32:
            raise ctx.input_error(0, "predictions must be float32, got %s" % x.dtype)
        if from_args == 3:
            b, s, c = fixed
            g, p = groups, pieces
        else:
            b, s, c = (np.asarray(v, np.float32).reshape(-1) for v in params)
            g, p = _pieces(ctx, b.size, s.size, c.size, binary)
        if binary:
            if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[1] not in (1, 2)):
                raise ctx.input_error(0, "If binary is set to true, the input must be Nx2 or Nx1 tensor")
            if x.ndim == 2 and x.shape[1] == 2:
                pos = K.piecewise_linear(x[:, 1:], b, s, c, p)
                return np.concatenate([np.float32(1.0) - pos, pos], axis=1)
            return K.piecewise_linear(x, b, s, c, p)
        if x.ndim != 2:
            raise ctx.input_error(0, "predictions must be 2-D, got shape %s" % list(x.shape))
        if g != x.shape[1]:
            raise ctx.input_error(0, "%d groups of functions for %d columns" % (g, x.shape[1]))
        return K.piecewise_linear(x, b, s, c, p)
    return run


# --------------------------------------------------------------------------- NGramFromCategorical

register_schema(OpSchema(
    "NGramFromCategorical", num_inputs=1, num_outputs=1, inputs=("floats",), outputs=("ngrams",),
    args=(Arg("col_ids", "ints", None, required=True, doc="the categorical columns"),
          Arg("categorical_limits", "ints", None, required=True, doc="values per column"),
          Arg("vals", "ints", None, required=True, doc="each column's values, concatenated")),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],), DT.INT64)],
    doc="One int64 id per row from the chosen columns: sum_k pos_k * prod(limits before k), pos_k the "
        "position of round(x[col_ids[k]]) in column k's vals (0 when absent)."))


@register_kernel("NGramFromCategorical")
def ngram_from_categorical(ctx):
    col_ids = list(ctx.ints("col_ids") or [])
    limits = list(ctx.ints("categorical_limits") or [])
    vals = list(ctx.ints("vals") or [])
    if not col_ids or len(col_ids) != len(limits):
        raise ctx.error("col_ids (%d) and categorical_limits (%d) must be non-empty and of equal size"
                        % (len(col_ids), len(limits)))
    if min(limits) <= 0:
        raise ctx.error("categorical_limits must be > 0")
    if min(col_ids) < 0:
        raise ctx.error("col_ids must be >= 0")
    if sum(limits) != len(vals):
        raise ctx.error("vals has %d entries, sum(categorical_limits) is %d" % (len(vals), sum(limits)))

    def run(floats):
        if floats.dtype != np.float32 or floats.ndim < 1:
            raise ctx.input_error(0, "floats must be a float32 tensor, got %s %s" % (floats.dtype, list(floats.shape)))
        width = floats.size // floats.shape[0] if floats.shape[0] else int(np.prod(floats.shape[1:]))
        if width <= max(col_ids):
            raise ctx.input_error(0, "has %d columns, col_ids reach %d" % (width, max(col_ids)))
        return K.ngram_from_categorical(floats, col_ids, limits, vals)
    return run


# --------------------------------------------------------------------------- MergeIdLists / KeySplit

register_schema(OpSchema(
    "MergeIdLists", num_inputs=lambda n: n > 0 and n % 2 == 0, num_outputs=2,
    inputs=("lengths_0", "values_0"), outputs=("merged_lengths", "merged_values"),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims), DT.INT32), TensorType(None, ins[1].dtype)],
    doc="(lengths, values) id lists of one batch, merged per sample into sorted distinct ids."))


@register_kernel("MergeIdLists")
def merge_id_lists(ctx):
    def run(*ins):
        pairs = []
        for i in range(0, len(ins), 2):
            lengths, values = ins[i], ins[i + 1]
            if lengths.ndim != 1:
                raise ctx.input_error(i, "LENGTHS should be 1-D")
            check_int(ctx, i, lengths, "LENGTHS")
            if lengths.shape[0] != ins[0].shape[0]:
                raise ctx.input_error(i, "LENGTHS should be equal")
            if values.ndim != 1:
                raise ctx.input_error(i + 1, "VALUES should be 1-D")
            check_int(ctx, i + 1, values, "VALUES")
            if values.dtype != ins[1].dtype:
                raise ctx.input_error(i + 1, "VALUES type %s differs from the first list's %s"
                                      % (values.dtype, ins[1].dtype))
            pairs.append((lengths, values))
        roles = {"lengths": 0}
        return call(ctx, roles, K.merge_id_lists, pairs)
    return run


register_schema(OpSchema(
    "KeySplit", num_inputs=1, num_outputs=(1, None), inputs=("keys",),
    args=(Arg("categorical_limit", "int", 0, doc="number of key values (and outputs)"),),
    inference=lambda ctx, ins: [TensorType(None, DT.INT32)] * ctx.n_outputs,
    doc="For each key value k < categorical_limit, output k holds the positions of the keys equal to k "
        "(int32)."))


@register_kernel("KeySplit")
def key_split(ctx):
    limit = ctx.int("categorical_limit")
    if limit <= 0:
        raise ctx.error("categorical_limit must be > 0, got %d" % limit)
    if ctx.n_outputs != limit:
        raise ctx.error("categorical_limit %d needs %d outputs, got %d" % (limit, limit, ctx.n_outputs))

    def run(keys):
        check_int(ctx, 0, keys, "keys")
        parts = call(ctx, {"keys": 0}, K.key_split, keys, limit)
        return tuple(parts) if limit > 1 else parts[0]
    return run
