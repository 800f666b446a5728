"""A recommendation model trained the way Caffe2's recommendation scripts (DLRM's
dlrm_s_caffe2.py and its kind) did it, runnable unmodified through the alias:

    python -m caffe2py.compat examples/dlrm_style_training.py [--loss bce|mse] [--steps 10]

  * weights and embedding tables are numpy arrays fed with workspace.FeedBlob, and
    the layers are plain ops on them: model.net.FC, model.net.Relu / Sigmoid,
    model.net.SparseLengthsSum per table;
  * the interaction: Concat(add_axis=1) of the bottom MLP's output and the pooled
    embeddings, BatchMatMul(T, T, trans_b=1), Flatten, BatchGather of the upper
    triangle's positions, Concat with the bottom output;
  * the loss: the top MLP ends in a Sigmoid; bce = MakeTwoClass + LabelCrossEntropy
    + AveragedLoss, mse = SquaredL2Distance + Scale(2) + AveragedLoss;
  * model.AddGradientOperators, then a hand-written SGD: brew.iter, LearningRate
    (fixed, base_lr = -lr), WeightedSum([w, ONE, w_grad, LR], w) for the MLPs and
    ScatterWeightedSum([table, ONE, grad.indices, grad.values, LR], table) for the
    tables' sparse gradients.

It prints every step's loss and, at the end, every weight, with 5 decimals.
--save-inputs FILE.npz writes the initial weights and the batches it used (so that
another implementation can be run on the same values).
"""
import argparse

import numpy as np

from caffe2.python import brew, core, model_helper, workspace

DENSE, BOTTOM, SPARSE_DIM, TOP_HIDDEN = 4, 6, 3, 5
TABLE_ROWS = (10, 12, 8)


def mlp(model, name, dims, x, rng, weights, sigmoid_last=False):
    """FC + Relu layers on weights fed from numpy (DLRM's initialisation)."""
    for i in range(1, len(dims)):
        n, m = dims[i - 1], dims[i]
        w, b = "%s_fc%d_w" % (name, i), "%s_fc%d_b" % (name, i)
        workspace.FeedBlob(w, rng.normal(0.0, np.sqrt(2.0 / (m + n)), size=(m, n)).astype(np.float32))
        workspace.FeedBlob(b, rng.normal(0.0, np.sqrt(1.0 / m), size=m).astype(np.float32))
        weights += [w, b]
        y = model.net.FC([x, w, b], "%s_fc%d_y" % (name, i))
        last = i == len(dims) - 1
        x = (model.net.Sigmoid if last and sigmoid_last else model.net.Relu)(y, "%s_fc%d_z" % (name, i))
    return x


def build(loss_kind, rng):
    model = model_helper.ModelHelper(name="dlrm_style")
    dense_weights, tables = [], []
    bottom = mlp(model, "bot", [DENSE, BOTTOM, SPARSE_DIM], "dense_in", rng, dense_weights)
    pooled = []
    for i, rows in enumerate(TABLE_ROWS):
        table = "emb_%d_w" % i
        workspace.FeedBlob(table, rng.uniform(-np.sqrt(1.0 / rows), np.sqrt(1.0 / rows),
                                              size=(rows, SPARSE_DIM)).astype(np.float32))
        tables.append(table)
        pooled.append(model.net.SparseLengthsSum([table, "emb_%d_i" % i, "emb_%d_l" % i], "emb_%d_z" % i))
    features = 1 + len(pooled)
    t, _ = model.net.Concat([bottom] + pooled, ["inter_cat", "inter_cat_info"], axis=1, add_axis=1)
    z = model.net.BatchMatMul([t, t], "inter_matmul", trans_b=1)
    z_all = model.net.Flatten(z, "inter_flatten_all", axis=1)
    upper = [i * features + j for i in range(features) for j in range(i + 1, features)]
    workspace.FeedBlob("inter_upper_indices", np.array(upper, np.int32))
    z_flat = model.net.BatchGather([z_all, "inter_upper_indices"], "inter_flatten")
    r, _ = model.net.Concat([bottom, z_flat], ["inter_out", "inter_out_info"], axis=1)
    prob = mlp(model, "top", [SPARSE_DIM + len(upper), TOP_HIDDEN, 1], r, rng, dense_weights, sigmoid_last=True)
    if loss_kind == "bce":
        two_class = model.net.MakeTwoClass(prob, "prob_2c")
        xent = model.net.LabelCrossEntropy([two_class, "target_label"], "xent")
        loss = model.net.AveragedLoss(xent, "loss")
    else:
        sd = model.net.SquaredL2Distance([prob, "target"], "sd")
        sd2 = model.net.Scale(sd, "sd2", scale=2.0)
        loss = model.net.AveragedLoss(sd2, "loss")
    return model, loss, dense_weights, tables


def add_sgd(model, loss, dense_weights, tables, learning_rate):
    model.param_init_net.ConstantFill([], "const_one", shape=[1], value=1.0)
    brew.iter(model, "optim_it")
    lr = model.net.LearningRate("optim_it", "optim_lr", base_lr=-learning_rate, policy="fixed")
    grads = model.AddGradientOperators([loss])
    for w in dense_weights:
        model.net.WeightedSum([w, "const_one", grads[w], lr], w)
    for table in tables:
        grad = grads[table]
        model.net.ScatterWeightedSum([table, "const_one", grad.indices, grad.values, lr], table)


def make_batch(rng, batch_size):
    feeds = {"dense_in": rng.standard_normal((batch_size, DENSE)).astype(np.float32)}
    for i, rows in enumerate(TABLE_ROWS):
        lengths = rng.integers(1, 4, batch_size).astype(np.int32)
        feeds["emb_%d_l" % i] = lengths
        feeds["emb_%d_i" % i] = rng.integers(0, rows, int(lengths.sum())).astype(np.int32)
    clicks = rng.integers(0, 2, batch_size)
    feeds["target"] = clicks.reshape(-1, 1).astype(np.float32)
    feeds["target_label"] = clicks.astype(np.int32)
    return feeds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss", choices=["bce", "mse"], default="bce")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=6)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--save-inputs", default=None)
    args = parser.parse_args()

    workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"])
    rng = np.random.default_rng(args.seed)
    model, loss, dense_weights, tables = build(args.loss, rng)
    add_sgd(model, loss, dense_weights, tables, args.learning_rate)
    batches = [make_batch(rng, args.batch_size) for _ in range(args.steps)]
    if args.save_inputs:
        saved = {w: workspace.FetchBlob(w) for w in dense_weights + tables}
        for step, feeds in enumerate(batches):
            saved.update({"step%d:%s" % (step, k): v for k, v in feeds.items()})
        np.savez(args.save_inputs, **saved)

    workspace.RunNetOnce(model.param_init_net)
    for name, value in batches[0].items():
        workspace.FeedBlob(name, value)
    workspace.CreateNet(model.net)
    for step, feeds in enumerate(batches):
        for name, value in feeds.items():
            workspace.FeedBlob(name, value)
        workspace.RunNet(model.net)
        print("step %d loss %.5f" % (step, workspace.FetchBlob(str(loss))))
    for w in dense_weights + tables:
        print("%s %s" % (w, " ".join("%.5f" % v for v in workspace.FetchBlob(w).ravel())))


if __name__ == "__main__":
    main()
