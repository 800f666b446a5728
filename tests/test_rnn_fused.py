"""RecurrentNetwork's fused path (operators/rnn/fused_steps.py, fused_run.py,
kernels/cpu/rnn/fused_lstm.py) against its generic step-net loop on the same nets
(CAFFE2PY_RNN_FUSED=0 forces the generic loop), and against torch autograd."""
import numpy as np
import pytest

from caffe2py import core, gru_cell, model_helper, rnn_cell, workspace
from caffe2py.operators.rnn import fused_run
from caffe2py.kernels.cpu.rnn import fused_lstm

if getattr(core, "GradientRegistry", None) is None:
    pytest.skip("needs the gradient registry (core.GradientRegistry)", allow_module_level=True)
if not fused_lstm.available():
    pytest.skip("the fused kernels need NumPy's OpenBLAS entry points", allow_module_level=True)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def count_fused_calls(monkeypatch, forward_kinds, backward_kinds):
    """{"forward": n, "backward": n}: how many times fused_run's runners of these kinds
    took the run (a forward returning True, a backward returning outputs)."""
    calls = {"forward": 0, "backward": 0}

    def counted(fn, key, took):
        def wrapper(*args):
            result = fn(*args)
            calls[key] += took(result)
            return result
        return wrapper
    for kind in forward_kinds:
        name = kind + "_forward"
        monkeypatch.setattr(fused_run, name, counted(getattr(fused_run, name), "forward", bool))
    for kind in backward_kinds:
        name = kind + "_backward"
        monkeypatch.setattr(fused_run, name, counted(getattr(fused_run, name), "backward", lambda r: r is not None))
    return calls


@pytest.fixture
def fused_calls(monkeypatch):
    """How many times the fused forward and backward ran (and whether they took the run)."""
    return count_fused_calls(monkeypatch, ("lstm", "gru", "lstm_stack", "milstm"), ("lstm", "gru", "milstm"))


def _feed(rng, t, n, din, h, lengths, states=2, init_shape=None):
    workspace.FeedBlob("input", rng.standard_normal((t, n, din)).astype(np.float32))
    if lengths is not None:
        workspace.FeedBlob("seq_lengths", np.asarray(lengths, np.int32))
    shape = init_shape or (1, n, h)
    for k in range(states):
        workspace.FeedBlob("s%d" % k, rng.standard_normal(shape).astype(np.float32))


def _randomise_params(model, rng):
    for p in model.params:
        value = workspace.FetchBlob(p)
        workspace.FeedBlob(p, (0.4 * rng.standard_normal(value.shape)).astype(np.float32))


def _run_both(monkeypatch, model, outputs, grad_of, rng, fetch_steps=False):
    """(generic results, fused results): every output, every gradient, and with
    fetch_steps the step workspaces' blobs (RecurrentNetworkBlobFetcher)."""
    grads = model.net.AddGradientOperators({o: o + "_g" for o in grad_of})
    workspace.RunNetOnce(model.param_init_net)
    _randomise_params(model, rng)
    for o in grad_of:
        workspace.FeedBlob(str(o) + "_g", np.zeros((1,), np.float32))   # shapes known after a run
    results = []
    for fused in ("0", "1"):
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        # the output gradients: the forward's shapes, fixed random values
        workspace.RunNetOnce(_forward_only(model))
        g_rng = np.random.default_rng(7)
        for o in grad_of:
            workspace.FeedBlob(str(o) + "_g", g_rng.standard_normal(workspace.FetchBlob(o).shape).astype(np.float32))
        workspace.RunNetOnce(model.net)
        values = {str(o): workspace.FetchBlob(o) for o in outputs}
        values.update({"grad:" + str(k): workspace.FetchBlob(v) for k, v in grads.items()
                       if isinstance(v, core.BlobReference)})
        if fetch_steps:
            names = rnn_step_blobs(model.net)
            values.update({name: workspace.FetchBlob(name) for name in names})
        results.append(values)
    return results


def _forward_only(model):
    net = core.Net("fwd")
    for op in model.net.Proto().op:
        if op.type.endswith("Gradient") or op.output[0].endswith("_grad") and op.type != "RecurrentNetwork":
            break
        net.Proto().op.add().CopyFrom(op)
    return net


def rnn_step_blobs(net):
    from caffe2py import recurrent
    return [n.decode() if isinstance(n, bytes) else n for n in recurrent.retrieve_step_blobs(net, prefix="steps")]


def _assert_same(generic, fused, tol=2e-6):
    assert set(generic) == set(fused)
    for name in generic:
        np.testing.assert_allclose(fused[name], generic[name], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("t,n,din,h,lengths,forget_bias,drop_states,memopt", [
    (5, 3, 4, 12, [5, 2, 3], 0.0, False, False),      # vector gate code with an overlapping tail
    (6, 1, 5, 6, [4], 1.0, False, False),             # N = 1 (GEMV), scalar gate code
    (4, 4, 3, 16, [4, 1, 0, 3], 0.5, True, True),     # drop_states, a zero length, memory_optimization
    (7, 2, 8, 9, None, 1.0, False, False),            # no sequence lengths
])
def test_lstm_fused_matches_generic(monkeypatch, fused_calls, t, n, din, h, lengths, forget_bias, drop_states,
                                    memopt):
    rng = np.random.default_rng(t * 100 + h)
    _feed(rng, t, n, din, h, lengths)
    model = model_helper.ModelHelper(name="lstm")
    out = rnn_cell.LSTM(model, "input", "seq_lengths" if lengths is not None else None, ("s0", "s1"), din, h,
                        scope="lstm", outputs_with_grads=(0, 1, 3), forget_bias=forget_bias,
                        drop_states=drop_states, memory_optimization=memopt)
    generic, fused = _run_both(monkeypatch, model, out, [out[0], out[1], out[3]], rng, fetch_steps=True)
    assert fused_calls == {"forward": 2, "backward": 1}    # generic run: none; fused: _forward_only and the net
    assert any(name.startswith("steps_lstm/gates_t") for name in fused)    # the step workspaces' blobs
    _assert_same(generic, fused)


@pytest.mark.parametrize("t,n,din,h,lengths,forget_bias", [
    (5, 3, 4, 12, [5, 2, 3], 0.0),
    (6, 1, 5, 6, None, 1.0),
])
def test_milstm_fused_matches_generic(monkeypatch, fused_calls, t, n, din, h, lengths, forget_bias):
    rng = np.random.default_rng(t * 1000 + h)
    _feed(rng, t, n, din, h, lengths)
    model = model_helper.ModelHelper(name="milstm")
    out = rnn_cell.MILSTM(model, "input", "seq_lengths" if lengths is not None else None, ("s0", "s1"), din, h,
                          scope="mi", forget_bias=forget_bias)
    generic, fused = _run_both(monkeypatch, model, out, [out[0]], rng, fetch_steps=True)
    assert fused_calls == {"forward": 2, "backward": 1}
    assert any(name.startswith("steps_mi/alpha_by_input_t_plus_beta_h_by_prev_t") for name in fused)
    _assert_same(generic, fused, tol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_generic_backward_after_a_fused_forward(monkeypatch, cell):
    """A gradient op that falls back to the generic loop reads the step workspaces a
    fused forward filled (on first access): same gradients as the all-generic run."""
    rng = np.random.default_rng(12)
    _feed(rng, 5, 3, 4, 9, [5, 2, 4], states=2 if cell == "lstm" else 1)
    model = model_helper.ModelHelper(name="mixed")
    if cell == "lstm":
        out = rnn_cell.LSTM(model, "input", "seq_lengths", ("s0", "s1"), 4, 9, scope="c")
    else:
        out = gru_cell.GRU(model, "input", "seq_lengths", ["s0"], 4, 9, scope="c")
    monkeypatch.setattr(fused_run, cell + "_backward", lambda *args: None)
    generic, mixed = _run_both(monkeypatch, model, out, [out[0]], rng)
    _assert_same(generic, mixed)


def test_lstm_fused_initial_state_vectors(monkeypatch, fused_calls):
    """[D] initial states (rnn_cell's zero parameters): their gradient sums the batch."""
    rng = np.random.default_rng(3)
    _feed(rng, 5, 3, 4, 10, [5, 5, 2], init_shape=(10,))
    model = model_helper.ModelHelper(name="lstm")
    out = rnn_cell.LSTM(model, "input", "seq_lengths", ("s0", "s1"), 4, 10, scope="lstm")
    generic, fused = _run_both(monkeypatch, model, out, [out[0]], rng)
    assert fused_calls["backward"] == 1
    _assert_same(generic, fused)


def test_lstm_fused_forward_only_net(monkeypatch, fused_calls):
    rng = np.random.default_rng(4)
    _feed(rng, 6, 2, 3, 8, [6, 3])
    model = model_helper.ModelHelper(name="lstm")
    out = rnn_cell.LSTM(model, "input", "seq_lengths", ("s0", "s1"), 3, 8, scope="lstm", forward_only=True)
    workspace.RunNetOnce(model.param_init_net)
    _randomise_params(model, rng)
    results = []
    for fused in ("0", "1"):
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        workspace.RunNetOnce(model.net)
        values = {str(o): workspace.FetchBlob(o) for o in out}
        values.update({name: workspace.FetchBlob(name) for name in rnn_step_blobs(model.net)})
        results.append(values)
    assert fused_calls["forward"] == 1
    _assert_same(*results)


def test_lstm_fused_matches_torch():
    """h_all, h_n, c_n and every gradient against torch.nn.LSTM (packed sequences)."""
    torch = pytest.importorskip("torch")
    t, n, din, h = 6, 3, 5, 20
    lengths = np.array([6, 2, 4], np.int32)
    mask = (np.arange(t)[:, None] < lengths[None, :])[:, :, None].astype(np.float32)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((t, n, din)).astype(np.float32)
    h0, c0 = (rng.standard_normal((1, n, h)).astype(np.float32) for _ in range(2))
    r_all = rng.standard_normal((t, n, h)).astype(np.float32) * mask
    r_last = rng.standard_normal((1, n, h)).astype(np.float32)
    for name, value in (("input", x), ("seq_lengths", lengths), ("h0", h0), ("c0", c0), ("g_all", r_all),
                        ("g_last", r_last)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="lstm_torch")
    h_all, h_last, _, c_last = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), din, h, scope="lstm",
                                             outputs_with_grads=(0, 1))
    grads = model.net.AddGradientOperators({h_all: "g_all", h_last: "g_last"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(din, h)

    def reorder(w):                       # torch's gates i, f, g, o -> Caffe2's i, f, o, g
        i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
        return np.concatenate([i, f, o, g], axis=0)
    names = ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")
    params = (ref.weight_ih_l0, ref.bias_ih_l0, ref.weight_hh_l0, ref.bias_hh_l0)
    for blob, p in zip(names, params):
        workspace.FeedBlob("lstm/" + blob, reorder(p))
    workspace.RunNetOnce(model.net)
    xt, h0t, c0t = (torch.from_numpy(v).requires_grad_() for v in (x, h0, c0))
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths.astype(np.int64)),
                                                     enforce_sorted=False)
    y, (hn, cn) = ref(packed, (h0t, c0t))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=t)
    ((y * torch.from_numpy(r_all)).sum() + (hn * torch.from_numpy(r_last)).sum()).backward()

    def close(name, expected, mask=1.0):
        np.testing.assert_allclose(workspace.FetchBlob(name) * mask, expected, rtol=1e-5, atol=1e-5,
                                   err_msg=str(name))
    close(h_all, y.detach().numpy(), mask)      # rows past their length: ours repeat the state, torch pads 0
    close(h_last, hn.detach().numpy())
    close(c_last, cn.detach().numpy())
    for blob, p in zip(names, params):
        close(grads[core.BlobReference("lstm/" + blob)], reorder(p.grad))
    for blob, v in (("input", xt), ("h0", h0t), ("c0", c0t)):
        close(grads[core.BlobReference(blob)], v.grad.numpy())


def test_unrecognised_step_net_runs_generic(fused_calls):
    """A hand-written step net (an Add accumulator) is not an LSTM: generic loop, right result."""
    x = np.arange(12, dtype=np.float32).reshape(4, 1, 3)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("s0", np.ones((1, 3), np.float32))
    step = core.Net("acc_step")
    step.AddExternalInputs("x_t", "timestep", "s_prev")
    step.Add(["s_prev", "x_t"], "s")
    step.AddExternalOutput("s")
    net = core.Net("acc")
    net.RecurrentNetwork(["x", "s0"], ["s_all", "s_last", "scratch"], step_net=step.Proto(),
                         recurrent_states=["s_states"], initial_recurrent_state_ids=[1],
                         link_internal=["s_prev", "s", "x_t"], link_external=["s_states", "s_states", "x"],
                         link_offset=[0, 1, 0], alias_src=["s_states", "s_states"],
                         alias_dst=["s_all", "s_last"], alias_offset=[1, -1])
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("s_all"), 1 + np.cumsum(x, axis=0))
    assert fused_calls == {"forward": 0, "backward": 0}


def test_lstm_with_an_extra_step_op_runs_generic(monkeypatch, fused_calls):
    """An LSTM step net with one more op (a Scale of the gates) is not recognised."""
    rng = np.random.default_rng(6)
    _feed(rng, 4, 2, 3, 8, [4, 2])

    class ScaledLSTMCell(rnn_cell.LSTMCell):
        def apply_override(self, model, input_t, seq_lengths, states, timestep, extra_inputs=None):
            hidden_t_prev, cell_t_prev = states
            from caffe2py import brew
            gates_t = brew.fc(model, hidden_t_prev, "gates_t", dim_in=self.hidden_size,
                              dim_out=self.gates_size, axis=2)
            brew.sum(model, [gates_t, input_t], gates_t)
            gates_t = model.net.Scale(gates_t, "gates_scaled", scale=0.5)
            hidden_t, cell_t = self._lstm_unit(model, hidden_t_prev, cell_t_prev, gates_t, seq_lengths,
                                               timestep, ["hidden_state", "cell_state"])
            model.net.AddExternalOutputs(hidden_t, cell_t)
            return hidden_t, cell_t
    model = model_helper.ModelHelper(name="scaled")
    out = rnn_cell._LSTM(ScaledLSTMCell, model, "input", "seq_lengths", ("s0", "s1"), 3, 8, scope="lstm")
    generic, fused = _run_both(monkeypatch, model, out, [out[0]], rng)
    assert fused_calls == {"forward": 0, "backward": 0}
    _assert_same(generic, fused, tol=0)


@pytest.mark.parametrize("t,n,din,h,lengths,lbr,drop_states", [
    (5, 3, 4, 12, [5, 1, 3], True, False),
    (6, 1, 3, 6, [4], False, False),
    (4, 4, 5, 16, [4, 0, 2, 3], False, True),
    (5, 2, 4, 9, None, True, False),
])
def test_gru_fused_matches_generic(monkeypatch, fused_calls, t, n, din, h, lengths, lbr, drop_states):
    rng = np.random.default_rng(t * 10 + h)
    _feed(rng, t, n, din, h, lengths, states=1)
    model = model_helper.ModelHelper(name="gru")
    out = gru_cell.GRU(model, "input", "seq_lengths" if lengths is not None else None, ["s0"], din, h, scope="gru",
                       linear_before_reset=lbr, drop_states=drop_states, outputs_with_grads=(0, 1))
    generic, fused = _run_both(monkeypatch, model, out, [out[0], out[1]], rng, fetch_steps=True)
    assert fused_calls == {"forward": 2, "backward": 1}
    assert any(name.startswith("steps_gru/output_gate_t") for name in fused)
    _assert_same(generic, fused)


def test_gru_fused_matches_torch():
    """gru_cell.GRU(linear_before_reset=True) is torch.nn.GRU: outputs and gradients."""
    torch = pytest.importorskip("torch")
    t, n, din, h = 6, 3, 5, 10
    lengths = np.array([6, 3, 1], np.int32)
    mask = (np.arange(t)[:, None] < lengths[None, :])[:, :, None].astype(np.float32)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((t, n, din)).astype(np.float32)
    h0 = rng.standard_normal((1, n, h)).astype(np.float32)
    r_all = rng.standard_normal((t, n, h)).astype(np.float32) * mask
    for name, value in (("input", x), ("seq_lengths", lengths), ("h0", h0), ("g_all", r_all)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="gru_torch")
    h_all, _ = gru_cell.GRU(model, "input", "seq_lengths", ["h0"], din, h, scope="gru", linear_before_reset=True)
    grads = model.net.AddGradientOperators({h_all: "g_all"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.GRU(din, h)
    w_h, b_h = np.split(ref.weight_hh_l0.detach().numpy(), 3), np.split(ref.bias_hh_l0.detach().numpy(), 3)
    workspace.FeedBlob("gru/i2h_w", ref.weight_ih_l0.detach().numpy())
    workspace.FeedBlob("gru/i2h_b", ref.bias_ih_l0.detach().numpy())
    gates = ("reset", "update", "output")
    for k, gate in enumerate(gates):
        workspace.FeedBlob("gru/%s_gate_t_w" % gate, w_h[k])
        workspace.FeedBlob("gru/%s_gate_t_b" % gate, b_h[k])
    workspace.RunNetOnce(model.net)
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
    w_grad, b_grad = np.split(ref.weight_hh_l0.grad.numpy(), 3), np.split(ref.bias_hh_l0.grad.numpy(), 3)
    for k, gate in enumerate(gates):
        close(grads[core.BlobReference("gru/%s_gate_t_w" % gate)], w_grad[k])
        close(grads[core.BlobReference("gru/%s_gate_t_b" % gate)], b_grad[k])
    close(grads[core.BlobReference("gru/i2h_w")], ref.weight_ih_l0.grad.numpy())
    close(grads[core.BlobReference("input")], xt.grad.numpy())
    close(grads[core.BlobReference("h0")], h0t.grad.numpy())


@pytest.mark.parametrize("dims,lengths", [([6, 6], [5, 1, 3]), ([12, 8, 9], None)])
def test_stacked_lstm_forward_fused_matches_generic(monkeypatch, fused_calls, dims, lengths):
    """Stacked layers in one step net (MultiRNNCell): fused layer by layer, a forward-only
    net (training nets, backward included: tests/test_rnn_fused_stack.py)."""
    rng = np.random.default_rng(9)
    _feed(rng, 5, 3, 4, dims[0], lengths, states=0)
    initial = []
    for k, d in enumerate(dims):
        for state in ("h", "c"):
            workspace.FeedBlob("%s%d" % (state, k), rng.standard_normal((1, 3, d)).astype(np.float32))
            initial.append("%s%d" % (state, k))
    model = model_helper.ModelHelper(name="stack")
    out = rnn_cell.LSTM(model, "input", "seq_lengths" if lengths else None, initial, 4, dims, scope="stack",
                        forward_only=True, return_last_layer_only=False)
    workspace.RunNetOnce(model.param_init_net)
    _randomise_params(model, rng)
    results = []
    for fused in ("0", "1"):
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        workspace.RunNetOnce(model.net)
        values = {str(o): workspace.FetchBlob(o) for o in out}
        values.update({name: workspace.FetchBlob(name) for name in rnn_step_blobs(model.net)})
        results.append(values)
    assert fused_calls["forward"] == 1
    assert any(name.startswith("steps_stack/layer_1/i2h") for name in results[1])
    _assert_same(*results)


def _sequence_results(rng, with_mi_or_lbr, kind, t, n, d, seq):
    """Every result of the fused kernels' Python entry points on random data."""
    from caffe2py.kernels.cpu.rnn import fused_gru
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if kind == "lstm":
        x, w, b = f32(t, n, 4 * d), 0.4 * f32(4 * d, d), f32(4 * d)
        mi = (f32(4 * d), f32(4 * d), f32(4 * d), f32(4 * d)) if with_mi_or_lbr else None
        hs, cs = np.zeros((t + 1, n, d), np.float32), np.zeros((t + 1, n, d), np.float32)
        hs[0], cs[0] = f32(n, d), f32(n, d)
        gates, pre = fused_lstm.lstm_sequence(x, w, b, hs, cs, seq, 0.5, False, mi)
        dhs, dcs = f32(t + 1, n, d), f32(t + 1, n, d)
        grads = fused_lstm.lstm_sequence_gradient(w, hs, cs, gates, seq, 0.5, False, dhs, dcs,
                                                  None if mi is None else (x, mi[0], mi[1], pre))
        return [hs, cs, gates, dhs, dcs] + list(grads) + ([pre] if mi else [])
    lbr = with_mi_or_lbr
    x, b = f32(t, n, 3 * d), f32(3 * d)
    w3, wn = 0.4 * f32((3 if lbr else 2) * d, d), 0.4 * f32(d, d)
    hs = np.zeros((t + 1, n, d), np.float32)
    hs[0] = f32(n, d)
    saved = fused_gru.gru_sequence(x, w3, wn, b, hs, seq, lbr, True)
    dhs = f32(t + 1, n, d)
    grads = fused_gru.gru_sequence_gradient(w3, wn, hs, saved, seq, lbr, True, dhs)
    return [hs, dhs] + [a for a in list(saved) + list(grads) if a is not None]


def test_numpy_twins_agree_with_the_fused_kernels(monkeypatch):
    """The kernels' NumPy twins (CAFFE2PY_JIT=numpy, and while a kernel compiles) give
    the compiled results: LSTM, MILSTM, both GRU forms, N = 1 and N > 1, D < 8 and D >= 8."""
    from caffe2py.kernels.cpu.runtime import jit
    before = jit.jit_mode()
    cases = [(kind, flag, 4, n, d, seq) for kind in ("lstm", "gru") for flag in (False, True)
             for n, d, seq in ((1, 5, None), (3, 12, np.array([4, 1, 0], np.int32)))]
    try:
        results = []
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            results.append([_sequence_results(np.random.default_rng(i), flag, kind, t, n, d, seq)
                            for i, (kind, flag, t, n, d, seq) in enumerate(cases)])
    finally:
        jit.set_jit_mode(before)
    for case, compiled, twin in zip(cases, *results):
        assert len(compiled) == len(twin)
        for k, (c, w) in enumerate(zip(compiled, twin)):
            np.testing.assert_allclose(w, c, rtol=1e-4, atol=1e-5, err_msg="%s result %d" % (case[:2], k))


@pytest.mark.parametrize("mode", ["inline", "numpy"])
def test_row_blocks_on_the_team_give_the_one_block_results(monkeypatch, mode):
    """The fused kernels cut the batch into row blocks, one per team thread, each
    running the whole sequence for its rows: three uneven blocks (whatever the
    machine's team size) give what one block gives, with variable lengths, for LSTM,
    MILSTM and both GRU forms, compiled and NumPy twin (to float rounding: a block's
    GEMM may sum in another order than the whole batch's)."""
    from caffe2py.kernels.cpu.rnn import fused_gru
    from caffe2py.kernels.cpu.runtime import jit
    seq = np.array([6, 2, 0, 5, 6, 1, 3], np.int32)
    cases = [(kind, flag) for kind in ("lstm", "gru") for flag in (False, True)]
    before = jit.jit_mode()
    results = []
    try:
        jit.set_jit_mode(mode)
        for blocks in (np.array([0, 7]), np.array([0, 2, 5, 7])):
            split = lambda n, work, blocks=blocks: blocks    # noqa: E731
            monkeypatch.setattr(fused_lstm, "batch_blocks", split)
            monkeypatch.setattr(fused_gru, "batch_blocks", split)
            results.append([_sequence_results(np.random.default_rng(i), flag, kind, 6, 7, 12, seq)
                            for i, (kind, flag) in enumerate(cases)])
    finally:
        jit.set_jit_mode(before)
    for case, one, three in zip(cases, *results):
        for k, (a, b) in enumerate(zip(one, three)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg="%s result %d" % (case, k))


def test_batch_blocks_cover_the_batch_once():
    """batch_blocks: increasing bounds from 0 to n, one block when the work is small."""
    from caffe2py.kernels.cpu.runtime import jit
    assert list(fused_lstm.batch_blocks(32, 1)) == [0, 32]
    bounds = fused_lstm.batch_blocks(5, 10 ** 7)
    assert bounds[0] == 0 and bounds[-1] == 5 and np.all(np.diff(bounds) > 0)
    assert len(bounds) - 1 == min(5, jit.team_size())


def test_hand_written_lstm_step_net_is_fused(monkeypatch, fused_calls):
    """The same structure written by hand (not rnn_cell's names): FC on the previous
    hidden state, Sum with the input step, LSTMUnit, a raw RecurrentNetwork op: fused,
    and equal to the generic loop and to the LSTM written out in NumPy."""
    rng = np.random.default_rng(11)
    t, n, d = 5, 3, 8
    x = rng.standard_normal((t, n, 4 * d)).astype(np.float32)
    w = (0.3 * rng.standard_normal((4 * d, d))).astype(np.float32)
    b = rng.standard_normal(4 * d).astype(np.float32)
    lengths = np.array([5, 2, 4], np.int32)
    step = core.Net("my_step")
    step.AddExternalInputs("xin", "tick", "hp", "cp", "W", "B", "lens")
    step.FC(["hp", "W", "B"], "pre", axis=2)
    step.Sum(["pre", "xin"], "pre")
    step.LSTMUnit(["hp", "cp", "pre", "lens", "tick"], ["hh", "cc"], forget_bias=1.0)
    step.AddExternalOutputs("hh", "cc")
    net = core.Net("my_lstm")
    net.RecurrentNetwork(["x", "h0", "c0", "W", "B", "lens"], ["h_all", "h_last", "c_all", "c_last", "scratch"],
                         step_net=step.Proto(), recurrent_states=["h_seq", "c_seq"],
                         initial_recurrent_state_ids=[1, 2], param=[3, 4, 5],
                         link_internal=["hp", "hh", "cp", "cc", "xin"],
                         link_external=["h_seq", "h_seq", "c_seq", "c_seq", "x"], link_offset=[0, 1, 0, 1, 0],
                         alias_src=["h_seq", "h_seq", "c_seq", "c_seq"],
                         alias_dst=["h_all", "h_last", "c_all", "c_last"], alias_offset=[1, -1, 1, -1],
                         timestep="tick")
    h0 = rng.standard_normal((1, n, d)).astype(np.float32)
    c0 = rng.standard_normal((1, n, d)).astype(np.float32)
    results = []
    for fused in ("0", "1"):
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        for name, value in (("x", x), ("h0", h0), ("c0", c0), ("W", w), ("B", b), ("lens", lengths)):
            workspace.FeedBlob(name, value)
        workspace.RunNetOnce(net)
        results.append({k: workspace.FetchBlob(k) for k in ("h_all", "h_last", "c_all", "c_last")})
    assert fused_calls["forward"] == 1
    _assert_same(*results)
    sig = lambda v: 1 / (1 + np.exp(-v))    # noqa: E731
    h, c = h0[0].astype(np.float64), c0[0].astype(np.float64)
    for s in range(t):
        g = h @ w.T + b + x[s]
        i, f, o, gg = sig(g[:, :d]), sig(g[:, d:2 * d] + 1.0), sig(g[:, 2 * d:3 * d]), np.tanh(g[:, 3 * d:])
        c_new = f * c + i * gg
        h_new = o * np.tanh(c_new)
        live = (s < lengths)[:, None]
        h, c = np.where(live, h_new, h), np.where(live, c_new, c)
        np.testing.assert_allclose(results[1]["h_all"][s], h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[1]["c_last"][0], c, rtol=1e-5, atol=1e-5)
