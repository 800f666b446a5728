"""caffe2py.execution_steps: Caffe2's plan-executor rules for child workspaces,
concurrent instances, reporter substeps and report nets, stop blobs."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _run(step):
    plan = core.Plan("plan")
    plan.AddStep(step)
    workspace.RunPlan(plan)


def _feed(**blobs):
    for name, value in blobs.items():
        workspace.FeedBlob(name, np.array(value))


def test_a_child_workspace_writes_parent_blobs_and_drops_its_own():
    _feed(shared=np.float32(1.0))
    net = core.Net("child_body")
    net.Add(["shared", "shared"], "shared")              # exists in the parent: the parent's blob
    net.ConstantFill([], "local_only", shape=[2], value=7.0)
    net.Copy("local_only", "local_copy")
    step = core.execution_step("in_child", net)
    step.SetCreateWorkspace(True)
    _run(step)
    assert workspace.FetchBlob("shared") == 2.0
    assert not workspace.HasBlob("local_only") and not workspace.HasBlob("local_copy")


def test_concurrent_instances_each_get_a_workspace_of_their_own():
    init = core.Net("init")
    mutex = init.CreateMutex([], "mutex")
    init.ConstantFill([], "iter", shape=[1], value=0, dtype=core.DataType.INT64)
    workspace.RunNetOnce(init)

    body = core.Net("instance_body")
    body.AtomicIter([mutex, "iter"], "iter")            # one increment per instance, atomically
    body.ConstantFill([], "scratch", shape=[1], value=1.0)
    inner = core.execution_step("instance", body)
    inner.SetCreateWorkspace(True)
    outer = core.execution_step("parallel", [inner])
    outer.SetNumConcurrentInstances(5)
    _run(outer)
    assert workspace.FetchBlob("iter").tolist() == [5]
    assert not workspace.HasBlob("scratch")


def test_a_reporter_substep_runs_periodically_and_once_after_the_work():
    _feed(counter=np.float32(0), one=np.float32(1), reported=np.float32(-1), reports=np.float32(0))
    work = core.Net("work")
    work.Add(["counter", "one"], "counter")
    report = core.Net("report")
    report.Copy("counter", "reported")
    report.Add(["reports", "one"], "reports")
    reporter = core.execution_step("reporter", report)
    reporter.RunEveryMillis(60 * 1000)                  # far longer than the run: only the final report
    _run(core.execution_step("body", [reporter, core.execution_step("work", work, num_iter=20)]))
    assert workspace.FetchBlob("counter") == 20
    assert workspace.FetchBlob("reported") == 20        # the reporter saw the final state
    assert workspace.FetchBlob("reports") == 1


def test_a_fast_reporter_runs_while_the_work_runs():
    _feed(counter=np.float32(0), one=np.float32(1), reports=np.float32(0), stop=False)
    report = core.Net("count_reports")
    report.Add(["reports", "one"], "reports")
    reporter = core.execution_step("reporter", report)
    reporter.RunEveryMillis(5)
    # work that lasts a while: many iterations of a small net
    work = core.Net("busy")
    work.Add(["counter", "one"], "counter")
    _run(core.execution_step("body", [reporter, core.execution_step("work", work, num_iter=3000)]))
    assert workspace.FetchBlob("reports") >= 2


def test_a_report_net_runs_at_the_end_of_its_step():
    _feed(x=np.float32(0), one=np.float32(1), seen=np.float32(-1))
    work = core.Net("w")
    work.Add(["x", "one"], "x")
    report = core.Net("r")
    report.Copy("x", "seen")
    step = core.execution_step("with_report", work, num_iter=4, report_net=report, report_interval=100)
    _run(step)
    assert workspace.FetchBlob("seen") == 4


def test_only_once_runs_a_stoppable_step_once():
    _feed(x=np.float32(0), one=np.float32(1), never=False)
    net = core.Net("inc")
    net.Add(["x", "one"], "x")
    _run(core.execution_step("once", net, should_stop_blob="never", only_once=True))
    assert workspace.FetchBlob("x") == 1


def test_a_stop_blob_ends_the_loop_after_the_net_that_sets_it():
    _feed(x=np.float32(0), one=np.float32(1), limit=np.float32(3))
    net = core.Net("count_to_three")
    net.Add(["x", "one"], "x")
    net.GE(["x", "limit"], "done")
    _run(core.execution_step("loop", net, should_stop_blob="done"))
    assert workspace.FetchBlob("x") == 3


def test_the_first_error_of_a_concurrent_instance_is_raised():
    bad = core.Net("bad")
    bad.Copy("missing_blob", "y")
    inner = core.execution_step("inner", bad)
    outer = core.execution_step("outer", [inner])
    outer.SetNumConcurrentInstances(3)
    with pytest.raises(Caffe2Error, match="missing_blob"):
        _run(outer)


def test_atomic_iter_loses_no_increment_across_concurrent_substeps():
    """Five nets on five threads, 150 iterations each, one shared counter: every
    increment lands (a private copy of the counter on one thread would lose others'),
    and a Copy of the counter keeps the value it had."""
    for trial in range(3):
        ws = workspace.C.Workspace()
        init_net = core.Net("init_net")
        mutex = init_net.CreateMutex([], ["iter_mutex"])
        ws.create_blob("iter").feed(np.asarray([7]).astype(np.int64))
        steps = core.ExecutionStep("concurrent_steps", num_iter=150)
        for i in range(5):
            net = core.Net("net_%d" % i)
            net.AtomicIter([mutex, "iter"], ["iter"])
            steps.AddSubstep(core.ExecutionStep("step", [net]))
        steps.SetConcurrentSubsteps(True)
        plan = core.Plan("plan")
        plan.AddStep(steps)
        ws.run(init_net)
        ws.run(plan)
        assert ws.blobs["iter"].fetch().tolist() == [7 + 750]
        snapshot = core.Net("snapshot")
        snapshot.Copy("iter", "iter_before")
        ws.run(snapshot)
        ws.run(plan)
        assert ws.blobs["iter"].fetch().tolist() == [7 + 1500]
        assert ws.blobs["iter_before"].fetch().tolist() == [7 + 750]
