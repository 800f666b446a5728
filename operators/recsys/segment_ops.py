"""Caffe2's segment reductions: {Sorted,Unsorted,SparseSorted,SparseUnsorted}Segment
{Sum,Mean,WeightedSum}, SortedSegmentRange{Sum,Mean,Max,LogSumExp,LogMeanExp},
LengthsMax, LengthsWeightedSum, ReduceFrontWeightedSum and LengthsTopK.

Input layouts follow Caffe2's reducer definitions: DATA first, then SCALARS for the
weighted reducers, then INDICES for the Sparse variants, then SEGMENT_IDS / LENGTHS.
DATA is float32 (the only type Caffe2 registers for these ops)."""
import numpy as np

from caffe2py.kernels.cpu.recsys import segments as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from ._checks import call, check_float_data, check_int_vector

DT = caffe2_pb2.TensorProto


def _cost(ctx, ins):
    data = ins[0]
    if not data.known:
        return Cost()
    n = float(np.prod(data.dims, dtype=np.int64))
    return Cost(flops=n, bytes_read=4 * n, bytes_written=0)


# --------------------------------------------------------------------------- layouts

class _Layout:
    """Input positions of one segment op: DATA, [SCALARS], [INDICES], SEGMENT_IDS/LENGTHS."""

    def __init__(self, weighted, sparse, key="SEGMENT_IDS"):
        names = ["DATA"] + (["SCALARS"] if weighted else []) + (["INDICES"] if sparse else []) + [key]
        self.names = tuple(names)
        self.scalars = 1 if weighted else None
        self.indices = names.index("INDICES") if sparse else None
        self.key = len(names) - 1
        self.roles = {"data": 0, "weights": self.scalars, "indices": self.indices,
                      "segment_ids": self.key, "lengths": self.key}

    def split(self, ins):
        return (ins[0], None if self.scalars is None else ins[self.scalars],
                None if self.indices is None else ins[self.indices], ins[self.key])


def _check_inputs(ctx, layout, data, scalars, indices, key, key_name):
    check_float_data(ctx, 0, data)
    check_int_vector(ctx, layout.key, key, key_name)
    n = key.shape[0]
    if indices is not None:
        if indices.ndim != 1:
            raise ctx.input_error(layout.indices, "INDICES must be a vector")
        if indices.dtype not in (np.int32, np.int64):
            raise ctx.input_error(layout.indices, "INDICES must be int32 or int64, got %s" % indices.dtype)
        if key_name == "SEGMENT_IDS" and indices.shape[0] != n:
            raise ctx.input_error(layout.key, "SEGMENT_IDS must have the same length as INDICES")
    elif key_name == "SEGMENT_IDS" and data.shape[0] != n:
        raise ctx.input_error(layout.key, "DATA must have the same first dimension as SEGMENT_IDS")
    if scalars is not None:
        entries = indices.shape[0] if indices is not None else data.shape[0]
        if scalars.ndim != 1:
            raise ctx.input_error(layout.scalars, "SCALARS mustn't have extra dimensions")
        if scalars.shape[0] != entries:
            raise ctx.input_error(layout.scalars, "Input 1 must have the same first dim as %s" % key_name)
        if scalars.dtype != np.float32:
            raise ctx.input_error(layout.scalars, "SCALARS must be float32, got %s" % scalars.dtype)


def _segment_infer(num_segments_arg):
    def infer(ctx, ins):
        data = ins[0]
        k = ctx.int("num_segments", -1) if num_segments_arg else -1
        if k < 0:
            return [TensorType(None, data.dtype)]
        return [TensorType((k,) + tuple(data.dims[1:]), data.dtype)]
    return infer


_DOCS = {
    "Sum": "Summation is done element-wise across slices of the input tensor.",
    "Mean": "Element-wise mean of the slices of each segment (an empty segment gives zeros).",
    "WeightedSum": "Slices are first scaled by SCALARS and then summed element-wise.",
    "Max": "Element-wise max of the slices of each segment (an empty segment gives zeros).",
    "LogSumExp": "Element-wise log of the sum of exponentials of the slices.",
    "LogMeanExp": "Element-wise log of the mean of exponentials of the slices.",
}


# --------------------------------------------------------------------------- sorted / unsorted

def _register_segment(basename, reducer, sorted_ids, sparse):
    name = basename + reducer
    weighted = reducer == "WeightedSum"
    layout = _Layout(weighted, sparse)
    args = () if sorted_ids else (Arg("num_segments", "int", -1, doc="number of output segments (-1: "
                                                                          "max(SEGMENT_IDS) + 1)"),)
    if weighted:
        args += (Arg("grad_on_weights", "bool", False, doc="gradient on SCALARS too (Lengths ops only)"),)
    order = "sorted, contiguous ids 0..K-1 without gaps" if sorted_ids else "ids in any order"
    register_schema(OpSchema(
        name, num_inputs=len(layout.names), num_outputs=1, args=args, inputs=layout.names,
        outputs=("OUTPUT",), inference=_segment_infer(not sorted_ids), cost=_cost,
        doc="%s Segments: %s.%s Output: [K] + DATA.shape[1:]. %s" % (
            "Gathers DATA[INDICES] first (Gather fused with the reduction)." if sparse else "",
            order, "" if sorted_ids else " K = num_segments, else max id + 1.", _DOCS[reducer])))

    @register_kernel(name)
    def factory(ctx):
        num_segments = ctx.int("num_segments", -1) if not sorted_ids else -1
        if num_segments < -1:
            raise ctx.error("num_segments must be -1 or >= 0, got %d" % num_segments)
        mode = K.REDUCERS[reducer]

        def run(*ins):
            data, scalars, indices, ids = layout.split(ins)
            _check_inputs(ctx, layout, data, scalars, indices, ids, "SEGMENT_IDS")
            if indices is not None:
                call(ctx, layout.roles, K.check_rows, indices, data.shape[0])
            if sorted_ids:
                offsets = call(ctx, layout.roles, K.offsets_from_sorted_ids, ids)
                return K.reduce_runs(data, offsets, mode, indices, scalars)
            bounds = K.id_range(ids)
            k = num_segments if num_segments >= 0 else bounds[1] + 1
            call(ctx, layout.roles, K.check_segment_ids, ids, k, bounds)
            return K.scatter_reduce(data, ids, k, mean=reducer == "Mean", indices=indices, weights=scalars)
        return run


for _reducer in ("Sum", "Mean", "WeightedSum"):
    for _sorted in (True, False):
        for _sparse in (False, True):
            _register_segment(("Sparse" if _sparse else "") + ("Sorted" if _sorted else "Unsorted") + "Segment",
                              _reducer, _sorted, _sparse)


# --------------------------------------------------------------------------- range reducers

def _register_range(reducer):
    name = "SortedSegmentRange" + reducer
    layout = _Layout(False, False)
    register_schema(OpSchema(
        name, num_inputs=2, num_outputs=1, inputs=layout.names, outputs=("OUTPUT",),
        inference=_segment_infer(False), cost=_cost,
        doc="Applies %s to each run of equal SEGMENT_IDS (sorted, 0..K-1 without gaps); output "
            "[K] + DATA.shape[1:]. %s" % (reducer, _DOCS[reducer])))

    @register_kernel(name)
    def factory(ctx):
        mode = K.RANGE_REDUCERS[reducer]

        def run(data, ids):
            check_float_data(ctx, 0, data)
            check_int_vector(ctx, 1, ids, "SEGMENT_IDS")
            if ids.shape[0] != data.shape[0]:
                raise ctx.input_error(1, "SEGMENT_IDS must have the same length as outer dimension of DATA")
            offsets = call(ctx, layout.roles, K.offsets_from_sorted_ids, ids)
            return K.reduce_runs(data, offsets, mode)
        return run


for _reducer in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp"):
    _register_range(_reducer)


# --------------------------------------------------------------------------- lengths reducers

def _lengths_infer(ctx, ins):
    data, lengths = ins[0], ins[-1]
    return [TensorType((lengths.dims[0],) + tuple(data.dims[1:]), data.dtype)]


def _register_lengths(reducer):
    name = "Lengths" + reducer
    weighted = reducer == "WeightedSum"
    layout = _Layout(weighted, False, key="LENGTHS")
    args = (Arg("grad_on_weights", "bool", False, doc="gradient on SCALARS too"),) if weighted else ()
    register_schema(OpSchema(
        name, num_inputs=len(layout.names), num_outputs=1, args=args, inputs=layout.names,
        outputs=("OUTPUT",), inference=_lengths_infer, cost=_cost,
        doc="Reduces consecutive runs of DATA rows given by LENGTHS (sum(LENGTHS) = DATA.shape[0]); "
            "output [len(LENGTHS)] + DATA.shape[1:]. %s" % _DOCS[reducer]))

    @register_kernel(name)
    def factory(ctx):
        mode = K.REDUCERS[reducer]

        def run(*ins):
            data, scalars, _, lengths = layout.split(ins)
            _check_inputs(ctx, layout, data, scalars, None, lengths, "LENGTHS")
            offsets = call(ctx, layout.roles, K.offsets_from_lengths, lengths, data.shape[0])
            return K.reduce_runs(data, offsets, mode, None, scalars)
        return run


_register_lengths("Max")
_register_lengths("WeightedSum")


# --------------------------------------------------------------------------- ReduceFrontWeightedSum

def _front_infer(ctx, ins):
    r = ctx.int("num_reduce_dim", 1)
    return [TensorType(tuple(ins[0].dims[r:]), ins[0].dtype)]


register_schema(OpSchema(
    "ReduceFrontWeightedSum", num_inputs=2, num_outputs=1, inputs=("DATA", "SCALARS"), outputs=("OUTPUT",),
    args=(Arg("num_reduce_dim", "int", 1, doc="how many leading dims are reduced"),
          Arg("grad_on_weights", "bool", False, doc="gradient on SCALARS too")),
    inference=_front_infer, cost=_cost,
    doc="Sum over the first num_reduce_dim dims of DATA of the slices scaled by SCALARS "
        "(shaped DATA.shape[:num_reduce_dim]); output DATA.shape[num_reduce_dim:]."))


@register_kernel("ReduceFrontWeightedSum")
def reduce_front_weighted_sum(ctx):
    r = ctx.int("num_reduce_dim")
    if r < 0:
        raise ctx.error("num_reduce_dim must be >= 0, got %d" % r)

    def run(data, scalars):
        check_float_data(ctx, 0, data)
        if r > data.ndim:
            raise ctx.input_error(0, "num_reduce_dim %d is larger than DATA's rank %d" % (r, data.ndim))
        if scalars.ndim != r:
            raise ctx.input_error(1, "SCALARS mustn't have extra dimensions")
        if tuple(scalars.shape) != tuple(data.shape[:r]):
            raise ctx.input_error(1, "SCALARS shape %s must equal DATA's leading dims %s"
                                  % (list(scalars.shape), list(data.shape[:r])))
        if scalars.dtype != np.float32:
            raise ctx.input_error(1, "SCALARS must be float32, got %s" % scalars.dtype)
        return K.reduce_front_weighted_sum(data, scalars, r)
    return run


# --------------------------------------------------------------------------- LengthsTopK

register_schema(OpSchema(
    "LengthsTopK", num_inputs=2, num_outputs=2, inputs=("DATA", "LENGTHS"), outputs=("TopKValue", "TopKIndices"),
    args=(Arg("k", "int", None, required=True, doc="values kept per segment"),),
    inference=lambda ctx, ins: [TensorType((ins[1].dims[0], ctx.int("k")), ins[0].dtype),
                                TensorType((ins[1].dims[0], ctx.int("k")), DT.INT32)],
    doc="Top k values of each segment of DATA (1-D, sum(LENGTHS) values), largest first, ties by "
        "lower position; shorter segments are padded with value 0 and index -1. Indices are "
        "positions inside the segment."))


@register_kernel("LengthsTopK")
def lengths_top_k(ctx):
    k = ctx.int("k")
    if k < 1:
        raise ctx.error("k argument must be >= 1, got %d" % k)

    def run(data, lengths):
        check_float_data(ctx, 0, data)
        check_int_vector(ctx, 1, lengths, "LENGTHS")
        offsets = call(ctx, {"lengths": 1}, K.offsets_from_lengths, lengths, data.size)
        return K.lengths_top_k(data.reshape(-1), offsets, k)
    return run
