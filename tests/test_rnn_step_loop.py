"""The generic RecurrentNetwork step loop (operators/rnn/step_loop.py): what its
shortcuts (links bound as precomputed views, the shared workspace's blobs looked up
once per run, linked caller tensors copied once per run, write-back into the view)
must keep: links written in place, the step workspaces' contents, the failure rule,
the gradient's accumulation. References are NumPy simulations of Caffe2's semantics
(links are views of one buffer)."""
import numpy as np
import pytest

from caffe2py import core, model_helper, recurrent, workspace
from caffe2py.errors import Caffe2Error

T, N, D = 5, 3, 2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _randn(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _recurrent_op(step, has_backward=False, outputs=("s_all", "s_last", "scratch")):
    """RecurrentNetwork over x [T, N, D] with state s (s_prev: window t of s_states,
    s: window t + 1) and x_t (window t of x)."""
    args = dict(step_net=step.Proto(), recurrent_states=["s_states"], initial_recurrent_state_ids=[1],
                link_internal=["s_prev", "s", "x_t"], link_external=["s_states", "s_states", "x"],
                link_offset=[0, 1, 0], alias_src=["s_states", "s_states"], alias_dst=["s_all", "s_last"],
                alias_offset=[1, -1], timestep="timestep")
    if has_backward:         # its presence keeps one step workspace per timestep
        args["backward_step_net"] = step.Proto()
    return core.CreateOperator("RecurrentNetwork", ["x", "s0"], list(outputs), **args)


@pytest.mark.parametrize("has_backward", [False, True])
def test_step_net_writing_linked_blobs_in_place_writes_their_windows(has_backward):
    """A step op overwriting a linked blob writes that window of the external tensor, as
    Caffe2's shared memory does: the previous state's window and the input's window."""
    step = core.Net("in_place_step")
    step.AddExternalInputs("s_prev", "x_t", "timestep")
    step.Scale(["s_prev"], ["s_prev"], scale=0.5)
    step.Scale(["x_t"], ["x_t"], scale=2.0)
    step.Add(["s_prev", "x_t"], ["s"])
    step.AddExternalOutput("s")
    x, s0 = _randn(1, T, N, D), _randn(2, 1, N, D)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("s0", s0)
    workspace.RunOperatorOnce(_recurrent_op(step, has_backward))

    states = np.concatenate([s0, np.zeros((T, N, D), np.float32)])
    inputs = x.copy()
    for t in range(T):
        states[t] *= 0.5
        inputs[t] *= 2.0
        states[t + 1] = states[t] + inputs[t]
    np.testing.assert_allclose(workspace.FetchBlob("s_all"), states[1:], rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("s_last"), states[T:], rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("x"), inputs, rtol=1e-6)


def _fetch_step_blobs():
    workspace.RunOperatorOnce(core.CreateOperator("RecurrentNetworkBlobFetcher", ["scratch"], ["names"],
                                                  prefix="rnn"))
    return {n.decode() if isinstance(n, bytes) else n for n in workspace.FetchBlob("names").tolist()}


def test_step_workspaces_hold_each_steps_blobs_and_not_the_shared_ones():
    """With a backward step net every timestep keeps its workspace: its links' windows,
    its intermediate blobs and its timestep, but not the parameters read from the
    shared workspace; a second run with new inputs and parameters refreshes them."""
    step = core.Net("scaled_step")
    step.AddExternalInputs("s_prev", "x_t", "timestep", "w")
    step.Mul(["x_t", "w"], ["x_scaled"])
    step.Add(["s_prev", "x_scaled"], ["s"])
    step.AddExternalOutput("s")
    op = _recurrent_op(step, has_backward=True)
    op.input.append("w")
    for seed in (3, 4):
        x, s0, w = _randn(seed, T, N, D), _randn(seed + 10, 1, N, D), _randn(seed + 20, 1, N, D)
        for name, value in (("x", x), ("s0", s0), ("w", w)):
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(op)
        names = _fetch_step_blobs()
        assert names == {"rnn_%s%d" % (blob, t) for t in range(T)
                         for blob in ("s_prev", "s", "x_t", "x_scaled", "timestep")}
        expect = s0 + np.cumsum(x * w, axis=0)
        states = np.concatenate([s0, expect])
        np.testing.assert_allclose(workspace.FetchBlob("s_all"), expect, rtol=1e-5, atol=1e-6)
        for t in range(T):
            np.testing.assert_allclose(workspace.FetchBlob("rnn_s_prev%d" % t), states[t:t + 1], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(workspace.FetchBlob("rnn_s%d" % t), states[t + 1:t + 2], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(workspace.FetchBlob("rnn_x_t%d" % t), x[t:t + 1])
            np.testing.assert_allclose(workspace.FetchBlob("rnn_x_scaled%d" % t), x[t:t + 1] * w, rtol=1e-6)
            assert workspace.FetchBlob("rnn_timestep%d" % t).tolist() == [t]


def test_a_step_failing_part_way_leaves_the_workspace_as_it_was():
    """The step net writes its input window in place and fails at timestep 3 (a Gather
    past the end of a 3-row table): the error names the timestep and the op, and no
    blob of the workspace changed, the input included; the next good run is right."""
    step = core.Net("failing_step")
    step.AddExternalInputs("s_prev", "x_t", "timestep", "table")
    step.Scale(["x_t"], ["x_t"], scale=3.0)
    step.Gather(["table", "timestep"], ["row"])
    step.Add(["s_prev", "row"], ["s_tmp"])
    step.Add(["s_tmp", "x_t"], ["s"])
    step.AddExternalOutput("s")
    op = _recurrent_op(step, has_backward=True)
    op.input.append("table")
    x, s0 = _randn(5, T, N, D), _randn(6, 1, N, D)
    sentinel = np.full((2,), 7.0, np.float32)
    for name, value in (("x", x), ("s0", s0), ("table", _randn(7, 3, N, D)), ("s_all", sentinel)):
        workspace.FeedBlob(name, value)
    with pytest.raises(Caffe2Error, match="timestep 3.*Gather"):
        workspace.RunOperatorOnce(op)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), x)
    np.testing.assert_array_equal(workspace.FetchBlob("s_all"), sentinel)
    assert not workspace.HasBlob("s_states") and not workspace.HasBlob("s_last")

    table = _randn(8, T, N, D)
    workspace.FeedBlob("table", table)
    workspace.RunOperatorOnce(op)
    np.testing.assert_allclose(workspace.FetchBlob("s_all"), s0 + np.cumsum(table + 3 * x, axis=0),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("recompute", [[], ["xw"]])
def test_gradient_sums_parameter_gradients_and_output_gradients_over_steps(recompute):
    """s_t = s_{t-1} + w * x_t; with dL/ds_all = G: dx_t = w * sum_{k>=t} G_k,
    dw = sum_t x_t * sum_{k>=t} G_k, ds0 = sum_k G_k. With xw recomputed on backward it
    is one blob of the shared workspace, which every step overwrites."""
    cell = core.Net("scaled_cell")
    x_t, s_prev = cell.AddExternalInputs("x_t", "s_prev")
    cell.AddExternalInput("w")
    xw = cell.Mul([x_t, "w"], "xw")
    s = cell.Add([s_prev, xw], "s")
    cell.AddExternalOutput(s)
    x, s0, w, g = _randn(9, T, N, D), _randn(10, 1, N, D), _randn(11, 1, N, D), _randn(12, T, N, D)
    for name, value in (("x", x), ("s0", s0), ("w", w), ("G", g)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="scaled_rnn")
    s_all, _ = recurrent.recurrent_net(model.net, cell, [(x_t, "x")], [(s_prev, "s0")], {s_prev: s},
                                       scope="scaled", recompute_blobs_on_backward=recompute)
    model.AddGradientOperators({s_all: "G"})
    for _ in range(2):                       # a second run gives the same gradients
        workspace.RunNetOnce(model.net)
        suffix = np.cumsum(g[::-1], axis=0)[::-1]
        np.testing.assert_allclose(workspace.FetchBlob("x_grad"), w * suffix, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("w_grad"), (x * suffix).sum(axis=0, keepdims=True),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("s0_grad"), g.sum(axis=0, keepdims=True),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("scaled/s_prev_states")[1:], s0 + np.cumsum(w * x, axis=0),
                                   rtol=1e-5, atol=1e-5)
    workspace.RunOperatorOnce(core.CreateOperator("RecurrentNetworkBlobFetcher", ["scaled/step_workspaces"],
                                                  ["names"], prefix="rnn"))
    names = {n.decode() if isinstance(n, bytes) else n for n in workspace.FetchBlob("names").tolist()}
    # a recomputed blob lives in the shared workspace, not in the step workspaces
    assert ("rnn_xw0" in names) == (not recompute)
    if not recompute:
        np.testing.assert_allclose(workspace.FetchBlob("rnn_xw2"), w * x[2:3], rtol=1e-6)


def test_step_workspaces_persist_between_runs_on_the_general_path():
    """Accumulate reads its own output's value, so its step net runs through the step
    workspace mapping and Plan.run; each of the two alternating step workspaces keeps
    its accumulator from step to step and from run to run (Caffe2's workspaces do)."""
    step = core.Net("accumulating_step")
    step.AddExternalInputs("s_prev", "x_t", "timestep")
    step.Accumulate(["x_t"], ["acc"], gamma=1.0)
    step.Add(["s_prev", "acc"], ["s"])
    step.AddExternalOutput("s")
    op = _recurrent_op(step)
    accumulators = [None, None]
    for seed in (13, 14):
        x, s0 = _randn(seed, T, N, D), _randn(seed + 10, 1, N, D)
        workspace.FeedBlob("x", x)
        workspace.FeedBlob("s0", s0)
        workspace.RunOperatorOnce(op)
        states = [s0[0]]
        for t in range(T):
            k = t % 2
            accumulators[k] = x[t:t + 1].copy() if accumulators[k] is None else accumulators[k] + x[t:t + 1]
            states.append(states[-1] + accumulators[k][0])
        np.testing.assert_allclose(workspace.FetchBlob("s_all"), np.stack(states[1:]), rtol=1e-5, atol=1e-5)
