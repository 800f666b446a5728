"""Declarative validation that an OpSchema carries, so every op gets the same checks.

Two kinds of rule:

* argument rules, `Arg(..., check=...)`: `Range`, `OneOf`, `Finite`, `Ascending`
  need only the argument's value and run at plan time (`OpSchema.verify`); `Axis`,
  `Axes` and `Permutation` need an input's rank and run on every call.
* input rules, `OpSchema(checks=(...))`: `DTypes`, `SameDType`, `Rank` look at the
  inputs and run on every call.

`OpSchema.verify` also checks every declared argument's type and rejects an
argument name given twice (Caffe2's ArgumentHelper does). `runtime_guard(schema,
ctx)` turns a schema's per-call rules for one op into one small function the
executor calls before the kernel (None when there is nothing to check), so a
kernel may assume what its schema declares. Every failure is a Caffe2Error that
names the op, the blob or argument, what was expected and what was given.

Input indices are the schema's (ONNX ops with absent optional inputs included);
a rule about an absent input is skipped.
"""
import math

import numpy as np

from .args import ArgumentHelper
from .errors import Caffe2Error

# Arguments the ONNX converter adds: positions of absent optional inputs.
ABSENT_INPUTS_ARG = "_onnx_absent"

# ------------------------------------------------------------------ dtype families

_FAMILIES = {
    "float": (np.float16, np.float32, np.float64),
    "float32": (np.float32,),
    "int": (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64),
    "int32/64": (np.int32, np.int64),
    "bool": (np.bool_,),
    "string": (np.object_, np.str_, np.bytes_),
}
_FAMILIES["numeric"] = _FAMILIES["float"] + _FAMILIES["int"]
_FAMILIES["numeric_or_bool"] = _FAMILIES["numeric"] + _FAMILIES["bool"]


def dtype_family(*names):
    """A frozenset of NumPy dtypes from family names ("float", "int", "int32/64",
    "numeric", "bool", ...) and/or NumPy types."""
    out = set()
    for n in names:
        if isinstance(n, str):
            out.update(np.dtype(t) for t in _FAMILIES[n])
        else:
            out.add(np.dtype(n))
    return frozenset(out)


def _dtype_text(allowed):
    return "/".join(sorted(str(d) for d in allowed))


# ------------------------------------------------------------------ reading args

_READERS = {
    "int": ArgumentHelper.get_int, "bool": ArgumentHelper.get_int,
    "float": ArgumentHelper.get_float, "string": ArgumentHelper.get_string,
    "ints": ArgumentHelper.get_ints, "floats": ArgumentHelper.get_floats,
    "strings": ArgumentHelper.get_strings,
}


def read_arg(helper, arg):
    """The value of declared Arg `arg` in the op (None when absent), read as its
    declared type: a wrongly typed value raises Caffe2Error naming the argument."""
    if not helper.has(arg.name):
        return None
    reader = _READERS.get(arg.type)
    return reader(helper, arg.name) if reader is not None else helper.get(arg.name)


def fast_path(check, render, terms=None):
    """Attach to a per-call check the Python expression that is True whenever the
    check would pass (False may also mean "look closer"): render(names, const) ->
    expression text, with names[i] the local holding input position i and const(v)
    the name of a constant. The executor inlines it in the plan, so valid inputs cost
    a few comparisons and no call; only when it is False does the check itself run.

    terms(names, const), when given, is the same expression as a list of
    (key, text) conjuncts; a key (None: none) stands for what the check itself
    requires of one value, so a plan that has already passed a check with that key
    on the same local (locals are assigned once) may leave the conjunct out
    (executor.Plan._render). Keys only for properties no kernel changes in place
    (a value's type and dtype)."""
    check.fast = render
    if terms is not None:
        check.fast_terms = terms
    return check


def fast_terms(check, names, const):
    """A check's inlined form as (key, text) conjuncts (see fast_path)."""
    terms = getattr(check, "fast_terms", None)
    if terms is not None:
        return terms(names, const)
    return [(None, check.fast(names, const))]


def _tensor_expr(name, const):
    return "type(%s) is %s" % (name, const(np.ndarray))


def dtype_in_term(name, allowed, const):
    """The inlined (key, text) of "local `name` holds an array whose dtype is in
    `allowed`" (a set of np.dtype): the usual dtype first, an identity test (builtin
    dtypes are singletons) that spares hashing the dtype for the set lookup."""
    usual = next((np.dtype(t) for t in (np.float32, np.int64, np.int32) if np.dtype(t) in allowed), None)
    test = "%s.dtype in %s" % (name, const(allowed))
    if usual is not None:
        test = "(%s.dtype is %s or %s)" % (name, const(usual), test)
    return ("dtype in", allowed, name), "%s and %s" % (_tensor_expr(name, const), test)


def _values(value):
    return value if isinstance(value, (list, tuple)) else [value]


def _arg_text(name, value):
    return "argument '%s' = %r" % (name, value)


# ------------------------------------------------------------------ argument rules

class ArgRule:
    """Base: `static(value)` -> a problem text or None (plan time);
    `runtime(ctx, name, value)` -> None or a check(inputs) function (per call)."""

    def static(self, value):
        return None

    def runtime(self, ctx, name, value):
        return None


class Range(ArgRule):
    """Every value (each element of a list) lies in [lo, hi] (None: unbounded)."""

    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi

    def static(self, value):
        for v in _values(value):
            if isinstance(v, float) and math.isnan(v):
                return "must be a number, got NaN"
            if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
                if self.hi is None:
                    want = ">= %s" % self.lo
                elif self.lo is None:
                    want = "<= %s" % self.hi
                else:
                    want = "in [%s, %s]" % (self.lo, self.hi)
                return "must be %s, got %r" % (want, value)
        return None


class OneOf(ArgRule):
    """The value (each element of a list) is one of `choices`."""

    def __init__(self, *choices):
        self.choices = choices

    def static(self, value):
        for v in _values(value):
            if v not in self.choices:
                return "must be one of %s, got %r" % (", ".join(repr(c) for c in self.choices), value)
        return None


class Finite(ArgRule):
    """No NaN or infinity among the values."""

    def static(self, value):
        if any(isinstance(v, float) and not math.isfinite(v) for v in _values(value)):
            return "must hold finite numbers, got %r" % (value,)
        return None


class Ascending(ArgRule):
    """The list is sorted ascending (strictly with strict=True)."""

    def __init__(self, strict=False):
        self.strict = strict

    def static(self, value):
        v = _values(value)
        bad = any(b < a or (self.strict and b == a) for a, b in zip(v, v[1:]))
        if bad:
            return "must be sorted %sascending, got %r" % ("strictly " if self.strict else "", value)
        return None


class Length(ArgRule):
    """The list holds between lo and hi values."""

    def __init__(self, lo, hi=None):
        self.lo, self.hi = lo, lo if hi is None else hi

    def static(self, value):
        n = len(_values(value))
        if not self.lo <= n <= (self.hi if self.hi is not None else n):
            want = str(self.lo) if self.lo == self.hi else "%s to %s" % (self.lo, self.hi or "any number of")
            return "must hold %s values, got %d: %r" % (want, n, value)
        return None


class FileName(ArgRule):
    """A file or folder name: text without NUL bytes (no file system takes them)."""

    def static(self, value):
        if any(("\x00" if isinstance(v, str) else b"\x00") in v for v in _values(value)
               if isinstance(v, (str, bytes))):
            return "names a file and cannot hold a NUL byte, got %r" % (value,)
        return None


def _extra(ctx, extra):
    """An axis rule's extra rank: an int, or the name of a bool argument (1 when set)."""
    if isinstance(extra, str):
        return 1 if ctx.bool(extra) else 0
    return int(extra)


def _rank_of(ctx, inputs, pos, name, value):
    x = inputs[pos]
    ndim = getattr(x, "ndim", None)
    if ndim is None:
        raise ctx.input_error(pos, "must be a tensor for %s, got a %s" % (_arg_text(name, value),
                                                                          type(x).__name__))
    return ndim


class Axis(ArgRule):
    """An axis of input `of`: in [-(r + extra), r + extra) for that input's rank r.
    extra: 1 when the axis may name the position after the last dim (Flatten's
    axis, Concat with add_axis); an int or the name of a bool argument."""

    def __init__(self, of=0, extra=0):
        self.of, self.extra = of, extra

    def runtime(self, ctx, name, value):
        extra = _extra(ctx, self.extra)
        of, pos = self.of, _position(ctx, self.of)
        if pos is None or value is None:
            return None

        def check(inputs):
            r = _rank_of(ctx, inputs, pos, name, value) + extra
            for a in _values(value):
                if not -r <= a < r:
                    raise ctx.input_error(pos, "%s is out of range for input %d of rank %d "
                                          "(valid: %d to %d)" % (_arg_text(name, value), of, r - extra, -r, r - 1))
        if isinstance(self, Axes):
            return check
        lo, hi = min(_values(value), default=0), max(_values(value), default=0)
        return fast_path(check, lambda names, const: "%s and %d < %s.ndim + %d and %d >= -%s.ndim - %d" % (
            _tensor_expr(names[pos], const), hi, names[pos], extra, lo, names[pos], extra))


class Axes(Axis):
    """A list of distinct axes of input `of` (see Axis)."""

    def runtime(self, ctx, name, value):
        inner = Axis.runtime(self, ctx, name, value)
        if inner is None:
            return None
        extra = _extra(ctx, self.extra)
        pos = _position(ctx, self.of)

        def check(inputs):
            inner(inputs)
            r = inputs[pos].ndim + extra
            if len({a % r for a in value}) != len(value):
                raise ctx.input_error(pos, "%s names an axis twice" % _arg_text(name, value))
        return check


class Permutation(ArgRule):
    """The list is a permutation of input `of`'s dims (an empty list is allowed:
    the op's default)."""

    def __init__(self, of=0):
        self.of = of

    def runtime(self, ctx, name, value):
        pos = _position(ctx, self.of)
        if pos is None or not value:
            return None

        def check(inputs):
            r = _rank_of(ctx, inputs, pos, name, value)
            if len(value) != r or sorted(a % r if -r <= a < r else a + 2 * r for a in value) != list(range(r)):
                raise ctx.input_error(pos, "%s is not a permutation of the %d dims of input %d (shape %s)"
                                      % (_arg_text(name, value), r, self.of, list(inputs[pos].shape)))
        n = len(value)
        if sorted(a % n if -n <= a < n else a + 2 * n for a in value) != list(range(n)):
            return check        # a permutation of no rank: every call ends in the error
        return fast_path(check, lambda names, const: "%s and %s.ndim == %d" % (
            _tensor_expr(names[pos], const), names[pos], n))


# ------------------------------------------------------------------ input rules

def _which(spec, n):
    if spec is None or spec == "*":
        return range(n)
    if isinstance(spec, int):
        return (spec,)
    if isinstance(spec, slice):
        return range(n)[spec]
    return tuple(spec)


def _position(ctx, index):
    """Where schema input `index` is among the op's present inputs (None: absent)."""
    absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
    if index in absent:
        return None
    pos = index - sum(1 for a in absent if a < index)
    return pos if pos < ctx.n_inputs else None


def _positions(ctx, spec):
    absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
    total = ctx.n_inputs + len(absent)
    out = []
    for index in _which(spec, total):
        pos = _position(ctx, index)
        if pos is not None:
            out.append((index, pos))
    return out


class InputRule:
    """Base: `runtime(ctx)` -> None or a check(inputs) function."""

    def runtime(self, ctx):
        return None


class DTypes(InputRule):
    """Inputs `which` (an index, indices, a slice or "*" for all) hold tensors of one
    of the dtypes `allowed` (family names or NumPy types, see dtype_family)."""

    def __init__(self, which, *allowed):
        self.which = which
        self.allowed = dtype_family(*allowed)

    def runtime(self, ctx):
        where = _positions(ctx, self.which)
        if not where:
            return None
        allowed = self.allowed

        def check(inputs):
            for index, pos in where:
                dtype = getattr(inputs[pos], "dtype", None)
                if dtype not in allowed:
                    got = ("a %s" % type(inputs[pos]).__name__) if dtype is None else str(dtype)
                    raise ctx.input_error(pos, "input %d must be a tensor of %s, got %s"
                                          % (index, _dtype_text(allowed), got))
        def terms(names, const):
            # what the check asks of each value: its dtype in `allowed`
            return [dtype_in_term(names[pos], allowed, const) for _, pos in where]
        return fast_path(check, lambda names, const: " and ".join(t for _, t in terms(names, const)), terms)


class SameDType(InputRule):
    """Inputs `which` all have the first one's dtype."""

    def __init__(self, which="*"):
        self.which = which

    def runtime(self, ctx):
        where = _positions(ctx, self.which)
        if len(where) < 2:
            return None
        first_index, first = where[0]

        def check(inputs):
            want = getattr(inputs[first], "dtype", None)
            for index, pos in where[1:]:
                got = getattr(inputs[pos], "dtype", None)
                if got != want:
                    raise ctx.input_error(pos, "input %d has dtype %s but input %d has %s; they must match"
                                          % (index, got, first_index, want))
        return fast_path(check, lambda names, const: " and ".join(
            "%s and %s.dtype is %s.dtype" % (_tensor_expr(names[pos], const), names[pos], names[first])
            for _, pos in where[1:]))


class Rank(InputRule):
    """Inputs `which` have rank in [lo, hi] (None: unbounded)."""

    def __init__(self, which, lo=None, hi=None):
        self.which, self.lo, self.hi = which, lo, hi

    def runtime(self, ctx):
        where = _positions(ctx, self.which)
        if not where:
            return None
        lo, hi = self.lo, self.hi
        if lo is None:
            want = "at most %d" % hi
        elif hi is None:
            want = "at least %d" % lo
        else:
            want = str(lo) if lo == hi else "%d to %d" % (lo, hi)

        def check(inputs):
            for index, pos in where:
                x = inputs[pos]
                ndim = getattr(x, "ndim", None)
                if ndim is None or (lo is not None and ndim < lo) or (hi is not None and ndim > hi):
                    got = "a %s" % type(x).__name__ if ndim is None else "shape %s" % list(x.shape)
                    raise ctx.input_error(pos, "input %d must have %s dims, got %s" % (index, want, got))
        return fast_path(check, lambda names, const: " and ".join(
            "%s and %d <= %s.ndim <= %d" % (_tensor_expr(names[pos], const), -1 if lo is None else lo, names[pos],
                                            1 << 30 if hi is None else hi)
            for _, pos in where))


class Scalar(InputRule):
    """Inputs `which` hold exactly one value (shape [] or [1], or any shape of one
    element with any_shape=True)."""

    def __init__(self, which, any_shape=True):
        self.which, self.any_shape = which, any_shape

    def runtime(self, ctx):
        where = _positions(ctx, self.which)
        if not where:
            return None
        any_shape = self.any_shape

        def check(inputs):
            for index, pos in where:
                x = inputs[pos]
                size, ndim = getattr(x, "size", None), getattr(x, "ndim", None)
                if size != 1 or (not any_shape and ndim > 1):
                    got = "a %s" % type(x).__name__ if size is None else "shape %s" % list(x.shape)
                    raise ctx.input_error(pos, "input %d must hold exactly one value, got %s" % (index, got))
        return fast_path(check, lambda names, const: " and ".join(
            "%s and %s.size == 1" % (_tensor_expr(names[pos], const), names[pos]) for _, pos in where))


def broadcast_problem(shapes):
    """None when the shapes broadcast under NumPy's rules, else a text saying where not."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    for back in range(1, rank + 1):
        sizes = {s[-back] for s in shapes if len(s) >= back} - {1}
        if len(sizes) > 1:
            return ("shapes %s do not broadcast: dimension %d from the right is %s (each must be 1 or "
                    "equal)" % (" and ".join(str(list(s)) for s in shapes), back,
                                " vs ".join(str(s[-back]) if len(s) >= back else "-" for s in shapes)))
    return None


class Broadcast(InputRule):
    """Inputs `which` broadcast against each other (NumPy's rules)."""

    def __init__(self, which="*"):
        self.which = which

    def runtime(self, ctx):
        where = _positions(ctx, self.which)
        if len(where) < 2:
            return None
        positions = [pos for _, pos in where]

        def check(inputs):
            shapes = [getattr(inputs[p], "shape", None) for p in positions]
            if any(s is None for s in shapes):
                return          # a non-tensor: the dtype rules' business
            problem = broadcast_problem(shapes)
            if problem:
                raise ctx.error("input " + problem)
        return fast_path(check, lambda names, const: " and ".join(
            "%s and %s.shape == %s.shape" % (_tensor_expr(names[p], const), names[positions[0]], names[p])
            for p in positions[1:]) + " and " + _tensor_expr(names[positions[0]], const))


# ------------------------------------------------------------------ output sizes

# Far beyond any memory (256 TiB); also keeps byte counts exact in int64.
MAX_OUTPUT_BYTES = 1 << 48


def output_size_problem(shape, itemsize):
    """None when an output of `shape` and `itemsize` bytes per element could be
    allocated at all, else a text giving its element and byte counts. Kernels whose
    output shape comes from arguments or input values (pads, repeats, fills) call it
    before allocating, so an absurd size is refused by name, not by NumPy's wording."""
    count = 1
    for d in shape:                      # Python ints: no int64 wrap-around
        count *= int(d)
    if count * int(itemsize) <= MAX_OUTPUT_BYTES:
        return None
    return ("the output shape %s holds %d elements (%d bytes), more than any memory holds"
            % (list(int(d) for d in shape), count, count * int(itemsize)))


# ------------------------------------------------------------------ applying rules

def verify_arguments(schema, op_def, label):
    """Plan-time argument checks of OpSchema.verify: no name given twice, every
    declared argument of its declared type and within its static rules."""
    seen = set()
    for a in op_def.arg:
        if a.name in seen:
            raise Caffe2Error("%s: duplicated argument name '%s' (an argument may be given once)"
                              % (label, a.name))
        seen.add(a.name)
    if not schema.args:
        return
    helper = ArgumentHelper(op_def)
    for arg in schema.args:
        if arg.name not in seen:
            continue
        try:
            value = read_arg(helper, arg)
        except Caffe2Error as exc:      # ArgumentHelper words it without the op's index
            raise Caffe2Error("%s: %s" % (label, str(exc).split(": ", 1)[-1])) from None
        for rule in _rules(arg.check):
            problem = rule.static(value)
            if problem:
                raise Caffe2Error("%s: argument '%s' %s" % (label, arg.name, problem))


def _rules(check):
    if check is None:
        return ()
    return check if isinstance(check, (tuple, list)) else (check,)


def runtime_guard(schema, ctx):
    """One function check(*inputs) applying the schema's per-call rules for this op,
    or None when it has none. Inputs are the op's inputs as the kernel gets them."""
    if schema is None:
        return None
    checks = []
    for arg in schema.args:
        rules = _rules(arg.check)
        if not rules:
            continue
        value = read_arg(ctx._args, arg)
        if value is None:
            value = arg.default
        for rule in rules:
            check = rule.runtime(ctx, arg.name, value)
            if check is not None:
                checks.append(check)
    for rule in schema.checks:
        check = rule.runtime(ctx)
        if check is not None:
            checks.append(check)
    if not checks:
        return None
    if len(checks) == 1:
        only = checks[0]

        def guard(*inputs):
            only(inputs)
    else:
        def guard(*inputs):
            for check in checks:
                check(inputs)
    guard.checks = checks
    fast = [getattr(c, "fast", None) for c in checks]
    # the inlined form of every check, when each has one (see fast_path)
    guard.fast = None if None in fast else (
        lambda names, const: " and ".join("(%s)" % f(names, const) for f in fast))
    guard.fast_terms = None if None in fast else (
        lambda names, const: [term for c in checks for term in fast_terms(c, names, const)])
    return guard
