"""RecurrentNetwork with two links into one external tensor whose windows overlap:
a write through one link must be seen through the other within the same step, as
Caffe2's links (views of one buffer) give (operators/rnn/step_segments.py)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.proto import caffe2_pb2


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def _sliding_sum_net(window):
    # each step writes x_t = 2 * input_t at position t + window - 1 of `xs` and reads
    # the window [t, t + window) of xs, which includes that position
    step = caffe2_pb2.NetDef(name="step")
    step.op.extend([
        core.CreateOperator("Scale", ["input_t"], ["x_t"], scale=2.0),
        core.CreateOperator("ReduceFrontSum", ["x_window"], ["out_t"], num_reduce_dim=1),
    ])
    return core.CreateOperator(
        "RecurrentNetwork", ["seq", "xs_init", "out_init"], ["xs_all", "out_all", "scratch"],
        step_net=step, timestep="t",
        recurrent_states=["xs", "out"], initial_recurrent_state_ids=[1, 2],
        link_internal=["input_t", "x_window", "x_t", "out_t"],
        link_external=["seq", "xs", "xs", "out"],
        link_offset=[0, 0, window - 1, 1], link_window=[1, window, 1, 1],
        alias_src=["xs", "out"], alias_dst=["xs_all", "out_all"], alias_offset=[window - 1, 1])


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_write_through_one_link_is_read_through_an_overlapping_one(window):
    T, N, D = 5, 2, 3
    seq = np.random.default_rng(window).standard_normal((T, N, D)).astype(np.float32)
    workspace.FeedBlob("seq", seq)
    workspace.FeedBlob("xs_init", np.zeros((window - 1, N, D), np.float32))
    workspace.FeedBlob("out_init", np.zeros((1, N, D), np.float32))
    workspace.RunOperatorOnce(_sliding_sum_net(window))

    xs = np.concatenate([np.zeros((window - 1, N, D), np.float32), 2 * seq])
    expected = np.stack([xs[t:t + window].sum(0) for t in range(T)])
    np.testing.assert_allclose(workspace.FetchBlob("xs_all"), 2 * seq, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("out_all"), expected, rtol=1e-5, atol=1e-6)
