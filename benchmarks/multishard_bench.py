"""examples/s of data-parallel training steps at 1, 2 and 4 local shards, and the time
each step spends in the collectives (Allreduce of dense gradients, AllgatherRows of
sparse ones).

    python benchmarks/multishard_bench.py [--models mlp dlrm resnet] [--shards 1 2 4]
        [--steps 12] [--global_batch 64]

Each configuration is one `caffe2py launch -n S tests/_multishard_worker.py --bench`:
the shards share the fixed global batch (weak scaling would grow it), meet through a
file store on this machine and talk over loopback TCP (Gloo). step_s is the mean
time of the steps after the first; examples/s = global batch / step_s; comm is the
per-step time of the collective ops measured op by op (BenchmarkNet's individual
runs), which includes waiting for the slowest shard. Rows: the mean over shards.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(HERE), "tests", "_multishard_worker.py")
LINE = re.compile(r"BENCH model=(\w+) shard=(\d+) shards=(\d+) step_s=([\d.]+) examples_per_s=([\d.]+) "
                  r"allreduce_s=([\d.]+)")


def run_one(model, shards, steps, batch, timeout):
    cmd = [sys.executable, "-m", "caffe2py", "launch", "-n", str(shards), WORKER, "--model", model, "--bench",
           "--steps", str(steps), "--global_batch", str(batch)]
    if model == "resnet":
        cmd.append("--combine_spatial_bn")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    rows = [LINE.search(line) for line in done.stdout.splitlines()]
    rows = [m for m in rows if m]
    if done.returncode != 0 or len(rows) != shards:
        raise SystemExit("%s failed (%d):\n%s\n%s" % (" ".join(cmd), done.returncode, done.stdout[-2000:],
                                                     done.stderr[-2000:]))
    mean = lambda k: sum(float(m.group(k)) for m in rows) / len(rows)   # noqa: E731
    return mean(4), mean(5), mean(6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "dlrm", "resnet"])
    parser.add_argument("--shards", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--global_batch", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    print("| model | shards | step s | examples/s | comm s/step | comm share |")
    print("|---|---|---|---|---|---|")
    for model in args.models:
        for shards in args.shards:
            step, rate, comm = run_one(model, shards, args.steps, args.global_batch, args.timeout)
            print("| %s | %d | %.4f | %.0f | %.4f | %.0f%% |" % (model, shards, step, rate, comm,
                                                               100 * comm / step if step else 0), flush=True)


if __name__ == "__main__":
    main()
