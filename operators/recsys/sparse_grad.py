"""Gradients of the sparse, padding, feature and selection ops, as Caffe2 makes them:

  LengthsTopK          -> LengthsTopKGradient (LENGTHS, TopKIndices, dTopKValue)
  PackSegments         -> UnpackSegments (lengths, dPACKED) -> dDATA, and back
  AddPadding           -> RemovePadding (dOUT[, lengths_out]) and, for the padding
                          inputs, GatherPadding; RemovePadding -> AddPadding
  BatchSparseToDense   -> BatchDenseToSparse (lengths, indices, dDENSE) -> dVALUES, and back
  SparseToDense        -> Gather (dOUT, indices) -> dVALUES
  SparseToDenseMask    -> SparseToDenseMaskGradient (indices, dOUT[, lengths])
  FlexibleTopK         -> FlexibleTopKGradient (X, K, dVALUES, INDICES)
  RowwiseMax           -> RowwiseMaxGradient (X, Y, dY)
  BooleanMask          -> BooleanMaskGradient (mask, dOUT)
  LengthsTile          -> LengthsSum (dOUT, LENGTHS)
  RowMul               -> RowMul (dOUT, w) for mat; Mul + ReduceTailSum for w
  GatherByKey          -> Partition (keys, dOUT): each shard's gradient

Ops that Caffe2 marks NO_GRADIENT stop a backward pass; the SHOULD_NOT_DO_GRADIENT
ones (index and encoding ops) raise when a gradient reaches them.
"""
import numpy as np

from caffe2py.gradients import no_gradient, register_gradient, should_not_do_gradient
from caffe2py.kernels.cpu.recsys import segment_grad as K
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._checks import call, check_int, check_int_vector, check_rank


# --------------------------------------------------------------------------- gradient ops

register_schema(OpSchema(
    "LengthsTopKGradient", num_inputs=3, num_outputs=1, inputs=("LENGTHS", "INDICES", "DER_TOPK"),
    outputs=("DER_X",), args=(Arg("k", "int", None, doc="the forward's k"),),
    inference=lambda ctx, ins: [TensorType(None, ins[2].dtype)],
    doc="Gradient of LengthsTopK: each top value's gradient back at its position in DATA."))


@register_kernel("LengthsTopKGradient")
def lengths_top_k_grad(ctx):
    def run(lengths, indices, grad):
        check_int_vector(ctx, 0, lengths, "LENGTHS")
        if indices.ndim < 2 or indices.shape[0] != lengths.shape[0] or grad.shape != indices.shape:
            raise ctx.input_error(1, "input_indices shape is not correct: %s for %d segments, gradient %s"
                                  % (list(indices.shape), lengths.shape[0], list(grad.shape)))
        return call(ctx, {"indices": 1}, K.lengths_top_k_grad, lengths, indices, grad)
    return run


register_schema(OpSchema(
    "SparseToDenseMaskGradient", num_inputs=(2, 3), num_outputs=1, inputs=("indices", "gradient_output", "lengths"),
    outputs=("values_grad",), args=(Arg("mask", "ints", None, required=True, doc="the forward's mask"),),
    inference=lambda ctx, ins: [TensorType(None, ins[1].dtype)],
    doc="Gradient of SparseToDenseMask for values: the last value of each masked id in a row gets its "
        "column's gradient, the others 0."))


@register_kernel("SparseToDenseMaskGradient")
def sparse_to_dense_mask_grad(ctx):
    mask = list(ctx.ints("mask") or [])

    def run(indices, grad, lengths=None):
        check_int_vector(ctx, 0, indices, "indices")
        if lengths is not None:
            check_int_vector(ctx, 2, lengths, "lengths")
        rows = 1 if lengths is None else lengths.shape[0]
        lead = (grad.shape[:1] if lengths is None else grad.shape[:2])
        if tuple(lead) != ((len(mask),) if lengths is None else (rows, len(mask))):
            raise ctx.input_error(1, "gradient of shape %s does not fit %d rows x %d mask ids"
                                  % (list(grad.shape), rows, len(mask)))
        return call(ctx, {"lengths": 2}, K.sparse_to_dense_mask_grad, indices, grad, mask, lengths)
    return run


register_schema(OpSchema(
    "FlexibleTopKGradient", num_inputs=4, num_outputs=1, inputs=("original_input", "k", "values_grad", "indices"),
    outputs=("input_grad",), inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of FlexibleTopK: zeros of X's shape with each top value's gradient at its index."))


@register_kernel("FlexibleTopKGradient")
def flexible_top_k_grad(ctx):
    def run(x, k, grad, indices):
        if x.ndim < 1:
            raise ctx.input_error(0, "original input must have at least one dimension, got a 0-d tensor")
        check_int(ctx, 1, k, "K")
        return call(ctx, {"indices": 3, "k": 1}, K.flexible_top_k_grad, x.shape, k, grad, indices)
    return run


register_schema(OpSchema(
    "RowwiseMaxGradient", num_inputs=3, num_outputs=1, inputs=("X", "Y", "dY"), outputs=("dX",),
    inference=lambda ctx, ins: [ins[0]],
    doc="Gradient of RowwiseMax: dY at every element equal to its row's max, 0 elsewhere."))


@register_kernel("RowwiseMaxGradient")
def rowwise_max_grad(ctx):
    def run(x, y, dy):
        check_rank(ctx, 0, x, 3, "X")
        if y.shape != x.shape[:2] or dy.shape != y.shape:
            raise ctx.input_error(1, "Y and dY must be %s, got %s and %s" % (list(x.shape[:2]), list(y.shape),
                                                                            list(dy.shape)))
        return np.where(x == y[:, :, None], dy[:, :, None], np.zeros((), dy.dtype)).astype(dy.dtype)
    return run


register_schema(OpSchema(
    "BooleanMaskGradient", num_inputs=2, num_outputs=1, inputs=("mask", "dY"), outputs=("dX",),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],) + tuple(ins[1].dims[1:]), ins[1].dtype)],
    doc="Gradient of BooleanMask: dY's rows back at the true positions of mask, zeros elsewhere."))


@register_kernel("BooleanMaskGradient")
def boolean_mask_grad(ctx):
    def run(mask, dy):
        if mask.dtype != np.bool_ or mask.ndim != 1:
            raise ctx.input_error(0, "mask must be a 1-D bool tensor, got %s %s" % (mask.dtype, list(mask.shape)))
        if dy.ndim < 1 or dy.shape[0] != int(mask.sum()):
            raise ctx.input_error(1, "dY must have one row per true mask value (%d), got shape %s"
                                  % (int(mask.sum()), list(dy.shape)))
        out = np.zeros((mask.shape[0],) + dy.shape[1:], dy.dtype)
        out[mask] = dy
        return out
    return run


# ReduceTailSum (RowMul's gradient for w) is registered with the other Caffe2 reductions
# in operators/math/caffe2_reduce.py.


# --------------------------------------------------------------------------- makers

@register_gradient("LengthsTopK")
def _lengths_top_k_maker(g):
    return [g.op("LengthsTopKGradient", [g.I(1), g.O(1), g.GO(0)], [g.GI(0)])]


@register_gradient("PackSegments")
def _pack_maker(g):
    return [g.op("UnpackSegments", [g.I(0), g.GO(0)], [g.GI(1)])]


@register_gradient("UnpackSegments")
def _unpack_maker(g):
    return [g.op("PackSegments", [g.I(0), g.GO(0)], [g.GI(1)])]


def _padding_grad_inputs(g):
    inputs = [g.GO(0)]
    if len(g.def_.input) > 1:
        if len(g.def_.output) < 2:
            from caffe2py.errors import Caffe2Error
            raise Caffe2Error("%s: its gradient needs the lengths output (output 1)" % g.label)
        inputs.append(g.O(1))
    return inputs


@register_gradient("AddPadding")
def _add_padding_maker(g):
    inputs = _padding_grad_inputs(g)
    ops = [g.op("RemovePadding", inputs, [g.GI(0)])]
    if len(g.def_.input) >= 3:
        pads = [g.GI(2)] + ([g.GI(3)] if len(g.def_.input) == 4 else [])
        ops.append(g.op("GatherPadding", inputs, pads))
    return ops


@register_gradient("RemovePadding")
def _remove_padding_maker(g):
    return [g.op("AddPadding", _padding_grad_inputs(g), [g.GI(0)])]


@register_gradient("BatchSparseToDense")
def _batch_sparse_to_dense_maker(g):
    return [g.op("BatchDenseToSparse", [g.I(0), g.I(1), g.GO(0)], [g.GI(2)])]


@register_gradient("BatchDenseToSparse")
def _batch_dense_to_sparse_maker(g):
    return [g.op("BatchSparseToDense", [g.I(0), g.I(1), g.GO(0), g.I(2)], [g.GI(2)])]


@register_gradient("SparseToDense", copy_arguments=False)
def _sparse_to_dense_maker(g):
    return [g.op("Gather", [g.GO(0), g.I(0)], [g.GI(1)])]


@register_gradient("SparseToDenseMask")
def _sparse_to_dense_mask_maker(g):
    inputs = [g.I(0), g.GO(0)] + ([g.I(3)] if len(g.def_.input) == 4 else [])
    return [g.op("SparseToDenseMaskGradient", inputs, [g.GI(1)])]


@register_gradient("FlexibleTopK")
def _flexible_top_k_maker(g):
    return [g.op("FlexibleTopKGradient", [g.I(0), g.I(1), g.GO(0), g.O(1)], [g.GI(0)])]


@register_gradient("RowwiseMax")
def _rowwise_max_maker(g):
    return [g.op("RowwiseMaxGradient", [g.input_value(0), g.O(0), g.GO(0)], [g.GI(0)])]


@register_gradient("BooleanMask")
def _boolean_mask_maker(g):
    return [g.op("BooleanMaskGradient", [g.I(1), g.GO(0)], [g.GI(0)])]


@register_gradient("LengthsTile", copy_arguments=False)
def _lengths_tile_maker(g):
    return [g.op("LengthsSum", [g.GO(0), g.I(1)], [g.GI(0)])]


@register_gradient("RowMul", copy_arguments=False)
def _row_mul_maker(g):
    before = g.GI(1) + "before_aggregate"
    return [g.op("RowMul", [g.GO(0), g.input_value(1)], [g.GI(0)]),
            g.op("Mul", [g.GO(0), g.input_value(0)], [before]),
            g.op("ReduceTailSum", [before], [g.GI(1)])]


@register_gradient("GatherByKey")
def _gather_by_key_maker(g):
    outputs = []
    for i in range(1, len(g.def_.input)):
        outputs += ["_" + g.I(i) + "_grad_keys", g.GI(i)]
    return [g.op("Partition", [g.I(0), g.GO(0)], outputs, pack_first_input=g.arg("pack_first_input", 0))]


no_gradient("Partition", "Sharding", "LengthsPartition", "GatherRangesToDense", "OneHot", "SegmentOneHot", "BatchOneHot",
            "BatchBucketOneHot", "Percentile", "KeySplit", "NGramFromCategorical", "BooleanMaskLengths",
            "BooleanUnmask", "RowWiseArgMax", "FloatToRowwiseQuantized8Bits", "Rowwise8BitQuantizedToFloat",
            "SparseLengthsSum8BitsRowwise", "SparseLengthsWeightedSum8BitsRowwise", "SparseLengthsMean8BitsRowwise",
            "SparseLengthsWeightedMean8BitsRowwise", "GatherFused8BitRowwise", "FindDuplicateElements",
            "MergeIdLists", "UniformIntFill", "UniqueUniformFill", "RangeFill", "LengthsToWeights")
should_not_do_gradient("LengthsToSegmentIds", "LengthsToRanges", "LengthsToShape", "SegmentIdsToLengths",
                       "SegmentIdsToRanges", "LengthsGather", "GatherRanges", "Unique", "WeightedSample",
                       "WeightedMultiSampling", "PiecewiseLinearTransform", "SortAndShuffle", "Find",
                       "PadEmptySamples", "RemoveDataBlocks")
