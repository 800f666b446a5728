"""ONNX sequence ops (opset 11+) over Python lists of arrays, and
StringNormalizer over object (str) arrays."""
import numpy as np

from caffe2py.kernels.cpu.math import onnx_math as om
from caffe2py.registry import Arg

from ..onnx_base import axis_of, onnx_op


def _position(ctx, seq, pos, insert=False):
    n = len(seq)
    p = int(np.asarray(pos).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise ctx.error("position %d is out of range for a sequence of length %d" % (p, n))
    return p + n if p < 0 else p


@onnx_op("SequenceEmpty", (11, None))
def sequence_empty(ctx):
    return lambda: []


@onnx_op("SequenceConstruct", (11, None))
def sequence_construct(ctx):
    return lambda *xs: list(xs)


@onnx_op("SequenceInsert", (11, None))
def sequence_insert(ctx):
    def run(seq, x, pos=None):
        out = list(seq)
        out.insert(len(out) if pos is None else _position(ctx, seq, pos, insert=True), x)
        return out
    return run


@onnx_op("SequenceAt", (11, None))
def sequence_at(ctx):
    return lambda seq, pos: seq[_position(ctx, seq, pos)]


@onnx_op("SequenceErase", (11, None))
def sequence_erase(ctx):
    def run(seq, pos=None):
        out = list(seq)
        del out[len(out) - 1 if pos is None else _position(ctx, seq, pos)]
        return out
    return run


@onnx_op("SequenceLength", (11, None))
def sequence_length(ctx):
    return lambda seq: np.array(len(seq), dtype=np.int64)


@onnx_op("ConcatFromSequence", (11, None), args=(Arg("axis", "int", None, required=True),))
def concat_from_sequence(ctx):
    axis = ctx.int("axis")
    new_axis = bool(ctx.int("new_axis", 0))

    def run(seq):
        if not seq:
            raise ctx.input_error(0, "cannot concatenate an empty sequence")
        rank = seq[0].ndim + (1 if new_axis else 0)
        a = axis_of(ctx, axis, rank)
        return np.stack(seq, axis=a) if new_axis else np.concatenate(seq, axis=a)
    return run


@onnx_op("SplitToSequence", (11, None))
def split_to_sequence(ctx):
    axis = ctx.int("axis", 0)
    keepdims = bool(ctx.int("keepdims", 1))

    def run(x, split=None):
        a = axis_of(ctx, axis, x.ndim)
        if split is None:       # size-1 parts: none along an empty axis
            parts = np.split(x, x.shape[a], axis=a) if x.shape[a] else []
            return [p.copy() if keepdims else np.squeeze(p, axis=a) for p in parts]
        if split.ndim == 0:
            size = int(split)
            if size < 1:
                raise ctx.input_error(1, "a scalar split is the part size and must be positive, got %d" % size)
            bounds = list(range(size, x.shape[a], size))
        else:
            if split.ndim != 1 or (split.size and split.min() < 0):
                raise ctx.input_error(1, "split must be a scalar or a 1-D tensor of sizes >= 0, got %s"
                                      % split.tolist())
            if int(split.sum()) != x.shape[a]:
                raise ctx.input_error(1, "split sizes %s do not add up to %d" % (split.tolist(), x.shape[a]))
            bounds = np.cumsum(split)[:-1].tolist()
        return [p.copy() for p in np.split(x, bounds, axis=a)]
    return run


@onnx_op("StringNormalizer", (10, None))
def string_normalizer(ctx):
    action = ctx.string("case_change_action", "NONE")
    sensitive = bool(ctx.int("is_case_sensitive", 0))
    stopwords = ctx.strings("stopwords", []) or []
    # Decode as the kernel does its own comparison in str space.
    return lambda x: om.normalize_strings(x, action, sensitive, stopwords)
