"""One shard of a multi-process data_parallel_model run (test_multishard_training.py,
benchmarks/multishard_bench.py), taking Caffe2's trainer flags:

    python _multishard_worker.py --model mlp|dlrm|resnet --shard_id I --num_shards N
        --run_id R (--file_store_path DIR | --redis_host H --redis_port P) --out OUT.npz

Every step draws one global batch (the same on every shard, from the step number)
and each shard trains on its contiguous share of the rows (split again over its
devices). Shard s draws its initial parameters with seed s, so only the broadcast
from shard 0 makes them agree; `train(num_shards=1, ...)` in one process on the
whole batch is the reference. OUT.npz holds GetCheckpointParams (device 0's parameters,
computed parameters and optimizer state, the iteration counter) and the learning
rate; it is also the checkpoint --restore loads.
"""
import argparse
import os
import sys
import time
import zlib

import numpy as np

GLOBAL_BATCH = 8
VOCAB = (20, 12)
EMB_DIM = 4


# ----------------------------------------------------------------- models (tiny: 2 shared cores)

def _mlp(model, loss_scale):
    from caffe2py import brew
    hidden = brew.fc(model, "data", "fc1", dim_in=8, dim_out=16)
    hidden = brew.relu(model, hidden, hidden)
    logits = brew.fc(model, hidden, "fc2", dim_in=16, dim_out=4)
    _, loss = model.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
    return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]


def _dlrm(model, loss_scale):
    from caffe2py import brew
    bottom = brew.relu(model, brew.fc(model, "dense", "bot_fc", dim_in=4, dim_out=EMB_DIM), "bot_relu")
    pooled = []
    for t, rows in enumerate(VOCAB):
        table = model.create_param("emb%d" % t, [rows, EMB_DIM], ("UniformFill", {"min": -0.5, "max": 0.5}),
                                   tags="WEIGHT")
        pooled.append(model.net.SparseLengthsSum([table, "ids%d" % t, "lengths%d" % t], "pooled%d" % t))
    features, _ = model.net.Concat([bottom] + pooled, ["features", "features_info"], axis=1)
    logit = brew.fc(model, features, "top_fc", dim_in=EMB_DIM * (1 + len(VOCAB)), dim_out=1)
    xent = model.net.SigmoidCrossEntropyWithLogits([logit, "click"], "xent")
    loss = model.net.AveragedLoss(xent, "loss")
    return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]


def _resnet(model, loss_scale):
    from caffe2py import brew
    conv1 = brew.conv(model, "data", "conv1", 3, 4, kernel=3, pad=1, no_bias=1)
    bn1 = brew.spatial_bn(model, conv1, "bn1", 4, epsilon=1e-3, is_test=False)
    relu1 = brew.relu(model, bn1, "relu1")
    conv2 = brew.conv(model, relu1, "conv2", 4, 4, kernel=3, pad=1, no_bias=1)
    bn2 = brew.spatial_bn(model, conv2, "bn2", 4, epsilon=1e-3, is_test=False)
    out = brew.relu(model, brew.sum(model, [bn2, relu1], "res_sum"), "res_relu")
    pool = brew.average_pool(model, out, "pool", kernel=6, stride=1)
    logits = brew.fc(model, pool, "pred", 4, 3)
    _, loss = model.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
    return [model.net.Scale(loss, "scaled_loss", scale=loss_scale)]


MODELS = {"mlp": _mlp, "dlrm": _dlrm, "resnet": _resnet}


def global_batch(model_name, step, batch=GLOBAL_BATCH):
    """Per example (rows of the global batch), a dict of arrays; sparse ids as lists."""
    rng = np.random.default_rng(1000 + step)
    if model_name == "mlp":
        return [{"data": rng.standard_normal(8).astype(np.float32), "label": np.int32(rng.integers(0, 4))}
                for _ in range(batch)]
    if model_name == "resnet":
        return [{"data": rng.standard_normal((3, 6, 6)).astype(np.float32), "label": np.int32(rng.integers(0, 3))}
                for _ in range(batch)]
    examples = []
    for _ in range(batch):
        ex = {"dense": rng.standard_normal(4).astype(np.float32), "click": np.float32(rng.integers(0, 2))}
        for t, rows in enumerate(VOCAB):    # repeated ids within and across shards
            ex["ids%d" % t] = rng.integers(0, rows, int(rng.integers(1, 4))).astype(np.int64)
        examples.append(ex)
    return examples


def feeds_for(model_name, examples):
    """Blob name -> array for a list of examples."""
    if model_name != "dlrm":
        return {"data": np.stack([e["data"] for e in examples]),
                "label": np.array([e["label"] for e in examples], np.int32)}
    feeds = {"dense": np.stack([e["dense"] for e in examples]),
             "click": np.array([[e["click"]] for e in examples], np.float32)}
    for t in range(len(VOCAB)):
        feeds["ids%d" % t] = np.concatenate([e["ids%d" % t] for e in examples])
        feeds["lengths%d" % t] = np.array([len(e["ids%d" % t]) for e in examples], np.int32)
    return feeds


# ----------------------------------------------------------------- training

def build(model_name, devices, rendezvous, combine_spatial_bn, timeout_sec=None, shared_model=False):
    from caffe2py import data_parallel_model, model_helper, optimizer
    model = model_helper.ModelHelper(name="shards_" + model_name)

    def add_optimizer(m):
        # step policy: the learning rate follows the iteration counter, which must stay in step
        return optimizer.build_sgd(m, base_learning_rate=0.1, policy="step", stepsize=2, gamma=0.5,
                                   momentum=0.0 if model_name == "dlrm" else 0.9)
    if rendezvous is not None and timeout_sec:
        rendezvous = dict(rendezvous, timeout_sec=timeout_sec)
    data_parallel_model.Parallelize(model, input_builder_fun=lambda m: None,
                                    forward_pass_builder_fun=MODELS[model_name],
                                    optimizer_builder_fun=add_optimizer, devices=list(range(devices)),
                                    rendezvous=rendezvous, cpu_device=True, combine_spatial_bn=combine_spatial_bn,
                                    shared_model=shared_model)
    return model


def seed_init(model, seed):
    """Seed every fill of param_init_net from its blob's unprefixed name and `seed`."""
    from caffe2py.data_parallel_model import stripBlobName
    for op in model.param_init_net.Proto().op:
        if not op.input and op.output and "/" in op.output[0]:
            op.device_option.random_seed = (zlib.crc32(stripBlobName(op.output[0]).encode()) + 7919 * seed) % 2 ** 31


def feed_step(model_name, step, shard_id, num_shards, devices, batch=GLOBAL_BATCH):
    from caffe2py import workspace
    examples = global_batch(model_name, step, batch)
    per_shard = len(examples) // num_shards
    mine = examples[shard_id * per_shard:(shard_id + 1) * per_shard]
    per_device = len(mine) // devices
    for d in range(devices):
        for name, value in feeds_for(model_name, mine[d * per_device:(d + 1) * per_device]).items():
            workspace.FeedBlob("cpu_%d/%s" % (d, name), value)


def snapshot(model):
    """Device 0's trained state by unprefixed name, plus counters and learning rate."""
    from caffe2py import data_parallel_model, workspace
    state = {}
    for blob in data_parallel_model.GetCheckpointParams(model):
        state[str(blob)] = np.array(workspace.FetchBlob(str(blob)))
    for lr in data_parallel_model.GetLearningRateBlobNames(model):
        if workspace.HasBlob(lr):       # made by the first step
            state["lr:" + lr] = np.array(workspace.FetchBlob(lr))
    return state


def train(model_name, steps, shard_id=0, num_shards=1, devices=1, rendezvous=None, combine_spatial_bn=False,
          timeout_sec=None, die_at_step=None, on_step=None, start_step=0, restore=None, batch=GLOBAL_BATCH,
          shared_model=False):
    from caffe2py import data_parallel_model, workspace
    model = build(model_name, devices, rendezvous, combine_spatial_bn, timeout_sec, shared_model)
    seed_init(model, shard_id)
    feed_step(model_name, start_step, shard_id, num_shards, devices, batch)
    data_parallel_model.RunInitNet(model)
    if restore is not None:      # a checkpoint: device 0's blobs, then spread (over shards too)
        for name, value in restore.items():
            if not name.startswith("lr:"):
                workspace.FeedBlob(name, value)
        data_parallel_model.FinalizeAfterCheckpoint(model)
    for step in range(start_step, start_step + steps):
        if die_at_step is not None and step == die_at_step:
            os.kill(os.getpid(), 9)
        feed_step(model_name, step, shard_id, num_shards, devices, batch)
        data_parallel_model.RunNet(model, 1)
        if on_step is not None:
            on_step(model, step)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--shard_id", type=int, default=0)
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--run_id", default="run")
    parser.add_argument("--file_store_path", default=None)
    parser.add_argument("--redis_host", default=None)
    parser.add_argument("--redis_port", type=int, default=6379)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per shard")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--start_step", type=int, default=0)
    parser.add_argument("--restore", default=None, help="a checkpoint .npz (loaded on shard 0 only)")
    parser.add_argument("--combine_spatial_bn", action="store_true")
    parser.add_argument("--timeout_sec", type=float, default=None)
    parser.add_argument("--die_at_step", type=int, default=None)
    parser.add_argument("--die_shard", type=int, default=None)
    parser.add_argument("--global_batch", type=int, default=GLOBAL_BATCH, help="examples per step, all shards")
    parser.add_argument("--bench", action="store_true", help="print examples/s and the time in Allreduce")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from caffe2py import child_processes, core, data_parallel_model, workspace
    child_processes.protect_from_env()
    rendezvous = None
    if args.num_shards > 1:
        if args.redis_host:
            workspace.RunOperatorOnce(core.CreateOperator(
                "RedisStoreHandlerCreate", [], ["store_handler"], host=args.redis_host, port=args.redis_port,
                prefix=args.run_id))
        else:
            workspace.RunOperatorOnce(core.CreateOperator(
                "FileStoreHandlerCreate", [], ["store_handler"], path=args.file_store_path, prefix=args.run_id))
        rendezvous = dict(kv_handler="store_handler", shard_id=args.shard_id, num_shards=args.num_shards,
                          engine="GLOO", transport="tcp", interface="lo", exit_nets=None)
    die = args.die_at_step if args.die_shard in (None, args.shard_id) else None
    restore = dict(np.load(args.restore)) if args.restore and args.shard_id == 0 else None
    timings = []
    observer = None

    def on_step(model, step):
        nonlocal observer
        timings.append(time.perf_counter())
        if args.bench and observer is None:     # per-op times from the second step on
            from caffe2py.executor import TimeObserver
            observer = TimeObserver()
            workspace.GetNet(model.net.Proto().name).add_observer(observer)

    model = train(args.model, args.steps, args.shard_id, args.num_shards, args.devices, rendezvous,
                  args.combine_spatial_bn, args.timeout_sec, die, on_step, args.start_step,
                  restore if restore is not None else ({} if args.restore else None), args.global_batch)
    data_parallel_model.Synchronize(model)     # a barrier over the shards before the results
    if args.bench:
        report_bench(args, model, timings, observer)
    if args.out:
        np.savez(args.out.format(shard_id=args.shard_id), **snapshot(model))
    return 0


def report_bench(args, model, timings, observer):
    """Seconds per step after the first (warm-up), the job's examples/s (the global
    batch over that), and the seconds per step in the net's Allreduce / AllgatherRows
    ops (a TimeObserver on the steps after the first; includes waiting for peers)."""
    steady = (timings[-1] - timings[0]) / max(1, len(timings) - 1)
    comm_ops = [i for i, op in enumerate(model.net.Proto().op) if op.type in ("Allreduce", "AllgatherRows")]
    comm = sum(observer.op_ms.get(i, 0.0) for i in comm_ops) / max(1, observer.runs) / 1000.0
    print("BENCH model=%s shard=%d shards=%d step_s=%.5f examples_per_s=%.1f allreduce_s=%.5f"
          % (args.model, args.shard_id, args.num_shards, steady, args.global_batch / steady if steady else 0.0,
             comm), flush=True)


if __name__ == "__main__":
    sys.exit(main())
