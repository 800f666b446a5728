"""SparseLengths* embedding lookups: float32/float16 tables and fused 8/4/2-bit
rowwise-quantised tables, lengths-based (Caffe2's ops) and offsets-based
(`...Idx`, the EmbeddingLookupIdx semantics; a caffe2py extension)."""
import numpy as np

from caffe2py.kernels.cpu.recsys import sparse_lengths as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, Cost, OpSchema, TensorType, register_kernel, register_schema

FLOAT = caffe2_pb2.TensorProto.FLOAT
_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

# layout name -> (op-name suffix, bytes of scale+bias per row, values per byte)
_FUSED = {"fused8": ("Fused8BitRowwise", 8, 1), "fused4": ("Fused4BitRowwise", 4, 2),
          "fused2": ("Fused2BitRowwise", 4, 4)}


class _Spec:
    """What distinguishes one lookup op from another."""

    def __init__(self, reduction, layout, offsets):
        self.reduction = reduction            # Sum, WeightedSum, Mean, PositionalWeightedSum
        self.layout = layout                  # float, fused8, fused4, fused2
        self.offsets = offsets
        self.weighted = reduction in ("WeightedSum", "PositionalWeightedSum")
        self.fused = layout != "float"
        suffix = _FUSED[layout][0] if self.fused else ""
        self.name = "SparseLengths%s%s%s" % (reduction, suffix, "Idx" if offsets else "")
        seg = "OFFSETS" if offsets else "LENGTHS"
        self.input_names = (("DATA", "WEIGHTS" if self.fused else "WEIGHT", "INDICES", seg)
                            if self.weighted else ("DATA", "INDICES", seg))

    def index(self, role):
        return {"data": 0, "weights": 1, "indices": len(self.input_names) - 2,
                "lengths": len(self.input_names) - 1}[role]


def _block(spec, dims):
    if not spec.fused:
        return int(np.prod(dims[1:], dtype=np.int64))
    _, extra, k = _FUSED[spec.layout]
    return (dims[1] - extra) * k


def _infer(spec):
    def infer(ctx, ins):
        data, seg = ins[0], ins[-1]
        if not data.known or not seg.known:
            return [UNKNOWN]
        m = seg.dims[0] - (1 if spec.offsets and ctx.bool("include_last_offset") else 0) if seg.dims else 0
        tail = (_block(spec, data.dims),) if spec.fused else tuple(data.dims[1:])
        return [TensorType((m,) + tail, FLOAT)]
    return infer


def _cost(spec):
    def cost(ctx, ins):
        data, idx = ins[0], ins[spec.index("indices")]
        if not data.known or not idx.known:
            return Cost()
        n = int(np.prod(idx.dims, dtype=np.int64))
        block = _block(spec, data.dims)
        row_bytes = (data.dims[1] if spec.fused else 4 * block)
        out = _infer(spec)(ctx, ins)[0]
        out_n = int(np.prod(out.dims, dtype=np.int64)) if out.known else 0
        return Cost(flops=2.0 * n * block, bytes_read=n * row_bytes + 8.0 * n,
                    bytes_written=4.0 * out_n)
    return cost


def _doc(spec):
    what = {"Sum": "sum", "WeightedSum": "weighted sum (WEIGHT[i] per index)",
            "Mean": "mean (empty segments give zeros)",
            "PositionalWeightedSum": "weighted sum with WEIGHT indexed by position inside the segment"}
    table = ("float32 or float16 table (accumulated in float32)" if not spec.fused else
             "uint8 rows fused with their %s scale and bias (last %d bytes)"
             % ("float32" if spec.layout == "fused8" else "float16", _FUSED[spec.layout][1]))
    seg = ("OFFSETS (int32/int64): segment m spans INDICES[offsets[m] - offsets[0] : offsets[m+1] - "
           "offsets[0]]; output_size + 1 entries, or output_size with include_last_offset=0 "
           "(torch style, the last segment ends at the end of INDICES)" if spec.offsets else
           "LENGTHS (int32): consecutive segments of INDICES")
    return "Per segment, the %s of DATA rows selected by INDICES (int32/int64). DATA: %s. %s." % (
        what[spec.reduction], table, seg)


def _register(spec):
    args = []
    if spec.reduction == "WeightedSum" and not spec.fused:
        args.append(Arg("grad_on_weights", "bool", False, doc="gradient also for WEIGHT"))
    if spec.offsets:
        args.append(Arg("include_last_offset", "bool", True,
                        doc="OFFSETS has output_size + 1 entries (0: torch-style output_size entries)"))
    register_schema(OpSchema(spec.name, num_inputs=len(spec.input_names), num_outputs=1,
                             args=tuple(args), inference=_infer(spec), cost=_cost(spec),
                             inputs=spec.input_names, outputs=("OUTPUT",), doc=_doc(spec)))

    @register_kernel(spec.name)
    def factory(ctx):
        include_last = ctx.bool("include_last_offset", True)
        i_data, i_idx, i_seg = 0, spec.index("indices"), spec.index("lengths")
        i_w = spec.index("weights") if spec.weighted else None
        _, extra, _ = _FUSED.get(spec.layout, ("", 0, 1))

        def check(data, weights, indices, seg):
            if spec.fused:
                if data.dtype != np.uint8:
                    raise ctx.input_error(i_data, "DATA must be uint8 fused rows, got %s" % data.dtype)
                if data.ndim != 2:
                    raise ctx.input_error(i_data, "DATA must be a matrix, got shape %s" % list(data.shape))
                if data.shape[1] <= extra:
                    raise ctx.input_error(i_data, "DATA must have more than %d columns" % extra)
            else:
                if data.dtype not in (np.float32, np.float16):
                    raise ctx.input_error(i_data, "DATA must be float32 or float16, got %s" % data.dtype)
                if data.ndim < 1:
                    raise ctx.input_error(i_data, "DATA must be at least 1-D")
            if indices.ndim != 1:
                raise ctx.input_error(i_idx, "INDICES must be a vector")
            if indices.dtype not in _INDEX_TYPES:
                raise ctx.input_error(i_idx, "INDICES must be int32 or int64, got %s" % indices.dtype)
            seg_name = "OFFSETS" if spec.offsets else "LENGTHS"
            if seg.ndim != 1:
                raise ctx.input_error(i_seg, "%s must be a vector" % seg_name)
            if seg.dtype.kind not in "iu":
                raise ctx.input_error(i_seg, "%s must be int32 or int64, got %s" % (seg_name, seg.dtype))
            if weights is not None:
                if spec.fused and weights.ndim != 1:
                    raise ctx.input_error(i_w, "WEIGHTS must be a vector")
                if weights.ndim != 1:
                    raise ctx.input_error(i_w, "WEIGHT must be a vector")
                if spec.reduction == "WeightedSum" and weights.shape[0] != indices.shape[0]:
                    raise ctx.input_error(i_w, "WEIGHTS should have the same length as INDICES." if spec.fused
                                          else "Weight should have the same length as indices.")

        roles = {"data": i_data, "indices": i_idx, "lengths": i_seg, "weights": i_w}
        positional, mean = spec.reduction == "PositionalWeightedSum", spec.reduction == "Mean"

        def run(*ins):
            data, indices, seg = ins[i_data], ins[i_idx], ins[i_seg]
            weights = ins[i_w] if i_w is not None else None
            check(data, weights, indices, seg)
            try:
                if spec.offsets:
                    if seg.size == 0 and include_last:
                        raise K.LookupInputError("lengths", "OFFSETS must have output_size + 1 entries, got none")
                    out = K.offsets_reduce(data, indices, seg, include_last, weights, positional, mean, spec.layout)
                else:
                    out = K.segment_reduce(data, indices, seg, weights, positional, mean, spec.layout)
            except K.LookupInputError as exc:
                raise ctx.input_error(roles[exc.input], str(exc)) from None
            if not spec.fused and data.ndim != 2:
                out = out.reshape((out.shape[0],) + data.shape[1:])
            return out
        return run


SPECS = [_Spec(r, layout, offsets)
         for offsets in (False, True)
         for layout in ("float", "fused8", "fused4", "fused2")
         for r in ("Sum", "WeightedSum", "Mean", "PositionalWeightedSum")
         if layout == "float" or r != "PositionalWeightedSum"]
for _spec in SPECS:
    _register(_spec)
