"""RecurrentNetwork with two links into one external tensor whose windows overlap:
a write through one link must be seen through the other within the same step, as
Caffe2's links (views of one buffer) give (operators/rnn/step_segments.py)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.proto import caffe2_pb2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


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


def test_later_pieces_read_what_earlier_pieces_made_and_disjoint_windows_are_not_cut():
    from caffe2py.operators.rnn import step_segments
    T, N, D, window = 4, 2, 3, 2
    step = caffe2_pb2.NetDef(name="step")
    step.op.extend([
        core.CreateOperator("Scale", ["input_t"], ["half"], scale=1.0),
        core.CreateOperator("Scale", ["half"], ["x_t"], scale=2.0),            # the cut comes after this op
        core.CreateOperator("ReduceFrontSum", ["x_window"], ["s"], num_reduce_dim=1),
        core.CreateOperator("Squeeze", ["half"], ["h2"], dims=[0]),            # made before the cut
        core.CreateOperator("Add", ["s", "h2"], ["out_t"]),
    ])
    step.external_input.extend(["input_t", "x_window", "t"])                  # declared: a strict net
    op = _sliding_sum_net(window)
    for arg in op.arg:
        if arg.name == "step_net":
            arg.n.CopyFrom(step)
    seq = np.random.default_rng(9).standard_normal((T, N, D)).astype(np.float32)
    workspace.FeedBlob("seq", seq)
    workspace.FeedBlob("xs_init", np.zeros((window - 1, N, D), np.float32))
    workspace.FeedBlob("out_init", np.zeros((1, N, D), np.float32))
    workspace.RunOperatorOnce(op)
    xs = np.concatenate([np.zeros((window - 1, N, D), np.float32), 2 * seq])
    expected = np.stack([xs[t:t + window].sum(0) + seq[t] for t in range(T)])
    np.testing.assert_allclose(workspace.FetchBlob("out_all"), expected, rtol=1e-5, atol=1e-6)

    # an LSTM's hidden_t_prev (offset 0) and hidden_t (offset 1) share a tensor, not a step
    from caffe2py.operators.rnn.rnn_ops import Link
    lstm = [Link("h_prev", "h", 0, 1), Link("h_t", "h", 1, 1)]
    assert len(step_segments.segments(step, lstm)) == 1
    assert len(step_segments.segments(step, [Link("x_window", "xs", 0, 2), Link("x_t", "xs", 1, 1)])) == 2
