"""Plan-time fusion of elementwise chains into one generated loop.

The executor (compile_net) hands its steps to `fuse_steps`; runs of adjacent
elementwise ops become one `FusedStep` whose kernel evaluates the whole chain per
element (kernels/cpu/math/fused_elementwise.py), reading each input once and
writing only the values someone can observe. Which ops qualify is not known here:
operator modules register a rule per op type (`register_rule`), saying what the op
computes per element, how its output shape follows from its inputs' and whether the
result is bitwise NumPy's ("exact") or only close (transcendental functions:
numba's exp/tanh/log differ from NumPy's SIMD versions by an ulp or so).

Which values a fused group keeps (writes out), version by version (a blob name
written twice is two values):
  - a value read by any op outside the group, or
  - the last value of a blob the run commits (every written blob in a workspace net,
    Caffe2's semantics: it can be fetched afterwards; only `keep` in a plan compiled
    with keep, as the ONNX backend's), or
  - any value of a blob named in the net's external_output.
Everything else (values overwritten later in the net, intermediates of a plan with
`keep`) lives only in registers. Nets with workspace ops (control flow, Python ops)
are not fused at all: those ops may read any blob.

At run time a group checks its inputs first (all ndarrays of one float dtype,
bool where a rule wants bool, shapes that broadcast by each op's own rule, every
intermediate of the output's shape, each member's schema guard passing, enough
elements to pay for the call); otherwise `try_fused` returns None and the plan runs
the member ops' own lines, which the executor renders after the group's call
(executor.Plan._render), so errors read the same, naming the op.

Reductions at the end of a chain (CPU and CUDA): a rule with `reduce` ("sum" or "mean" over
the input's last axis: ReduceSum/ReduceMean with axes [-1], ReduceBackSum/Mean with
num_reduce_dim 1) may be a group's last op; the loop accumulates each row while the
chain's values are in registers (kernels/cpu/math/fused_elementwise.py).

CUDA (caffe2py/fusion_cuda.py): runs of ops on one CUDA device whose rules have a
`cuda` form become one generated CUDA kernel, ended by a last-axis ReduceSum /
ReduceMean / ReduceBackSum / ReduceBackMean when one follows (one block per row); the
same planning, keeping and fallback rules apply. Groups never mix devices.

Switch: CAFFE2PY_FUSION=0 (off), 1 (default: exact ops only), all (exact and close
ops); a net argument `fusion` (0, 1, 2) overrides it for one net.
"""
import os
import sys
import threading

import numpy as np

from .registry import CPU, CUDA, normalize_domain

_RULES = {}      # (domain, op type) -> make(ctx) -> ElementwiseRule or None

MODES = {"0": 0, "off": 0, "false": 0, "1": 1, "on": 1, "exact": 1, "2": 2, "all": 2}

# Below this many output elements a group runs its ops unfused: the generated loop's
# set-up (~15 us of Python) costs more than NumPy's per-op overhead saves.
MIN_ELEMENTS = int(os.environ.get("CAFFE2PY_FUSION_MIN_ELEMENTS", 1 << 14))

# fused_runs / fallback_runs: group runs on the generated code / op by op (cuda_fused_runs: of
# fused_runs, those on a CUDA device);
# allocations / reuses: output buffers a fused run took new / from its group's pool
# At most this many ops in one group: numba's compile time grows with the loop body
# (a 10,000-op chain of Adds becomes groups of 32).
MAX_GROUP_OPS = 32

# device type -> the group kernel class of groups on that device (CPU: _GroupKernel).
# fusion_cuda.py adds CUDA's when the CUDA device loads (it subclasses this module's
# kernel, so this module cannot import it); until then no CUDA op joins a group.
GROUP_KERNELS = {}

stats = {"fused_runs": 0, "fallback_runs": 0, "allocations": 0, "reuses": 0, "cuda_fused_runs": 0}


class ElementwiseRule:
    """What one op computes per element.

    emit(args, out, lit) -> statement lines assigning the local `out` from the
        argument locals (`lit(v)` writes a float literal of the program's type);
    shape(in_shapes) -> (out_shape, view_shapes) or None when the op would reject
        (or treat specially) these shapes; view_shapes[i] is the shape input i is
        broadcast from (a legacy broadcast's B view);
    in_kinds: 'f' (the chain's float dtype) or 'b' (bool) per input; out_kind too;
    exact: True when the per-element result is bitwise NumPy's;
    accepts(dtype) -> whether the op computes this way for the chain's float dtype
        (Cast: only to that same dtype or to bool);
    cuda(args, out, lit) -> C statements assigning the float local `out` from float
        argument locals, mirroring the op's CUDA kernel operation by operation (so the
        fused kernel is bitwise the unfused CUDA op); None: not fused on CUDA;
    reduce: None, or "sum" / "mean": the op reduces its one input over the last axis
        (emit is unused; shape() gives the reduced shape); only a group's last op;
    n_out: the op's outputs (MulGradient's dA, dB: 2), all of shape() 's out_shape and
        of out_kind; emit (and cuda) then get a list of n_out output locals."""
    __slots__ = ("emit", "shape", "in_kinds", "out_kind", "exact", "accepts", "cuda", "reduce", "n_out")

    def __init__(self, emit, shape, in_kinds, out_kind="f", exact=True, accepts=None, cuda=None, reduce=None,
                 n_out=1):
        self.emit, self.shape, self.in_kinds = emit, shape, tuple(in_kinds)
        self.out_kind, self.exact, self.accepts = out_kind, exact, accepts
        self.cuda, self.reduce, self.n_out = cuda, reduce, n_out


def register_rule(op_type, domain=""):
    """Decorator: make(ctx) -> ElementwiseRule or None (not fusable with these args)."""
    def wrap(make):
        _RULES[(normalize_domain(domain), op_type)] = make
        return make
    return wrap


def fusion_mode(net_def):
    """0 off, 1 exact ops, 2 exact and close ops: the net's `fusion` arg, else the env."""
    for arg in net_def.arg:
        if arg.name == "fusion" and arg.HasField("i"):
            return max(0, min(2, int(arg.i)))
    text = os.environ.get("CAFFE2PY_FUSION", "1").strip().lower()
    return MODES.get(text, 1)


# --------------------------------------------------------------------------- planning

def step_device(step):
    """(device type, device id) an op runs on: groups never mix devices."""
    op = step.op_def
    if op.HasField("device_option") and op.device_option.device_type != CPU:
        return op.device_option.device_type, op.device_option.device_id
    return CPU, 0


def _rule_for(step, mode):
    op = step.op_def
    device = step_device(step)[0]
    if device != CPU and device not in GROUP_KERNELS:
        return None
    if step.engine not in ("", "DEFAULT") or step.takes_blobs or step.commits_outputs:
        return None
    if step.context is None or step.context.wants_workspace or step.optional:
        return None
    make = _RULES.get((normalize_domain(op.domain), op.type))
    if make is None:
        return None
    try:
        rule = make(step.context)
    except Exception:  # noqa: BLE001 - an argument the rule cannot read: leave the op alone
        return None
    if rule is None or len(rule.in_kinds) != len(step.inputs) or rule.n_out != len(step.outputs):
        return None
    if device == CUDA:
        # the cuda form mirrors the CUDA op's own kernel: exact by construction; a
        # reduction joins when the device's group kernel sums rows as the op does
        if rule.reduce is not None:
            return rule if getattr(GROUP_KERNELS[device], "fuses_reductions", False) else None
        return rule if rule.cuda is not None else None
    if not rule.exact and mode < 2:
        return None
    return rule


def fuse_steps(steps, net_def, keep, make_error):
    """The steps with runs of fusable ops replaced by FusedSteps. make_error(step,
    exc, inputs) builds the executor's error for a member op."""
    mode = fusion_mode(net_def)
    if mode == 0 or any(s.takes_blobs or (s.context is not None and s.context.wants_workspace) for s in steps):
        return steps, 0
    rules = [_rule_for(s, mode) for s in steps]
    external = set(net_def.external_output)
    events = _blob_events(steps)
    out, groups, i = [], 0, 0
    while i < len(steps):
        j = i
        while (j < len(steps) and rules[j] is not None and j - i < MAX_GROUP_OPS
               and step_device(steps[j]) == step_device(steps[i])):
            j += 1
            if rules[j - 1].reduce is not None:
                break           # a reduction ends its group
        if j - i >= 2:
            for part in _connected_parts(steps, i, j):
                kept = _kept_outputs(steps, part, j, keep, external, events) if len(part) >= 2 else ()
                if kept:
                    out.append(FusedStep([steps[k] for k in part], [rules[k] for k in part],
                                         kept, make_error))
                    groups += 1
                else:
                    out.extend(steps[k] for k in part)
            i = j
        else:
            out.extend(steps[i:max(j, i + 1)])
            i = max(j, i + 1)
    return out, groups


def _connected_parts(steps, start, end):
    """The window's ops split into chains/trees that share values, each in op order;
    one part (the whole window) when two parts touch a blob name in common, because
    running a part at the position of its last op must not reorder their reads and
    writes."""
    parent = list(range(start, end))

    def find(k):
        while parent[k - start] != k:
            parent[k - start] = parent[parent[k - start] - start]
            k = parent[k - start]
        return k
    writer = {}
    for k in range(start, end):
        for blob in steps[k].inputs:
            if blob in writer:
                parent[find(k) - start] = find(writer[blob])
        for blob in steps[k].outputs:
            writer[blob] = k
    parts = {}
    for k in range(start, end):
        parts.setdefault(find(k), []).append(k)
    parts = sorted(parts.values(), key=lambda p: p[-1])
    touched = {}
    for n, part in enumerate(parts):
        for k in part:
            for blob in steps[k].inputs + steps[k].outputs:
                if touched.setdefault(blob, n) != n:
                    return [list(range(start, end))]
    return parts


def _blob_events(steps):
    """blob -> [(position, is_write)] in op order, an op's reads before its writes."""
    events = {}
    for k, step in enumerate(steps):
        for blob in step.inputs:
            events.setdefault(blob, []).append((k, False))
        for blob in step.outputs:
            events.setdefault(blob, []).append((k, True))
    return events


def _kept_outputs(steps, part, window_end, keep, external, events):
    """The blob names whose last value in the part is written out (see the module doc).
    Only ops from window_end on can see the part's values: the window's other parts
    touch none of its blobs (_connected_parts)."""
    import bisect
    last_writer = {}
    for k in part:
        for blob in steps[k].outputs:
            last_writer[blob] = k
    kept = []
    for blob in last_writer:
        if blob in external:
            kept.append(blob)
            continue
        seen = events[blob]
        at = bisect.bisect_left(seen, (window_end, False))
        if at < len(seen):
            read_later, rewritten = not seen[at][1], seen[at][1]
        else:
            read_later = rewritten = False
        if read_later or (not rewritten and (keep is None or blob in keep)):
            kept.append(blob)
    return kept


# --------------------------------------------------------------------------- run time

class FusedStep:
    """A run of elementwise ops as one step: the executor treats it like any step
    (inputs, outputs, kernel); `members` are the original steps."""
    __slots__ = ("index", "op_def", "kernel", "inputs", "outputs", "engine", "context", "takes_blobs",
                 "optional", "guard", "commits_outputs", "members", "fused")

    def __init__(self, members, rules, kept, make_error):
        from .proto import caffe2_pb2
        self.members = members
        self.index = members[-1].index
        produced, ext = set(), []
        for m in members:
            for blob in m.inputs:
                if blob not in produced and blob not in ext:
                    ext.append(blob)
            produced.update(m.outputs)
        self.inputs = tuple(ext)
        self.outputs = tuple(kept)
        op = caffe2_pb2.OperatorDef(type="FusedElementwise", input=ext, output=kept,
                                    name="+".join(m.op_def.type for m in members))
        self.op_def = op
        self.engine, self.context, self.guard = "", None, None
        self.takes_blobs = self.commits_outputs = False
        self.optional = frozenset()
        kernel_class = GROUP_KERNELS.get(step_device(members[0])[0], _GroupKernel)
        self.kernel = kernel_class(members, rules, self.inputs, self.outputs, make_error)
        self.fused = self.kernel


class _GroupKernel:
    """Callable(*external inputs) -> the kept outputs: the generated loop when the
    inputs qualify, else the member kernels one by one."""

    def __init__(self, members, rules, inputs, outputs, make_error):
        self.members, self.rules = members, rules
        self.inputs, self.outputs = inputs, outputs
        self.make_error = make_error
        self.programs = {}        # dtype name -> FusedProgram
        self.pool = [None] * len(outputs)     # each output's buffer of the last run
        self.pool_lock = threading.Lock()
        self.broken = False       # the generated loop failed to build: always unfused
        # each member's arguments as ('in', position in inputs) or ('node', value): the
        # members' outputs are values 0, 1, ... in op order (member n's are member_values[n])
        where, self.sources = {b: ("in", i) for i, b in enumerate(inputs)}, []
        self.member_values, self.value_member = [], []
        for n, m in enumerate(members):
            self.sources.append([where[b] for b in m.inputs])
            values = []
            for blob in m.outputs:
                where[blob] = ("node", len(self.value_member))
                values.append(len(self.value_member))
                self.value_member.append(n)
            self.member_values.append(values)
        self.result_of = [where[b] for b in outputs]

    def out_locals(self, n):
        """Member n's output local(s) for its rule's emit: one name, or a list."""
        names = ["t%d" % v for v in self.member_values[n]]
        return names[0] if len(names) == 1 else names

    # ---------------------------------------------------------------- unfused path
    def unfused(self, values):
        env = dict(zip(self.inputs, values))
        for m in self.members:
            args = tuple(env[b] for b in m.inputs)
            try:
                if m.guard is not None:
                    m.guard(*args)
                result = m.kernel(*args)
            except Exception as exc:  # noqa: BLE001 - named as the unfused plan names it
                raise self.make_error(m, exc, list(args)) from exc
            if len(m.outputs) == 1:
                env[m.outputs[0]] = result
            else:
                env.update(zip(m.outputs, result))
        return tuple(env[b] for b in self.outputs)

    # ---------------------------------------------------------------- fused path
    FLOATS = (np.float32, np.float64)      # the chain dtypes the generated code takes
    min_elements = property(lambda self: MIN_ELEMENTS)   # read at run time: tests lower it

    def _value_ok(self, v):
        """Whether the generated code can read this input value at all."""
        return type(v) is np.ndarray

    def _plan_shapes(self, values):
        """(dtype, loop shape, node shapes, uses) or None: the loop runs over the
        chain's shape (a reduction's input shape); node_shapes[v] is value v's shape;
        uses lists (member, input position, view shape) per program input."""
        dtype = None
        for v, kinds in zip(values, self._input_kinds()):
            if not self._value_ok(v):
                return None
            if kinds == {"b"}:
                if v.dtype != np.bool_:
                    return None
            elif kinds == {"f"}:
                if v.dtype.type not in self.FLOATS or (dtype is not None and v.dtype != dtype):
                    return None
                dtype = v.dtype
            else:
                return None
        if dtype is None or any(r.accepts is not None and not r.accepts(dtype) for r in self.rules):
            return None
        node_shapes, uses, shape = [], [], None
        for n, (rule, sources) in enumerate(zip(self.rules, self.sources)):
            in_shapes = [values[i].shape if kind == "in" else node_shapes[i] for kind, i in sources]
            try:
                found = rule.shape(in_shapes)
            except Exception:  # noqa: BLE001 - the op's own path reports it
                return None
            if found is None:
                return None
            out_shape, views = found
            out_shape = tuple(out_shape)
            loop_shape = tuple(in_shapes[0]) if rule.reduce else out_shape
            if shape is None:
                shape = loop_shape
            elif loop_shape != shape:
                return None
            node_shapes.extend(out_shape for _ in self.member_values[n])
            for (kind, i), view in zip(sources, views):
                if kind == "in":
                    uses.append((n, i, tuple(view)))
        size = 1
        for d in shape:
            size *= d
        if size < self.min_elements or (size == 0 and self.rules[-1].reduce):
            return None     # an empty reduction: the op's own kernel says what it gives
        return dtype, shape, node_shapes, uses

    def _input_kinds(self):
        kinds = [set() for _ in self.inputs]
        for rule, sources in zip(self.rules, self.sources):
            for (kind, i), k in zip(sources, rule.in_kinds):
                if kind == "in":
                    kinds[i].add(k)
        return kinds

    def _guards_pass(self, values, dtype, node_shapes):
        for n, m in enumerate(self.members):
            if m.guard is None:
                continue
            args = []
            for kind, i in self.sources[n]:
                if kind == "in":
                    args.append(values[i])
                else:
                    out_kind = self.rules[self.value_member[i]].out_kind
                    args.append(np.broadcast_to(np.zeros((), dtype if out_kind == "f" else np.bool_),
                                                node_shapes[i]))
            try:
                m.guard(*args)
            except Exception:  # noqa: BLE001
                return False
        return True

    def _program(self, dtype, uses):
        from caffe2py.kernels.cpu.math.fused_elementwise import FusedProgram
        key = (dtype.name, tuple((n, i) for n, i, _ in uses))
        program = self.programs.get(key)
        if program is not None:
            return program
        names, kinds = {}, []
        for n, i, _ in uses:
            names[(n, i)] = "x%d" % len(kinds)
            kinds.append(self.rules[n].in_kinds[self.sources[n].index(("in", i))])
        body = []
        dt = dtype.type

        def lit(value):
            value = float(dt(value))
            if value != value:
                return "DT(np.nan)"
            if value in (float("inf"), float("-inf")):
                return "DT(%snp.inf)" % ("-" if value < 0 else "")
            return "DT(%r)" % value
        for n, (rule, sources) in enumerate(zip(self.rules, self.sources)):
            args = [names[(n, i)] if kind == "in" else "t%d" % i for kind, i in sources]
            body += rule.emit(args, self.out_locals(n), lit)
        rule_of = [self.rules[n] for n in self.value_member]
        outputs = [("t%d" % i, rule_of[i].reduce or rule_of[i].out_kind)
                   for _, i in self.result_of]   # always a member's value
        program = self.programs[key] = FusedProgram(dtype, kinds, body, outputs)
        return program

    def _buffers(self, shapes, dtypes):
        """The output arrays of this run: last run's buffer for each output when it has
        the shape and dtype and nobody else holds it any more (the pool's reference is
        the only one: not fetched, not committed, no view of it alive), else new ones.
        A warm run of a plan whose intermediates are dropped allocates nothing."""
        outs = []
        with self.pool_lock:           # take-or-allocate is atomic: two runs never share one
            for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
                buf = self.pool[k]
                # 3 references: the pool's list, `buf`, getrefcount's argument
                if buf is not None and buf.shape == shape and buf.dtype == dtype and sys.getrefcount(buf) == 3:
                    stats["reuses"] += 1
                else:
                    buf = self.pool[k] = np.empty(shape, dtype)
                    stats["allocations"] += 1
                outs.append(buf)
        return outs

    def try_fused(self, *values):
        """The kept outputs (a tuple) from the generated loop, or None when these
        inputs are not for it: the plan then runs the member ops' own lines."""
        if self.broken:
            return None
        # cheap first look: groups of small arrays are not worth the loop's set-up
        if max(getattr(v, "size", 0) for v in values) < self.min_elements:
            stats["fallback_runs"] += 1
            return None
        planned = self._plan_shapes(values)
        if planned is None or not self._guards_pass(values, planned[0], planned[2]):
            stats["fallback_runs"] += 1
            return None
        dtype, shape, node_shapes, uses = planned
        program = self._program(dtype, uses)
        if not program.available():
            stats["fallback_runs"] += 1
            return None
        arrays = [values[i] for _, i, _ in uses]
        views = [(1,) * (len(shape) - len(v)) + v for _, _, v in uses]
        out_shapes = [node_shapes[i] for _, i in self.result_of]
        try:
            results = program.run(arrays, views, shape, self._buffers(out_shapes, program.output_dtypes()))
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - the loop would not build: never try again
            self.broken = True
            stats["fallback_runs"] += 1
            return None
        stats["fused_runs"] += 1
        return tuple(results)

    def __call__(self, *values):
        """As a plain step kernel: the loop, else the member ops one by one."""
        results = self.try_fused(*values)
        if results is None:
            results = self.unfused(values)
        return results[0] if len(results) == 1 else results
