"""Stacked (MultiRNNCell) LSTMs and bidirectional encoders on RecurrentNetwork's fused
path, forward and backward (operators/rnn/fused_steps.py recognise_lstm_stack*,
fused_run.py lstm_stack_*), against the generic step-net loop on the same training
nets (CAFFE2PY_RNN_FUSED=0) and against torch.nn.LSTM."""
import numpy as np
import pytest

from caffe2py import core, gru_cell, model_helper, rnn_cell, workspace
from caffe2py.kernels.cpu.rnn import fused_lstm
from caffe2py.operators.rnn import fused_run

from test_rnn_fused import _assert_same, _randomise_params, _run_both

if getattr(core, "GradientRegistry", None) is None:
    pytest.skip("needs the gradient registry (core.GradientRegistry)", allow_module_level=True)
if not fused_lstm.available():
    pytest.skip("the fused kernels need NumPy's OpenBLAS entry points", allow_module_level=True)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


@pytest.fixture
def fused_calls(monkeypatch):
    """How many fused runs took place, by function (a backward returning None did not)."""
    calls = {}

    def counted(name):
        fn = getattr(fused_run, name)

        def wrapper(*args):
            result = fn(*args)
            calls[name] = calls.get(name, 0) + (result is not None)
            return result
        monkeypatch.setattr(fused_run, name, wrapper)
    for kind in ("lstm", "lstm_stack", "gru_stack"):
        counted(kind + "_forward")
        counted(kind + "_backward")
    return calls


def _feed_stack(rng, t, n, din, dims, lengths, init_shape=None):
    """input, seq_lengths and the initial h, c of every layer (h0, c0, h1, c1, ...)."""
    workspace.FeedBlob("input", rng.standard_normal((t, n, din)).astype(np.float32))
    if lengths is not None:
        workspace.FeedBlob("seq_lengths", np.asarray(lengths, np.int32))
    initial = []
    for k, d in enumerate(dims):
        for state in ("h", "c"):
            shape = (d,) if init_shape == "vector" else (1, n, d)
            workspace.FeedBlob("%s%d" % (state, k), rng.standard_normal(shape).astype(np.float32))
            initial.append("%s%d" % (state, k))
    return initial


@pytest.mark.parametrize("cell,t,n,din,dims,lengths,forget_bias,drop_states,memopt", [
    ("LSTM", 5, 3, 4, [6, 6], [5, 1, 3], 0.0, False, False),
    ("LSTM", 6, 2, 5, [12, 8, 9], None, 1.0, False, False),            # 3 layers, every dim different
    ("LSTM", 4, 4, 3, [9, 5], [4, 0, 2, 3], 0.5, True, False),          # drop_states, a zero length
    ("LSTM", 6, 1, 4, [7, 10], [4], 1.0, False, False),                 # N = 1 (GEMV in the kernels)
    ("LSTM", 5, 3, 4, [8, 6, 7], [5, 2, 4], 0.0, False, True),          # memory_optimization (recomputed forward)
    ("MILSTM", 5, 3, 4, [6, 9], [5, 1, 3], 0.5, False, False),
    ("MILSTM", 4, 2, 3, [8, 5, 7], None, 0.0, True, True),
])
def test_stacked_lstm_training_fused_matches_generic(monkeypatch, fused_calls, cell, t, n, din, dims, lengths,
                                                     forget_bias, drop_states, memopt):
    rng = np.random.default_rng(t * 100 + sum(dims))
    initial = _feed_stack(rng, t, n, din, dims, lengths)
    model = model_helper.ModelHelper(name="stack")
    out = getattr(rnn_cell, cell)(model, "input", "seq_lengths" if lengths is not None else None, initial, din,
                                  dims, scope="stack", outputs_with_grads=(0, 1, 3), forget_bias=forget_bias,
                                  drop_states=drop_states, memory_optimization=memopt)
    generic, fused = _run_both(monkeypatch, model, out, [out[0], out[1], out[3]], rng, fetch_steps=True)
    # generic run: none; fused: the forward-only run and the training net's forward and backward
    assert fused_calls == {"lstm_stack_forward": 2, "lstm_stack_backward": 1}
    assert any(name.startswith("steps_stack/layer_1/i2h") for name in fused)    # the step workspaces' blobs
    wanted = [str(p) for p in model.params] + initial + ["input"]
    per_layer = 4 if cell == "LSTM" else 8         # i2h and recurrent W, b (MILSTM: alpha, beta1, beta2, b)
    assert len(model.params) == per_layer * len(dims) and all("grad:" + name in fused for name in wanted)
    _assert_same(generic, fused, tol=1e-5)


@pytest.mark.parametrize("t,n,din,dims,lengths,lbr,drop_states,memopt", [
    (5, 3, 4, [6, 9], [5, 1, 3], True, False, False),
    (6, 2, 5, [12, 8, 9], None, False, False, False),           # 3 layers, the other reset form
    (4, 4, 3, [9, 5], [4, 0, 2, 3], True, True, True),          # drop_states, a zero length, memory_optimization
    (6, 1, 4, [7, 10], [4], False, False, False),               # N = 1
])
def test_stacked_gru_training_fused_matches_generic(monkeypatch, fused_calls, t, n, din, dims, lengths, lbr,
                                                    drop_states, memopt):
    rng = np.random.default_rng(t * 10 + sum(dims))
    workspace.FeedBlob("input", rng.standard_normal((t, n, din)).astype(np.float32))
    if lengths is not None:
        workspace.FeedBlob("seq_lengths", np.asarray(lengths, np.int32))
    initial = ["h%d" % k for k in range(len(dims))]
    for name, d in zip(initial, dims):
        workspace.FeedBlob(name, rng.standard_normal((1, n, d)).astype(np.float32))
    model = model_helper.ModelHelper(name="gru_stack")
    out = gru_cell.GRU(model, "input", "seq_lengths" if lengths is not None else None, initial, din, dims,
                       scope="stack", outputs_with_grads=(0, 1), linear_before_reset=lbr, drop_states=drop_states,
                       memory_optimization=memopt)
    generic, fused = _run_both(monkeypatch, model, out, [out[0], out[1]], rng, fetch_steps=True)
    assert fused_calls == {"gru_stack_forward": 2, "gru_stack_backward": 1}
    assert any(name.startswith("steps_stack/layer_1/output_gate_t") for name in fused)
    wanted = [str(p) for p in model.params] + initial + ["input"]
    assert len(model.params) == 8 * len(dims) and all("grad:" + name in fused for name in wanted)
    _assert_same(generic, fused, tol=1e-5)


def test_stacked_lstm_gradients_from_outside_reach_every_layer(monkeypatch, fused_calls):
    """A MultiRNNCell built by hand with gradients on layer 0's outputs too: what arrives
    from outside adds to the upper layer's contribution to layer 0's hidden state."""
    rng = np.random.default_rng(21)
    dims = [7, 5]
    initial = _feed_stack(rng, 5, 3, 4, dims, [5, 3, 2])
    cells = [rnn_cell.LSTMCell(input_size=i, hidden_size=d, forget_bias=0.0, memory_optimization=False)
             for i, d in zip([4] + dims[:-1], dims)]
    cell = rnn_cell.MultiRNNCell(cells, name="multi")
    model = model_helper.ModelHelper(name="multi")
    _, states = cell.apply_over_sequence(model, "input", "seq_lengths", initial, outputs_with_grads=[0, 1, 3, 4])
    with_grads = [states[0], states[1], states[3], states[4]]   # layer 0: h all, h last, c last; layer 1: h all
    generic, fused = _run_both(monkeypatch, model, states, with_grads, rng)
    assert fused_calls["lstm_stack_backward"] == 1
    _assert_same(generic, fused, tol=1e-5)


def test_stacked_lstm_zero_initial_state_parameters(monkeypatch, fused_calls):
    """[D] initial states (one per layer, broadcast over the batch): their gradients sum the batch."""
    rng = np.random.default_rng(22)
    initial = _feed_stack(rng, 5, 3, 4, [6, 8], [5, 5, 2], init_shape="vector")
    model = model_helper.ModelHelper(name="stack")
    out = rnn_cell.LSTM(model, "input", "seq_lengths", initial, 4, [6, 8], scope="stack")
    generic, fused = _run_both(monkeypatch, model, out, [out[0]], rng)
    assert fused_calls["lstm_stack_backward"] == 1
    assert generic["grad:h0"].shape == (6,)
    _assert_same(generic, fused, tol=1e-5)


@pytest.mark.parametrize("cell", ["LSTM", "MILSTM"])
def test_generic_stack_backward_after_a_fused_forward(monkeypatch, fused_calls, cell):
    """When the fused stack backward declines, the generic loop reads the step workspaces
    the fused forward filled (each layer's blobs, the projections between them)."""
    rng = np.random.default_rng(23)
    initial = _feed_stack(rng, 5, 3, 4, [6, 7], [5, 2, 4])
    model = model_helper.ModelHelper(name="stack")
    out = getattr(rnn_cell, cell)(model, "input", "seq_lengths", initial, 4, [6, 7], scope="stack")
    monkeypatch.setattr(fused_run, "lstm_stack_backward", lambda *args: None)
    generic, mixed = _run_both(monkeypatch, model, out, [out[0]], rng)
    assert fused_calls == {"lstm_stack_forward": 2}
    _assert_same(generic, mixed, tol=1e-5)


@pytest.mark.parametrize("dims,residual,lengths,with_grads,memopt,drop_states", [
    ([6, 6, 6], [1, 2], [4, 2], "all", False, False),
    ([6, 6, 6], [1], None, "all", False, False),              # an intermediate residual layer only
    ([5, 7, 7, 7], [2, 3], [4, 1], "output", False, False),   # layer 1 plain, then a residual chain
    ([6, 6, 6, 6], [1, 2, 3], [3, 4], "output", True, False),  # memory_optimization (recomputed gates)
    ([6, 6, 6], [1, 2], [4, 0], "all", False, True),           # drop_states, a zero length
    ([6, 6], [1], [4, 2], "all", False, False),                # 2 layers: the add is outside the op
])
def test_residual_lstm_stack_fused_matches_generic(monkeypatch, fused_calls, dims, residual, lengths, with_grads,
                                                   memopt, drop_states):
    """residual_output_layers: layer l's Sum of its new hidden state and its input is what
    layer l + 1 projects (fused: one add over the sequence; backward: its gradient goes
    to both), on the fused path forward and backward, against the generic loop: outputs,
    every gradient, the step workspaces' blobs (the residual sums included)."""
    rng = np.random.default_rng(26 + sum(dims) + len(residual))
    initial = _feed_stack(rng, 4, 2, 6, dims, lengths)
    cells = [rnn_cell.LSTMCell(input_size=(6 if k == 0 else dims[k - 1]), hidden_size=d, forget_bias=0.5,
                               memory_optimization=memopt, drop_states=drop_states) for k, d in enumerate(dims)]
    cell = rnn_cell.MultiRNNCell(cells, name="res", residual_output_layers=residual)
    model = model_helper.ModelHelper(name="res")
    if with_grads == "all":
        indices = list(range(4 * len(dims)))
    else:
        indices = [4 * k for k in cell.output_connected_layers]
    output, states = cell.apply_over_sequence(model, "input", "seq_lengths" if lengths is not None else None,
                                              initial, outputs_with_grads=indices)
    grad_of = [states[k] for k in indices] if with_grads == "all" else [output]
    generic, fused = _run_both(monkeypatch, model, list(states) + [output], grad_of, rng, fetch_steps=True)
    assert fused_calls == {"lstm_stack_forward": 2, "lstm_stack_backward": 1}
    sums = ["res/layer_%d/res/residual_output_%d" % (k, k) for k in residual if k < len(dims) - 1]
    for name in sums:
        assert any(name in blob for blob in fused), sorted(b for b in fused if "resid" in b)   # in the step workspaces
    wanted = [str(p) for p in model.params] + initial + ["input"]
    assert all("grad:" + name in fused for name in wanted)
    _assert_same(generic, fused, tol=1e-5)


def test_generic_backward_after_a_fused_residual_forward(monkeypatch, fused_calls):
    """When the fused backward declines, the generic loop's gradient of the next layer's
    projection reads the residual sums the fused forward left in the step workspaces."""
    rng = np.random.default_rng(27)
    dims = [6, 6, 6]
    initial = _feed_stack(rng, 5, 3, 6, dims, [5, 2, 4])
    cells = [rnn_cell.LSTMCell(input_size=6, hidden_size=6, forget_bias=0.0, memory_optimization=False)
             for _ in dims]
    cell = rnn_cell.MultiRNNCell(cells, name="res", residual_output_layers=[1, 2])
    model = model_helper.ModelHelper(name="res")
    output, states = cell.apply_over_sequence(model, "input", "seq_lengths", initial, outputs_with_grads=[0, 4, 8])
    monkeypatch.setattr(fused_run, "lstm_stack_backward", lambda *args: None)
    grads = model.net.AddGradientOperators({output: "output_g"})
    workspace.RunNetOnce(model.param_init_net)
    _randomise_params(model, rng)
    workspace.FeedBlob("output_g", rng.standard_normal((5, 3, 6)).astype(np.float32))
    results = []
    for fused in ("1", "0"):        # the fused forward first: no generic run has filled the step workspaces
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        workspace.RunNetOnce(model.net)
        results.append({str(k): workspace.FetchBlob(v) for k, v in grads.items()
                        if isinstance(v, core.BlobReference)})
        workspace.FeedBlob("res/step_workspaces", np.zeros(0))      # fresh step workspaces for the next run
    assert fused_calls == {"lstm_stack_forward": 1}
    _assert_same(results[1], results[0], tol=1e-5)


def test_residual_milstm_stack_runs_generic(monkeypatch, fused_calls):
    """A residual stack of MILSTM layers is not a recognised shape: the generic loop runs
    it (forward and backward)."""
    rng = np.random.default_rng(24)
    dims = [6, 6, 6]
    initial = _feed_stack(rng, 4, 2, 6, dims, [4, 2])
    cells = [rnn_cell.MILSTMCell(input_size=6, hidden_size=6, forget_bias=0.0, memory_optimization=False)
             for _ in dims]
    cell = rnn_cell.MultiRNNCell(cells, name="res", residual_output_layers=[1, 2])
    model = model_helper.ModelHelper(name="res")
    _, states = cell.apply_over_sequence(model, "input", "seq_lengths", initial, outputs_with_grads=[8])
    generic, fused = _run_both(monkeypatch, model, states, [states[8]], rng)
    assert fused_calls == {}
    _assert_same(generic, fused, tol=0)


def test_stacked_lstm_matches_torch(fused_calls):
    """A 2-layer rnn_cell.LSTM is torch.nn.LSTM(num_layers=2) on the same weights: outputs
    and the gradients of every weight, the input and each layer's initial h and c,
    with variable sequence lengths (packed sequences in torch)."""
    torch = pytest.importorskip("torch")
    t, n, din, h = 6, 3, 5, 12
    lengths = np.array([6, 2, 4], np.int32)
    mask = (np.arange(t)[:, None] < lengths[None, :])[:, :, None].astype(np.float32)
    rng = np.random.default_rng(25)
    x = rng.standard_normal((t, n, din)).astype(np.float32)
    h0, c0 = (rng.standard_normal((2, n, h)).astype(np.float32) for _ in range(2))
    r_all = rng.standard_normal((t, n, h)).astype(np.float32) * mask
    r_last = rng.standard_normal((1, n, h)).astype(np.float32)
    feeds = {"input": x, "seq_lengths": lengths, "g_all": r_all, "g_last": r_last}
    for layer in range(2):
        feeds["h%d" % layer], feeds["c%d" % layer] = h0[layer:layer + 1], c0[layer:layer + 1]
    for name, value in feeds.items():
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="stack_torch")
    h_all, h_last, _, c_last = rnn_cell.LSTM(model, "input", "seq_lengths", ["h0", "c0", "h1", "c1"], din, [h, h],
                                             scope="stack", outputs_with_grads=(0, 1))
    grads = model.net.AddGradientOperators({h_all: "g_all", h_last: "g_last"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(din, h, num_layers=2)

    def reorder(w):                       # torch's gates i, f, g, o -> Caffe2's i, f, o, g
        i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
        return np.concatenate([i, f, o, g], axis=0)
    blobs = {"stack/i2h_w": ref.weight_ih_l0, "stack/i2h_b": ref.bias_ih_l0,
             "stack/layer_0/gates_t_w": ref.weight_hh_l0, "stack/layer_0/gates_t_b": ref.bias_hh_l0,
             "stack/layer_1/i2h_w": ref.weight_ih_l1, "stack/layer_1/i2h_b": ref.bias_ih_l1,
             "stack/layer_1/gates_t_w": ref.weight_hh_l1, "stack/layer_1/gates_t_b": ref.bias_hh_l1}
    for blob, p in blobs.items():
        workspace.FeedBlob(blob, reorder(p))
    workspace.RunNetOnce(model.net)
    assert fused_calls == {"lstm_stack_forward": 1, "lstm_stack_backward": 1}
    xt, h0t, c0t = (torch.from_numpy(v).requires_grad_() for v in (x, h0, c0))
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    y, (hn, cn) = ref(packed, (h0t, c0t))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=t)
    ((y * torch.from_numpy(r_all)).sum() + (hn[1:] * torch.from_numpy(r_last)).sum()).backward()

    def close(name, expected, scale=1.0):
        np.testing.assert_allclose(workspace.FetchBlob(name) * scale, expected, rtol=1e-5, atol=1e-5,
                                   err_msg=str(name))
    close(h_all, y.detach().numpy(), mask)     # rows past their length: ours repeat the state, torch pads 0
    close(h_last, hn[1:].detach().numpy())
    close(c_last, cn[1:].detach().numpy())
    for blob, p in blobs.items():
        close(grads[core.BlobReference(blob)], reorder(p.grad))
    close(grads[core.BlobReference("input")], xt.grad.numpy())
    for layer in range(2):
        close(grads[core.BlobReference("h%d" % layer)], h0t.grad[layer:layer + 1].numpy())
        close(grads[core.BlobReference("c%d" % layer)], c0t.grad[layer:layer + 1].numpy())


def _bidirectional_encoder(model, inputs, lengths, initial, din, dims, use_attention):
    """Caffe2's seq2seq_util.rnn_bidirectional_encoder, written with the public API (and
    any number of layers): an LSTM over the input, another over ReversePackedSegs(input)
    whose outputs are reversed back, both concatenated on the feature axis; both
    directions start from the same initial states."""
    with_grads = [0] if use_attention else [1, 3]
    out_fw, last_h_fw, _, last_c_fw = rnn_cell.LSTM(model, inputs, lengths, initial, din, dims,
                                                    scope="forward_encoder", outputs_with_grads=with_grads)
    reversed_inputs = model.net.ReversePackedSegs([inputs, lengths], ["reversed_embedded_inputs"])
    out_bw, last_h_bw, _, last_c_bw = rnn_cell.LSTM(model, reversed_inputs, lengths, initial, din, dims,
                                                    scope="backward_encoder", outputs_with_grads=with_grads)
    out_bw = model.net.ReversePackedSegs([out_bw, lengths], ["outputs_bw"])
    outputs, _ = model.net.Concat([out_fw, out_bw], ["outputs", "outputs_dim"], axis=2)
    last_h, _ = model.net.Concat([last_h_fw, last_h_bw], ["final_hidden_state", "final_hidden_state_dim"], axis=2)
    last_c, _ = model.net.Concat([last_c_fw, last_c_bw], ["final_cell_state", "final_cell_state_dim"], axis=2)
    return outputs, last_h, last_c


@pytest.mark.parametrize("dims,use_attention", [([8], True), ([8], False), ([6, 9], True), ([7, 5, 6], False)])
def test_bidirectional_encoder_fused_matches_generic(monkeypatch, fused_calls, dims, use_attention):
    """Each direction's RecurrentNetwork runs fused forward and backward (variable lengths,
    [D] initial states as in seq2seq, random here, shared by both directions)."""
    rng = np.random.default_rng(31 + len(dims))
    t, n, din = 6, 4, 5
    workspace.FeedBlob("input", rng.standard_normal((t, n, din)).astype(np.float32))
    workspace.FeedBlob("lengths", np.array([6, 3, 1, 4], np.int32))
    model = model_helper.ModelHelper(name="bidir")
    initial = []
    for k, d in enumerate(dims):
        for state in ("h", "c"):
            initial.append(model.param_init_net.GaussianFill([], "init_%s%d" % (state, k), shape=[d]))
    outputs, last_h, last_c = _bidirectional_encoder(model, "input", "lengths", initial, din, dims, use_attention)
    with_grads = [outputs] if use_attention else [last_h, last_c]
    generic, fused = _run_both(monkeypatch, model, [outputs, last_h, last_c], with_grads, rng)
    kind = "lstm" if len(dims) == 1 else "lstm_stack"
    # per direction: the forward-only run and the training run forward, one backward
    assert fused_calls == {kind + "_forward": 4, kind + "_backward": 2}
    assert all("grad:" + name in fused for name in [str(p) for p in model.params + initial] + ["input"])
    _assert_same(generic, fused, tol=1e-5)


@pytest.mark.parametrize("use_attention", [True, False])
def test_bidirectional_encoder_matches_torch(fused_calls, use_attention):
    """The bidirectional encoder is torch.nn.LSTM(bidirectional=True) on packed sequences:
    outputs, final states and the gradients of both directions' weights, the input and
    the shared [D] initial states (their gradient sums both directions and the batch).
    The loss reads what the encoder's outputs_with_grads pass on: the all-step outputs
    with attention, else the final hidden and cell states."""
    torch = pytest.importorskip("torch")
    t, n, din, h = 6, 3, 4, 10
    lengths = np.array([6, 2, 4], np.int32)
    mask = (np.arange(t)[:, None] < lengths[None, :])[:, :, None].astype(np.float32)
    rng = np.random.default_rng(41)
    x = rng.standard_normal((t, n, din)).astype(np.float32)
    init_h, init_c = (rng.standard_normal(h).astype(np.float32) for _ in range(2))
    r_all = rng.standard_normal((t, n, 2 * h)).astype(np.float32) * mask
    r_h, r_c = (rng.standard_normal((1, n, 2 * h)).astype(np.float32) for _ in range(2))
    for name, value in (("input", x), ("lengths", lengths), ("init_h", init_h), ("init_c", init_c),
                        ("g_all", r_all), ("g_h", r_h), ("g_c", r_c)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="bidir_torch")
    outputs, last_h, last_c = _bidirectional_encoder(model, "input", "lengths", ["init_h", "init_c"], din, [h],
                                                     use_attention=use_attention)
    grads = model.net.AddGradientOperators({outputs: "g_all"} if use_attention
                                           else {last_h: "g_h", last_c: "g_c"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(din, h, bidirectional=True)

    def reorder(w):                       # torch's gates i, f, g, o -> Caffe2's i, f, o, g
        i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
        return np.concatenate([i, f, o, g], axis=0)
    blobs = {}
    for scope, suffix in (("forward_encoder", ""), ("backward_encoder", "_reverse")):
        for blob, p in (("i2h_w", "weight_ih_l0"), ("i2h_b", "bias_ih_l0"), ("gates_t_w", "weight_hh_l0"),
                        ("gates_t_b", "bias_hh_l0")):
            blobs[scope + "/" + blob] = getattr(ref, p + suffix)
    for blob, p in blobs.items():
        workspace.FeedBlob(blob, reorder(p))
    workspace.RunNetOnce(model.net)
    assert fused_calls == {"lstm_forward": 2, "lstm_backward": 2}
    xt = torch.from_numpy(x).requires_grad_()
    h0t, c0t = (torch.from_numpy(v).requires_grad_() for v in (init_h, init_c))
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    y, (hn, cn) = ref(packed, (h0t.expand(2, n, h).contiguous(), c0t.expand(2, n, h).contiguous()))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=t)
    hn_cat, cn_cat = (torch.cat([v[0], v[1]], dim=1)[None] for v in (hn, cn))
    if use_attention:
        (y * torch.from_numpy(r_all)).sum().backward()
    else:
        ((hn_cat * torch.from_numpy(r_h)).sum() + (cn_cat * torch.from_numpy(r_c)).sum()).backward()

    def close(name, expected, scale=1.0):
        np.testing.assert_allclose(workspace.FetchBlob(name) * scale, expected, rtol=1e-5, atol=1e-5,
                                   err_msg=str(name))
    close(outputs, y.detach().numpy(), mask)   # rows past their length: ours repeat the state, torch pads 0
    close(last_h, hn_cat.detach().numpy())
    close(last_c, cn_cat.detach().numpy())
    for blob, p in blobs.items():
        close(grads[core.BlobReference(blob)], reorder(p.grad))
    close(grads[core.BlobReference("input")], xt.grad.numpy())
    close(grads[core.BlobReference("init_h")], h0t.grad.numpy())
    close(grads[core.BlobReference("init_c")], c0t.grad.numpy())


def test_stacked_gru_matches_torch(fused_calls):
    """A 2-layer gru_cell.GRU(linear_before_reset=True) is torch.nn.GRU(num_layers=2):
    outputs and the gradients of every weight, the input and each layer's initial state."""
    torch = pytest.importorskip("torch")
    t, n, din, h = 6, 3, 5, 10
    lengths = np.array([6, 3, 1], np.int32)
    mask = (np.arange(t)[:, None] < lengths[None, :])[:, :, None].astype(np.float32)
    rng = np.random.default_rng(51)
    x = rng.standard_normal((t, n, din)).astype(np.float32)
    h0 = rng.standard_normal((2, n, h)).astype(np.float32)
    r_all = rng.standard_normal((t, n, h)).astype(np.float32) * mask
    for name, value in (("input", x), ("seq_lengths", lengths), ("h0", h0[:1]), ("h1", h0[1:]), ("g_all", r_all)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="gru_torch")
    h_all, _ = gru_cell.GRU(model, "input", "seq_lengths", ["h0", "h1"], din, [h, h], scope="stack",
                            linear_before_reset=True)
    grads = model.net.AddGradientOperators({h_all: "g_all"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.GRU(din, h, num_layers=2)
    gates = ("reset", "update", "output")
    blobs = {"stack/i2h_w": (ref.weight_ih_l0, None), "stack/i2h_b": (ref.bias_ih_l0, None),
             "stack/layer_1/i2h_w": (ref.weight_ih_l1, None), "stack/layer_1/i2h_b": (ref.bias_ih_l1, None)}
    for layer in range(2):
        for k, gate in enumerate(gates):       # torch packs the recurrent weights of r, z, n in one tensor
            blobs["stack/layer_%d/%s_gate_t_w" % (layer, gate)] = (getattr(ref, "weight_hh_l%d" % layer), k)
            blobs["stack/layer_%d/%s_gate_t_b" % (layer, gate)] = (getattr(ref, "bias_hh_l%d" % layer), k)

    def value(p, k, grad=False):
        v = (p.grad if grad else p.detach()).numpy()
        return v if k is None else np.split(v, 3)[k]
    for blob, (p, k) in blobs.items():
        workspace.FeedBlob(blob, value(p, k))
    workspace.RunNetOnce(model.net)
    assert fused_calls == {"gru_stack_forward": 1, "gru_stack_backward": 1}
    xt, h0t = torch.from_numpy(x).requires_grad_(), torch.from_numpy(h0).requires_grad_()
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    y, _ = ref(packed, h0t)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=t)
    (y * torch.from_numpy(r_all)).sum().backward()

    def close(name, expected, scale=1.0):
        np.testing.assert_allclose(workspace.FetchBlob(name) * scale, expected, rtol=1e-5, atol=1e-5,
                                   err_msg=str(name))
    close(h_all, y.detach().numpy(), mask)
    for blob, (p, k) in blobs.items():
        close(grads[core.BlobReference(blob)], value(p, k, grad=True))
    close(grads[core.BlobReference("input")], xt.grad.numpy())
    for layer in range(2):
        close(grads[core.BlobReference("h%d" % layer)], h0t.grad[layer:layer + 1].numpy())
