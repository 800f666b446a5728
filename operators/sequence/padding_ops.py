"""Caffe2's packing and padding ops: PackSegments, UnpackSegments, AddPadding,
RemovePadding, GatherPadding, PadEmptySamples, VariableLengthSequencePadding."""
import numpy as np

from caffe2py.kernels.cpu.recsys import ranges as R
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema
from caffe2py.schema_rules import output_size_problem

from ..recsys._checks import call, check_int, check_int_vector

DT = caffe2_pb2.TensorProto


# --------------------------------------------------------------------------- Pack / Unpack

register_schema(OpSchema(
    "PackSegments", num_inputs=2, num_outputs=(1, 2), inputs=("lengths", "tensor"),
    outputs=("packed_tensor", "presence_mask"),
    args=(Arg("max_length", "int", -1, doc="fixed packed length (-1: the longest segment); longer segments "
                                           "are cut"),
          Arg("pad_minf", "bool", False, doc="pad float32 with -inf instead of 0"),
          Arg("return_presence_mask", "bool", False, doc="second output: bool [B, T], true where data")),
    inference=lambda ctx, ins: [TensorType((ins[0].dims[0], ctx.int("max_length")) + tuple(ins[1].dims[1:]),
                                           ins[1].dtype) if ctx.int("max_length") >= 0
                                else TensorType(None, ins[1].dtype), TensorType(None, DT.BOOL)],
    doc="N-dim tensor -> N+1-dim [len(lengths), max length, ...]: segment i (lengths[i] consecutive rows) "
        "in row i, padded with zeros (or -inf)."))


@register_kernel("PackSegments")
def pack_segments(ctx):
    max_length = ctx.int("max_length")
    pad_minf = ctx.bool("pad_minf")
    with_mask = ctx.bool("return_presence_mask")
    if with_mask and ctx.n_outputs != 2:
        raise ctx.error("return_presence_mask=1 needs two outputs")
    if max_length < -1:
        raise ctx.error("max_length must be -1 or >= 0, got %d" % max_length)

    def run(lengths, data):
        check_int_vector(ctx, 0, lengths, "LENGTH")
        if data.ndim < 1:
            raise ctx.input_error(1, "DATA should be at least 1-D")
        packed, mask = call(ctx, {"lengths": 0}, R.pack_segments, data, lengths, max_length, pad_minf, with_mask)
        return (packed, mask) if ctx.n_outputs == 2 else packed
    return run


register_schema(OpSchema(
    "UnpackSegments", num_inputs=2, num_outputs=1, inputs=("lengths", "tensor"), outputs=("packed_tensor",),
    args=(Arg("max_length", "int", -1, doc="the packed length (must equal tensor.shape[1])"),),
    inference=lambda ctx, ins: [TensorType(None, ins[1].dtype)],
    doc="Inverse of PackSegments: [B, T, ...] -> the first lengths[i] rows of each i, concatenated."))


@register_kernel("UnpackSegments")
def unpack_segments(ctx):
    max_length = ctx.int("max_length")

    def run(lengths, data):
        check_int_vector(ctx, 0, lengths, "LENGTH")
        if data.ndim < 2:
            raise ctx.input_error(1, "DATA should be at least 2-D")
        return call(ctx, {"lengths": 0, "data": 1}, R.unpack_segments, data, lengths, max_length)
    return run


# --------------------------------------------------------------------------- Add / Remove / Gather padding

_PAD_ARGS = (Arg("padding_width", "int", 1, doc="rows of padding at the start of each range"),
             Arg("end_padding_width", "int", -1, doc="rows at the end (-1: padding_width)"))
_PAD_TYPES = (np.float32, np.float64, np.int32, np.int64, np.bool_)


def _widths(ctx):
    start = ctx.int("padding_width")
    end = ctx.int("end_padding_width")
    if start < 0:
        raise ctx.error("padding_width must be >= 0, got %d" % start)
    return start, start if end < 0 else end


def _lengths_or_none(ctx, lengths, index=1):
    if lengths is None:
        return None
    check_int(ctx, index, lengths, "lengths")
    return lengths


def _check_padded(ctx, data):
    if data.ndim < 1:
        raise ctx.input_error(0, "data_in must be at least 1-D")
    if data.dtype.type not in _PAD_TYPES:
        raise ctx.input_error(0, "Unsupported type %s (float, double, int32, int64 or bool)" % data.dtype)


def _padding_infer(sign):
    def infer(ctx, ins):
        start, end = ctx.int("padding_width", 1), ctx.int("end_padding_width", -1)
        width = start + (start if end < 0 else end)
        segments = ins[1].dims[0] if len(ins) > 1 else 1
        data = TensorType((ins[0].dims[0] + sign * width * segments,) + tuple(ins[0].dims[1:]), ins[0].dtype)
        return [data, TensorType((segments,), DT.INT32)]
    return infer


register_schema(OpSchema(
    "AddPadding", num_inputs=(1, 4), num_outputs=(1, 2), args=_PAD_ARGS,
    inputs=("data_in", "lengths", "start_padding", "end_padding"), outputs=("data_out", "lengths_out"),
    inference=_padding_infer(1),
    doc="Adds padding_width rows of start_padding (zeros when absent) before and end_padding_width rows "
        "of end_padding (start_padding when absent) after each range of rows given by lengths (one range "
        "when absent; sum(lengths) = N)."))


@register_kernel("AddPadding")
def add_padding(ctx):
    start, end = _widths(ctx)

    def run(data, lengths=None, start_pad=None, end_pad=None):
        _check_padded(ctx, data)
        lengths = _lengths_or_none(ctx, lengths)
        block = int(np.prod(data.shape[1:], dtype=np.int64))
        for i, pad in ((2, start_pad), (3, end_pad)):
            if pad is not None and pad.size != block:
                raise ctx.input_error(i, "padding has %d values, a row of data_in has %d" % (pad.size, block))
        if end_pad is None:
            end_pad = start_pad
        segments = 1 if lengths is None else int(np.size(lengths))
        rows = data.shape[0] + (start + end) * segments
        problem = output_size_problem((rows,) + tuple(data.shape[1:]), data.itemsize)
        if problem:                  # padding widths are arguments: an absurd one is refused by size
            raise ctx.error("padding widths %d and %d: %s" % (start, end, problem))
        out, lengths_out = call(ctx, {"lengths": 1}, R.add_padding, data, lengths,
                                None if start_pad is None else start_pad.astype(data.dtype, copy=False),
                                None if end_pad is None else end_pad.astype(data.dtype, copy=False), start, end)
        return (out, lengths_out) if ctx.n_outputs == 2 else out
    return run


register_schema(OpSchema(
    "RemovePadding", num_inputs=(1, 2), num_outputs=(1, 2), args=_PAD_ARGS,
    inputs=("data_in", "lengths"), outputs=("data_out", "lengths_out"), inference=_padding_infer(-1),
    doc="Inverse of AddPadding: drops padding_width rows at the start and end_padding_width rows at the "
        "end of each range."))


@register_kernel("RemovePadding")
def remove_padding(ctx):
    start, end = _widths(ctx)

    def run(data, lengths=None):
        _check_padded(ctx, data)
        lengths = _lengths_or_none(ctx, lengths)
        out, lengths_out = call(ctx, {"lengths": 1}, R.remove_padding, data, lengths, start, end)
        return (out, lengths_out) if ctx.n_outputs == 2 else out
    return run


register_schema(OpSchema(
    "GatherPadding", num_inputs=2, num_outputs=(1, 2), args=_PAD_ARGS,
    inputs=("data_in", "lengths"), outputs=("padding_sum", "end_padding_sum"),
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims[1:]), ins[0].dtype)] * 2,
    doc="Sum of the start-padding rows and (second output) of the end-padding rows of every range; with "
        "one output, the sum of both (AddPadding's gradient with respect to the paddings)."))


@register_kernel("GatherPadding")
def gather_padding(ctx):
    start, end = _widths(ctx)

    def run(data, lengths):
        _check_padded(ctx, data)
        if data.dtype == np.bool_:
            raise ctx.input_error(0, "GatherPadding should not be executed on an input of type bool, as "
                                     "addition is not properly defined with booleans.")
        lengths = _lengths_or_none(ctx, lengths)
        starts, ends = call(ctx, {"lengths": 1}, R.gather_padding, data, lengths, start, end)
        return (starts, ends) if ctx.n_outputs == 2 else starts + ends
    return run


# --------------------------------------------------------------------------- PadEmptySamples

register_schema(OpSchema(
    "PadEmptySamples", num_inputs=(1, None), num_outputs=(1, None), inputs=("lengths",),
    outputs=("out_lengths",), inputs_outputs_check=lambda i, o: i == o,
    inference=lambda ctx, ins: [TensorType(tuple(ins[0].dims), DT.INT32)] + [UNKNOWN] * (len(ins) - 1),
    doc="Gives every empty sample one zero row: lengths 0 become 1 and each feature tensor (sum(lengths) "
        "rows) gets a zero row at that sample's place."))


@register_kernel("PadEmptySamples")
def pad_empty_samples(ctx):
    def run(lengths, *features):
        if lengths.ndim != 1:
            raise ctx.input_error(0, "LENGTH should be 1-D")
        check_int(ctx, 0, lengths, "LENGTH")
        lens = lengths.astype(np.int64)
        if lens.size and lens.min() < 0:
            raise ctx.input_error(0, "LENGTH must be non-negative")
        total = int(lens.sum())
        out_lens = np.maximum(lens, 1)
        outs = [out_lens.astype(np.int32)]
        for k, f in enumerate(features, start=1):
            if f.ndim < 1:
                raise ctx.input_error(k, "FEATURE should at least 1-D")
            if f.shape[0] != total:
                raise ctx.input_error(k, "FEATURE and LENGTH should be consistent")
            out = np.zeros((int(out_lens.sum()),) + f.shape[1:], f.dtype)
            if f.dtype == object:
                out[...] = ""
            block = int(np.prod(f.shape[1:], dtype=np.int64))
            R.copy_runs(np.ascontiguousarray(f), R.exclusive_cumsum(lens) * block, lens * block,
                        out, R.exclusive_cumsum(out_lens) * block)
            outs.append(out)
        return tuple(outs) if len(outs) > 1 else outs[0]
    return run


# --------------------------------------------------------------------------- VariableLengthSequencePadding

register_schema(OpSchema(
    "VariableLengthSequencePadding", num_inputs=2, num_outputs=1, allow_inplace={(0, 0)},
    inputs=("INPUT", "SEQ_LENGTHS"), outputs=("OUTPUT",), inference=lambda ctx, ins: [ins[0]],
    doc="INPUT [N, B, M] (time major) with every step i >= SEQ_LENGTHS[b] of sequence b set to zero "
        "(pytorch's pad_packed_sequence)."))


@register_kernel("VariableLengthSequencePadding")
def variable_length_sequence_padding(ctx):
    def run(x, lengths):
        if x.ndim != 3:
            raise ctx.input_error(0, "INPUT must be [N, B, M], got shape %s" % list(x.shape))
        check_int_vector(ctx, 1, lengths, "SEQ_LENGTHS")
        if lengths.shape[0] != x.shape[1]:
            raise ctx.input_error(1, "SEQ_LENGTHS has %d entries, INPUT's batch is %d" % (lengths.shape[0], x.shape[1]))
        if lengths.size and lengths.min() < 0:
            raise ctx.input_error(1, "SEQ_LENGTHS must be non-negative")
        keep = np.arange(x.shape[0])[:, None] < lengths[None, :]
        return np.where(keep[:, :, None], x, np.zeros((), x.dtype))
    return run
