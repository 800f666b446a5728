"""examples/dlrm_style_training.py, a training script written the way Caffe2's
recommendation examples were (model.net.FC on fed weight blobs, SparseLengthsSum per
table, Concat + BatchMatMul + BatchGather dot interaction, MakeTwoClass +
LabelCrossEntropy or SquaredL2Distance + Scale, AddGradientOperators, a hand-written
SGD of WeightedSum and ScatterWeightedSum), run unmodified through
`python -m caffe2py.compat`: the losses and final weights it prints, to 5 decimals,
are those of the same model written here in torch, on the inputs the script saved."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "dlrm_style_training.py"
STEPS, LR = 8, 0.1
DENSE_WEIGHTS = ["bot_fc1_w", "bot_fc1_b", "bot_fc2_w", "bot_fc2_b", "top_fc1_w", "top_fc1_b", "top_fc2_w", "top_fc2_b"]
TABLES = ["emb_0_w", "emb_1_w", "emb_2_w"]


def run_script(tmp_path, loss):
    saved = tmp_path / ("inputs_%s.npz" % loss)
    env = dict(os.environ, CAFFE2PY_JIT=os.environ.get("CAFFE2PY_JIT", "inline"))
    out = subprocess.run([sys.executable, "-m", "caffe2py.compat", str(SCRIPT), "--loss", loss,
                          "--steps", str(STEPS), "--learning-rate", str(LR), "--save-inputs", str(saved)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"^step \d+ loss (-?[0-9.]+)$", out.stdout, re.M)]
    weights = {}
    for line in out.stdout.splitlines():
        name, _, values = line.partition(" ")
        if name in DENSE_WEIGHTS + TABLES:
            weights[name] = np.array([float(v) for v in values.split()])
    return losses, weights, dict(np.load(saved))


def torch_reference(inputs, loss_kind):
    """The script's model in torch: (losses, final weights)."""
    p = {name: torch.tensor(inputs[name], requires_grad=True) for name in DENSE_WEIGHTS + TABLES}
    opt = torch.optim.SGD(list(p.values()), lr=LR)
    features = 1 + len(TABLES)
    upper = [i * features + j for i in range(features) for j in range(i + 1, features)]
    losses = []
    for step in range(STEPS):
        batch = {k.split(":", 1)[1]: v for k, v in inputs.items() if k.startswith("step%d:" % step)}
        opt.zero_grad(set_to_none=True)
        bottom = F.relu(F.linear(torch.tensor(batch["dense_in"]), p["bot_fc1_w"], p["bot_fc1_b"]))
        bottom = F.relu(F.linear(bottom, p["bot_fc2_w"], p["bot_fc2_b"]))
        pooled = []
        for i, table in enumerate(TABLES):
            lengths = batch["emb_%d_l" % i].astype(np.int64)
            offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]))
            ids = torch.tensor(batch["emb_%d_i" % i].astype(np.int64))
            pooled.append(F.embedding_bag(ids, p[table], offsets, mode="sum", sparse=True))
        t = torch.stack([bottom] + pooled, 1)
        z = (t @ t.transpose(1, 2)).reshape(t.shape[0], -1)[:, upper]
        h = F.relu(F.linear(torch.cat([bottom, z], 1), p["top_fc1_w"], p["top_fc1_b"]))
        prob = torch.sigmoid(F.linear(h, p["top_fc2_w"], p["top_fc2_b"]))
        target = torch.tensor(batch["target"])
        if loss_kind == "bce":
            loss = F.binary_cross_entropy(prob, target)
        else:
            loss = ((prob - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {name: t.detach().numpy().ravel() for name, t in p.items()}


@pytest.mark.parametrize("loss", ["bce", "mse"])
def test_caffe2_style_script_prints_what_torch_computes(tmp_path, loss):
    text = SCRIPT.read_text()
    for piece in ("from caffe2.python import", "model.net.FC(", "model.net.SparseLengthsSum(", "add_axis=1",
                  "model.net.BatchMatMul(", "model.net.BatchGather(", "AddGradientOperators(",
                  "model.net.WeightedSum(", "model.net.ScatterWeightedSum(", "MakeTwoClass(",
                  "LabelCrossEntropy(", "SquaredL2Distance(", "model.net.Scale("):
        assert piece in text, piece
    losses, weights, inputs = run_script(tmp_path, loss)
    want_losses, want_weights = torch_reference(inputs, loss)
    assert len(losses) == STEPS
    # printed with 5 decimals: equal to the reference rounded there (plus float32 noise)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6, atol=6e-6)
    assert set(weights) == set(want_weights)
    for name, want in want_weights.items():
        np.testing.assert_allclose(weights[name], want, rtol=1e-6, atol=6e-6, err_msg=name)
        assert not np.allclose(want, inputs[name].ravel(), atol=1e-4), name + " did not train"
