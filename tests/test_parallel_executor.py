"""Branch parallelism of the DAG net types (caffe2py/net_dag.py, parallel_executor.py):
independent chains run on worker threads with the same results as `simple`, the
dependency rules hold, a failing op leaves the workspace as it was."""
import threading
import time

import numpy as np
import pytest

from caffe2py import core, net_dag, parallel_executor, workspace
from caffe2py.args import make_argument
from caffe2py.errors import OperatorError
from caffe2py.registry import OpSchema, register_kernel, register_schema


@pytest.fixture(autouse=True)
def fresh_workspace(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_NUM_THREADS", "2")      # a thread budget of two on any machine
    # these tests are about the parallel path itself: no timed trial between the two
    # paths (tests/test_branch_decision.py tests that)
    monkeypatch.setattr(parallel_executor, "TRIAL_RUNS", 0)
    workspace.ResetWorkspace()
    _PROBE.clear()
    yield
    workspace.ResetWorkspace()


def f32(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# -- test ops: a probe recording its thread (and, when armed, waiting for its twin in
# the other branch: only branches running at once get past the barrier), a switchable
# failure, a sleep
_PROBE = {}
register_schema(OpSchema("_TestBranchProbe", num_inputs=1, num_outputs=1))
register_schema(OpSchema("_TestFailSwitch", num_inputs=1, num_outputs=1))
register_schema(OpSchema("_TestSleep", num_inputs=1, num_outputs=1))


@register_kernel("_TestBranchProbe")
def _probe(ctx):
    from caffe2py.kernels.cpu.runtime.jit import team_size
    name = ctx.outputs[0]

    def run(x):
        barrier = _PROBE.get("barrier")
        if barrier is not None:
            barrier.wait()
        _PROBE.setdefault("seen", []).append((name, threading.get_ident(), team_size()))
        return x + 1.0
    return run


@register_kernel("_TestFailSwitch")
def _fail_switch(ctx):
    def run(x):
        if _PROBE.get("fail"):
            time.sleep(0.05)        # the other branch's ops finish meanwhile
            raise _PROBE["fail"]
        return x * 2.0
    return run


@register_kernel("_TestSleep")
def _sleep(ctx):
    def run(x):
        time.sleep(0.1)
        return x + 0.0
    return run


def _run_twice(net):
    """Create and run a net twice (a net whose work shape inference cannot see, such as
    the test ops', is decided by its first run)."""
    workspace.CreateNet(net, overwrite=True)
    workspace.RunNet(net.Name())
    workspace.RunNet(net.Name())
    return workspace.GetNet(net.Name()).plan.branches


def _simple_and_parallel(simple_net, parallel_net, blobs):
    """{blob: value} after a run of each net (after a warm-up run of each, and with
    the kernels compiled, so both run the same machine code); the simple net runs
    with the team a branch gets (thread budget // 2), and with the whole team."""
    from caffe2py.devices import wait_for_compiled_kernels
    from caffe2py.kernels.cpu.runtime.jit import team_limit
    from caffe2py.parallel_executor import thread_budget
    for net in (simple_net, parallel_net):
        workspace.CreateNet(net, overwrite=True)
        workspace.RunNet(net.Name())
    wait_for_compiled_kernels()
    results = []
    for net, limit in ((simple_net, thread_budget() // 2), (simple_net, thread_budget()), (parallel_net, None)):
        with team_limit(limit or thread_budget()):
            workspace.RunNet(net.Name())
        results.append({b: workspace.FetchBlob(b) for b in blobs})
    return results + [workspace.GetNet(parallel_net.Name()).plan.branches]


def _typed(net, net_type, workers, fusion=True):
    net.Proto().type = net_type
    if workers:
        net.Proto().num_workers = workers
    if not fusion:      # one step per op: the dependency tests name ops by index
        net.Proto().arg.add().CopyFrom(make_argument("fusion", 0))
    return net


# --------------------------------------------------------------------------- results

def _conv_reference(x, w, b, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))   # n c h w kh kw
    return np.einsum("nchwij,mcij->nmhw", windows, w, dtype=np.float64) + b[None, :, None, None]


def _inception(name, net_type, workers):
    net = core.Net(name)
    outs = []
    for b, k in enumerate((3, 5)):
        net.Conv(["x", "w%d" % b, "b%d" % b], "c%d" % b, kernel=k, pad=k // 2)
        net.Relu("c%d" % b, "r%d" % b)
        outs.append("r%d" % b)
    net.Concat(outs, ["out", "split"], axis=1)
    return _typed(net, net_type, workers)


@pytest.mark.parametrize("net_type", ["dag", "async_scheduling"])
def test_inception_branches_run_on_workers_and_match_simple(net_type):
    x = f32(1, 16, 24, 24)
    ws = {"w0": f32(32, 16, 3, 3, seed=1, scale=0.1), "w1": f32(32, 16, 5, 5, seed=2, scale=0.1),
          "b0": f32(32, seed=3), "b1": f32(32, seed=4)}
    workspace.FeedBlob("x", x)
    for k, v in ws.items():
        workspace.FeedBlob(k, v)
    same_team, simple, parallel, branches = _simple_and_parallel(
        _inception("inc_simple", "simple", 0), _inception("inc_par", net_type, 2), ["out"])
    assert branches.active and branches.stats["parallel_runs"] >= 1
    # one branch on a pool thread, the other and the Concat on the run's own thread
    assert branches.stats["worker_ops"] + branches.stats["caller_ops"] == 5 * branches.stats["parallel_runs"]
    assert branches.stats["worker_chains"] == branches.stats["parallel_runs"]
    # a branch's kernels split work over fewer threads: bitwise the simple net's with
    # that team; the whole team's blocking may round differently (GEMM column blocks)
    np.testing.assert_array_equal(parallel["out"], same_team["out"])
    np.testing.assert_allclose(parallel["out"], simple["out"], rtol=1e-5, atol=1e-5)
    expected = np.concatenate([np.maximum(_conv_reference(x, ws["w0"], ws["b0"], 1), 0),
                               np.maximum(_conv_reference(x, ws["w1"], ws["b1"], 2), 0)], axis=1)
    np.testing.assert_allclose(parallel["out"], expected, rtol=1e-4, atol=1e-4)


def _towers(name, net_type, workers):
    net = core.Net(name)
    for t in ("u", "i"):
        net.FC([t, t + "_w1", t + "_b1"], t + "_h")
        net.Relu(t + "_h", t + "_h")                     # in place
        net.FC([t + "_h", t + "_w2", t + "_b2"], t + "_e")
    net.Mul(["u_e", "i_e"], "prod")
    net.ReduceBackSum("prod", "score")
    return _typed(net, net_type, workers)


def test_two_tower_fc_net_gives_the_bits_of_simple_with_a_branchs_team():
    blobs = {"u": f32(64, 128), "i": f32(64, 128, seed=1)}
    for t, seed in (("u", 2), ("i", 3)):
        blobs.update({t + "_w1": f32(256, 128, seed=seed, scale=0.1), t + "_b1": f32(256, seed=seed + 10),
                      t + "_w2": f32(64, 256, seed=seed + 20, scale=0.1), t + "_b2": f32(64, seed=seed + 30)})
    for k, v in blobs.items():
        workspace.FeedBlob(k, v)
    same_team, simple, parallel, branches = _simple_and_parallel(
        _towers("towers_simple", "simple", 0), _towers("towers_par", "async_scheduling", 2), ["u_e", "i_e", "score"])
    assert branches.active and branches.stats["worker_chains"] >= 2
    for b, value in same_team.items():
        np.testing.assert_array_equal(parallel[b], value)
        np.testing.assert_allclose(parallel[b], simple[b], rtol=1e-5, atol=1e-5)
    tower = {t: np.maximum(blobs[t] @ blobs[t + "_w1"].T + blobs[t + "_b1"], 0) @ blobs[t + "_w2"].T
             + blobs[t + "_b2"] for t in ("u", "i")}
    np.testing.assert_allclose(parallel["score"], (tower["u"] * tower["i"]).sum(axis=1),
                               rtol=1e-4, atol=1e-3)


# --------------------------------------------------------------------------- threads

def _probe_net(name, net_type="async_scheduling", workers=2):
    net = core.Net(name)
    net._TestBranchProbe("a", "pa")
    net._TestBranchProbe("b", "pb")
    net.Add(["pa", "pb"], "sum")
    return _typed(net, net_type, workers)


def test_branches_run_at_once_on_worker_threads_with_a_team_each_within_the_budget(monkeypatch):
    from caffe2py.parallel_executor import thread_budget
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4, seed=1))
    net = _probe_net("probe")
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    _PROBE["seen"] = []
    _PROBE["barrier"] = threading.Barrier(2, timeout=20)   # passes only if both run at once
    workspace.RunNet(net.Name())
    threads = {name: ident for name, ident, _ in _PROBE["seen"]}
    assert threads["pa"] != threads["pb"]
    assert threading.get_ident() in threads.values()     # the run's own thread runs one branch
    teams = [size for _, _, size in _PROBE["seen"]]
    assert all(2 * size <= thread_budget() for size in teams)
    np.testing.assert_array_equal(workspace.FetchBlob("sum"), (f32(4) + 1.0) + (f32(4, seed=1) + 1.0))


def test_a_net_run_once_runs_its_branches_at_once_when_the_fed_shapes_show_the_work(monkeypatch):
    # decided at compile time from the fed blobs' shapes: the first run is parallel
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4, seed=1))
    _PROBE["barrier"] = threading.Barrier(2, timeout=20)   # passes only if both run at once
    workspace.RunNetOnce(_probe_net("once"))
    assert len({ident for _, ident, _ in _PROBE["seen"]}) == 2


def test_work_is_estimated_from_the_schemas_flops_through_shape_inference():
    from caffe2py.executor import compile_net
    blobs = {"x": f32(1, 16, 24, 24), "w0": f32(32, 16, 3, 3), "w1": f32(32, 16, 5, 5),
             "b0": f32(32), "b1": f32(32)}
    plan = compile_net(_inception("inc_work", "dag", 2).Proto(), blobs.keys(), blob_values=blobs)
    assert plan.branches.active
    # the 3x3 branch (the lighter one) is what overlaps: its conv's multiply-adds x 2,
    # plus its Relu's one flop per element (32x24x24)
    conv3 = 2 * 32 * 16 * 9 * 24 * 24
    assert plan.branches.overlap_work == conv3 + 32 * 24 * 24


def test_a_chain_that_never_runs_beside_another_runs_on_the_runs_thread_with_the_branch_team(monkeypatch):
    """The stem and the join run alone, on the run's own thread, on the branches' team
    (budget // workers), not the whole team: a team of 2's regions leave libgomp's idle
    thread spinning into the next branches, on the core the pool thread needs."""
    from caffe2py.parallel_executor import thread_budget
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("x", f32(4))
    net = core.Net("stem_branches_join")
    net._TestBranchProbe("x", "stem")
    net._TestBranchProbe("stem", "left")
    net._TestBranchProbe("stem", "right")
    net.Add(["left", "right"], "joined")
    net._TestBranchProbe("joined", "head")
    branches = _run_twice(_typed(net, "dag", 2))
    assert branches.active
    assert branches.graph.chain_alone == [True, False, False, True]    # stem, left, right, join+head
    seen = {name: (ident, size) for name, ident, size in _PROBE["seen"][-4:]}
    me = threading.get_ident()
    assert {name: size for name, (_, size) in seen.items()} == {
        "stem": thread_budget() // 2, "left": thread_budget() // 2, "right": thread_budget() // 2,
        "head": thread_budget() // 2}
    assert seen["stem"][0] == seen["head"][0] == me
    assert seen["left"][0] != seen["right"][0]


@pytest.mark.parametrize("net_type, workers", [("simple", 2), ("async_scheduling", 1), ("dag", 1)])
def test_simple_nets_and_single_workers_stay_serial(monkeypatch, net_type, workers):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4))
    assert _run_twice(_probe_net("serial", net_type, workers)) is None
    assert {ident for _, ident, _ in _PROBE["seen"]} == {threading.get_ident()}


def test_a_cheap_net_stays_serial():
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4))
    branches = _run_twice(_probe_net("cheap"))
    assert branches is not None and branches.active is False
    assert {ident for _, ident, _ in _PROBE["seen"]} == {threading.get_ident()}


def test_num_workers_unset_runs_serially(monkeypatch):
    """Without num_workers a DAG net runs its ops in order on the run's thread, each op
    on the whole team (branch workers only where the net asks for them)."""
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4))
    assert _run_twice(_probe_net("default_workers", "dag", 0)) is None
    assert {ident for _, ident, _ in _PROBE["seen"]} == {threading.get_ident()}


# --------------------------------------------------------------------------- failure

def _failing_net():
    # branch 1 updates table rows in place; branch 2 fails when switched on
    net = core.Net("failing")
    net.ScatterWeightedSum(["table", "w0", "idx", "rows", "w1"], "table")
    net.Relu("table", "t_out")
    net._TestFailSwitch("x", "f")
    net.Add(["f", "x"], "g")
    return _typed(net, "async_scheduling", 2)


@pytest.mark.parametrize("error", [ValueError("refused"), KeyboardInterrupt()])
def test_a_failing_op_in_one_branch_leaves_the_workspace_as_it_was(monkeypatch, error):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("table", f32(6, 3))
    workspace.FeedBlob("w0", np.array([0.5], np.float32))
    workspace.FeedBlob("w1", np.array([2.0], np.float32))
    workspace.FeedBlob("idx", np.array([1, 4], np.int64))
    workspace.FeedBlob("rows", f32(2, 3, seed=1))
    workspace.FeedBlob("x", f32(3, seed=2))
    net = _failing_net()
    workspace.CreateNet(net)
    name = net.Name()
    workspace.RunNet(name)
    branches = workspace.GetNet(name).plan.branches
    assert branches.active
    before = {b: workspace.FetchBlob(b).copy() for b in workspace.Blobs()}
    _PROBE["fail"] = error
    if isinstance(error, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            workspace.RunNet(name)
    else:
        with pytest.raises(OperatorError, match="_TestFailSwitch #2.*refused"):
            workspace.RunNet(name)
    assert branches.stats["worker_chains"] >= 1      # the table's branch ran and was undone
    assert sorted(workspace.Blobs()) == sorted(before)
    for blob, value in before.items():
        np.testing.assert_array_equal(workspace.FetchBlob(blob), value)
    _PROBE.pop("fail")
    workspace.RunNet(name)                      # runs again after a failure
    expected = before["table"].copy()
    expected[[1, 4]] = expected[[1, 4]] * 0.5 + before["rows"] * 2.0
    np.testing.assert_allclose(workspace.FetchBlob("table"), expected, rtol=1e-6)


# --------------------------------------------------------------------------- dependencies

def test_write_after_read_waits_for_the_reader(monkeypatch):
    # op 3 overwrites w, which op 2 reads; op 2 waits for a slow branch, op 3 for nothing
    # else: run early, it would change what op 2 reads
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    x, w = f32(5), f32(5, seed=1)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("w", w)
    net = core.Net("war")
    net._TestSleep("x", "s")
    net.Relu("x", "s2")
    net.Sum(["s", "s2", "w"], "z")
    net.Scale("x", "w", scale=3.0)
    net = _typed(net, "dag", 2, fusion=False)
    parents = net_dag.dependencies(workspace_plan_steps(net))
    assert 2 in parents[3]                           # the write waits for the read
    branches = _run_twice(net)
    assert branches.active
    np.testing.assert_array_equal(workspace.FetchBlob("z"), x + np.maximum(x, 0) + 3.0 * x)
    np.testing.assert_array_equal(workspace.FetchBlob("w"), 3.0 * x)


def test_write_after_write_keeps_the_later_value(monkeypatch):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    x = f32(5)
    workspace.FeedBlob("x", x)
    net = core.Net("waw")
    net._TestSleep("x", "s")
    net.Relu("s", "t")                   # slow branch writes t first
    net.Negative("x", "t")               # ... and this later op writes it last
    net.Relu("x", "other")
    net = _typed(net, "dag", 2, fusion=False)
    assert 1 in net_dag.dependencies(workspace_plan_steps(net))[2]
    assert _run_twice(net).active
    np.testing.assert_array_equal(workspace.FetchBlob("t"), -x)


def workspace_plan_steps(net):
    from caffe2py.executor import compile_net
    return compile_net(net.Proto(), workspace.Blobs()).steps


def test_in_place_chains_in_parallel_branches(monkeypatch):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    a, b = f32(7), f32(7, seed=1)
    workspace.FeedBlob("a", a)
    workspace.FeedBlob("b", b)
    net = core.Net("inplace")
    net.Relu("a", "a")
    net.Scale("a", "a", scale=2.0)
    net.Sigmoid("b", "b")
    net.Scale("b", "b", scale=3.0)
    net.Add(["a", "b"], "c")
    net.Relu("c", "a")                   # writes a again, after the reads of a
    branches = _run_twice(_typed(net, "async_scheduling", 2))
    assert branches.active and branches.stats["worker_chains"] >= 2
    # two runs: the second starts from what the first left in a and b
    for _ in range(2):
        a2, b2 = np.maximum(a, 0) * 2.0, 3.0 / (1.0 + np.exp(-b))
        c = a2 + b2
        a, b = np.maximum(c, 0), b2
    np.testing.assert_allclose(workspace.FetchBlob("c"), c, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("a"), a, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("b"), b, rtol=1e-6)


def test_control_flow_keeps_its_place_between_parallel_branches_on_the_runs_thread(monkeypatch):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    then = core.Net("then")
    then.Add(["x", "y"], "x")            # reads what both branches before it wrote
    then._TestBranchProbe("x", "then_probe")    # records the thread the If runs on
    net = core.Net("cf")
    net.Relu("a", "x")
    net.Sigmoid("b", "y")
    net.If(["c"], ["x"], then_net=then.Proto())
    net.Scale("x", "after_x", scale=2.0)
    net.Scale("y", "after_y", scale=2.0)
    net = _typed(net, "async_scheduling", 2, fusion=False)
    steps = workspace_plan_steps_with(net, {"a": f32(3), "b": f32(3), "c": np.array(True)})
    parents = net_dag.dependencies(steps)
    assert parents[2] == {0, 1} and parents[3] == {2} and parents[4] == {2}
    a, b = f32(3), f32(3, seed=1)
    workspace.FeedBlob("a", a)
    workspace.FeedBlob("b", b)
    workspace.FeedBlob("c", np.array(True))
    branches = _run_twice(net)
    assert branches.active and branches.stats["worker_chains"] >= 4
    # the If (a barrier) ran on the run's own thread, as under simple
    assert [ident for name, ident, _ in _PROBE["seen"]][-1] == threading.get_ident()
    x = np.maximum(a, 0) + 1 / (1 + np.exp(-b))
    np.testing.assert_allclose(workspace.FetchBlob("after_x"), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("after_y"), 2 / (1 + np.exp(-b)), rtol=1e-6)


def workspace_plan_steps_with(net, blobs):
    from caffe2py.executor import compile_net
    return compile_net(net.Proto(), blobs.keys()).steps


def test_ops_with_shared_state_are_barriers():
    from caffe2py.executor import compile_net
    net = core.Net("ordered")
    net.Relu("a", "r")
    net.Print("a", [])
    net.Sigmoid("b", "s")
    steps = compile_net(net.Proto(), ["a", "b"]).steps
    assert net_dag.is_ordered(steps[1]) and not net_dag.is_ordered(steps[0])
    assert net_dag.dependencies(steps) == [set(), {0}, {1}]


@pytest.fixture
def default_sigint():
    """Ctrl-C raises KeyboardInterrupt in this test even when the suite runs with SIGINT
    ignored (a shell's background job starts Python that way)."""
    import signal
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_branches_run_stops_the_run_and_leaves_the_workspace(monkeypatch, default_sigint):
    import signal
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("x", f32(3))
    net = core.Net("interrupted")
    net._TestSleep("x", "s1")
    net._TestSleep("x", "s2")
    net.Add(["s1", "s2"], "y")
    net = _typed(net, "async_scheduling", 2, fusion=False)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    assert workspace.GetNet(net.Name()).plan.branches.active
    workspace.FeedBlob("x", f32(3, seed=1))
    before = {b: workspace.FetchBlob(b).copy() for b in workspace.Blobs()}
    main = threading.get_ident()
    timer = threading.Timer(0.03, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        workspace.RunNet(net.Name())
    timer.join()
    assert time.perf_counter() - t0 >= 0.09          # the sleeping chains in flight were waited for
    for blob, value in before.items():
        np.testing.assert_array_equal(workspace.FetchBlob(blob), value)


# --------------------------------------------------------------------------- scheduling

def test_the_runs_thread_runs_the_heaviest_branch_and_the_join(monkeypatch):
    """With 2 workers the run's own thread is one of them: it keeps the branch with the
    most work (a pool thread starts its chain tens of microseconds late) and runs the
    join itself (no OpenMP team on a pool thread); one pool thread runs the other
    branch. Every chain runs on the branches' team."""
    from caffe2py.parallel_executor import thread_budget
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    x = f32(1, 8, 12, 12)
    workspace.FeedBlob("x", x)
    for b, k in enumerate((3, 5)):
        workspace.FeedBlob("w%d" % b, f32(8, 8, k, k, seed=b + 1, scale=0.1))
        workspace.FeedBlob("b%d" % b, f32(8, seed=b + 3))
    net = core.Net("heavy_light")
    net.Conv(["x", "w0", "b0"], "c0", kernel=3, pad=1)
    net._TestBranchProbe("c0", "light")
    net.Conv(["x", "w1", "b1"], "c1", kernel=5, pad=2)      # 25/9 of the 3x3 branch's work
    net._TestBranchProbe("c1", "heavy")
    net.Add(["light", "heavy"], "joined")
    net._TestBranchProbe("joined", "head")
    branches = _run_twice(_typed(net, "async_scheduling", 2))     # shapes known at compile time
    assert branches.active and branches.chain_work[1] > branches.chain_work[0]
    _PROBE["seen"] = []
    workspace.RunNet(net.Name())
    seen = {name: (ident, team) for name, ident, team in _PROBE["seen"]}
    me = threading.get_ident()
    assert seen["heavy"][0] == me and seen["light"][0] != me
    assert seen["head"] == (me, thread_budget() // 2)
    assert seen["heavy"][1] == seen["light"][1] == thread_budget() // 2


def test_the_runs_thread_sets_its_team_before_it_wakes_a_pool_thread(monkeypatch):
    """numba.set_num_threads is a ctypes call that releases the GIL: made after a pool
    thread was woken, the pool thread took the GIL and held it through its chain's
    Python parts, and the two branches ran one after the other (measured). So the run's
    thread sizes its team (numba.set_num_threads) before it hands chains to the pool."""
    import numba
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    workspace.FeedBlob("a", f32(4))
    workspace.FeedBlob("b", f32(4, seed=1))
    net = _probe_net("ordered_team")
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    events = []
    me = threading.get_ident()
    set_num_threads, submitted = numba.set_num_threads, parallel_executor._submitted

    def sizing(n):
        if threading.get_ident() == me:
            events.append(("size", n))
        set_num_threads(n)

    def handing(*call):
        events.append(("submit", None))
        return submitted(*call)
    monkeypatch.setattr(numba, "set_num_threads", sizing)
    monkeypatch.setattr(parallel_executor, "_submitted", handing)
    workspace.RunNet(net.Name())
    first_submit = events.index(("submit", None))
    assert ("size", 1) in events[:first_submit]             # the branch's team, set before
    assert ("size", 1) not in events[first_submit:]
    np.testing.assert_array_equal(workspace.FetchBlob("sum"), (f32(4) + 1.0) + (f32(4, seed=1) + 1.0))


def test_ready_branches_are_shared_by_estimated_work_heaviest_to_the_runs_thread():
    """Four branches, 2 workers (GoogLeNet's inception 3a: one branch has ~3/4 of the
    work): the run's thread takes the heavy one, the pool thread queues the three light
    ones, instead of the run's thread taking a second branch only after the heavy one."""
    schedule = parallel_executor.BranchSchedule.__new__(parallel_executor.BranchSchedule)
    schedule.graph = type("G", (), {"chains": [[0], [1], [2], [3]]})()
    schedule.chain_work = [19.0, 200.0, 25.0, 10.0]
    assert schedule._share([0, 1, 2, 3], 1) == ([1], [0, 2, 3])
    schedule.chain_work = [50.0, 40.0, 30.0, 20.0]        # greedy: each to the least loaded
    assert schedule._share([0, 1, 2, 3], 1) == ([0, 3], [1, 2])
    assert schedule._share([0, 1, 2, 3], 2) == ([0], [1, 2, 3])
    schedule.chain_work = None                           # no estimate: program order, first here
    assert schedule._share([0, 1, 2], 1) == ([0, 2], [1])


def test_four_branches_on_two_workers_heaviest_here_the_rest_on_one_pool_thread(monkeypatch):
    monkeypatch.setattr(net_dag, "MIN_OVERLAP_WORK", 0.0)
    sizes = {"a": 8, "b": 512, "c": 16, "d": 4}         # the probes' work: the bytes they move
    net = core.Net("four")
    for blob, size in sizes.items():
        workspace.FeedBlob(blob, f32(size, seed=size))
        net._TestBranchProbe(blob, "p" + blob)
    net.Concat(["p" + b for b in sizes], ["cat", "split"], axis=0)
    branches = _run_twice(_typed(net, "async_scheduling", 2))
    assert branches.active
    _PROBE["seen"] = []
    workspace.RunNet(net.Name())
    thread_of = {name: ident for name, ident, _ in _PROBE["seen"]}
    me = threading.get_ident()
    assert thread_of["pb"] == me
    assert thread_of["pa"] == thread_of["pc"] == thread_of["pd"] != me
    np.testing.assert_array_equal(workspace.FetchBlob("cat"),
                                  np.concatenate([f32(size, seed=size) + 1.0 for size in sizes.values()]))
