"""Input rules every ONNX op gets from onnx's own specification of the op at the
model's opset (onnx.defs), so each kernel may assume what the spec promises:

  OnnxTypeConstraints  each input's type is one its type parameter allows; inputs
                       sharing a type parameter share a dtype (per call, cheap)
  OnnxShapeInference   onnx's shape inference accepts the inputs' shapes (and the
                       values of small integer inputs such as shapes, axes, k):
                       ranks, attribute values against shapes, broadcasting. It
                       runs once per distinct input signature (cached per op).

Both are inlined in the compiled plan (schema_rules.fast_path): a few comparisons per
op (dtype identities; the input shapes and dtypes against the last ones that passed)
and no call while they hold, the full check when they do not (ops onnx gives an
integer-only input keep the call: those values count). ~0.3 ms less Python per run
of inception_v2 (87 ops; benchmarks/executor_overhead.py, kernels off).
"""
import re

import numpy as np

from caffe2py.schema_rules import ABSENT_INPUTS_ARG, Broadcast, InputRule, _position, _tensor_expr, dtype_in_term, \
    fast_path

DOMAIN = "ai.onnx"

# numpy dtype -> onnx's name for tensors of it (types numpy lacks are never checked)
_ONNX_TENSOR_TYPES = {np.dtype(k): "tensor(%s)" % v for k, v in (
    (np.float32, "float"), (np.float64, "double"), (np.float16, "float16"), (np.int8, "int8"),
    (np.int16, "int16"), (np.int32, "int32"), (np.int64, "int64"), (np.uint8, "uint8"),
    (np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64"), (np.bool_, "bool"),
    (np.complex64, "complex64"), (np.complex128, "complex128"), (np.object_, "string"),
    (np.str_, "string"), (np.bytes_, "string"))}


class OnnxTypeConstraints(InputRule):
    """Input dtypes as onnx's own schema of the op (at the model's opset) declares
    them: each input's type is one its type parameter allows, and inputs that share
    a type parameter (Add's A and B are both T) share a dtype. Every ONNX op carries
    this rule; it is read from onnx.defs once per op at plan time."""

    def runtime(self, ctx):
        formal = _formal_inputs(ctx)
        if not formal:
            return None
        absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
        total = ctx.n_inputs + len(absent)
        where = []                       # (schema input index, position, param, allowed)
        for index in range(total):
            pos = _position(ctx, index)
            if pos is None:
                continue
            param, allowed, _variadic = formal[min(index, len(formal) - 1)]
            if index >= len(formal) and not formal[-1][2]:
                continue                 # more inputs than onnx declares: the arity check's job
            if param.endswith("#"):      # heterogeneous variadic (Scan's V): one type per value
                param += str(index)
            where.append((index, pos, param, allowed))
        label = "%s-%d" % (ctx.type, ctx.op_version) if ctx.op_version else ctx.type

        passed = set()      # the dtypes of inputs that passed (a net sees the same few)

        def check(inputs):
            try:
                key = tuple([getattr(x, "dtype", None) for x in inputs])
                if key in passed:
                    return
            except TypeError:        # an unhashable dtype-like attribute: check in full
                key = None
            first = {}
            for index, pos, param, allowed in where:
                x = inputs[pos]
                dtype = getattr(x, "dtype", None)
                if dtype is None:
                    if any(a.startswith("tensor(") for a in allowed) and not any(
                            a.startswith(("seq(", "optional(", "map(")) for a in allowed):
                        raise ctx.input_error(pos, "input %d must be a tensor (onnx's %s), got a %s"
                                              % (index, label, type(x).__name__))
                    continue
                name = _ONNX_TENSOR_TYPES.get(np.dtype(dtype))
                if name is None:
                    continue
                if allowed and name not in allowed:
                    raise ctx.input_error(pos, "input %d has type %s, which onnx's %s does not allow for "
                                          "its type parameter %s (allowed: %s)"
                                          % (index, name, label, param, ", ".join(sorted(allowed))))
                seen = first.setdefault(param, (index, name))
                if seen[1] != name:
                    raise ctx.input_error(pos, "input %d has type %s but input %d has %s; onnx's %s "
                                          "types both with %s, so they must match"
                                          % (index, name, seen[0], seen[1], label, param))
            if key is not None and len(passed) < 64:
                passed.add(key)

        # inlined in the plan (schema_rules.fast_path): each array's dtype among those its
        # parameter allows, inputs sharing a parameter the same dtype object; anything
        # else (sequences, dtypes onnx has no name for) runs the check itself
        dtypes, shared = {}, {}
        for index, pos, param, allowed in where:
            dtypes[pos] = frozenset(d for d, name in _ONNX_TENSOR_TYPES.items() if not allowed or name in allowed)
            shared.setdefault(param, []).append(pos)

        def terms(names, const):
            parts = [dtype_in_term(names[pos], ok, const) for pos, ok in dtypes.items()]
            for positions in shared.values():
                parts.extend((None, "%s.dtype is %s.dtype" % (names[pos], names[positions[0]]))
                             for pos in positions[1:])
            return parts
        return fast_path(check, lambda names, const: " and ".join(t for _, t in terms(names, const)), terms)


_formal_cache = {}


def _formal_inputs(ctx):
    """[(type parameter, allowed type names, variadic)] per formal input of onnx's
    schema of the op at its opset, or None when onnx has no such schema."""
    domain = "" if ctx.op_def.domain in ("", DOMAIN, "onnx") else ctx.op_def.domain
    key = (ctx.type, domain, ctx.op_version)
    if key not in _formal_cache:
        _formal_cache[key] = _read_formal_inputs(ctx.type, domain, ctx.op_version)
    return _formal_cache[key]


def _read_formal_inputs(op_type, domain, version):
    import onnx
    try:
        schema = (onnx.defs.get_schema(op_type, version, domain) if version
                  else onnx.defs.get_schema(op_type, domain))
    except Exception:  # noqa: BLE001 - no schema at that opset, or not an onnx op
        try:     # a model whose opset predates the op (caffe2py still runs it): the op's latest types
            schema = onnx.defs.get_schema(op_type, domain)
        except Exception:  # noqa: BLE001 - an op onnx does not define (caffe2py's own): no rule
            return None
    constraints = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    out = []
    for f in schema.inputs:
        allowed = constraints.get(f.type_str, frozenset([f.type_str]))
        # a type parameter shared by a variadic input's values is only shared when onnx says so
        # (marked with a trailing '#', numbered per actual input at plan time)
        param = f.type_str if (f.option != variadic or f.is_homogeneous) else f.type_str + "#"
        out.append((param, allowed, f.option == variadic))
    return out




# ------------------------------------------------------------------ shape inference

_DATA_LIMIT = 64          # inputs up to this many values are handed to inference as data
_CACHE_LIMIT = 64         # input signatures remembered per op


class OnnxShapeInference(InputRule):
    """onnx's shape inference for the op, on the actual input shapes (and the values
    of small inputs): whatever the spec can tell from them is checked before the
    kernel runs. Ops with graph attributes (control flow) are left to their kernels."""

    def runtime(self, ctx):
        prepared = _node_for(ctx)
        if prepared is None:
            return None
        schema, node, names, opsets = prepared
        if any(t.startswith("optional(") for c in schema.type_constraints for t in c.allowed_type_strs):
            return None      # an optional holding a sequence is a bare list here: not describable
        present = _present_names(ctx, names)
        seen = {}
        label = "%s-%d" % (ctx.type, ctx.op_version) if ctx.op_version else ctx.type

        # the last inputs that passed, as (shape, dtype, ...) when no value of theirs
        # counts (no small integer input): the plan's inlined test compares with it
        last = [None]

        def check(inputs):
            try:
                key = tuple(_signature(x) for x in inputs)
            except TypeError:
                return               # values inference cannot describe: the kernel's business
            if key in seen:
                problem = seen[key]
            else:
                problem = _infer(schema, node, present, _as_inference_sees(ctx.type, inputs), opsets)
                if len(seen) >= _CACHE_LIMIT:
                    seen.clear()
                seen[key] = problem
            if problem:
                raise ctx.error("inputs %s do not meet onnx's specification of %s: %s"
                                % (_describe(inputs), label, problem))
            if all(k[0] != "seq" and k[2] is None for k in key):
                last[0] = tuple(v for x in inputs for v in (x.shape, x.dtype))

        def render(names, const):
            arrays = " and ".join(_tensor_expr(x, const) for x in names)
            now = "(%s,)" % ", ".join("%s.shape, %s.dtype" % (x, x) for x in names)
            return "%s and %s == %s[0]" % (arrays, now, const(last)) if names else "True"
        # an input onnx types only as integers (a shape, axes, indices) is usually small:
        # its values count, the inlined test could never pass, so the op keeps the call
        allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        whole_number_input = any(all(_INTEGER_TYPE.match(t) for t in allowed.get(f.type_str) or [f.type_str])
                                 for f in schema.inputs)
        return check if whole_number_input else fast_path(check, render)

    def output_shapes(self, ctx, inputs, fixed=()):
        """The outputs' shapes onnx's inference gives from the inputs' shapes and dtypes
        and the values of the small inputs (up to _DATA_LIMIT values: shapes, scales,
        axes) at the indices in `fixed` only (those that never change: a model's
        initializers), or None where it cannot tell them all."""
        from onnx import numpy_helper
        from onnx import shape_inference
        prepared = _node_for(ctx)
        if prepared is None:
            return None
        schema, node, names, opsets = prepared
        present = _present_names(ctx, names)
        types, data = {}, {}
        for i, (name, x) in enumerate(zip(present, inputs)):
            proto = _type_proto(x)
            if proto is None:
                return None
            types[name] = proto
            if i in fixed and isinstance(x, np.ndarray) and x.size <= _DATA_LIMIT:
                data[name] = numpy_helper.from_array(x, name)   # a shape, scales, axes: not weights
        try:
            outs = shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=opsets)
        except Exception:  # noqa: BLE001 - no verdict
            return None
        shapes = []
        for name in node.output:
            t = outs.get(name)
            if t is None or not t.tensor_type.HasField("shape"):
                return None
            dims = t.tensor_type.shape.dim
            if not all(d.HasField("dim_value") for d in dims):
                return None
            shapes.append(tuple(d.dim_value for d in dims))
        return shapes


_INTEGER_TYPE = re.compile(r"tensor\((u?int\d+|bool)\)$")


def _present_names(ctx, names):
    """The rebuilt node's input names of the inputs the op def has (optional ones it
    left out are listed in its ABSENT_INPUTS_ARG)."""
    absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
    return [n for i, n in enumerate(names) if i not in absent]


def _signature(x):
    shape = getattr(x, "shape", None)
    if shape is None:
        if isinstance(x, (list, tuple)):
            return ("seq", tuple(_signature(v) for v in x))
        raise TypeError
    data = x.tobytes() if x.size <= _DATA_LIMIT and x.dtype.kind in "iub" else None
    return (shape, x.dtype.str, data)


def _describe(inputs):
    parts = []
    for x in inputs:
        shape = getattr(x, "shape", None)
        parts.append("%s %s" % (getattr(x, "dtype", type(x).__name__), list(shape))
                     if shape is not None else "a %s of %d" % (type(x).__name__, len(x)))
    return "(%s)" % ", ".join(parts)


# Inputs onnx's inference wants as scalars but onnxruntime (and onnx's own function
# bodies: AffineGrid feeds Range a [1] limit) also give as one-element tensors; the
# kernel's Scalar rule checks them, inference sees them as the scalars they stand for.
_ONE_ELEMENT_AS_SCALAR = {"Range": (0, 1, 2)}


def _as_inference_sees(op_type, inputs):
    which = _ONE_ELEMENT_AS_SCALAR.get(op_type)
    if not which:
        return inputs
    return [x.reshape(()) if i in which and getattr(x, "size", 0) == 1 else x
            for i, x in enumerate(inputs)]


_node_cache = {}


def _node_for(ctx):
    """(onnx schema, NodeProto, input names, opset imports) rebuilt from the op def,
    or None when it cannot be rebuilt faithfully (graph attributes, unknown op)."""
    domain = "" if ctx.op_def.domain in ("", DOMAIN, "onnx") else ctx.op_def.domain
    key = ctx.op_def.SerializeToString()
    if key in _node_cache:
        return _node_cache[key]
    result = None
    try:
        result = _build_node(ctx, domain)
    except Exception:  # noqa: BLE001 - anything odd in the def: no inference rule
        result = None
    if len(_node_cache) > 4096:
        _node_cache.clear()
    _node_cache[key] = result
    return result


def _build_node(ctx, domain):
    import onnx
    from onnx import AttributeProto as A
    from onnx import helper, numpy_helper

    from caffe2py.tensors import tensor_to_numpy
    version = ctx.op_version or onnx.defs.onnx_opset_version()
    schema = onnx.defs.get_schema(ctx.type, version, domain)
    absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
    total = ctx.n_inputs + len(absent)
    names = ["" if i in absent else "i%d" % i for i in range(total)]
    outputs = ["o%d" % i for i in range(ctx.n_outputs)]
    node = helper.make_node(ctx.type, names, outputs, domain=domain)
    for arg in ctx.op_def.arg:
        spec = schema.attributes.get(arg.name)
        if spec is None:
            continue
        t = spec.type
        if t == A.INT and arg.HasField("i"):
            value = int(arg.i)
        elif t == A.FLOAT and (arg.HasField("f") or arg.HasField("i")):
            value = float(arg.f if arg.HasField("f") else arg.i)
        elif t == A.STRING and arg.HasField("s"):
            value = arg.s
        elif t == A.INTS:
            value = [int(v) for v in arg.ints]
        elif t == A.FLOATS:
            value = [float(v) for v in arg.floats]
        elif t == A.STRINGS:
            value = list(arg.strings)
        elif t == A.TENSOR and arg.HasField("t"):
            value = numpy_helper.from_array(tensor_to_numpy(arg.t))
        else:
            return None          # graphs, type protos, or a value of another type
        node.attribute.append(helper.make_attribute(arg.name, value))
    opsets = [helper.make_opsetid("", version if not domain else 17)]
    if domain:
        opsets.append(helper.make_opsetid(domain, version))
    return schema, node, names, opsets


_ELEM = None


def _elem_type(dtype):
    global _ELEM
    if _ELEM is None:
        from onnx import TensorProto as T
        _ELEM = {np.dtype(k): v for k, v in (
            (np.float32, T.FLOAT), (np.float64, T.DOUBLE), (np.float16, T.FLOAT16), (np.int8, T.INT8),
            (np.int16, T.INT16), (np.int32, T.INT32), (np.int64, T.INT64), (np.uint8, T.UINT8),
            (np.uint16, T.UINT16), (np.uint32, T.UINT32), (np.uint64, T.UINT64), (np.bool_, T.BOOL),
            (np.complex64, T.COMPLEX64), (np.complex128, T.COMPLEX128), (np.object_, T.STRING),
            (np.str_, T.STRING), (np.bytes_, T.STRING))}
    return _ELEM.get(np.dtype(dtype))


def _type_proto(x):
    from onnx import helper
    if isinstance(x, (list, tuple)):
        if not x:
            return None
        inner = [_type_proto(v) for v in x]
        if any(t is None for t in inner) or any(t != inner[0] for t in inner):
            return None
        return helper.make_sequence_type_proto(inner[0])
    elem = _elem_type(x.dtype)
    if elem is None:
        return None
    return helper.make_tensor_type_proto(elem, list(x.shape))


def _axis_beyond_int32(node):
    """A complaint about an axis attribute outside int32, else None. onnx's inference
    narrows an axis to int and indexes with the wrapped value: LayerNormalization's
    axis 2**31 crashed the process (fuzz onnx:5:30261). No tensor has that many dims.
    Other int attributes may be that large (Slice-1's ends of INT64_MAX) and go on to
    onnx as before."""
    limit = 1 << 31
    for a in node.attribute:
        if a.name in ("axis", "axes") and (
                (a.type == a.INT and not -limit <= a.i < limit)
                or (a.type == a.INTS and any(not -limit <= v < limit for v in a.ints))):
            return "attribute %s = %s is not an axis of any tensor" % (
                a.name, a.i if a.type == a.INT else list(a.ints))
    return None


def _infer(schema, node, names, inputs, opsets):
    """None when onnx's inference accepts the inputs, else its complaint."""
    from onnx import numpy_helper, shape_inference
    bad_axis = _axis_beyond_int32(node)
    if bad_axis:
        return bad_axis              # onnx's C++ inference narrows an axis to a 32-bit int and crashes
    types, data = {}, {}
    for name, x in zip(names, inputs):
        proto = _type_proto(x)
        if proto is None:
            return None              # a type onnx cannot describe here: nothing to say
        types[name] = proto
        if isinstance(x, np.ndarray) and x.size <= _DATA_LIMIT and x.dtype.kind in "iub":
            data[name] = numpy_helper.from_array(x, name)
    try:
        shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=opsets)
    except shape_inference.InferenceError as exc:
        return _clean(str(exc))
    except Exception:  # noqa: BLE001 - inference itself failed on odd input: no verdict
        return None
    return None


def _clean(text):
    """onnx's message without its bracketed category and node prefix."""
    import re
    text = re.sub(r"^\[\w+\]\s*", "", text.strip())
    text = re.sub(r"^\(op_type:[^)]*\):\s*", "", text)
    return text.splitlines()[0] if text else "rejected"


class OnnxBroadcast(InputRule):
    """Multidirectional broadcasting (NumPy's rules) of every input, from opset 7 on;
    before that ops broadcast only with their legacy broadcast/axis attributes."""

    def runtime(self, ctx):
        if 0 < ctx.op_version < 7:
            return None
        return Broadcast("*").runtime(ctx)


_arity_cache = {}


def check_arity(ctx):
    """Input and output counts within what onnx's schema of the op at its opset
    allows (absent optional inputs count as given, as in the model), and no required
    input left empty: at plan time."""
    domain = "" if ctx.op_def.domain in ("", DOMAIN, "onnx") else ctx.op_def.domain
    key = (ctx.type, domain, ctx.op_version)
    if key not in _arity_cache:
        _arity_cache[key] = _read_arity(ctx.type, domain, ctx.op_version)
    arity = _arity_cache[key]
    if arity is None:
        return
    (lo_in, hi_in), (lo_out, hi_out), required = arity
    absent = ctx.ints(ABSENT_INPUTS_ARG, []) if ctx.has(ABSENT_INPUTS_ARG) else []
    captured = len(ctx.strings("_onnx_captured", [])) if ctx.has("_onnx_captured") else 0
    n_in = ctx.n_inputs + len(absent) - captured
    label = "%s-%d" % (ctx.type, ctx.op_version) if ctx.op_version else ctx.type
    if not lo_in <= n_in <= hi_in:
        raise ctx.error("onnx's %s takes %s input%s, got %d" % (label, _count_text(lo_in, hi_in), _plural(hi_in), n_in))
    # fewer outputs than onnx's minimum are fine: the converter drops unused trailing ones
    if ctx.n_outputs > hi_out:
        raise ctx.error("onnx's %s produces %s output%s, got %d" % (label, _count_text(lo_out, hi_out), _plural(hi_out),
                                                                  ctx.n_outputs))
    for index in absent:
        name = required.get(index)
        if name is None and "*" in required and index >= required["*"][0]:
            name = required["*"][1]            # a variadic tensor list has no empty members
        if name is not None:
            raise ctx.error("input %d ('%s') of onnx's %s is required, but the node leaves it empty"
                            % (index, name, label))


def _count_text(lo, hi):
    if lo == hi:
        return "exactly %d" % lo
    return "at least %d" % lo if hi >= 1 << 20 else "%d to %d" % (lo, hi)


def _plural(n):
    return "" if n == 1 else "s"


def _read_arity(op_type, domain, version):
    """((min, max) inputs, (min, max) outputs, {position: name} of required inputs).
    An op the model's opset predates (caffe2py still runs it) gets its latest schema's."""
    import onnx
    schema = None
    for args in ((op_type, version, domain), (op_type, 1 << 30, domain)) if version else ((op_type, domain),):
        try:
            schema = onnx.defs.get_schema(*args)
            break
        except Exception:  # noqa: BLE001 - no schema at that opset (or not an onnx op)
            continue
    if schema is None:
        return None
    options = onnx.defs.OpSchema.FormalParameterOption
    required = {i: p.name for i, p in enumerate(schema.inputs) if p.option == options.Single}
    if schema.inputs and schema.inputs[-1].option == options.Variadic:
        required["*"] = (len(schema.inputs) - 1, schema.inputs[-1].name)   # from here on
    return (schema.min_input, schema.max_input), (schema.min_output, schema.max_output), required
