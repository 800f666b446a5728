"""FloatToFusedRandRowwiseQuantized / FusedRandRowwiseQuantizedToFloat (Caffe2's
fused_rowwise_random_quantization_ops): rowwise 1/2/4/8-bit quantisation with the row's
float32 min and max kept, rounding to nearest or stochastically (`random`, seeded by the
op's device_option.random_seed, fresh entropy when unset). Layout: see
kernels/cpu/recsys/rand_rowwise.py."""
import numpy as np

from caffe2py.kernels.cpu.recsys import rand_rowwise as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, Arg, OpSchema, TensorType, register_kernel, register_schema

from ..tensor.fills import _rng

T = caffe2_pb2.TensorProto
_BITWIDTHS = (1, 2, 4, 8)


def _quant_infer(ctx, ins):
    x = ins[0]
    bits = ctx.int("bitwidth")
    if not x.known or len(x.dims) != 2 or bits not in _BITWIDTHS:
        return [UNKNOWN]
    k = 8 // bits
    return [TensorType((x.dims[0], 10 + (x.dims[1] + k - 1) // k), T.UINT8)]


register_schema(OpSchema(
    "FloatToFusedRandRowwiseQuantized", num_inputs=1, num_outputs=1,
    inputs=("input",), outputs=("output",), inference=_quant_infer,
    args=(Arg("bitwidth", "int", 8, doc="1, 2, 4 or 8 bits a value"),
          Arg("random", "bool", True, doc="stochastic rounding (else round to nearest)")),
    doc="float32 matrix [N, D] -> uint8 [N, 10 + ceil(D * bitwidth / 8)]: per row bitwidth, tail, "
        "float32 min and max, then the values as multiples of (max - min) / (2^bitwidth - 1) above "
        "min, value c in byte c % segment at bit (c // segment) * bitwidth."))

register_schema(OpSchema(
    "FusedRandRowwiseQuantizedToFloat", num_inputs=1, num_outputs=1,
    inputs=("quantized_input",), outputs=("float_output",),
    inference=lambda ctx, ins: [UNKNOWN],
    doc="Inverse of FloatToFusedRandRowwiseQuantized: min + q * ((max - min) / (2^bitwidth - 1) + 1e-8)."))


@register_kernel("FloatToFusedRandRowwiseQuantized")
def float_to_fused_rand(ctx):
    bits, random = ctx.int("bitwidth"), ctx.bool("random")
    if bits not in _BITWIDTHS:
        raise ctx.error("bitwidth must be 1, 2, 4 or 8, got %d" % bits)
    rng = _rng(ctx) if random else None

    def run(x):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
            raise ctx.input_error(0, "must be a float32 matrix, got %s %s"
                                  % (getattr(x, "dtype", type(x).__name__), list(np.shape(x))))
        return K.quantize(x, bits, rng)
    return run


@register_kernel("FusedRandRowwiseQuantizedToFloat")
def fused_rand_to_float(ctx):
    def run(y):
        if not isinstance(y, np.ndarray) or y.dtype != np.uint8 or y.ndim != 2 or y.shape[1] < 10:
            raise ctx.input_error(0, "must be a uint8 matrix of at least 10 columns, got %s %s"
                                  % (getattr(y, "dtype", type(y).__name__), list(np.shape(y))))
        if y.shape[0] == 0:
            return np.zeros((0, 0), np.float32)
        bits, tail = int(y[0, 0]), int(y[0, 1])
        if bits not in _BITWIDTHS or tail >= 8 // bits or tail > (y.shape[1] - 10) * (8 // bits):
            raise ctx.input_error(0, "header holds bitwidth %d and tail %d; expected bitwidth 1, 2, 4 or 8 "
                                     "and tail < 8 / bitwidth" % (bits, tail))
        if (y[:, 0] != bits).any() or (y[:, 1] != tail).any():
            raise ctx.input_error(0, "rows disagree on bitwidth or tail")
        return K.dequantize(y)
    return run
