"""Ops recommendation nets use around embedding lookups: Gather, BatchGather,
LengthsRangeFill, LengthsSum, LengthsMean, BatchMatMul."""
import numpy as np

from caffe2py.kernels.cpu.recsys import recsys_ops as K
from caffe2py.kernels.cpu.recsys.sparse_lengths import LookupInputError
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, Rank

INT32 = caffe2_pb2.TensorProto.INT32


def _wrap(ctx, roles, fn, *args, **kwargs):
    """Run a kernel, turning its input errors into Caffe2Errors naming the blob."""
    try:
        return fn(*args, **kwargs)
    except LookupInputError as exc:
        raise ctx.input_error(roles.get(exc.input, 0), str(exc)) from None


# ----------------------------------------------------------------- Gather / BatchGather

def _gather_infer(default_axis):
    def infer(ctx, ins):
        data, idx = ins
        if not data.known or not idx.known:
            return [UNKNOWN]
        axis = ctx.int("axis", default_axis) % len(data.dims)
        return [TensorType(tuple(data.dims[:axis]) + tuple(idx.dims) + tuple(data.dims[axis + 1:]), data.dtype)]
    return infer


for _name, _axis in (("Gather", 0), ("BatchGather", 1)):
    register_schema(OpSchema(
        _name, num_inputs=2, num_outputs=1, inputs=("DATA", "INDICES"), outputs=("OUTPUT",),
        args=(Arg("axis", "int", _axis, doc="axis of DATA that INDICES select along"),
              Arg("wrap_indices", "bool", False, doc="negative indices count from the end")),
        inference=_gather_infer(_axis),
        doc="Select slices of DATA along `axis` (default %d) by INDICES (any shape): output shape "
            "is DATA.shape[:axis] + INDICES.shape + DATA.shape[axis+1:]." % _axis))

    @register_kernel(_name)
    def _gather(ctx, default_axis=_axis):
        axis, wrap = ctx.int("axis", default_axis), ctx.bool("wrap_indices")

        def run(data, indices):
            if np.asarray(indices).dtype.kind not in "iu":
                raise ctx.input_error(1, "INDICES must be int32 or int64, got %s" % indices.dtype)
            if data.ndim <= axis:
                raise ctx.input_error(0, "DATA must have more than %d dims for axis %d" % (axis, axis))
            return _wrap(ctx, {"data": 0, "indices": 1}, K.gather, data, indices, axis, wrap)
        return run


# ----------------------------------------------------------------- LengthsRangeFill

register_schema(OpSchema(
    "LengthsRangeFill", num_inputs=1, num_outputs=1, inputs=("lengths",), outputs=("range_sequence",),
    inference=lambda ctx, ins: [TensorType(None, INT32)],
    doc="For each length l, the values 0..l-1, concatenated (int32)."))


@register_kernel("LengthsRangeFill")
def lengths_range_fill(ctx):
    def run(lengths):
        if lengths.ndim != 1:
            raise ctx.input_error(0, "LENGTHS must be a vector")
        return _wrap(ctx, {"lengths": 0}, K.lengths_range_fill, lengths)
    return run


# ----------------------------------------------------------------- LengthsSum / LengthsMean

def _lengths_infer(ctx, ins):
    data, lengths = ins
    if not data.known or not lengths.known:
        return [UNKNOWN]
    return [TensorType((lengths.dims[0],) + tuple(data.dims[1:]), data.dtype)]


for _name, _mean in (("LengthsSum", False), ("LengthsMean", True)):
    register_schema(OpSchema(
        _name, num_inputs=2, num_outputs=1, inputs=("DATA", "LENGTHS"), outputs=("OUTPUT",),
        inference=_lengths_infer, checks=(DTypes(1, "int"),),   # lengths are counts (NaN was read as one)
        doc="%s of consecutive DATA rows per segment given by LENGTHS (sum = DATA.shape[0]); "
            "empty segments give zeros." % ("Mean" if _mean else "Sum")))

    @register_kernel(_name)
    def _lengths_reduce(ctx, mean=_mean):
        def run(data, lengths):
            if data.dtype not in (np.float32, np.float16):
                raise ctx.input_error(0, "DATA must be float32 or float16, got %s" % data.dtype)
            if data.ndim < 1:
                raise ctx.input_error(0, "DATA must be at least 1-D")
            if lengths.ndim != 1:
                raise ctx.input_error(1, "LENGTHS must be a vector")
            return _wrap(ctx, {"data": 0, "lengths": 1}, K.lengths_reduce, data, lengths, mean)
        return run


# ----------------------------------------------------------------- BatchMatMul

def _bmm_dims(ctx, a, b):
    a, b = list(a), list(b)
    if ctx.bool("trans_a") and len(a) >= 2:
        a[-1], a[-2] = a[-2], a[-1]
    if ctx.bool("trans_b") and len(b) >= 2:
        b[-1], b[-2] = b[-2], b[-1]
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(a) == 1:
        return tuple(b[:-2]) + (b[-1],)
    if len(b) == 1:
        return tuple(a[:-1])
    batch = tuple(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    return batch + (a[-2], b[-1])


def _bmm_infer(ctx, ins):
    a, b = ins
    if not a.known or not b.known:
        return [UNKNOWN]
    try:
        return [TensorType(_bmm_dims(ctx, a.dims, b.dims), a.dtype)]
    except ValueError:
        return [UNKNOWN]


def _bmm_cost(ctx, ins):
    a, b = ins
    if not a.known or not b.known:
        return Cost()
    out = _bmm_dims(ctx, a.dims, b.dims)
    k = a.dims[-2] if ctx.bool("trans_a") and len(a.dims) >= 2 else a.dims[-1]
    n_out = float(np.prod(out, dtype=np.int64))
    return Cost(flops=2 * n_out * k, bytes_read=4 * (np.prod(a.dims) + np.prod(b.dims)),
                bytes_written=4 * n_out)


register_schema(OpSchema(
    "BatchMatMul", num_inputs=2, num_outputs=1, inputs=("A", "B"), outputs=("Y",),
    args=(Arg("trans_a", "bool", False), Arg("trans_b", "bool", False),
          Arg("broadcast", "bool", False, doc="NumPy matmul broadcasting (incl. 1-D inputs)")),
    inference=_bmm_infer, cost=_bmm_cost, checks=(Rank((0, 1), 1),),
    doc="Matrix product over the last two dims of A and B (transposed by trans_a/trans_b). "
        "Without broadcast both must have equal rank >= 2 and equal batch dims."))


@register_kernel("BatchMatMul")
def batch_matmul(ctx):
    ta, tb, bc = ctx.bool("trans_a"), ctx.bool("trans_b"), ctx.bool("broadcast")

    def run(a, b):
        return _wrap(ctx, {"data": 0}, K.batch_matmul, a, b, ta, tb, bc)
    return run
