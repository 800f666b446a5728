"""Caffe2's sparse-feature dropout with replacement, for id lists (X values with
Lengths per example): SparseDropoutWithReplacement drops whole examples (each
becomes the single id replacement_value) and SparseItemwiseDropoutWithReplacement
drops single ids (each becomes replacement_value, lengths unchanged). Each example
or id is dropped with probability ratio; the op's random_seed seeds the draws."""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from ._checks import check_int_vector

DT = caffe2_pb2.TensorProto
_ARGS = (Arg("ratio", "float", 0.0, doc="probability of dropping"),
         Arg("replacement_value", "int", 0, doc="the id written in place of what is dropped"))


def _setup(ctx):
    ratio = ctx.float("ratio")
    if not 0.0 <= ratio <= 1.0:
        raise ctx.error("ratio must be in [0, 1], got %g" % ratio)
    option = ctx.op_def.device_option
    seed = option.random_seed if ctx.op_def.HasField("device_option") and option.HasField("random_seed") else None
    return ratio, ctx.int("replacement_value"), np.random.default_rng(seed)


def _check(ctx, x, lengths):
    check_int_vector(ctx, 0, x, "X")
    if x.dtype != np.int64:
        raise ctx.input_error(0, "must hold int64 ids, got %s" % x.dtype)
    check_int_vector(ctx, 1, lengths, "Lengths")
    if (lengths < 0).any() or lengths.sum() != x.size:
        raise ctx.input_error(1, "lengths must be >= 0 and sum to X's %d values, got %s" % (x.size, lengths.tolist()))


def _register(op_type, doc):
    register_schema(OpSchema(
        op_type, num_inputs=2, num_outputs=2, inputs=("X", "Lengths"), outputs=("Y", "OutputLengths"),
        args=_ARGS, inference=lambda ctx, ins: [TensorType(None, DT.INT64), TensorType(None, DT.INT32)],
        cost=lambda ctx, ins: Cost(), doc=doc))


_register("SparseDropoutWithReplacement",
          "Each example (a Lengths segment of X) is dropped with probability ratio: its ids become one "
          "replacement_value and its length 1; kept examples are copied.")
_register("SparseItemwiseDropoutWithReplacement",
          "Each id of X is replaced by replacement_value with probability ratio; lengths are unchanged.")


@register_kernel("SparseDropoutWithReplacement")
def sparse_dropout_with_replacement(ctx):
    ratio, replacement, rng = _setup(ctx)

    def run(x, lengths):
        _check(ctx, x, lengths)
        drop = rng.random(lengths.size) < ratio
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        pieces = [np.array([replacement], np.int64) if d else x[s:s + n]
                  for d, s, n in zip(drop, starts, lengths)]
        y = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        return y, np.where(drop, 1, lengths).astype(np.int32)
    return run


@register_kernel("SparseItemwiseDropoutWithReplacement")
def sparse_itemwise_dropout_with_replacement(ctx):
    ratio, replacement, rng = _setup(ctx)

    def run(x, lengths):
        _check(ctx, x, lengths)
        drop = rng.random(x.size) < ratio
        return np.where(drop, np.int64(replacement), x), lengths.astype(np.int32)
    return run
