"""Sequence ops: SequenceMask, ReversePackedSegs, PackRNNSequence, UnpackRNNSequence,
SinusoidPositionEncoding and Glu (caffe2/operators/boolean_mask_ops,
reverse_packed_segs_op, pack_rnn_sequence_op, sinusoid_position_encoding_op, glu_op)."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.sequence import encodings as E
from caffe2py.kernels.cpu.sequence import packing as P
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

DT = caffe2_pb2.TensorProto
_MODES = ("sequence", "window", "upper", "lower", "upperdiag", "lowerdiag")


def _canonical(ctx, axis, ndim, what):
    a = axis + ndim if axis < 0 else axis
    if not 0 <= a < max(ndim, 1):
        raise ctx.error("%s %d is out of range for a %d-D input" % (what, axis, ndim))
    return a


def _int_vector(ctx, index, a, what):
    if not isinstance(a, np.ndarray) or a.dtype not in (np.int32, np.int64) or a.ndim != 1:
        raise ctx.input_error(index, "%s must be a 1-D int32 or int64 tensor, got %s %s"
                              % (what, getattr(a, "dtype", type(a).__name__), list(np.shape(a))))
    return a.astype(np.int64)


# ----------------------------------------------------------------- SequenceMask

register_schema(OpSchema(
    "SequenceMask", num_inputs=(1, 2), num_outputs=1, inputs=("input", "sequence_lengths"),
    outputs=("masked_tensor",), inference=lambda ctx, ins: [ins[0]],
    args=(Arg("mode", "string", "sequence", doc="sequence, window, upper, lower, upperdiag or lowerdiag"),
          Arg("axis", "int", 1, doc="dims from axis on are the columns of the 2-D mask, dims before it rows"),
          Arg("grad", "bool", False, doc="gradient mode: fill with 0"),
          Arg("radius", "int", 10, doc="window mode: half width"),
          Arg("fill_val", "float", float("-inf"), doc="value of masked entries"),
          Arg("batch", "int", -1, doc="batch axis (before axis): the rows between it and axis are masked "
                                      "alike in every batch item"),
          Arg("repeat_from_axis", "int", -1, doc="sequence mode without batch: the dims from this axis on "
                                                 "share one mask entry")),
    doc="Masks a float32 tensor for attention. Viewed as [rows, cols] (see axis / batch), entry (i, j) becomes "
        "fill_val (0 with grad) where: sequence mode j >= lengths[i]; window mode |j - centers[i]| > radius; "
        "upper j > i; lower j < i; upperdiag j >= i; lowerdiag j <= i. sequence and window modes take the "
        "second input (int32 lengths or centers, one per row)."))


@register_kernel("SequenceMask")
def sequence_mask(ctx):
    mode = ctx.string("mode")
    if mode not in _MODES:
        raise ctx.error("Unsupported mode for SequenceMaskOp: '%s' (one of %s)" % (mode, ", ".join(_MODES)))
    needs = mode in ("sequence", "window")
    if needs and ctx.n_inputs < 2:
        raise ctx.error("mode '%s' needs the second input (%s)" % (mode, "sequence lengths" if mode == "sequence"
                                                                   else "window centers"))
    fill = 0.0 if ctx.bool("grad") else ctx.float("fill_val")
    axis_arg, radius = ctx.int("axis"), ctx.int("radius")
    batch_arg = ctx.int("batch") if ctx.has("batch") else None
    repeat_arg = ctx.int("repeat_from_axis") if ctx.has("repeat_from_axis") else None
    if repeat_arg is not None and (mode != "sequence" or batch_arg is not None):
        raise ctx.error("repeat_from_axis is supported in sequence mode without batch only")

    def run(x, *rest):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ctx.input_error(0, "input must be a float32 tensor, got %s" % getattr(x, "dtype", type(x).__name__))
        axis = _canonical(ctx, axis_arg, x.ndim, "axis")
        batch = -1
        if batch_arg is not None:
            batch = _canonical(ctx, batch_arg, x.ndim, "batch")
            if batch >= axis:
                raise ctx.error("batch %d must come before axis %d" % (batch, axis))
        repeat = None
        if repeat_arg is not None:
            repeat = _canonical(ctx, repeat_arg, x.ndim, "repeat_from_axis")
            if repeat < axis:
                raise ctx.error("repeat_from_axis %d must not come before axis %d" % (repeat, axis))
        lengths = np.zeros(0, np.int64)
        if needs:
            if not isinstance(rest[0], np.ndarray) or rest[0].dtype != np.int32:
                raise ctx.input_error(1, "must be an int32 tensor")
            lengths = rest[0].reshape(-1).astype(np.int64)
            start = batch + 1 if batch >= 0 else 0
            rows = int(np.prod(x.shape[start:axis], dtype=np.int64))
            if x.size and lengths.size < rows:
                raise ctx.input_error(1, "Out of bound: %d rows to mask but %d %s" % (
                    rows, lengths.size, "lengths" if mode == "sequence" else "window centers"))
        return P.sequence_mask(x, mode, axis, batch, lengths, radius, fill, repeat)
    return run


@register_gradient("SequenceMask", copy_arguments=False)
def _sequence_mask_grad(g):
    args = [a for a in g.def_.arg if a.name != "grad"]
    ins = [g.GO(0)] + ([g.I(1)] if len(g.def_.input) > 1 else [])
    return [g.op("SequenceMask", ins, [g.GI(0)], args=args, grad=True)]


# ----------------------------------------------------------------- ReversePackedSegs

register_schema(OpSchema(
    "ReversePackedSegs", num_inputs=2, num_outputs=1, inputs=("data", "lengths"), outputs=("reversed data",),
    inference=lambda ctx, ins: [ins[0]],
    doc="data [max_length, batch, ...] holds one sequence per column; each column's first lengths[b] time steps "
        "are reversed, the padding after them kept. lengths int32 or int64, each <= max_length."))


def _check_time_major(ctx, data, lengths, what="data"):
    if not isinstance(data, np.ndarray) or data.ndim < 2:
        raise ctx.input_error(0, "%s must be at least 2-D [max_length, batch, ...]" % what)
    lens = _int_vector(ctx, 1, lengths, "lengths")
    if lens.size != data.shape[1]:
        raise ctx.input_error(1, "lengths must hold one length per column (%d), got %d" % (data.shape[1], lens.size))
    bad = np.flatnonzero((lens < 0) | (lens > data.shape[0]))
    if bad.size:
        raise ctx.input_error(1, "length %d of sequence %d is outside [0, max_length = %d]"
                              % (lens[bad[0]], bad[0], data.shape[0]))
    return lens


@register_kernel("ReversePackedSegs")
def reverse_packed_segs(ctx):
    def run(data, lengths):
        lens = _check_time_major(ctx, data, lengths)
        return P.reverse_packed(data, lens)
    return run


@register_gradient("ReversePackedSegs")
def _reverse_grad(g):
    return [g.op("ReversePackedSegs", [g.GO(0), g.I(1)], [g.GI(0)])]


# ----------------------------------------------------------------- PackRNNSequence / UnpackRNNSequence

register_schema(OpSchema(
    "PackRNNSequence", num_inputs=2, num_outputs=1, inputs=("values", "lengths"), outputs=("output",),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype)],
    doc="Packs consecutive sequences values [sum(lengths), ...] into a time-major [max(lengths), len(lengths), "
        "...] tensor, zero padded. lengths int32."))

register_schema(OpSchema(
    "UnpackRNNSequence", num_inputs=2, num_outputs=1, inputs=("values", "lengths"), outputs=("output",),
    inference=lambda ctx, ins: [TensorType(None, ins[0].dtype)],
    doc="The inverse of PackRNNSequence: [T, B, ...] -> [sum(lengths), ...] with sequence b's first lengths[b] "
        "steps."))


def _pack_lengths(ctx, lengths):
    if not isinstance(lengths, np.ndarray) or lengths.dtype != np.int32 or lengths.ndim != 1:
        raise ctx.input_error(1, "lengths must be a 1-D int32 tensor")
    lens = lengths.astype(np.int64)
    if (lens < 0).any():
        raise ctx.input_error(1, "lengths must be non-negative")
    return lens


@register_kernel("PackRNNSequence")
def pack_rnn_sequence(ctx):
    def run(values, lengths):
        lens = _pack_lengths(ctx, lengths)
        if not isinstance(values, np.ndarray) or values.ndim < 1:
            raise ctx.input_error(0, "values must be at least 1-D")
        if int(lens.sum()) != values.shape[0]:
            raise ctx.input_error(1, "lengths sum to %d, values have %d rows" % (lens.sum(), values.shape[0]))
        return P.pack(values, lens)
    return run


@register_kernel("UnpackRNNSequence")
def unpack_rnn_sequence(ctx):
    def run(values, lengths):
        lens = _pack_lengths(ctx, lengths)
        if not isinstance(values, np.ndarray) or values.ndim < 2:
            raise ctx.input_error(0, "values must be at least 2-D [T, B, ...]")
        if lens.size != values.shape[1] or (lens.size and lens.max() > values.shape[0]):
            raise ctx.input_error(1, "lengths must hold %d lengths of at most %d" % (values.shape[1], values.shape[0]))
        return P.unpack(values, lens)
    return run


@register_gradient("PackRNNSequence")
def _pack_grad(g):
    return [g.op("UnpackRNNSequence", [g.GO(0), g.I(1)], [g.GI(0)])]


@register_gradient("UnpackRNNSequence")
def _unpack_grad(g):
    return [g.op("PackRNNSequence", [g.GO(0), g.I(1)], [g.GI(0)])]


# ----------------------------------------------------------------- SinusoidPositionEncoding

def _sinusoid_infer(ctx, ins):
    p = ins[0]
    if not p.known or len(p.dims) != 2:
        return [UNKNOWN]
    return [TensorType(tuple(p.dims) + (ctx.int("embedding_size"),), DT.FLOAT)]


register_schema(OpSchema(
    "SinusoidPositionEncoding", num_inputs=1, num_outputs=1, inputs=("positions",), outputs=("output",),
    inference=_sinusoid_infer,
    args=(Arg("embedding_size", "int", 100), Arg("alpha", "float", 10000.0), Arg("amplitude", "float", 1.0)),
    doc="Transformer position encodings: positions [M, K] (int32 or int64) -> [M, K, embedding_size] with "
        "entry k = amplitude * sin(p / alpha^(k / embedding_size)) for even k and cos for odd k, p = "
        "positions[i, 0] for every column of row i (as in Caffe2)."))


@register_kernel("SinusoidPositionEncoding")
def sinusoid_position_encoding(ctx):
    size, alpha, amplitude = ctx.int("embedding_size"), ctx.float("alpha"), ctx.float("amplitude")
    if size < 0:
        raise ctx.error("embedding_size must be >= 0, got %d" % size)
    if not alpha > 0:
        raise ctx.error("alpha must be positive, got %g" % alpha)

    def run(positions):
        if not isinstance(positions, np.ndarray) or positions.dtype not in (np.int32, np.int64):
            raise ctx.input_error(0, "POSITIONS must be int32 or int64")
        if positions.ndim != 2:
            raise ctx.input_error(0, "POSITIONS should be a 2-D tensor, got shape %s" % list(positions.shape))
        return E.sinusoid_position_encoding(positions, size, alpha, amplitude)
    return run


# ----------------------------------------------------------------- Glu

def _glu_infer(ctx, ins):
    x = ins[0]
    if not x.known or not x.dims:
        return [UNKNOWN]
    dims = list(x.dims)
    a = ctx.int("dim")
    a = a + len(dims) if a < 0 else a
    if not 0 <= a < len(dims):
        return [UNKNOWN]
    dims[a] //= 2
    return [TensorType(tuple(dims), x.dtype)]


register_schema(OpSchema(
    "Glu", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",), inference=_glu_infer,
    args=(Arg("dim", "int", -1, doc="the axis split in two halves"),),
    doc="Gated linear unit: X split along dim into halves A, B (dim of even size); Y = A * sigmoid(B)."))


@register_kernel("Glu")
def glu(ctx):
    dim = ctx.int("dim")

    def run(x):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ctx.input_error(0, "X must be a float32 tensor")
        a = _canonical(ctx, dim, x.ndim, "dim")
        if x.ndim == 0 or x.shape[a] % 2:
            raise ctx.input_error(0, "dim %d of X %s must have an even size" % (dim, list(x.shape)))
        return E.glu(x, a)
    return run
