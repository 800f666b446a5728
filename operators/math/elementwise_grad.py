"""Gradients of the elementwise family (elementwise.py): ReluGradient,
SigmoidGradient, TanhGradient, SoftmaxGradient, Add/Sub/Mul/DivGradient (late
Caffe2's BinaryElementwiseGradient ops: the gradient of a broadcast operand is
summed back to its shape, for NumPy broadcasting and the legacy broadcast=1/axis
rule), and the makers that emit them. Sum hands its output gradient to every input
without an op."""
import numpy as np

from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import elementwise_grad as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import Axis, DTypes, SameDType

from .._caffe2_binary import legacy_axis
from .._common import elementwise_cost, legacy_broadcast_shape, same_as_input


def _check_same_shape(ctx, y, dy, y_index=0, dy_index=1):
    if y.shape != dy.shape:
        raise ctx.input_error(dy_index, "gradient of shape %s does not match '%s' of shape %s"
                              % (list(dy.shape), ctx.inputs[y_index], list(y.shape)))


# ----------------------------------------------------------------- activations

_ACTIVATIONS = {"Relu": (K.relu_grad, "dX = dY where Y > 0, else 0"),
                "Sigmoid": (K.sigmoid_grad, "dX = dY * Y * (1 - Y)"),
                "Tanh": (K.tanh_grad, "dX = dY * (1 - Y^2)")}

for _op, (_fn, _doc) in _ACTIVATIONS.items():
    register_schema(OpSchema(
        _op + "Gradient", num_inputs=2, num_outputs=1, allow_inplace={(1, 0)},
        inference=same_as_input(1), cost=elementwise_cost, inputs=("Y", "dY"), outputs=("dX",),
        doc="Gradient of %s from its output Y: %s." % (_op, _doc)))

    @register_kernel(_op + "Gradient")
    def _activation_grad(ctx, fn=_fn):
        def run(y, dy):
            _check_same_shape(ctx, y, dy)
            return fn(y, dy)
        return run

    @register_gradient(_op)
    def _activation_maker(g, op=_op):
        return [g.op(op + "Gradient", [g.O(0), g.GO(0)], [g.GI(0)])]


register_schema(OpSchema(
    "SoftmaxGradient", num_inputs=2, num_outputs=1, allow_inplace={(1, 0)},
    args=(Arg("axis", "int", 1, doc="the forward's axis", check=Axis(0)),),
    checks=(DTypes((0, 1), "float"), SameDType((0, 1))),
    inference=same_as_input(1), inputs=("Y", "dY"), outputs=("dX",),
    doc="Gradient of Softmax from its output Y: dX = Y * (dY - sum(dY * Y)) per row of the "
        "2-D coercion at axis."))


@register_kernel("SoftmaxGradient")
def softmax_grad(ctx):
    axis = ctx.int("axis")

    def run(y, dy):
        _check_same_shape(ctx, y, dy)
        if not -y.ndim <= axis < max(y.ndim, 1):
            raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis, y.ndim))
        return K.softmax_grad(y, dy, axis)
    return run


@register_gradient("Softmax")
def _softmax_maker(g):
    return [g.op("SoftmaxGradient", [g.O(0), g.GO(0)], [g.GI(0)])]


# ----------------------------------------------------------------- Add / Sub / Mul / Div

_BINARY_ARGS = (Arg("broadcast", "int", 0), Arg("axis", "int", -1), Arg("axis_str", "string", ""),
                Arg("order", "string", "NCHW"))


def _binary_grad_infer(ctx, ins):
    return [ins[1], ins[2]]


def _div_grad_infer(ctx, ins):
    if len(ins) == 3:               # the legacy form (B, C, dC)
        return [ins[1], ins[0]]
    return [ins[1], ins[2]]


for _op, _rule in (("Add", "dA = dC, dB = dC"), ("Sub", "dA = dC, dB = -dC"),
                   ("Mul", "dA = dC * B, dB = dC * A"), ("Div", "dA = dC / B, dB = -dC * C / B")):
    register_schema(OpSchema(
        # DivGradient's older form (B, C, dC), which Caffe2 kept accepting beside (dC, A, B, C)
        _op + "Gradient", num_inputs={3, 4} if _op == "Div" else 3, num_outputs=2, args=_BINARY_ARGS,
        checks=(DTypes(0, "numeric"),),          # a gradient is a number (bool has no negative)
        # an in-place Add's gradient writes over dC; Add / Sub read A and B for their
        # shapes only, and take dC in place of an operand the forward overwrote
        allow_inplace=({(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)} if _op in ("Add", "Sub")
                       else {(0, 0), (0, 1), (1, 0), (1, 1)} if _op == "Div"    # A: its shape only
                       else {(0, 0), (0, 1)}),
        inference=_div_grad_infer if _op == "Div" else _binary_grad_infer,
        inputs=("dC", "A", "B") + (("C",) if _op == "Div" else ()),
        outputs=("dA", "dB"),
        doc="Gradient of %s: %s, each summed over the axes its operand was broadcast along "
            "(NumPy broadcasting, or broadcast=1 with B's dims placed at axis)." % (_op, _rule)))

    @register_kernel(_op + "Gradient")
    def _binary_grad(ctx, op=_op):
        legacy = ctx.bool("broadcast")
        axis = legacy_axis(ctx) if legacy else ctx.int("axis", -1)

        def run(*ins):
            if op == "Div" and len(ins) == 3:
                b, c, dc = ins              # the legacy form: A had C's shape
                a = c
            else:
                dc, a, b = ins[:3]
                c = ins[3] if len(ins) > 3 else None
            view = None
            if legacy:
                try:
                    view = legacy_broadcast_shape(a.shape, b.shape, axis)
                except ValueError as exc:
                    raise ctx.input_error(2, str(exc)) from None
            try:
                out_shape = np.broadcast_shapes(a.shape, b.shape if view is None else tuple(view))
            except ValueError:
                raise ctx.error("shapes %s of '%s' and %s of '%s' do not broadcast"
                                % (list(a.shape), ctx.inputs[1], list(b.shape), ctx.inputs[2])) from None
            if dc.shape != out_shape:
                raise ctx.input_error(0, "gradient of shape %s does not match the output shape %s"
                                      % (list(dc.shape), list(out_shape)))
            if c is not None and c.shape != out_shape:
                raise ctx.input_error(3, "output C of shape %s does not match %s" % (list(c.shape), list(out_shape)))
            return K.binary_grads(op, dc, a, b, c, view)
        return run

    @register_gradient(_op)
    def _binary_maker(g, op=_op):
        ins = [g.GO(0), g.I(0), g.I(1)]
        if op in ("Add", "Sub"):
            # their gradients read A and B for the shapes only; an operand the op
            # overwrote in place has the output's shape, which dC carries, and a later
            # in-place op (Tanh after an in-place Add) may overwrite the blob again
            # (Caffe2's maker of the time read neither operand)
            ins[1:] = [g.GO(0) if b in g.def_.output else b for b in ins[1:]]
        if op == "Div" and g.I(0) in g.def_.output:
            # Div's gradient reads B and C, and A for its shape only: an A the op
            # overwrote in place had the output's shape, which dC carries (Caffe2's
            # elementwise_ops_test runs Div in place on A with its gradient)
            ins[1] = g.GO(0)
        if op in ("Mul", "Div"):
            # their gradients read the other operands' values: an in-place op overwrote one
            if op == "Mul":
                g.input_value(0)
            g.input_value(1)
        if op == "Div":
            ins.append(g.O(0))
        return [g.op(op + "Gradient", ins, [g.GI(0), g.GI(1)])]


@register_gradient("Sum")
def _sum_maker(g):
    for i in range(len(g.def_.input)):
        g.SetDense(i, g.GO(0))
    return []
