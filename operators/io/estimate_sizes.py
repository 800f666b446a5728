"""Caffe2's EstimateAllBlobSizes: every blob of the workspace (its own outputs
included, estimated as what they will hold) with an estimate of its serialized size
in bytes, under the same per-blob SerializationOptions Save takes: per chunk the
name plus a fixed 50 bytes of TensorProto fields, plus a per-element size by type
(Caffe2's EstimateSerializedBlobSize)."""
import math

import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.serialization import (DEFAULT_CHUNK_SIZE, OPTION_DEFAULT_CHUNK, OPTION_NO_CHUNKING, WRITES_BFLOAT16,
                                    _is_string_scalar, serialize_blob)

from .persistence import _options_for, _serialization_options

DT = caffe2_pb2.TensorProto
PER_CHUNK_OVERHEAD = 50
STRING_ELEMENT = 50          # string lengths are unknown to the estimate: a fixed guess
STRING_BLOB_OVERHEAD = 20
_BFLOAT16 = caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16


def element_size(dtype, float_format):
    """Caffe2's per-element guess for a serialized tensor: raw floats (bfloat16 when asked
    and written so), bytes and 16-bit values as int32 varints (2 and 3 bytes: random
    data often needs the longer forms), bool 1, strings 50, other types by width."""
    dtype = np.dtype(dtype)
    if dtype == object:
        return STRING_ELEMENT
    if dtype == np.float32:
        return 2 if WRITES_BFLOAT16 and float_format == _BFLOAT16 else 4
    if dtype == np.bool_:
        return 1
    if dtype.itemsize == 1:
        return 2
    if dtype.itemsize == 2:
        return 3
    return dtype.itemsize


def chunks(count, chunk_size):
    """ceil(count / chunk size): an empty tensor counts no chunk, as in Caffe2's estimate
    (Save still writes one record for it)."""
    if chunk_size == OPTION_NO_CHUNKING:
        size = count + 1
    elif chunk_size == OPTION_DEFAULT_CHUNK:
        size = DEFAULT_CHUNK_SIZE
    else:
        size = chunk_size
    return math.ceil(count / size)


def estimate_tensor(name, count, dtype, chunk_size, float_format):
    return (chunks(count, chunk_size) * (len(name) + PER_CHUNK_OVERHEAD)
            + count * element_size(dtype, float_format))


def estimate_string(name, value):
    """A string blob: its name and bytes plus 20 for the BlobProto's type and framing."""
    return len(name) + len(value.encode() if isinstance(value, str) else value) + STRING_BLOB_OVERHEAD


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
            elif _is_string_scalar(value):          # a std::string blob, not a tensor
                sizes.append(estimate_string(name, value.item() if isinstance(value, np.ndarray) else value))
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
