"""RecurrentNetwork and rnn_cell against torch.nn.LSTM / GRU / RNN on the same
weights (variable-length sequences) and against NumPy formulas written here
(MI-LSTM, layer-norm LSTM, attention, drop_states)."""
import logging

import numpy as np
import pytest

from caffe2py import core, gru_cell, model_helper, registry, rnn_cell, workspace
from caffe2py.attention import AttentionType
from caffe2py.errors import Caffe2Error
from caffe2py.registry import OpSchema

torch = pytest.importorskip("torch")

T, N, DIN, H = 5, 3, 4, 6
LENGTHS = np.array([5, 2, 3], np.int32)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _rng(seed=0):
    return np.random.default_rng(seed)


def _randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _valid_mask(t):
    return (t < LENGTHS)[:, None]


def _feed_sequence(rng, din=DIN, lengths=True):
    x = _randn(rng, T, N, din)
    workspace.FeedBlob("input", x)
    if lengths:
        workspace.FeedBlob("seq_lengths", LENGTHS)
    return x


def _torch_reorder_lstm(w):
    """torch packs LSTM gates i, f, g, o; Caffe2's LSTMUnit reads i, f, o, g."""
    i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
    return np.concatenate([i, f, o, g], axis=0)


def _torch_run(module, x, state, lengths=LENGTHS):
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.from_numpy(x), torch.from_numpy(lengths.astype(np.int64)), enforce_sorted=False)
    y, final = module(packed, state)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)
    return y.detach().numpy(), final


def _assert_valid_steps_close(actual, expected, tol=1e-5):
    for t in range(T):
        rows = LENGTHS > t
        np.testing.assert_allclose(actual[t][rows], expected[t][rows], rtol=tol, atol=tol)


# --------------------------------------------------------------------------- LSTM / GRU / RNN vs torch

@pytest.mark.parametrize("forward_only", [True, False])
def test_lstm_matches_torch_on_variable_length_sequences(forward_only, caplog):
    rng = _rng(1)
    x = _feed_sequence(rng)
    h0, c0 = _randn(rng, 1, N, H), _randn(rng, 1, N, H)
    workspace.FeedBlob("h0", h0)
    workspace.FeedBlob("c0", c0)
    model = model_helper.ModelHelper(name="lstm_model")
    with caplog.at_level(logging.WARNING):
        outputs = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H, scope="lstm",
                                forward_only=forward_only)
    hidden_all, hidden_last, cell_all, cell_last = outputs
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(DIN, H)
    workspace.FeedBlob("lstm/i2h_w", _torch_reorder_lstm(ref.weight_ih_l0))
    workspace.FeedBlob("lstm/i2h_b", _torch_reorder_lstm(ref.bias_ih_l0))
    workspace.FeedBlob("lstm/gates_t_w", _torch_reorder_lstm(ref.weight_hh_l0))
    workspace.FeedBlob("lstm/gates_t_b", _torch_reorder_lstm(ref.bias_hh_l0))
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net.Name())
    y, (hn, cn) = _torch_run(ref, x, (torch.from_numpy(h0), torch.from_numpy(c0)))
    _assert_valid_steps_close(workspace.FetchBlob(hidden_all), y)
    np.testing.assert_allclose(workspace.FetchBlob(hidden_last), hn.detach().numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(cell_last), cn.detach().numpy(), atol=1e-5, rtol=1e-5)
    assert workspace.FetchBlob(cell_all).shape == (T, N, H)
    # Rows past their length carry their last state on (Caffe2's LSTMUnit without drop_states).
    hall = workspace.FetchBlob(hidden_all)
    np.testing.assert_array_equal(hall[4, 1], hall[1, 1])
    # A second run of the same net gives the same result (state tensors are remade).
    workspace.RunNet(model.net.Name())
    _assert_valid_steps_close(workspace.FetchBlob(hidden_all), y)
    if not forward_only and getattr(core, "GradientRegistry", None) is None:
        assert "forward-only" in caplog.text       # no gradient registry: said, not silent


def test_stacked_lstm_matches_torch_two_layers():
    rng = _rng(2)
    x = _feed_sequence(rng)
    states = [_randn(rng, 1, N, H) for _ in range(4)]
    for name, value in zip(("h0_0", "c0_0", "h0_1", "c0_1"), states):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="stacked")
    outputs = rnn_cell.LSTM(model, "input", "seq_lengths", ["h0_0", "c0_0", "h0_1", "c0_1"], DIN, [H, H],
                            scope="deep", forward_only=True)
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(DIN, H, num_layers=2)
    params = {str(p) for p in model.params}
    assert {"deep/i2h_w", "deep/layer_0/gates_t_w", "deep/layer_1/i2h_w", "deep/layer_1/gates_t_w"} <= params
    for layer, i2h in ((0, "deep/i2h"), (1, "deep/layer_1/i2h")):
        workspace.FeedBlob(i2h + "_w", _torch_reorder_lstm(getattr(ref, "weight_ih_l%d" % layer)))
        workspace.FeedBlob(i2h + "_b", _torch_reorder_lstm(getattr(ref, "bias_ih_l%d" % layer)))
        workspace.FeedBlob("deep/layer_%d/gates_t_w" % layer, _torch_reorder_lstm(getattr(ref, "weight_hh_l%d" % layer)))
        workspace.FeedBlob("deep/layer_%d/gates_t_b" % layer, _torch_reorder_lstm(getattr(ref, "bias_hh_l%d" % layer)))
    workspace.RunNetOnce(model.net)
    h0 = torch.from_numpy(np.concatenate([states[0], states[2]]))
    c0 = torch.from_numpy(np.concatenate([states[1], states[3]]))
    y, (hn, _) = _torch_run(ref, x, (h0, c0))
    assert len(outputs) == 4
    _assert_valid_steps_close(workspace.FetchBlob(outputs[0]), y)
    np.testing.assert_allclose(workspace.FetchBlob(outputs[1])[0], hn.detach().numpy()[1], atol=1e-5, rtol=1e-5)


def test_gru_linear_before_reset_matches_torch():
    rng = _rng(3)
    x = _feed_sequence(rng)
    h0 = _randn(rng, 1, N, H)
    workspace.FeedBlob("h0", h0)
    model = model_helper.ModelHelper(name="gru_model")
    hidden_all, hidden_last = gru_cell.GRU(model, "input", "seq_lengths", ["h0"], DIN, H, scope="gru",
                                           forward_only=True, linear_before_reset=True)
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.GRU(DIN, H)
    w_hr, w_hz, w_hn = np.split(ref.weight_hh_l0.detach().numpy(), 3)
    b_hr, b_hz, b_hn = np.split(ref.bias_hh_l0.detach().numpy(), 3)
    workspace.FeedBlob("gru/i2h_w", ref.weight_ih_l0.detach().numpy())     # torch packs r, z, n too
    workspace.FeedBlob("gru/i2h_b", ref.bias_ih_l0.detach().numpy())
    for name, w, b in (("reset", w_hr, b_hr), ("update", w_hz, b_hz), ("output", w_hn, b_hn)):
        workspace.FeedBlob("gru/%s_gate_t_w" % name, w)
        workspace.FeedBlob("gru/%s_gate_t_b" % name, b)
    workspace.RunNetOnce(model.net)
    y, hn = _torch_run(ref, x, torch.from_numpy(h0))
    _assert_valid_steps_close(workspace.FetchBlob(hidden_all), y)
    np.testing.assert_allclose(workspace.FetchBlob(hidden_last), hn.detach().numpy(), atol=1e-5, rtol=1e-5)


def test_gru_reset_before_linear_matches_its_formula():
    rng = _rng(4)
    x = _feed_sequence(rng)
    h0 = _randn(rng, 1, N, H)
    workspace.FeedBlob("h0", h0)
    model = model_helper.ModelHelper(name="gru_model")
    hidden_all, _ = gru_cell.GRU(model, "input", "seq_lengths", ["h0"], DIN, H, scope="gru", forward_only=True)
    workspace.RunNetOnce(model.param_init_net)
    p = {}
    for name in ("i2h", "reset_gate_t", "update_gate_t", "output_gate_t"):
        for suffix in ("_w", "_b"):
            shape = workspace.FetchBlob("gru/" + name + suffix).shape
            p[name + suffix] = _randn(rng, *shape, scale=0.5)
            workspace.FeedBlob("gru/" + name + suffix, p[name + suffix])
    workspace.RunNetOnce(model.net)
    h = h0[0]
    for t in range(T):
        xr, xz, xn = np.split(x[t] @ p["i2h_w"].T + p["i2h_b"], 3, axis=1)
        r = _sigmoid(xr + h @ p["reset_gate_t_w"].T + p["reset_gate_t_b"])
        z = _sigmoid(xz + h @ p["update_gate_t_w"].T + p["update_gate_t_b"])
        n = np.tanh(xn + (r * h) @ p["output_gate_t_w"].T + p["output_gate_t_b"])
        h = np.where(_valid_mask(t), z * h + (1 - z) * n, h)
        np.testing.assert_allclose(workspace.FetchBlob(hidden_all)[t], h, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("linear_before_reset", [False, True])
def test_gru_recurrent_op_takes_reset_update_output_parameters_in_that_order(linear_before_reset):
    """Caffe2's GRU builds the reset, update and output projections in that order, so
    the RecurrentNetwork op reads (input, h0, reset w, b, update w, b, output w, b,
    lengths): tests that feed the op positionally (Caffe2's gru_test) rely on it."""
    model = model_helper.ModelHelper(name="gru_model")
    gru_cell.GRU(model, "input", "seq_lengths", ["h0"], DIN, H, scope="gru", forward_only=True,
                 linear_before_reset=linear_before_reset)
    op = model.net.Proto().op[-1]
    assert op.type == "RecurrentNetwork"
    params = [str(i) for i in op.input if str(i).startswith("gru/") and "gate_t" in str(i)]
    assert params == ["gru/%s_gate_t_%s" % (gate, kind) for gate in ("reset", "update", "output")
                      for kind in ("w", "b")]


def test_basic_rnn_matches_torch_without_lengths():
    rng = _rng(5)
    x = _feed_sequence(rng, lengths=False)
    h0 = _randn(rng, 1, N, H)
    workspace.FeedBlob("h0", h0)
    model = model_helper.ModelHelper(name="rnn_model")
    hidden_all, hidden_last = rnn_cell.BasicRNN(model, "input", None, ["h0"], DIN, H, scope="rnn",
                                                forward_only=True, activation="tanh")
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.RNN(DIN, H)
    workspace.FeedBlob("rnn/i2h_w", ref.weight_ih_l0.detach().numpy())
    workspace.FeedBlob("rnn/i2h_b", ref.bias_ih_l0.detach().numpy())
    workspace.FeedBlob("rnn/gates_t_w", ref.weight_hh_l0.detach().numpy())
    workspace.FeedBlob("rnn/gates_t_b", ref.bias_hh_l0.detach().numpy())
    workspace.RunNetOnce(model.net)
    y, hn = ref(torch.from_numpy(x), torch.from_numpy(h0))
    np.testing.assert_allclose(workspace.FetchBlob(hidden_all), y.detach().numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(hidden_last), hn.detach().numpy(), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- NumPy references

def _randomise_params(model, rng, scale=0.5):
    workspace.RunNetOnce(model.param_init_net)
    values = {}
    # computed params too: a frozen bias (brew.fc(freeze_bias=True)) is one, as in Caffe2
    for param in list(model.params) + list(model.GetComputedParams()):
        shape = workspace.FetchBlob(param).shape
        values[str(param)] = _randn(rng, *shape, scale=scale)
        workspace.FeedBlob(param, values[str(param)])
    return values


def _lstm_step(gates, h, c, t, forget_bias=0.0, drop_states=False):
    i, f, o, g = np.split(gates, 4, axis=1)
    c_new = _sigmoid(f + forget_bias) * c + _sigmoid(i) * np.tanh(g)
    h_new = _sigmoid(o) * np.tanh(c_new)
    keep = np.zeros_like(h) if drop_states else None
    valid = _valid_mask(t)
    return (np.where(valid, h_new, h if keep is None else keep),
            np.where(valid, c_new, c if keep is None else keep))


def test_lstm_drop_states_and_forget_bias_follow_lstm_unit():
    rng = _rng(6)
    x = _feed_sequence(rng)
    workspace.FeedBlob("h0", _randn(rng, N, H))       # 2-D initial states work too
    workspace.FeedBlob("c0", _randn(rng, N, H))
    model = model_helper.ModelHelper(name="m")
    hidden_all, _, cell_all, _ = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H,
                                               scope="lstm", forward_only=True, drop_states=True,
                                               forget_bias=1.5)
    p = _randomise_params(model, rng)
    workspace.RunNetOnce(model.net)
    h, c = workspace.FetchBlob("h0"), workspace.FetchBlob("c0")
    for t in range(T):
        gates = x[t] @ p["lstm/i2h_w"].T + p["lstm/i2h_b"] + h @ p["lstm/gates_t_w"].T + p["lstm/gates_t_b"]
        h, c = _lstm_step(gates, h, c, t, forget_bias=1.5, drop_states=True)
        np.testing.assert_allclose(workspace.FetchBlob(hidden_all)[t], h, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob(cell_all)[t], c, atol=1e-5, rtol=1e-5)
    assert not workspace.FetchBlob(hidden_all)[4, 1].any()      # row 1 ended at t = 2


# Ops of other families that some cells use: small stand-ins while they are not registered.
def _standin(monkeypatch, name, factory, n_in, n_out):
    if registry.has_op(name):
        return
    monkeypatch.setitem(registry._schemas, ("", name), [OpSchema(name, num_inputs=n_in, num_outputs=n_out, allow_inplace=True)])
    monkeypatch.setitem(registry._kernels, ("", name, registry.CPU), {"": [registry.KernelEntry(factory)]})


def _elementwise_linear(ctx):
    axis = ctx.int("axis", 1)
    return lambda x, a, b: (x.reshape(int(np.prod(x.shape[:axis])), -1) * a + b).reshape(x.shape).astype(x.dtype)


def _layer_norm(ctx):
    axis, eps = ctx.int("axis", 1), ctx.float("epsilon", 1e-4)

    def run(x, scale, bias):
        axis_ = axis % x.ndim
        flat = x.reshape(int(np.prod(x.shape[:axis_])), -1)
        mean = flat.mean(axis=1, keepdims=True)
        std = np.sqrt(flat.var(axis=1, keepdims=True) + eps)
        y = ((flat - mean) / std).reshape(x.shape) * scale + bias
        return y.astype(x.dtype), mean.astype(x.dtype), std.astype(x.dtype)
    return run


def _squeeze(ctx):
    dims = ctx.ints("dims")
    return lambda x: np.squeeze(x, axis=tuple(dims)).copy()


@pytest.fixture
def cell_ops(monkeypatch):
    _standin(monkeypatch, "ElementwiseLinear", _elementwise_linear, 3, 1)
    _standin(monkeypatch, "LayerNorm", _layer_norm, (1, 3), 3)
    _standin(monkeypatch, "Squeeze", _squeeze, 1, 1)


def test_milstm_matches_its_formula(cell_ops):
    rng = _rng(7)
    x = _feed_sequence(rng)
    workspace.FeedBlob("h0", _randn(rng, 1, N, H))
    workspace.FeedBlob("c0", _randn(rng, 1, N, H))
    model = model_helper.ModelHelper(name="m")
    hidden_all, _, _, _ = rnn_cell.MILSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H,
                                          scope="mi", forward_only=True)
    p = _randomise_params(model, rng)
    workspace.RunNetOnce(model.net)
    h, c = workspace.FetchBlob("h0")[0], workspace.FetchBlob("c0")[0]
    for t in range(T):
        xt = x[t] @ p["mi/i2h_w"].T + p["mi/i2h_b"]
        wh = h @ p["mi/prev_t_w"].T + p["mi/prev_t_b"]
        gates = (p["mi/alpha"] * xt + p["mi/beta1"]) * wh + p["mi/beta2"] * xt + p["mi/b"]
        h, c = _lstm_step(gates, h, c, t)
        np.testing.assert_allclose(workspace.FetchBlob(hidden_all)[t], h, atol=2e-5, rtol=2e-5)


def test_layer_norm_lstm_matches_its_formula(cell_ops):
    rng = _rng(8)
    x = _feed_sequence(rng)
    workspace.FeedBlob("h0", _randn(rng, 1, N, H))
    workspace.FeedBlob("c0", _randn(rng, 1, N, H))
    model = model_helper.ModelHelper(name="m")
    hidden_all, _, _, _ = rnn_cell.LayerNormLSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H,
                                                 scope="ln", forward_only=True)
    p = _randomise_params(model, rng)
    workspace.RunNetOnce(model.net)
    h, c = workspace.FetchBlob("h0")[0], workspace.FetchBlob("c0")[0]
    for t in range(T):
        g = x[t] @ p["ln/i2h_w"].T + p["ln/i2h_b"] + h @ p["ln/gates_t_w"].T + p["ln/gates_t_b"]
        g = (g - g.mean(1, keepdims=True)) / np.sqrt(g.var(1, keepdims=True) + 1e-4)
        g = g * p["ln/gates_t_norm_scale"] + p["ln/gates_t_norm_bias"]
        h, c = _lstm_step(g, h, c, t)
        np.testing.assert_allclose(workspace.FetchBlob(hidden_all)[t], h, atol=2e-5, rtol=2e-5)


def test_lstm_with_regular_attention_matches_its_formula(cell_ops):
    rng = _rng(9)
    t_enc, e = 4, 5
    x = _feed_sequence(rng)
    enc = _randn(rng, t_enc, N, e)
    workspace.FeedBlob("encoder_outputs", enc)
    workspace.FeedBlob("h0", _randn(rng, 1, N, H))
    workspace.FeedBlob("c0", _randn(rng, 1, N, H))
    workspace.FeedBlob("ctx0", _randn(rng, 1, N, e))
    model = model_helper.ModelHelper(name="att")
    result = rnn_cell.LSTMWithAttention(
        model, "input", "seq_lengths", "h0", "c0", "ctx0", encoder_output_dim=e,
        encoder_outputs="encoder_outputs", encoder_lengths=None, decoder_input_dim=DIN,
        decoder_state_dim=H, scope="dec", attention_type=AttentionType.Regular, forward_only=True)
    hidden_all, _, _, _, context_all, context_last = result
    p = _randomise_params(model, rng)
    workspace.RunNetOnce(model.net)
    weighted_enc = enc @ p["dec/weighted_encoder_outputs_w"].T + p["dec/weighted_encoder_outputs_b"]
    h, c, ctx = workspace.FetchBlob("h0")[0], workspace.FetchBlob("c0")[0], workspace.FetchBlob("ctx0")[0]
    for t in range(T):
        recurrent_in = np.concatenate([h, ctx], axis=1)
        gates = (x[t] @ p["dec/decoder/i2h_w"].T + p["dec/decoder/i2h_b"]
                 + recurrent_in @ p["dec/decoder/gates_t_w"].T + p["dec/decoder/gates_t_b"])
        h, c = _lstm_step(gates, h, c, t)
        wd = h @ p["dec/weighted_decoder_hidden_state_w"].T + p["dec/weighted_decoder_hidden_state_b"]
        scores = np.tanh(weighted_enc + wd) @ p["dec/attention_logits_w"].T + p["dec/attention_logits_b"]
        scores = scores[:, :, 0].T                                   # [N, T_enc]
        weights = np.exp(scores - scores.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        ctx = np.einsum("nj,jne->ne", weights, enc)
        np.testing.assert_allclose(workspace.FetchBlob(hidden_all)[t], h, atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(workspace.FetchBlob(context_all)[t], ctx, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(workspace.FetchBlob(context_last)[0], ctx, atol=2e-5, rtol=2e-5)


# --------------------------------------------------------------------------- the op itself

def _identity_step_net():
    """state_t = state_t_prev + input_t, as a hand-built RecurrentNetwork."""
    step = core.Net("step")
    step.AddExternalInputs("input_t", "timestep", "s_prev")
    step.Add(["s_prev", "input_t"], "s")
    step.AddExternalOutput("s")
    return step


def _accumulate_op(step=None, **overrides):
    args = dict(step_net=(step or _identity_step_net()).Proto(), recurrent_states=["s_states"],
                initial_recurrent_state_ids=[1], link_internal=["s_prev", "s", "input_t"],
                link_external=["s_states", "s_states", "x"], link_offset=[0, 1, 0],
                alias_src=["s_states", "s_states"], alias_dst=["s_all", "s_last"], alias_offset=[1, -1],
                timestep="timestep")
    args.update(overrides)
    return core.CreateOperator("RecurrentNetwork", ["x", "s0"], ["s_all", "s_last", "scratch"], **args)


@pytest.mark.parametrize("s0_shape", [(2,), (3, 2), (1, 3, 2)])
def test_recurrent_network_cumulative_sum_and_initial_state_forms(s0_shape):
    rng = _rng(10)
    x = _randn(rng, 4, 3, 2)
    s0 = _randn(rng, *s0_shape)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("s0", s0)
    workspace.RunOperatorOnce(_accumulate_op())
    start = np.broadcast_to(s0.reshape(-1, 2) if s0.ndim > 1 else s0, (3, 2))
    expect = start + np.cumsum(x, axis=0)
    np.testing.assert_allclose(workspace.FetchBlob("s_all"), expect, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("s_last"), expect[-1:], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("x"), x)       # the input was not written


def test_recurrent_network_step_net_as_text_and_blob_fetcher():
    from google.protobuf import text_format
    rng = _rng(11)
    workspace.FeedBlob("x", _randn(rng, 4, 3, 2))
    workspace.FeedBlob("s0", _randn(rng, 2))
    op = _accumulate_op()
    for arg in op.arg:
        if arg.name == "step_net":
            text = text_format.MessageToString(arg.n)
            arg.ClearField("n")
            arg.s = text.encode()
    workspace.RunOperatorOnce(op)
    s_all = workspace.FetchBlob("s_all")
    workspace.RunOperatorOnce(core.CreateOperator("RecurrentNetworkBlobFetcher", ["scratch"], ["names"],
                                                  prefix="rnn"))
    names = set(workspace.FetchBlob("names").tolist())
    # forward-only: two alternating step workspaces, holding steps 2 and 3 last; string
    # tensors are fetched as bytes, as Caffe2's Python 3 binding gives them
    assert {b"rnn_s0", b"rnn_s1", b"rnn_timestep0", b"rnn_timestep1"} <= names
    np.testing.assert_allclose(workspace.FetchBlob("rnn_s0"), s_all[2:3])
    np.testing.assert_allclose(workspace.FetchBlob("rnn_s1"), s_all[3:4])
    assert workspace.FetchBlob("rnn_timestep1").tolist() == [3]


def test_recurrent_network_errors_name_the_op_and_leave_the_workspace():
    workspace.FeedBlob("x", np.ones((4, 3, 2), np.float32))
    workspace.FeedBlob("s0", np.ones((5, 2), np.float32))           # batch 5 != 3
    with pytest.raises(Caffe2Error, match="RecurrentNetwork.*batch size 3"):
        workspace.RunOperatorOnce(_accumulate_op())
    assert not workspace.HasBlob("s_all") and not workspace.HasBlob("s_states")
    workspace.FeedBlob("s0", np.ones((2,), np.float32))
    with pytest.raises(Caffe2Error, match="must have the same length"):
        workspace.RunOperatorOnce(_accumulate_op(link_offset=[0, 1]))
    with pytest.raises(Caffe2Error, match="timestep 3, but 'x' has shape \\[4, 3, 2\\]"):
        workspace.RunOperatorOnce(_accumulate_op(link_offset=[0, 1, 1]))
    bad = core.Net("step")
    bad.AddExternalInputs("input_t", "timestep", "s_prev")
    bad.Concat(["s_prev", "input_t"], ["s", "split"], axis=2)       # wrong width for the state
    bad.AddExternalOutput("s")
    with pytest.raises(Caffe2Error, match="timestep 0.*wrote 's' with shape \\[1, 3, 4\\]"):
        workspace.RunOperatorOnce(_accumulate_op(step=bad))
    with pytest.raises(Caffe2Error, match="step_net"):
        workspace.RunOperatorOnce(core.CreateOperator("RecurrentNetwork", ["x", "s0"], ["a", "scratch"]))


def test_unsupported_lstm_variants_are_named():
    model = model_helper.ModelHelper(name="m")
    with pytest.raises(Caffe2Error, match="cuDNN"):
        rnn_cell.cudnn_LSTM(model, "input", ("h0", "c0"), DIN, H, scope="l")


# --------------------------------------------------------------------------- GRUUnit op

def test_gru_unit_op_and_gradient_against_numpy_and_finite_differences():
    rng = _rng(12)
    h_prev = _randn(rng, 1, N, H)
    gates = _randn(rng, 1, N, 3 * H)
    t = np.array([2], np.int32)
    for name, value in (("h", h_prev), ("g", gates), ("len", LENGTHS), ("t", t)):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(core.CreateOperator("GRUUnit", ["h", "g", "len", "t"], ["h_new"]))
    u = _sigmoid(gates[0, :, H:2 * H])
    expect = np.where(_valid_mask(2), h_prev[0] * u + np.tanh(gates[0, :, 2 * H:]) * (1 - u), h_prev[0])
    np.testing.assert_allclose(workspace.FetchBlob("h_new")[0], expect, rtol=1e-5, atol=1e-6)
    dh = _randn(rng, 1, N, H)
    workspace.FeedBlob("dh", dh)
    workspace.RunOperatorOnce(core.CreateOperator("GRUUnitGradient", ["h", "g", "len", "t", "h_new", "dh"],
                                                  ["dh_prev", "dg"]))

    def loss(hp, gt):
        uu = _sigmoid(gt[0, :, H:2 * H].astype(np.float64))
        out = hp[0] * uu + np.tanh(gt[0, :, 2 * H:]) * (1 - uu)
        out = np.where(_valid_mask(2), out, hp[0])
        return float((out * dh[0]).sum())
    eps = 1e-3
    for blob, value, grad in (("h", h_prev, "dh_prev"), ("g", gates, "dg")):
        numeric = np.zeros(value.size)
        base = value.astype(np.float64)
        for k in range(value.size):
            plus, minus = base.copy(), base.copy()
            plus.flat[k] += eps
            minus.flat[k] -= eps
            args = (plus, gates) if blob == "h" else (h_prev, plus)
            args_m = (minus, gates) if blob == "h" else (h_prev, minus)
            numeric[k] = (loss(*args) - loss(*args_m)) / (2 * eps)
        np.testing.assert_allclose(workspace.FetchBlob(grad).reshape(-1), numeric, rtol=1e-3, atol=1e-3)
    with pytest.raises(Caffe2Error, match="3 \\* D"):
        workspace.FeedBlob("g", _randn(rng, 1, N, 2 * H))
        workspace.RunOperatorOnce(core.CreateOperator("GRUUnit", ["h", "g", "len", "t"], ["h_new"]))
