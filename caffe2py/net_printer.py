"""Caffe2's caffe2.python.net_printer: read and check what a Job will run.

to_string(obj) renders a Net, ExecutionStep, Plan, Task, TaskGroup or Job as
Python-like text: ops as `out = Op(inputs, arg=value)` calls, steps as
`with loop(...)` / `with parallel()` / `with step(...)` blocks, tasks and
groups as `with Task(...)` / `with TaskGroup()` blocks.

analyze(job) walks the same structure keeping the blobs each workspace would
hold and fails (AssertionError) when an op reads a blob no earlier op of its
workspace defined (blobs starting with distributed_ctx_init are exempt), or
when steps running in parallel both define the same new blob. Private tasks see
a copy of their node's workspace; global tasks write into it.

debug_net(net) returns a copy of net that logs each op's text before running it.
"""
from collections import defaultdict
from contextlib import contextmanager
from copy import copy

from .checkpoint import Job
from .core import ExecutionStep, Net, Plan
from .proto.caffe2_pb2 import OperatorDef
from .task import Task, TaskGroup, WorkspaceType


class Visitor:
    """Calls the function registered for the first class the object is an instance of."""

    @classmethod
    def register(cls, type_):
        if "visitors" not in cls.__dict__:
            cls.visitors = []

        def _register(func):
            cls.visitors.append((type_, func))
            return func
        return _register

    def __call__(self, obj, *args, **kwargs):
        if obj is None:
            return None
        for type_, func in type(self).visitors:
            if isinstance(obj, type_):
                return func(self, obj, *args, **kwargs)
        raise TypeError("%s: unsupported object type: %s" % (type(self).__name__, type(obj)))


class Analyzer(Visitor):
    PREFIXES_TO_IGNORE = {"distributed_ctx_init"}

    def __init__(self):
        self.workspaces = defaultdict(lambda: defaultdict(int))
        self.workspace_ctx = []

    @property
    def workspace(self):
        return self.workspace_ctx[-1]

    @contextmanager
    def set_workspace(self, node=None, ws=None, do_copy=False):
        if ws is None:
            ws = self.workspaces[str(node)] if node is not None else self.workspace
        if do_copy:
            ws = copy(ws)
        self.workspace_ctx.append(ws)
        try:
            yield ws
        finally:
            del self.workspace_ctx[-1]

    def define_blob(self, blob):
        self.workspace[blob] += 1

    def need_blob(self, blob):
        if any(blob.startswith(prefix) for prefix in Analyzer.PREFIXES_TO_IGNORE):
            return
        assert blob in self.workspace, "Blob undefined: %s" % blob


def _step_children(step):
    proto = step.Proto()
    nets = [step.get_net(name) for name in proto.network]
    return step.Substeps() + [n for n in nets if n is not None]


@Analyzer.register(OperatorDef)
def analyze_op(analyzer, op):
    for blob in op.input:
        analyzer.need_blob(blob)
    for blob in op.output:
        analyzer.define_blob(blob)


@Analyzer.register(Net)
def analyze_net(analyzer, net):
    for op in net.Proto().op:
        analyzer(op)


@Analyzer.register(ExecutionStep)
def analyze_step(analyzer, step):
    proto = step.Proto()
    if proto.report_net:
        with analyzer.set_workspace(do_copy=True):
            analyzer(step.get_net(proto.report_net))
    all_new_blobs = set()
    for child in _step_children(step):
        with analyzer.set_workspace(do_copy=proto.concurrent_substeps) as ws_in:
            analyzer(child)
            if proto.should_stop_blob:
                analyzer.need_blob(proto.should_stop_blob)
        if proto.concurrent_substeps:
            new_blobs = set(ws_in.keys()) - set(analyzer.workspace.keys())
            clash = all_new_blobs & new_blobs
            assert not clash, "Error: Blobs created by multiple parallel steps: %s" % ", ".join(sorted(clash))
            all_new_blobs |= new_blobs
    for blob in all_new_blobs:
        analyzer.define_blob(blob)


@Analyzer.register(Task)
def analyze_task(analyzer, task):
    step = task.get_step()
    plan = Plan(task.node)
    plan.AddStep(step)
    size = len(plan.Proto().SerializeToString())
    assert size < 2 ** 26, ("Due to a protobuf limitation, serialized tasks must be smaller than 64Mb, "
                            "but this task has {} bytes.".format(size))
    with analyzer.set_workspace(do_copy=task.workspace_type() != WorkspaceType.GLOBAL):
        analyzer(step)


@Analyzer.register(TaskGroup)
def analyze_task_group(analyzer, group):
    for task in group.tasks_by_node().tasks():
        with analyzer.set_workspace(node=task.node):
            analyzer(task)


@Analyzer.register(Job)
def analyze_job(analyzer, job):
    analyzer(job.init_group)
    analyzer(job.epoch_group)


def analyze(obj):
    """Check a Job (or TaskGroup, Task, step, net): see the module doc."""
    Analyzer()(obj)


class Text:
    def __init__(self):
        self._indent = 0
        self._lines_in_context = [0]
        self.lines = []

    @contextmanager
    def context(self, text):
        if text is not None:
            self.add("with %s:" % text)
            self._indent += 4
            self._lines_in_context.append(0)
        try:
            yield
        finally:
            if text is not None:
                self._indent -= 4
                if self._lines_in_context[-1] == 0:
                    self.add("pass")
                del self._lines_in_context[-1]

    def add(self, text):
        self._lines_in_context[-1] += 1
        self.lines.append((" " * self._indent) + text)

    def __str__(self):
        return "\n".join(self.lines)


class Printer(Visitor, Text):
    def __init__(self, factor_prefixes=False):
        Text.__init__(self)
        self.factor_prefixes = factor_prefixes


def _sanitize_str(s):
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    s = str(s)
    return s if len(s) < 64 else (s[:64] + "...<+len=%d>" % (len(s) - 64))


def _arg_val(arg):
    if arg.HasField("f"):
        return str(arg.f)
    if arg.HasField("i"):
        return str(arg.i)
    if arg.HasField("s"):
        return _sanitize_str(arg.s)
    if arg.floats:
        return str(list(arg.floats))
    if arg.ints:
        return str(list(arg.ints))
    if arg.strings:
        return str([_sanitize_str(s) for s in arg.strings])
    return "[]"


def commonprefix(m):
    """The longest common prefix of a list of strings."""
    if not m:
        return ""
    s1, s2 = min(m), max(m)
    for i, c in enumerate(s1):
        if c != s2[i]:
            return s1[:i]
    return s1


def factor_prefix(vals, do_it):
    vals = [str(v) for v in vals]
    prefix = commonprefix(vals) if len(vals) > 1 and do_it else ""
    joined = ", ".join(v[len(prefix):] for v in vals)
    return "%s[%s]" % (prefix, joined) if prefix else joined


def call(op, inputs=None, outputs=None, factor_prefixes=False):
    if not inputs:
        inputs = ""
    else:
        positional = [a for a in inputs if not isinstance(a, tuple)]
        keywords = [a for a in inputs if isinstance(a, tuple)]
        inputs = ", ".join(filter(bool, [factor_prefix(positional, factor_prefixes)]
                                  + ["%s=%s" % kv for kv in keywords]))
    text = "%s(%s)" % (op, inputs)
    return text if not outputs else "%s = %s" % (factor_prefix(outputs, factor_prefixes), text)


@Printer.register(OperatorDef)
def print_op(text, op):
    text.add(call(op.type, list(op.input) + [(a.name, _arg_val(a)) for a in op.arg], op.output,
                  factor_prefixes=text.factor_prefixes))


@Printer.register(Net)
def print_net(text, net):
    text.add("# net: %s" % str(net))
    for op in net.Proto().op:
        text(op)


def _get_step_context(step):
    proto = step.Proto()
    if proto.should_stop_blob:
        return call("loop"), False
    if proto.num_iter and proto.num_iter != 1:
        return call("loop", [proto.num_iter]), False
    if proto.num_concurrent_instances > 1:
        return call("parallel", [("num_instances", proto.num_concurrent_instances)]), False
    if proto.concurrent_substeps and len(step.Substeps()) > 1:
        return call("parallel"), True
    if proto.report_net:
        return call("run_once"), False
    return None, False


@Printer.register(ExecutionStep)
def print_step(text, step):
    proto = step.Proto()
    step_ctx, each_substep = _get_step_context(step)
    with text.context(step_ctx):
        if proto.report_net:
            with text.context(call("report_net", [proto.report_interval])):
                text(step.get_net(proto.report_net))
        for child in _step_children(step):
            with text.context(call("step", [str(child.Name())]) if each_substep else None):
                text(child)
                if proto.should_stop_blob:
                    text.add(call("yield stop_if", [proto.should_stop_blob]))


@Printer.register(Plan)
def print_plan(text, plan):
    with text.context(call("Plan", [("name", plan.Proto().name)])):
        for step in plan.Steps():
            text(step)


@Printer.register(Task)
def print_task(text, task):
    with text.context(call("Task", [("node", task.node), ("name", task.name)])):
        text(task.get_step())


@Printer.register(TaskGroup)
def print_task_group(text, group, header=None):
    with text.context(header or call("TaskGroup")):
        for task in group.tasks_by_node().tasks():
            text(task)


@Printer.register(Job)
def print_job(text, job):
    text(job.init_group, "Job.current().init_group")
    text(job.epoch_group, "Job.current().epoch_group")


def to_string(obj):
    """The text of a Net, ExecutionStep, Plan, Task, TaskGroup or Job (module doc)."""
    printer = Printer()
    printer(obj)
    return str(printer)


def debug_net(net):
    """A copy of net that logs the text of each op before running it."""
    assert isinstance(net, Net)
    logged = Net(str(net))
    for op in net.Proto().op:
        text = Text()
        text.factor_prefixes = False
        print_op(text, op)
        logged.LogInfo(str(text))
        logged.Proto().op.extend([op])
    return logged
