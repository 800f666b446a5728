"""ONNX translations of the embedding lookups (sparse_lengths.py) in standard
ONNX ops, so any runtime runs them. Two forms, by target opset:

opset 16 and later (the default): each index's segment from LENGTHS, then one
scatter-add, work proportional to the number of indices:
    ends    = CumSum(lengths); marks[end] += 1 (ScatterND add on zeros[L + 1])
    segment = CumSum(marks)[:L]                 (index j lies in segment #ends <= j)
    rows    = Gather(DATA, INDICES) (x WEIGHTS)                       [L, D...]
    output  = ScatterND(zeros[B, D...], segment, rows, reduction="add")

opsets 13 to 15 (no scatter reduction): ReduceSum over a padded grid
    starts  = CumSum(lengths) - lengths; a [B, max length] grid of positions
              into INDICES with a mask of the valid ones (Range, Less, Where)
    output  = ReduceSum(masked Gather(DATA, Gather(INDICES, grid)), axis 1)
which costs B x max length rows: one long segment makes every segment that long
(benchmarks/onnx_export_bench.py: 8x slower than the scatter form on uniform
lengths, 40x with one segment 10x the mean).

Mean divides by max(length, 1): empty segments give zeros, as in Caffe2. Fused
8-bit rowwise tables (uint8 rows, float32 scale and bias at the end) are split
at export time into a uint8 value table and float32 scale / bias vectors, so the
graph dequantises with Cast, Mul and Add: row = q * (w scale) + w bias (the
weight folded into scale and bias as Caffe2's kernels do). Such a table must be
a constant of the init net.
"""
import numpy as np

from caffe2py.onnx.export_registry import register_exporter

_FLOAT_OPS = {"SparseLengthsSum": "Sum", "SparseLengthsWeightedSum": "WeightedSum",
              "SparseLengthsMean": "Mean"}
_FUSED8_OPS = {"SparseLengthsSumFused8BitRowwise": "Sum",
               "SparseLengthsWeightedSumFused8BitRowwise": "WeightedSum",
               "SparseLengthsMeanFused8BitRowwise": "Mean"}
_FORM = ("opset >= 16: Gather of DATA rows, each index's segment from LENGTHS (CumSum, ScatterND add, "
         "CumSum), ScatterND reduction=add into zeros; opsets 13-15: ReduceSum over a padded "
         "[segments, max length] Gather grid (Range, Less, Where); Mean divides by max(length, 1)")
SCATTER_OPSET = 16


def _int64(ex, name):
    return name if ex.dtype(name) == np.dtype(np.int64) else ex.cast(name, np.int64)


def _io(ex, reduction):
    if reduction == "WeightedSum":
        data, weights, indices, lengths = ex.inputs
    else:
        (data, indices, lengths), weights = ex.inputs, None
    return data, weights, indices, _int64(ex, lengths)


def _float32(ex, name):
    return name if ex.dtype(name) == np.dtype(np.float32) else ex.cast(name, np.float32)


def _trailing(ex, x, rest):
    """x [n] viewed as [n, 1, ...] against rows with `rest` trailing dims."""
    return ex.unsqueeze(x, list(range(1, 1 + rest))) if rest else x


def _mean(ex, total, lengths, rest, out):
    count = ex.cast(ex.node("Max", [lengths, ex.scalar(1, np.int64, "one_s")]), np.float32)
    return ex.node("Div", [total, _trailing(ex, count, rest)], [out])


# ----------------------------------------------------------------- scatter form (opset >= 16)

def segment_of_each_index(ex, indices, lengths):
    """[L, 1] int64: the segment each position of INDICES belongs to."""
    ends = ex.node("CumSum", [lengths, ex.scalar(0, np.int64, "axis0")])
    count = ex.shape_of(indices)
    slots = ex.node("Add", [count, ex.int64s([1], "one")])
    zeros = ex.node("ConstantOfShape", [slots], value=_tensor_attr(np.zeros(1, np.int64)))
    ones = ex.node("ConstantOfShape", [ex.shape_of(lengths)], value=_tensor_attr(np.ones(1, np.int64)))
    marks = ex.node("ScatterND", [zeros, ex.unsqueeze(ends, [1]), ones], reduction="add")
    running = ex.node("CumSum", [marks, ex.scalar(0, np.int64, "axis0")])
    segment = ex.node("Slice", [running, ex.int64s([0], "zero"), count])
    return ex.unsqueeze(segment, [1])


def _tensor_attr(value):
    from onnx import numpy_helper
    return numpy_helper.from_array(value)


def scatter_sum(ex, rows, segment, lengths, tail_shape, out):
    """ScatterND add of rows [L, ...] by segment into zeros [B, ...]."""
    shape = ex.node("Concat", [ex.shape_of(lengths), tail_shape], axis=0)
    zeros = ex.node("ConstantOfShape", [shape], value=_tensor_attr(np.zeros(1, np.float32)))
    return ex.node("ScatterND", [zeros, segment, rows], None if out is None else [out], reduction="add")


# ----------------------------------------------------------------- grid form (opsets 13-15)

def segment_grid(ex, lengths):
    """(positions [B, M] int64 into INDICES, valid [B, M] bool) for M = max length."""
    ends = ex.node("CumSum", [lengths, ex.scalar(0, np.int64, "axis0")])
    starts = ex.node("Sub", [ends, lengths])
    # a 0 joins the lengths so that the max of no segments is 0, not an error
    padded = ex.node("Concat", [lengths, ex.int64s([0], "zero")], axis=0)
    longest = ex.reduce("ReduceMax", padded, [0], keepdims=False)
    steps = ex.node("Range", [ex.scalar(0, np.int64, "zero_s"), longest, ex.scalar(1, np.int64, "one_s")])
    positions = ex.node("Add", [ex.unsqueeze(starts, [1]), steps])
    valid = ex.node("Less", [steps, ex.unsqueeze(lengths, [1])])
    safe = ex.node("Where", [valid, positions, ex.scalar(0, np.int64, "zero_s")])
    return safe, valid


def _grid_sum(ex, rows, valid, rest, out):
    """Masked rows [B, M, ...] summed over M."""
    mask = ex.unsqueeze(valid, list(range(2, 2 + rest))) if rest else valid
    rows = ex.node("Where", [mask, rows, ex.scalar(0.0, np.float32, "zero_f")])
    return ex.reduce("ReduceSum", rows, [1], keepdims=False, out=out)


# ----------------------------------------------------------------- float tables

@register_exporter(*_FLOAT_OPS, onnx_form=_FORM + "; float16 tables are cast to float32 after the Gather")
def export_sparse_lengths(ex):
    reduction = _FLOAT_OPS[ex.type]
    data, weights, indices, lengths = _io(ex, reduction)
    rest = ex.need_rank(data, "the lookup's output has DATA's trailing dims") - 1
    out = None if reduction == "Mean" else ex.outputs[0]
    if ex.opset >= SCATTER_OPSET:
        rows = _float32(ex, ex.node("Gather", [data, indices], axis=0))
        if weights is not None:
            rows = ex.node("Mul", [rows, _trailing(ex, _float32(ex, weights), rest)])
        total = scatter_sum(ex, rows, segment_of_each_index(ex, indices, lengths), lengths,
                            ex.shape_of(data, 1), out)
    else:
        grid, valid = segment_grid(ex, lengths)
        rows = _float32(ex, ex.node("Gather", [data, ex.node("Gather", [indices, grid], axis=0)], axis=0))
        if weights is not None:
            w = _float32(ex, ex.node("Gather", [weights, grid], axis=0))
            rows = ex.node("Mul", [rows, ex.unsqueeze(w, list(range(2, 2 + rest))) if rest else w])
        total = _grid_sum(ex, rows, valid, rest, out)
    if reduction == "Mean":
        _mean(ex, total, lengths, rest, ex.outputs[0])


# ----------------------------------------------------------------- fused 8-bit tables

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
             ex.graph.constant(np.ascontiguousarray(scale_bias[:, 1]), name + "_bias"), d)
    ex.graph.derived[key] = found
    return found


@register_exporter(*_FUSED8_OPS, onnx_form=_FORM + "; the fused table is split into uint8 values and "
                                                  "float32 scale / bias, dequantised with Cast, Mul, Add")
def export_sparse_lengths_fused8(ex):
    reduction = _FUSED8_OPS[ex.type]
    data, weights, indices, lengths = _io(ex, reduction)
    values, scale, bias, width = _split_fused8(ex, data)
    scatter = ex.opset >= SCATTER_OPSET
    if scatter:
        ids, w = indices, weights
    else:
        grid, valid = segment_grid(ex, lengths)
        ids = ex.node("Gather", [indices, grid], axis=0)
        w = None if weights is None else ex.node("Gather", [weights, grid], axis=0)
    s = ex.node("Gather", [scale, ids], axis=0)
    b = ex.node("Gather", [bias, ids], axis=0)
    if w is not None:
        w = _float32(ex, w)
        s = ex.node("Mul", [s, w])
        b = ex.node("Mul", [b, w])
    q = ex.cast(ex.node("Gather", [values, ids], axis=0), np.float32)
    tail = 1 if scatter else 2
    rows = ex.node("Add", [ex.node("Mul", [q, ex.unsqueeze(s, [tail])]), ex.unsqueeze(b, [tail])])
    out = None if reduction == "Mean" else ex.outputs[0]
    if scatter:
        total = scatter_sum(ex, rows, segment_of_each_index(ex, indices, lengths), lengths,
                            ex.int64s([width], "width"), out)
    else:
        total = _grid_sum(ex, rows, valid, 1, out)
    if reduction == "Mean":
        _mean(ex, total, lengths, 1, ex.outputs[0])
