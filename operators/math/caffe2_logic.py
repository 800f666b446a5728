"""Caffe2's comparison, logic and bitwise ops in the caffe2 domain: EQ, NE, LT, LE,
GT, GE, And, Or, Xor, BitwiseAnd, BitwiseOr, BitwiseXor (legacy `broadcast=1, axis`
broadcasting, NumPy broadcasting otherwise), Not, Where (with broadcast_on_rows) and
IsMemberOf."""
import numpy as np

from caffe2py.proto import caffe2_pb2
from caffe2py.registry import Arg, OpSchema, TensorType, register_kernel, register_schema

from .._caffe2_binary import BINARY_ARGS, INTS, NUMERIC, binary_inference, binary_runner, check_dtype
from .._common import elementwise_cost, same_as_input
from .._gradient_hooks import should_not_do_gradient

DT = caffe2_pb2.TensorProto
_COMPARABLE = (np.bool_,) + NUMERIC
_BOOL = (np.bool_,)
_INT_BOOL = _BOOL + INTS          # Caffe2's CPU bitwise kernels: bool, int32, int64

_COMPARISONS = {"EQ": (np.equal, "=="), "NE": (np.not_equal, "!="), "LT": (np.less, "<"),
                "LE": (np.less_equal, "<="), "GT": (np.greater, ">"), "GE": (np.greater_equal, ">=")}
_LOGICAL = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
_BITWISE = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}

_BROADCAST_DOC = (" With broadcast=1, Caffe2's legacy rule applies: B is a one-element tensor, or its "
                  "shape (leading and trailing 1s aside) equals A's dims from `axis` (default: A's "
                  "trailing dims); the output has A's shape. Otherwise NumPy broadcasting applies. A and "
                  "B must have one type.")


def _register_binary(op_type, fn, allowed, doc, inplace, out_dtype=DT.BOOL):
    """out_dtype None: C has A's type (the bitwise ops); otherwise C is bool."""
    register_schema(OpSchema(
        op_type, num_inputs=2, num_outputs=1, allow_inplace={(0, 0)} if inplace else frozenset(),
        args=BINARY_ARGS, inputs=("A", "B"), outputs=("C",), inference=binary_inference(out_dtype),
        cost=elementwise_cost, doc=doc + _BROADCAST_DOC))

    @register_kernel(op_type)
    def factory(ctx):
        return binary_runner(ctx, fn, allowed)
    factory.__name__ = op_type.lower()


for _op, (_fn, _symbol) in _COMPARISONS.items():
    _register_binary(_op, _fn, _COMPARABLE, "Elementwise A %s B (bool output)." % _symbol, inplace=False)
for _op, _fn in _LOGICAL.items():
    _register_binary(_op, _fn, _BOOL, "Elementwise logical %s of bool tensors." % _op.lower(), inplace=True)
for _op, _fn in _BITWISE.items():
    _register_binary(_op, _fn, _INT_BOOL, "Elementwise bitwise %s of bool, int32 or int64 tensors (C has A's "
                     "type)." % _op[len("Bitwise"):].lower(), inplace=True, out_dtype=None)
should_not_do_gradient(*_BITWISE)       # as in Caffe2


register_schema(OpSchema(
    "Not", num_inputs=1, num_outputs=1, allow_inplace={(0, 0)}, inputs=("X",), outputs=("Y",),
    inference=same_as_input(0), cost=elementwise_cost, doc="Elementwise logical negation of a bool tensor."))


@register_kernel("Not")
def not_kernel(ctx):
    def run(x):
        check_dtype(ctx, 0, x, _BOOL)
        return np.logical_not(x)
    return run


# ----------------------------------------------------------------- Where

register_schema(OpSchema(
    "Where", num_inputs=3, num_outputs=1, allow_inplace={(1, 0), (2, 0)}, inputs=("C", "X", "Y"),
    outputs=("Z",), args=(Arg("broadcast_on_rows", "bool", False,
                              doc="C is 1-D and picks whole rows (first-dim slices) of X or Y"),),
    inference=same_as_input(1), cost=elementwise_cost,
    doc="Z = C ? X : Y elementwise (C bool, X and Y of one shape and type); with broadcast_on_rows, "
        "C[i] picks row i. X, Y: float, double, int32, int64, bool or strings."))

_WHERE_TYPES = (np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_, np.object_)


@register_kernel("Where")
def where(ctx):
    rows = ctx.bool("broadcast_on_rows")

    def run(c, x, y):
        check_dtype(ctx, 0, c, _BOOL)
        check_dtype(ctx, 1, x, _WHERE_TYPES)
        if y.dtype != x.dtype or y.shape != x.shape:
            raise ctx.input_error(2, "%s %s differs from X's %s %s" % (y.dtype, list(y.shape), x.dtype,
                                                                       list(x.shape)))
        if rows:
            if c.ndim != 1 or x.ndim < 1 or c.shape[0] != x.shape[0]:
                raise ctx.input_error(0, "with broadcast_on_rows, C must be 1-D with one value per row of X "
                                         "(%s), got shape %s" % (list(x.shape), list(c.shape)))
            c = c.reshape((-1,) + (1,) * (x.ndim - 1))
        elif c.shape != x.shape:
            raise ctx.input_error(0, "shape %s differs from X's %s (broadcast_on_rows=1 picks rows)"
                                  % (list(c.shape), list(x.shape)))
        return np.where(c, x, y)
    return run


# ----------------------------------------------------------------- IsMemberOf

_MEMBER_TYPES = {DT.INT32: np.int32, DT.INT64: np.int64, DT.BOOL: np.bool_, DT.STRING: np.object_}


def _member_values(ctx, dtype):
    """The `value` argument as a set of dtype's values (a named error when they
    are of another kind or out of range)."""
    raw = ctx.arg("value")
    raw = [] if raw is None else list(raw) if isinstance(raw, (list, tuple)) else [raw]
    if dtype == np.object_:
        if not all(isinstance(v, str) for v in raw):
            raise ctx.error("argument value must hold strings to test a string tensor, got %r" % raw)
        return set(raw)
    if not all(isinstance(v, (int, np.integer)) for v in raw):
        raise ctx.error("argument value must hold integers to test a %s tensor, got %r" % (np.dtype(dtype).name, raw))
    if dtype == np.bool_:
        return {bool(v) for v in raw}
    info = np.iinfo(dtype)
    bad = [v for v in raw if not info.min <= v <= info.max]
    if bad:
        raise ctx.error("value %d does not fit %s" % (bad[0], np.dtype(dtype).name))
    return {int(v) for v in raw}


register_schema(OpSchema(
    "IsMemberOf", num_inputs=1, num_outputs=1, inputs=("X",), outputs=("Y",),
    args=(Arg("value", "any", None, doc="the set of values (ints or strings); none: all False"),
          Arg("dtype", "int", None, doc="the values' TensorProto.DataType (default: X's type)")),
    inference=lambda ctx, ins: [TensorType(ins[0].dims, DT.BOOL)], cost=elementwise_cost,
    doc="Y[i] is True when X[i] is one of `value`. X is int32, int64, bool or strings."))


@register_kernel("IsMemberOf")
def is_member_of(ctx):
    declared = None
    if ctx.has("dtype"):
        code = ctx.int("dtype")
        if code not in _MEMBER_TYPES:
            raise ctx.error("unexpected 'dtype' value %d (expected INT32, INT64, BOOL or STRING)" % code)
        declared = _MEMBER_TYPES[code]
    cache = {}

    def members(dtype):
        if dtype not in cache:
            cache[dtype] = _member_values(ctx, dtype)
        return cache[dtype]
    if declared is not None:
        members(declared)        # bad values fail at plan time

    def run(x):
        check_dtype(ctx, 0, x, tuple(_MEMBER_TYPES.values()))
        if declared is not None and x.dtype.type != declared:
            raise ctx.input_error(0, "dtype %s differs from argument dtype %s" % (x.dtype, np.dtype(declared).name))
        wanted = members(x.dtype.type)
        if x.dtype == np.object_:
            flat = [v.decode() if isinstance(v, bytes) else v for v in x.reshape(-1)]
            return np.fromiter((v in wanted for v in flat), dtype=bool, count=len(flat)).reshape(x.shape)
        return np.isin(x, np.fromiter(wanted, dtype=x.dtype, count=len(wanted)))
    return run
