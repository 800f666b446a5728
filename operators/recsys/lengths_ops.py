"""Caffe2's segment-encoding ops and modulo sharding: LengthsToSegmentIds,
LengthsToRanges, LengthsToShape, LengthsToWeights, SegmentIdsToLengths,
SegmentIdsToRanges, LengthsTile, LengthsGather, Partition, Sharding, LengthsPartition,
GatherByKey."""
import numpy as np

from caffe2py.kernels.cpu.recsys import lengths as K
from caffe2py.kernels.cpu.recsys import ranges as R
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._checks import call, check_int, check_int_vector

DT = caffe2_pb2.TensorProto
_LENGTHS = {"lengths": 0}


def _int_vector_op(name, doc, kernel, infer, arg=()):
    register_schema(OpSchema(name, num_inputs=1, num_outputs=1, inputs=("lengths",), args=arg,
                             outputs=("output",), inference=infer, doc=doc))

    @register_kernel(name)
    def factory(ctx):
        extra = {a.name: ctx.float(a.name) for a in arg}

        def run(lengths):
            check_int_vector(ctx, 0, lengths, "Input")
            return call(ctx, _LENGTHS, kernel, lengths, **extra)
        return run


_int_vector_op("LengthsToSegmentIds", "Segment id of every position: [1, 3, 0, 2] -> [0, 1, 1, 1, 3, 3] (int32).",
               K.lengths_to_segment_ids, lambda ctx, ins: [TensorType(None, DT.INT32)])
_int_vector_op("LengthsToRanges", "(offset, length) per segment: [1, 3, 0, 2] -> [[0, 1], [1, 3], [4, 0], [4, 2]], "
               "in the lengths' type.", K.lengths_to_ranges,
               lambda ctx, ins: [TensorType(tuple(ins[0].dims) + (2,), ins[0].dtype)])
_int_vector_op("LengthsToShape", "N equal lengths L -> the shape [N, L] (int32) of their values as a matrix.",
               K.lengths_to_shape, lambda ctx, ins: [TensorType((2,), DT.INT32)])
_int_vector_op("LengthsToWeights", "Each length l repeated l times as 1 / l^power (float32).",
               K.lengths_to_weights, lambda ctx, ins: [TensorType(None, DT.FLOAT)],
               arg=(Arg("power", "float", 0.5, doc="n of 1/pow(length, n)"),))


def _segment_ids_op(name, kernel, doc, columns):
    register_schema(OpSchema(
        name, num_inputs=(1, 2), num_outputs=1, inputs=("segment_ids", "data"), outputs=("lengths",),
        inference=lambda ctx, ins: [TensorType((ins[1].dims[0],) + columns, DT.INT32) if len(ins) > 1
                                    else TensorType(None, DT.INT32)],
        doc=doc))

    @register_kernel(name)
    def factory(ctx):
        def run(ids, data=None):
            ok_2d = name == "SegmentIdsToLengths" and ids.ndim == 2 and 1 in ids.shape
            if ids.ndim != 1 and not ok_2d:
                raise ctx.input_error(0, "Input must be a vector.")
            check_int(ctx, 0, ids, "segment_ids")
            n = None
            if data is not None:
                if np.ndim(data) < 1:
                    raise ctx.input_error(1, "data must be at least 1-D")
                n = data.shape[0]
            return call(ctx, {"segment_ids": 0}, kernel, ids, n)
        return run


_segment_ids_op("SegmentIdsToLengths", K.segment_ids_to_lengths, "Sorted segment ids -> segment lengths (int32); "
                "segments with no id get 0. K = last id + 1, or the first dim of the optional `data`.", ())
_segment_ids_op("SegmentIdsToRanges", K.segment_ids_to_ranges, "Sorted segment ids -> (start, length) per "
                "segment (int32). K = last id + 1, or the first dim of the optional `data`.", (2,))


# --------------------------------------------------------------------------- LengthsTile / LengthsGather

register_schema(OpSchema(
    "LengthsTile", num_inputs=2, num_outputs=1, inputs=("DATA", "LENGTHS"), outputs=("OUTPUT",),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype)],
    doc="Each outer row DATA[i] repeated LENGTHS[i] times (len(LENGTHS) = DATA.shape[0])."))


@register_kernel("LengthsTile")
def lengths_tile(ctx):
    def run(data, lengths):
        if lengths.ndim != 1:
            raise ctx.input_error(1, "LENGTHS must be 1-D")
        check_int(ctx, 1, lengths, "LENGTHS")
        if data.ndim < 1:
            raise ctx.input_error(0, "DATA should be at least 1-D")
        return call(ctx, {"lengths": 1}, K.lengths_tile, data, lengths)
    return run


register_schema(OpSchema(
    "LengthsGather", num_inputs=3, num_outputs=1, inputs=("ITEMS", "LENGTHS", "INDICES"), outputs=("OUTPUT",),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype)],
    doc="The ITEMS of the segments (given by LENGTHS) chosen by INDICES, concatenated."))


@register_kernel("LengthsGather")
def lengths_gather(ctx):
    def run(items, lengths, indices):
        if items.ndim < 1:
            raise ctx.input_error(0, "ITEMS should be at least 1-D")
        if lengths.ndim != 1:
            raise ctx.input_error(1, "LENGTHS should be 1-D")
        if indices.ndim != 1:
            raise ctx.input_error(2, "INDICES should be 1-D")
        check_int(ctx, 1, lengths, "LENGTHS")
        check_int(ctx, 2, indices, "INDICES")
        return call(ctx, {"lengths": 1, "indices": 2}, R.lengths_gather, items, lengths, indices)
    return run


# --------------------------------------------------------------------------- sharding

_PACK = (Arg("pack_first_input", "bool", False, doc="the first tensor's values become floor(x / partitions)"),)


def _check_extras(ctx, main_index, main, extras):
    """Caffe2 asks each leading dim of an extra input to be at least the main input's
    (not equal): the rows it partitions are then the extra input's first main.size
    blocks, in memory order."""
    for i, x in enumerate(extras, start=main_index + 1):
        if x.ndim < main.ndim or any(a < b for a, b in zip(x.shape, main.shape)):
            raise ctx.input_error(i, "Prefix of extra input's shape must match main input's shape (each of "
                                     "its first %d dims at least %s), input: %d, got shape %s"
                                  % (main.ndim, list(main.shape), i, list(x.shape)))
        if x.dtype == object:       # Caffe2 copies raw bytes: strings and other objects refused
            raise ctx.input_error(i, "Only primitive types are supported, input %d holds %s" % (i, x.dtype))


def _as_outputs(arrays):
    """A kernel returns its only output bare (a 1-tuple would become a (1, N) array)."""
    return tuple(arrays) if len(arrays) > 1 else arrays[0]


register_schema(OpSchema(
    "Partition", num_inputs=(1, None), num_outputs=(1, None), args=_PACK,
    inputs_outputs_check=lambda i, o: i > 0 and o > 0 and o % i == 0,
    doc="Shards the int tensor input 0 by value mod P (P = outputs / inputs), keeping order; "
        "extra inputs (same leading shape) follow their keys. Outputs: X_0_part_0, X_1_part_0, ..., "
        "X_0_part_1, ..."))


def _partition_kernel(input_major):
    """Partition's kernel factory; input_major: Sharding's output order (output i * P + j
    is input i's shard j) instead of Partition's (output j * inputs + i)."""
    def factory(ctx):
        parts = ctx.n_outputs // ctx.n_inputs
        pack = ctx.bool("pack_first_input")

        def run(main, *extras):
            check_int(ctx, 0, main, "input 0")
            _check_extras(ctx, 0, main, extras)
            shards = K.partition(main, extras, parts, pack)
            if input_major:
                return _as_outputs([shards[j][i] for i in range(1 + len(extras)) for j in range(parts)])
            return _as_outputs([x for shard in shards for x in shard])
        return run
    return factory


register_kernel("Partition")(_partition_kernel(input_major=False))


register_schema(OpSchema(
    "Sharding", num_inputs=(1, None), num_outputs=(1, None), args=_PACK,
    inputs_outputs_check=lambda i, o: i > 0 and o > 0 and o % i == 0,
    doc="Early Caffe2's name of Partition, with outputs ordered input-major: X_0_part_0, "
        "X_0_part_1, ..., X_1_part_0, ... (P = outputs / inputs)."))


# Caffe2's first partition op (ShardingOp, later renamed Partition): the same split
register_kernel("Sharding")(_partition_kernel(input_major=True))


register_schema(OpSchema(
    "LengthsPartition", num_inputs=(2, None), num_outputs=(1, None), args=_PACK,
    inputs_outputs_check=lambda i, o: i >= 2 and o > 0 and o % i == 0,
    doc="Partition of input 1 (a 1-D int tensor) by value mod P, with input 0 the LENGTHS of its "
        "segments: each shard's lengths count the segment's keys that went to it."))


@register_kernel("LengthsPartition")
def lengths_partition(ctx):
    parts = ctx.n_outputs // ctx.n_inputs
    pack = ctx.bool("pack_first_input")

    def run(lengths, main, *extras):
        check_int_vector(ctx, 0, lengths, "LENGTHS")
        if main.ndim != 1:
            raise ctx.input_error(1, "Only 1-D tensors supported as a partitioning tensor for sharding")
        check_int(ctx, 1, main, "input 1")
        _check_extras(ctx, 1, main, extras)
        counts = call(ctx, {"lengths": 0}, K.lengths_partition_lengths, lengths, main, parts)
        if parts == 1:
            return (lengths.astype(np.int32), main.copy()) + tuple(x.copy() for x in extras)
        shards = K.partition(main, extras, parts, pack)
        return tuple(x for j, shard in enumerate(shards) for x in [counts[j]] + shard)
    return run


register_schema(OpSchema(
    "GatherByKey", num_inputs=(2, None), num_outputs=1, inputs=("keys", "sharded_values"), outputs=("values",),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims) + tuple(ins[1].dims[1:]), ins[1].dtype)],
    doc="Inverse of Partition: values of shards 0..P-1 (P = inputs - 1) put back in the order of the "
        "full 1-D keys tensor."))


@register_kernel("GatherByKey")
def gather_by_key(ctx):
    def run(keys, *shards):
        check_int(ctx, 0, keys, "keys")
        if keys.ndim != 1:
            raise ctx.input_error(0, "Only 1D keys tensor supported currently.")
        for i, s in enumerate(shards, start=1):
            if s.ndim < 1:
                raise ctx.input_error(i, "sharded values must be at least 1-D")
            if s.dtype != shards[0].dtype or s.shape[1:] != shards[0].shape[1:]:
                raise ctx.input_error(i, "shard type/shape %s %s differs from the first shard's %s %s"
                                      % (s.dtype, list(s.shape[1:]), shards[0].dtype, list(shards[0].shape[1:])))
        total = sum(s.shape[0] for s in shards)
        if total != keys.size:
            raise ctx.input_error(0, "%d keys but the shards hold %d rows" % (keys.size, total))
        roles = {"shard%d" % j: j + 1 for j in range(len(shards))}
        return call(ctx, roles, K.gather_by_key, keys, list(shards))
    return run
