"""Family `op`: NetDefs of one to three Caffe2 ops drawn over every registered
schema, with arguments drawn from the schema's declared arguments and inputs of
random (mostly plausible) shapes and dtypes, run in a fresh Workspace.

Oracles: a failing run must leave the workspace as it was; a run must not write
into blobs it does not output; a run the schema rules reject must not succeed;
for the ops in references.py the outputs must match a NumPy formula."""
import numpy as np

from . import references, values
from .cases import Case

# Op types that the fuzzer does not draw, and why (everything else registered is).
SKIPPED = {
    # block until another thread acts, by design (Caffe2's semantics)
    "DequeueBlobs": "blocks on an empty queue", "SafeDequeueBlobs": "blocks on an empty queue",
    "EnqueueBlobs": "blocks on a full queue", "SafeEnqueueBlobs": "blocks on a full queue",
    "WeightedSampleDequeueBlobs": "blocks on an empty queue", "DequeueRebatchingQueue": "blocks",
    "EnqueueRebatchingQueue": "blocks", "RebatchingQueueEnqueue": "blocks",
    "RebatchingQueueDequeue": "blocks",
    # need peers on the network
    "Allreduce": "needs peer processes", "Broadcast": "needs peer processes",
    "Allgather": "needs peer processes", "Barrier": "needs peer processes",
    "ReduceScatter": "needs peer processes", "CreateCommonWorld": "needs peer processes",
    "CloneCommonWorld": "needs peer processes", "DestroyCommonWorld": "needs peer processes",
    "SendTensor": "needs peer processes", "ReceiveTensor": "needs peer processes",
    # wait on wall-clock time or print to the terminal by design
    "Sleep": "sleeps by design",
}

_CAFFE2 = ""


def op_types():
    import caffe2py.operators  # noqa: F401 - registers every op
    from caffe2py import registry
    from caffe2py.registry import CPU
    types = []
    for op_type in registry.op_types(_CAFFE2):
        if op_type in SKIPPED or (_CAFFE2, op_type, CPU) not in registry._kernels:
            continue
        types.append(op_type)
    return types


def _count(rng, spec, other=None, check=None):
    """A count the arity spec accepts (95%), or any small count."""
    from caffe2py.registry import _arity_ok
    if rng.random() < 0.05:
        return int(rng.integers(0, 6))
    candidates = [n for n in range(0, 8) if _arity_ok(spec, n)]
    if check is not None and other is not None:
        candidates = [n for n in candidates if check(other, n)] or candidates
    if not candidates:
        return int(rng.integers(0, 6))
    # favour the smallest counts: the common form of an op
    weights = np.array([1.0 / (1 + k) for k in range(len(candidates))])
    return int(rng.choice(candidates, p=weights / weights.sum()))


def _arg_value(rng, arg):
    from caffe2py.schema_rules import OneOf, Range, _rules
    rules = _rules(arg.check)
    choices = next((r.choices for r in rules if isinstance(r, OneOf)), ())
    if choices and rng.random() < 0.7:
        chosen = values.pick(rng, choices)
        return [chosen] if arg.type in ("ints", "floats", "strings") else chosen
    kind = arg.type
    if kind == "any":
        kind = values.pick(rng, ("int", "float", "ints", "string"))
    if kind in ("int", "bool"):
        if kind == "bool":
            return int(values.pick(rng, (0, 1, 1, 0, 2, -1)))
        ranged = next((r for r in rules if isinstance(r, Range)), None)
        if ranged is not None and rng.random() < 0.6:
            lo = ranged.lo if ranged.lo is not None else -3
            hi = ranged.hi if ranged.hi is not None else lo + 6
            return int(rng.integers(int(lo), int(min(hi, lo + 8)) + 1))
        if isinstance(arg.default, int) and rng.random() < 0.3:
            return int(arg.default) + int(rng.integers(-2, 3))
        return values.int_value(rng)
    if kind == "float":
        return values.float_value(rng)
    if kind == "ints":
        return values.int_list(rng)
    if kind == "floats":
        return values.float_list(rng)
    if kind == "string":
        return values.string_value(rng, choices)
    if kind == "strings":
        return [values.string_value(rng, choices) for _ in range(int(rng.integers(0, 4)))]
    if kind == "net":
        from caffe2py import core
        from caffe2py.proto import caffe2_pb2
        # a NetDef built directly: core.Net would uniquify the name per process, and a
        # case id must regenerate the same bytes anywhere
        net = caffe2_pb2.NetDef(name="sub_%d" % int(rng.integers(100)))
        net.op.extend([core.CreateOperator("ConstantFill", [], ["sub_out"], shape=[2], value=1.0)])
        return net
    return None


def _args(rng, schema, op):
    from caffe2py.args import make_argument
    declared = list(schema.args)
    for arg in declared:
        if not (arg.required or rng.random() < 0.4):
            continue
        value = _arg_value(rng, arg)
        if value is None:
            continue
        try:
            op.arg.append(make_argument(arg.name, value))
        except Exception:  # noqa: BLE001 - an unbuildable value: leave the argument out
            continue
    if rng.random() < 0.05 and len(op.arg):                    # a name given twice
        op.arg.append(op.arg[int(rng.integers(len(op.arg)))])
    if rng.random() < 0.05:                                      # a wrongly typed value
        op.arg.append(make_argument(values.pick(rng, [a.name for a in declared] or ["axis"]),
                                    values.pick(rng, ("text", 1.5, [1, 2], -7))))


def _end_loops(rng, op):
    """A loop whose nets never write its condition (input 0) runs forever, in Caffe2
    too (op:3:5988), and would only measure the hang limit. So when an op carries a
    `loop_net`, one of its loop/condition nets ends by setting the condition blob to
    False: zero iterations when it is the condition net, one when it is the loop net.
    Any other way a generated case runs too long is still a finding."""
    from caffe2py import core
    nets = [a for a in op.arg if a.name in ("loop_net", "cond_net") and a.HasField("n")]
    if not op.input or not any(a.name == "loop_net" for a in nets):
        return
    stop = core.CreateOperator("ConstantFill", [], [op.input[0]], shape=[], value=0.0,
                               dtype=core.DataType.BOOL)
    nets[int(rng.integers(len(nets)))].n.op.extend([stop])


def _inputs(rng, n, prefix):
    """n input arrays: one shape/dtype for all (like elementwise ops want), or each
    its own; index-like integer tensors now and then."""
    mode = rng.random()
    dims = values.shape(rng)
    kind = values.pick(rng, values.ALL_KINDS)
    dtype = values.pick(rng, values.FLOAT_DTYPES) if kind == "float" else None
    out = {}
    for i in range(n):
        name = "%s%d" % (prefix, i)
        if mode < 0.45:
            out[name] = values.tensor(rng, dims, kind, dtype)
        elif mode < 0.7:   # first input any, the others small index/length vectors
            out[name] = (values.tensor(rng, dims, kind, dtype) if i == 0 else
                         values.tensor(rng, values.shape(rng, rank=int(rng.integers(0, 3))),
                                       values.pick(rng, ("index", "index", "float", "int"))))
        else:
            out[name] = values.any_tensor(rng)
    return out


def _op_def(rng, op_type, inputs, out_prefix):
    from caffe2py import core, registry
    schema = registry.schema_for(op_type)
    n_out = _count(rng, schema.num_outputs if schema else None, len(inputs),
                   schema.inputs_outputs_check if schema else None)
    outputs = ["%s%d" % (out_prefix, i) for i in range(n_out)]
    if outputs and inputs and rng.random() < 0.1:              # in place
        outputs[0] = inputs[int(rng.integers(len(inputs)))]
    op = core.CreateOperator(op_type, inputs, outputs)
    if schema is not None:
        _args(rng, schema, op)
        _end_loops(rng, op)
    if rng.random() < 0.03:
        op.engine = values.pick(rng, ("CUDNN", "NOPE", "DEFAULT", "MKLDNN"))
    return op


def generate(case_id, rng, types=None):
    from caffe2py import registry
    from caffe2py.proto import caffe2_pb2
    types = types or op_types()
    net = caffe2_pb2.NetDef(name="fuzz_%s" % case_id.rsplit(":", 1)[-1])
    n_ops = 1 if rng.random() < 0.8 else int(rng.integers(2, 4))
    feeds = {}
    available = []
    reference = None
    for k in range(n_ops):
        op_type = values.pick(rng, types)
        schema = registry.schema_for(op_type)
        n_in = _count(rng, schema.num_inputs if schema else None)
        fresh = _inputs(rng, n_in, "in%d_" % k)
        names = list(fresh)
        if available and n_in:                                 # chain on an earlier output
            names[0] = values.pick(rng, available)
            fresh.pop("in%d_0" % k, None)
        feeds.update(fresh)
        op = _op_def(rng, op_type, names, "out%d_" % k)
        net.op.append(op)
        available += list(op.output)
        if n_ops == 1:
            reference = references.name_for(op)
    if rng.random() < 0.03:
        net.type = values.pick(rng, ("dag", "async_scheduling", "bogus", "simple"))
    summary = " -> ".join("%s(%d in, %d out)" % (o.type, len(o.input), len(o.output)) for o in net.op)
    return Case(case_id, "op", {"net": net.SerializeToString(), "inputs": feeds, "reference": reference},
                summary)


def run(case):
    """Run the case's net in a fresh workspace; the outcome dict (see outcomes.py)."""
    from caffe2py.proto import caffe2_pb2
    from caffe2py.workspace import Workspace

    from .outcomes import classify_exception, outcome
    net = caffe2_pb2.NetDef.FromString(case.data["net"])
    endless = _endless_loop(net, case.data["inputs"])
    if endless:
        return {"class": "skipped", "message": endless}       # not a finding: see _endless_loop
    ws = Workspace("fuzz")
    for name, value in case.data["inputs"].items():
        ws.feed_blob(name, value)
    before = {name: (value, _copy(value)) for name, value in ws.blobs.items()}
    try:
        ws.run_net_once(net)
    except Exception as exc:  # noqa: BLE001 - classified below
        cls, message = classify_exception(exc)
        changed = _workspace_changes(before, ws.blobs)
        if changed and cls in ("our_error", "raw_text"):
            return outcome("workspace_changed", "%s; after it: %s" % (message, changed))
        return outcome(cls, message)
    outputs = _all_outputs(net)
    modified = _workspace_changes({k: v for k, v in before.items() if k not in outputs},
                                  {k: v for k, v in ws.blobs.items() if k not in outputs})
    if modified:
        return outcome("input_modified", modified)
    for name in sorted(outputs):    # what users get back must be arrays (a NumPy scalar: 0-d)
        value = ws.blobs.get(name)
        if isinstance(value, (np.ndarray, np.generic)) and not isinstance(ws.fetch_blob(name), np.ndarray):
            return outcome("wrong_result", "FetchBlob('%s') is not an array" % name)
    rejected = _rules_reject(net, case.data["inputs"])
    if rejected:
        return outcome("silent_accept", rejected)
    ref = case.data.get("reference")
    if ref:
        problem = references.check(ref, net.op[0], case.data["inputs"], ws.blobs)
        if problem:
            return outcome("wrong_result", problem)
    return outcome("ran")


def _endless_loop(net, inputs):
    """Why the net must run forever, or None. A While whose condition is fed True and
    whose loop and condition nets never write the condition blob loops forever, in
    Caffe2 too; reproducer folders from before the generator stopped drawing such loops
    (op:3:5988) replay as skipped with this reason instead of waiting out the hang
    limit. Only that certain case: any other long run is still a `hang`."""
    for op in net.op:
        if op.type != "While" or not op.input:
            continue
        cond = inputs.get(op.input[0])
        if not (isinstance(cond, np.ndarray) and cond.dtype == np.bool_ and cond.size == 1 and bool(cond)):
            continue
        written = set()
        for arg in op.arg:
            if arg.name in ("loop_net", "cond_net") and arg.HasField("n"):
                written |= _all_outputs(arg.n)
        if any(a.name == "loop_net" for a in op.arg) and op.input[0] not in written:
            return ("While's condition '%s' is fed True and neither loop_net nor cond_net writes it: it "
                    "loops forever, as in Caffe2" % op.input[0])
    return None


def _all_outputs(net):
    """Blobs the net may write: its ops' outputs and those of the nets its ops carry as
    arguments (If/While run them in the same workspace, as Caffe2 does)."""
    out = set()
    for op in net.op:
        out.update(op.output)
        for arg in op.arg:
            for sub in ([arg.n] if arg.HasField("n") else []) + list(arg.nets):
                out |= _all_outputs(sub)
    return out


def _copy(value):
    return value.copy() if isinstance(value, np.ndarray) else value


def _same(a, b):
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype == object:
            return all(x is y or x == y for x, y in zip(a.reshape(-1), b.reshape(-1)))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return a is b


def _workspace_changes(before, after):
    """A description of how `after` differs from `before` (None when it does not)."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = [name for name, (ref, copy) in before.items()
               if name in after and (after[name] is not ref or not _same(copy, after[name]))]
    if not (added or removed or changed):
        return None
    return "added %s, removed %s, changed %s" % (added[:5], removed[:5], changed[:5])


def _rules_reject(net, feeds):
    """Replay the schema rules on the first op whose inputs were all fed: a text when
    they reject the case (it should not have run)."""
    from caffe2py import registry
    from caffe2py.errors import Caffe2Error
    from caffe2py.errors import describe_op
    from caffe2py.schema_rules import runtime_guard
    written = set()
    for index, op in enumerate(net.op):
        if not all(name in feeds and name not in written for name in op.input):
            written.update(op.output)
            continue
        written.update(op.output)
        schema = registry.schema_for(op.type)
        if schema is None:
            continue
        try:
            schema.verify(op, describe_op(index, op))
            guard = runtime_guard(schema, registry.OpContext(op, schema, index))
            if guard is not None:
                guard(*[feeds[name] for name in op.input])
        except Caffe2Error as exc:
            return "ran although the schema rejects it: %s" % exc
    return None
