"""Caffe2's selection and row ops: Unique, Find, FindDuplicateElements, BooleanMask,
BooleanMaskLengths, BooleanUnmask, FlexibleTopK, RemoveDataBlocks, Append,
ExtendTensor, RowMul, RowWiseArgMax, RowwiseMax."""
import numpy as np

from caffe2py.kernels.cpu.recsys import selection as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from ..recsys._checks import call, check_int, check_int_vector, check_rank, type_name

DT = caffe2_pb2.TensorProto


# --------------------------------------------------------------------------- Unique / Find

register_schema(OpSchema(
    "Unique", num_inputs=1, num_outputs=(1, 2), inputs=("indices",), outputs=("unique_indices", "remapping"),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims) if ins[0].dims[0] <= 1 else None, ins[0].dtype),
                                TensorType(tuple(ins[0].dims), DT.INT32)],
    doc="Distinct values of a 1-D int32/int64 tensor (sorted) and, optionally, the remapping (int32) with "
        "Gather(unique, remapping) == indices."))


# Caffe2's SparseHash engine differs from the default only in the hash table it
# uses inside; the results are the same
@register_kernel("Unique", engine="SparseHash")
@register_kernel("Unique")
def unique(ctx):
    def run(values):
        if values.ndim != 1:
            raise ctx.input_error(0, "Input should be a vector")
        check_int(ctx, 0, values, "indices")
        u, remapping = K.unique(values)
        return (u, remapping) if ctx.n_outputs == 2 else u
    return run


register_schema(OpSchema(
    "Find", num_inputs=2, num_outputs=1, inputs=("index", "query"), outputs=("query_indices",),
    args=(Arg("missing_value", "int", -1, doc="result for a query that is not in the index"),),
    inference=lambda ctx, ins: [ins[1]],
    doc="For each query, the last position of it in `index`, else missing_value."))


@register_kernel("Find")
def find(ctx):
    missing = ctx.int("missing_value")

    def run(index, query):
        check_int(ctx, 0, index, "index")
        if query.dtype != index.dtype:
            raise ctx.input_error(1, "query type %s differs from index type %s" % (query.dtype, index.dtype))
        return K.find(index, query, missing)
    return run


register_schema(OpSchema(
    "FindDuplicateElements", num_inputs=1, num_outputs=1, inputs=("data",), outputs=("indices",),
    inference=lambda ctx, ins: [TensorType(None, DT.INT64)],
    doc="Positions (int64) of the elements of a 1-D tensor that equal an earlier element."))


@register_kernel("FindDuplicateElements")
def find_duplicate_elements(ctx):
    def run(data):
        if data.ndim != 1:
            raise ctx.input_error(0, "data should be 1-D.")
        if data.dtype.type not in (np.float32, np.float64, np.int32, np.int64, np.object_, np.str_):
            raise ctx.input_error(0, "Unsupported type %s (float, double, int, long or string)" % type_name(data.dtype))
        return K.find_duplicates(data)
    return run


# --------------------------------------------------------------------------- boolean masks

def _check_mask(ctx, index, mask, size=None):
    if mask.dtype != np.bool_:
        raise ctx.input_error(index, "mask must be bool, got %s" % type_name(mask.dtype))
    if mask.ndim != 1:
        raise ctx.input_error(index, "mask must be 1-D, got shape %s" % list(mask.shape))
    if size is not None and mask.shape[0] != size:
        raise ctx.input_error(index, "mask has %d values, expected %d" % (mask.shape[0], size))


register_schema(OpSchema(
    "BooleanMask", num_inputs=2, num_outputs=(1, 2), inputs=("data", "mask"), outputs=("masked_data",
                                                                                      "masked_indices"),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype), TensorType(None, DT.INT64)],
    doc="The outer rows of data where the 1-D bool mask is true, and (optionally) their positions (int64)."))


@register_kernel("BooleanMask")
def boolean_mask(ctx):
    def run(data, mask):
        if data.ndim < 1:
            raise ctx.input_error(0, "data must be at least 1-D")
        _check_mask(ctx, 1, mask, data.shape[0])
        kept = data[mask]
        return (kept, np.flatnonzero(mask).astype(np.int64)) if ctx.n_outputs == 2 else kept
    return run


register_schema(OpSchema(
    "BooleanMaskLengths", num_inputs=2, num_outputs=1, inputs=("lengths", "mask"), outputs=("masked_lengths",),
    inference=lambda ctx, ins: [ins[0]],
    doc="The segment lengths after BooleanMask: per segment, how many of its mask values are true."))


@register_kernel("BooleanMaskLengths")
def boolean_mask_lengths(ctx):
    def run(lengths, mask):
        check_int_vector(ctx, 0, lengths, "lengths")
        if lengths.size and lengths.min() < 0:
            raise ctx.input_error(0, "lengths must be non-negative")
        _check_mask(ctx, 1, mask, int(lengths.sum()))
        seg = np.repeat(np.arange(lengths.size), lengths)
        return np.bincount(seg[mask], minlength=lengths.size).astype(lengths.dtype)
    return run


register_schema(OpSchema(
    "BooleanUnmask", num_inputs=lambda n: n > 0 and n % 2 == 0, num_outputs=1,
    inputs=("mask_0", "values_0"), outputs=("unmasked_data",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],), ins[1].dtype)],
    doc="Rebuilds one 1-D tensor from (mask, values) pairs: each position takes the next value of the first "
        "mask that is true there; every position needs a true mask and every value must be used."))


@register_kernel("BooleanUnmask")
def boolean_unmask(ctx):
    def run(*ins):
        masks, values = ins[0::2], ins[1::2]
        _check_mask(ctx, 0, masks[0])
        for k, (m, v) in enumerate(zip(masks, values)):
            _check_mask(ctx, 2 * k, m, masks[0].shape[0])
            if v.ndim != 1:
                raise ctx.input_error(2 * k + 1, "values must be 1-D")
            if v.dtype != values[0].dtype:
                raise ctx.input_error(2 * k + 1, "values type %s differs from the first values' %s"
                                      % (v.dtype, values[0].dtype))
        roles = {"mask0": 0}
        roles.update({"values%d" % k: 2 * k + 1 for k in range(len(values))})
        return call(ctx, roles, K.boolean_unmask, masks, values)
    return run


# --------------------------------------------------------------------------- FlexibleTopK / RemoveDataBlocks

register_schema(OpSchema(
    "FlexibleTopK", num_inputs=2, num_outputs=2, inputs=("X", "K"), outputs=("values", "indices"),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype), TensorType(None, DT.INT64)],
    doc="Top K[i] values along the last dim of each row i of X [..., r] (K [..., 1] int64, 0 < K <= r), "
        "largest first, ties by lower index; flat values and flat last-dim indices (int64)."))


@register_kernel("FlexibleTopK")
def flexible_top_k(ctx):
    def run(x, k):
        if x.ndim < 1:
            raise ctx.input_error(0, "X must be at least 1-D")
        if x.dtype != np.float32:
            raise ctx.input_error(0, "X must be float32, got %s" % x.dtype)
        check_int(ctx, 1, k, "K")
        return call(ctx, {"k": 1}, K.flexible_top_k, x, k)
    return run


register_schema(OpSchema(
    "RemoveDataBlocks", num_inputs=2, num_outputs=1, inputs=("data", "indices"), outputs=("outputs",),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype)],
    doc="DATA without the outer-dimension blocks listed in INDICES (repeats count once)."))


@register_kernel("RemoveDataBlocks")
def remove_data_blocks(ctx):
    def run(data, indices):
        if data.ndim < 1:
            raise ctx.input_error(0, "DATA should be at leat 1-D.")
        if indices.ndim == 1 and indices.shape[0] == 0:
            return data.copy()          # Caffe2 copies before looking at the type (np.array([]) is float)
        check_int_vector(ctx, 1, indices, "INDICES")
        return call(ctx, {"indices": 1}, K.remove_data_blocks, data, indices)
    return run


# --------------------------------------------------------------------------- Append / ExtendTensor

register_schema(OpSchema(
    "Append", num_inputs=2, num_outputs=1, enforce_inplace={(0, 0)}, inputs=("dataset", "new_data"),
    outputs=("dataset",), inference=lambda ctx, ins: [UNKNOWN],
    doc="Appends new_data's rows to dataset (in place; all but the outer dims must agree). An empty "
        "dataset becomes a copy of new_data."))


@register_kernel("Append")
def append(ctx):
    def run(a, b):
        if b.ndim < 1:
            raise ctx.input_error(1, "new_data must be at least 1-D")
        if a.ndim >= 1 and a.shape[0] == 0:
            return b.copy()
        if a.ndim != b.ndim or a.shape[1:] != b.shape[1:]:
            raise ctx.input_error(1, "shape %s does not extend dataset of shape %s"
                                  % (list(b.shape), list(a.shape)))
        if a.dtype != b.dtype:
            raise ctx.input_error(1, "type %s differs from dataset's %s" % (b.dtype, a.dtype))
        return np.concatenate([a, b], axis=0)
    return run


register_schema(OpSchema(
    "ExtendTensor", num_inputs=2, num_outputs=1, enforce_inplace={(0, 0)}, inputs=("tensor", "new_indices"),
    outputs=("extended_tensor",), args=(Arg("growthPct", "int", 40, doc="growth of the reserved memory (speed)"),),
    inference=lambda ctx, ins: [UNKNOWN],
    doc="Grows the outer dim of tensor (in place) to max(new_indices) + 1 when that is larger; new rows "
        "are zero."))


@register_kernel("ExtendTensor")
def extend_tensor(ctx):
    def run(tensor, indices):
        if indices.ndim < 1:
            raise ctx.input_error(1, "new_indices must be at least 1-D")
        check_int(ctx, 1, indices, "new_indices")
        if tensor.ndim != indices.ndim:
            raise ctx.input_error(0, "tensor (%d-D) and new_indices (%d-D) must have the same rank"
                                  % (tensor.ndim, indices.ndim))
        if indices.size == 0:
            return tensor.copy()
        rows = int(indices.max()) + 1
        if rows <= tensor.shape[0]:
            return tensor.copy()
        out = np.zeros((rows,) + tensor.shape[1:], tensor.dtype)
        out[:tensor.shape[0]] = tensor
        return out
    return run


# --------------------------------------------------------------------------- row ops

register_schema(OpSchema(
    "RowMul", num_inputs=2, num_outputs=1, inputs=("mat", "w"), outputs=("output",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Each outer row i of mat times the scalar w[i]."))


@register_kernel("RowMul")
def row_mul(ctx):
    def run(mat, w):
        if mat.ndim < 1:
            raise ctx.input_error(0, "mat must be at least 1-D")
        if w.size != mat.shape[0]:
            raise ctx.input_error(1, "Length of w should be equal to the first dim of mat")
        if mat.dtype != np.float32 or w.dtype != np.float32:
            raise ctx.input_error(0, "mat and w must be float32, got %s and %s" % (mat.dtype, w.dtype))
        return mat * w.reshape((-1,) + (1,) * (mat.ndim - 1))
    return run


register_schema(OpSchema(
    "RowWiseArgMax", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Z",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], 1), DT.INT32)],
    doc="Index (int32, [N, 1]) of the first maximum of each row of X [N, D]."))


@register_kernel("RowWiseArgMax")
def row_wise_arg_max(ctx):
    def run(x):
        if x.ndim != 2:
            raise ctx.input_error(0, "Input should be a 2D tensor")
        if x.dtype != np.float32:
            raise ctx.input_error(0, "X must be float32, got %s" % x.dtype)
        return K.row_wise_arg_max(x)
    return run


register_schema(OpSchema(
    "RowwiseMax", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[:2]), ins[0].dtype)],
    doc="Max of each row of each matrix of X [B, M, N]: Y [B, M]."))


@register_kernel("RowwiseMax")
def rowwise_max(ctx):
    def run(x):
        check_rank(ctx, 0, x, 3, "X")
        if x.dtype != np.float32:
            raise ctx.input_error(0, "X must be float32, got %s" % x.dtype)
        if x.shape[2] == 0:
            raise ctx.input_error(0, "rows of X are empty (N = 0): no maximum")
        return x.max(axis=2)
    return run
