"""The DAG nets' measured decision (caffe2py/parallel_executor.py): once the work
estimate says workers could pay, the next runs alternate parallel and serial, timed,
and the plan keeps its workers only when the parallel runs are faster by
TRIAL_MARGIN. Branches that sleep (the GIL released, as in a big kernel) overlap
on workers and win; a parallel path made slower than the serial one loses and the
plan goes back to serial for good. Every run, trial or not, gives the same results."""
import threading
import time

import numpy as np
import pytest

from caffe2py import core, net_dag, parallel_executor, workspace
from caffe2py.registry import OpSchema, register_kernel, register_schema

register_schema(OpSchema("_DecisionSleep", num_inputs=1, num_outputs=1))
_SEEN = []


@register_kernel("_DecisionSleep")
def _sleep(ctx):
    def run(x):
        _SEEN.append(threading.get_ident())
        time.sleep(0.03)
        return x * 2.0 + 1.0
    return run


@pytest.fixture(autouse=True)
def fresh_workspace(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_NUM_THREADS", "2")
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)      # the sleeps have no flops: try them
    monkeypatch.setattr(parallel_executor, "TRIAL_RUNS", 3)
    workspace.ResetWorkspace()
    _SEEN.clear()
    yield
    workspace.ResetWorkspace()


def _two_sleeping_branches(name):
    net = core.Net(name)
    net.Proto().type = "async_scheduling"
    net.Proto().num_workers = 2
    for b in ("l", "r"):
        net._DecisionSleep("x", b + "1")
        net._DecisionSleep(b + "1", b + "2")
    net.Sum(["l2", "r2"], "out")
    return net


def _runs(net, n):
    workspace.FeedBlob("x", np.arange(6, dtype=np.float32))
    workspace.CreateNet(net, overwrite=True)
    outs = []
    for _ in range(n):
        workspace.RunNet(net.Name())
        outs.append(workspace.FetchBlob("out").copy())
    return outs, workspace.GetNet(net.Name()).plan.branches


def _expected():
    x = np.arange(6, dtype=np.float32)
    y = (x * 2 + 1) * 2 + 1
    return y + y


def test_overlapping_branches_keep_their_workers():
    # x is fed before CreateNet: the estimate decides at compile time, so run 1 is the
    # parallel warm-up, runs 2-7 alternate serial / parallel, run 8 is parallel
    outs, branches = _runs(_two_sleeping_branches("wins"), 8)
    assert branches.trial is None and branches.active is True
    m = branches.measured
    assert m["parallel_ms"] < 0.8 * m["serial_ms"], m      # 2 x 60 ms serial vs ~60 ms on two workers
    assert branches.stats["parallel_runs"] == 5             # warm-up + 3 timed + run 8
    for out in outs:
        np.testing.assert_array_equal(out, _expected())
    before = branches.stats["parallel_runs"]
    workspace.RunNet("wins")
    assert branches.stats["parallel_runs"] == before + 1


def test_a_slower_parallel_path_goes_back_to_serial(monkeypatch):
    """Workers that lose (here: 0.2 s of overhead added to every parallel run) are
    dropped after the trial: later runs never touch the pool again."""
    slow = parallel_executor.BranchSchedule._run_parallel

    def slower(self, blobs):
        time.sleep(0.2)
        slow(self, blobs)
    monkeypatch.setattr(parallel_executor.BranchSchedule, "_run_parallel", slower)
    outs, branches = _runs(_two_sleeping_branches("loses"), 8)
    assert branches.trial is None and branches.active is False
    assert branches.measured["parallel_ms"] > branches.measured["serial_ms"]
    runs = branches.stats["parallel_runs"]
    _SEEN.clear()
    workspace.RunNet("loses")
    assert branches.stats["parallel_runs"] == runs
    assert set(_SEEN) == {threading.get_ident()}
    for out in outs + [workspace.FetchBlob("out")]:
        np.testing.assert_array_equal(out, _expected())


def test_the_trial_alternates_serial_and_parallel_runs():
    """During the trial the runs take turns: parallel runs use two threads, serial ones
    only the caller's."""
    net = _two_sleeping_branches("turns")
    workspace.FeedBlob("x", np.arange(6, dtype=np.float32))
    workspace.CreateNet(net, overwrite=True)
    me = threading.get_ident()
    kinds = []
    for _ in range(8):
        _SEEN.clear()
        workspace.RunNet("turns")
        kinds.append("serial" if set(_SEEN) == {me} else "parallel")
    # the warm-up parallel run (decided at compile time), then serial/parallel x 3, then
    # the decision: parallel
    assert kinds == ["parallel"] + ["serial", "parallel"] * 3 + ["parallel"]


def test_no_trial_when_trial_runs_is_zero(monkeypatch):
    monkeypatch.setattr(parallel_executor, "TRIAL_RUNS", 0)
    _, branches = _runs(_two_sleeping_branches("trusted"), 3)
    assert branches.active is True and branches.measured is None and branches.stats["parallel_runs"] == 3
