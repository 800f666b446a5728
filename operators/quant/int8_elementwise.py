"""Caffe2's elementwise Int8 ops: Int8Add / Int8AddRelu / Int8Sum / Int8SumRelu (QNNPACK's
fixed-point add of two same-shaped tensors), Int8Relu, Int8LeakyRelu, Int8Sigmoid and
Int8Softmax (QNNPACK's lookup tables; the last two produce scale 1/256, zero point 0)."""
import numpy as np

from caffe2py.kernels.cpu.quant import requantize as rq
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema

from ._int8 import (Y_ARGS, RequantizationError, int8_input, output, output_params, require_input_params,
                    requant_error, uint8_like)

DT = caffe2_pb2.TensorProto


# ----------------------------------------------------------------- Int8Add / Int8Sum

for _op, _relu in (("Int8Add", False), ("Int8AddRelu", True), ("Int8Sum", False), ("Int8SumRelu", True)):
    register_schema(OpSchema(
        _op, num_inputs=2 if _op.startswith("Int8Add") else (1, None), num_outputs=1,
        allow_inplace={(0, 0), (1, 0)}, args=Y_ARGS,
        inference=lambda ctx, ins: [uint8_like(ins)], inputs=("A", "B"), outputs=("C",),
        doc="C = requantize(A + B) of two Int8 tensors of one shape (no broadcasting) with Y_scale / "
            "Y_zero_point, QNNPACK's fixed-point add%s.%s" % (
                " clamped below at the zero point (ReLU)" if _relu else "",
                " Caffe2 registers Int8Sum as Int8Add under another name: it takes exactly two inputs."
                if "Sum" in _op else "")))


def _add_factory(relu):
    def factory(ctx):
        if ctx.n_inputs != 2:
            raise ctx.error("%s adds exactly two Int8 tensors (Caffe2's kernel), got %d inputs"
                            % (ctx.type, ctx.n_inputs))
        y_scale, y_zp = output_params(ctx)
        lo = rq.relu_floor(y_scale, y_zp) if relu else 0

        def run(a, b):
            a = int8_input(ctx, 0, a)
            b = int8_input(ctx, 1, b)
            if a.shape != b.shape:
                raise ctx.input_error(1, "shape %s differs from A's %s: %s does not broadcast"
                                      % (list(b.shape), list(a.shape), ctx.type))
            try:
                params = rq.add_params(a.scale, b.scale, y_scale)
            except RequantizationError as exc:
                raise requant_error(ctx, exc) from None
            return output(rq.add_uint8(a.data, b.data, a.zero_point, b.zero_point, params, y_zp, lo), y_scale, y_zp)
        return run
    return factory


for _op, _relu in (("Int8Add", False), ("Int8AddRelu", True), ("Int8Sum", False), ("Int8SumRelu", True)):
    register_kernel(_op)(_add_factory(_relu))


# ----------------------------------------------------------------- Int8Relu / Int8LeakyRelu

register_schema(OpSchema(
    "Int8Relu", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, args=Y_ARGS,
    inference=lambda ctx, ins: [uint8_like(ins)], inputs=("X",), outputs=("Y",),
    doc="Y = max(X, zero point): ReLU in the input's quantization (Y_scale / Y_zero_point must equal X's)."))


@register_kernel("Int8Relu")
def int8_relu(ctx):
    y_scale, y_zp = output_params(ctx)

    def run(x):
        x = int8_input(ctx, 0, x)
        require_input_params(ctx, x, y_scale, y_zp)
        return output(np.maximum(x.data, np.uint8(x.zero_point)), x.scale, x.zero_point)
    return run


register_schema(OpSchema(
    "Int8LeakyRelu", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("alpha", "float", 0.01, doc="slope below 0, in (0, 1)"),) + Y_ARGS,
    inference=lambda ctx, ins: [uint8_like(ins)], inputs=("X",), outputs=("Y",),
    doc="Leaky ReLU through QNNPACK's 256-entry table: x = X.scale / Y_scale * (q - X.zero_point), alpha * x "
        "below 0, rounded (half to even) + Y_zero_point, clamped to [0, 255]."))


@register_kernel("Int8LeakyRelu")
def int8_leaky_relu(ctx):
    alpha = float(np.float32(ctx.float("alpha", 0.01)))
    if not 0.0 < alpha < 1.0:
        raise ctx.error("alpha must lie in (0, 1) (Caffe2 enforces it), got %r" % alpha)
    y_scale, y_zp = output_params(ctx)

    def run(x):
        x = int8_input(ctx, 0, x)
        try:
            table = rq.leaky_relu_table(alpha, x.scale, x.zero_point, y_scale, y_zp)
        except RequantizationError as exc:
            raise requant_error(ctx, exc) from None
        return output(table[x.data], y_scale, y_zp)
    return run


# ----------------------------------------------------------------- Int8Sigmoid / Int8Softmax

_UNIT_DOC = " Y_scale must be 1/256 and Y_zero_point 0 (QNNPACK's only output quantization)."


def _unit_output(ctx):
    y_scale, y_zp = output_params(ctx)
    if y_scale != 1.0 / 256.0 or y_zp != 0:
        raise ctx.error("%s writes scale 1/256 and zero point 0: Y_scale must be 0.00390625 and Y_zero_point 0, "
                        "got %.9g and %d" % (ctx.type, y_scale, y_zp))
    return y_scale, y_zp


register_schema(OpSchema(
    "Int8Sigmoid", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, args=Y_ARGS,
    inference=lambda ctx, ins: [uint8_like(ins)], inputs=("X",), outputs=("Y",),
    doc="Y = round(256 * sigmoid(X.scale * (q - X.zero_point))) clamped to 255 (QNNPACK's table)." + _UNIT_DOC))


@register_kernel("Int8Sigmoid")
def int8_sigmoid(ctx):
    y_scale, y_zp = _unit_output(ctx)

    def run(x):
        x = int8_input(ctx, 0, x)
        return output(rq.sigmoid_table(x.scale, x.zero_point)[x.data], y_scale, y_zp)
    return run


register_schema(OpSchema(
    "Int8Softmax", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, args=Y_ARGS,
    inference=lambda ctx, ins: [uint8_like(ins)], inputs=("X",), outputs=("Y",),
    doc="Softmax over all dims after the first (as Caffe2's Int8Softmax), QNNPACK's soft-argmax: integer "
        "table values of exp((q - row max) * X.scale) scaled to fit 32 bits, each divided by the row sum "
        "with rounding, times 256, capped at 255." + _UNIT_DOC))


@register_kernel("Int8Softmax")
def int8_softmax(ctx):
    y_scale, y_zp = _unit_output(ctx)

    def run(x):
        x = int8_input(ctx, 0, x)
        if x.ndim < 1 or x.shape[0] == 0 or x.size == 0:
            raise ctx.input_error(0, "Int8Softmax needs a non-empty batch and rows, got shape %s" % list(x.shape))
        rows = x.data.reshape(x.shape[0], -1)
        y = rq.softmax_rows(rows, rq.softmax_table(x.scale, rows.shape[1]))
        return output(y.reshape(x.shape), y_scale, y_zp)
    return run

