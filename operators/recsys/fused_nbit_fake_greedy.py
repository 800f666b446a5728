"""FloatToFused{4,2}BitFakeRowwiseQuantized and the GREEDY engine of the n-bit rowwise
quantisers (Caffe2's fused_rowwise_nbit_conversion_ops, engine "GREEDY"). The kernels
are in kernels/cpu/recsys/nbit_fake_greedy.py."""
import numpy as np

from caffe2py.kernels.cpu.recsys import nbit_fake_greedy as K
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import UNKNOWN, OpSchema, TensorType, register_kernel, register_schema

UINT8 = caffe2_pb2.TensorProto.UINT8


def _checked(ctx, x, dtype):
    if not isinstance(x, np.ndarray) or x.dtype != dtype:
        raise ctx.input_error(0, "expected %s input, got %s" % (np.dtype(dtype).name,
                                                                getattr(x, "dtype", type(x).__name__)))
    if x.ndim < 1:
        raise ctx.input_error(0, "input must have at least one dimension")
    return x


def _fake_infer(ctx, ins):
    x = ins[0]
    if not x.known or not x.dims:
        return [UNKNOWN]
    return [TensorType(tuple(x.dims[:-1]) + (x.dims[-1] + 8,), UINT8)]


for _bits in (4, 2):
    _name = "FloatToFused%dBitFakeRowwiseQuantized" % _bits
    register_schema(OpSchema(
        _name, num_inputs=1, num_outputs=1, inference=_fake_infer,
        doc="Rows of float32 [..., D] quantised to %d bits (bias = min, scale = (max - min) / %d, both "
            "rounded to float16; engine GREEDY searches a narrower range that lowers the L2 error) but "
            "stored in the fused 8-bit layout: D uint8 values, float32 scale, float32 bias. The "
            "Fused8BitRowwise ops read it." % (_bits, (1 << _bits) - 1)))

    def _fake_factory(ctx, bits=_bits):
        greedy = ctx.engine == "GREEDY"
        return lambda x: K.float_to_fused_nbit_fake(_checked(ctx, x, np.float32), bits, greedy)

    register_kernel(_name)(_fake_factory)
    register_kernel(_name, engine="GREEDY")(_fake_factory)

    for _quant, _dtype in (("FloatToFused%dBitRowwiseQuantized" % _bits, np.float32),
                           ("HalfToFused%dBitRowwiseQuantized" % _bits, np.float16)):
        def _greedy_factory(ctx, bits=_bits, dtype=_dtype):
            return lambda x: K.float_to_fused_nbit_greedy(_checked(ctx, x, dtype), bits)

        register_kernel(_quant, engine="GREEDY")(_greedy_factory)
