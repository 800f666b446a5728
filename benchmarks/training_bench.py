"""One training step of a recommendation model (forward, backward and the optimizer
update), caffe2py next to the same model in torch, same process, alternating blocks
(benchmarks/_timing.interleaved_ms), several rounds: medians and ranges are printed.

The model (DLRM-style, as in benchmarks/training_grad_bench.py):
  dense 13 -> 64 -> 32 bottom MLP (relu); 6 float tables and 2 fused 8-bit tables of
  rows x 32 pooled by SparseLengthsSum (bags of 10-30 ids); Concat(add_axis) of the 9
  vectors, BatchMatMul dot interaction, BatchGather of the upper triangle; 68 -> 64 -> 1
  top MLP; SigmoidCrossEntropyWithLogits + AveragedLoss. Built with ModelHelper / brew,
  AddGradientOperators, then optimizer.build_sgd (WeightedSum, ScatterWeightedSum on the
  tables) or optimizer.build_adagrad (Adagrad, SparseAdagrad on the tables).
  The fused 8-bit tables are frozen (fbgemm-style: no gradient).
torch: the same values; F.embedding_bag(sparse=True) for the float tables,
  torch.ops.quantized.embedding_bag_byte_rowwise_offsets on the *same bytes* for the
  fused ones (fbgemm's kernel for Caffe2's layout), torch.optim.SGD / Adagrad;
  a step is zero_grad(set_to_none) + forward + backward + optimizer.step().
Both sides update their parameters every step (the same batch is reused).

Usage: python benchmarks/training_bench.py [--threads 2] [--rounds 5] [--runs 20]
       [--batch 256] [--rows 100000] [--optimizers sgd,adagrad] [--profile]
--profile prints Caffe2's per-op table (workspace.BenchmarkNet(name, 1, n, True)) of
our step, per op type, after the timing rounds.
"""
import argparse
import os
import statistics
import sys


def parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--optimizers", default="sgd,adagrad")
    parser.add_argument("--profile", action="store_true")
    return parser.parse_args()


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None:
    os.environ.setdefault("CAFFE2PY_NUM_THREADS", str(ARGS.threads))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved_ms, machine_label  # noqa: E402

from caffe2py import brew, core, model_helper, optimizer, workspace  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:      # benchmark-only dependency
    torch = None

DENSE_IN, DIM, FLOAT_TABLES, FUSED_TABLES, LR = 13, 32, 6, 2, 0.01


def make_inputs(rng, batch, rows):
    feeds = {"dense": rng.standard_normal((batch, DENSE_IN)).astype(np.float32),
             "click": rng.integers(0, 2, (batch, 1)).astype(np.float32)}
    for t in range(FLOAT_TABLES + FUSED_TABLES):
        lengths = rng.integers(10, 31, batch).astype(np.int32)
        feeds["len%d" % t] = lengths
        feeds["ids%d" % t] = rng.integers(0, rows, int(lengths.sum())).astype(np.int64)
    return feeds


def build_model(batch, rows, opt):
    """Our training net in the current workspace; returns (net name, model)."""
    model = model_helper.ModelHelper(name="rec_train_" + opt)
    h = brew.relu(model, brew.fc(model, "dense", "bot1", dim_in=DENSE_IN, dim_out=64), "bot1_r")
    bottom = brew.relu(model, brew.fc(model, h, "bot2", dim_in=64, dim_out=DIM), "bot2_r")
    pooled = [bottom]
    for t in range(FLOAT_TABLES + FUSED_TABLES):
        if t < FLOAT_TABLES:
            table = model.create_param("emb%d" % t, [rows, DIM], ("GaussianFill", {"std": 0.05}))
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
    h = brew.relu(model, brew.fc(model, top_in, "top1", dim_in=DIM + len(upper), dim_out=64), "top1_r")
    logit = brew.fc(model, h, "top2", dim_in=64, dim_out=1)
    loss = model.net.AveragedLoss(model.net.SigmoidCrossEntropyWithLogits([logit, "click"], "xent"), "loss")
    model.AddGradientOperators([loss])
    if opt == "sgd":
        optimizer.build_sgd(model, base_learning_rate=LR)
    else:
        optimizer.build_adagrad(model, base_learning_rate=LR, epsilon=1e-4)
    return model, upper


class Case:
    def __init__(self, opt, batch, rows, seed=0):
        rng = np.random.default_rng(seed)
        workspace.ResetWorkspace()
        self.model, upper = build_model(batch, rows, opt)
        workspace.RunNetOnce(self.model.param_init_net)
        feeds = make_inputs(rng, batch, rows)
        for t in range(FLOAT_TABLES, FLOAT_TABLES + FUSED_TABLES):
            workspace.FeedBlob("q_float", (rng.standard_normal((rows, DIM)) * 0.05).astype(np.float32))
            workspace.RunOperatorOnce(core.CreateOperator("FloatToFused8BitRowwiseQuantized",
                                                          ["q_float"], ["q%d" % t]))
        for name, value in feeds.items():
            workspace.FeedBlob(name, value)
        workspace.CreateNet(self.model.net, overwrite=True)
        self.net = self.model.net.Name()
        self.name = "rec %s (batch %d, 8 tables %d x %d)" % (opt, batch, rows, DIM)
        self.torch_step = self._torch(opt, batch, feeds, upper) if torch is not None else None

    def ours(self):
        workspace.RunNet(self.net)

    def _torch(self, opt, batch, feeds, upper):
        t = {str(p): torch.tensor(workspace.FetchBlob(p), requires_grad=True) for p in self.model.params}
        fused = {k: torch.from_numpy(workspace.FetchBlob("q%d" % k).copy())
                 for k in range(FLOAT_TABLES, FLOAT_TABLES + FUSED_TABLES)}
        ids = {k: torch.from_numpy(feeds["ids%d" % k]) for k in range(FLOAT_TABLES + FUSED_TABLES)}
        offsets = {k: torch.from_numpy(np.concatenate([[0], np.cumsum(feeds["len%d" % k])[:-1]]).astype(np.int64))
                   for k in range(FLOAT_TABLES + FUSED_TABLES)}
        dense, click = torch.from_numpy(feeds["dense"]), torch.from_numpy(feeds["click"])
        params = list(t.values())
        opt_t = torch.optim.SGD(params, lr=LR) if opt == "sgd" else torch.optim.Adagrad(params, lr=LR, eps=1e-4)

        def step():
            opt_t.zero_grad(set_to_none=True)
            b = F.relu(F.linear(F.relu(F.linear(dense, t["bot1_w"], t["bot1_b"])), t["bot2_w"], t["bot2_b"]))
            vecs = [b]
            for k in range(FLOAT_TABLES + FUSED_TABLES):
                if k < FLOAT_TABLES:
                    vecs.append(F.embedding_bag(ids[k], t["emb%d" % k], offsets[k], mode="sum", sparse=True))
                else:
                    vecs.append(torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
                        fused[k], ids[k], offsets[k], mode=0))
            zt = torch.stack(vecs, 1)
            inter = (zt @ zt.transpose(1, 2)).reshape(batch, -1)[:, upper]
            h = F.relu(F.linear(torch.cat([b, inter], 1), t["top1_w"], t["top1_b"]))
            out = F.linear(h, t["top2_w"], t["top2_b"])
            F.binary_cross_entropy_with_logits(out, click).backward()
            opt_t.step()
        return step


def main():
    if torch is not None:
        torch.set_num_threads(ARGS.threads)
    print("machine: %s; %d threads (CAFFE2PY_NUM_THREADS=%s, torch %s)" % (
        machine_label(), ARGS.threads, os.environ.get("CAFFE2PY_NUM_THREADS"),
        torch.__version__ if torch is not None else "absent"))
    try:
        print("load average: %.1f %.1f %.1f" % os.getloadavg())
    except OSError:
        pass
    for opt in ARGS.optimizers.split(","):
        case = Case(opt, ARGS.batch, ARGS.rows)
        print("%s, %d rounds of %d steps per side" % (case.name, ARGS.rounds, ARGS.runs))
        ours_ms, torch_ms, ratios = [], [], []
        for r in range(ARGS.rounds):
            if case.torch_step is None:
                o, _ = interleaved_ms(case.ours, lambda: None, ARGS.runs)
                print("  round %d: ours %.2f ms (torch absent)" % (r, o))
                continue
            o, p = interleaved_ms(case.ours, case.torch_step, ARGS.runs)
            ours_ms.append(o)
            torch_ms.append(p)
            ratios.append(o / p)
            print("  round %d: ours %8.2f ms  torch %8.2f ms  ratio %.2f" % (r, o, p, o / p))
            sys.stdout.flush()
        if ratios:
            print("  median: ours %.2f ms, torch %.2f ms, ratio %.2f (range %.2f-%.2f)" % (
                statistics.median(ours_ms), statistics.median(torch_ms), statistics.median(ratios),
                min(ratios), max(ratios)))
        if ARGS.profile:
            workspace.BenchmarkNet(case.net, 1, ARGS.runs, True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
