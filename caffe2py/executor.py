"""Compile a NetDef once into a plan; run the plan many times.

Compilation does every name lookup, schema check and kernel choice up front and
renders the net as one Python function in which each blob is a local variable
and each op is one line calling its kernel:

    v2 = k0(v0, v1)
    v3, v4 = k1(v2)

so running costs one call per op and nothing else. The function reads the
blobs it needs from the workspace at the start and writes the net's outputs
back only at the end: a net that fails part-way leaves the workspace exactly as
it was. The line an exception comes from tells which op failed.

A workspace net commits every blob it writes (Caffe2's semantics: any blob can
be fetched afterwards). A plan compiled with `keep` (the ONNX backend's, which
returns only the graph outputs) commits only those and drops each other blob
right after the op that uses it last (`del v3`), so the memory is reused by the
next ops while it is still in cache.
"""
import contextlib
import time

from .blob_scopes import BlobOverlay
from .devices import cpu_run_context
from .errors import Caffe2Error, OperatorError, describe_op, out_of_memory_text
from .fusion import fuse_steps
from .host_memory import keep_freed_memory
from .inplace import extra_holders, holders_added_by, undo_on_failure
from .kernels.cpu.runtime.output_pool import NO_POOL, OutputPool, pooling_enabled
from .net_defs import normalized_ops
from .parallel_executor import branch_schedule, inside_parallel_run
from . import fp_exceptions, model_trust, model_trust_ops
from .proto import caffe2_pb2
from .registry import OpContext, select_kernel
from .schema_rules import runtime_guard

NET_TYPES = {"", "simple", "dag", "async_scheduling", "async_simple", "prof_dag",
             "async_dag", "async_polling", "singlethread_async", "rnn", "parallel"}

_plan_counter = [0]


class Step:
    """One compiled op: its def, kernel callable and blob names. `inputs` are the
    blobs the kernel receives; with reads_outputs they end with the op's outputs,
    whose current values may be absent (`optional`: passed as None)."""
    __slots__ = ("index", "op_def", "kernel", "inputs", "outputs", "engine", "context", "takes_blobs", "optional",
                 "guard", "commits_outputs")

    def __init__(self, index, op_def, kernel, engine, context, reads_outputs=False, guard=None):
        self.index = index
        # the schema's per-call rules (schema_rules.runtime_guard), run before the kernel
        self.guard = guard
        self.op_def = op_def
        self.kernel = kernel
        self.outputs = tuple(op_def.output)
        self.inputs = tuple(op_def.input) + (self.outputs if reads_outputs else ())
        self.optional = frozenset(self.outputs) - set(op_def.input) if reads_outputs else frozenset()
        self.engine = engine
        self.context = context
        # registry.takes_blobs kernels get the run's blob dict first (ops such as
        # Load(load_all) that touch blobs they do not name as outputs)
        self.takes_blobs = bool(getattr(kernel, "takes_blobs", False))
        # registry.commits_outputs kernels write their outputs into the workspace themselves
        self.commits_outputs = bool(getattr(kernel, "commits_outputs", False))


def memory_problem(exc):
    """The named text for an exception that means "more memory than there is" (a
    MemoryError, one NumPy raised inside a compiled call, or NumPy's refusal of a size no
    address space holds), else None. Used at plan time and at run time alike."""
    if isinstance(exc, MemoryError):
        return out_of_memory_text(exc)
    if isinstance(exc, SystemError) and isinstance(exc.__cause__ or exc.__context__, MemoryError):
        return out_of_memory_text(exc.__cause__ or exc.__context__)
    if isinstance(exc, ValueError) and ("array is too big" in str(exc) or "Maximum allowed size" in str(exc)):
        return ("asks for an array larger than any memory can hold (check the input sizes and the shape "
                "arguments)")
    return None


def foreign_input_problem(op_def, inputs, exc):
    """Why an op failed with a bare exception, when an input is not what any tensor op
    can read: Caffe2 refuses a blob that is not a tensor (a queue, a counter, a DB
    reader, None) or that holds strings where the op computes on numbers. Only when
    the exception itself points at that input (its type or text in the message): on
    the error path only, so runs pay nothing."""
    import numpy as np
    text = str(exc)
    for i, x in enumerate(inputs):
        if i >= len(op_def.input):
            break
        kind = type(x).__name__
        if not isinstance(x, (np.ndarray, np.generic)) and getattr(x, "dtype", None) is None:
            if "'%s'" % kind in text or kind in text.split():
                return ("blob '%s' (input %d) holds %s, not a tensor; %s reads it as a tensor"
                        % (op_def.input[i], i, "a %s object" % kind if x is not None else "None (an empty blob)", op_def.type))
        elif getattr(getattr(x, "dtype", None), "kind", "") in "OSU" and isinstance(exc, (TypeError, ValueError)) \
                and any(w in text for w in ("str", "literal", "string", "bytes", "sequence", "object", "dtype('O')")):
            return ("blob '%s' (input %d) holds strings (dtype %s); %s computes on numbers"
                    % (op_def.input[i], i, x.dtype, op_def.type))
    return None


def _printable(text):
    if isinstance(text, bytes):      # a name protobuf could not read as UTF-8
        text = text.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _check_text_fields(label, op):
    """protobuf hands a proto2 string field that is not UTF-8 over as bytes (a damaged
    file); every name the executor compares or splits must be text."""
    for field in ("type", "engine", "name"):
        if isinstance(getattr(op, field), bytes):
            raise Caffe2Error("%s: its %s %r is not UTF-8 text (a damaged net file?)"
                              % (_printable(label), field, getattr(op, field)[:40]))
    for kind in ("input", "output"):
        bad = next((b for b in getattr(op, kind) if isinstance(b, bytes)), None)
        if bad is not None:
            raise Caffe2Error("%s: an %s blob name %r is not UTF-8 text (a damaged net file?)"
                              % (_printable(label), kind, bad[:40]))


def check_net(net_def, known_blobs):
    """Caffe2's NetBase checks plus 'every input exists' (op construction's check)."""
    name = net_def.name or "<unnamed>"
    if net_def.type not in NET_TYPES:
        raise Caffe2Error("net '%s': unknown net type '%s' (known: %s)"
                          % (name, net_def.type, ", ".join(sorted(t for t in NET_TYPES if t))))
    declared = set(net_def.external_input)
    available = set(known_blobs) | declared
    produced = set()
    for index, op in enumerate(net_def.op):
        label = describe_op(index, op)
        _check_text_fields(label, op)
        if op.device_option.node_name:
            raise Caffe2Error("%s: node_name '%s' must be empty when the net is executed"
                              % (label, op.device_option.node_name))
        for blob in op.input:
            if declared and blob not in declared and blob not in produced:
                raise Caffe2Error("%s: source for input '%s' is unknown for net '%s' "
                                  "(not an external input and not produced by an earlier op)"
                                  % (label, blob, name))
            if blob not in available and blob not in produced:
                raise Caffe2Error("%s: encountered a non-existing input blob: '%s'" % (label, blob))
        produced.update(op.output)
    missing = [b for b in net_def.external_output if b not in produced and b not in available]
    if missing:
        raise Caffe2Error("net '%s': some of the blobs are declared as output but never produced "
                          "by the net; the first one is '%s'" % (name, missing[0]))


def _wants_workspace(step):
    """Whether the kernel is called with the run's blob view first: its factory
    called ctx.use_workspace(), or the callable is marked registry.takes_blobs."""
    return step.takes_blobs or (step.context is not None and step.context.wants_workspace)


def step_error(step, exc, inputs=None):
    """The OperatorError naming `step` for an exception its kernel (or guard) raised."""
    if isinstance(exc, OperatorError) and getattr(step, "members", None) is not None:
        return exc      # a fused group's member op failed: already named by that op
    label = describe_op(step.index, step.op_def)
    memory = memory_problem(exc)
    if memory:
        exc = Caffe2Error(memory)
    elif inputs and not isinstance(exc, Caffe2Error):
        problem = foreign_input_problem(step.op_def, inputs, exc)
        if problem:
            exc = Caffe2Error(problem)
    text = str(exc)
    if not text.startswith(label):
        text = "%s failed: %s%s" % (label, "" if isinstance(exc, Caffe2Error) else type(exc).__name__ + ": ", text)
    return OperatorError(text, step.index, step.op_def.type, step.op_def.name, exc)


class Plan:
    """A compiled net: steps plus the generated fast runner."""

    def __init__(self, net_def, steps, keep=None, policy=None, fused_groups=0):
        self.net_def = net_def
        self.name = net_def.name
        self.steps = steps
        # how many runs of elementwise ops became one generated loop (caffe2py/fusion.py)
        self.fused_groups = fused_groups
        # the model-trust policy of a net from a model file (None: trusted); each run
        # sets it again, for the paths ops only know when they run (model_trust.py)
        self.policy = policy
        # None: every blob the net writes goes to the workspace (Caffe2's semantics);
        # else only these, and every other blob is dropped after its last use.
        self.keep = None if keep is None else frozenset(keep)
        self.reads = []      # blobs read from the workspace before they are written
        self.writes = []     # the blobs the run commits to the workspace at its end
        self._line_to_step = {}
        self._fast_lines = set()     # lines calling a kernel's fast form (registry.fast_form)
        self._input_locals = {}      # id(step) -> the locals holding its inputs (for error text)
        self._load_line_to_blob = {}
        self._runner = self._render()
        # A plan that drops its intermediates takes its kernels' outputs from its own
        # pool, active once per run: a warm run reuses the buffers the previous one
        # left (kernels/cpu/runtime/output_pool.py). A workspace net commits every
        # blob it writes, so pooling would only add a second copy: plain arrays.
        self.output_pool = (OutputPool() if self.keep is not None and not self.uses_workspace and pooling_enabled()
                            else None)
        self._memory = self.output_pool or NO_POOL
        # DAG net types: the chains that may run on worker threads (parallel_executor.py)
        self.branches = None
        # warm runs as their recorded kernel calls, once the owner enables it (kernel_replay.py)
        self.replay = None

    def _render(self):
        slots = {}           # blob -> the local variable holding its current value
        loads, body = [], []
        dirty = []           # blobs whose local value the workspace view has not seen yet
        last_use = {}
        counter = [0]
        self.uses_workspace = any(_wants_workspace(s) for s in self.steps)
        # A fused group (fusion.py) renders as its generated loop's call and, when that
        # declines the inputs (None), its member ops' own lines: the unfused code, with
        # the same error lines. Fusion never runs in plans with workspace ops.
        sequence = []        # (step, indent, role): role "step", "group" or "member"
        for step in self.steps:
            members = getattr(step, "members", None)
            if members:
                sequence.append((step, "", "group"))
                sequence.extend((m, "    ", "member") for m in members)
            else:
                sequence.append((step, "", "step"))

        constants = {}           # id -> (name, value) of the values inlined guards compare with

        def constant(value):
            if id(value) not in constants:
                constants[id(value)] = ("c%d" % len(constants), value)
            return constants[id(value)][0]

        def new_local(blob):
            slots[blob] = "v%d" % counter[0]
            counter[0] += 1
            return slots[blob]

        for position, (step, _, _) in enumerate(sequence):
            for blob in step.inputs + step.outputs:
                last_use[blob] = position

        # Keys of the inlined checks (schema_rules.fast_path) that every path to the
        # line being rendered has passed. A local is assigned once, so a check a local
        # has passed needs no second look: "one" read by every op of a chain is tested
        # by the first. Lines inside a fused group's fallback block are one path of
        # two: what they establish is forgotten where the block ends.
        established = [set()]
        passed_keys = [[]]   # the keys the current step's guard establishes
        block_scopes = {}    # group index -> what was established before its block

        def guard_line(step, names):
            call = "g%d(%s)" % (step.index, ", ".join(names))
            fast = getattr(step.guard, "fast_terms", None)
            if fast is None:
                return call
            terms = fast(names, constant)
            passed_keys[0] = [key for key, _ in terms if key is not None]
            left = [text for key, text in terms if key is None or key not in established[0]]
            established[0].update(key for key, _ in terms if key is not None)
            if not left:        # every check already passed on these very values
                return None
            return "if not (%s): %s" % (" and ".join("(%s)" % t for t in left), call)

        seen_workspace_op = False
        written = set()
        group_end = {}       # position of a group's last member -> (group, its position)
        for position, (step, indent, role) in enumerate(sequence):
            args = []
            for blob in step.inputs:
                if blob not in slots:
                    local = new_local(blob)
                    optional = blob in step.optional    # an output's current value, or None
                    if blob not in written and blob not in self.reads and not optional:
                        self.reads.append(blob)
                    read = "B.get(%r)" % blob if optional else "B[%r]" % blob
                    # a missing blob is named as its first reading op names it
                    reader = step if role != "group" else next(m for m in step.members if blob in m.inputs)
                    if not seen_workspace_op:
                        loads.append((local, read, blob, reader))
                    else:   # a workspace op may have changed it: read it where it is used
                        body.append(("%s = %s" % (local, read), ("load", blob, reader)))
                args.append(slots[blob])
            if role == "group":
                body.append(("r%d = f%d(%s)" % (step.index, step.index, ", ".join(args)), ("step", step)))
                body.append(("if r%d is None:" % step.index, ("step", step)))
                block_scopes[step.index] = set(established[0])
                group_end[position + len(step.members)] = (step, position, dict(zip(step.inputs, args)))
                continue
            self._input_locals[id(step)] = list(args[:len(step.op_def.input)])
            passed_keys[0] = []
            if step.guard is not None:
                # the rules inlined: valid inputs cost a few comparisons and no call
                call_guard = guard_line(step, args[:len(step.op_def.input)])
                if call_guard is not None:
                    body.append((indent + call_guard, ("step", step)))
            wants_workspace = _wants_workspace(step)
            if wants_workspace:
                # The op sees the workspace view: hand it every value written so far,
                # and afterwards read everything again from the view.
                for blob in dirty:
                    body.append(("B[%r] = %s" % (blob, slots[blob]), ("step", step)))
                dirty = []
                args.insert(0, "B")
                seen_workspace_op = True
            call = "k%d(%s)" % (step.index, ", ".join(args))
            if wants_workspace:
                slots.clear()
            outs = [new_local(blob) for blob in step.outputs]
            for blob in step.outputs:
                written.add(blob)
                if blob in dirty:
                    dirty.remove(blob)
                if not step.commits_outputs:
                    dirty.append(blob)
            assign = "%s = " % ", ".join(outs) if outs else ""
            if getattr(step.kernel, "fast_form", None) is not None and not wants_workspace:
                # the kernel's fast form (registry.fast_form); the kernel itself only
                # when that raises, so that the error is the kernel's
                body.append((indent + "try:", ("step", step)))
                body.append((indent + "    %su%d(%s)" % (assign, step.index, ", ".join(args)), ("fast", step)))
                body.append((indent + "except Exception:", ("step", step)))
                body.append((indent + "    " + assign + call, ("step", step)))
            else:
                body.append((indent + assign + call, ("step", step)))
            if getattr(step.kernel, "keeps_dtypes", False):
                # inputs that passed one dtype rule give outputs that pass it too
                families = {key[1] for key in passed_keys[0] if key[0] == "dtype in"}
                checked = {key[2] for key in passed_keys[0] if key[0] == "dtype in"}
                if len(families) == 1 and checked >= set(args[:len(step.op_def.input)]):
                    established[0].update(("dtype in", families.pop(), out) for out in outs)
            drop = self.keep is not None and not self.uses_workspace
            if drop:
                # Dropping a blob right after its last use hands its memory back while
                # it is still in cache: the next op's output reuses it.
                done = sorted({slots[b] for b in step.inputs + step.outputs
                               if last_use[b] == position and b not in self.keep})
                if done:
                    body.append((indent + "del " + ", ".join(done), ("step", step)))
            if position in group_end:
                group, start, input_locals = group_end.pop(position)
                kept = [slots[b] for b in group.outputs]
                body.append(("else:", ("step", group)))
                body.append(("    %s, = r%d" % (", ".join(kept), group.index), ("step", group)))
                if drop:    # the group's inputs whose last reader was one of its ops
                    done = sorted({input_locals[b] for b in group.inputs
                                   if start < last_use[b] <= position and b not in self.keep})
                    if done:
                        body.append(("    del " + ", ".join(done), ("step", group)))
                body.append(("del r%d" % group.index, ("step", group)))
                established[0] = block_scopes.pop(group.index)
        if self.keep is not None and not self.uses_workspace:
            dirty = [b for b in dirty if b in self.keep]
        self.writes = list(dirty)
        lines = ["def make(K, C):"]
        lines += ["    %s = C[%r]" % (name, name) for name, _ in constants.values()]
        kernels = [s for s, _, _ in sequence]
        lines += ["    %s%d = K[%d].%s" % (("f", s.index, i, "kernel.try_fused") if role == "group" else
                                          ("k", s.index, i, "kernel"))
                  for i, (s, _, role) in enumerate(sequence)]
        lines += ["    g%d = K[%d].guard" % (s.index, i) for i, (s, _, role) in enumerate(sequence)
                  if role != "group" and s.guard is not None]
        lines += ["    u%d = K[%d].kernel.fast_form" % (s.index, i) for i, (s, _, role) in enumerate(sequence)
                  if role != "group" and getattr(s.kernel, "fast_form", None) is not None]
        lines.append("    def run(B):")
        for local, read, blob, reader in loads:
            self._load_line_to_blob[len(lines) + 1] = (blob, reader)
            lines.append("        %s = %s" % (local, read))
        for text, (kind, *where) in body:
            if kind == "load":
                self._load_line_to_blob[len(lines) + 1] = tuple(where)
            else:
                self._line_to_step[len(lines) + 1] = where[0]
                if kind == "fast":
                    self._fast_lines.add(len(lines) + 1)
            lines.append("        " + text)
        for blob in dirty:
            lines.append("        B[%r] = %s" % (blob, slots[blob]))
        lines.append("        pass  # an empty net still needs a body")
        lines.append("    return run")
        _plan_counter[0] += 1
        # the name is data (any bytes a NetDef holds); compile() refuses a NUL in it
        self._filename = "<caffe2py plan %d: %s>" % (_plan_counter[0], _printable(self.name))
        # kept for reading: what the plan runs (tests, docs/architecture.md's examples)
        self.source = "\n".join(lines) + "\n"
        namespace = {}
        exec(compile(self.source, self._filename, "exec"), namespace)
        # what timed_runner renders again, with every kernel call timed
        self._make = namespace["make"]
        self._made_from = [(s, role) for s, _, role in sequence], {name: value for name, value in constants.values()}
        return self._make(kernels, self._made_from[1])

    def timed_runner(self, record):
        """The generated run function with every kernel call timed: after each call
        record(step, seconds) names the step (a fused group's generated loop is its
        group step; when the loop declines, its member ops are timed one by one). The
        same code a plain run executes, with the plan's output pool and its guards: op
        times as they are inside real runs (benchmark.per_op_timing). Run it with
        run_serial(blobs, runner)."""
        return self.wrapped_runner(_Timer(record))

    def run(self, blobs):
        """Run once against the mapping of blobs; on failure raise OperatorError and
        leave blobs untouched. A plan with workspace ops (control flow) runs on an
        overlay of blobs that is applied only when the whole run succeeded. A DAG
        net's plan runs its branches on worker threads once its first run has shown
        that they pay (parallel_executor.py). A plan with replay enabled runs its warm
        runs as their recorded kernel calls (kernel_replay.py)."""
        replay = self.replay
        if replay is not None and replay.run(blobs):
            return
        branches = self.branches
        if branches is not None and branches.active and not inside_parallel_run():
            branches.run(blobs)
            return
        self.run_serial(blobs)
        if branches is not None and branches.active is None:
            branches.decide(blobs)

    def run_serial(self, blobs, runner=None):
        """run(), every op in order on this thread (a DAG plan's serial runs); runner:
        timed_runner's or wrapped_runner's function instead of the plain one."""
        target = BlobOverlay(blobs) if self.uses_workspace else blobs
        try:
            with self.run_context():
                (runner or self._runner)(target)
        except Exception as exc:  # noqa: BLE001 - re-raised with the op named
            raise self._explain(exc) from exc
        if target is not blobs:
            target.commit(self.keep)

    @contextlib.contextmanager
    def run_context(self):
        """What every run of this plan's ops is inside: the model-trust policy, the CPU
        thread team, the undo log, the floating-point flag, the output pool."""
        trust = model_trust.enter(self.policy) if self.policy is not None else None
        try:
            with cpu_run_context(), undo_on_failure(), fp_exceptions.run_context(), self._memory:
                yield
        finally:
            if trust is not None:
                model_trust.leave(trust)

    def enable_replay(self, varying):
        """Let warm runs replay their recorded kernel calls (kernel_replay.py): for the
        owner of a plan that drops its intermediates (output pool), runs no workspace
        ops nor branches, and passes every blob it reads but `varying` as the same
        object each run. Returns the KernelReplay, or None where it does not apply."""
        from .kernel_replay import KernelReplay, replay_enabled
        if self.output_pool is None or self.uses_workspace or self.branches is not None or not replay_enabled():
            return None
        self.replay = KernelReplay(self, varying)
        return self.replay

    def wrapped_runner(self, tracer):
        """The generated run function with every kernel call (and fast form, and fused
        group loop) wrapped: tracer.before(step, role, args) before it, then
        tracer.after(step, role, args, result), or tracer.failed(step) when it raised (role:
        "step", "member" or "group"; a group's loop returns None when it declines and
        its members run next). Run it with run_serial(blobs, runner)."""
        steps, constants = self._made_from
        wrapped = self._make([_WrappedStep(step, role, tracer) for step, role in steps], constants)
        extra = holders_added_by(lambda kernel: _WrappedCall(kernel, None, None, _NO_TRACER))

        def run(blobs):
            with extra_holders(extra):      # what _WrappedCall's call adds to every input's holders
                wrapped(blobs)
        return run

    def repeatable_runner(self):
        """The generated function itself, for a caller that runs this plan many times in a
        row (RecurrentNetwork's timesteps) inside one `repeated_runs()` context, so that
        each run costs the one call: run it as `runner(blobs)` and turn what it raises into
        the named error with `explain`. None when a run needs more than that call (a plan
        with workspace ops runs on an overlay; a model file's plan sets its trust policy;
        a DAG net's plan may run its branches on worker threads)."""
        if self.uses_workspace or self.policy is not None or self.branches is not None:
            return None
        return self._runner

    def explain(self, exc):
        """The OperatorError naming the op (or the missing input) an exception raised by
        `repeatable_runner()`'s function comes from."""
        error = self._explain(exc)
        if error is not exc:
            error.__cause__ = exc
        return error

    def _explain(self, exc):
        tb = exc.__traceback__
        line, frame = None, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self._filename:
                line, frame = tb.tb_lineno, tb.tb_frame
            tb = tb.tb_next
        if line in self._load_line_to_blob:
            blob, reader = self._load_line_to_blob[line]
            return self.step_error(reader, Caffe2Error("input blob '%s' does not exist in the workspace" % blob))
        step = self._line_to_step.get(line)
        if step is None:
            return exc if isinstance(exc, Caffe2Error) else Caffe2Error("net '%s' failed: %s" % (self.name, exc))
        self._forget_fast_form_failure(exc)
        values = frame.f_locals if frame is not None else {}
        return self.step_error(step, exc, [values.get(name) for name in self._input_locals.get(id(step), ())])

    def _forget_fast_form_failure(self, exc):
        """A kernel called because its fast form raised fails inside that exception's
        handler: drop the fast form's exception from the chain, so that the traceback
        shows the kernel's error alone, as an unspecialised plan's would."""
        seen = set()
        while exc.__context__ is not None and id(exc) not in seen:
            seen.add(id(exc))
            tb = exc.__context__.__traceback__
            if tb is not None and tb.tb_frame.f_code.co_filename == self._filename \
                    and tb.tb_lineno in self._fast_lines:
                exc.__context__ = None
                return
            exc = exc.__context__

    def step_error(self, step, exc, inputs=None):
        return step_error(step, exc, inputs)

    def run_step(self, step, env, blobs):
        """Run one step reading from env (this run's writes) then blobs; used by the
        instrumented paths (observers, per-op benchmark). A workspace op gets env
        itself when it is a BlobOverlay of blobs (as run_observed passes it)."""
        try:
            # a tuple, passed on as is: one holder per input, as in the generated runner
            # (inplace.claim counts the holders of a table it may update in place)
            args = tuple(env[b] if b in env else blobs.get(b) if b in step.optional else blobs[b]
                         for b in step.inputs)
        except KeyError as exc:
            raise self.step_error(step, Caffe2Error("input blob '%s' does not exist in the workspace"
                                                    % exc.args[0])) from None
        if step.guard is not None:
            try:
                step.guard(*args[:len(step.op_def.input)])
            except Exception as exc:  # noqa: BLE001
                raise self.step_error(step, exc) from exc
        if _wants_workspace(step):      # takes_blobs kernels too: the view, once
            args = (env if isinstance(env, BlobOverlay) else BlobOverlay(blobs, env),) + args
        trust = model_trust.enter(self.policy) if self.policy is not None else None
        try:
            result = step.kernel(*args)     # the one tuple: no second holder of any input
        except Exception as exc:  # noqa: BLE001
            raise self.step_error(step, exc, args[-len(step.inputs):][:len(step.op_def.input)]
                                  if step.inputs else None) from exc
        finally:
            if trust is not None:
                model_trust.leave(trust)
        n = len(step.outputs)
        if step.commits_outputs:
            # already in the workspace: later reads fall through to it
            for blob in step.outputs:
                if isinstance(env, BlobOverlay):
                    env.writes.pop(blob, None)
        elif n == 1:
            env[step.outputs[0]] = result
        elif n > 1:
            for blob, value in zip(step.outputs, result):
                env[blob] = value

    def op_steps(self):
        """One step per op of the net: fused groups (fusion.py) opened into their
        member ops, for the paths that observe or time ops one by one."""
        return [m for s in self.steps for m in (getattr(s, "members", None) or (s,))]

    def run_observed(self, blobs, observers):
        """Slow path with per-op hooks: observer.op_start(step) / op_stop(step), one
        call each per op of the net (fused groups run op by op here)."""
        env = BlobOverlay(blobs)
        for obs in observers:
            obs.net_start(self)
        with cpu_run_context(), undo_on_failure():   # as run() does, so op times match plain runs
            for step in self.op_steps():
                for obs in observers:
                    obs.op_start(step)
                self.run_step(step, env, blobs)
                for obs in observers:
                    obs.op_stop(step)
        env.commit()
        for obs in observers:
            obs.net_stop(self)


class _Timer:
    """timed_runner's tracer: record(step, seconds) after each wrapped call, raised or not."""
    __slots__ = ("record", "starts")

    def __init__(self, record):
        self.record, self.starts = record, []

    def before(self, step, role, args):
        self.starts.append(time.perf_counter())

    def after(self, step, role, args, result):
        self.record(step, time.perf_counter() - self.starts.pop())

    def failed(self, step):
        self.record(step, time.perf_counter() - self.starts.pop())


class _WrappedCall:
    """A kernel (or fast form, or group loop) whose calls a tracer sees (wrapped_runner)."""
    __slots__ = ("fn", "step", "role", "tracer", "fast_form", "try_fused")

    def __init__(self, fn, step, role, tracer):
        self.fn, self.step, self.role, self.tracer = fn, step, role, tracer

    def __call__(self, *args):
        self.tracer.before(self.step, self.role, args)
        try:
            result = self.fn(*args)
        except BaseException:
            self.tracer.failed(self.step)
            raise
        self.tracer.after(self.step, self.role, args, result)
        return result


class _NoTracer:
    def before(self, step, role, args):
        pass

    def after(self, step, role, args, result):
        pass

    def failed(self, step):
        pass


_NO_TRACER = _NoTracer()


class _WrappedStep:
    """What the generated make(K, C) reads of a step, with the calls wrapped."""

    def __init__(self, step, role, tracer):
        self.guard = step.guard
        self.kernel = _WrappedCall(step.kernel, step, role, tracer)
        if role == "group":
            self.kernel.try_fused = _WrappedCall(step.kernel.try_fused, step, role, tracer)
        elif getattr(step.kernel, "fast_form", None) is not None:
            self.kernel.fast_form = _WrappedCall(step.kernel.fast_form, step, role, tracer)


@contextlib.contextmanager
def repeated_runs():
    """What `Plan.run` wraps each run in, entered once around many runs of
    repeatable runners: the CPU thread team, the undo log of in-place writes (a failure
    undoes every run's writes inside it, as the failing op's enclosing net run would),
    the floating-point exception flag; no output pool (the runs commit every blob)."""
    with cpu_run_context(), undo_on_failure(), fp_exceptions.run_context(), NO_POOL:
        yield


class PlacementTracker:
    """Where each blob lives while walking the net in order: workspace values where
    they are, op outputs on the op's device (or the schema's outputs_device). An op
    reading a blob from another device is an error unless its schema says that its
    inputs may cross devices (the copy ops): no silent per-op round trips."""

    def __init__(self, blob_values):
        from .devices import placement_of
        self.where = {}
        for name, value in (blob_values or {}).items():
            place = placement_of(value)
            if place is not None:
                self.where[name] = place

    def check_and_record(self, op, schema, label):
        from .devices import placement_text
        from .registry import CPU
        device = op.device_option.device_type if op.HasField("device_option") else CPU
        here = (device, op.device_option.device_id if device != CPU else 0)
        if schema is None or not schema.inputs_can_cross_devices:
            for blob in op.input:
                there = self.where.get(blob)
                if there is not None and there != here:
                    raise Caffe2Error(
                        "%s: input '%s' is on %s but the op runs on %s; copy it explicitly "
                        "(CopyCPUToGPU / CopyGPUToCPU) or feed it with the op's device_option"
                        % (label, blob, placement_text(there), placement_text(here)))
        out_device = schema.outputs_device if schema is not None and schema.outputs_device is not None else device
        out = (out_device, op.device_option.device_id if out_device != CPU else 0)
        for blob in op.output:
            self.where[blob] = out


def compile_net(net_def, known_blobs=(), input_types=None, blob_values=None, keep=None):
    """NetDef -> Plan. known_blobs: names already in the workspace (a dict keys view
    of the blobs also gives their values, for the device placement check).
    input_types: optional {blob: TensorType} from shape inference, handed to kernels.
    blob_values: optional {blob: value} for the device placement check.
    keep: None (every blob the net writes is committed to the workspace, as Caffe2
    does) or the names of the only blobs a run commits; the others are intermediate
    and are released right after their last use."""
    check_net(net_def, known_blobs)
    policy = model_trust.net_policy(net_def)
    if policy is None:
        return _compile(net_def, known_blobs, input_types, blob_values, keep)
    # a net from a model file: every op is checked before any is built (factories may
    # open files or unpickle), and subnets built by factories follow the same policy
    model_trust_ops.check_net(net_def, policy)
    with model_trust.applying(policy):
        return _compile(net_def, known_blobs, input_types, blob_values, keep, policy)


def _compile(net_def, known_blobs, input_types, blob_values, keep, policy=None):
    keep_freed_memory()     # once per process: runs reuse heap memory instead of faulting it in
    if blob_values is None:
        blob_values = getattr(known_blobs, "mapping", None)  # dict_keys -> its dict
    placement = PlacementTracker(blob_values)
    steps = []
    for index, op in enumerate(normalized_ops(net_def)):
        entry, engine, schema = select_kernel(op, index)
        if schema is not None:
            schema.verify(op, describe_op(index, op))
        placement.check_and_record(op, schema, describe_op(index, op))
        types = None
        if input_types is not None:
            types = [input_types.get(b) for b in op.input]
        ctx = OpContext(op, schema, index, types)
        try:
            kernel = entry.factory(ctx)
        except Caffe2Error:
            raise
        except Exception as exc:  # noqa: BLE001 - factories validate args
            memory = memory_problem(exc)
            if memory:
                raise Caffe2Error("%s: %s" % (ctx.label, memory)) from None
            raise Caffe2Error("%s: %s: %s" % (ctx.label, type(exc).__name__, exc)) from exc
        steps.append(Step(index, op, kernel, engine, ctx,
                          reads_outputs=schema is not None and schema.reads_outputs,
                          guard=runtime_guard(schema, ctx)))
    steps, fused_groups = fuse_steps(steps, net_def, keep, step_error)
    plan = Plan(net_def, steps, keep, policy, fused_groups)
    # a chain of a parallel run commits everything it writes to the run's overlay
    plan.branches = branch_schedule(plan, lambda chain: Plan(net_def, chain, None, policy), blob_values)
    return plan


# --------------------------------------------------------------------------- observers

class NetObserver:
    """Hooks around a net run and each op in it. Subclass and override."""

    def net_start(self, plan):
        pass

    def net_stop(self, plan):
        pass

    def op_start(self, step):
        pass

    def op_stop(self, step):
        pass


class TimeObserver(NetObserver):
    """Caffe2's TimeObserver: average ms per run and per op."""

    def __init__(self):
        self.runs = 0
        self.total_ms = 0.0
        self.op_ms = {}
        self._t_net = 0.0
        self._t_op = 0.0

    def net_start(self, plan):
        self._t_net = time.perf_counter()

    def net_stop(self, plan):
        self.total_ms += (time.perf_counter() - self._t_net) * 1e3
        self.runs += 1

    def op_start(self, step):
        self._t_op = time.perf_counter()

    def op_stop(self, step):
        self.op_ms[step.index] = self.op_ms.get(step.index, 0.0) + (time.perf_counter() - self._t_op) * 1e3

    def average_time(self):
        return self.total_ms / self.runs if self.runs else 0.0

    def average_time_children(self):
        if not self.runs or not self.op_ms:
            return 0.0
        return sum(self.op_ms.values()) / len(self.op_ms) / self.runs


OBSERVERS = {"TimeObserver": TimeObserver}


class Net:
    """A net instantiated in a workspace: its def, compiled plan and observers."""

    def __init__(self, net_def, workspace):
        self.net_def = net_def
        self.name = net_def.name
        self.workspace = workspace
        self.plan = compile_net(net_def, workspace.blobs.keys())
        self.observers = []

    def run(self):
        if self.observers:
            self.plan.run_observed(self.workspace.blobs, self.observers)
        else:
            self.plan.run(self.workspace.blobs)

    def add_observer(self, observer):
        if isinstance(observer, str):
            try:
                observer = OBSERVERS[observer]()
            except KeyError:
                raise Caffe2Error("unknown observer '%s' (known: %s)" % (observer, ", ".join(OBSERVERS))) from None
        self.observers.append(observer)
        return observer

    def remove_observer(self, observer):
        self.observers.remove(observer)

    def num_observers(self):
        return len(self.observers)

