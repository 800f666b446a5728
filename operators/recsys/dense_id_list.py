"""Caffe2's DenseVectorToIdList: a dense (N, D) matrix to an id list, the column
indices of each row's non-zero entries."""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Cost, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto

register_schema(OpSchema(
    "DenseVectorToIdList", num_inputs=1, num_outputs=2, inputs=("values",), outputs=("out_lengths", "out_values"),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0],) if ins[0].known and ins[0].dims else None, DT.INT32),
                                TensorType(None, DT.INT64)],
    cost=lambda ctx, ins: Cost(),
    doc="For each row of the 2-D input: out_lengths (int32) counts its non-zero entries and "
        "out_values (int64) lists their column indices, row after row."))


@register_kernel("DenseVectorToIdList")
def dense_vector_to_id_list(ctx):
    def run(x):
        if x.ndim != 2:
            raise ctx.input_error(0, "must be 2-D (batch, features), got shape %s" % list(x.shape))
        nonzero = x != 0
        lengths = nonzero.sum(axis=1).astype(np.int32)
        values = np.nonzero(nonzero)[1].astype(np.int64)
        return lengths, values
    return run
