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

Several shards (processes, on one host or many) take Caffe2's trainer flags
--shard_id, --num_shards, --run_id and --file_store_path (or --redis_host /
--redis_port); `caffe2py launch` passes them:

    caffe2py launch -n 2 --compat examples/dlrm_style_training.py --steps 10

Every shard draws the same batches of batch-size * num_shards examples and trains
on its contiguous share; the shards meet through FileStoreHandlerCreate (or
RedisStoreHandlerCreate) and one CreateCommonWorld, start from shard 0's weights
(Broadcast), and before each update Allreduce the dense gradients and AllgatherRows
the tables' sparse ones, scaled by 1 / num_shards: the weights stay equal to one
process training on the whole batches. Shard 0 prints the losses of its share and
the weights.
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


def add_sgd(model, loss, dense_weights, tables, learning_rate, world=None, num_shards=1):
    model.param_init_net.ConstantFill([], "const_one", shape=[1], value=1.0)
    brew.iter(model, "optim_it")
    lr = model.net.LearningRate("optim_it", "optim_lr", base_lr=-learning_rate, policy="fixed")
    grads = model.AddGradientOperators([loss])
    if world is not None:
        average_across_shards(model, world, num_shards, [grads[w] for w in dense_weights],
                              [grads[t] for t in tables])
    for w in dense_weights:
        model.net.WeightedSum([w, "const_one", grads[w], lr], w)
    for table in tables:
        grad = grads[table]
        model.net.ScatterWeightedSum([table, "const_one", grad.indices, grad.values, lr], table)


def average_across_shards(model, world, num_shards, dense_grads, sparse_grads):
    """Each gradient becomes the mean over the shards: dense ones summed by Allreduce,
    sparse ones (indices, values) gathered from every shard by AllgatherRows."""
    for grad in dense_grads:
        model.net.Allreduce([world, grad], [grad], engine="GLOO")
        model.net.Scale(grad, grad, scale=1.0 / num_shards)
    for grad in sparse_grads:
        model.net.AllgatherRows([world, grad.indices], [grad.indices], engine="GLOO")
        model.net.AllgatherRows([world, grad.values], [grad.values], engine="GLOO")
        model.net.Scale(grad.values, grad.values, scale=1.0 / num_shards)


def join_shards(args):
    """The common world of the job's shards (None for one shard), with every weight
    blob still to be broadcast from shard 0."""
    if args.num_shards == 1:
        return None
    if args.redis_host:
        workspace.RunOperatorOnce(core.CreateOperator(
            "RedisStoreHandlerCreate", [], ["store_handler"], host=args.redis_host, port=args.redis_port,
            prefix=args.run_id))
    else:
        workspace.RunOperatorOnce(core.CreateOperator(
            "FileStoreHandlerCreate", [], ["store_handler"], path=args.file_store_path, prefix=args.run_id))
    workspace.RunOperatorOnce(core.CreateOperator(
        "CreateCommonWorld", ["store_handler"], ["world"], size=args.num_shards, rank=args.shard_id,
        engine="GLOO", timeout_ms=int(args.timeout * 1000)))
    return "world"


def shard_of(feeds, shard_id, num_shards):
    """This shard's contiguous share of a batch's examples (and of their ids)."""
    batch = len(feeds["dense_in"])
    lo, hi = batch * shard_id // num_shards, batch * (shard_id + 1) // num_shards
    mine = {"dense_in": feeds["dense_in"][lo:hi], "target": feeds["target"][lo:hi],
            "target_label": feeds["target_label"][lo:hi]}
    for i in range(len(TABLE_ROWS)):
        lengths = feeds["emb_%d_l" % i]
        starts = np.concatenate([[0], np.cumsum(lengths)])
        mine["emb_%d_l" % i] = lengths[lo:hi]
        mine["emb_%d_i" % i] = feeds["emb_%d_i" % i][starts[lo]:starts[hi]]
    return mine


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
    # Caffe2's trainer flags for several shards (caffe2py launch passes the first four)
    parser.add_argument("--shard_id", type=int, default=0)
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--run_id", default="dlrm_style")
    parser.add_argument("--file_store_path", default=None)
    parser.add_argument("--redis_host", default=None)
    parser.add_argument("--redis_port", type=int, default=6379)
    parser.add_argument("--timeout", type=float, default=60.0, help="rendezvous / collective timeout, seconds")
    args = parser.parse_args()
    if args.num_shards > 1 and not (args.file_store_path or args.redis_host):
        parser.error("--num_shards > 1 needs --file_store_path or --redis_host (caffe2py launch passes a folder)")

    workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"])
    world = join_shards(args)
    rng = np.random.default_rng(args.seed)
    model, loss, dense_weights, tables = build(args.loss, rng)
    add_sgd(model, loss, dense_weights, tables, args.learning_rate, world, args.num_shards)
    batches = [make_batch(rng, args.batch_size * args.num_shards) for _ in range(args.steps)]
    if world is not None:       # every shard starts from shard 0's weights; each trains on its share
        for w in dense_weights + tables:
            workspace.RunOperatorOnce(core.CreateOperator("Broadcast", [world, w], [w], root=0, engine="GLOO"))
        batches = [shard_of(b, args.shard_id, args.num_shards) for b in batches]
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
        if args.shard_id == 0:
            print("step %d loss %.5f" % (step, workspace.FetchBlob(str(loss))))
    if args.shard_id != 0:
        return
    for w in dense_weights + tables:
        print("%s %s" % (w, " ".join("%.5f" % v for v in workspace.FetchBlob(w).ravel())))


if __name__ == "__main__":
    main()
