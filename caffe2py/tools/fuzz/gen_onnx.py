"""Family `onnx`: one-node ONNX models for every ONNX op caffe2py registers, with
attributes and inputs drawn from onnx's own schema of the op at a random opset
(inputs of the types its type constraints allow, random attribute values),
run through caffe2py's ONNX backend; onnxruntime runs the same model and is the
reference where it accepts it."""
import numpy as np

from . import values
from .cases import Case

DOMAINS = ("ai.onnx", "ai.onnx.ml")
# Outputs that are random by definition: compared by shape and dtype only.
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli", "Dropout"}
SKIPPED = {"If": "needs subgraphs", "Loop": "needs subgraphs", "Scan": "needs subgraphs",
           "SequenceMap": "needs subgraphs"}

_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32,
    "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
    "tensor(string)": object,
}
_MAX_OPSET = 28


def _onnx_types():
    import caffe2py.operators  # noqa: F401
    from caffe2py import registry
    out = []
    for (domain, op_type, device), engines in sorted(registry._kernels.items()):
        if domain in DOMAINS and device == registry.CPU and op_type not in SKIPPED:
            versions = [(e.since_version, e.until_version) for es in engines.values() for e in es]
            out.append((domain, op_type, versions))
    return out


_cache = []


def op_types():
    if not _cache:
        _cache.append(_onnx_types())
    return _cache[0]


def _schema(domain, op_type, versions, rng):
    import onnx
    lo = min(v[0] for v in versions)
    hi = max(_MAX_OPSET if v[1] is None else v[1] for v in versions)
    if domain == "ai.onnx.ml":
        lo, hi = 1, 5
    for _ in range(4):
        # most cases at opsets onnxruntime knows (a reference), some at the newest
        top = min(hi, 21) if rng.random() < 0.8 and lo <= 21 else hi
        version = int(rng.integers(lo, top + 1))
        try:
            schema = onnx.defs.get_schema(op_type, version, "" if domain == "ai.onnx" else domain)
        except Exception:  # noqa: BLE001 - no schema at that version
            continue
        return schema, version
    return None, None


def _attribute(rng, attr):
    from onnx import AttributeProto, helper
    t = attr.type
    name = attr.name
    if t == AttributeProto.INT:
        return helper.make_attribute(name, values.int_value(rng))
    if t == AttributeProto.FLOAT:
        return helper.make_attribute(name, values.float_value(rng))
    if t == AttributeProto.STRING:
        return helper.make_attribute(name, values.string_value(rng, ("constant", "reflect", "edge", "linear",
                                                                     "nearest", "NOTSET", "SAME_UPPER",
                                                                     "VALID", "DCR", "CRD", "bilinear")))
    if t == AttributeProto.INTS:
        return helper.make_attribute(name, values.int_list(rng, int(rng.integers(1, 5))))
    if t == AttributeProto.FLOATS:
        return helper.make_attribute(name, values.float_list(rng, int(rng.integers(1, 5))))
    if t == AttributeProto.STRINGS:
        return helper.make_attribute(name, [values.string_value(rng) for _ in range(int(rng.integers(1, 3)))])
    if t == AttributeProto.TENSOR:
        arr = values.tensor(rng, values.shape(rng, rank=int(rng.integers(0, 2))), "float", np.float32)
        return helper.make_attribute(name, helper.make_tensor("t", 1, arr.shape, arr.reshape(-1).tolist()))
    return None


def _input_types(rng, schema):
    """One numpy dtype per type parameter (the same for the inputs sharing it)."""
    chosen = {}
    for c in schema.type_constraints:
        usable = [s for s in c.allowed_type_strs if s in _TYPES]
        if usable:
            # float32 first: the common case reaches the kernels more often
            chosen[c.type_param_str] = ("tensor(float)" if "tensor(float)" in usable and rng.random() < 0.5
                                        else values.pick(rng, usable))
    return chosen


def _tensor_for(rng, type_str, dims):
    dtype = _TYPES[type_str]
    if dtype is object:
        return values.tensor(rng, dims, "string")
    kind = np.dtype(dtype).kind
    if kind == "f":
        return values.tensor(rng, dims, "float", dtype)
    if kind == "b":
        return values.tensor(rng, dims, "bool")
    return values.tensor(rng, dims, "index", dtype)


def generate(case_id, rng):
    import onnx
    from onnx import helper
    for _ in range(10):
        domain, op_type, versions = values.pick(rng, op_types())
        schema, version = _schema(domain, op_type, versions, rng)
        if schema is not None:
            break
    else:
        return None
    params = _input_types(rng, schema)
    dims = values.shape(rng)
    same = rng.random() < 0.6
    names, feeds, infos = [], {}, []
    formal = list(schema.inputs)
    n_formal = len(formal)
    for k, f in enumerate(formal):
        variadic = f.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        optional = f.option == onnx.defs.OpSchema.FormalParameterOption.Optional
        count = int(rng.integers(1, 4)) if variadic else 1
        for j in range(count):
            if optional and rng.random() < 0.4:
                names.append("")
                continue
            type_str = params.get(f.type_str, f.type_str)
            if type_str not in _TYPES:
                if optional:
                    names.append("")
                    continue
                return None          # sequences, maps, optionals: not generated
            name = "x%d_%d" % (k, j)
            shape = dims if same else values.shape(rng)
            feeds[name] = _tensor_for(rng, type_str, shape)
            names.append(name)
            infos.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
                feeds[name].dtype) if feeds[name].dtype != object else onnx.TensorProto.STRING, None))
    while names and names[-1] == "":
        names.pop()
    if len([n for n in names if n]) < schema.min_input or n_formal == 0 and schema.min_input:
        return None
    outs = []
    for k, f in enumerate(schema.outputs):
        if f.option == onnx.defs.OpSchema.FormalParameterOption.Optional and rng.random() < 0.5:
            break
        outs.append("y%d" % k)
    if not outs:
        outs = ["y0"]
    attrs = []
    for attr in schema.attributes.values():
        if attr.required or rng.random() < 0.35:
            if attr.type == onnx.AttributeProto.GRAPH:
                return None
            a = _attribute(rng, attr)
            if a is not None:
                attrs.append(a)
    node = helper.make_node(op_type, names, outs, domain="" if domain == "ai.onnx" else domain)
    node.attribute.extend(attrs)
    out_infos = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph([node], "fuzz", infos, out_infos)
    opsets = [helper.make_opsetid("", version if domain == "ai.onnx" else 17)]
    if domain != "ai.onnx":
        opsets.append(helper.make_opsetid(domain, version))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = _ir_version(version if domain == "ai.onnx" else 17)
    summary = "%s-%d (%d in, %d out, %d attrs)" % (op_type, version, len(feeds), len(outs), len(attrs))
    return Case(case_id, "onnx", {"model_onnx": model.SerializeToString(), "inputs": feeds,
                                  "random": op_type in RANDOM_OPS}, summary)


def _ir_version(opset):
    from onnx import helper
    for _release, ir, ai_onnx, *_rest in helper.VERSION_TABLE:
        if ai_onnx >= opset:
            return ir
    return helper.VERSION_TABLE[-1][1]


def run_ours(model_bytes, feeds):
    """(outcome, outputs or None) from caffe2py's ONNX backend."""
    from caffe2py.onnx import backend

    from .outcomes import classify_exception, outcome
    try:
        rep = backend.prepare(model_bytes)
        outputs = rep.run(dict(feeds))
    except Exception as exc:  # noqa: BLE001
        return outcome(*classify_exception(exc)), None
    return outcome("ran"), list(outputs)


def uses_random_ops(model_bytes):
    """True when any node of the model (subgraphs included) is a random op. The ONNX
    spec leaves the generator undefined, so such a model's values can differ from
    onnxruntime's whatever the seed: only shapes and dtypes are compared. Mutated
    models get random ops by retyping nodes (mutate:3:52736: a RandomNormalLike)."""
    try:
        import onnx
        model = onnx.load_model_from_string(model_bytes)
    except Exception:  # noqa: BLE001 - unreadable: neither side will run it
        return False

    def graphs(graph):
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    yield from graphs(sub)
    return any(node.op_type in RANDOM_OPS for g in graphs(model.graph) for node in g.node)


def run_reference(model_bytes, feeds):
    """onnxruntime's outputs, or None when it refuses the model or is absent."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4
        sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        return list(sess.run(None, {k: v for k, v in feeds.items() if k in names}))
    except Exception:  # noqa: BLE001 - the reference refuses: no comparison
        return None


def holds_nonfinite(model_bytes, feeds):
    """Whether the model's initializers or the inputs hold a NaN or an infinity."""
    import onnx
    from onnx import numpy_helper
    for x in feeds.values():
        x = np.asarray(x)
        if x.dtype.kind in "fc" and not np.isfinite(x).all():
            return True
    try:
        model = onnx.load_model_from_string(model_bytes)
    except Exception:  # noqa: BLE001 - unreadable: nothing to say
        return False
    for t in model.graph.initializer:
        try:
            v = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001
            continue
        if v.dtype.kind in "fc" and not np.isfinite(v).all():
            return True
    return False


_CHUNK = 1 << 20      # float64 copies in pieces: an output may be most of the 4 GiB a worker has


def _compare_floats(k, a, b, nonfinite):
    tol = {2: 2e-2, 4: 1e-3, 8: 1e-6}[a.dtype.itemsize]
    scale = 1.0                     # NaN/inf in the reference must not poison the scale
    for start in range(0, b.size, _CHUNK):
        part = np.abs(b[start:start + _CHUNK].astype(np.float64))
        part = part[np.isfinite(part)]
        if part.size:
            scale = max(scale, float(part.max()))
    for start in range(0, a.size, _CHUNK):
        wa, wb = a[start:start + _CHUNK].astype(np.float64), b[start:start + _CHUNK].astype(np.float64)
        with np.errstate(all="ignore"):
            ok = np.isclose(wa, wb, rtol=tol, atol=tol * scale, equal_nan=True)
            if nonfinite:
                ok |= np.isnan(wa) & np.isfinite(wb)
        if not ok.all():
            i = start + int(np.argmin(ok))
            return "output %d element %d is %r, reference %r" % (k, i, a[i], b[i])
    return None


def compare(ours, ref, random=False, nonfinite=False):
    """A text describing how caffe2py's outputs differ from the reference's (None: agree).
    nonfinite: the model's data hold a NaN or infinity. Then a NaN of ours where the
    reference is finite is accepted: IEEE gives NaN for NaN x 0, and we multiply the zeros
    of a conv's padding where onnxruntime skips them (fuzz mutate:6:42677)."""
    if len(ours) != len(ref):
        return "%d outputs, reference %d" % (len(ours), len(ref))
    for k, (a, b) in enumerate(zip(ours, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return "output %d has shape %s, reference %s" % (k, list(a.shape), list(b.shape))
        if a.dtype != b.dtype and not (a.dtype.kind in "OUS" and b.dtype.kind in "OUS"):
            return "output %d has dtype %s, reference %s" % (k, a.dtype, b.dtype)
        if random or a.size == 0:
            continue
        if a.dtype.kind == "f":
            problem = _compare_floats(k, a.reshape(-1), b.reshape(-1), nonfinite)
            if problem:
                return problem
        elif a.dtype.kind in "OUS":
            if [str(v) for v in a.reshape(-1)] != [str(v) for v in b.reshape(-1)]:
                return "output %d strings differ" % k
        elif not np.array_equal(a, b):
            i = int(np.argmin((a == b).reshape(-1)))
            return "output %d element %d is %r, reference %r" % (k, i, a.reshape(-1)[i], b.reshape(-1)[i])
    return None
