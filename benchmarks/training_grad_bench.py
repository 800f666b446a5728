"""Forward + backward of training nets built the Caffe2 way (ModelHelper, brew,
AddGradientOperators), next to the same models in torch (forward + loss.backward(),
gradients freed between steps), same process, alternating blocks. No optimizer
step on either side (that is issue 16's other half).

Models:
  rec    DLRM-style: dense 13 -> 64 -> 32 bottom MLP, 6 float tables + 2 fused 8-bit
         tables (rows x 32) pooled by SparseLengthsSum (bags of ~20 ids), a BatchMatMul
         dot interaction with BatchGather of the upper triangle, 68 -> 64 -> 1 top MLP,
         SigmoidCrossEntropyWithLogits + AveragedLoss. torch: embedding_bag with
         sparse=True (its gradient is sparse, as our GradientSlice is).
  lenet  Caffe2's MNIST LeNet: conv 5x5 20, max pool, conv 5x5 50, max pool, fc 500,
         relu, fc 10, SoftmaxWithLoss; 1 x 28 x 28 inputs.
  mlp    784 -> 1024 -> 1024 -> 10 with relu, SoftmaxWithLoss.

Usage: python benchmarks/training_grad_bench.py [--threads 2] [--runs 30] [--batch 256]
       [--rows 100000] [--models rec,lenet,mlp]
"""
import argparse
import os
import sys


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--models", default="rec,lenet,mlp")
    return parser.parse_args()


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None:
    os.environ.setdefault("CAFFE2PY_NUM_THREADS", str(ARGS.threads))

import numpy as np  # noqa: E402
from _timing import interleaved_ms, machine_label  # noqa: E402

from caffe2py import brew, core, model_helper, workspace  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:      # benchmark-only dependency
    torch = None

RNG = np.random.default_rng(0)


class Case:
    """Our net (created in the current workspace) and the torch step on the same values."""

    def __init__(self, name, model, feeds, torch_step):
        self.name = name
        workspace.RunNetOnce(model.param_init_net)
        for blob, value in feeds.items():
            workspace.FeedBlob(blob, value)
        workspace.CreateNet(model.net, overwrite=True)
        self.net = model.net.Name()
        self.params = {str(p): workspace.FetchBlob(p) for p in model.params}
        self.torch_step = torch_step(self.params) if torch is not None else None

    def ours(self):
        workspace.RunNet(self.net)


def _torch_params(params):
    return {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}


def _free(params):
    for p in params.values():
        p.grad = None


# ----------------------------------------------------------------- rec

def rec_case(batch, rows, dim=32, bag=20, float_tables=6, fused_tables=2):
    model = model_helper.ModelHelper(name="rec_bench")
    h = brew.relu(model, brew.fc(model, "dense", "bot1", dim_in=13, dim_out=64), "bot1_r")
    bottom = brew.relu(model, brew.fc(model, h, "bot2", dim_in=64, dim_out=dim), "bot2_r")
    pooled, feeds = [bottom], {"dense": RNG.standard_normal((batch, 13)).astype(np.float32),
                               "click": RNG.integers(0, 2, (batch, 1)).astype(np.float32)}
    lookups = []
    for t in range(float_tables + fused_tables):
        lengths = RNG.integers(bag // 2, bag * 3 // 2 + 1, batch).astype(np.int32)
        ids = RNG.integers(0, rows, lengths.sum()).astype(np.int64)
        feeds["len%d" % t], feeds["ids%d" % t] = lengths, ids
        lookups.append((ids, lengths))
        if t < float_tables:
            table = model.create_param("emb%d" % t, [rows, dim], ("GaussianFill", {"std": 0.05}))
            pooled.append(model.net.SparseLengthsSum([table, "ids%d" % t, "len%d" % t], "pool%d" % t))
        else:
            values = (RNG.standard_normal((rows, dim)) * 0.05).astype(np.float32)
            workspace.FeedBlob("q%d_float" % t, values)
            workspace.RunOperatorOnce(core.CreateOperator("FloatToFused8BitRowwiseQuantized",
                                                          ["q%d_float" % t], ["q%d" % t]))
            workspace.RunOperatorOnce(core.CreateOperator("Fused8BitRowwiseQuantizedToFloat",
                                                          ["q%d" % t], ["q%d_deq" % t]))
            pooled.append(model.net.SparseLengthsSumFused8BitRowwise(["q%d" % t, "ids%d" % t, "len%d" % t],
                                                                     "pool%d" % t))
    feats = len(pooled)
    cat, _ = model.net.Concat(pooled, ["cat", "cat_split"], axis=1)
    z, _ = model.net.Reshape(cat, ["z", "z_shape"], shape=[batch, feats, dim])
    flat = model.net.Flatten(model.net.BatchMatMul([z, z], "inter", trans_b=1), "inter_flat")
    upper = [i * feats + j for i in range(feats) for j in range(i + 1, feats)]
    model.param_init_net.GivenTensorIntFill([], "upper", shape=[len(upper)], values=upper)
    pairs = model.net.BatchGather([flat, "upper"], "pairs")
    top_in, _ = model.net.Concat([bottom, pairs], ["top_in", "top_split"], axis=1)
    h = brew.relu(model, brew.fc(model, top_in, "top1", dim_in=dim + len(upper), dim_out=64), "top1_r")
    logit = brew.fc(model, h, "top2", dim_in=64, dim_out=1)
    loss = model.net.AveragedLoss(model.net.SigmoidCrossEntropyWithLogits([logit, "click"], "xent"), "loss")
    model.AddGradientOperators([loss])
    frozen = [workspace.FetchBlob("q%d_deq" % t) for t in range(float_tables, float_tables + fused_tables)]

    def torch_step(params):
        t = _torch_params(params)
        frozen_t = [torch.tensor(v) for v in frozen]
        ids = [torch.tensor(i) for i, _ in lookups]
        offsets = [torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
                   for _, lengths in lookups]
        dense, click = torch.tensor(feeds["dense"]), torch.tensor(feeds["click"])

        def step():
            _free(t)
            b = F.relu(F.linear(F.relu(F.linear(dense, t["bot1_w"], t["bot1_b"])), t["bot2_w"], t["bot2_b"]))
            vecs = [b]
            for k in range(float_tables + fused_tables):
                table = t["emb%d" % k] if k < float_tables else frozen_t[k - float_tables]
                vecs.append(F.embedding_bag(ids[k], table, offsets[k], mode="sum", sparse=True))
            zt = torch.stack(vecs, 1)
            inter = (zt @ zt.transpose(1, 2)).reshape(batch, -1)[:, upper]
            h = F.relu(F.linear(torch.cat([b, inter], 1), t["top1_w"], t["top1_b"]))
            out = F.linear(h, t["top2_w"], t["top2_b"])
            F.binary_cross_entropy_with_logits(out, click).backward()
        return step
    return Case("rec (batch %d, 8 tables %d x %d)" % (batch, rows, dim), model, feeds, torch_step)


# ----------------------------------------------------------------- lenet / mlp

def lenet_case(batch=64):
    model = model_helper.ModelHelper(name="lenet_bench")
    h = brew.max_pool(model, brew.conv(model, "data", "conv1", dim_in=1, dim_out=20, kernel=5), "pool1",
                      kernel=2, stride=2)
    h = brew.max_pool(model, brew.conv(model, h, "conv2", dim_in=20, dim_out=50, kernel=5), "pool2",
                      kernel=2, stride=2)
    h = brew.relu(model, brew.fc(model, h, "fc3", dim_in=50 * 4 * 4, dim_out=500), "relu3")
    pred = brew.fc(model, h, "pred", dim_in=500, dim_out=10)
    _, loss = model.net.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    feeds = {"data": RNG.standard_normal((batch, 1, 28, 28)).astype(np.float32),
             "label": RNG.integers(0, 10, batch).astype(np.int32)}

    def torch_step(params):
        t = _torch_params(params)
        x, y = torch.tensor(feeds["data"]), torch.tensor(feeds["label"].astype(np.int64))

        def step():
            _free(t)
            h = F.max_pool2d(F.conv2d(x, t["conv1_w"], t["conv1_b"]), 2, 2)
            h = F.max_pool2d(F.conv2d(h, t["conv2_w"], t["conv2_b"]), 2, 2)
            h = F.relu(F.linear(h.reshape(batch, -1), t["fc3_w"], t["fc3_b"]))
            F.cross_entropy(F.linear(h, t["pred_w"], t["pred_b"]), y).backward()
        return step
    return Case("lenet (batch %d)" % batch, model, feeds, torch_step)


def mlp_case(batch=128):
    model = model_helper.ModelHelper(name="mlp_bench")
    h = brew.relu(model, brew.fc(model, "data", "fc1", dim_in=784, dim_out=1024), "r1")
    h = brew.relu(model, brew.fc(model, h, "fc2", dim_in=1024, dim_out=1024), "r2")
    pred = brew.fc(model, h, "fc3", dim_in=1024, dim_out=10)
    _, loss = model.net.SoftmaxWithLoss([pred, "label"], ["softmax", "loss"])
    model.AddGradientOperators([loss])
    feeds = {"data": RNG.standard_normal((batch, 784)).astype(np.float32),
             "label": RNG.integers(0, 10, batch).astype(np.int32)}

    def torch_step(params):
        t = _torch_params(params)
        x, y = torch.tensor(feeds["data"]), torch.tensor(feeds["label"].astype(np.int64))

        def step():
            _free(t)
            h = F.relu(F.linear(x, t["fc1_w"], t["fc1_b"]))
            h = F.relu(F.linear(h, t["fc2_w"], t["fc2_b"]))
            F.cross_entropy(F.linear(h, t["fc3_w"], t["fc3_b"]), y).backward()
        return step
    return Case("mlp 784-1024-1024-10 (batch %d)" % batch, model, feeds, torch_step)


def main():
    if torch is not None:
        torch.set_num_threads(ARGS.threads)
    builders = {"rec": lambda: rec_case(ARGS.batch, ARGS.rows), "lenet": lenet_case, "mlp": mlp_case}
    print("machine: %s; %d threads (CAFFE2PY_NUM_THREADS=%s, torch %s)" % (
        machine_label(), ARGS.threads, os.environ.get("CAFFE2PY_NUM_THREADS"),
        torch.__version__ if torch is not None else "absent"))
    print("%-44s %10s %10s %7s" % ("forward + backward", "ours ms", "torch ms", "ratio"))
    for name in ARGS.models.split(","):
        workspace.ResetWorkspace()
        case = builders[name]()
        if case.torch_step is None:
            ours, _ = interleaved_ms(case.ours, lambda: None, ARGS.runs)
            print("%-44s %10.2f %10s %7s" % (case.name, ours, "absent", "-"))
            continue
        ours, theirs = interleaved_ms(case.ours, case.torch_step, ARGS.runs)
        print("%-44s %10.2f %10.2f %7.2f" % (case.name, ours, theirs, ours / theirs))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
