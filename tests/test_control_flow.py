"""Control-flow ops (If, While, Do, CreateScope, HasScope, ONNXWhile, Conditional),
the executor's workspace seam they use, and the net builders of control_ops_util
and net_builder. References are written out in NumPy / plain Python here."""
import io
import contextlib

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.blob_scopes import WorkspaceStack
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.registry import OpSchema, register_kernel, register_schema

# Comparisons belong to another family of ops; the tests bring their own.
register_schema(OpSchema("_CFTestLess", num_inputs=2, num_outputs=1))
register_kernel("_CFTestLess")(lambda ctx: lambda a, b: np.array(bool(np.all(a < b))))
register_schema(OpSchema("_CFTestFail", num_inputs=(0, None), num_outputs=(0, None)))


@register_kernel("_CFTestFail")
def _fail(ctx):
    def run(*args):
        raise ctx.error("failing on purpose")
    return run


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def f32(*values):
    return np.array(values, dtype=np.float32)


def _snapshot():
    return {b: workspace.FetchBlob(b) for b in workspace.Blobs()}


# --------------------------------------------------------------------------- If

def test_if_branches_see_this_runs_writes_and_later_ops_see_theirs():
    workspace.FeedBlob("x", f32(-1, 2))
    then = core.Net("then")
    then.Add(["x", "x"], "x")            # reads x as the Relu before the If left it
    otherwise = core.Net("otherwise")
    otherwise.Negative("x", "x")
    net = core.Net("main")
    net.Relu("x", "x")
    net.If(["c"], ["x"], then_net=then.Proto(), else_net=otherwise.Proto())
    net.Mul(["x", "x"], "y")             # reads what the branch wrote
    x = np.maximum(f32(-1, 2), 0)
    for cond, branch in ((True, lambda v: v + v), (False, lambda v: -v)):
        workspace.FeedBlob("x", f32(-1, 2))
        workspace.FeedBlob("c", np.array(cond))
        workspace.RunNetOnce(net)
        np.testing.assert_array_equal(workspace.FetchBlob("x"), branch(x))
        np.testing.assert_array_equal(workspace.FetchBlob("y"), branch(x) * branch(x))


def test_if_without_else_leaves_blobs_when_false_and_branch_blobs_reach_the_parent():
    workspace.FeedBlob("x", f32(3))
    then = core.Net("then")
    then.Relu("x", "inner")
    net = core.Net("main")
    net.If(["c"], [], then_net=then.Proto())
    workspace.FeedBlob("c", np.array([False]))
    workspace.RunNetOnce(net)
    assert not workspace.HasBlob("inner")
    workspace.FeedBlob("c", np.array([True]))
    workspace.RunNetOnce(net)       # If's subnets write the parent's workspace (no scope)
    np.testing.assert_array_equal(workspace.FetchBlob("inner"), f32(3))


def test_failure_inside_a_branch_leaves_the_workspace_untouched():
    workspace.FeedBlob("x", f32(1, -2))
    workspace.FeedBlob("c", np.array(True))
    then = core.Net("then")
    then.Relu("x", "x")
    then._CFTestFail(["x"], [])
    net = core.Net("main")
    net.Sigmoid("x", "x")
    net.If(["c"], ["x"], then_net=then.Proto())
    before = _snapshot()
    with pytest.raises(Caffe2Error, match=r"If #1.*_CFTestFail #1.*failing on purpose"):
        workspace.RunNetOnce(net)
    assert sorted(workspace.Blobs()) == sorted(before)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), before["x"])


@pytest.mark.parametrize("cond, message", [
    (np.array([True, False]), "single value"),
    (np.array(1, np.int32), "must be bool"),
])
def test_if_rejects_a_bad_condition(cond, message):
    workspace.FeedBlob("c", cond)
    net = core.Net("main")
    net.If(["c"], [], then_net=core.Net("t").Proto())
    with pytest.raises(Caffe2Error, match=message):
        workspace.RunNetOnce(net)


def test_if_without_then_net_and_a_bad_subnet_fail_when_the_net_is_created():
    workspace.FeedBlob("c", np.array(True))
    net = core.Net("main")
    net.If(["c"], [])
    with pytest.raises(Caffe2Error, match="then_net"):
        workspace.CreateNet(net)
    bad = core.Net("bad")
    bad.Proto().op.add().CopyFrom(core.CreateOperator("NoSuchOp", [], ["y"]))
    net = core.Net("main2")
    net.If(["c"], [], then_net=bad.Proto())
    with pytest.raises(Caffe2Error, match="then_net.*NoSuchOp"):
        workspace.CreateNet(net)


# --------------------------------------------------------------------------- While

def _counting_loop(limit, with_cond_net):
    """sum = 0; i = 0; while i < limit: sum += i; i += 1 -- as a While op."""
    workspace.FeedBlob("i", f32(0))
    workspace.FeedBlob("s", f32(0))
    workspace.FeedBlob("one", f32(1))
    workspace.FeedBlob("limit", f32(limit))
    body = core.Net("body")
    body.Add(["s", "i"], "s")
    body.Add(["i", "one"], "i")
    net = core.Net("main")
    args = {"loop_net": body.Proto()}
    if with_cond_net:
        cond = core.Net("cond")
        cond._CFTestLess(["i", "limit"], "c")
        args["cond_net"] = cond.Proto()
        workspace.FeedBlob("c", np.array(False))    # the cond net sets it before the first check
    else:
        body._CFTestLess(["i", "limit"], "c")
        net._CFTestLess(["i", "limit"], "c")
    net.While(["c", "i", "s"], ["i", "s"], **args)
    return net


@pytest.mark.parametrize("with_cond_net", [False, True])
@pytest.mark.parametrize("limit", [0, 1, 7])
def test_while_matches_a_python_loop(limit, with_cond_net):
    net = _counting_loop(limit, with_cond_net)
    workspace.RunNetOnce(net)
    i = s = 0
    while i < limit:
        s += i
        i += 1
    np.testing.assert_array_equal(workspace.FetchBlob("i"), f32(i))
    np.testing.assert_array_equal(workspace.FetchBlob("s"), f32(s))


def test_while_runs_again_from_the_workspace_state_when_the_net_is_rerun():
    net = _counting_loop(4, True)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    workspace.FeedBlob("limit", f32(6))
    workspace.RunNet(net.Name())
    np.testing.assert_array_equal(workspace.FetchBlob("s"), f32(sum(range(6))))


def test_while_inside_if_and_observers_and_benchmark_take_the_same_path():
    inner = _counting_loop(5, True)
    net = core.Net("outer")
    net.If(["go"], ["i", "s"], then_net=inner.Proto())
    workspace.FeedBlob("go", np.array(True))
    workspace.CreateNet(net)
    observer = workspace.GetNet(net.Name()).add_observer("TimeObserver")
    workspace.RunNet(net.Name())
    assert observer.runs == 1
    np.testing.assert_array_equal(workspace.FetchBlob("s"), f32(10))
    workspace.FeedBlob("i", f32(0))
    workspace.FeedBlob("s", f32(0))
    with contextlib.redirect_stdout(io.StringIO()):
        workspace.BenchmarkNet(net.Name(), 0, 1, True)
    np.testing.assert_array_equal(workspace.FetchBlob("s"), f32(10))


# --------------------------------------------------------------------------- Do and scopes

def _do_op(inputs, outputs, body, inner, idx, **kwargs):
    return core.CreateOperator("Do", inputs + ["ws"], outputs + ["ws"], net=body.Proto(),
                               inner_blobs=inner, outer_blobs_idx=idx, **kwargs)


def test_do_binds_outer_blobs_under_inner_names_and_keeps_its_own_blobs_local():
    workspace.FeedBlob("outer_x", f32(1, 2))
    body = core.Net("body")
    body.Add(["x", "x"], "local_tmp")
    body.Mul(["local_tmp", "x"], "y")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.Proto().op.add().CopyFrom(_do_op(["outer_x"], ["outer_y"], body, ["x", "y"], [0, 1]))
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("outer_y"), f32(2, 8))
    assert not workspace.HasBlob("local_tmp") and not workspace.HasBlob("y")
    stack = workspace.FetchBlob("ws")
    assert isinstance(stack, WorkspaceStack)
    np.testing.assert_array_equal(stack.workspaces[0].local["local_tmp"], f32(2, 4))


def test_do_child_does_not_see_unbound_parent_blobs():
    workspace.FeedBlob("a", f32(1))
    workspace.FeedBlob("hidden", f32(5))
    body = core.Net("body")
    body.Add(["a_in", "hidden"], "out")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], body, ["a_in", "out"], [0, 1]))
    with pytest.raises(Caffe2Error, match="'hidden' does not exist"):
        workspace.RunNetOnce(net)


def test_has_scope_and_workspace_reuse_between_runs():
    workspace.FeedBlob("a", f32(1))
    body = core.Net("body")
    body.Relu("a_in", "b_in")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.HasScope(["ws"], "before")
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], body, ["a_in", "b_in"], [0, 1]))
    net.HasScope(["ws"], "after")
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], body, ["a_in", "b_in"], [0, 1],
                                         reuse_workspace=True))
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    assert workspace.FetchBlob("before").tolist() == [False]
    assert workspace.FetchBlob("after").tolist() == [True]
    stack = workspace.FetchBlob("ws")
    assert stack.top == 0 and len(stack.workspaces) == 1     # the second Do re-entered it
    workspace.RunNet(net.Name())                            # CreateScope empties, keeps workspaces
    assert workspace.FetchBlob("ws") is stack and len(stack.workspaces) == 1


def test_do_gradient_pops_the_forward_workspace():
    workspace.FeedBlob("a", f32(3))
    fwd_body = core.Net("fwd")
    fwd_body.Relu("a_in", "saved")        # a local blob of the forward workspace
    fwd_body.Copy("saved", "b_in")
    grad_body = core.Net("grad")
    grad_body.Add(["saved", "g_in"], "ga_in")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], fwd_body, ["a_in", "b_in"], [0, 1]))
    grad = _do_op(["g"], ["ga"], grad_body, ["g_in", "ga_in"], [0, 1])
    grad.is_gradient_op = True
    net.Proto().op.add().CopyFrom(grad)
    net.HasScope(["ws"], "left")
    workspace.FeedBlob("g", f32(10))
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("ga"), f32(13))
    assert workspace.FetchBlob("left").tolist() == [False]


@pytest.mark.parametrize("inner, idx, message", [
    (["x"], [0, 1], "inner_blobs but"),
    (["x", "y"], [0, 5], "out of bounds"),
    (["x", "y"], [0, 0], "bound twice"),
    (["x"], [0], "not all outer blobs"),
])
def test_do_rejects_bad_bindings_at_create_net(inner, idx, message):
    body = core.Net("body")
    body.Relu("x", "y")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], body, inner, idx))
    workspace.FeedBlob("a", f32(1))
    with pytest.raises(Caffe2Error, match=message):
        workspace.CreateNet(net)


def test_do_needs_a_workspace_stack_and_matching_ws_blobs():
    workspace.FeedBlob("a", f32(1))
    workspace.FeedBlob("ws", f32(0))
    body = core.Net("body")
    body.Relu("x", "y")
    net = core.Net("main")
    net.Proto().op.add().CopyFrom(_do_op(["a"], ["b"], body, ["x", "y"], [0, 1]))
    with pytest.raises(Caffe2Error, match="workspace stack made by CreateScope"):
        workspace.RunNetOnce(net)
    op = core.CreateOperator("Do", ["a", "ws"], ["b", "other"], net=body.Proto(),
                             inner_blobs=["x", "y"], outer_blobs_idx=[0, 1])
    with pytest.raises(Caffe2Error, match="same workspace blob"):
        workspace.RunOperatorOnce(op)


# --------------------------------------------------------------------------- control_ops_util / net_builder

def test_add_if_op_runs_branches_in_their_own_workspaces():
    from caffe2py.control_ops_util import add_if_op
    workspace.FeedBlob("x", f32(2))
    then = core.Net("then")
    then.Add(["x", "x"], "tmp")           # tmp is not in the lexical scope: local
    then.Mul(["tmp", "x"], "y")
    otherwise = core.Net("otherwise")
    otherwise.Negative("x", "y")
    for cond, expect in ((True, f32(8)), (False, f32(-2))):
        net = core.Net("if_net")
        add_if_op(net, core.BlobReference("c"), {"x", "y", "c"}, then, otherwise)
        workspace.FeedBlob("c", np.array(cond))
        workspace.FeedBlob("y", f32(0))
        workspace.RunNetOnce(net)
        np.testing.assert_array_equal(workspace.FetchBlob("y"), expect)
        assert not workspace.HasBlob("tmp")


def test_net_builder_while_net_with_condition_counts():
    from caffe2py.net_builder import NetBuilder, ops
    with NetBuilder(_use_control_ops=True) as nb:
        i = ops.Const(f32(0), blob_out="i")
        total = ops.Const(f32(0), blob_out="total")
        one = ops.Const(f32(1), blob_out="one")
        limit = ops.Const(f32(5), blob_out="limit")
        with ops.WhileNet():
            with ops.Condition():
                ops._CFTestLess([i, limit])
            ops.Add([total, i], [total])
            ops.Add([i, one], [i])
    (net,) = nb.get()
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("total"), f32(0 + 1 + 2 + 3 + 4))
    np.testing.assert_array_equal(workspace.FetchBlob("i"), f32(5))


def test_net_builder_if_net_else():
    from caffe2py.net_builder import NetBuilder, ops
    for a, b in ((1.0, 2.0), (3.0, 2.0)):
        with NetBuilder(_use_control_ops=True) as nb:
            x = ops.Const(f32(a), blob_out="x")
            y = ops.Const(f32(b), blob_out="y")
            out = ops.Const(f32(0), blob_out="out")
            with ops.IfNet(ops._CFTestLess([x, y])):
                ops.Sub([y, x], [out])
            with ops.Else():
                ops.Mul([x, y], [out])
        (net,) = nb.get()
        workspace.RunNetOnce(net)
        expect = b - a if a < b else a * b
        np.testing.assert_array_equal(workspace.FetchBlob("out"), f32(expect))


def test_net_builder_execution_step_loop_and_stop_if(monkeypatch):
    from caffe2py import registry
    from caffe2py.net_builder import NetBuilder, ops
    # GE / Or / Not belong to the tensor family; small stand-ins while they are not registered
    for name, n_in, fn in (("GE", 2, np.greater_equal), ("Or", 2, np.logical_or), ("Not", 1, np.logical_not)):
        if not registry.has_op(name):
            monkeypatch.setitem(registry._schemas, ("", name),
                                [OpSchema(name, num_inputs=n_in, num_outputs=1, allow_inplace=True)])
            monkeypatch.setitem(registry._kernels, ("", name, registry.CPU),
                                {"": [registry.KernelEntry(lambda ctx, fn=fn: fn)]})
    with NetBuilder() as nb:
        count = ops.Const(f32(0), blob_out="count")
        one = ops.Const(f32(1), blob_out="one")
        with ops.loop(4):
            ops.Add([count, one], [count])
        stop_at = ops.Const(f32(2), blob_out="stop_at")
        steps = ops.Const(f32(0), blob_out="steps")
        with ops.loop():
            ops.stop_if(ops._CFTestLess([stop_at, steps]))
            ops.Add([steps, one], [steps])
    workspace.RunPlan(core.Plan(core.to_execution_step(nb)))
    np.testing.assert_array_equal(workspace.FetchBlob("count"), f32(4))
    np.testing.assert_array_equal(workspace.FetchBlob("steps"), f32(3))


def test_ssa_helpers():
    net = core.Net("ssa")
    net.Relu("a", "b")
    net.Add(["b", "c"], "b")
    ssa, versions = core.get_ssa(net)
    assert ssa == [([("a", 0)], [("b", 1)]), ([("b", 1), ("c", 0)], [("b", 2)])]
    assert versions == {"a": 0, "b": 2, "c": 0}
    assert core.get_undefined_blobs(ssa) == {"a", "c"}


# --------------------------------------------------------------------------- ONNXWhile

@pytest.mark.parametrize("trips, bound", [(5, 100.0), (10, 7.0), (0, 100.0)])
def test_onnx_while_matches_onnx_loop_semantics(trips, bound):
    # The iteration counter is int64; the body needs it as float: a tiny adapter op.
    body = caffe2_pb2.NetDef(name="loop_body")
    body.external_input.extend(["iter", "cond_in", "acc"])
    body.op.add().CopyFrom(core.CreateOperator("_CFTestIterAsFloat", ["iter"], ["iter_f"]))
    body.op.add().CopyFrom(core.CreateOperator("Add", ["acc", "iter_f"], ["acc_out"]))
    body.op.add().CopyFrom(core.CreateOperator("GivenTensorFill", [], ["bound"], shape=[1], values=[bound]))
    body.op.add().CopyFrom(core.CreateOperator("_CFTestLess", ["acc_out", "bound"], ["cond_out"]))
    body.op.add().CopyFrom(core.CreateOperator("Copy", ["acc_out"], ["scan"]))
    body.external_output.extend(["cond_out", "acc_out", "scan"])
    workspace.FeedBlob("trips", np.array(trips, np.int64))
    workspace.FeedBlob("cond", np.array(True))
    workspace.FeedBlob("acc0", f32(0))
    op = core.CreateOperator("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "scans"], body=body,
                             has_trip_count=1, has_cond=1)
    workspace.RunOperatorOnce(op)
    # ONNX Loop: run while i < trips and cond; cond comes from the previous iteration.
    acc, scans, i, cond = np.float32(0), [], 0, True
    while i < trips and cond:
        acc = np.float32(acc + i)
        scans.append([acc])
        cond = acc < bound
        i += 1
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), f32(acc))
    # Caffe2's ONNXWhile extends the first iteration's [1] value by a row per iteration: [T], not [T, 1]
    expect_scans = np.array(scans, np.float32).reshape(-1) if scans else np.zeros((0,), np.int32)
    np.testing.assert_array_equal(workspace.FetchBlob("scans"), expect_scans)
    assert not workspace.HasBlob("acc_out")          # the body ran in its own scope


register_schema(OpSchema("_CFTestIterAsFloat", num_inputs=1, num_outputs=1))
register_kernel("_CFTestIterAsFloat")(lambda ctx: lambda i: np.asarray(i, np.float32).reshape(1))


def test_onnx_while_disable_scopes_runs_in_the_parent_and_checks_its_body():
    body = caffe2_pb2.NetDef(name="loop_body")
    body.external_input.extend(["iter", "cond_in", "acc", "step"])
    body.op.add().CopyFrom(core.CreateOperator("Add", ["acc", "step"], ["acc_out"]))
    body.op.add().CopyFrom(core.CreateOperator("Copy", ["cond_in"], ["cond_out"]))
    body.external_output.extend(["cond_out", "acc_out"])
    workspace.FeedBlob("trips", np.array(3, np.int64))
    workspace.FeedBlob("cond", np.array(True))
    workspace.FeedBlob("acc0", f32(1))
    workspace.FeedBlob("step", f32(2))            # outer blob: visible only without scopes
    op = core.CreateOperator("ONNXWhile", ["trips", "cond", "acc0"], ["acc"], body=body,
                             has_trip_count=1, disable_scopes=1)
    workspace.RunOperatorOnce(op)
    np.testing.assert_array_equal(workspace.FetchBlob("acc"), f32(7))
    scoped = core.CreateOperator("ONNXWhile", ["trips", "cond", "acc0"], ["acc"], body=body,
                                 has_trip_count=1)
    with pytest.raises(Caffe2Error, match="'step' does not exist"):
        workspace.RunOperatorOnce(scoped)
    wrong = core.CreateOperator("ONNXWhile", ["trips", "cond", "acc0"], ["acc", "extra"], body=body,
                                has_trip_count=1)
    with pytest.raises(Caffe2Error, match="must have 1 outputs"):
        workspace.RunOperatorOnce(wrong)


# --------------------------------------------------------------------------- Conditional

def test_conditional_picks_rows():
    rng = np.random.default_rng(0)
    cond = np.array([True, False, False, True])
    t = rng.standard_normal((4, 2, 3)).astype(np.float32)
    f = rng.standard_normal((4, 2, 3)).astype(np.float32)
    workspace.FeedBlob("c", cond)
    workspace.FeedBlob("t", t)
    workspace.FeedBlob("f", f)
    workspace.RunOperatorOnce(core.CreateOperator("Conditional", ["c", "t", "f"], ["o"]))
    expect = np.stack([t[i] if cond[i] else f[i] for i in range(4)])
    np.testing.assert_array_equal(workspace.FetchBlob("o"), expect)


@pytest.mark.parametrize("cond, f, message", [
    (np.array([[True, False]]), np.zeros((2, 3), np.float32), "1-D bool"),
    (np.array([True, False, True]), np.zeros((2, 3), np.float32), "must have 3 rows"),
    (np.array([True, False]), np.zeros((2, 4), np.float32), "differs from DataT"),
    (np.array([True, False]), np.zeros((2, 3), np.int32), "type int32 differs"),
])
def test_conditional_errors(cond, f, message):
    workspace.FeedBlob("c", cond)
    workspace.FeedBlob("t", np.ones((2, 3), np.float32))
    workspace.FeedBlob("f", f)
    with pytest.raises(Caffe2Error, match=message):
        workspace.RunOperatorOnce(core.CreateOperator("Conditional", ["c", "t", "f"], ["o"]))


def test_takes_blobs_kernels_get_the_runs_view_too():
    from caffe2py import registry
    register_schema(OpSchema("_CFTestTakesBlobs", num_inputs=0, num_outputs=1))

    @register_kernel("_CFTestTakesBlobs")
    def _factory(ctx):
        return registry.takes_blobs(lambda blobs: blobs["written_before"] * 2)

    workspace.FeedBlob("x", f32(1, 2))
    net = core.Net("tb")
    net.Add(["x", "x"], "written_before")
    net._CFTestTakesBlobs([], "y")
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), f32(4, 8))
