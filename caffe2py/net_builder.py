"""Caffe2's caffe2.python.net_builder: build nets, loops and conditionals with
`with` blocks.

    from caffe2py.net_builder import NetBuilder, ops
    with NetBuilder(_use_control_ops=True) as nb:
        x = ops.Const(0)
        with ops.WhileNet():
            with ops.Condition():
                ops.LT([x, ops.Const(10)])
            ops.Add([x, ops.Const(1)], [x])

Two families of blocks, as in Caffe2:

- control-op blocks (`ops.IfNet`, `ops.Else`, `ops.WhileNet`, `ops.Condition`,
  builders made with `_use_control_ops=True`) merge into one net holding If /
  While ops (control_ops_util.py);
- execution-step blocks (`ops.loop`, `ops.If`, `ops.stop_if`, `ops.stop_guard`)
  become execution steps with a stop blob; run them with
  `workspace.RunPlan(core.Plan(core.to_execution_step(nb)))`.

Inside a Task (caffe2py.task), `ops.task_init()` / `task_exit()` (once per task),
`task_instance_init()` / `task_instance_exit()` (once per concurrent instance),
`local_init()` / `local_exit()` (once per node of the TaskGroup) hold setup and
teardown ops, and `task_reporter()` / `local_reporter()` ops that run
periodically while the task (the group) runs and once after it.
`ops.task_group()` starts a TaskGroup run as the next step of the builder.
"""
from . import context, core
from .control_ops_util import add_if_op, add_while_op

# Attribute keys of the setup and report builders (caffe2py.task reads them as
# Task.TASK_SETUP, Task.TASK_INSTANCE_SETUP, Task.REPORT_STEP, TaskGroup.LOCAL_SETUP).
TASK_SETUP = "task_setup"
TASK_INSTANCE_SETUP = "task_instance_setup"
REPORT_STEP = "report_step"
LOCAL_SETUP = "local_setup"

# Filled in by caffe2py.task, which is above this module: "current_group" (the
# active TaskGroup) and "local_group" (a new TaskGroup on the local node).
_task_hooks = {}


def set_task_hooks(current_group, local_group):
    _task_hooks["current_group"] = current_group
    _task_hooks["local_group"] = local_group


def _task_hook(name):
    hook = _task_hooks.get(name)
    if hook is None:
        raise AssertionError("task groups need caffe2py.task: import it first")
    return hook


class NetBuilder(context.Managed):
    """Collects nets (and nested builders) into a list of children; ops called
    through `ops` go to the current net of the innermost active builder.

    initial_scope: blob names the built nets may read or write from outside."""

    def __init__(self, name=None, initial_scope=None, _stop_blob_required=False,
                 _stop_blob=None, _fullname=None, _use_control_ops=False):
        parent = NetBuilder.current(required=False)
        assert not _fullname or not name, "Cannot set both _fullname and name"
        assert not _use_control_ops or (not _stop_blob_required and not _stop_blob), \
            "Stop blobs are not used with control operators"
        self.name = _fullname or "/".join(n for n in (parent.name if parent else None, name) if n)
        self._frozen = False
        self._current_net = None
        self._children = []
        if parent:
            parent._update_lexical_scope()
        self._init_lexical_scope = set(parent._lexical_scope) if parent else set()
        if initial_scope:
            self._init_lexical_scope |= {str(b) for b in initial_scope}
        self._lexical_scope = set(self._init_lexical_scope)
        self._stop_blob = _stop_blob
        self._stop_blob_required = _stop_blob_required
        self._use_control_ops = _use_control_ops

    def stop_blob(self):
        """This builder's stop blob (a bool set False at the start of its first net)."""
        assert not self._use_control_ops, "Stop blobs are not used with control operators"
        if self._stop_blob is None:
            net = self.current_net()
            self._stop_blob = core.BlobReference(net.NextName("stop_blob"), net=net)
            net.Const(False, blob_out=self._stop_blob)
            if self._current_net is not self._children[0]:
                self._children.insert(0, core.Net("stop_blob_init"))
                self._children[0].Const(False, blob_out=self._stop_blob)
        return self._stop_blob

    def stop_if(self, blob):
        assert not self._use_control_ops, "Stop blobs are not used with control operators"
        stop_blob = self.stop_blob()
        ops.Or([stop_blob, blob], [stop_blob])
        self._current_net = None     # what follows runs in a new net, after the check

    def _assert_mutable(self):
        assert not self._frozen, "This NetBuilder (%s) has been built already." % self.name

    def _update_lexical_scope(self):
        self._lexical_scope = set(self._init_lexical_scope)
        for child in self._children:
            if isinstance(child, core.Net):
                self._lexical_scope |= child.UsedBlobNames()
            elif isinstance(child, NetBuilder) and child._use_control_ops:
                self._lexical_scope |= child._lexical_scope

    def _reset_children(self):
        self._current_net = None
        self._children = []
        self._lexical_scope = set(self._init_lexical_scope)

    def add(self, child):
        self._assert_mutable()
        if self._use_control_ops:
            assert isinstance(child, core.Net) or (
                isinstance(child, NetBuilder) and child._use_control_ops), \
                "Expected Net or NetBuilder with control ops"
        self._current_net = None
        self._children.append(child)
        if isinstance(child, core.Net):
            self._current_net = child
        self._update_lexical_scope()
        return child

    def current_net(self, name=None):
        self._assert_mutable()
        if self._current_net is None or name is not None:
            self.add(core.Net(name))
        return self._current_net

    def freeze(self):
        for child in self._children:
            if hasattr(child, "freeze"):
                child.freeze()
        self._current_net = None
        self._frozen = True

    def get(self):
        self.freeze()
        return self._children

    def __exit__(self, etype, *args):
        super().__exit__(etype, *args)
        if self._use_control_ops and self._children:
            children = self._children
            self._reset_children()
            merged = NetBuilder.merge_nets(children, self._lexical_scope)
            assert merged, "Expected a non-empty merge of children"
            self._children = [merged]
        self.freeze()
        if etype is not None:
            return
        assert not self._stop_blob_required or self._stop_blob is not None, \
            "This NetBuilder (%s) requires a stop condition to be set with `stop` or `stop_if`" % self.name

    @staticmethod
    def merge_nets(nets_or_builders, outer_blob_names):
        """One net from control-op children; its external outputs keep only the
        names visible outside (a blob local to a branch is not an output)."""
        net = None
        for item in nets_or_builders:
            if isinstance(item, NetBuilder):
                assert item._use_control_ops, "Merging of NetBuilder supported only for control ops"
                nets = item.get()
                assert len(nets) == 1 and isinstance(nets[0], core.Net), "Invalid control op net builder"
                current = nets[0]
            else:
                assert isinstance(item, core.Net)
                current = item
            if net is None:
                net = current
            else:
                net.AppendNet(current)
                for out in current.Proto().external_output:
                    if out not in net.Proto().external_output:
                        net.Proto().external_output.append(out)
        if net is not None:
            kept = [o for o in net.Proto().external_output if o in outer_blob_names]
            net.Proto().external_output[:] = kept
        return net

    def __str__(self):
        return self.name or "Un-named NetBuilder"


class Operations:
    """`ops`: op calls on the current net of the active NetBuilder, plus the
    block constructors."""

    def net(self, net=None, name=None):
        assert name is None or net is None, "Cannot provide both `net` and `name`."
        if net is not None:
            NetBuilder.current().add(net)
            return net
        return NetBuilder.current().current_net(name=name)

    def __getattr__(self, op_type):
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        if NetBuilder.current(required=False) is None:
            raise AttributeError("No active NetBuilder.")
        return getattr(self.net(), op_type)

    def stop(self):
        return self.stop_if(ops.Const(True))

    def stop_if(self, blob):
        return NetBuilder.current().stop_if(blob)

    def loop(self, iters=None, name=None):
        """A block run repeatedly until stop/stop_if, or `iters` times (a number or blob)."""
        return NetBuilder.current().add(_Loop(iters, name=name))

    def stop_guard(self, has_stopped_blob=None, name=None):
        return NetBuilder.current().add(_StopGuard(has_stopped_blob=has_stopped_blob, name=name))

    def If(self, cond, name=None):
        """A block run once if `cond` is true (execution-step logic)."""
        return NetBuilder.current().add(_RunIf(cond, name=name))

    def IfNet(self, cond, name=None):
        """Like If, built as an If operator."""
        return NetBuilder.current().add(_RunIfNet(cond, name=name))

    def Else(self, name=None):
        """The else block of the IfNet just before it."""
        return _RunElseNet(name=name)

    def WhileNet(self, name=None):
        """A block built as a While operator; its condition comes from ops.Condition()."""
        return NetBuilder.current().add(_RunWhileNet(name=name))

    def Condition(self, name=None):
        """The condition block of the enclosing WhileNet (its last op writes the condition)."""
        assert isinstance(NetBuilder.current(), _RunWhileNet), "Use of Condition outside of WhileNet"
        return _RunWhileCondition(name=name)

    def task_group(self):
        """A TaskGroup on the local node, run as the next step of the current builder."""
        group = _task_hook("local_group")()
        NetBuilder.current().add(group)
        return group

    # -- setup, teardown and reports of tasks (see the module doc)
    def _setup(self, kind, key):
        setup = _SetupBuilder(kind)
        self.net().add_attribute(key, setup)
        return setup

    def task_init(self):
        return self._setup(_SetupBuilder.INIT, TASK_SETUP)

    def task_exit(self):
        return self._setup(_SetupBuilder.EXIT, TASK_SETUP)

    def task_instance_init(self):
        return self._setup(_SetupBuilder.INIT, TASK_INSTANCE_SETUP)

    def task_instance_exit(self):
        return self._setup(_SetupBuilder.EXIT, TASK_INSTANCE_SETUP)

    def local_init(self):
        return self._setup(_SetupBuilder.INIT, LOCAL_SETUP)

    def local_exit(self):
        return self._setup(_SetupBuilder.EXIT, LOCAL_SETUP)

    def task_reporter(self, interval_ms=1000, name=None):
        return _ReporterBuilder(interval_ms, net=self.net(), name=name)

    def local_reporter(self, interval_ms=1000, name=None):
        return _ReporterBuilder(interval_ms, name=name)


ops = Operations()


class _leave_on_error:
    """Pops a builder whose __enter__ failed half-way (its __exit__ will not run)."""

    def __init__(self, builder):
        self.builder = builder

    def __enter__(self):
        return self.builder

    def __exit__(self, etype, *args):
        if etype is not None:
            context.Managed.__exit__(self.builder, etype, *args)


class _ReporterBuilder(NetBuilder):
    """Ops run every interval_ms: for the task whose net it is attached to, or
    (no net) for the current TaskGroup's node."""

    def __init__(self, interval_ms, net=None, name=None):
        NetBuilder.__init__(self, name)
        self._net = net
        self.interval_ms = interval_ms

    def __exit__(self, etype, *args):
        if etype is None:
            step = core.to_execution_step(self)
            step.RunEveryMillis(self.interval_ms)
            if self._net:
                self._net.add_attribute(REPORT_STEP, step)
            else:
                _task_hook("current_group")().report_step(step, interval_ms=self.interval_ms)
        NetBuilder.__exit__(self, etype, *args)


class _SetupBuilder(NetBuilder):
    """Ops a Task or TaskGroup runs before (INIT) or after (EXIT) its body; it
    finds them as an attribute of a net (caffe2py.task.get_setup_nets)."""
    INIT = "init"
    EXIT = "exit"

    def __init__(self, type, name=None):  # noqa: A002 - Caffe2's argument name
        NetBuilder.__init__(self, name)
        self.type = type

    def setup(self, net):
        if self.type == _SetupBuilder.INIT:
            return core.to_execution_step(self)
        return None

    def exit(self, net):
        if self.type == _SetupBuilder.EXIT:
            return core.to_execution_step(self)
        return None


class _RunOnce(NetBuilder):
    def __init__(self, name=None):
        NetBuilder.__init__(self, name)

    def __exit__(self, etype, *args):
        if etype is None and self._stop_blob is not None:
            ops.stop()
        NetBuilder.__exit__(self, etype, *args)


class _StopGuard(_RunOnce):
    def __init__(self, has_stopped_blob=None, name=None):
        _RunOnce.__init__(self, name)
        self._stopped = has_stopped_blob
        self._ran = False

    def __enter__(self):
        builder = _RunOnce.__enter__(self)
        self._stopped = ops.Const(True, blob_out=self._stopped)
        return builder

    def __exit__(self, etype, *args):
        if etype is None:
            self._ran = True
            ops.Const(False, blob_out=self._stopped)
        _RunOnce.__exit__(self, etype, *args)

    def has_stopped(self):
        """A bool blob: True after the block ran iff it was stopped early."""
        assert self._ran, "Context not used yet."
        return self._stopped


class _Loop(NetBuilder):
    def __init__(self, iters=None, name=None):
        NetBuilder.__init__(self, name, _stop_blob_required=True)
        if iters is not None:
            self._inc = ops.Const(1)
            self._iter = ops.Const(0)
            self._num_iters = iters if isinstance(iters, core.BlobReference) else ops.Const(iters)
        else:
            self._num_iters = None
            self._iter = None

    def iter(self):
        assert self._num_iters is not None, "This loop does not have a number of iterations."
        return self._iter

    def __enter__(self):
        builder = NetBuilder.__enter__(self)
        if self._num_iters is not None:
            with _leave_on_error(self):
                ops.stop_if(ops.GE([self._iter, self._num_iters]))
        return builder

    def __exit__(self, etype, *args):
        if etype is None and self._num_iters is not None:
            self.current_net().Add([self._iter, self._inc], [self._iter])
        NetBuilder.__exit__(self, etype, *args)


class _RunIf(_RunOnce):
    def __init__(self, cond_blob=None, name=None, _already_ran=None):
        _RunOnce.__init__(self, name)
        assert cond_blob or _already_ran
        self._is_else = cond_blob is None
        if _already_ran is None:
            self._else_blob = ops.Not(cond_blob)
            self._already_ran = ops.Const(False)
        else:
            self._already_ran = _already_ran
            self._else_blob = _already_ran if cond_blob is None else ops.Or([_already_ran, ops.Not(cond_blob)])

    def __enter__(self):
        builder = _RunOnce.__enter__(self)
        with _leave_on_error(self):
            ops.stop_if(self._else_blob)
            ops.Const(True, blob_out=self._already_ran)
        return builder

    def Elif(self, cond, name=None):
        assert not self._is_else, "Elif not allowed after an Else."
        return NetBuilder.current().add(_RunIf(cond, name=name or self.name, _already_ran=self._already_ran))

    def Else(self, name=None):
        assert not self._is_else, "Else not allowed after an Else."
        return NetBuilder.current().add(_RunIf(name=name or self.name, _already_ran=self._already_ran))


class _RunIfNet(NetBuilder):
    """One net holding an If op (then branch = this block's nets)."""

    def __init__(self, cond_blob, name=None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        assert cond_blob, "Conditional blob is not specified for an If net"
        self._cond_blob = cond_blob
        self._then_net = None
        self._else_net = None

    def __exit__(self, etype, *args):
        if etype is None:
            then_nets = self._children
            self._reset_children()
            self._then_net = NetBuilder.merge_nets(then_nets, self._lexical_scope) or core.Net("empty_then_net")
            if_net = core.Net(self.name + "/if_net")
            add_if_op(if_net, self._cond_blob, self._lexical_scope, self._then_net, self._else_net)
            self._current_net = if_net
            self._children = [if_net]
        NetBuilder.__exit__(self, etype, *args)


class _RunElseNet(NetBuilder):
    """Else branch: rebuilds the preceding IfNet's net with both branches."""

    def __init__(self, name=None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        parent = NetBuilder.current(required=False)
        assert parent and parent._children and isinstance(parent._children[-1], _RunIfNet), \
            "Invalid use of Else builder"
        self._if_builder = parent._children[-1]

    def __exit__(self, etype, *args):
        if etype is None:
            else_nets = self._children
            self._reset_children()
            builder = self._if_builder
            builder._else_net = NetBuilder.merge_nets(else_nets, self._lexical_scope)
            if builder._else_net:
                if_else_net = core.Net(self.name + "/if_else_net")
                add_if_op(if_else_net, builder._cond_blob, self._lexical_scope,
                          builder._then_net, builder._else_net)
                builder._current_net = if_else_net
                builder._children = [if_else_net]
        NetBuilder.__exit__(self, etype, *args)


class _RunWhileNet(NetBuilder):
    """One net holding a While op."""

    def __init__(self, name=None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        self._cond_builder = None

    def __exit__(self, etype, *args):
        if etype is None:
            assert self._cond_builder, "Condition builder must be specified in While op"
            body = self._children
            self._reset_children()
            body_net = NetBuilder.merge_nets(body, self._lexical_scope) or core.Net("empty_loop_body_net")
            while_net = core.Net(self.name + "/while_net")
            add_while_op(while_net, self._cond_builder._cond_blob, self._lexical_scope,
                         body_net, self._cond_builder._cond_net)
            self._current_net = while_net
            self._children = [while_net]
        NetBuilder.__exit__(self, etype, *args)


class _RunWhileCondition(NetBuilder):
    """The loop condition: its last op's single output is the condition blob."""

    def __init__(self, name=None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        parent = NetBuilder.current(required=False)
        assert parent and isinstance(parent, _RunWhileNet), "Invalid use of loop condition builder"
        assert not parent._cond_builder, "Multiple loop condition builders specified"
        assert not parent._children, "Condition definition must be specified before the loop's body"
        parent._cond_builder = self
        self._cond_blob = None
        self._cond_net = None

    def __exit__(self, etype, *args):
        if etype is None:
            condition_body = self._children
            self._reset_children()
            self._cond_net = NetBuilder.merge_nets(condition_body, self._lexical_scope)
            assert self._cond_net and len(self._cond_net.Proto().op) > 0, "Invalid loop condition specified"
            last_op = self._cond_net.Proto().op[-1]
            assert len(last_op.output) == 1, "Invalid condition net"
            self._cond_blob = core.BlobReference(last_op.output[0])
            self._current_net = self._cond_net
            self._children = [self._cond_net]
        NetBuilder.__exit__(self, etype, *args)


# --------------------------------------------------------------------------- core's hooks
# core is below this module: it asks through these rather than importing NetBuilder.

def _current_builder_name():
    builder = NetBuilder.current(required=False)
    return builder.name if builder else ""


def _nets_and_stop_blob(builder):
    stop_blob = builder._stop_blob
    return builder.get(), stop_blob


core.set_net_name_prefix(_current_builder_name)
core.register_step_source(NetBuilder, _nets_and_stop_blob)
