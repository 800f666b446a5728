"""Add, Sub, Mul, Div (legacy broadcast=1/axis and NumPy broadcasting), Sum,
and the activations Relu, Sigmoid, Tanh, Softmax."""
import numpy as np

from caffe2py.kernels.cpu.math import elementwise as K
from caffe2py.registry import Arg, Cost, OpSchema, TensorType, fast_form, register_kernel, register_schema
from caffe2py.schema_rules import Axis, DTypes, SameDType

from .._caffe2_binary import legacy_axis
from .._common import elementwise_cost, legacy_broadcast_shape, same_as_input


def _binary_inference(ctx, ins):
    a, b = ins
    if ctx.bool("broadcast"):
        return [TensorType(a.dims, a.dtype)]
    try:
        dims = tuple(np.broadcast_shapes(a.dims, b.dims))
    except ValueError:
        raise ctx.error("shapes %s and %s do not broadcast" % (list(a.dims), list(b.dims))) from None
    return [TensorType(dims, a.dtype)]


def _register_binary(op_type, ufunc):
    register_schema(OpSchema(
        op_type, num_inputs=2, num_outputs=1, allow_inplace={(0, 0), (1, 0)},
        args=(Arg("broadcast", "int", 0, doc="legacy broadcast: B matches A's dims from `axis`"),
              Arg("axis", "int", -1, doc="legacy broadcast start axis"),
              Arg("axis_str", "string", "", doc="legacy: axis by order letter"),
              Arg("order", "string", "NCHW")),
        # NumPy has no bool subtraction (and Caffe2 registers Sub for numbers only)
        checks=(DTypes((0, 1), "numeric" if op_type == "Sub" else "numeric_or_bool"),),
        inference=_binary_inference, cost=elementwise_cost,
        doc="%s of A and B, elementwise. With broadcast=1 Caffe2's legacy rule applies "
            "(B's shape is a contiguous run of A's dims starting at axis); otherwise "
            "NumPy broadcasting.%s" % (op_type, " Two integer operands divide as C does (toward zero, "
                                                 "integer result); an integer zero divisor is an error."
                                                 if op_type == "Div" else "")))

    @register_kernel(op_type)
    def binary(ctx):
        if ctx.bool("broadcast"):
            axis = legacy_axis(ctx)

            def run_legacy(a, b):
                try:
                    view = b.reshape(legacy_broadcast_shape(a.shape, b.shape, axis))
                except ValueError as exc:
                    raise ctx.input_error(1, str(exc)) from None
                try:
                    result = ufunc(a, view)
                except ZeroDivisionError:
                    raise ctx.input_error(1, "holds a zero: integer division by zero") from None
                return result.astype(np.result_type(a, b), copy=False)
            return run_legacy

        def run(a, b):
            try:
                return ufunc(a, b)
            except ValueError:
                raise ctx.error("shapes %s of '%s' and %s of '%s' do not broadcast"
                                % (list(a.shape), ctx.inputs[0], list(b.shape), ctx.inputs[1])) from None
            except ZeroDivisionError:
                raise ctx.input_error(1, "holds a zero: integer division by zero") from None
        # the plan calls the ufunc itself; run only words its errors. NumPy's loops
        # for these ufuncs take numbers (and bools) to numbers (and bools)
        return fast_form(run, ufunc, keeps_dtypes=True)


for _op, _fn in K.BINARY.items():
    _register_binary(_op, _fn)


register_schema(OpSchema("Sum", num_inputs=(1, None), num_outputs=1, allow_inplace=lambda i, o: o == 0,
                         checks=(DTypes("*", "numeric"), SameDType("*")),
                         inference=same_as_input(0), cost=elementwise_cost,
                         doc="Elementwise sum of all inputs (same shapes)."))


@register_kernel("Sum")
def sum_kernel(ctx):
    def run(*xs):
        out = np.array(xs[0], copy=True)
        for k, x in enumerate(xs[1:], 1):
            if x.shape != out.shape:
                raise ctx.input_error(k, "shape %s differs from input 0's %s" % (list(x.shape), list(out.shape)))
            out += x
        return out
    return run


def _register_unary(op_type, fn, doc, flops_per_element=1, dtypes="float"):
    def cost(ctx, ins):
        n = int(np.prod(ins[0].dims))
        return Cost(flops=flops_per_element * n, bytes_read=4 * n, bytes_written=4 * n)
    register_schema(OpSchema(op_type, num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
                             checks=(DTypes(0, dtypes),),
                             inference=same_as_input(0), cost=cost, doc=doc))
    register_kernel(op_type)(lambda ctx: fn)


_register_unary("Relu", K.relu, "max(x, 0)", dtypes="numeric")
_register_unary("Sigmoid", K.sigmoid, "1 / (1 + exp(-x))", 4)
_register_unary("Tanh", np.tanh, "tanh(x)", 4)
_register_unary("Exp", np.exp, "exp(x)", 4)
_register_unary("Log", np.log, "natural log of x", 4)
_register_unary("Sqrt", np.sqrt, "square root of x", 2)
_register_unary("Abs", np.abs, "|x|", dtypes="numeric")
_register_unary("Negative", np.negative, "-x", dtypes="numeric")


register_schema(OpSchema(
    "Softmax", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)},
    args=(Arg("axis", "int", 1, doc="inputs are coerced to 2-D at this axis", check=Axis(0)),),
    checks=(DTypes(0, "float"),),
    inference=same_as_input(0), cost=lambda ctx, ins: Cost(flops=5 * int(np.prod(ins[0].dims))),
    doc="Softmax over the flattened dims from `axis` on."))


@register_kernel("Softmax")
def softmax_kernel(ctx):
    axis = ctx.int("axis")

    def run(x):
        if not -x.ndim <= axis < max(x.ndim, 1):
            raise ctx.input_error(0, "axis %d is out of range for %d-D input" % (axis, x.ndim))
        return K.softmax(x, axis)
    return run
