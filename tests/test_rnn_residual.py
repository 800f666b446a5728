"""Residual LSTM stacks (MultiRNNCell residual_output_layers): the step net sums layer l's
output with its input (a Sum whose gradient passes through to both), so the registry's
gradient of layer l's hidden state is the Sum's pass-through, not the `<hidden>_grad`
the backward links fill; caffe2py/recurrent.py sums the two (gradients.backward_pass
partial). Checked against an unrolled torch reference (nn.LSTMCell layers plus the
residual adds, float64 autograd) on the generic loop and the fused path, and against
central finite differences."""
import numpy as np
import pytest

from caffe2py import core, gradients, model_helper, rnn_cell, workspace

if getattr(core, "GradientRegistry", None) is None:
    pytest.skip("needs the gradient registry (core.GradientRegistry)", allow_module_level=True)


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _build(rng, t, n, din, dims, residual, lengths, output_only):
    """A MultiRNNCell of LSTMCells over a random input; the loss is a fixed random
    projection of the outputs: every state output of every layer, or (output_only)
    the cell's output sequence (the sum of the residually connected layers).
    Returns (model, loss gradient blobs {output: projection}, wanted blobs, output names)."""
    workspace.FeedBlob("input", rng.standard_normal((t, n, din)).astype(np.float32))
    if lengths is not None:
        workspace.FeedBlob("seq_lengths", np.asarray(lengths, np.int32))
    initial = []
    for k, d in enumerate(dims):
        for state in ("h", "c"):
            workspace.FeedBlob("%s%d" % (state, k), rng.standard_normal((1, n, d)).astype(np.float32))
            initial.append("%s%d" % (state, k))
    cells = [rnn_cell.LSTMCell(input_size=(din if k == 0 else dims[k - 1]), hidden_size=d, forget_bias=0.0,
                               memory_optimization=False) for k, d in enumerate(dims)]
    cell = rnn_cell.MultiRNNCell(cells, name="res", residual_output_layers=residual)
    model = model_helper.ModelHelper(name="res")
    if output_only:
        with_grads = [4 * k for k in cell.output_connected_layers]      # each connected layer's hidden_all
    else:
        with_grads = list(range(4 * len(dims)))
    output, states = cell.apply_over_sequence(model, "input", "seq_lengths" if lengths is not None else None,
                                              initial, outputs_with_grads=with_grads)
    workspace.RunNetOnce(model.param_init_net)
    for p in model.params:
        workspace.FeedBlob(p, (0.4 * rng.standard_normal(workspace.FetchBlob(p).shape)).astype(np.float32))
    forward = core.Net("res_forward")
    forward.Proto().op.extend(model.net.Proto().op)
    workspace.RunNetOnce(forward)
    targets = [output] if output_only else list(states)
    projections = {}
    for blob in targets:
        name = str(blob) + "_proj"
        workspace.FeedBlob(name, rng.standard_normal(workspace.FetchBlob(blob).shape).astype(np.float32))
        projections[str(blob)] = name
    grads = model.net.AddGradientOperators(dict(projections))
    wanted = [str(p) for p in model.params] + ["input"] + initial
    return model, forward, grads, wanted, projections


def _loss(net, projections):
    workspace.RunNetOnce(net)
    return sum(float(np.sum(workspace.FetchBlob(b).astype(np.float64) * workspace.FetchBlob(p)))
               for b, p in projections.items())


def _torch_reference(torch, t, n, din, dims, residual, lengths, output_only, projections):
    """The loss and every gradient from nn.LSTMCell layers unrolled in Python, with
    Caffe2's residual adds (layer l > 0 in residual_output_layers adds its input to its
    output before the next layer; the output sums the connected layers) and its
    sequence lengths (rows past their length keep their state)."""
    def w(name):
        return torch.from_numpy(workspace.FetchBlob(name).astype(np.float64)).requires_grad_()

    def reorder(x):                   # Caffe2's gates i, f, o, g -> torch's i, f, g, o
        i, f, o, g = torch.chunk(x, 4, dim=0)
        return torch.cat([i, f, g, o], dim=0)
    leaves = {name: w(name) for name in ["input"] + ["%s%d" % (s, k) for k in range(len(dims)) for s in "hc"]}
    layers = []
    for k, d in enumerate(dims):
        scope = "res/" if k == 0 else "res/layer_%d/" % k
        names = [scope + "i2h_w", scope + "i2h_b", "res/layer_%d/gates_t_w" % k, "res/layer_%d/gates_t_b" % k]
        leaves.update({name: w(name) for name in names})
        cell = torch.nn.LSTMCell(din if k == 0 else dims[k - 1], d).double()
        layers.append((cell, [leaves[name] for name in names]))
    mask = torch.ones(t, n, 1, dtype=torch.float64)
    if lengths is not None:
        mask = torch.from_numpy((np.arange(t)[:, None] < np.asarray(lengths)[None, :])[:, :, None].astype(np.float64))
    h = [leaves["h%d" % k][0] for k in range(len(dims))]
    c = [leaves["c%d" % k][0] for k in range(len(dims))]
    h_all, c_all = [[] for _ in dims], [[] for _ in dims]
    for step in range(t):
        layer_input = leaves["input"][step]
        for k, (cell, (w_ih, b_ih, w_hh, b_hh)) in enumerate(layers):
            weights = {"weight_ih": reorder(w_ih), "weight_hh": reorder(w_hh), "bias_ih": reorder(b_ih),
                       "bias_hh": reorder(b_hh)}
            h_new, c_new = torch.func.functional_call(cell, weights, (layer_input, (h[k], c[k])))
            keep = mask[step]
            h[k] = keep * h_new + (1 - keep) * h[k]
            c[k] = keep * c_new + (1 - keep) * c[k]
            h_all[k].append(h[k])
            c_all[k].append(c[k])
            layer_input = h[k] + layer_input if (k > 0 and k in residual) else h[k]
    outputs = {}
    for k in range(len(dims)):
        scope = "res/layer_%d/" % k
        outputs[scope + "hidden_state_all"] = torch.stack(h_all[k])
        outputs[scope + "hidden_state_last"] = h[k][None]
        outputs[scope + "cell_state_all"] = torch.stack(c_all[k])
        outputs[scope + "cell_state_last"] = c[k][None]
    connected = []
    for k in range(len(dims) - 1):
        connected = connected + [k] if (k + 1) in residual else []
    connected.append(len(dims) - 1)
    outputs["res/residual_output_sequence"] = sum(outputs["res/layer_%d/hidden_state_all" % k] for k in connected)
    if not output_only:
        del outputs["res/residual_output_sequence"]
    elif len(connected) == 1:
        outputs = {"res/layer_%d/hidden_state_all" % connected[0]: outputs["res/layer_%d/hidden_state_all"
                                                                             % connected[0]]}
    loss = sum((outputs[b] * torch.from_numpy(workspace.FetchBlob(p).astype(np.float64))).sum()
               for b, p in projections.items())
    loss.backward()
    return float(loss.detach()), {name: leaf.grad.numpy() for name, leaf in leaves.items()}


CASES = [
    # t, n, din, dims, residual_output_layers, lengths
    (4, 3, 5, [6, 6], [1], [4, 1, 3]),
    (5, 2, 4, [6, 6], [1], None),
    (4, 3, 5, [6, 6, 6], [1, 2], [4, 2, 3]),
    (5, 2, 3, [5, 5, 5], [1, 2], None),
    (4, 2, 4, [7, 7, 7], [1], [3, 4]),          # an intermediate residual layer only
    (4, 2, 4, [7, 6, 6], [2], [4, 2]),          # the last layer only (its add is outside the step net)
    (4, 3, 5, [6, 6, 6], [], [4, 2, 3]),        # no residual layer: as before
]


@pytest.mark.parametrize("fused", ["0", "1"])
@pytest.mark.parametrize("output_only", [False, True])
@pytest.mark.parametrize("t,n,din,dims,residual,lengths", CASES)
def test_residual_stack_matches_torch(monkeypatch, t, n, din, dims, residual, lengths, output_only, fused):
    """Both paths: the generic step-net loop and the fused stack (operators/rnn/fused_run.py)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("CAFFE2PY_RNN_FUSED", fused)
    rng = np.random.default_rng(t * 100 + sum(dims) + len(residual))
    model, _, grads, wanted, projections = _build(rng, t, n, din, dims, residual, lengths, output_only)
    workspace.RunNetOnce(model.net)
    expected_loss, expected = _torch_reference(torch, t, n, din, dims, residual, lengths, output_only, projections)
    loss = sum(float(np.sum(workspace.FetchBlob(b).astype(np.float64) * workspace.FetchBlob(p)))
               for b, p in projections.items())
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-5)
    for name in wanted:
        np.testing.assert_allclose(workspace.FetchBlob(grads[core.BlobReference(name)]), expected[name],
                                   rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("t,n,din,dims,residual,lengths", [c for c in CASES if c[4] in ([1], [1, 2])][:4])
def test_residual_stack_gradients_match_finite_differences(monkeypatch, t, n, din, dims, residual, lengths):
    """Every gradient along a random direction against central differences of the
    float32 forward (step 1e-2 along a unit direction; the loss is linear in the outputs),
    on the generic loop."""
    monkeypatch.setenv("CAFFE2PY_RNN_FUSED", "0")
    rng = np.random.default_rng(7 + t + sum(dims))
    model, forward, grads, wanted, projections = _build(rng, t, n, din, dims, residual, lengths, False)
    workspace.RunNetOnce(model.net)
    analytic = {name: workspace.FetchBlob(grads[core.BlobReference(name)]).astype(np.float64) for name in wanted}
    eps = 1e-2
    for name in wanted:
        base = workspace.FetchBlob(name).copy()
        direction = rng.standard_normal(base.shape)
        direction /= np.linalg.norm(direction)
        losses = []
        for sign in (1, -1):
            workspace.FeedBlob(name, (base + sign * eps * direction).astype(np.float32))
            losses.append(_loss(forward, projections))
        workspace.FeedBlob(name, base)
        numeric = (losses[0] - losses[1]) / (2 * eps)
        exact = float(np.sum(analytic[name] * direction))
        assert numeric == pytest.approx(exact, rel=2e-3, abs=2e-3), name


def test_residual_step_net_sums_the_linked_gradient():
    """The backward step net of a residual layer adds the linked gradient of its hidden
    state (from outside and from step t + 1) to the residual Sum's pass-through."""
    rng = np.random.default_rng(3)
    model, _, _, _, _ = _build(rng, 3, 2, 4, [5, 5, 5], [1, 2], None, False)
    rnn = next(op for op in model.net.Proto().op if op.type == "RecurrentNetwork")
    step = next(a.n for a in rnn.arg if a.name == "backward_step_net")
    sums = [list(op.input) for op in step.op if op.type == "Sum"]
    assert ["res/layer_1/hidden_state_grad", "res/layer_1/res/residual_output_1_grad"] in sums


def test_backward_pass_partial_gradient():
    """gradients.backward_pass(partial=...): a given gradient of a blob that ops of the
    net also read is summed with theirs; without it, theirs replaces it (Caffe2)."""
    ops = [core.CreateOperator("Sum", ["a", "b"], ["s"])]
    _, plain = gradients.backward_pass(ops, {"a": "a_grad", "s": "s_grad"})
    assert plain["a"] == "s_grad"
    grad_ops, summed = gradients.backward_pass(ops, {"a": "a_grad", "s": "s_grad"}, partial=["a"])
    assert summed["a"] == "a_grad" and summed["b"] == "s_grad"
    assert [(op.type, list(op.input), list(op.output)) for op in grad_ops] == [("Sum", ["a_grad", "s_grad"],
                                                                                ["a_grad"])]
