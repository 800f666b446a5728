"""The DAG nets' measured decision (caffe2py/parallel_executor.py): once the work
estimate says workers could pay, the next runs alternate parallel and serial, timed,
and the plan keeps its workers only when the parallel runs are faster by
TRIAL_MARGIN. Branches that sleep (the GIL released, as in a big kernel) overlap
on workers and win; a parallel path made slower than the serial one loses and the
plan goes back to serial for good. Every run, trial or not, gives the same results."""
import sys
import threading
import time

import numpy as np
import pytest

from caffe2py import core, net_dag, parallel_executor, workspace
from caffe2py.registry import OpSchema, register_kernel, register_schema

register_schema(OpSchema("_DecisionSleep", num_inputs=1, num_outputs=1))
_SEEN = []
_NAP = 0.03         # seconds each _DecisionSleep op sleeps


@register_kernel("_DecisionSleep")
def _sleep(ctx):
    def run(x):
        _SEEN.append(threading.get_ident())
        time.sleep(_NAP)
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
    # parallel warm-up, runs 2-13 are 3 rounds of serial, serial, parallel, parallel,
    # run 14 is parallel
    outs, branches = _runs(_two_sleeping_branches("wins"), 14)
    assert branches.trial is None and branches.active is True
    m = branches.measured
    assert m["parallel_ms"] < 0.8 * m["serial_ms"], m      # 2 x 60 ms serial vs ~60 ms on two workers
    assert branches.stats["parallel_runs"] == 8             # warm-up + 3 x 2 + run 14
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
    outs, branches = _runs(_two_sleeping_branches("loses"), 14)
    assert branches.trial is None and branches.active is False
    assert branches.measured["parallel_ms"] > branches.measured["serial_ms"]
    runs = branches.stats["parallel_runs"]
    _SEEN.clear()
    workspace.RunNet("loses")
    assert branches.stats["parallel_runs"] == runs
    assert set(_SEEN) == {threading.get_ident()}
    for out in outs + [workspace.FetchBlob("out")]:
        np.testing.assert_array_equal(out, _expected())


def test_the_trial_alternates_pairs_of_serial_and_parallel_runs():
    """During the trial pairs of runs take turns: parallel runs use two threads, serial
    ones only the caller's."""
    net = _two_sleeping_branches("turns")
    workspace.FeedBlob("x", np.arange(6, dtype=np.float32))
    workspace.CreateNet(net, overwrite=True)
    me = threading.get_ident()
    kinds = []
    for _ in range(14):
        _SEEN.clear()
        workspace.RunNet("turns")
        kinds.append("serial" if set(_SEEN) == {me} else "parallel")
    # the warm-up parallel run (decided at compile time), then 3 rounds of two serial and
    # two parallel runs, then the decision: parallel
    assert kinds == ["parallel"] + ["serial", "serial", "parallel", "parallel"] * 3 + ["parallel"]


def test_no_trial_when_trial_runs_is_zero(monkeypatch):
    monkeypatch.setattr(parallel_executor, "TRIAL_RUNS", 0)
    _, branches = _runs(_two_sleeping_branches("trusted"), 3)
    assert branches.active is True and branches.measured is None and branches.stats["parallel_runs"] == 3


def test_each_timed_run_follows_a_run_of_its_own_kind(monkeypatch):
    """A run after one of the other kind pays for it (on a 2-CPU machine a serial run's
    2-thread team keeps spinning into the next run, on the core a parallel run's pool
    thread needs). Fake clock: serial runs take 2, parallel runs 1, or 3 right after a
    serial run. The trial times only runs that follow their own kind, so it sees 1
    against 2 and keeps the workers (timing every parallel run right after a serial one,
    it saw 3 against 2 and dropped them)."""
    from caffe2py import executor
    state = {"now": 0.0, "last": None}
    run_parallel, run_serial = parallel_executor.BranchSchedule._run_parallel, executor.Plan.run_serial

    def fake_parallel(self, blobs):
        run_parallel(self, blobs)
        state["now"] += 3.0 if state["last"] == "serial" else 1.0
        state["last"] = "parallel"

    def fake_serial(self, blobs):
        run_serial(self, blobs)
        state["now"] += 2.0
        state["last"] = "serial"
    monkeypatch.setattr(parallel_executor, "_clock", lambda: state["now"])
    monkeypatch.setattr(parallel_executor.BranchSchedule, "_run_parallel", fake_parallel)
    monkeypatch.setattr(executor.Plan, "run_serial", fake_serial)
    monkeypatch.setattr(sys.modules[__name__], "_NAP", 0.0)
    outs, branches = _runs(_two_sleeping_branches("paired"), 14)
    assert branches.trial is None and branches.active is True
    assert branches.measured == {"serial_ms": 2000.0, "parallel_ms": 1000.0}
    for out in outs:
        np.testing.assert_array_equal(out, _expected())


def _fake_clock_runs(monkeypatch, parallel_time, serial_time=2.0, runs=150, name="fake"):
    """Runs of the sleeping net on a fake clock (fake seconds; TRIAL_SETTLE 10 of them):
    parallel_time(state) and serial_time say how long each kind of run takes."""
    from caffe2py import executor
    state = {"now": 0.0, "serial_end": -100.0, "parallel_runs": 0}
    run_parallel, run_serial = parallel_executor.BranchSchedule._run_parallel, executor.Plan.run_serial

    def fake_parallel(self, blobs):
        run_parallel(self, blobs)
        state["now"] += parallel_time(state)
        state["parallel_runs"] += 1

    def fake_serial(self, blobs):
        run_serial(self, blobs)
        state["now"] += serial_time
        state["serial_end"] = state["now"]
    monkeypatch.setattr(parallel_executor, "_clock", lambda: state["now"])
    monkeypatch.setattr(parallel_executor, "TRIAL_SETTLE", 10.0)
    monkeypatch.setattr(parallel_executor.BranchSchedule, "_run_parallel", fake_parallel)
    monkeypatch.setattr(executor.Plan, "run_serial", fake_serial)
    monkeypatch.setattr(sys.modules[__name__], "_NAP", 0.0)
    outs, branches = _runs(_two_sleeping_branches(name), runs)
    for out in outs:
        np.testing.assert_array_equal(out, _expected())
    return branches, state


def test_timed_runs_wait_until_the_other_kinds_threads_have_settled(monkeypatch):
    """A serial run's team keeps spinning for a while (here: a parallel run started less
    than 8 fake seconds after a serial one takes 3, else 1; a serial run takes 2). One
    untimed run (1-3 seconds) is not enough to clear it: the trial runs untimed parallel
    runs until TRIAL_SETTLE has passed, so it times 1 against 2 and keeps the workers
    (timing the second run after the switch, it saw 3 against 2 and dropped them)."""
    branches, state = _fake_clock_runs(
        monkeypatch, lambda s: 3.0 if s["now"] - s["serial_end"] < 8.0 else 1.0, name="settle")
    assert branches.trial is None and branches.active is True
    assert branches.measured == {"serial_ms": 2000.0, "parallel_ms": 1000.0}


def test_runs_while_kernels_compile_in_the_background_are_not_timed(monkeypatch):
    """A kernel still compiling runs as its NumPy twin (here: parallel runs take 5 while
    kernels wait, 1 after): those runs are timed again once machine code runs."""
    calls = {"n": 0}

    def waiting():
        calls["n"] += 1
        return calls["n"] <= 12          # the first timed runs see kernels compiling
    monkeypatch.setattr(parallel_executor, "kernels_waiting", waiting)
    branches, state = _fake_clock_runs(monkeypatch, lambda s: 5.0 if calls["n"] <= 12 else 1.0, name="compiling")
    assert branches.trial is None and branches.active is True
    assert branches.measured["parallel_ms"] == 1000.0
    assert state["parallel_runs"] > 8        # more than the trial's usual parallel runs


def test_a_trial_waits_for_compiles_only_so_long(monkeypatch):
    """Kernels that never finish compiling (never called again) do not keep the plan in
    its trial: after TRIAL_COMPILE_WAIT seconds every run is timed."""
    monkeypatch.setattr(parallel_executor, "kernels_waiting", lambda: True)
    monkeypatch.setattr(parallel_executor, "TRIAL_COMPILE_WAIT", 30.0)
    branches, _ = _fake_clock_runs(monkeypatch, lambda s: 1.0, name="bounded")
    assert branches.trial is None and branches.measured is not None
