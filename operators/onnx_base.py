"""Registration helper shared by the ONNX-semantics op modules (domain ai.onnx).

`onnx_op("Relu", (6, 12), (13, None))` decorates one kernel factory and
registers it for each opset range given (inclusive), plus one schema per op
type from the first version with a kernel (arity follows the model's own
opset rules, which onnx checks; caffe2py does not import onnx to register ops).
The factory sees the usual OpContext; missing optional inputs (see
caffe2py.onnx.convert ABSENT_ARG) reach the kernel callable as None.
"""
from caffe2py.registry import OpSchema, register_kernel, register_schema, schema_for

from ._onnx_rules import OnnxShapeInference, OnnxTypeConstraints, check_arity

DOMAIN = "ai.onnx"
ABSENT_ARG = "_onnx_absent"


class _SchemaIndexed:
    """The context an ONNX kernel factory sees when optional inputs were left empty:
    the kernel's arguments follow the schema's input indices (absent ones as None), so
    `input_error(index, ...)` takes a schema index too and names the blob present at
    that place (MatMulInteger's b_zero_point after an empty a_zero_point was '#3')."""
    __slots__ = ("_ctx", "_absent")

    def __init__(self, ctx, absent):
        self._ctx, self._absent = ctx, absent

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def input_error(self, index, message):
        if index in self._absent:
            return self._ctx.error(message, blob="(input %d, left empty)" % index)
        return self._ctx.input_error(index - sum(1 for a in self._absent if a < index), message)


def _with_absent_inputs(factory):
    def build(ctx):
        check_arity(ctx)
        absent = ctx.ints(ABSENT_ARG, []) if ctx.has(ABSENT_ARG) else []
        run = factory(_SchemaIndexed(ctx, absent) if absent else ctx)
        if not absent:
            return run
        total = ctx.n_inputs + len(absent)

        def run_with_gaps(*present):
            it = iter(present)
            return run(*[None if i in absent else next(it) for i in range(total)])
        return run_with_gaps
    build.__name__ = getattr(factory, "__name__", "onnx_kernel")
    build.__doc__ = factory.__doc__
    build.__wrapped__ = factory       # inspect.unwrap finds the op's own factory (ops --where)
    return build


def onnx_op(op_type, *ranges, domain=DOMAIN, doc="", cost=None, args=(), checks=()):
    """Register factory for op_type over the given (since, until) opset ranges;
    cost(ctx, input types) -> registry.Cost feeds the benchmark's flop tables.
    args / checks: schema_rules argument and input rules beyond onnx's own
    specification of the op (type constraints and shape inference), which every
    ONNX op gets (_onnx_rules.py)."""
    ranges = ranges or ((1, None),)

    def wrap(factory):
        since = min(lo for lo, _ in ranges)
        known = schema_for(op_type, domain)
        if known is None or known.since_version > since:
            register_schema(OpSchema(op_type, domain=domain, since_version=since, cost=cost,
                                     doc=doc or (factory.__doc__ or "").strip(), args=tuple(args),
                                     checks=(OnnxTypeConstraints(),) + tuple(checks) + (OnnxShapeInference(),)))
        build = _with_absent_inputs(factory)
        for since, until in ranges:
            register_kernel(op_type, domain=domain, versions=(since, until))(build)
        return factory
    return wrap


def axis_of(ctx, axis, rank, what="axis"):
    """A possibly negative axis normalised against rank, with a clear error."""
    if not -rank <= axis < rank:
        raise ctx.error("%s %d is out of range for a tensor of rank %d%s" % (
            what, axis, rank, " (a 0-d tensor has no axes)" if rank == 0 else " (valid: %d to %d)" % (-rank, rank - 1)))
    return axis % rank
