"""LSTMUnit / LSTMUnitGradient against a float64 reference (Caffe2's rnn_cell_test
lstm_unit formula) and finite differences of that reference."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(5)


def run_op(op_type, inputs, n_out, **kwargs):
    workspace.ResetWorkspace()
    names = ["in%d" % i for i in range(len(inputs))]
    for name, value in zip(names, inputs):
        workspace.FeedBlob(name, value)
    outs = ["out%d" % i for i in range(n_out)]
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, outs, **kwargs))
    return [workspace.FetchBlob(o) for o in outs]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_lstm_unit(h_prev, c_prev, gates, seq_lengths, t, forget_bias=0.0, drop_states=False):
    h_prev, c_prev, gates = (np.asarray(a, np.float64) for a in (h_prev, c_prev, gates))
    d = c_prev.shape[-1]
    i, f, o, g = (gates[..., k * d:(k + 1) * d] for k in range(4))
    i, f, o, g = sigmoid(i), sigmoid(f + forget_bias), sigmoid(o), np.tanh(g)
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    n = c_prev.shape[1]
    valid = np.ones(n, bool) if seq_lengths is None else t < np.asarray(seq_lengths)
    valid = valid.reshape(1, n, 1)
    keep = 0.0 if drop_states else 1.0
    h = np.where(valid, h, keep * h_prev)
    c = np.where(valid, c, keep * c_prev)
    return h, c


def make_inputs(n, d, dtype=np.float32):
    h = RNG.standard_normal((1, n, d)).astype(dtype)
    c = RNG.standard_normal((1, n, d)).astype(dtype)
    g = RNG.standard_normal((1, n, 4 * d)).astype(dtype)
    seq = RNG.integers(1, 6, n).astype(np.int32)
    return h, c, g, seq


@pytest.mark.parametrize("drop_states", [False, True])
@pytest.mark.parametrize("forget_bias", [0.0, 1.0])
@pytest.mark.parametrize("t", [0, 3])
def test_forward_with_sequence_lengths(drop_states, forget_bias, t):
    h, c, g, seq = make_inputs(7, 5)
    got_h, got_c = run_op("LSTMUnit", [h, c, g, seq, np.array([t], np.int32)], 2,
                          forget_bias=forget_bias, drop_states=int(drop_states))
    want_h, want_c = ref_lstm_unit(h, c, g, seq, t, forget_bias, drop_states)
    assert got_h.shape == (1, 7, 5) and got_h.dtype == np.float32
    np.testing.assert_allclose(got_h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)


def test_forward_without_sequence_lengths():
    h, c, g, _ = make_inputs(4, 3)
    got_h, got_c = run_op("LSTMUnit", [h, c, g, np.array(100, np.int32)], 2, sequence_lengths=0)
    want_h, want_c = ref_lstm_unit(h, c, g, None, 100)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)


def test_forward_float16():
    h, c, g, seq = make_inputs(6, 8, np.float16)
    got_h, got_c = run_op("LSTMUnit", [h, c, g, seq, np.array([2], np.int32)], 2, forget_bias=0.5)
    assert got_h.dtype == np.float16 and got_c.dtype == np.float16
    want_h, want_c = ref_lstm_unit(h, c, g, seq, 2, 0.5)
    np.testing.assert_allclose(got_h, want_h, rtol=5e-3, atol=5e-3)
    np.testing.assert_allclose(got_c, want_c, rtol=5e-3, atol=5e-3)


def test_large_extreme_gates_do_not_overflow():
    h, c, _, seq = make_inputs(3, 4)
    g = np.full((1, 3, 16), 200.0, np.float32)
    g[0, 1] = -200.0
    got_h, got_c = run_op("LSTMUnit", [h, c, g, seq, np.array([0], np.int32)], 2)
    want_h, want_c = ref_lstm_unit(h, c, g, seq, 0)
    assert np.isfinite(got_h).all()
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)


def _numeric_grads(h, c, g, seq, t, dh, dc, forget_bias, drop_states, eps=1e-6):
    """d(sum(dh*H + dc*C)) / d(h_prev, c_prev, gates) by central differences in float64."""
    def loss(hp, cp, gg):
        H, C = ref_lstm_unit(hp, cp, gg, seq, t, forget_bias, drop_states)
        return float((dh * H).sum() + (dc * C).sum())
    args = [h.astype(np.float64), c.astype(np.float64), g.astype(np.float64)]
    grads = []
    for k in range(3):
        grad = np.zeros_like(args[k])
        for pos in np.ndindex(*args[k].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[k][pos] += eps
            minus[k][pos] -= eps
            grad[pos] = (loss(*plus) - loss(*minus)) / (2 * eps)
        grads.append(grad)
    return grads


@pytest.mark.parametrize("drop_states", [False, True])
def test_gradient_matches_finite_differences(drop_states):
    n, d, t = 4, 3, 2
    h, c, g, _ = make_inputs(n, d)
    seq = np.array([1, 5, 3, 2], np.int32)   # rows 0 and 3 are past their length at t=2
    H, C = run_op("LSTMUnit", [h, c, g, seq, np.array([t], np.int32)], 2,
                  forget_bias=0.3, drop_states=int(drop_states))
    dh = RNG.standard_normal((1, n, d)).astype(np.float32)
    dc = RNG.standard_normal((1, n, d)).astype(np.float32)
    dh_prev, dc_prev, dgates = run_op(
        "LSTMUnitGradient", [h, c, g, seq, np.array([t], np.int32), H, C, dh, dc], 3,
        forget_bias=0.3, drop_states=int(drop_states))
    num_h, num_c, num_g = _numeric_grads(h, c, g, seq, t, dh, dc, 0.3, drop_states)
    valid = (t < seq).reshape(1, n, 1)
    # Caffe2 leaves H_prev's gradient to the recurrent FC for valid rows (it is 0 here)
    np.testing.assert_allclose(dh_prev, np.where(valid, 0.0, num_h), atol=1e-5)
    np.testing.assert_allclose(dc_prev, num_c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dgates, num_g, rtol=1e-4, atol=1e-5)
    assert dgates.shape == g.shape


def test_gradient_without_sequence_lengths_and_fp16():
    h, c, g, _ = make_inputs(3, 2, np.float16)
    t = np.array([0], np.int32)
    H, C = run_op("LSTMUnit", [h, c, g, t], 2, sequence_lengths=0)
    dh = np.ones((1, 3, 2), np.float16)
    dc = np.zeros((1, 3, 2), np.float16)
    outs = run_op("LSTMUnitGradient", [h, c, g, t, H, C, dh, dc], 3, sequence_lengths=0)
    assert [o.dtype for o in outs] == [np.float16] * 3
    _, num_c, num_g = _numeric_grads(h, c, g, None, 0, dh, dc, 0.0, False, eps=1e-4)
    np.testing.assert_allclose(outs[1], num_c, atol=1e-2)
    np.testing.assert_allclose(outs[2], num_g, atol=1e-2)


def test_errors():
    h, c, g, seq = make_inputs(3, 2)
    t = np.array([0], np.int32)
    with pytest.raises(Caffe2Error, match=r"gates must be \[1, 3, 8\]"):
        run_op("LSTMUnit", [h, c, g[..., :7], seq, t], 2)
    with pytest.raises(Caffe2Error, match="seq_lengths must have N = 3 entries"):
        run_op("LSTMUnit", [h, c, g, seq[:2], t], 2)
    with pytest.raises(Caffe2Error, match="sequence_lengths=1 this op takes 5 inputs"):
        run_op("LSTMUnit", [h, c, g, t], 2)
    with pytest.raises(Caffe2Error, match="takes between 4 and 5 inputs"):
        run_op("LSTMUnit", [h, c, g], 2)


def test_gradient_needs_the_cell_state_gradient_and_zero_gradient_gives_it():
    # Caffe2's LSTMUnit gradient reads both output gradients; ZeroGradient(cell_t, [])
    # is how a net differentiates the hidden state alone
    net = core.Net("lstm_zero_grad")
    h, c, g, s, t = net.AddExternalInput("h", "c", "g", "s", "t")
    hidden, cell = net.LSTMUnit([h, c, g, s, t], ["hidden_t", "cell_t"])
    with pytest.raises(Caffe2Error, match="cell_t"):
        net.Clone("attempt").AddGradientOperators([hidden])
    net.ZeroGradient(cell, [])
    grad_map = net.AddGradientOperators([hidden])
    n, d = 2, 3
    rng = np.random.default_rng(3)
    feeds = {"h": rng.standard_normal((1, n, d)).astype(np.float32),
             "c": rng.standard_normal((1, n, d)).astype(np.float32),
             "g": rng.standard_normal((1, n, 4 * d)).astype(np.float32),
             "s": np.array([2, 2], np.int32), "t": np.array([0], np.int32)}
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)
    # reference: dH/dC_prev with dH = 1 and no gradient through cell_t: f * o * (1 - tanh(C)^2)
    gates = feeds["g"].reshape(n, 4, d)
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    i, f, o, gg = sig(gates[:, 0]), sig(gates[:, 1]), sig(gates[:, 2]), np.tanh(gates[:, 3])
    cell_t = f * feeds["c"][0] + i * gg
    expected = f * o * (1 - np.tanh(cell_t) ** 2)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["c"])[0], expected, rtol=1e-5, atol=1e-6)
