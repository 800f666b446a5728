"""Caffe2's caffe2.python.session: run Nets, ExecutionSteps, Plans, Tasks and
TaskGroups, and fetch the tasks' outputs.

    session = LocalSession()          # on the current workspace, or LocalSession(ws)
    session.run(init_net)             # a Net, ExecutionStep or Plan runs as a GLOBAL task
    session.run(task_group)           # PRIVATE by default: a child workspace per run
    value = output.fetch()            # a TaskOutput of final_output(...)

LocalSession runs every task on one node: the whole TaskGroup becomes one task
(its tasks concurrent substeps) and one plan, run in the session's workspace, or,
for a PRIVATE group, in a child workspace made for that run (the parent's blobs
are visible; blobs made by the run disappear with it, except the tasks' outputs,
which are created in the session's workspace first so that they survive).

Compiling a runnable (session.compile) is cached per runnable object and session
class: running the same TaskGroup again runs the same plan.
"""
from . import core, extension, workspace
from .task import Cluster, Task, TaskGroup, WorkspaceType


class CompiledRunnable:
    """What Session.compile returns: the compiled form and the session class it is for."""

    def __init__(self, obj, session_class):
        self.obj = obj
        self.session_class = session_class


class Session:
    """Base class: compile(runnable) -> CompiledRunnable; run(runnable); close()."""

    _compiled_cache = {}

    def __init__(self):
        self._open = True

    def is_open(self):
        return self._open

    @classmethod
    def compile(cls, runnable, workspace_type=None, setup_net_list=None):
        if isinstance(runnable, CompiledRunnable):
            assert cls == runnable.session_class, (
                "Runnable was compiled for different session type. Need: %s, got: %s"
                % (cls.__name__, runnable.session_class.__name__))
            return runnable
        try:
            key = (cls, runnable)
            cached = cls._compiled_cache.get(key)
        except TypeError:                    # a list of nets: not cached
            key, cached = None, None
        if cached is not None:
            return cached
        compiled = CompiledRunnable(
            cls._compile_task_group(_as_task_group(runnable, workspace_type), setup_net_list),
            session_class=cls)
        if key is not None:
            cls._compiled_cache[key] = compiled
        return compiled

    def run(self, runnable, workspace_type=None, setup_net_list=None):
        """Run a TaskGroup, Task, Plan, ExecutionStep or Net (or list of nets)."""
        assert self.is_open(), "Session is closed."
        assert runnable is not None, "Got a none runnable."
        self._run_compiled(self.compile(runnable, workspace_type, setup_net_list).obj)

    def close(self):
        if self.is_open():
            self._do_close()
            self._open = False

    def fetch_output(self, output):
        raise NotImplementedError()

    def _run_compiled(self, compiled):
        raise NotImplementedError()

    @classmethod
    def _compile_task_group(cls, task_group, setup_net_list=None):
        return task_group

    def _do_close(self):
        pass

    def __enter__(self):
        assert self._open, "Session already closed."
        return self

    def __exit__(self, ex_type, value, traceback):
        if ex_type is None:
            self.close()


def _as_task_group(runnable, workspace_type):
    """A TaskGroup running `runnable`; anything but a TaskGroup runs GLOBAL by default."""
    if isinstance(runnable, TaskGroup):
        if workspace_type:
            if runnable.workspace_type():
                assert runnable.workspace_type() == workspace_type, \
                    "Require {} but already have {}".format(workspace_type, runnable.workspace_type())
            else:
                runnable._workspace_type = workspace_type
        return runnable
    group = TaskGroup(workspace_type=workspace_type or WorkspaceType.GLOBAL)
    if isinstance(runnable, Task):
        group.add(runnable)
    elif isinstance(runnable, core.ExecutionStep):
        group.add(Task(step=runnable))
    elif isinstance(runnable, core.Plan):
        # a plan's steps run one after another; a group's tasks would run at once
        steps = runnable.Steps()
        assert len(steps) > 0, "the plan has no steps"
        group.add(Task(step=steps[0] if len(steps) == 1 else steps))
    else:
        group.add(Task(step=core.execution_step("runnable", runnable)))
    return group


class LocalSession(Session):
    """A session on one node: see the module doc. ws: the workspace to run in
    (a caffe2py workspace object or a `workspace.C.Workspace()`, as Caffe2's tests
    pass; the current workspace by default)."""

    def __init__(self, ws=None):
        Session.__init__(self)
        self._ws = extension.unwrap(ws) if ws is not None else workspace.current_workspace()

    @classmethod
    def _compile_task_group(cls, task_group, setup_net_list=None):
        with Cluster():
            task = task_group.to_task()
        plan = core.Plan("task_group_plan")
        plan.AddStep(task.get_step())
        return plan, task.output_list(), task.workspace_type()

    def _run_compiled(self, compiled):
        plan, output_list, workspace_type = compiled
        # outputs live in the session's workspace, so a private run writes them there
        outputs = []
        for name in output_list.names():
            self._ws.create_blob(str(name))
            outputs.append(core.BlobReference(str(name)))
        output_list.set_values(outputs, _fetch_func=self._fetch_output)
        task_ws = self._ws.child() if workspace_type == WorkspaceType.PRIVATE else self._ws
        task_ws.run_plan(plan)

    def _fetch_output(self, output):
        return self._ws.fetch_blob(str(output))
