"""caffe2py.task and caffe2py.session (Caffe2's task / session modules): tasks
built with net_builder.ops, their setup/teardown order, concurrent instances,
task groups on nodes, private and global workspaces, outputs. Expected values are
computed in Python in the test."""
import numpy as np
import pytest

from caffe2py import core, schema, workspace
from caffe2py.net_builder import ops
from caffe2py.session import LocalSession
from caffe2py.task import (Cluster, Node, SetupNets, Task, TaskGroup, TaskOutput, WorkspaceType,
                           final_output)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def test_reprs_name_what_each_object_holds():
    assert repr(Cluster()) == "Cluster(nodes=[], node_kwargs={})"
    assert repr(Node()) == "Node(name=local, kwargs={})"
    assert repr(TaskGroup()) == "TaskGroup(tasks=[], workspace_type=None, remote_nets=[])"
    assert repr(TaskOutput([])) == "TaskOutput(names=[], values=None)"
    assert repr(SetupNets()) == "SetupNets(init_nets=None, exit_nets=None)"
    assert repr(Task(name="repr_task")).startswith("Task(name=local/repr_task")


def test_nested_loops_and_conditions_match_python():
    with Task() as task:
        total, large, small = ops.Const(0), ops.Const(0), ops.Const(0)
        with ops.loop(6) as outer:
            base = ops.Mul([outer.iter(), ops.Const(10)])
            with ops.loop(outer.iter()) as inner:
                value = ops.Add([base, inner.iter()])
                with ops.If(ops.GE([value, ops.Const(40)])) as cond:
                    ops.Add([large, value], [large])
                with cond.Else():
                    ops.Add([small, value], [small])
                ops.Add([total, value], [total])
        outputs = [final_output(b) for b in (total, large, small)]
    expected_total = expected_large = expected_small = 0
    for i in range(6):
        for j in range(i):
            v = 10 * i + j
            expected_total += v
            if v >= 40:
                expected_large += v
            else:
                expected_small += v
    with LocalSession() as session:
        session.run(task)
        assert [int(o.fetch()) for o in outputs] == [expected_total, expected_large, expected_small]


def test_task_init_runs_first_and_task_exit_last():
    with Task() as task:
        with ops.task_init():
            ten = ops.Const(10)
        doubled = ops.Add([ten, ten])            # 20
        acc = ops.Add([doubled, ten])            # 30
        with ops.task_exit():
            at_exit = ops.Add([acc, ten])        # runs after the body: acc is 31 then
        before = ops.Add([acc, ten])             # 40
        ops.Add([acc, ops.Const(1)], [acc])      # acc: 31
        outs = [final_output(b) for b in (before, at_exit)]
    LocalSession().run(task)
    assert [int(o.fetch()) for o in outs] == [40, 41]


def test_concurrent_instances_run_instance_setup_each_and_task_setup_once():
    num_instances = 4
    with Task(num_instances=num_instances) as task:
        with ops.task_init():
            mutex = ops.CreateMutex([])
            total = ops.Const(np.int64(0))
            inits = ops.Const(np.int64(0))
        with ops.task_instance_init():
            local = ops.Const(np.int64(0))
        with ops.loop(5):
            ops.Add([local, ops.Const(np.int64(1))], [local])
        with ops.task_instance_exit():
            ops.AtomicIter([mutex, inits], [inits])  # once per instance, atomically
        with ops.task_exit():
            result = ops.Copy(inits)
        out = final_output(result)
    LocalSession().run(task)
    assert int(out.fetch()) == num_instances


def test_tasks_of_a_group_run_concurrently_and_each_returns_its_outputs():
    with TaskGroup() as group:
        with Node("n1"):
            with Task():
                a = final_output(ops.Add([ops.Const(2), ops.Const(3)]))
        with Node("n2"):
            with Task():
                b = final_output(ops.Mul([ops.Const(4), ops.Const(5)]))
    assert group.used_nodes() == ["n1", "n2"]
    session = LocalSession()
    session.run(group)
    assert int(a.fetch()) == 5 and int(b.fetch()) == 20
    # a private group leaves only its outputs behind
    assert sorted(str(n) for o in (a, b) for n in o.names) == sorted(
        name for name in workspace.Blobs() if workspace.FetchBlob(name) is not None)


def test_global_workspace_tasks_keep_their_blobs():
    net = core.Net("global_net")
    net.ConstantFill([], "kept", shape=[2], value=3.0)
    LocalSession().run(net)                       # a net runs as a GLOBAL task
    np.testing.assert_array_equal(workspace.FetchBlob("kept"), [3.0, 3.0])

    private = core.Net("private_net")
    private.ConstantFill([], "dropped", shape=[1], value=1.0)
    LocalSession().run(private, workspace_type=WorkspaceType.PRIVATE)
    assert not workspace.HasBlob("dropped")


def test_local_setup_and_setup_nets_run_once_per_run():
    workspace.FeedBlob("counter", np.array(0.0, np.float32))
    workspace.FeedBlob("one", np.array(1.0, np.float32))
    init = core.Net("bump_once")
    init.Add(["counter", "one"], "counter")
    body_a, body_b = core.Net("a"), core.Net("b")
    for body in (body_a, body_b):
        body.Copy("one", body.NextName("copy"))
    shared = SetupNets(init_nets=[init])
    body_a.add_attribute(TaskGroup.LOCAL_SETUP, shared)
    body_b.add_attribute(TaskGroup.LOCAL_SETUP, shared)  # the same object: still once
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as group:
        Task(step=body_a)
        Task(step=body_b)
    LocalSession().run(group)
    assert workspace.FetchBlob("counter") == 1.0


def test_a_task_reporter_sees_the_final_state():
    with Task() as task:
        count = ops.Const(np.float32(0))
        seen = ops.Const(np.float32(-1))
        with ops.task_reporter(interval_ms=60 * 1000):
            ops.Copy(count, seen)
        with ops.loop(7):
            ops.Add([count, ops.Const(np.float32(1))], [count])
        out = final_output(seen)
    LocalSession().run(task)
    assert float(out.fetch()) == 7.0


def test_final_output_of_a_record_fetches_a_record():
    with Task() as task:
        record = schema.Struct(("x", ops.Const(np.array([1, 2], np.int32))),
                               ("y", ops.Const(np.array([0.5], np.float32))))
        out = final_output(record)
    LocalSession().run(task)
    fetched = out.fetch()
    assert fetched.x() .tolist() == [1, 2] and fetched.y().tolist() == [0.5]
    assert [str(b) for b in out.get().field_blobs()] == [str(b) for b in record.field_blobs()]


def test_compiled_runnables_are_cached_and_checked_per_session_class():
    with TaskGroup() as group:
        with Task():
            out = final_output(ops.Const(np.int32(9)))
    first = LocalSession.compile(group)
    assert LocalSession.compile(group) is first and LocalSession.compile(first) is first
    LocalSession().run(first)
    assert int(out.fetch()) == 9

    class OtherSession(LocalSession):
        pass

    with pytest.raises(AssertionError, match="different session type"):
        OtherSession.compile(first)


def test_a_task_cannot_change_once_used_and_a_closed_session_refuses_runs():
    with TaskGroup() as group:
        task = Task(step=core.Net("noop"))
    group.tasks()
    with pytest.raises(AssertionError, match="already been used"):
        task.add_output(core.BlobReference("x"))
    with pytest.raises(AssertionError, match="already used TaskGroup"):
        group.add(Task(step=core.Net("late")))
    session = LocalSession()
    session.close()
    with pytest.raises(AssertionError, match="closed"):
        session.run(core.Net("after_close"))


def test_node_kwargs_first_given_win():
    with Cluster() as cluster:
        Node("w", cpus=2)
        Node("w", cpus=8, gpus=1)
    assert cluster.nodes() == ["w"] and cluster.node_kwargs() == {"w": {"cpus": 2, "gpus": 1}}
