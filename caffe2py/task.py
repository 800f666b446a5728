"""Caffe2's caffe2.python.task: Tasks, TaskGroups, Nodes and Clusters.

A Task is an execution step plus the blobs (or records) it hands back to the
client when it ends (its outputs). Tasks created inside `with TaskGroup():` join
that group; the group runs all of its tasks concurrently (a Session runs it).
`with Node("name"):` puts the tasks created inside on that node: tasks of one
node share a workspace, tasks of different nodes do not. A Cluster records the
node names used (one is made on first use).

    with TaskGroup() as tg:
        with Node("trainer"), Task(num_instances=2) as task:
            with ops.task_init():          # once per task, before the instances
                total = ops.Const(0)
            ...                              # the body, run by each instance
            result = final_output(total)    # fetched after the run: result.fetch()
    LocalSession().run(tg)

Setup and teardown come from attributes of the task's nets (net_builder's
ops.task_init / task_exit / task_instance_init / task_instance_exit /
local_init / local_exit, or SetupNets added with net.add_attribute): a task's
step becomes

    [task init] -> N x ([instance init] -> [reporters +] body -> [instance exit]) -> [task exit]

Workspaces: WorkspaceType.PRIVATE tasks run in a child workspace created for
the run (blobs of the parent stay visible); GLOBAL tasks run in the session's
workspace itself.
"""
from collections import defaultdict

from . import context, core, net_builder
from .schema import Field, from_blob_list


class Cluster(context.DefaultManaged):
    """The node names used (in order of first use) and their keyword arguments."""

    def __init__(self):
        self._nodes = []
        self._node_kwargs = {}

    def add_node(self, node):
        name = str(node)
        if name not in self._nodes:
            self._nodes.append(name)
        # kwargs given first for a node win over later ones (Caffe2's merge order)
        previous = self._node_kwargs.get(name)
        self._node_kwargs[name] = node.kwargs() if previous is None else dict(node.kwargs(), **previous)

    def nodes(self):
        return self._nodes

    def node_kwargs(self):
        return self._node_kwargs

    def __repr__(self):
        return "Cluster(nodes={}, node_kwargs={})".format(self.nodes(), self.node_kwargs())


class Node(context.DefaultManaged):
    """Tasks created inside `with Node(name):` run on that node; only the name
    counts for placement, the kwargs are recorded in the Cluster."""

    def __init__(self, node="local", **kwargs):
        self._name = str(node)
        self._kwargs = kwargs
        Cluster.current().add_node(self)

    def __str__(self):
        return self._name

    def __repr__(self):
        return "Node(name={}, kwargs={})".format(self._name, self._kwargs)

    def kwargs(self):
        return self._kwargs


class WorkspaceType:
    """Where a TaskGroup's tasks run: a child workspace made for each run
    (PRIVATE) or the session's workspace, kept across runs (GLOBAL)."""
    PRIVATE = "private"
    GLOBAL = "global"


def get_setup_nets(key, steps_or_nets, target):
    """(init nets, exit nets) from the setup objects attached under `key` to the
    nets of steps_or_nets. Each object contributes once (it is marked used), and
    only to `target` when it names one (`_setup_target`)."""
    init_net = core.Net(key + "/init")
    exit_net = core.Net(key + "/exit")
    init_nets, exit_nets = [], []
    objs = []
    for item in steps_or_nets:
        if hasattr(item, "get_all_attributes"):
            objs += item.get_all_attributes(key)
        elif hasattr(item, "get_attributes"):
            objs += item.get_attributes(key)
    for obj in objs:
        if getattr(obj, "_setup_used", False):
            continue
        if hasattr(obj, "_setup_target") and obj._setup_target != target:
            continue
        if hasattr(obj, "setup"):
            init_nets += _as_list(obj.setup(init_net), "setup")
            obj._setup_used = True
        if hasattr(obj, "exit"):
            exit_nets += _as_list(obj.exit(exit_net), "exit")
            obj._setup_used = True
    if len(init_net.Proto().op) > 0:
        init_nets.insert(0, init_net)
    if len(exit_net.Proto().op) > 0:
        exit_nets.insert(0, exit_net)
    return init_nets, exit_nets


def _as_list(nets, what):
    if nets is None:
        return []
    if isinstance(nets, (list, tuple)):
        return list(nets)
    if isinstance(nets, (core.Net, core.ExecutionStep)):
        return [nets]
    raise TypeError("Unsupported type for %s: %s" % (what, type(nets)))


def add_setup_steps(step, init_nets, exit_nets, name):
    """step, or a step running init_nets, then step, then exit_nets."""
    if not init_nets and not exit_nets:
        return step
    steps = []
    if init_nets:
        steps.append(core.execution_step("%s:init" % name, init_nets))
    steps.append(step)
    if exit_nets:
        steps.append(core.execution_step("%s:exit" % name, exit_nets))
    return core.execution_step(name, steps)


class TaskGroup(context.Managed):
    """Tasks that run concurrently, possibly on several nodes; the group ends
    when its last task ends. See the module doc."""
    LOCAL_SETUP = net_builder.LOCAL_SETUP

    def __init__(self, workspace_type=None):
        self._plan_cache = None
        self._tasks = []
        self._already_used = False
        self._prev_active = None
        self._tasks_to_add = []
        self._report_nets = {}
        self._report_steps = []
        self._workspace_type = workspace_type
        self._tasks_by_node = None
        self._remote_nets = []

    def add_remote_net(self, net):
        self._remote_nets.append(net)

    def remote_nets(self):
        return self._remote_nets

    def add(self, task):
        assert not self._already_used, "Cannot add Task to an already used TaskGroup."
        assert (self._workspace_type is None or task._workspace_type is None
                or self._workspace_type == task._workspace_type), \
            "Task of workspace type %s in a TaskGroup of type %s" % (task._workspace_type, self._workspace_type)
        if task._workspace_type is None:
            task._workspace_type = self._workspace_type or WorkspaceType.PRIVATE
        if self._workspace_type is None:
            self._workspace_type = task._workspace_type
        task._notify_used()
        self._tasks.append(task)

    def tasks(self):
        for task in self._tasks_to_add:
            self.add(task)
        self._tasks_to_add = []
        self._already_used = True
        return self._tasks

    def num_registered_tasks(self):
        return len(self._tasks_to_add) + len(self._tasks)

    def used_nodes(self):
        used = []
        for task in self._tasks + self._tasks_to_add:
            if task.node not in used:
                used.append(task.node)
        return used

    def report_step(self, step=None, node=None, interval_ms=1000):
        """Run `step` every interval_ms on the node while the group runs, and at
        least once after all of the node's tasks have finished."""
        step = core.to_execution_step(step)
        step.RunEveryMillis(interval_ms)
        self._report_steps.append((str(node or Node.current(node)), step))

    def report_net(self, net=None, node=None, report_interval=5):
        """Deprecated form of report_step (interval in seconds): the node's report net."""
        node = str(node or Node.current(node))
        assert net is None or node not in self._report_nets
        if node not in self._report_nets:
            self._report_nets[node] = (net if net else core.Net("%s/reporter" % node), report_interval)
        return self._report_nets[node][0]

    def tasks_by_node(self, node_remap=None):
        """A TaskGroup with one task per node (after node_remap): the node's tasks
        run concurrently, with its report steps, between its local setup nets.
        Callable more than once only with the same node mapping."""
        node_map = {}
        for task in self.tasks():
            node_map[task.node] = node_remap(task.node) if node_remap else task.node
        if self._tasks_by_node is not None:
            grouped, previous_map = self._tasks_by_node
            assert previous_map == node_map, "Cannot call tasks_by_node multiple times."
            return grouped

        for node, (net, interval) in self._report_nets.items():
            self.report_step(net, node=node, interval_ms=interval * 1000)
        self._report_nets = {}

        tasks_by_node = defaultdict(list)
        for task in self.tasks():
            tasks_by_node[node_map[task.node]].append(task)
        report_steps_by_node = defaultdict(list)
        for original_node, step in self._report_steps:
            report_steps_by_node[node_map[original_node]].append(step)

        grouped = TaskGroup()
        for node, tasks in tasks_by_node.items():
            report_steps = report_steps_by_node[node]
            node_inits, node_exits = get_setup_nets(
                TaskGroup.LOCAL_SETUP, [t.get_step() for t in tasks] + report_steps, self)
            steps = list(report_steps)
            outputs = []
            workspace_type = WorkspaceType.PRIVATE
            for task in tasks:
                step = task.get_step()
                step.SetCreateWorkspace(task.workspace_type() == WorkspaceType.PRIVATE)
                steps.append(step)
                outputs += task.outputs()
                # one task on the global workspace puts the node's task there
                if task.workspace_type() == WorkspaceType.GLOBAL:
                    workspace_type = WorkspaceType.GLOBAL
            if not steps:
                steps.append(core.execution_step("empty", []))
            step = steps[0] if len(steps) == 1 else core.execution_step(
                "%s:body" % node, steps, concurrent_substeps=True)
            if node_inits or node_exits:
                wrapped = []
                if node_inits:
                    wrapped.append(core.execution_step("%s:init" % node, node_inits))
                wrapped.append(step)
                if node_exits:
                    wrapped.append(core.execution_step("%s:exit" % node, node_exits))
                step = core.execution_step(node, wrapped)
            Task(node=node, step=step, outputs=outputs, name="grouped_by_node",
                 group=grouped, workspace_type=workspace_type)
        self._tasks_by_node = (grouped, node_map)
        return grouped

    def to_task(self, node=None):
        """The whole group as one task on `node` (the current node by default)."""
        node = str(Node.current(node))
        tasks = self.tasks_by_node(lambda _: node).tasks()
        return tasks[0] if tasks else Task()

    def workspace_type(self):
        return self._workspace_type

    def __repr__(self):
        return "TaskGroup(tasks={}, workspace_type={}, remote_nets={})".format(
            self._tasks + self._tasks_to_add, self.workspace_type(), self.remote_nets())


class TaskOutput:
    """An output of a task: a blob, a list of blobs or a record. After the run,
    get() gives the blobs holding the values and fetch() the values."""

    def __init__(self, names):
        self._schema = None
        if isinstance(names, Field):
            self._schema = names
            names = self._schema.field_blobs()
        self._is_scalar = type(names) not in (tuple, list)
        if self._is_scalar:
            names = [names]
        self.names = names
        self._values = None
        self._fetch_func = None

    def set(self, values, _fetch_func=None):
        assert len(values) == len(self.names), "expected %d values, got %d" % (len(self.names), len(values))
        self._values = values
        self._fetch_func = _fetch_func

    def _shape_like_names(self, values):
        if self._is_scalar:
            return values[0]
        if self._schema:
            return from_blob_list(self._schema, values)
        return values

    def get(self):
        assert self._values is not None, "Output value not set yet."
        return self._shape_like_names(self._values)

    def fetch(self):
        assert self._fetch_func is not None, "Cannot fetch value for this output."
        return self._shape_like_names([self._fetch_func(v) for v in self._values])

    def __repr__(self):
        return "TaskOutput(names={}, values={})".format(self.names, self._values)


def final_output(blob_or_record):
    """Make blob_or_record an output of the current task (of a new task when none
    is active): its value is available from the returned TaskOutput after the run."""
    task = Task.current(required=False) or Task()
    return task.add_output(blob_or_record)


class TaskOutputList:
    """The outputs of a task, flattened to one list of blob names."""

    def __init__(self, outputs=None):
        self.outputs = outputs or []

    def names(self):
        names = []
        for output in self.outputs:
            names += output.names
        return names

    def set_values(self, values, _fetch_func=None):
        offset = 0
        for output in self.outputs:
            count = len(output.names)
            output.set(values[offset:offset + count], _fetch_func)
            offset += count
        assert offset == len(values), "Wrong number of output values."

    def __repr__(self):
        return "TaskOutputList(outputs={})".format(self.outputs)


class Task(context.Managed):
    """An execution step and its outputs; see the module doc.

    Task(step=None, outputs=None, workspace_type=None, group=None, node=None,
    name=None, num_instances=None): joins the current TaskGroup (or `group`) on the
    current Node (or `node`). Used as a context, the ops built inside (through
    net_builder.ops) become its step."""

    TASK_SETUP = net_builder.TASK_SETUP
    TASK_INSTANCE_SETUP = net_builder.TASK_INSTANCE_SETUP
    REPORT_STEP = net_builder.REPORT_STEP
    _global_names_used = set()

    @staticmethod
    def _get_next_name(node, group, name):
        basename = str(node) + "/" + str(name)
        used = Task._global_names_used if group is None else {t.name for t in group._tasks_to_add}
        candidate, i = basename, 0
        while candidate in used:
            i += 1
            candidate = "%s:%d" % (basename, i)
        return candidate

    def __init__(self, step=None, outputs=None, workspace_type=None, group=None, node=None, name=None,
                 num_instances=None):
        if not name and isinstance(step, core.ExecutionStep):
            name = step.Proto().name
        name = name or "task"
        self.node = str(Node.current(None if node is None else Node(node)))
        self.group = TaskGroup.current(group, required=False)
        self.name = Task._get_next_name(self.node, self.group, name)
        if self.group is not None:
            self.group._tasks_to_add.append(self)
        self._already_used = False
        self._step = None
        self._step_with_setup = None
        self._outputs = []
        if step is not None:
            self.set_step(step)
        if outputs is not None:
            self.add_outputs(outputs)
        self._pipeline = None
        self._is_pipeline_context = False
        self._workspace_type = workspace_type
        self._report_net = None
        self._num_instances = num_instances
        self._net_builder = None

    def __enter__(self):
        super().__enter__()
        # out of the group's list while open, back at the end: the group keeps
        # tasks in the order they were finished
        if self.group is not None:
            self.group._tasks_to_add.remove(self)
        self._assert_not_used()
        assert self._step is None, "This Task already has an execution step."
        self._net_builder = net_builder.NetBuilder(_fullname=self.name)
        self._net_builder.__enter__()
        return self

    def __exit__(self, etype, value, tb):
        super().__exit__(etype, value, tb)
        self._net_builder.__exit__(etype, value, tb)
        if etype is None:
            self.set_step(self._net_builder)
        if self.group is not None:
            self.group._tasks_to_add.append(self)
        self._net_builder = None

    def workspace_type(self):
        return self._workspace_type

    def _assert_not_used(self):
        assert not self._already_used, "Cannot modify task since it is already been used."

    def add_output(self, output):
        self._assert_not_used()
        output = output if isinstance(output, TaskOutput) else TaskOutput(output)
        self._outputs.append(output)
        return output

    def add_outputs(self, outputs):
        self._assert_not_used()
        if type(outputs) not in (list, tuple):
            return self.add_output(outputs)
        return [self.add_output(output) for output in outputs]

    def set_step(self, step):
        self._assert_not_used()
        self._step = core.to_execution_step(step)

    def get_step(self):
        """The task's step with its setup, reports and instances (built once)."""
        if self._step_with_setup is not None:
            return self._step_with_setup
        if self._step is None:
            self._step_with_setup = core.execution_step(self.name, [])
            return self._step_with_setup

        report_steps = [s for s in self._step.get_all_attributes(Task.REPORT_STEP)
                        if not hasattr(s, "_report_step_used")]
        for step in report_steps:
            step._report_step_used = True
            if not step.Proto().run_every_ms:
                step.RunEveryMillis(1000)
        task_inits, task_exits = get_setup_nets(Task.TASK_SETUP, [self._step] + report_steps, self)
        instance_inits, instance_exits = get_setup_nets(Task.TASK_INSTANCE_SETUP, [self._step] + report_steps, self)
        if not self._outputs:
            # every task reports something, so a session can tell it finished
            output_net = core.Net("%s:output" % self.name)
            self.add_output(output_net.ConstantFill([], 1, dtype=core.DataType.INT32, value=0))
            task_exits.append(output_net)

        body = self._step if not report_steps else core.execution_step(
            "%s:body" % self.name, report_steps + [self._step])
        instance = add_setup_steps(body, instance_inits, instance_exits, self.name + ":instance")
        if self._num_instances and self._num_instances > 1:
            instance.SetCreateWorkspace(True)
            instance = core.execution_step("%s:parallel", [instance], num_concurrent_instances=self._num_instances)
        self._step_with_setup = add_setup_steps(instance, task_inits, task_exits, self.name)
        return self._step_with_setup

    def output_list(self):
        return TaskOutputList(self._outputs)

    def outputs(self):
        return self._outputs

    def _notify_used(self):
        self.get_step()
        self._already_used = True

    def __repr__(self):
        return "Task(name={}, node={}, outputs={})".format(self.name, self.node, self.outputs())


class SetupNets:
    """Nets to run at a Task's (or TaskGroup node's) start and end: attach with
    net.add_attribute(Task.TASK_SETUP or TaskGroup.LOCAL_SETUP, SetupNets(...)).
    One object runs once per run even when attached to several nets."""

    def __init__(self, init_nets=None, exit_nets=None):
        self.init_nets = init_nets
        self.exit_nets = exit_nets

    def setup(self, init_net):
        return self.init_nets

    def exit(self, exit_net):
        return self.exit_nets

    def __repr__(self):
        return "SetupNets(init_nets={}, exit_nets={})".format(self.init_nets, self.exit_nets)


# --------------------------------------------------------------------------- net_builder's hooks

def _local_task_group():
    with Cluster():
        with Node("local"):
            return TaskGroup(workspace_type=WorkspaceType.GLOBAL)


def _task_group_step(group):
    return [group.to_task().get_step()], None


net_builder.set_task_hooks(current_group=lambda: TaskGroup.current(), local_group=_local_task_group)
core.register_step_source(TaskGroup, _task_group_step)
