"""Caffe2's CTCGreedyDecoder (`merge_repeated`) and CTCBeamSearchDecoder (`beam_width`,
`num_candidates`, `prune_threshold`): INPUTS [T, B, K] (class 0 the blank), optional
SEQ_LEN [B] int32. Kernels: kernels/cpu/sequence/ctc_decode.py."""
import numpy as np

from caffe2py.kernels.cpu.sequence import ctc_decode as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import FLOATS, check_dtype
from .._gradient_hooks import should_not_do_gradient

DT = caffe2_pb2.TensorProto


def _infer(n_out):
    def infer(ctx, ins):
        outs = [TensorType(None, DT.INT32), TensorType(None, DT.INT32)]
        return outs + [TensorType(None, DT.FLOAT)] * (n_out - 2)
    return infer


register_schema(OpSchema(
    "CTCGreedyDecoder", num_inputs={1, 2}, num_outputs=2,
    args=(Arg("merge_repeated", "bool", True, doc="drop a class repeated on consecutive steps"),),
    inputs=("INPUTS", "SEQ_LEN"), outputs=("OUTPUT_LEN", "VALUES"), inference=_infer(2),
    doc="Greedy CTC decoding: per sequence b, the argmax class of each of its first SEQ_LEN[b] steps "
        "(all T without SEQ_LEN), blanks (class 0) removed and, with merge_repeated, a class equal to "
        "the previous step's dropped. OUTPUT_LEN [B] int32; VALUES the decoded classes concatenated."))
register_schema(OpSchema(
    "CTCBeamSearchDecoder", num_inputs={1, 2}, num_outputs={2, 3},
    args=(Arg("beam_width", "int", 10, doc="prefixes kept per step"),
          Arg("num_candidates", "int", 1, doc="best prefixes returned per sequence"),
          Arg("prune_threshold", "float", 0.001, doc="classes with probability at most this are skipped")),
    inputs=("INPUTS", "SEQ_LEN"), outputs=("OUTPUT_LEN", "VALUES", "OUTPUT_PROB"), inference=_infer(3),
    doc="CTC prefix beam search over INPUTS read as per-step class probabilities (class 0 the blank). "
        "OUTPUT_LEN and OUTPUT_PROB have B * num_candidates entries (a missing candidate: length 0, "
        "probability 0); VALUES holds the candidates' classes concatenated."))
should_not_do_gradient("CTCGreedyDecoder")
should_not_do_gradient("CTCBeamSearchDecoder")


def _lengths(ctx, scores, seq_len):
    check_dtype(ctx, 0, scores, FLOATS)
    if scores.ndim != 3:
        raise ctx.input_error(0, "must be 3-D [max_time, batch, classes], got shape %s" % list(scores.shape))
    t, b, k = scores.shape
    if k == 0 and t > 0:
        raise ctx.input_error(0, "has no classes")
    if seq_len is None:
        return np.full(b, t, dtype=np.int64)
    if seq_len.dtype.kind not in "iu" or seq_len.shape != (b,):
        raise ctx.input_error(1, "must be an integer vector of %d lengths, got %s %s"
                              % (b, seq_len.dtype, list(seq_len.shape)))
    if seq_len.size and (seq_len.min() < 0 or seq_len.max() > t):
        raise ctx.input_error(1, "lengths must lie in [0, %d], got [%d, %d]" % (t, seq_len.min(), seq_len.max()))
    return seq_len.astype(np.int64)


@register_kernel("CTCGreedyDecoder")
def ctc_greedy_decoder(ctx):
    merge = ctx.bool("merge_repeated")

    def run(scores, seq_len=None):
        lengths = _lengths(ctx, scores, seq_len)
        if scores.shape[0] == 0:
            return np.zeros(scores.shape[1], np.int32), np.zeros(0, np.int32)
        return K.greedy(scores, lengths, merge)
    return run


@register_kernel("CTCBeamSearchDecoder")
def ctc_beam_search_decoder(ctx):
    beam_width, num_candidates = ctx.int("beam_width"), ctx.int("num_candidates")
    prune = ctx.float("prune_threshold")
    if beam_width < 1 or not 1 <= num_candidates <= beam_width:
        raise ctx.error("need beam_width >= 1 and 1 <= num_candidates <= beam_width, got %d and %d"
                        % (beam_width, num_candidates))

    def run(scores, seq_len=None):
        lengths = _lengths(ctx, scores, seq_len)
        out_len, values, prob = K.beam_search(scores, lengths, beam_width, num_candidates, prune)
        return (out_len, values, prob) if ctx.n_outputs == 3 else (out_len, values)
    return run
