"""ONNX optional values and SequenceMap. An empty optional is None; sequences
are Python lists."""
import numpy as np

from ..onnx_base import onnx_op
from ..control.onnx_control import Body, _split_captured


@onnx_op("Optional", (15, None))
def optional(ctx):
    return lambda value=None: value


@onnx_op("OptionalHasElement", (15, None))
def optional_has_element(ctx):
    return lambda value=None: np.array(value is not None)


@onnx_op("OptionalGetElement", (15, None))
def optional_get_element(ctx):
    def run(value=None):
        if value is None:
            raise ctx.input_error(0, "the optional is empty")
        return value
    return run


@onnx_op("SequenceMap", (17, None))
def sequence_map(ctx):
    body = Body(ctx, ctx.net("body"))

    def run(*args):
        own, outer = _split_captured(ctx, args)
        seqs = [a if isinstance(a, list) else None for a in own]
        length = len(next(s for s in seqs if s is not None))
        results = [[] for _ in body.outputs]
        for i in range(length):
            values = dict(outer)
            for name, arg, seq in zip(body.inputs, own, seqs):
                values[name] = seq[i] if seq is not None else arg
            for k, value in enumerate(body.run(values)):
                results[k].append(value)
        return tuple(results) if len(results) > 1 else results[0]
    return run
