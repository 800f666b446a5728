"""Caffe2's EstimateAllBlobSizes: every blob of the workspace (its own outputs
included, estimated as what they will hold) with an estimate of its serialized size
in bytes, under the same per-blob SerializationOptions Save takes: per chunk the
name plus a fixed 50 bytes of TensorProto fields, plus a per-element size by type."""
import math

import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.serialization import DEFAULT_CHUNK_SIZE, OPTION_DEFAULT_CHUNK, OPTION_NO_CHUNKING, serialize_blob

from .persistence import _options_for, _serialization_options

DT = caffe2_pb2.TensorProto
PER_CHUNK_OVERHEAD = 50
STRING_ELEMENT = 50          # string lengths are unknown to the estimate: a fixed guess
_BFLOAT16 = caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16


def element_size(dtype, float_format):
    """Bytes per element as serialized: raw floats (bfloat16 when asked, as Save writes
    it), 16-bit integers and float16 as varints of up to 3 bytes, others by width."""
    dtype = np.dtype(dtype)
    if dtype == object:
        return STRING_ELEMENT
    if dtype == np.float32:
        return 2 if float_format == _BFLOAT16 else 4
    if dtype.itemsize == 2:
        return 3
    return dtype.itemsize


def chunks(count, chunk_size):
    if chunk_size == OPTION_NO_CHUNKING or count == 0:
        return 1
    size = DEFAULT_CHUNK_SIZE if chunk_size == OPTION_DEFAULT_CHUNK else chunk_size
    return max(1, math.ceil(count / size))


def estimate_tensor(name, count, dtype, chunk_size, float_format):
    return (chunks(count, chunk_size) * (len(name) + PER_CHUNK_OVERHEAD)
            + count * element_size(dtype, float_format))


register_schema(OpSchema(
    "EstimateAllBlobSizes", num_inputs=0, num_outputs=2, outputs=("blob_names", "blob_sizes"),
    args=(Arg("include_shared", "bool", True, doc="also blobs of parent workspaces"),
          Arg("options", "string", "", doc="a serialized SerializationOptions, as Save takes")),
    inference=lambda ctx, ins: [TensorType(None, DT.STRING), TensorType(None, DT.INT64)],
    cost=lambda ctx, ins: Cost(),
    doc="blob_names (strings) and blob_sizes (int64): every blob and the estimated bytes Save "
        "would write for it with these options."))


@register_kernel("EstimateAllBlobSizes")
def estimate_all_blob_sizes(ctx):
    ctx.use_workspace()
    options = _serialization_options(ctx)
    own = list(ctx.outputs)

    def run(blobs):
        names = sorted(set(blobs.keys()) | set(own))
        sizes = []
        for name in names:
            chunk_size, float_format = _options_for(options, name)
            value = None if name in own else blobs.get(name)
            if name == own[0]:
                sizes.append(estimate_tensor(name, len(names), object, chunk_size, float_format))
            elif name == own[1]:
                sizes.append(estimate_tensor(name, len(names), np.int64, chunk_size, float_format))
            elif isinstance(value, np.ndarray):
                sizes.append(estimate_tensor(name, value.size, value.dtype, chunk_size, float_format))
            else:
                try:                      # other objects: their serialized records, measured
                    sizes.append(sum(len(data) for _, data in serialize_blob(value, name, chunk_size, float_format)))
                except Exception:  # noqa: BLE001 - a blob Save cannot write adds nothing
                    sizes.append(0)
        out_names = np.empty(len(names), dtype=object)
        out_names[:] = [n.encode() for n in names]
        return out_names, np.array(sizes, np.int64)
    return run
