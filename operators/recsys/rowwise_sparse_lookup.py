"""SparseLengths{Sum,WeightedSum,Mean}{8,4,2}BitRowwiseSparse: lookups in a pruned fused
rowwise-quantised table (Caffe2's lengths_reducer_fused_{8bit,nbit}_rowwise_ops,
"RowwiseSparse"). COMPRESSED_INDICES_MAPPING maps an index of the unpruned table to its
row in DATA, -1 for a pruned row (it adds nothing; a mean still counts it). A mapping
of one value 0 means the table was not pruned: indices name DATA's rows directly.
Sum and WeightedSum reuse the fused lookups of sparse_lengths.py on the kept indices
(adding a pruned row's zeros would not change a float sum)."""
import numpy as np

from caffe2py.kernels.cpu.recsys import sparse_lengths as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, OpSchema, TensorType, register_kernel, register_schema

FLOAT = caffe2_pb2.TensorProto.FLOAT
_LAYOUT = {8: ("fused8", 8, 1), 4: ("fused4", 4, 2), 2: ("fused2", 4, 4)}


def _infer(bits, weighted):
    _, extra, k = _LAYOUT[bits]

    def infer(ctx, ins):
        data, lengths = ins[0], ins[3 if weighted else 2]
        if not data.known or not lengths.known or len(data.dims) != 2 or not lengths.dims:
            return [UNKNOWN]
        return [TensorType((lengths.dims[0], (data.dims[1] - extra) * k), FLOAT)]
    return infer


def _kept(ctx, mapping, indices, weights, lengths, i_idx, i_map):
    """(indices into DATA, weights, lengths) with pruned entries dropped."""
    if not isinstance(mapping, np.ndarray) or mapping.dtype != np.int32 or mapping.ndim != 1:
        raise ctx.input_error(i_map, "COMPRESSED_INDICES_MAPPING must be an int32 vector, got %s %s"
                              % (getattr(mapping, "dtype", type(mapping).__name__), list(np.shape(mapping))))
    if not isinstance(indices, np.ndarray) or indices.dtype not in (np.int32, np.int64):
        raise ctx.input_error(i_idx, "INDICES must be int32 or int64, got %s"
                              % getattr(indices, "dtype", type(indices).__name__))
    if mapping.size == 1 and mapping[0] == 0:
        return indices, weights, lengths
    flat = indices.reshape(-1).astype(np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= mapping.size))
    if bad.size:
        raise ctx.input_error(i_idx, "index %d at position %d is out of range [0, %d) of "
                                     "COMPRESSED_INDICES_MAPPING" % (flat[bad[0]], bad[0], mapping.size))
    if not isinstance(lengths, np.ndarray) or lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ctx.input_error(i_idx + 1, "LENGTHS must be an int vector")
    if lengths.size and (lengths.min() < 0 or int(lengths.sum()) != flat.size):
        raise ctx.input_error(i_idx + 1, "LENGTHS must be non-negative and sum to the %d indices" % flat.size)
    mapped = mapping[flat].astype(np.int64)
    keep = mapped >= 0
    segment = np.repeat(np.arange(lengths.size), lengths.astype(np.int64))
    new_lengths = np.bincount(segment[keep], minlength=lengths.size).astype(np.int32)
    new_weights = None if weights is None else np.ascontiguousarray(weights.reshape(-1)[keep])
    return mapped[keep], new_weights, new_lengths


def _register(bits, reduction):
    weighted = reduction == "WeightedSum"
    name = "SparseLengths%s%dBitRowwiseSparse" % (reduction, bits)
    layout = _LAYOUT[bits][0]
    inputs = ("DATA",) + (("WEIGHTS",) if weighted else ()) + ("INDICES", "LENGTHS", "COMPRESSED_INDICES_MAPPING")
    register_schema(OpSchema(
        name, num_inputs=len(inputs), num_outputs=1, inputs=inputs, outputs=("output",),
        inference=_infer(bits, weighted),
        doc="SparseLengths%s over a pruned fused %d-bit rowwise table: each index goes through "
            "COMPRESSED_INDICES_MAPPING to a row of DATA (-1: pruned, adds nothing%s); a mapping of one "
            "value 0 means no pruning." % (reduction, bits, "; the mean still divides by the full length"
                                           if reduction == "Mean" else "")))
    i_idx = 2 if weighted else 1

    @register_kernel(name)
    def factory(ctx):
        def run(*ins):
            data, indices, lengths, mapping = ins[0], ins[i_idx], ins[i_idx + 1], ins[i_idx + 2]
            weights = ins[1] if weighted else None
            if weighted and (not isinstance(weights, np.ndarray) or weights.dtype != np.float32
                             or weights.size != np.size(indices)):
                raise ctx.input_error(1, "WEIGHTS must be float32 with one value per index")
            if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
                raise ctx.input_error(0, "DATA must be a uint8 matrix of fused rows")
            kept, kept_weights, kept_lengths = _kept(ctx, mapping, indices, weights, lengths, i_idx, i_idx + 2)
            pruned = kept_lengths is not lengths
            try:
                out = K.segment_reduce(data, kept, kept_lengths, kept_weights, False,
                                       reduction == "Mean" and not pruned, layout)
            except K.LookupInputError as exc:
                roles = {"data": 0, "indices": i_idx, "lengths": i_idx + 1, "weights": 1}
                raise ctx.input_error(roles.get(exc.input, 0), str(exc)) from None
            if reduction == "Mean" and pruned:
                full = lengths.astype(np.float32)
                out = np.where(full[:, None] > 0, out / np.maximum(full, 1)[:, None], 0).astype(np.float32)
            return out
        return run


for _bits in (8, 4, 2):
    for _reduction in ("Sum", "WeightedSum", "Mean"):
        _register(_bits, _reduction)
