"""ONNX translations of the embedding lookups (sparse_lengths.py) in standard
ONNX ops, so any runtime runs them:

    lengths -> starts (CumSum - lengths), a [B, max length] grid of positions
               into INDICES and a mask of the valid ones (Range, Less, Where)
    rows     = Gather(DATA, Gather(INDICES, positions))        [B, L, D...]
    output   = ReduceSum(masked rows (x weights), axis 1)       [B, D...]
               (Mean: / max(length, 1); empty segments give zeros, as in Caffe2)

Fused 8-bit rowwise tables (uint8 rows with a float32 scale and bias at the
end) are split at export time into a uint8 value table and float32 scale and
bias vectors, so the graph dequantises with Cast and Mul:
    sum_j w_j (scale_j q_j + bias_j) = ReduceSum(q * (w scale)) + ReduceSum(w bias)
the same factoring Caffe2's kernels use. The table must come from the init net.
"""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter

_FLOAT_OPS = {"SparseLengthsSum": "Sum", "SparseLengthsWeightedSum": "WeightedSum",
              "SparseLengthsMean": "Mean"}
_FUSED8_OPS = {"SparseLengthsSumFused8BitRowwise": "Sum",
               "SparseLengthsWeightedSumFused8BitRowwise": "WeightedSum",
               "SparseLengthsMeanFused8BitRowwise": "Mean"}
_FORM = ("Gather of INDICES over a [segments, max length] grid built from LENGTHS (CumSum, Range, Less, "
         "Where), Gather of DATA rows, ReduceSum over the segment axis (Mean divides by the length)")


def segment_grid(ex, lengths_name):
    """(positions [B, L] int64 into INDICES, valid [B, L] bool, lengths [B] int64)."""
    lengths = lengths_name
    if ex.dtype(lengths) != np.dtype(np.int64):
        lengths = ex.cast(lengths, np.int64)
    ends = ex.node("CumSum", [lengths, ex.scalar(0, np.int64, "axis0")])
    starts = ex.node("Sub", [ends, lengths])
    # a 0 joins the lengths so that the max of no segments is 0, not an error
    padded = ex.node("Concat", [lengths, ex.int64s([0], "zero")], axis=0)
    longest = ex.reduce("ReduceMax", padded, [0], keepdims=False)
    steps = ex.node("Range", [ex.scalar(0, np.int64, "zero_s"), longest, ex.scalar(1, np.int64, "one_s")])
    positions = ex.node("Add", [ex.unsqueeze(starts, [1]), steps])
    valid = ex.node("Less", [steps, ex.unsqueeze(lengths, [1])])
    safe = ex.node("Where", [valid, positions, ex.scalar(0, np.int64, "zero_s")])
    return safe, valid, lengths


def _mean(ex, total, lengths, extra_dims, out):
    count = ex.cast(ex.node("Max", [lengths, ex.scalar(1, np.int64, "one_s")]), np.float32)
    count = ex.unsqueeze(count, list(range(1, 1 + extra_dims)))
    return ex.node("Div", [total, count], [out])


def _io(ex, reduction):
    weighted = reduction == "WeightedSum"
    if weighted:
        data, weights, indices, lengths = ex.inputs
    else:
        (data, indices, lengths), weights = ex.inputs, None
    return data, weights, indices, lengths


@register_exporter(*_FLOAT_OPS, onnx_form=_FORM + "; float16 tables are cast to float32 after the Gather")
def export_sparse_lengths(ex):
    reduction = _FLOAT_OPS[ex.type]
    data, weights, indices, lengths = _io(ex, reduction)
    rest = ex.need_rank(data, "the lookup's output has DATA's trailing dims") - 1
    grid, valid, lengths64 = segment_grid(ex, lengths)
    ids = ex.node("Gather", [indices, grid], axis=0)
    rows = ex.node("Gather", [data, ids], axis=0)
    if ex.dtype(data) != np.dtype(np.float32):
        rows = ex.cast(rows, np.float32)
    row_mask = ex.unsqueeze(valid, list(range(2, 2 + rest))) if rest else valid
    zero = ex.scalar(0.0, np.float32, "zero_f")
    rows = ex.node("Where", [row_mask, rows, zero])
    if weights is not None:
        w = ex.node("Gather", [weights, grid], axis=0)
        if ex.dtype(weights) != np.dtype(np.float32):
            w = ex.cast(w, np.float32)
        w = ex.node("Where", [valid, w, zero])
        rows = ex.node("Mul", [rows, ex.unsqueeze(w, list(range(2, 2 + rest))) if rest else w])
    if reduction == "Mean":
        total = ex.reduce("ReduceSum", rows, [1], keepdims=False)
        _mean(ex, total, lengths64, rest, ex.outputs[0])
    else:
        ex.reduce("ReduceSum", rows, [1], keepdims=False, out=ex.outputs[0])


def _split_fused8(ex, data):
    """(uint8 values [R, D], float32 scale [R], float32 bias [R]) constants of a
    fused table, made once per table."""
    key = ("fused8", data)
    found = ex.graph.derived.get(key)
    if found is not None:
        return found
    table = ex.value(data)
    if table is None:
        raise ex.error("a fused 8-bit table must be a constant of the init net to be exported (its scale "
                       "and bias are split off at export time)", blob=data)
    if table.dtype != np.uint8 or table.ndim != 2 or table.shape[1] <= 8:
        raise ex.error("expected uint8 fused rows [rows, D + 8], got %s %s" % (table.dtype, list(table.shape)),
                       blob=data)
    d = table.shape[1] - 8
    scale_bias = np.ascontiguousarray(table[:, d:]).view("<f4").astype(np.float32)
    name = ex.graph.original.get(data, data)
    found = (ex.graph.constant(np.ascontiguousarray(table[:, :d]), name + "_quantized"),
             ex.graph.constant(np.ascontiguousarray(scale_bias[:, 0]), name + "_scale"),
             ex.graph.constant(np.ascontiguousarray(scale_bias[:, 1]), name + "_bias"))
    ex.graph.derived[key] = found
    return found


@register_exporter(*_FUSED8_OPS, onnx_form=_FORM + "; the fused table is split into uint8 values and "
                                                  "float32 scale / bias, dequantised with Cast and Mul")
def export_sparse_lengths_fused8(ex):
    reduction = _FUSED8_OPS[ex.type]
    data, weights, indices, lengths = _io(ex, reduction)
    values, scale, bias = _split_fused8(ex, data)
    grid, valid, lengths64 = segment_grid(ex, lengths)
    ids = ex.node("Gather", [indices, grid], axis=0)
    zero = ex.scalar(0.0, np.float32, "zero_f")
    s = ex.node("Gather", [scale, ids], axis=0)
    b = ex.node("Gather", [bias, ids], axis=0)
    if weights is not None:
        w = ex.node("Gather", [weights, grid], axis=0)
        if ex.dtype(weights) != np.dtype(np.float32):
            w = ex.cast(w, np.float32)
        s = ex.node("Mul", [s, w])
        b = ex.node("Mul", [b, w])
    s = ex.node("Where", [valid, s, zero])
    b = ex.node("Where", [valid, b, zero])
    q = ex.cast(ex.node("Gather", [values, ids], axis=0), np.float32)
    scaled = ex.reduce("ReduceSum", ex.node("Mul", [q, ex.unsqueeze(s, [2])]), [1], keepdims=False)
    offset = ex.reduce("ReduceSum", b, [1], keepdims=True)
    if reduction == "Mean":
        total = ex.node("Add", [scaled, offset])
        _mean(ex, total, lengths64, 1, ex.outputs[0])
    else:
        ex.node("Add", [scaled, offset], [ex.outputs[0]])
