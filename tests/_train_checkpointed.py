"""A small training loop that checkpoints with Checkpoint and resumes with Load.

    python _train_checkpointed.py WORKDIR TOTAL_ITERS [--resume] [--slow SECONDS]

Linear regression by hand-written SGD ops (FC, Sub, BatchMatMul, Mul), reading its
batches through a dataset cursor. Every 5 iterations Checkpoint saves the iteration
counter, the weights and the cursor to WORKDIR/ckpt_<iter>.minidb. --resume loads
the newest checkpoint (Load with load_all) and goes on from there. At the end the
weights go to WORKDIR/final.npy. --slow sleeps between iterations so that a test
can kill the process in the middle of the run.
"""
import glob
import os
import sys
import time

import numpy as np

from caffe2py import core, workspace

BATCH, FEATURES, EVERY = 4, 4, 5


def dataset(total):
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((BATCH * total, FEATURES)).astype(np.float32)
    true_w = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    y = (x @ true_w.T + 0.01 * rng.standard_normal((BATCH * total, 1))).astype(np.float32)
    return x, y


def main(argv):
    workdir, total = argv[0], int(argv[1])
    resume = "--resume" in argv
    slow = float(argv[argv.index("--slow") + 1]) if "--slow" in argv else 0.0
    x, y = dataset(total)
    workspace.FeedBlob("X", x)
    workspace.FeedBlob("Y", y)
    workspace.FeedBlob("zero_bias", np.zeros(1, np.float32))
    workspace.FeedBlob("lr", np.full((1, FEATURES), 0.2 / BATCH, np.float32))

    checkpoints = sorted(glob.glob(os.path.join(workdir, "ckpt_*.minidb")))
    if resume and checkpoints:
        workspace.RunOperatorOnce(core.CreateOperator(
            "Load", [], [], db=checkpoints[-1], db_type="minidb", absolute_path=1, load_all=1))
        print("resumed from iteration %d" % int(workspace.FetchBlob("iter")[0]), flush=True)
    else:
        init = core.Net("init")
        init.ConstantFill([], "iter", shape=[1], value=0, dtype=core.DataType.INT64)
        init.ConstantFill([], "W", shape=[1, FEATURES], value=0.0)
        init.CreateTreeCursor([], "cursor", fields=["x", "y"])
        workspace.RunNetOnce(init)

    train = core.Net("train")
    train.Iter("iter", "iter")
    train.ReadNextBatch(["cursor", "X", "Y"], ["xb", "yb"], batch_size=BATCH)
    train.FC(["xb", "W", "zero_bias"], "pred")
    train.Sub(["pred", "yb"], "err")
    train.BatchMatMul(["err", "xb"], "grad", trans_a=1)
    train.Mul(["grad", "lr"], "step")
    train.Sub(["W", "step"], "W")
    train.Checkpoint(["iter", "W", "cursor"], [], db=os.path.join(workdir, "ckpt_%06d.minidb"),
                     db_type="minidb", absolute_path=1, every=EVERY)
    workspace.CreateNet(train)
    while int(workspace.FetchBlob("iter")[0]) < total:
        workspace.RunNet(train.Name())
        print("iteration %d" % int(workspace.FetchBlob("iter")[0]), flush=True)
        if slow:
            time.sleep(slow)
    np.save(os.path.join(workdir, "final.npy"), workspace.FetchBlob("W"))


if __name__ == "__main__":
    main(sys.argv[1:])
