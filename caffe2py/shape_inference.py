"""Bound shape inference (Caffe2's caffe2/opt/bound_shape_inferencer).

Given a predict net, shape hints and a bound (max batch size B, max sequence
length S), annotate every blob with its largest shape, a DimType per dim that
says where each bound came from, its dtype and quantisation. The algorithm is
Caffe2's: forward passes over the ops with per-op rules, backward passes for
the few ops whose inputs can be recovered from their outputs, repeated until
the number of known blobs stops growing. Ops without a rule go through their
schema's tensor inference; an op that cannot be inferred leaves its outputs
unknown with a warning (and a recorded reason), never an exception.
"""
import enum
import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import Caffe2Error, describe_op
from .net_defs import normalized_ops
from .proto import caffe2_pb2
from .registry import CAFFE2_DOMAIN, ONNX_DOMAIN, OpContext, TensorType, normalize_domain, schema_for

log = logging.getLogger("caffe2py")
DT = caffe2_pb2.TensorProto


class DimType(enum.IntEnum):
    """TensorBoundShape.DimType: where a dim's bound comes from."""
    UNKNOWN = 0
    CONSTANT = 1
    BATCH = 2
    BATCH_OF_FEATURE_MAX = 3
    BATCH_OF_FEATURE_MAX_DEFAULT = 4
    FEATURE_MAX = 5
    FEATURE_MAX_DEFAULT = 6


SHORT_DIM_NAMES = {DimType.UNKNOWN: "?", DimType.CONSTANT: "C", DimType.BATCH: "B",
                   DimType.BATCH_OF_FEATURE_MAX: "BxFM", DimType.BATCH_OF_FEATURE_MAX_DEFAULT: "BxS",
                   DimType.FEATURE_MAX: "FM", DimType.FEATURE_MAX_DEFAULT: "S"}

_ITEMSIZE = {DT.FLOAT: 4, DT.INT32: 4, DT.BYTE: 1, DT.STRING: 8, DT.BOOL: 1, DT.UINT8: 1,
             DT.INT8: 1, DT.UINT16: 2, DT.INT16: 2, DT.INT64: 8, DT.FLOAT16: 2, DT.DOUBLE: 8}


def itemsize(data_type):
    return _ITEMSIZE.get(data_type, 4)


def dtype_name(data_type):
    try:
        return DT.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


@dataclass
class QInfo:
    """QShapeInfo: per-tensor or per-axis quantisation parameters."""
    axis: int = 1
    offset: list = field(default_factory=lambda: [0.0])
    scale: list = field(default_factory=lambda: [1.0])


@dataclass
class ShapeInfo:
    """A blob's bound shape: dims, one DimType per dim, dtype (TensorProto.DataType)."""
    dims: list
    dim_types: list = field(default_factory=list)
    dtype: int = DT.FLOAT
    is_quantized: bool = False
    q_info: QInfo = field(default_factory=QInfo)
    shape_is_final: bool = False

    def __post_init__(self):
        self.dims = [int(d) for d in self.dims]
        self.dim_types = [DimType(t) for t in self.dim_types]

    def dim_type(self, i):
        """Caffe2's getDimType: UNKNOWN past the end."""
        return self.dim_types[i] if i < len(self.dim_types) else DimType.UNKNOWN

    @property
    def numel(self):
        return int(np.prod(self.dims, dtype=np.int64)) if self.dims else 1

    @property
    def nbytes(self):
        return self.numel * itemsize(self.dtype)

    def copy(self):
        return ShapeInfo(list(self.dims), list(self.dim_types), self.dtype, self.is_quantized,
                         QInfo(self.q_info.axis, list(self.q_info.offset), list(self.q_info.scale)),
                         self.shape_is_final)

    def as_tensor_type(self):
        return TensorType(tuple(self.dims), self.dtype)

    def describe(self):
        return "%s %s %s%s" % (self.dims, "(" + ",".join(SHORT_DIM_NAMES[t] for t in self.dim_types) + ")",
                               dtype_name(self.dtype), " quantized" if self.is_quantized else "")


def with_default_dim_types(dims, dtype=DT.FLOAT, first=DimType.BATCH):
    """Caffe2's constructShapeInfoWithDefaultDimType: first dim `first`, the rest CONSTANT."""
    dims = list(dims)
    types = ([first] + [DimType.CONSTANT] * (len(dims) - 1)) if dims else []
    return ShapeInfo(dims, types, dtype)


def constant_shape_info(value):
    """Caffe2's getShapeInfoFromBlob for a workspace value: every dim CONSTANT."""
    from .tensors import data_type_of
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        data_type = data_type_of(np.dtype(dtype))
    except Caffe2Error:
        return None
    from .int8_tensor import Int8TensorCPU
    if isinstance(value, Int8TensorCPU):
        # Caffe2's getShapeInfoFromBlob for an Int8TensorCPU: quantized, its scale and
        # zero point as the (per-tensor) q_info
        return ShapeInfo(list(shape), [DimType.CONSTANT] * len(shape), data_type, True,
                         QInfo(1, [float(value.zero_point)], [float(value.scale)]))
    # numpy int8 arrays are plain tensors, not Caffe2's Int8TensorCPU: not quantized
    return ShapeInfo(list(shape), [DimType.CONSTANT] * len(shape), data_type)


@dataclass(frozen=True)
class BoundShapeSpec:
    """The bound: max batch size B and max sequence length S (both >= 0).
    num_embeddings / embedding_length only matter to UnPackRecords."""
    max_batch_size: int
    max_seq_size: int
    num_embeddings: int = 0
    embedding_length: int = 0

    def __post_init__(self):
        for name in ("max_batch_size", "max_seq_size", "num_embeddings", "embedding_length"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise Caffe2Error("BoundShapeSpec: %s must be a non-negative integer, got %r" % (name, value))

    def describe_dim(self, dim_type):
        """'BATCH=20' style text for error messages."""
        b, s = self.max_batch_size, self.max_seq_size
        return {DimType.BATCH: "BATCH=%d" % b,
                DimType.BATCH_OF_FEATURE_MAX_DEFAULT: "BATCH_OF_FEATURE_MAX_DEFAULT=%dx%d" % (b, s),
                DimType.FEATURE_MAX_DEFAULT: "FEATURE_MAX_DEFAULT=%d" % s}.get(dim_type, DimType(dim_type).name)


# ----------------------------------------------------------------- op type groups

SLS_OPS = {
    "SparseLengthsSum", "SparseLengthsWeightedSum", "SparseLengthsMean",
    "SparseLengthsSumFused8BitRowwise", "SparseLengthsWeightedSumFused8BitRowwise",
    "SparseLengthsMeanFused8BitRowwise",
    "SparseLengthsSumFused4BitRowwise", "SparseLengthsWeightedSumFused4BitRowwise",
    "SparseLengthsSum4BitRowwiseSparse", "SparseLengthsWeightedSum4BitRowwiseSparse",
    "SparseLengthsSum8BitRowwiseSparse", "SparseLengthsWeightedSum8BitRowwiseSparse",
}
FC_OPS = {"FC", "FCTransposed", "FbFCPacked", "Int8FC"}
FILL_OPS = {"GivenTensorFill", "GivenTensorDoubleFill", "GivenTensorIntFill", "GivenTensorInt64Fill",
            "GivenTensorBoolFill", "GivenTensorStringFill", "GivenTensorInt16Fill",
            "GivenTensorByteStringToUInt8Fill", "ConstantFill", "Int8GivenTensorFill",
            "Int8GivenIntTensorFill"}
CONVERSION_OPS = {"FloatToFused8BitRowwiseQuantized", "HalfFloatToFused8BitRowwiseQuantized",
                  "FloatToFused4BitRowwiseQuantized", "HalfToFused4BitRowwiseQuantized",
                  "FloatToHalf", "FbGemmPack"}
COPY_INPUT0_DIM_TYPES = {"Bucketize", "Clip", "Div", "Mean"}
NOT_QUANTIZED_INT8 = {"Int8Dequantize", "Int8QuantSchemeBlobFill", "ComputeEqualizationScale",
                      "Int8GenQuantParams", "Int8GenQuantParamsMinMax"}
_INT8_DTYPE = {"Int8Quantize": DT.UINT8, "Int8GivenIntTensorFill": DT.INT32}   # every other one: UINT8


def is_quantized_int8_op(op):
    """Whether an op writes Caffe2 Int8 tensors (Int8TensorCPU)."""
    return op.type.startswith("Int8") and op.type not in NOT_QUANTIZED_INT8


def int8_q_info(op):
    """The per-tensor QInfo of an Int8 op's output: its Y_scale / Y_zero_point."""
    ctx = OpContext(op)
    return QInfo(1, [float(ctx.int("Y_zero_point", 0))], [float(ctx.float("Y_scale", 1.0))])


# ----------------------------------------------------------------- built-in layouts
# Used only when an op's schema gives no inference (its kernels may live elsewhere).

def _fused_columns(op_type, d):
    if op_type in ("FloatToFused8BitRowwiseQuantized", "HalfFloatToFused8BitRowwiseQuantized"):
        return d + 8, DT.UINT8          # values, then fp32 scale and bias
    if op_type in ("FloatToFused4BitRowwiseQuantized", "HalfToFused4BitRowwiseQuantized"):
        return (d + 1) // 2 + 4, DT.UINT8   # two values a byte, then fp16 scale and bias
    return d, DT.FLOAT16


def _fallback_conversion(ctx, ins):
    x = ins[0].dims
    if ctx.type == "FbGemmPack" or not x:
        return [TensorType(tuple(x), ins[0].dtype)]
    cols, dtype = _fused_columns(ctx.type, x[-1])
    return [TensorType(tuple(x[:-1]) + (cols,), dtype)]


def _fallback_batch_matmul(ctx, ins):
    a, b = list(ins[0].dims), list(ins[1].dims)
    if ctx.int("trans_a", 0) and len(a) >= 2:
        a[-1], a[-2] = a[-2], a[-1]
    if ctx.int("trans_b", 0) and len(b) >= 2:
        b[-1], b[-2] = b[-2], b[-1]
    if len(a) < 2 or len(b) < 2:
        raise ValueError("BatchMatMul needs 2-D or higher inputs, got %s and %s" % (a, b))
    if a[-1] != b[-2]:
        raise ValueError("BatchMatMul: inner dims differ (%s x %s)" % (a, b))
    batch = tuple(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    return [TensorType(batch + (a[-2], b[-1]), ins[0].dtype)]


def _fallback_batch_gather(ctx, ins):
    data, idx = ins[0].dims, ins[1].dims
    return [TensorType(tuple(data[:1]) + tuple(idx) + tuple(data[2:]), ins[0].dtype)]


def _fallback_gather(ctx, ins):
    data, idx = ins[0].dims, ins[1].dims
    return [TensorType(tuple(idx) + tuple(data[1:]), ins[0].dtype)]


FALLBACK_INFERENCE = {"BatchMatMul": _fallback_batch_matmul, "BatchGather": _fallback_batch_gather,
                      "Gather": _fallback_gather}
FALLBACK_INFERENCE.update({t: _fallback_conversion for t in CONVERSION_OPS})


# ----------------------------------------------------------------- precedence

NEW_WINS, OLD_WINS, NO_PRECEDENCE = "new", "old", "none"
_BETTER = {(DimType.FEATURE_MAX, DimType.FEATURE_MAX_DEFAULT),
           (DimType.BATCH_OF_FEATURE_MAX, DimType.BATCH_OF_FEATURE_MAX_DEFAULT)}


def dim_type_precedence(old_types, new_types):
    """Which of two dim-type vectors describes a blob better (Caffe2's rules)."""
    if not old_types:
        return NEW_WINS
    new_better = old_better = False
    for old, new in zip(old_types, new_types):
        if old == new:
            continue
        if old == DimType.UNKNOWN or (new, old) in _BETTER:
            new_better = True
        elif new == DimType.UNKNOWN or (old, new) in _BETTER:
            old_better = True
        else:
            return NO_PRECEDENCE
    if new_better and not old_better:
        return NEW_WINS
    if old_better and not new_better:
        return OLD_WINS
    if not new_better and not old_better and len(new_types) > len(old_types):
        return NEW_WINS
    return NO_PRECEDENCE


# ----------------------------------------------------------------- the inferencer

class BoundShapeInferencer:
    """infer(net, shape_hints, workspace) -> {blob: ShapeInfo}; also keeps
    `unknown` ({blob: reason}) and `producer` ({blob: op label}) for reports."""

    def __init__(self, spec, log_warnings=True):
        if not isinstance(spec, BoundShapeSpec):
            raise Caffe2Error("BoundShapeInferencer needs a BoundShapeSpec, got %r" % (spec,))
        self.spec = spec
        # reports that print `warnings` themselves turn the log lines off
        self.log_warnings = log_warnings
        self.shape_info = {}
        self.unknown = {}
        self.producer = {}
        self.warnings = []
        self._current_dim_type = DimType.BATCH
        self._current_op = None
        self._logged = set()

    # -- entry point
    def infer(self, net, shape_hints=None, workspace=None):
        net_def = net.Proto() if hasattr(net, "Proto") else net
        if not isinstance(net_def, caffe2_pb2.NetDef):
            raise Caffe2Error("infer expects a NetDef or core.Net, got %s" % type(net).__name__)
        self.shape_info, self.unknown, self.producer, self.warnings = {}, {}, {}, []
        self._logged = set()
        blobs = getattr(workspace, "blobs", workspace) or {}
        for name in list(blobs.keys()):
            info = constant_shape_info(blobs[name])
            if info is not None:
                self.shape_info[name] = info
        for name, info in (shape_hints or {}).items():
            if not isinstance(info, ShapeInfo):
                raise Caffe2Error("shape hint for '%s' must be a ShapeInfo, got %s" % (name, type(info).__name__))
            if info.dim_types and len(info.dim_types) != len(info.dims):
                raise Caffe2Error("shape hint for '%s' has %d dims but %d dim types"
                                  % (name, len(info.dims), len(info.dim_types)))
            if any(d < 0 for d in info.dims):
                raise Caffe2Error("shape hint for '%s' has a negative dim: %s" % (name, info.dims))
            self.shape_info[name] = info.copy()
        ops = normalized_ops(net_def)
        for index, op in enumerate(ops):
            for blob in op.output:
                self.producer.setdefault(blob, describe_op(index, op))
        previous = -1
        for _ in range(len(ops) + 2):   # each pass adds blobs; this bounds pathological nets
            if len(self.shape_info) == previous:
                break
            previous = len(self.shape_info)
            self._current_dim_type = DimType.BATCH
            for index, op in enumerate(ops):
                self._infer_op(index, op)
            for index in range(len(ops) - 1, -1, -1):
                self._infer_backward(index, ops[index])
        for name in list(self.unknown):
            if name in self.shape_info:
                del self.unknown[name]
        for index, op in enumerate(ops):
            for blob in list(op.input) + list(op.output):
                if blob not in self.shape_info and blob not in self.unknown:
                    self.unknown[blob] = ("no op infers it" if blob in self.producer else
                                          "an input of the net without a shape hint (give one, e.g. "
                                          "--hint '%s,d1,d2,...')" % blob)
        return self.shape_info

    # -- CheckAndSetTensorBoundShape
    def check_and_set(self, name, dim_types, dims, dtype, is_quantized=False, allow_existing=False,
                      q_info=None, in_place=False):
        dims = [int(d) for d in dims]
        dim_types = [DimType(t) for t in dim_types]
        existing = self.shape_info.get(name)
        if existing is not None and existing.shape_is_final:
            return existing
        if existing is not None and not in_place:
            if len(existing.dims) != len(dims):
                raise Caffe2Error("%sDim size inconsistency found in tensor '%s': known as %s, inferred %s"
                                  % (self._where(), name, existing.dims, dims))
            precedence = dim_type_precedence(existing.dim_types, dim_types)
            if precedence == NEW_WINS:
                existing.dims, existing.dim_types = dims, dim_types
            elif precedence == NO_PRECEDENCE and not allow_existing:
                for i, (a, b) in enumerate(zip(existing.dims, dims)):
                    if a != b:
                        raise Caffe2Error("%sShape inconsistency found in tensor '%s' on dim %d (%d vs %d): "
                                          "known as %s, inferred %s"
                                          % (self._where(), name, i, a, b, existing.dims, dims))
            return existing
        info = ShapeInfo(dims, dim_types, dtype, is_quantized, q_info or QInfo(), shape_is_final=in_place)
        self.shape_info[name] = info
        self.unknown.pop(name, None)
        return info

    def set_if_not_exist(self, name, dim_types, dims, dtype, is_quantized=False):
        return self.check_and_set(name, dim_types, dims, dtype, is_quantized, allow_existing=True)

    @property
    def _label(self):
        # built on demand: most ops never need their label
        return describe_op(*self._current_op) if self._current_op else ""

    def _where(self):
        return "%s: " % self._label if self._label else ""

    def _known(self, blob):
        return self.shape_info.get(blob)

    # -- forward pass
    def _infer_op(self, index, op):
        self._current_op = (index, op)
        # the per-type rules read Caffe2's arguments (Transpose's axes, not ONNX's perm)
        t = op.type if normalize_domain(op.domain) == CAFFE2_DOMAIN else None
        if t in SLS_OPS:
            self._infer_sls(op)
        elif t == "LengthsRangeFill":
            self._infer_lengths_range_fill(op)
        elif t in FC_OPS:
            self._infer_fc(op, index)
        elif t == "Concat":
            self._infer_concat(op, index)
        elif t in ("Reshape", "Shape"):
            self._infer_common(op, index)
            out = 1 if t == "Reshape" else 0
            self._set_dim0_constant(op, out)
        elif t in FILL_OPS:
            self._infer_fill(op, index)
        elif t in CONVERSION_OPS:
            self._infer_conversion(op, index)
        elif t == "Tile":
            self._infer_tile(op)
        elif t == "Softmax":
            self._copy_input_to_output(op)
        elif t == "LpNorm":
            self._infer_common(op, index, all_constant=True)
        elif t == "Transpose":
            self._infer_transpose(op)
        elif t in COPY_INPUT0_DIM_TYPES:
            self._infer_common(op, index)
            self._copy_input0_dim_types(op)
        elif t in ("Add", "Mul"):
            self._infer_elementwise(op, index)
        elif t == "SparseLengthsSumSparseLookup":
            self._infer_sparse_lookup(op)
        elif t == "UnPackRecords":
            self._infer_unpack_records(op)
        else:
            self._infer_common(op, index)
        self._current_op = None

    def _require(self, op, i, what):
        info = self._known(op.input[i])
        if info is None:
            raise Caffe2Error("%s: Shape of %s input of %s '%s' needs to be presented"
                              % (self._label, what, op.type, op.input[i]))
        return info

    def _infer_sls(self, op):
        weighted = "Weighted" in op.type
        n_in = len(op.input)
        if n_in < (4 if weighted else 3):
            raise Caffe2Error("%s: %s needs %d inputs, got %d" % (self._label, op.type, 4 if weighted else 3, n_in))
        data = self._require(op, 0, "DATA")
        if len(data.dims) != 2:
            raise Caffe2Error("%s: DATA '%s' must be 2-D, got %s" % (self._label, op.input[0], data.dims))
        b, s = self.spec.max_batch_size, self.spec.max_seq_size
        offset = 1 if weighted else 0
        if weighted:
            self.set_if_not_exist(op.input[1], [DimType.BATCH_OF_FEATURE_MAX_DEFAULT], [b * s], DT.FLOAT)
        self.set_if_not_exist(op.input[1 + offset], [DimType.BATCH_OF_FEATURE_MAX_DEFAULT], [b * s], DT.INT64)
        self.check_and_set(op.input[2 + offset], [DimType.BATCH], [b], DT.INT32)
        width = data.dims[1]
        if "Fused8BitRowwise" in op.type or "8BitRowwiseSparse" in op.type:
            width -= 8
        elif "Fused4BitRowwise" in op.type or "4BitRowwiseSparse" in op.type:
            width = (width - 4) * 2
        self._current_dim_type = DimType.BATCH
        self.check_and_set(op.output[0], [DimType.BATCH, data.dim_type(1)], [b, width], DT.FLOAT)

    def _infer_lengths_range_fill(self, op):
        if len(op.input) != 1 or len(op.output) != 1:
            raise Caffe2Error("%s: LengthsRangeFill takes exactly 1 input and 1 output" % self._label)
        b, s = self.spec.max_batch_size, self.spec.max_seq_size
        self.check_and_set(op.input[0], [DimType.BATCH], [b], DT.INT32)
        self.check_and_set(op.output[0], [DimType.BATCH_OF_FEATURE_MAX_DEFAULT], [b * s], DT.INT32)
        self._current_dim_type = DimType.BATCH_OF_FEATURE_MAX_DEFAULT

    def _fc_is_quantized(self, op):
        return op.type == "Int8FC" or op.engine == "DNNLOWP"

    def _quant_info(self, op):
        return int8_q_info(op)

    def _infer_fc(self, op, index):
        if len(op.input) not in (3, 4):
            raise Caffe2Error("%s: %s takes 3 or 4 inputs, got %d" % (self._label, op.type, len(op.input)))
        w = self._require(op, 1, "WEIGHT")
        self._require(op, 2, "BIAS")
        ctx = OpContext(op)
        axis, axis_w = ctx.int("axis", 1), ctx.int("axis_w", 1)
        quantized = self._fc_is_quantized(op)
        x = self._known(op.input[0])
        if x is None:
            axis_w = axis_w % len(w.dims) if w.dims else 0
            k_dims = w.dims[:axis_w] if op.type == "FCTransposed" else w.dims[axis_w:]
            k = int(np.prod(k_dims, dtype=np.int64))
            lead = max(axis - 1, 0)
            dims = [1] * lead + [self.spec.max_batch_size, k]
            types = [DimType.CONSTANT] * lead + [DimType.BATCH, DimType.CONSTANT]
            if op.type == "FbFCPacked":
                dtype = DT.FLOAT
            elif quantized:
                dtype = DT.UINT8
            else:
                dtype = w.dtype
            self.check_and_set(op.input[0], types, dims, dtype, quantized,
                               q_info=self._quant_info(op) if quantized else None)
        elif x.dims and x.dim_type(0) == DimType.UNKNOWN:
            x.dims[0] = self.spec.max_batch_size
            x.dim_types = [DimType.BATCH] + [x.dim_type(i) for i in range(1, len(x.dims))]
        self._current_dim_type = DimType.BATCH
        self._infer_common(op, index)

    def _infer_concat(self, op, index):
        ctx = OpContext(op)
        if ctx.int("add_axis", 0):
            ref = None
            for blob in op.input:
                info = self._known(blob)
                if info is None:
                    continue
                if ref is None:
                    ref = info
                elif info.dims != ref.dims:
                    raise Caffe2Error("%s: with add_axis=1 every input needs the same shape; '%s' is %s, "
                                      "input 0's is %s" % (self._label, blob, info.dims, ref.dims))
            if ref is None:
                self._skip(op, index, "no input of Concat(add_axis=1) has a shape")
                return
            for blob in op.input:
                if blob not in self.shape_info:
                    self.check_and_set(blob, ref.dim_types, ref.dims, ref.dtype, ref.is_quantized)
            self._current_dim_type = ref.dim_type(0)
        self._infer_common(op, index)
        if len(op.output) > 1:
            self._set_dim0_constant(op, 1)

    def _set_dim0_constant(self, op, out):
        info = self._known(op.output[out]) if len(op.output) > out else None
        if info is not None and info.dims:
            info.dim_types = [DimType.CONSTANT] + list(info.dim_types[1:])

    def _infer_fill(self, op, index):
        if len(op.output) != 1:
            raise Caffe2Error("%s: %s produces exactly 1 output" % (self._label, op.type))
        self._infer_common(op, index, all_constant=True)
        info = self._known(op.output[0])
        if op.type == "ConstantFill" and len(op.input) == 1 and info is not None:
            src = self._known(op.input[0])
            if src is not None and len(src.dim_types) <= len(info.dims):
                info.dim_types = list(src.dim_types) + [DimType.CONSTANT] * (len(info.dims) - len(src.dim_types))

    def _infer_conversion(self, op, index):
        ins = [self._known(b) for b in op.input]
        saved = self._current_dim_type
        if all(i is not None for i in ins) and ins and ins[0].dims and ins[0].dim_type(0) == DimType.CONSTANT:
            self._current_dim_type = DimType.CONSTANT
        self._infer_common(op, index)
        self._current_dim_type = saved

    def _infer_tile(self, op):
        if len(op.input) != 1:
            return   # only the argument form has a static shape
        x = self._known(op.input[0])
        if x is None:
            self._skip(op, None, "input '%s' has no shape" % op.input[0])
            return
        ctx = OpContext(op)
        axis = ctx.int("axis", 0) % max(len(x.dims), 1)
        dims = list(x.dims)
        dims[axis] *= self.spec.max_batch_size if ctx.int("dynamic", 0) else ctx.int("tiles", 1)
        types = [DimType.BATCH] + [DimType.CONSTANT] * (len(dims) - 1)
        self.check_and_set(op.output[0], types, dims, x.dtype, x.is_quantized)

    def _copy_input_to_output(self, op):
        x = self._known(op.input[0])
        if x is None:
            self._skip(op, None, "input '%s' has no shape" % op.input[0])
            return
        self.check_and_set(op.output[0], x.dim_types, x.dims, x.dtype, x.is_quantized)

    def _infer_transpose(self, op):
        x = self._known(op.input[0])
        if x is None:
            self._skip(op, None, "input '%s' has no shape" % op.input[0])
            return
        rank = len(x.dims)
        axes = list(OpContext(op).ints("axes") or range(rank - 1, -1, -1))
        if sorted(axes) != list(range(rank)):
            raise Caffe2Error("%s: axes %s must list each of the %d axes once" % (self._label, axes, rank))
        types = [x.dim_type(a) for a in axes]
        self.check_and_set(op.output[0], types, [x.dims[a] for a in axes], x.dtype, x.is_quantized)

    def _copy_input0_dim_types(self, op):
        x, y = self._known(op.input[0]), self._known(op.output[0])
        if x is not None and y is not None and len(x.dim_types) == len(y.dims):
            y.dim_types = list(x.dim_types)

    def _infer_elementwise(self, op, index):
        if OpContext(op).int("broadcast", 0):
            x = self._known(op.input[0])
            if x is not None:
                for blob in (op.input[1], op.output[0]):
                    if blob not in self.shape_info:
                        self.check_and_set(blob, x.dim_types, x.dims, x.dtype, x.is_quantized)
        self._infer_common(op, index)

    def _infer_sparse_lookup(self, op):
        pairs = [(0, 0), (1, 1)] + ([(3, 2)] if len(op.input) == 4 and len(op.output) > 2 else [])
        for i, o in pairs:
            src = self._known(op.input[i])
            if src is not None:
                self.check_and_set(op.output[o], src.dim_types, src.dims, src.dtype, src.is_quantized)

    def _infer_unpack_records(self, op):
        b = self.spec.max_batch_size
        x = self._known(op.input[0])
        if b == 1 and len(op.output) == 1 and x is not None and len(x.dims) != 1:
            self.check_and_set(op.output[0], x.dim_types, x.dims, x.dtype, x.is_quantized)
            return
        dims = [b, self.spec.num_embeddings, self.spec.embedding_length]
        for blob in op.output:
            self.check_and_set(blob, [DimType.BATCH, DimType.CONSTANT, DimType.CONSTANT], dims, DT.FLOAT)

    # -- generic ops through the schema
    def _skip(self, op, index, reason):
        for blob in op.output:
            if blob not in self.shape_info:
                self.unknown[blob] = "%s: %s" % (self._label or op.type, reason)

    def _warn(self, msg):
        if msg not in self._logged:
            self._logged.add(msg)
            self.warnings.append(msg)
            if self.log_warnings:
                log.warning(msg)

    def _infer_common(self, op, index, all_constant=False):
        ins = []
        for blob in op.input:
            info = self._known(blob)
            if info is None:
                msg = "Cannot find shape info for %s. Skipping %s" % (blob, op.type)
                if msg not in self._logged:   # once per infer(), not once per pass
                    self._logged.add(msg)
                    # debug, not warning: `unknown` carries it, and a net without hints
                    # would print one line per op
                    log.debug(msg)
                self._skip(op, index, "input '%s' has no shape" % blob)
                return
            ins.append(info.as_tensor_type())
        schema = schema_for(op.type, op.domain, op.op_version or None)
        infer = schema.inference if schema is not None else None
        if infer is None:
            infer = FALLBACK_INFERENCE.get(op.type)
        if infer is None and schema is not None and schema.domain == ONNX_DOMAIN:
            from .onnx_shape_fallback import infer_onnx_node
            infer = infer_onnx_node
        if infer is None:
            reason = ("op type '%s' is not registered" % op.type) if schema is None else \
                     ("op type '%s' has no shape inference" % op.type)
            self._warn("%s: %s; its outputs stay unknown" % (self._label, reason))
            self._skip(op, index, reason)
            return
        try:
            outs = list(infer(OpContext(op, schema, index, ins), ins))
        except Exception as exc:  # noqa: BLE001 - a failing inference leaves outputs unknown
            self._warn("%s: shape inference failed: %s" % (self._label, exc))
            self._skip(op, index, "shape inference failed: %s" % exc)
            return
        quantized = is_quantized_int8_op(op)
        for blob, out in zip(op.output, outs):
            if out is None or not out.known:
                self.unknown.setdefault(blob, "%s: the schema cannot tell this output's shape" % self._label)
                continue
            dims = list(out.dims)
            first = DimType.CONSTANT if all_constant else self._current_dim_type
            types = ([first] + [DimType.CONSTANT] * (len(dims) - 1)) if dims else []
            dtype = out.dtype if out.dtype is not None else DT.FLOAT
            q_info = None
            # an Int8 op's Int8 tensor outputs; its plain ones (Int8Reshape's old shape,
            # Int8Concat's split sizes) keep the schema's type
            is_int8 = quantized and (out.dtype in (None, DT.UINT8) or op.type in _INT8_DTYPE)
            if is_int8:
                dtype = _INT8_DTYPE.get(op.type, DT.UINT8)
                q_info = self._quant_info(op)
            self.check_and_set(blob, types, dims, dtype, is_int8, q_info=q_info)

    # -- backward pass
    def _infer_backward(self, index, op):
        self._current_op = (index, op)
        t = op.type if normalize_domain(op.domain) == CAFFE2_DOMAIN else None
        out = self._known(op.output[0]) if op.output else None
        if out is None:
            self._current_op = None
            return
        if t == "Concat" and not OpContext(op).int("add_axis", 0):
            missing = [b for b in op.input if b not in self.shape_info]
            if len(set(missing)) == 1:
                ctx = OpContext(op)
                if ctx.has("order") and not ctx.has("axis"):
                    axis = 1 if ctx.string("order") == "NCHW" else 3
                else:
                    axis = ctx.int("axis", 1)
                axis %= max(len(out.dims), 1)
                known = sum(self.shape_info[b].dims[axis] for b in op.input if b in self.shape_info)
                dims = list(out.dims)
                dims[axis] -= known
                if dims[axis] < 0:
                    raise Caffe2Error("%s: inputs are wider (%d) than the output '%s' (%d) on axis %d"
                                      % (self._label, known, op.output[0], out.dims[axis], axis))
                self.check_and_set(missing[0], out.dim_types, dims, out.dtype, out.is_quantized)
        elif t == "Int8Quantize":
            if op.input[0] not in self.shape_info:
                self.check_and_set(op.input[0], out.dim_types, out.dims, DT.FLOAT, False)
        elif t in ("Add", "Mul") and OpContext(op).int("broadcast", 0):
            for blob in op.input:
                if blob not in self.shape_info:
                    self.check_and_set(blob, out.dim_types, out.dims, out.dtype, out.is_quantized)
        self._current_op = None

    # -- output
    def print_shape_info(self, out=None):
        """Caffe2's PrintShapeInfo text, one line per blob."""
        lines = []
        for name, info in self.shape_info.items():
            lines.append("%s: dim_type: %s, dims: [%s], dtype: %d" % (
                name, ", ".join(t.name for t in info.dim_types),
                "".join("%d, " % d for d in info.dims), info.dtype))
        text = "\n".join(lines) + ("\n" if lines else "")
        if out is not None:
            out.write(text)
        return text


def infer_bound_shapes(net, spec, shape_hints=None, workspace=None):
    """Convenience: (shape map, inferencer) for one call."""
    inferencer = BoundShapeInferencer(spec)
    return inferencer.infer(net, shape_hints, workspace), inferencer
