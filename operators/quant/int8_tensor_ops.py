"""Caffe2's Int8 tensor ops: Int8Quantize (float32 -> Int8 tensor), Int8Dequantize,
Int8GivenTensorFill (uint8 values from a byte string) and Int8GivenIntTensorFill
(int32 values: the biases of Int8Conv / Int8FC)."""
import numpy as np

from caffe2py.kernels.cpu.quant import requantize as rq
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from ._int8 import Y_ARGS, describe, int8_input, output, output_params, qparam_override

DT = caffe2_pb2.TensorProto


# ----------------------------------------------------------------- Int8Quantize

register_schema(OpSchema(
    "Int8Quantize", num_inputs=(1, 2), num_outputs=1, args=Y_ARGS,
    inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.UINT8)], inputs=("X", "Qparam"), outputs=("Y",),
    doc="Y = clamp(round(X / Y_scale) + Y_zero_point, 0, 255) (round half to even), an Int8 tensor "
        "with scale Y_scale and zero point Y_zero_point. An Int8QuantParams blob as Qparam replaces "
        "the two arguments."))


@register_kernel("Int8Quantize")
def int8_quantize(ctx):
    scale, zero_point = output_params(ctx)

    def run(x, qparam=None):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ctx.input_error(0, "Int8Quantize quantizes a float32 tensor, got %s" % describe(x))
        s, z = qparam_override(ctx, 1, qparam, scale, zero_point)
        return output(rq.quantize_uint8(x, s, z), s, z)
    return run


# ----------------------------------------------------------------- Int8Dequantize

register_schema(OpSchema(
    "Int8Dequantize", num_inputs=1, num_outputs=1,
    inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.FLOAT)], inputs=("qX",), outputs=("Y",),
    doc="float32 Y = (qX - zero point) * scale of the Int8 tensor qX."))


@register_kernel("Int8Dequantize")
def int8_dequantize(ctx):
    def run(x):
        x = int8_input(ctx, 0, x)
        return rq.dequantize(x.data, x.scale, x.zero_point)
    return run


# ----------------------------------------------------------------- Int8Given*TensorFill

_FILL_ARGS = Y_ARGS + (Arg("shape", "ints", None, required=True, doc="output dims"),)


def _fill_shape(ctx):
    shape = [int(d) for d in ctx.ints("shape")]
    if any(d < 0 for d in shape):
        raise ctx.error("shape %s has a negative dim" % shape)
    return shape


def _fill_infer(ctx, ins):
    dtype = DT.INT32 if ctx.type == "Int8GivenIntTensorFill" else DT.UINT8
    return [TensorType(tuple(int(d) for d in ctx.ints("shape")), dtype)]


register_schema(OpSchema(
    "Int8GivenTensorFill", num_inputs=0, num_outputs=1,
    args=_FILL_ARGS + (Arg("values", "string", None, required=True, doc="the uint8 values as a byte string"),),
    inference=_fill_infer, outputs=("Y",),
    doc="An Int8 tensor of `shape` holding the bytes of `values` (row-major), with scale Y_scale and zero "
        "point Y_zero_point: how quantized nets store their weights."))
register_schema(OpSchema(
    "Int8GivenIntTensorFill", num_inputs=0, num_outputs=1,
    args=_FILL_ARGS + (Arg("values", "ints", None, required=True, doc="the int32 values"),),
    inference=_fill_infer, outputs=("Y",),
    doc="An Int8 tensor of int32 `values` reshaped to `shape` (the bias of Int8Conv / Int8FC, whose scale "
        "is the input's times the weights'), with scale Y_scale and zero point Y_zero_point."))


def _filled(ctx, values):
    shape = _fill_shape(ctx)
    if int(np.prod(shape, dtype=np.int64)) != values.size:
        raise ctx.error("%d values do not fill shape %s" % (values.size, shape), blob=ctx.outputs[0])
    data = values.reshape(shape)
    data.setflags(write=False)          # shared by every run
    scale = float(np.float32(ctx.float("Y_scale", 1.0)))
    result = output(data, scale, ctx.int("Y_zero_point", 0))
    return lambda: result


@register_kernel("Int8GivenTensorFill")
def int8_given_tensor_fill(ctx):
    arg = next((a for a in ctx.op_def.arg if a.name == "values"), None)
    raw = b""
    if arg is not None:
        raw = arg.s if arg.HasField("s") else (arg.strings[0] if len(arg.strings) == 1 else b"")
    output_params(ctx)
    return _filled(ctx, np.frombuffer(bytes(raw), dtype=np.uint8).copy())


@register_kernel("Int8GivenIntTensorFill")
def int8_given_int_tensor_fill(ctx):
    arg = next((a for a in ctx.op_def.arg if a.name == "values"), None)
    raw = list(arg.ints) if arg is not None else []
    bad = next((v for v in raw if not -2 ** 31 <= v < 2 ** 31), None)
    if bad is not None:
        raise ctx.error("value %d does not fit int32" % bad)
    return _filled(ctx, np.asarray(raw, dtype=np.int32))
