"""What Caffe2's Int8 operator modules share: reading Int8 tensor inputs (with the
checks Caffe2 makes or would crash without), the Y_scale / Y_zero_point arguments,
output blobs and schema inference of uint8 outputs."""
import math

import numpy as np

from caffe2py.int8_tensor import Int8QuantParams, Int8TensorCPU
from caffe2py.kernels.cpu.quant.requantize import RequantizationError
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, TensorType

DT = caffe2_pb2.TensorProto
UINT8 = np.dtype(np.uint8)
INT32 = np.dtype(np.int32)
Y_ARGS = (Arg("Y_scale", "float", 1.0, doc="output quantization scale"),
          Arg("Y_zero_point", "int", 0, doc="output quantization zero point, in [0, 255]"))


def describe(value):
    if value is None:
        return "an empty blob"
    if isinstance(value, np.ndarray):
        return "a %s tensor of shape %s (not an Int8 tensor)" % (value.dtype, list(value.shape))
    return "a %s object" % type(value).__name__


def int8_input(ctx, index, value, dtype=UINT8):
    """The Int8TensorCPU of input `index`, its scale positive and finite and (for uint8
    data) its zero point in [0, 255]; a named error otherwise."""
    if not isinstance(value, Int8TensorCPU):
        raise ctx.input_error(index, "%s reads an Int8 tensor (made by Int8Quantize, Int8GivenTensorFill or "
                                     "FeedBlob of an Int8Tensor), got %s" % (ctx.type, describe(value)))
    if value.dtype != dtype:
        raise ctx.input_error(index, "Int8 tensor data must be %s here, got %s" % (dtype, value.dtype))
    if dtype == UINT8:
        check_params(ctx, value.scale, value.zero_point, "input %d ('%s')" % (index, ctx.inputs[index]))
    return value


def check_params(ctx, scale, zero_point, what):
    if not (scale > 0.0 and math.isfinite(scale)):
        raise ctx.error("%s has scale %r; a quantization scale must be positive and finite" % (what, scale))
    if not 0 <= zero_point <= 255:
        raise ctx.error("%s has zero point %d; uint8 zero points lie in [0, 255]" % (what, zero_point))


def output_params(ctx):
    """(Y_scale as float32, Y_zero_point), checked."""
    scale = float(np.float32(ctx.float("Y_scale", 1.0)))
    zero_point = ctx.int("Y_zero_point", 0)
    check_params(ctx, scale, zero_point, "the output (Y_scale / Y_zero_point)")
    return scale, zero_point


def qparam_override(ctx, index, value, scale, zero_point):
    """Caffe2's optional Qparam input (an Int8QuantParamsBlob) replaces Y_scale and Y_zero_point."""
    if value is None and index >= ctx.n_inputs:
        return scale, zero_point
    if not isinstance(value, Int8QuantParams):
        raise ctx.input_error(index, "the Qparam input must hold Int8 quantization parameters "
                                     "(Int8QuantParams), got %s" % describe(value))
    check_params(ctx, value.scale, value.zero_point, "the Qparam input")
    return value.scale, value.zero_point


def require_input_params(ctx, x, scale, zero_point):
    """Ops that keep their input's quantization (Caffe2 checks Y_scale / Y_zero_point
    against the input's and refuses a mismatch)."""
    if np.float32(scale) != np.float32(x.scale) or zero_point != x.zero_point:
        raise ctx.error("Y_scale %.9g / Y_zero_point %d must equal the input's scale %.9g / zero point %d: "
                        "%s keeps its input's quantization" % (scale, zero_point, x.scale, x.zero_point, ctx.type))


def requant_error(ctx, exc):
    """A Caffe2Error naming the op for a RequantizationError of the arithmetic."""
    return ctx.error(str(exc))


def output(data, scale, zero_point):
    return Int8TensorCPU(data, scale, zero_point)


def uint8_like(ins, i=0):
    """Inference: output typed as input i's dims, uint8."""
    return TensorType(ins[i].dims, DT.UINT8)


__all__ = ["Y_ARGS", "RequantizationError", "int8_input", "output_params", "require_input_params", "output",
           "uint8_like", "check_params", "qparam_override", "requant_error", "describe", "UINT8", "INT32"]
