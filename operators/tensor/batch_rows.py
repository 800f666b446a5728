"""Caffe2's AdjustBatch (pad a batch with zero rows up to max_batch_size, recording
the real size, or cut it back to a recorded size) and CopyRowsToTensor (write one row
over chosen rows of a matrix, in place)."""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

from .._common import same_as_input

DT = caffe2_pb2.TensorProto
_COST = lambda ctx, ins: Cost()  # noqa: E731


def _adjust_infer(ctx, ins):
    return [UNKNOWN, TensorType((1,), DT.INT64)][:len(ctx.outputs)]


register_schema(OpSchema(
    "AdjustBatch", num_inputs=(1, 2), num_outputs=(1, 2), allow_inplace={(0, 0)},
    inputs=("Input", "RealBatchSizeIn"), outputs=("Output", "RealBatchSizeOut"),
    args=(Arg("max_batch_size", "int", -1),), inference=_adjust_infer, cost=_COST,
    doc="With RealBatchSizeIn (int64, one value r): Output is Input's first r rows. Without it: "
        "Input padded with zero rows to max_batch_size rows (a batch already that size is kept), "
        "and RealBatchSizeOut, when asked for, holds Input's row count."))


@register_kernel("AdjustBatch")
def adjust_batch(ctx):
    max_batch = ctx.int("max_batch_size")
    want_real = len(ctx.outputs) > 1

    def run(x, real=None):
        if x.ndim < 1:
            raise ctx.input_error(0, "must be at least 1-D")
        n = x.shape[0]
        if real is not None:
            if real.size != 1 or real.dtype.kind not in "iu":
                raise ctx.input_error(1, "must hold one integer, got %s of shape %s" % (real.dtype, list(real.shape)))
            r = int(real.reshape(-1)[0])
            if not 0 <= r <= n:
                raise ctx.input_error(1, "real batch size %d is outside [0, %d]" % (r, n))
            y = x[:r].copy()
        else:
            if max_batch < 0:
                raise ctx.error("max_batch_size must be given when there is no RealBatchSizeIn input")
            if n > max_batch:
                raise ctx.input_error(0, "has %d rows, more than max_batch_size %d" % (n, max_batch))
            y = np.zeros((max_batch,) + x.shape[1:], x.dtype)
            y[:n] = x
        if want_real:
            return y, np.array([n], np.int64)
        return y
    return run


register_schema(OpSchema(
    "CopyRowsToTensor", num_inputs=3, num_outputs=1, enforce_inplace={(0, 0)},
    inputs=("input_tensor", "indices", "row"), outputs=("output_tensor",),
    inference=same_as_input(0), cost=_COST,
    doc="input_tensor (2-D) with each row named in indices replaced by row (1-D, one value per "
        "column), in place."))


@register_kernel("CopyRowsToTensor")
def copy_rows_to_tensor(ctx):
    def run(x, indices, row):
        if x.ndim != 2:
            raise ctx.input_error(0, "must be 2-D, got shape %s" % list(x.shape))
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            raise ctx.input_error(1, "must be a 1-D integer tensor, got %s of shape %s"
                                  % (indices.dtype, list(indices.shape)))
        if row.ndim != 1 or row.shape[0] != x.shape[1]:
            raise ctx.input_error(2, "width of input tensor should match lengths of row: "
                                  "%d columns, row of shape %s" % (x.shape[1], list(row.shape)))
        if indices.size and (indices.min() < 0 or indices.max() >= x.shape[0]):
            raise ctx.input_error(1, "row indices must be in [0, %d), got %s" % (x.shape[0], indices.tolist()))
        out = x.copy()
        out[indices] = row.astype(x.dtype)
        return out
    return run
