"""A recommendation model trained end to end the Caffe2 way (ModelHelper, brew.fc,
embedding tables from create_param, AddGradientOperators, caffe2py.optimizer) for 20
steps, against the same model written in torch, step by step: every loss and every
parameter after every step, to 1e-5 relative.

The model: a dense MLP (5 -> 8 -> 4, relu); three float tables and two fused 8-bit
rowwise tables pooled by SparseLengthsSum / SparseLengthsSumFused8BitRowwise; a
Concat(add_axis=1) of the six vectors, the dot interaction BatchMatMul(z, z^T) and
BatchGather of its upper triangle; a top MLP (4 + 15 -> 8 -> 1); sigmoid
cross-entropy (SigmoidCrossEntropyWithLogits + AveragedLoss).

The fused 8-bit tables are frozen, as fbgemm-style quantised tables are: they get no
gradient (the walk stops at the fused lookup) and stay byte for byte the same; torch
reads the same tables dequantised (value = q * scale + bias, written out here).

SGD: build_sgd (WeightedSum for the dense parameters, ScatterWeightedSum for the
tables' GradientSlices) against torch.optim.SGD on embedding_bag's sparse gradients;
bags repeat ids, which both sides add up. SparseAdagrad: build_adagrad (Adagrad and
SparseAdagrad, epsilon 1e-4) against torch.optim.Adagrad(eps=1e-4). Caffe2's
SparseAdagrad applies a repeated id twice in a row (the second time with the moment
the first left), torch sums the rows of a repeated id first: the two differ by design
when a batch repeats an id, so the Adagrad batches draw each table's ids without
repeats within a step (ids still recur across steps).
"""
import numpy as np
import pytest

from caffe2py import brew, core, model_helper, optimizer, workspace

torch = pytest.importorskip("torch")
F = torch.nn.functional
# torch.optim.Adagrad's sparse path warns about its own unchecked sparse tensors
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

BATCH, DENSE_IN, DIM, ROWS, FLOAT_TABLES, FUSED_TABLES, STEPS, LR = 8, 5, 4, 30, 3, 2, 20, 0.05
TABLES = FLOAT_TABLES + FUSED_TABLES


def build(opt):
    model = model_helper.ModelHelper(name="rec_train_" + opt)
    h = brew.relu(model, brew.fc(model, "dense", "bot1", dim_in=DENSE_IN, dim_out=8), "bot1_r")
    bottom = brew.relu(model, brew.fc(model, h, "bot2", dim_in=8, dim_out=DIM), "bot2_r")
    pooled = [bottom]
    for t in range(TABLES):
        if t < FLOAT_TABLES:
            table = model.create_param("emb%d" % t, [ROWS, DIM], ("GaussianFill", {"std": 0.3}))
            pooled.append(model.net.SparseLengthsSum([table, "ids%d" % t, "len%d" % t], "pool%d" % t))
        else:
            pooled.append(model.net.SparseLengthsSumFused8BitRowwise(["q%d" % t, "ids%d" % t, "len%d" % t],
                                                                     "pool%d" % t))
    feats = len(pooled)
    z, _ = model.net.Concat(pooled, ["z", "z_info"], axis=1, add_axis=1)
    flat = model.net.Flatten(model.net.BatchMatMul([z, z], "inter", trans_b=1), "inter_flat", axis=1)
    upper = [i * feats + j for i in range(feats) for j in range(i + 1, feats)]
    model.param_init_net.GivenTensorIntFill([], "upper", shape=[len(upper)], values=upper)
    pairs = model.net.BatchGather([flat, "upper"], "pairs")
    top_in, _ = model.net.Concat([bottom, pairs], ["top_in", "top_info"], axis=1)
    h = brew.relu(model, brew.fc(model, top_in, "top1", dim_in=DIM + len(upper), dim_out=8), "top1_r")
    logit = brew.fc(model, h, "top2", dim_in=8, dim_out=1)
    loss = model.net.AveragedLoss(model.net.SigmoidCrossEntropyWithLogits([logit, "click"], "xent"), "loss")
    model.AddGradientOperators([loss])
    if opt == "sgd":
        optimizer.build_sgd(model, base_learning_rate=LR)
    else:
        optimizer.build_adagrad(model, base_learning_rate=LR, epsilon=1e-4)
    return model, upper


def batches(rng, repeats):
    out = []
    for _ in range(STEPS):
        batch = {"dense": rng.standard_normal((BATCH, DENSE_IN)).astype(np.float32),
                 "click": rng.integers(0, 2, (BATCH, 1)).astype(np.float32)}
        for t in range(TABLES):
            lengths = rng.integers(0, 4, BATCH).astype(np.int32)
            n = int(lengths.sum())
            ids = rng.integers(0, ROWS, n) if repeats else rng.permutation(ROWS)[:n]
            batch["len%d" % t], batch["ids%d" % t] = lengths, ids.astype(np.int64)
        out.append(batch)
    return out


def dequantize_fused_8bit(q):
    """Fused 8-bit rowwise layout: the row's uint8 values, then float32 scale and bias."""
    values = q[:, :-8].astype(np.float32)
    scale = q[:, -8:-4].copy().view(np.float32)
    bias = q[:, -4:].copy().view(np.float32)
    return values * scale + bias


class TorchModel:
    def __init__(self, params, frozen, opt, upper):
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        self.frozen = [torch.tensor(f) for f in frozen]
        self.upper = upper
        values = list(self.p.values())
        self.opt = torch.optim.SGD(values, lr=LR) if opt == "sgd" else torch.optim.Adagrad(values, lr=LR, eps=1e-4)

    def step(self, batch):
        p = self.p
        self.opt.zero_grad(set_to_none=True)
        b = F.relu(F.linear(torch.tensor(batch["dense"]), p["bot1_w"], p["bot1_b"]))
        b = F.relu(F.linear(b, p["bot2_w"], p["bot2_b"]))
        vecs = [b]
        for t in range(TABLES):
            lengths = batch["len%d" % t].astype(np.int64)
            offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]))
            table = p["emb%d" % t] if t < FLOAT_TABLES else self.frozen[t - FLOAT_TABLES]
            vecs.append(F.embedding_bag(torch.tensor(batch["ids%d" % t]), table, offsets, mode="sum",
                                        sparse=True))
        z = torch.stack(vecs, 1)
        inter = (z @ z.transpose(1, 2)).reshape(BATCH, -1)[:, self.upper]
        h = F.relu(F.linear(torch.cat([b, inter], 1), p["top1_w"], p["top1_b"]))
        out = F.linear(h, p["top2_w"], p["top2_b"])
        loss = F.binary_cross_entropy_with_logits(out, torch.tensor(batch["click"]))
        loss.backward()
        self.opt.step()
        return loss.item()


@pytest.mark.parametrize("opt", ["sgd", "adagrad"])
def test_recommendation_model_trains_as_torch_step_by_step(opt):
    rng = np.random.default_rng(17)
    workspace.ResetWorkspace()
    model, upper = build(opt)
    tables = ["emb%d" % t for t in range(FLOAT_TABLES)]
    assert all(isinstance(model.param_to_grad[core.BlobReference(t)], core.GradientSlice) for t in tables)
    assert not [b for b in model.grad_map if str(b).startswith("q")]          # the frozen tables
    update_ops = [op.type for op in model.net.Proto().op if op.type in (
        "WeightedSum", "ScatterWeightedSum", "Adagrad", "SparseAdagrad")]
    want = (["WeightedSum"] * 8 + ["ScatterWeightedSum"] * 3 if opt == "sgd"
            else ["Adagrad"] * 8 + ["SparseAdagrad"] * 3)
    assert sorted(update_ops) == sorted(want)

    workspace.RunNetOnce(model.param_init_net)
    for p in model.params:                 # biases away from zero too: every term counts
        shape = workspace.FetchBlob(p).shape
        workspace.FeedBlob(p, (rng.standard_normal(shape) * 0.3).astype(np.float32))
    frozen = []
    for t in range(FLOAT_TABLES, TABLES):
        workspace.FeedBlob("q_float", rng.standard_normal((ROWS, DIM)).astype(np.float32))
        workspace.RunOperatorOnce(core.CreateOperator("FloatToFused8BitRowwiseQuantized", ["q_float"], ["q%d" % t]))
        frozen.append(workspace.FetchBlob("q%d" % t))
    params = {str(p): workspace.FetchBlob(p) for p in model.params}
    reference = TorchModel(params, [dequantize_fused_8bit(q) for q in frozen], opt, upper)

    data = batches(rng, repeats=(opt == "sgd"))
    if opt == "sgd":
        assert any(len(np.unique(b["ids0"])) < len(b["ids0"]) for b in data)   # repeated ids exercised
    for step, batch in enumerate(data):
        for name, value in batch.items():
            workspace.FeedBlob(name, value)
        if step == 0:
            workspace.CreateNet(model.net)
        workspace.RunNet(model.net)
        want_loss = reference.step(batch)
        np.testing.assert_allclose(workspace.FetchBlob("loss"), want_loss, rtol=1e-5, err_msg="step %d" % step)
        for name, tensor in reference.p.items():
            want = tensor.detach().numpy()
            np.testing.assert_allclose(workspace.FetchBlob(name), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                       err_msg="%s after step %d" % (name, step))
    for t, q in zip(range(FLOAT_TABLES, TABLES), frozen):
        assert np.array_equal(workspace.FetchBlob("q%d" % t), q)
    # the tables did train (an update that did nothing would match an untrained torch too)
    for name in tables:
        assert not np.allclose(workspace.FetchBlob(name), params[name])
