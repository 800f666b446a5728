"""Compiled executor: checks at CreateNet, named errors, untouched workspace on
failure, engine selection, net types, observers."""
import numpy as np
import pytest

from caffe2py import core, registry, workspace
from caffe2py.errors import Caffe2Error, OperatorError
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, register_kernel, register_schema


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()
    registry.set_engine_pref({}, {})


def _snapshot():
    return {b: workspace.FetchBlob(b) for b in workspace.Blobs()}


def _assert_unchanged(before):
    assert sorted(workspace.Blobs()) == sorted(before)
    for name, value in before.items():
        np.testing.assert_array_equal(workspace.FetchBlob(name), value)


def _net(*ops, name="n", external_input=None):
    net = caffe2_pb2.NetDef(name=name)
    for op in ops:
        net.op.add().CopyFrom(op)
    if external_input is not None:
        net.external_input.extend(external_input)
    return net


def test_unknown_op_type_is_named_and_changes_nothing():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    before = _snapshot()
    net = _net(core.CreateOperator("Relu", "x", "y"), core.CreateOperator("Rleu", "y", "z"))
    with pytest.raises(Caffe2Error, match=r"Rleu #1.*unknown operator type 'Rleu'.*Relu"):
        workspace.RunNetOnce(net)
    with pytest.raises(Caffe2Error):
        workspace.CreateNet(net)
    _assert_unchanged(before)
    assert "n" not in workspace.current_workspace().nets


def test_missing_input_blob_is_named():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    before = _snapshot()
    net = _net(core.CreateOperator("Relu", "x", "y"), core.CreateOperator("Add", ["y", "ghost"], "z"))
    with pytest.raises(Caffe2Error, match=r"Add #1.*non-existing input blob: 'ghost'"):
        workspace.RunNetOnce(net)
    _assert_unchanged(before)


def test_wrong_input_count_is_named():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    before = _snapshot()
    net = _net(core.CreateOperator("Relu", ["x", "x"], "y"))
    with pytest.raises(Caffe2Error, match=r"Relu #0 'y': takes exactly 1 inputs, got 2"):
        workspace.RunNetOnce(net)
    _assert_unchanged(before)


def test_failing_op_at_run_time_leaves_workspace_unchanged():
    workspace.FeedBlob("x", np.ones((2, 3), np.float32))
    workspace.FeedBlob("y", np.full((2, 3), 7, np.float32))
    workspace.FeedBlob("w", np.ones((4, 5), np.float32))  # wrong inner size for FC
    workspace.FeedBlob("b", np.ones(4, np.float32))
    net = _net(core.CreateOperator("Relu", "x", "y"),
               core.CreateOperator("FC", ["y", "w", "b"], "z"), name="bad")
    workspace.CreateNet(net)
    before = _snapshot()    # CreateNet made the empty blob 'z', as Caffe2 does
    with pytest.raises(OperatorError, match=r"FC #1 'z'") as info:
        workspace.RunNet("bad")
    assert info.value.op_index == 1 and info.value.op_type == "FC"
    _assert_unchanged(before)  # y was computed by op 0 but is not committed
    assert workspace.RunNet("bad", allow_fail=True) is False


def test_external_input_and_output_checks():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    net = _net(core.CreateOperator("Relu", "x", "y"), core.CreateOperator("Relu", "q", "z"),
               external_input=["x"])
    with pytest.raises(Caffe2Error, match="source for input 'q' is unknown"):
        workspace.CreateNet(net)
    net = _net(core.CreateOperator("Relu", "x", "y"))
    net.external_output.append("never")
    with pytest.raises(Caffe2Error, match="declared as output but never produced.*'never'"):
        workspace.CreateNet(net)


def test_inplace_rules_from_schema():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("Relu", "x", "x"))  # allowed
    workspace.FeedBlob("w", np.ones((2, 2), np.float32))
    workspace.FeedBlob("b", np.ones(2, np.float32))
    with pytest.raises(Caffe2Error, match="cannot run in place"):
        workspace.RunOperatorOnce(core.CreateOperator("FC", ["x", "w", "b"], "w"))


def test_required_argument_missing():
    with pytest.raises(Caffe2Error, match="required argument 'values'"):
        workspace.RunOperatorOnce(core.CreateOperator("GivenTensorFill", [], "v", shape=[1]))


def test_node_name_rejected():
    op = core.CreateOperator("Relu", "x", "y", device_option=core.DeviceOption(0, node_name="n1"))
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error, match="node_name"):
        workspace.RunOperatorOnce(op)


def test_missing_device_kernel_is_clear():
    op = core.CreateOperator("Relu", "x", "y", device_option=core.DeviceOption(caffe2_pb2.OPENGL))
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error, match="cannot create operator of type 'Relu' on the device"):
        workspace.RunOperatorOnce(op)


# -- engines: a test op with a default kernel and an engine kernel
register_schema(OpSchema("_TestEngineOp", num_inputs=0, num_outputs=1))
register_kernel("_TestEngineOp")(lambda ctx: lambda: np.array(0))
register_kernel("_TestEngineOp", engine="FAST")(lambda ctx: lambda: np.array(1))
register_kernel("_TestEngineOp", engine="EXOTIC")(lambda ctx: lambda: np.array(2))


def _engine_result(engine=None):
    workspace.RunOperatorOnce(core.CreateOperator("_TestEngineOp", [], "e", engine=engine))
    return int(workspace.FetchBlob("e"))


def test_engine_order():
    assert _engine_result() == 0
    assert _engine_result("FAST") == 1
    assert _engine_result("NOPE,EXOTIC") == 2          # first available of the explicit list
    assert _engine_result("NOPE") == 0                 # unknown engine: default kernel
    core.SetEnginePref({caffe2_pb2.CPU: {"_TestEngineOp": ["EXOTIC"]}}, {caffe2_pb2.CPU: ["FAST"]})
    assert _engine_result() == 2                       # per-op preference before global
    core.SetEnginePref({}, {caffe2_pb2.CPU: ["FAST"]})
    assert _engine_result() == 1
    assert _engine_result("EXOTIC") == 2               # explicit beats preferences
    assert "_TestEngineOp_ENGINE_FAST" in workspace.RegisteredOperators()


@pytest.mark.parametrize("net_type", ["simple", "dag", "async_scheduling", "async_simple", "prof_dag"])
def test_net_types_run(net_type):
    workspace.FeedBlob("x", np.array([-1.0, 1.0], np.float32))
    net = _net(core.CreateOperator("Relu", "x", "y"), core.CreateOperator("Sigmoid", "y", "z"))
    net.type = net_type
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("z"), 1 / (1 + np.exp(-np.array([0.0, 1.0]))), rtol=1e-6)


def test_unknown_net_type():
    net = _net(core.CreateOperator("Relu", "x", "y"))
    net.type = "warp_drive"
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error, match="unknown net type 'warp_drive'"):
        workspace.RunNetOnce(net)


def test_net_device_option_is_inherited_by_ops():
    net = _net(core.CreateOperator("Relu", "x", "y"))
    net.device_option.device_type = caffe2_pb2.OPENGL
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error, match="on the device"):
        workspace.RunNetOnce(net)


def test_time_observer_and_blob_reuse_between_runs():
    workspace.FeedBlob("x", np.array([1.0, -2.0], np.float32))
    net = core.Net("obs")
    net.Relu("x", "y")
    net.Add(["y", "x"], "z")
    workspace.CreateNet(net)
    compiled = workspace.GetNet("obs")
    observer = compiled.add_observer("TimeObserver")
    workspace.RunNet("obs", 4)
    assert observer.runs == 4 and observer.average_time() > 0
    assert observer.average_time_children() > 0
    np.testing.assert_array_equal(workspace.FetchBlob("z"), [2.0, -2.0])
    compiled.remove_observer(observer)
    assert compiled.num_observers() == 0


def test_inplace_chain_rebinds_blob():
    workspace.FeedBlob("x", np.array([-1.0, 3.0], np.float32))
    net = core.Net("chain")
    net.Relu("x", "x")
    net.Add(["x", "x"], "x")
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), [0.0, 6.0])


def test_empty_net_runs():
    net = caffe2_pb2.NetDef(name="empty")
    workspace.CreateNet(net)
    assert workspace.RunNet("empty")
    assert workspace.RunNetOnce(net)


# Records, per call, whether the kernel ran inside the CPU thread team's context.
_TEAM_SEEN = []
register_schema(OpSchema("_TestTeamProbe", num_inputs=1, num_outputs=1))


@register_kernel("_TestTeamProbe")
def _team_probe(ctx):
    from caffe2py.kernels.cpu.runtime.jit import in_team

    def run(x):
        _TEAM_SEEN.append(in_team())
        return x
    return run


@pytest.mark.parametrize("mode", ["plain", "observed", "benchmark"])
def test_every_run_path_runs_ops_inside_the_cpu_team(mode):
    # Observed and per-op benchmark runs must time ops in the same context as plain
    # runs (OpenBLAS on one thread, the team's), or their numbers mislead.
    _TEAM_SEEN.clear()
    workspace.FeedBlob("x", np.ones(2, np.float32))
    net = core.Net("team_" + mode)
    net._TestTeamProbe("x", "y")
    workspace.CreateNet(net)
    if mode == "observed":
        workspace.GetNet(net.Name()).add_observer("TimeObserver")
    if mode == "benchmark":
        workspace.BenchmarkNet(net.Name(), 0, 1, True)
    else:
        workspace.RunNet(net.Name())
    assert _TEAM_SEEN and all(_TEAM_SEEN)


_ALIVE = {}       # blob name -> weakref to the array a _TestTrack op wrote


@register_kernel("_TestTrack")
def _track(ctx):
    import weakref
    name = ctx.outputs[0]

    def run(*xs):
        # which of the earlier outputs are still alive when this op runs
        ctx_alive = {b: ref() is not None for b, ref in _ALIVE.items()}
        y = sum(xs) + 1.0
        _ALIVE[name] = weakref.ref(y)
        _SEEN_ALIVE.append((name, ctx_alive))
        return y
    return run


_SEEN_ALIVE = []


def _chain_net():
    # a -> b -> c -> d, and d also reads a (so a lives to the end)
    net = caffe2_pb2.NetDef(name="chain")
    for ins, out in ((["x"], "a"), (["a"], "b"), (["b"], "c"), (["c", "a"], "d")):
        op = net.op.add()
        op.type = "_TestTrack"
        op.input.extend(ins)
        op.output.append(out)
    net.external_input.append("x")
    net.external_output.append("d")
    return net


def test_a_plan_keeping_only_outputs_releases_intermediates_after_their_last_use():
    from caffe2py.executor import compile_net
    _ALIVE.clear()
    _SEEN_ALIVE.clear()
    blobs = {"x": np.ones(3)}
    compile_net(_chain_net(), blobs.keys(), keep=["d"]).run(blobs)
    assert set(blobs) == {"x", "d"}                        # only the kept blob is committed
    np.testing.assert_array_equal(blobs["d"], np.full(3, 7.0))   # a=2, b=3, c=4, d=c+a+1
    seen = dict(_SEEN_ALIVE)
    assert seen["c"] == {"a": True, "b": True}             # b is c's input: alive while c runs
    assert seen["d"] == {"a": True, "b": False, "c": True}  # b was dropped after c, a is read by d


def test_a_plan_by_default_commits_every_blob_it_writes():
    from caffe2py.executor import compile_net
    _ALIVE.clear()
    _SEEN_ALIVE.clear()
    blobs = {"x": np.ones(3)}
    compile_net(_chain_net(), blobs.keys()).run(blobs)
    assert set(blobs) == {"x", "a", "b", "c", "d"}
    assert dict(_SEEN_ALIVE)["d"] == {"a": True, "b": True, "c": True}


@register_kernel("_TestFail")
def _fail(ctx):
    def run(*xs):
        raise ValueError("refused")
    return run


def test_a_failing_plan_that_keeps_only_outputs_leaves_the_blobs_untouched():
    # the last op fails after three ops ran and one intermediate was dropped
    from caffe2py.executor import compile_net
    net = _chain_net()
    net.op[3].type = "_TestFail"
    blobs = {"x": np.ones(3)}
    with pytest.raises(OperatorError, match="_TestFail #3 'd'.*refused"):
        compile_net(net, blobs.keys(), keep=["d"]).run(blobs)
    assert set(blobs) == {"x"}
