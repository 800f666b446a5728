"""Caffe2's LengthsPad (segments of DATA padded to target_length rows each) and
LengthsSplit (every length split into n_splits nearly equal parts).
Kernels: kernels/cpu/recsys/lengths_pad_split.py."""
import numpy as np

from caffe2py.kernels.cpu.recsys import lengths_pad_split as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import output_size_problem

from ._checks import check_int_vector, scalar_of

DT = caffe2_pb2.TensorProto
_COST = lambda ctx, ins: Cost()  # noqa: E731


def _check_lengths(ctx, index, lengths):
    check_int_vector(ctx, index, lengths, "LENGTHS")
    if (lengths < 0).any():
        raise ctx.input_error(index, "lengths must be >= 0, got %d" % int(lengths.min()))


def _lengths_pad_shape(ctx, ins):
    """[len(LENGTHS) * target_length] + DATA's inner dims, in DATA's type."""
    data, lengths = ins
    target = ctx.int("target_length")
    if target < 0 or not data.known or not lengths.known or len(lengths.dims) != 1 or not data.dims:
        return TensorType(None, data.dtype)
    rows = None if lengths.dims[0] is None else lengths.dims[0] * target
    return TensorType((rows,) + tuple(data.dims[1:]), data.dtype)


register_schema(OpSchema(
    "LengthsPad", num_inputs=2, num_outputs=1, inputs=("DATA", "LENGTHS"), outputs=("PADDED_DATA",),
    args=(Arg("padding_value", "float", -1.0), Arg("target_length", "int", -1, doc="required, >= every length")),
    inference=lambda ctx, ins: [_lengths_pad_shape(ctx, ins)], cost=_COST,
    doc="Segment i of DATA (LENGTHS[i] rows) copied to rows [i * target_length, ...) of the output, "
        "the rest of each slot filled with padding_value; output has len(LENGTHS) * target_length rows."))


@register_kernel("LengthsPad")
def lengths_pad(ctx):
    target = ctx.int("target_length")
    if target < 0:
        raise ctx.error("target_length must be given and >= 0, got %d" % target)
    padding = ctx.float("padding_value")

    def run(data, lengths):
        _check_lengths(ctx, 1, lengths)
        if data.ndim < 1:
            raise ctx.input_error(0, "must be at least 1-D")
        if lengths.sum() != data.shape[0]:
            raise ctx.input_error(1, "lengths sum to %d; DATA has %d rows" % (int(lengths.sum()), data.shape[0]))
        if len(lengths) and lengths.max() > target:
            raise ctx.input_error(1, "length %d exceeds target_length %d" % (int(lengths.max()), target))
        problem = output_size_problem([len(lengths) * target] + list(data.shape[1:]), data.itemsize)
        if problem:
            raise ctx.error(problem)
        return K.lengths_pad(data, lengths, target, padding)
    return run


register_schema(OpSchema(
    "LengthsSplit", num_inputs=(1, 2), num_outputs=1, inputs=("LENGTHS", "n_split"), outputs=("Y",),
    args=(Arg("n_split", "int", 1, doc="parts per length; the second input, when given, wins"),
          Arg("n_splits", "int", 1, doc="the same (the spelling Caffe2's tests use)")),
    inference=lambda ctx, ins: [TensorType(None, DT.INT32)], cost=_COST,
    doc="int32 lengths: each LENGTHS[i] = L becomes n_split values, the first L % n_split of them "
        "L // n_split + 1, the others L // n_split."))


@register_kernel("LengthsSplit")
def lengths_split(ctx):
    # Caffe2's argument is n_split; its tests also pass n_splits, accepted as the same
    default = ctx.int("n_split") if ctx.has("n_split") else ctx.int("n_splits")

    def run(lengths, n_split=None):
        _check_lengths(ctx, 0, lengths)
        n = default if n_split is None else int(scalar_of(ctx, 1, n_split, "n_split"))
        if n <= 0:
            raise ctx.error("n_split must be > 0, got %d" % n)
        problem = output_size_problem([len(lengths) * n], 4)
        if problem:
            raise ctx.error(problem)
        return K.lengths_split(lengths, n)
    return run
