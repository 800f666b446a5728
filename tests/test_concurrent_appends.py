"""AtomicAppend from nets running at once (concurrent substeps: dataset writers on
several threads) loses no rows; takes_blobs kernels run on the observed path."""
import sys

import numpy as np
import pytest

from caffe2py import core, workspace


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def test_concurrent_appends_keep_every_row():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)                     # switch threads often: races show up
    try:
        _append_from_threads()
    finally:
        sys.setswitchinterval(previous)


def _append_from_threads():
    threads, rounds = 8, 60
    init = core.Net("init")
    init.CreateMutex([], "mutex")
    init.ConstantFill([], "acc", shape=[0], value=0.0)
    workspace.RunNetOnce(init)
    steps = []
    for t in range(threads):
        workspace.FeedBlob("row_%d" % t, np.array([float(t)], np.float32))
        net = core.Net("append_%d" % t)
        net.AtomicAppend(["mutex", "acc", "row_%d" % t], ["acc"])
        net.Copy("acc", "seen_%d" % t)            # a later op of the run reads the appended value
        for k in range(60):                         # keeps the run going after its append
            net.Copy("row_%d" % t, "pad_%d_%d" % (t, k))
        steps.append(core.execution_step("s%d" % t, net, num_iter=rounds))
    plan = core.Plan("appends")
    plan.AddStep(core.execution_step("all", steps, concurrent_substeps=True))
    workspace.RunPlan(plan)
    acc = workspace.FetchBlob("acc")
    assert sorted(acc.tolist()) == sorted(float(t) for t in range(threads) for _ in range(rounds))
    for t in range(threads):
        assert float(t) in workspace.FetchBlob("seen_%d" % t).tolist()


def test_observed_runs_pass_the_blob_view_once():
    init = core.Net("q_init")
    init.CreateBlobsQueue([], "queue", capacity=2, num_blobs=1)
    workspace.RunNetOnce(init)
    workspace.FeedBlob("x", np.arange(3, dtype=np.float32))
    enqueue = core.Net("enqueue")
    enqueue.SafeEnqueueBlobs(["queue", "x"], ["x", "status"])
    workspace.RunNetOnce(enqueue)
    dequeue = core.Net("dequeue")
    dequeue.SafeDequeueBlobs(["queue"], ["y", "status2"])
    workspace.CreateNet(dequeue)
    workspace.current_workspace().get_net("dequeue").add_observer("TimeObserver")
    workspace.RunNet("dequeue")
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 1.0, 2.0])


def test_an_observed_append_is_in_the_workspace():
    init = core.Net("init2")
    init.CreateMutex([], "m")
    init.ConstantFill([], "acc", shape=[0], value=0.0)
    workspace.RunNetOnce(init)
    workspace.FeedBlob("rows", np.array([1.0, 2.0], np.float32))
    net = core.Net("append_observed")
    net.AtomicAppend(["m", "acc", "rows"], ["acc"])
    net.Copy("acc", "copy")
    workspace.CreateNet(net)
    workspace.current_workspace().get_net(net.Name()).add_observer("TimeObserver")
    workspace.RunNet(net.Name())
    workspace.RunNet(net.Name())
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), [1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(workspace.FetchBlob("copy"), [1.0, 2.0, 1.0, 2.0])


def test_an_append_after_an_earlier_write_of_the_same_run_keeps_both():
    net = core.Net("fill_then_append")
    net.CreateMutex([], "m3")
    net.ConstantFill([], "acc", shape=[0], value=0.0)          # reset in this run
    workspace.FeedBlob("rows", np.array([4.0, 5.0], np.float32))
    net.AtomicAppend(["m3", "acc", "rows"], ["acc"])
    net.AtomicAppend(["m3", "acc", "rows"], ["acc"])
    net.Copy("acc", "copied")
    workspace.FeedBlob("acc", np.array([9.0], np.float32))     # replaced by the reset
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), [4.0, 5.0, 4.0, 5.0])
    np.testing.assert_array_equal(workspace.FetchBlob("copied"), [4.0, 5.0, 4.0, 5.0])
