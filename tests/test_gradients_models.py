"""Whole training nets built the Caffe2 way, their gradients against the same model
written in torch: a LeNet-style CNN (brew conv / max_pool / fc / relu,
SoftmaxWithLoss) and a recommendation model (dense MLP, float and fused 8-bit
embedding tables through SparseLengthsSum, a BatchMatMul dot interaction with
BatchGather of the upper triangle, SigmoidCrossEntropyWithLogits, AveragedLoss)."""
import numpy as np
import pytest

from caffe2py import brew, core, model_helper, workspace

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(21)


def _fetch_all(names):
    return {str(n): workspace.FetchBlob(str(n)) for n in names}


def _torch_params(values):
    return {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in values.items()}


def test_lenet_gradients_match_torch():
    model = model_helper.ModelHelper(name="lenet_grad")
    conv1 = brew.conv(model, "data", "conv1", dim_in=1, dim_out=4, kernel=3)
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", dim_in=4, dim_out=6, kernel=2, pad=1)
    pool2 = brew.average_pool(model, conv2, "pool2", kernel=2, stride=1)
    fc3 = brew.fc(model, pool2, "fc3", dim_in=6 * 3 * 3, dim_out=8)
    relu = brew.relu(model, fc3, fc3)
    fc4 = brew.fc(model, relu, "pred", dim_in=8, dim_out=3)
    _, loss = model.net.SoftmaxWithLoss([fc4, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])

    data = RNG.standard_normal((5, 1, 8, 8)).astype(np.float32)
    label = RNG.integers(0, 3, 5).astype(np.int32)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    for p in model.params:                       # biases away from zero: every term counts
        workspace.FeedBlob(p, RNG.standard_normal(workspace.FetchBlob(p).shape).astype(np.float32) * 0.3)
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("label", label)
    workspace.RunNetOnce(model.net)
    params = _fetch_all(model.params)
    grads = {str(p): workspace.FetchBlob(g) for p, g in model.param_to_grad.items()}

    t = _torch_params(params)
    x = torch.tensor(data.astype(np.float64))
    h = F.max_pool2d(F.conv2d(x, t["conv1_w"], t["conv1_b"]), 2, 2)
    h = F.avg_pool2d(F.conv2d(h, t["conv2_w"], t["conv2_b"], padding=1), 2, 1)
    h = F.relu(F.linear(h.reshape(5, -1), t["fc3_w"], t["fc3_b"]))
    logits = F.linear(h, t["pred_w"], t["pred_b"])
    tloss = F.cross_entropy(logits, torch.tensor(label.astype(np.int64)))
    tloss.backward()
    np.testing.assert_allclose(workspace.FetchBlob("loss"), tloss.item(), rtol=1e-5)
    for name, param in t.items():
        np.testing.assert_allclose(grads[name], param.grad.numpy(), rtol=2e-4, atol=2e-6, err_msg=name)


def test_recommendation_model_gradients_match_torch():
    batch, dim, rows = 6, 4, 10
    model = model_helper.ModelHelper(name="rec_grad")
    dense = brew.fc(model, "dense", "bottom", dim_in=3, dim_out=dim)
    dense = brew.relu(model, dense, dense)
    embedded = [dense]
    for t in range(2):
        table = model.create_param("emb%d" % t, [rows, dim], ("GaussianFill", {"std": 0.5}))
        embedded.append(model.net.SparseLengthsSum([table, "ids%d" % t, "len%d" % t], "pooled%d" % t))
    # a frozen fused 8-bit table: no gradient flows into it
    embedded.append(model.net.SparseLengthsSumFused8BitRowwise(["emb_q", "ids2", "len2"], "pooled2"))
    feats = len(embedded)
    cat, _ = model.net.Concat(embedded, ["cat", "cat_split"], axis=1)
    z, _ = model.net.Reshape(cat, ["z", "z_old_shape"], shape=[batch, feats, dim])
    inter = model.net.BatchMatMul([z, z], "inter", trans_b=1)
    flat = model.net.Flatten(inter, "inter_flat", axis=1)
    upper = [i * feats + j for i in range(feats) for j in range(i + 1, feats)]
    model.param_init_net.GivenTensorIntFill([], "upper_idx", shape=[len(upper)], values=upper)
    pairs = model.net.BatchGather([flat, "upper_idx"], "pairs")
    top_in, _ = model.net.Concat([dense, pairs], ["top_in", "top_split"], axis=1)
    logit = brew.fc(model, top_in, "top", dim_in=dim + len(upper), dim_out=1)
    xent = model.net.SigmoidCrossEntropyWithLogits([logit, "click"], "xent")
    loss = model.net.AveragedLoss(xent, "loss")
    model.AddGradientOperators([loss])
    assert "emb_q" not in model.grad_map
    assert isinstance(model.param_to_grad[model.params[2]], core.GradientSlice)

    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    inputs = {"dense": RNG.standard_normal((batch, 3)).astype(np.float32),
              "click": RNG.integers(0, 2, (batch, 1)).astype(np.float32)}
    for t in range(3):
        lengths = RNG.integers(0, 4, batch).astype(np.int32)
        inputs["len%d" % t] = lengths
        inputs["ids%d" % t] = RNG.integers(0, rows, lengths.sum()).astype(np.int64)
    workspace.FeedBlob("emb_q_float", RNG.standard_normal((rows, dim)).astype(np.float32))
    workspace.RunOperatorOnce(core.CreateOperator("FloatToFused8BitRowwiseQuantized", ["emb_q_float"], ["emb_q"]))
    workspace.RunOperatorOnce(core.CreateOperator("Fused8BitRowwiseQuantizedToFloat", ["emb_q"], ["emb_q_deq"]))
    for name, value in inputs.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.net)
    params = _fetch_all(model.params)

    t = _torch_params(params)
    frozen = torch.tensor(workspace.FetchBlob("emb_q_deq").astype(np.float64))

    def bag(table, k):
        lengths = inputs["len%d" % k].astype(np.int64)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]))
        return F.embedding_bag(torch.tensor(inputs["ids%d" % k]), table, offsets, mode="sum")

    d = F.relu(F.linear(torch.tensor(inputs["dense"].astype(np.float64)), t["bottom_w"], t["bottom_b"]))
    zt = torch.stack([d, bag(t["emb0"], 0), bag(t["emb1"], 1), bag(frozen, 2)], 1)
    inter_t = (zt @ zt.transpose(1, 2)).reshape(batch, -1)[:, upper]
    out = F.linear(torch.cat([d, inter_t], 1), t["top_w"], t["top_b"])
    tloss = F.binary_cross_entropy_with_logits(out, torch.tensor(inputs["click"].astype(np.float64)))
    tloss.backward()
    np.testing.assert_allclose(workspace.FetchBlob("loss"), tloss.item(), rtol=1e-5)
    for p, g in model.param_to_grad.items():
        want = t[str(p)].grad.numpy()
        if isinstance(g, core.GradientSlice):
            got = np.zeros(want.shape)
            np.add.at(got, workspace.FetchBlob(g.indices), workspace.FetchBlob(g.values))
        else:
            got = workspace.FetchBlob(g)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6, err_msg=str(p))
