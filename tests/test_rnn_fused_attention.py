"""RecurrentNetwork's fused path for rnn_cell.LSTMWithAttention (operators/rnn/
fused_attention_steps.py, fused_attention_run.py, kernels/cpu/rnn/fused_attention.py)
against the generic step-net loop on the same nets (CAFFE2PY_RNN_FUSED=0), and
against a NumPy formula of the attention decoder."""
import numpy as np
import pytest

from caffe2py import core, model_helper, recurrent, rnn_cell, workspace
from caffe2py.attention import AttentionType
from caffe2py.operators.rnn import fused_run

from test_rnn_fused import count_fused_calls

if getattr(core, "GradientRegistry", None) is None:
    pytest.skip("needs the gradient registry (core.GradientRegistry)", allow_module_level=True)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


@pytest.fixture
def fused_calls(monkeypatch):
    """How many times the fused attention forward and backward took the run."""
    return count_fused_calls(monkeypatch, ("lstm_attention",), ("lstm_attention",))


# outputs: h_all, h_last, c_all, c_last, ctx_all, ctx_last
GRAD_OF = (0, 3, 4, 5)


def _feed(rng, t, n, din, d, t_enc, e, lengths, enc_lengths, init_ndim=3):
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    workspace.FeedBlob("input", f32(t, n, din))
    workspace.FeedBlob("encoder_outputs", f32(t_enc, n, e))
    initial = lambda dim: f32(*(1, n, dim)[3 - init_ndim:])  # noqa: E731    [1, N, dim], [N, dim] or [dim]
    workspace.FeedBlob("h0", initial(d))
    workspace.FeedBlob("c0", initial(d))
    workspace.FeedBlob("ctx0", initial(e))
    if lengths is not None:
        workspace.FeedBlob("seq_lengths", np.asarray(lengths, np.int32))
    if enc_lengths is not None:
        workspace.FeedBlob("enc_lengths", np.asarray(enc_lengths, np.int32))


def _build(attention, din, d, e, lengths, enc_lengths, forward_only=False, memopt=False, forget_bias=0.0):
    model = model_helper.ModelHelper(name="att")
    out = rnn_cell.LSTMWithAttention(
        model, "input", "seq_lengths" if lengths is not None else None, "h0", "c0", "ctx0", encoder_output_dim=e,
        encoder_outputs="encoder_outputs", encoder_lengths="enc_lengths" if enc_lengths is not None else None,
        decoder_input_dim=din, decoder_state_dim=d, scope="dec", attention_type=attention,
        outputs_with_grads=GRAD_OF, forward_only=forward_only, lstm_memory_optimization=memopt,
        attention_memory_optimization=memopt, forget_bias=forget_bias)
    return model, out


def _params(model, seed):
    workspace.RunNetOnce(model.param_init_net)
    rng = np.random.default_rng(seed)
    values = {}
    for p in sorted(str(p) for p in model.params):
        value = workspace.FetchBlob(p)
        values[p] = (0.4 * rng.standard_normal(value.shape)).astype(np.float32)
        workspace.FeedBlob(p, values[p])
    return values


def _run(monkeypatch, fused, case, backward=True, fetch_steps=True):
    """Every output, every gradient and the step workspaces' blobs of one run in a
    fresh workspace (so nothing a previous run left can stand in for a missing blob)."""
    attention, t, n, din, d, t_enc, e, lengths, enc_lengths = case[:9]
    extra = dict(case[9]) if len(case) > 9 else {}
    workspace.ResetWorkspace()
    monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
    _feed(np.random.default_rng(t * 100 + d), t, n, din, d, t_enc, e, lengths, enc_lengths,
          extra.pop("init_ndim", 3))
    model, out = _build(attention, din, d, e, lengths, enc_lengths, forward_only=not backward, **extra)
    grads = {}
    if backward:
        grads = model.net.AddGradientOperators({out[k]: "g%d" % k for k in GRAD_OF})
        g_rng = np.random.default_rng(7)
        shapes = {0: (t, n, d), 3: (1, n, d), 4: (t, n, e), 5: (1, n, e)}
        for k in GRAD_OF:
            workspace.FeedBlob("g%d" % k, g_rng.standard_normal(shapes[k]).astype(np.float32))
    params = _params(model, 11)
    workspace.RunNetOnce(model.net)
    values = {str(o): workspace.FetchBlob(o) for o in out}
    values.update({"grad:" + str(k): workspace.FetchBlob(v) for k, v in grads.items()
                   if isinstance(v, core.BlobReference)})
    if fetch_steps:
        for name in recurrent.retrieve_step_blobs(model.net, prefix="steps"):
            name = name.decode() if isinstance(name, bytes) else name
            if not name.endswith("_tmpstep") and "_grad" not in name:     # forward blobs only
                values["step:" + name] = workspace.FetchBlob(name)
    return values, params


def _assert_same(generic, fused, tol=1e-5):
    assert sorted(generic) == sorted(fused)
    for name in generic:
        np.testing.assert_allclose(fused[name], generic[name], rtol=tol, atol=tol, err_msg=name)


CASES = [
    # attention, T, N, din, D, T_enc, E, seq lengths, encoder lengths
    (AttentionType.Regular, 5, 3, 4, 6, 7, 5, [5, 2, 3], [7, 3, 5]),
    (AttentionType.Regular, 4, 2, 3, 8, 5, 11, None, None),                 # E >= 8: vector code
    (AttentionType.Regular, 3, 1, 2, 4, 1, 3, [3], [1]),                    # N = 1, one encoder step
    (AttentionType.Regular, 3, 1, 2, 4, 6, 3, [2], [4], dict(memopt=True, forget_bias=1.0)),
    (AttentionType.Recurrent, 5, 3, 4, 6, 7, 5, [5, 2, 3], [7, 3, 5]),
    (AttentionType.Recurrent, 4, 2, 3, 5, 4, 5, None, None, dict(memopt=True)),
    (AttentionType.Recurrent, 4, 3, 3, 5, 4, 6, [4, 1, 2], None, dict(init_ndim=2)),      # [N, D] initial states
    (AttentionType.Dot, 4, 3, 3, 5, 4, 6, None, [4, 1, 3], dict(init_ndim=1)),             # [D] initial states
    (AttentionType.SoftCoverage, 5, 3, 4, 6, 7, 10, [5, 2, 3], [7, 3, 5]),
    (AttentionType.SoftCoverage, 4, 2, 3, 5, 4, 5, None, None, dict(memopt=True)),
    (AttentionType.Dot, 5, 3, 4, 6, 7, 5, [5, 1, 4], [6, 7, 2]),             # D != E: projected query
    (AttentionType.Dot, 4, 2, 3, 5, 6, 5, None, None),                      # D == E: the hidden state itself
    (AttentionType.Dot, 4, 2, 3, 5, 6, 5, [3, 4], [2, 6], dict(memopt=True)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "%s-T%d-D%d-E%d-%s-%s" % (
    ["regular", "recurrent", "dot", "coverage"][c[0]], c[1], c[4], c[6], "seq" if c[7] else "noseq",
    "enc" if c[8] else "noenc"))
def test_attention_fused_matches_generic(monkeypatch, fused_calls, case):
    generic, _ = _run(monkeypatch, "0", case)
    assert fused_calls == {"forward": 0, "backward": 0}
    fused, _ = _run(monkeypatch, "1", case)
    assert fused_calls == {"forward": 1, "backward": 1}
    assert any(name.startswith("step:steps_dec/attention_weights_3d") for name in fused)
    assert any(name.startswith("grad:dec/encoder_outputs_transposed") for name in fused)
    _assert_same(generic, fused)


@pytest.mark.parametrize("attention", [AttentionType.Regular, AttentionType.Recurrent, AttentionType.Dot,
                                       AttentionType.SoftCoverage])
def test_generic_backward_after_a_fused_forward(monkeypatch, attention):
    """A gradient op that falls back to the generic loop reads the step workspaces the
    fused forward filled (on first access): the all-generic run's gradients."""
    case = (attention, 4, 3, 3, 5, 6, 5, [4, 2, 3], [6, 1, 4])
    generic, _ = _run(monkeypatch, "0", case, fetch_steps=False)
    monkeypatch.setattr(fused_run, "lstm_attention_backward", lambda *args: None)
    mixed, _ = _run(monkeypatch, "1", case, fetch_steps=False)
    _assert_same(generic, mixed)


@pytest.mark.parametrize("case", [CASES[0], CASES[8]], ids=["regular", "coverage"])
def test_numpy_twins_agree_with_the_compiled_kernels(monkeypatch, case):
    """The attention kernels' NumPy twins (CAFFE2PY_JIT=numpy, and while a kernel
    compiles) give the compiled results: E < 8 (scalar code) and E >= 8 (vector code)."""
    from caffe2py.kernels.cpu.runtime import jit
    before = jit.jit_mode()
    results = []
    try:
        for mode in ("inline", "numpy"):
            jit.set_jit_mode(mode)
            for e in (5, 12):
                results.append(_run(monkeypatch, "1", case[:6] + (e,) + case[7:], fetch_steps=False)[0])
    finally:
        jit.set_jit_mode(before)
    _assert_same(results[0], results[2])
    _assert_same(results[1], results[3])


def test_attention_fused_forward_only(monkeypatch, fused_calls):
    """No backward net: the two alternating step workspaces hold the last two steps."""
    case = (AttentionType.Regular, 5, 2, 3, 4, 6, 4, [5, 3], [6, 2])
    generic, _ = _run(monkeypatch, "0", case, backward=False)
    fused, _ = _run(monkeypatch, "1", case, backward=False)
    assert fused_calls["forward"] == 1
    _assert_same(generic, fused)


def test_attention_fused_matches_numpy_formula(monkeypatch, fused_calls):
    """Regular attention's decoder written out in NumPy (the fused run alone)."""
    t, n, din, d, t_enc, e = 4, 3, 3, 5, 6, 4
    enc_lengths = [6, 2, 4]
    case = (AttentionType.Regular, t, n, din, d, t_enc, e, None, enc_lengths)
    out, p = _run(monkeypatch, "1", case, backward=False, fetch_steps=False)
    assert fused_calls["forward"] == 1
    rng = np.random.default_rng(t * 100 + d)       # _feed's values, in its order
    x, enc = rng.standard_normal((t, n, din)).astype(np.float32), rng.standard_normal((t_enc, n, e))
    h, c, ctx = (rng.standard_normal(shape) for shape in ((n, d), (n, d), (n, e)))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    wenc = enc @ p["dec/weighted_encoder_outputs_w"].T + p["dec/weighted_encoder_outputs_b"]
    mask = np.arange(t_enc)[None, :] >= np.array(enc_lengths)[:, None]
    for step in range(t):
        gates = (x[step] @ p["dec/decoder/i2h_w"].T + p["dec/decoder/i2h_b"]
                 + np.concatenate([h, ctx], 1) @ p["dec/decoder/gates_t_w"].T + p["dec/decoder/gates_t_b"])
        i, f, o, g = np.split(gates, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        q = h @ p["dec/weighted_decoder_hidden_state_w"].T + p["dec/weighted_decoder_hidden_state_b"]
        logits = (np.tanh(wenc + q) @ p["dec/attention_logits_w"].T
                  + workspace.FetchBlob("dec/attention_logits_b"))[:, :, 0].T
        logits = np.where(mask, -np.inf, logits)
        weights = np.exp(logits - logits.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        ctx = np.einsum("nj,jne->ne", weights, enc)
        np.testing.assert_allclose(out["dec/hidden_t_external_all"][step], h, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["dec/attention_weighted_encoder_context_all"][step], ctx, rtol=1e-4,
                                   atol=1e-5)


def test_attention_bad_encoder_lengths_take_the_generic_path(monkeypatch, fused_calls):
    """int64 encoder lengths: SequenceMask refuses them, so the fused path leaves the run
    to the generic loop, which reports the error."""
    from caffe2py.errors import Caffe2Error
    case = (AttentionType.Dot, 3, 2, 3, 4, 5, 4, None, [5, 2])
    _feed(np.random.default_rng(0), 3, 2, 3, 4, 5, 4, None, [5, 2])
    workspace.FeedBlob("enc_lengths", np.array([5, 2], np.int64))
    model, _ = _build(*case[:1], *case[3:5], case[6], None, [5, 2], forward_only=True)
    workspace.RunNetOnce(model.param_init_net)
    with pytest.raises(Caffe2Error, match="int32"):
        workspace.RunNetOnce(model.net)
    assert fused_calls["forward"] == 0


def test_milstm_decoder_with_attention_runs_generic(monkeypatch, fused_calls):
    """An MILSTM decoder with attention is not recognised: the generic loop runs, with
    or without CAFFE2PY_RNN_FUSED, and gives the same results."""
    results = []
    for fused in ("0", "1"):
        workspace.ResetWorkspace()
        monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
        _feed(np.random.default_rng(5), 3, 2, 3, 4, 5, 4, [3, 2], None)
        model = model_helper.ModelHelper(name="mi_att")
        cell = rnn_cell.MILSTMWithAttentionCell(
            encoder_output_dim=4, encoder_outputs="encoder_outputs", decoder_input_dim=3, decoder_state_dim=4,
            name="dec", attention_type=AttentionType.Regular, weighted_encoder_outputs=None, forget_bias=0.0,
            lstm_memory_optimization=False, attention_memory_optimization=False, forward_only=True)
        _, states = cell.apply_over_sequence(model, "input", "seq_lengths", initial_states=["h0", "c0", "ctx0"])
        _params(model, 3)
        workspace.RunNetOnce(model.net)
        results.append({str(o): workspace.FetchBlob(o) for o in states})
    assert fused_calls == {"forward": 0, "backward": 0}
    _assert_same(*results, tol=0)
