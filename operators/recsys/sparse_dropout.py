"""Caffe2's dropout of sparse id lists: SparseDropoutWithReplacement (each example's
whole list becomes one replacement value with probability `ratio`) and
SparseItemwiseDropoutWithReplacement (each id is replaced with probability `ratio`).
Ids are int64, lengths int32, as Caffe2 registers them."""
import numpy as np

from caffe2py.gradients import no_gradient
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto
_ARGS = (Arg("ratio", "float", 0.0, doc="probability of a drop, in [0, 1]"),
         Arg("replacement_value", "int", 0, doc="the id a dropped list (or id) becomes"))


def _checked_inputs(ctx, x, lengths):
    if x.ndim != 1 or x.dtype != np.int64:
        raise ctx.input_error(0, "Input tensor should be a 1-D int64 tensor, got %s %s" % (x.dtype, list(x.shape)))
    if lengths.ndim != 1 or lengths.dtype != np.int32:
        raise ctx.input_error(1, "Lengths tensor should be a 1-D int32 tensor, got %s %s"
                              % (lengths.dtype, list(lengths.shape)))
    if lengths.size and lengths.min() < 0:
        k = int(np.flatnonzero(lengths < 0)[0])
        raise ctx.input_error(1, "length %d at index %d is negative" % (lengths[k], k))
    if int(lengths.astype(np.int64).sum()) != x.size:
        raise ctx.input_error(1, "Inconsistent input data. Number of elements should match total length "
                                 "(lengths sum to %d, X has %d)" % (int(lengths.astype(np.int64).sum()), x.size))


def _factory(per_item):
    def factory(ctx):
        ratio = ctx.float("ratio")
        replacement = np.int64(ctx.int("replacement_value"))
        if not 0.0 <= ratio <= 1.0:
            raise ctx.error("ratio must be in [0, 1], got %g" % ratio)
        rng = np.random.default_rng(ctx.op_def.device_option.random_seed or None)

        def run(x, lengths):
            _checked_inputs(ctx, x, lengths)
            if per_item:
                kept = rng.random(x.size) >= ratio
                return np.where(kept, x, replacement), lengths.copy()
            kept = rng.random(lengths.size) >= ratio
            out_lengths = np.where(kept, lengths, 1).astype(np.int32)
            # a kept example keeps its ids; a dropped one (even an empty one) is one replacement id
            starts = np.cumsum(lengths.astype(np.int64)) - lengths
            pieces = [x[s:s + n] if keep else np.array([replacement], np.int64)
                      for s, n, keep in zip(starts, lengths, kept)]
            y = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
            return y.astype(np.int64, copy=False), out_lengths
        return run
    return factory


for _name, _per_item, _doc in (
        ("SparseDropoutWithReplacement", False,
         "Each example's ids (lengths[i] consecutive values of X) are replaced, with probability ratio, by "
         "one replacement_value (length 1, also for an empty example); outputs the ids and new lengths."),
        ("SparseItemwiseDropoutWithReplacement", True,
         "Each id of X is replaced by replacement_value with probability ratio; the lengths are unchanged.")):
    register_schema(OpSchema(
        _name, num_inputs=2, num_outputs=2, args=_ARGS, inputs=("X", "Lengths"), outputs=("Y", "OutputLengths"),
        inference=(lambda per_item: lambda ctx, ins: [
            ins[0] if per_item else TensorType(None, DT.INT64),
            TensorType(ins[1].dims, DT.INT32)])(_per_item),
        doc=_doc))
    register_kernel(_name)(_factory(_per_item))

no_gradient("SparseDropoutWithReplacement", "SparseItemwiseDropoutWithReplacement")
