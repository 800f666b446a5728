"""Caffe2's clamping activations: Hardtanh (min_val <= Y <= max_val) and ReluN
(0 <= Y <= n), each with its <Op>Gradient(Y, dY) -> dX op, which reads only the
output, so both run in place as Caffe2's did. Kernels: kernels/cpu/math/clamp.py."""
from caffe2py.gradients import register_gradient
from caffe2py.kernels.cpu.math import clamp as K
from caffe2py.registry import Arg, OpSchema, register_kernel, register_schema
from caffe2py.schema_rules import DTypes, SameDType

from .._caffe2_binary import FLOATS, check_dtype
from .._common import elementwise_cost, same_as_input


def _hardtanh_bounds(ctx):
    low, high = ctx.float("min_val"), ctx.float("max_val")
    if not low <= high:
        raise ctx.error("min_val (%g) must be <= max_val (%g)" % (low, high))
    return low, high


def _relu_n_bounds(ctx):
    n = ctx.float("n")
    if not n > 0:
        raise ctx.error("n must be > 0, got %g" % n)
    return 0.0, n


# op: (argument list, bounds reader, doc of Y)
CLAMPS = {
    "Hardtanh": ((Arg("min_val", "float", -1.0), Arg("max_val", "float", 1.0)), _hardtanh_bounds,
                 "X clamped to [min_val, max_val]."),
    "ReluN": ((Arg("n", "float", 6.0),), _relu_n_bounds, "X clamped to [0, n] (Relu6 for n = 6)."),
}


def _register(op_type, args, bounds, doc):
    grad_type = op_type + "Gradient"
    register_schema(OpSchema(
        op_type, num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, args=args,
        checks=(DTypes(0, *FLOATS),), inference=same_as_input(0), cost=elementwise_cost,
        inputs=("X",), outputs=("Y",), doc=doc))
    register_schema(OpSchema(
        grad_type, num_inputs=2, num_outputs=1, allow_inplace={(1, 0)}, args=args,
        checks=(DTypes("*", *FLOATS), SameDType("*")), inference=same_as_input(1), cost=elementwise_cost,
        inputs=("Y", "dY"), outputs=("dX",),
        doc="Gradient of %s: dX = dY where Y is strictly inside the clamp range, else 0." % op_type))

    @register_kernel(op_type)
    def forward(ctx):
        low, high = bounds(ctx)

        def run(x):
            check_dtype(ctx, 0, x, FLOATS)
            return K.clamp(x, low, high)
        return run

    @register_kernel(grad_type)
    def backward(ctx):
        low, high = bounds(ctx)

        def run(y, dy):
            if y.shape != dy.shape:
                raise ctx.input_error(1, "shape %s differs from Y's %s" % (list(dy.shape), list(y.shape)))
            return K.clamp_grad(y, dy, low, high)
        return run

    @register_gradient(op_type)
    def maker(g):
        return [g.op(grad_type, [g.O(0), g.GO(0)], [g.GI(0)])]


for _op_type, _entry in CLAMPS.items():
    _register(_op_type, *_entry)
