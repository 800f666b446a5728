"""RecurrentNetworkGradient: gradients of rnn_cell.LSTM / GRU against torch autograd
on the same weights and variable-length sequences. Needs caffe2py's gradient
registry (core.GradientRegistry); skipped without it."""
import numpy as np
import pytest

from caffe2py import core, gru_cell, model_helper, rnn_cell, workspace

torch = pytest.importorskip("torch")
if getattr(core, "GradientRegistry", None) is None:
    pytest.skip("needs the gradient registry (core.GradientRegistry)", allow_module_level=True)

T, N, DIN, H = 5, 3, 4, 6
LENGTHS = np.array([5, 2, 3], np.int32)
MASK = (np.arange(T)[:, None] < LENGTHS[None, :])[:, :, None].astype(np.float32)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _reorder(w):
    """torch's LSTM gates i, f, g, o -> Caffe2's i, f, o, g."""
    i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
    return np.concatenate([i, f, o, g], axis=0)


def _torch_outputs(module, x, state):
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.from_numpy(LENGTHS.astype(np.int64)),
                                                     enforce_sorted=False)
    y, final = module(packed, state)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)
    return y, final


def _close(name, expected, tol=1e-5):
    np.testing.assert_allclose(workspace.FetchBlob(name), expected, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("memory_optimization", [False, True])
def test_lstm_gradients_match_torch(memory_optimization):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, N, DIN)).astype(np.float32)
    h0, c0 = (rng.standard_normal((1, N, H)).astype(np.float32) for _ in range(2))
    r_all, r_last = rng.standard_normal((T, N, H)).astype(np.float32), rng.standard_normal((1, N, H)).astype(np.float32)
    for name, value in (("input", x), ("seq_lengths", LENGTHS), ("h0", h0), ("c0", c0),
                        ("g_all", r_all * MASK), ("g_last", r_last)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="lstm_train")
    h_all, h_last, _, _ = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H, scope="lstm",
                                        outputs_with_grads=(0, 1), memory_optimization=memory_optimization)
    grads = model.net.AddGradientOperators({h_all: "g_all", h_last: "g_last"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(DIN, H)
    for blob, p in (("i2h_w", ref.weight_ih_l0), ("i2h_b", ref.bias_ih_l0),
                    ("gates_t_w", ref.weight_hh_l0), ("gates_t_b", ref.bias_hh_l0)):
        workspace.FeedBlob("lstm/" + blob, _reorder(p))
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net.Name())
    xt, h0t, c0t = (torch.from_numpy(v).requires_grad_() for v in (x, h0, c0))
    y, (hn, _) = _torch_outputs(ref, xt, (h0t, c0t))
    ((y * torch.from_numpy(r_all * MASK)).sum() + (hn * torch.from_numpy(r_last)).sum()).backward()
    for blob, p in (("i2h_w", ref.weight_ih_l0), ("i2h_b", ref.bias_ih_l0),
                    ("gates_t_w", ref.weight_hh_l0), ("gates_t_b", ref.bias_hh_l0)):
        _close(str(grads[core.BlobReference("lstm/" + blob)]), _reorder(p.grad))
    _close(str(grads[core.BlobReference("input")]), xt.grad.numpy())
    _close(str(grads[core.BlobReference("h0")]), h0t.grad.numpy())
    _close(str(grads[core.BlobReference("c0")]), c0t.grad.numpy())
    # A second training step reuses the step workspaces and gives the same gradients.
    workspace.RunNet(model.net.Name())
    _close(str(grads[core.BlobReference("lstm/gates_t_w")]), _reorder(ref.weight_hh_l0.grad))


def test_gru_gradients_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((T, N, DIN)).astype(np.float32)
    h0 = rng.standard_normal((1, N, H)).astype(np.float32)
    r_all = rng.standard_normal((T, N, H)).astype(np.float32)
    for name, value in (("input", x), ("seq_lengths", LENGTHS), ("h0", h0), ("g_all", r_all * MASK)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="gru_train")
    h_all, _ = gru_cell.GRU(model, "input", "seq_lengths", ["h0"], DIN, H, scope="gru", linear_before_reset=True)
    grads = model.net.AddGradientOperators({h_all: "g_all"})
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.GRU(DIN, H)
    w_h, b_h = np.split(ref.weight_hh_l0.detach().numpy(), 3), np.split(ref.bias_hh_l0.detach().numpy(), 3)
    workspace.FeedBlob("gru/i2h_w", ref.weight_ih_l0.detach().numpy())
    workspace.FeedBlob("gru/i2h_b", ref.bias_ih_l0.detach().numpy())
    for k, gate in enumerate(("reset", "update", "output")):
        workspace.FeedBlob("gru/%s_gate_t_w" % gate, w_h[k])
        workspace.FeedBlob("gru/%s_gate_t_b" % gate, b_h[k])
    workspace.RunNetOnce(model.net)
    xt, h0t = torch.from_numpy(x).requires_grad_(), torch.from_numpy(h0).requires_grad_()
    y, _ = _torch_outputs(ref, xt, h0t)
    (y * torch.from_numpy(r_all * MASK)).sum().backward()
    _close(str(grads[core.BlobReference("gru/i2h_w")]), ref.weight_ih_l0.grad.numpy())
    w_grad, b_grad = np.split(ref.weight_hh_l0.grad.numpy(), 3), np.split(ref.bias_hh_l0.grad.numpy(), 3)
    for k, gate in enumerate(("reset", "update", "output")):
        _close(str(grads[core.BlobReference("gru/%s_gate_t_w" % gate)]), w_grad[k])
        _close(str(grads[core.BlobReference("gru/%s_gate_t_b" % gate)]), b_grad[k])
    _close(str(grads[core.BlobReference("input")]), xt.grad.numpy())
    _close(str(grads[core.BlobReference("h0")]), h0t.grad.numpy())


def test_lstm_trains_a_few_sgd_steps_like_torch():
    """Weights after three SGD steps on sum(h_all * r) match torch's."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((T, N, DIN)).astype(np.float32)
    h0, c0 = np.zeros((1, N, H), np.float32), np.zeros((1, N, H), np.float32)
    r_all = rng.standard_normal((T, N, H)).astype(np.float32)
    for name, value in (("input", x), ("seq_lengths", LENGTHS), ("h0", h0), ("c0", c0), ("g_all", r_all * MASK),
                        ("lr", np.array([-0.1], np.float32))):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="sgd")
    h_all, _, _, _ = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), DIN, H, scope="lstm")
    grads = model.net.AddGradientOperators({h_all: "g_all"})
    for p in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b"):
        name = "lstm/" + p
        scaled = model.net.Mul([grads[core.BlobReference(name)], "lr"], name + "_step", broadcast=1)
        model.net.Add([name, scaled], name)
    workspace.RunNetOnce(model.param_init_net)
    ref = torch.nn.LSTM(DIN, H)
    params = {"i2h_w": ref.weight_ih_l0, "i2h_b": ref.bias_ih_l0, "gates_t_w": ref.weight_hh_l0,
              "gates_t_b": ref.bias_hh_l0}
    for p, t in params.items():
        workspace.FeedBlob("lstm/" + p, _reorder(t))
    workspace.CreateNet(model.net)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        workspace.RunNet(model.net.Name())
        opt.zero_grad()
        y, _ = _torch_outputs(ref, torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
        (y * torch.from_numpy(r_all * MASK)).sum().backward()
        opt.step()
    for p, t in params.items():
        _close("lstm/" + p, _reorder(t), tol=2e-5)
