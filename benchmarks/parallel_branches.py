"""Branch parallelism (issue 38): an Inception-style net, 2 or 4 independent conv
branches on one input concatenated, run as `simple` and as `async_scheduling` with
2 workers, in one process, runs alternating one by one; medians.

Each branch: Conv kxk (k = 1, 3, 5, 3 by branch) -> Relu -> Conv 3x3 -> Relu on
1x64x56x56 with 64 channels. The parallel net's result is checked against the simple
net's: bitwise against `simple` run with a branch's team (thread budget // 2 threads;
the kernels' blocking follows the team size), to 1e-5 against `simple` on the whole team.

Usage: python benchmarks/parallel_branches.py [--branches 2] [--runs 30] [--size 56]
       (CAFFE2PY_NUM_THREADS sets the thread budget: 2 workers x budget // 2 threads)
"""
import argparse
import datetime
import os
import statistics
import subprocess
import time

import numpy as np
from _timing import machine_label

from caffe2py import core
from caffe2py.devices import wait_for_compiled_kernels
from caffe2py.kernels.cpu.runtime.jit import team_limit
from caffe2py.parallel_executor import thread_budget
from caffe2py.workspace import Workspace

_KERNELS = (1, 3, 5, 3)


def inception(name, net_type, branches, workers=None):
    net = core.Net(name)
    net.Proto().type = net_type
    if workers:
        net.Proto().num_workers = workers
    outs = []
    for b in range(branches):
        k = _KERNELS[b % len(_KERNELS)]
        net.Conv(["x", "w%d" % b, "b%d" % b], "c%d" % b, kernel=k, pad=k // 2)
        net.Relu("c%d" % b, "r%d" % b)
        net.Conv(["r%d" % b, "v%d" % b, "bv%d" % b], "d%d" % b, kernel=3, pad=1)
        net.Relu("d%d" % b, "e%d" % b)
        outs.append("e%d" % b)
    net.Concat(outs, ["out", "split"], axis=1)
    return net


def feed(ws, branches, size, channels=64):
    rng = np.random.default_rng(0)
    ws.feed_blob("x", rng.standard_normal((1, channels, size, size)).astype(np.float32))
    for b in range(branches):
        k = _KERNELS[b % len(_KERNELS)]
        ws.feed_blob("w%d" % b, (rng.standard_normal((channels, channels, k, k)) * 0.05).astype(np.float32))
        ws.feed_blob("v%d" % b, (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32))
        ws.feed_blob("b%d" % b, rng.standard_normal(channels).astype(np.float32))
        ws.feed_blob("bv%d" % b, rng.standard_normal(channels).astype(np.float32))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--branches", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--size", type=int, default=56)
    args = parser.parse_args()
    ws = Workspace("bench")
    feed(ws, args.branches, args.size)
    simple = inception("simple", "simple", args.branches)
    parallel = inception("parallel", "async_scheduling", args.branches, workers=2)
    for net in (simple, parallel):
        ws.create_net(net)
    run_simple, run_parallel = ws.get_net(simple.Name()).run, ws.get_net(parallel.Name()).run
    for _ in range(3):                       # compile, decide, warm
        run_simple()
        run_parallel()
    wait_for_compiled_kernels()
    branches = ws.get_net(parallel.Name()).plan.branches
    assert branches is not None and branches.active, "the parallel path did not switch on"

    run_parallel()
    out_parallel = ws.fetch_blob("out").copy()
    with team_limit(max(1, thread_budget() // 2)):
        run_simple()
    same_team = np.array_equal(ws.fetch_blob("out"), out_parallel)
    run_simple()
    out_simple = ws.fetch_blob("out").copy()
    np.testing.assert_allclose(out_parallel, out_simple, rtol=1e-5, atol=1e-5)

    def run_simple_branch_team():
        with team_limit(max(1, thread_budget() // 2)):
            run_simple()

    # alternating run by run, so all three see the same load; the third column is
    # `simple` with a branch's team: what the worker threads add beyond the team size
    runners = (run_simple, run_parallel, run_simple_branch_team)
    times = tuple([] for _ in runners)
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for fn, out in zip(runners, times):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    load_after = os.getloadavg()
    ms_simple, ms_parallel, ms_small_team = (1e3 * statistics.median(t) for t in times)
    team = max(1, thread_budget() // 2)
    print("machine: %s; thread budget %d; %s UTC" % (machine_label(), thread_budget(),
                                                   datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")))
    print("load average before/after: %s / %s" % (" ".join("%.2f" % v for v in load_before),
                                                 " ".join("%.2f" % v for v in load_after)))
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("| branches | input | simple ms (team %d) | async_scheduling ms (2 workers x %d) | speed-up "
          "| simple ms (team %d) | bitwise = simple (team %d) | max abs diff to simple (team %d) |"
          % (thread_budget(), team, team, team, thread_budget()))
    print("|---|---|---|---|---|---|---|---|")
    print("| %d | 1x64x%dx%d | %.2f | %.2f | %.2fx | %.2f | %s | %.2g |"
          % (args.branches, args.size, args.size, ms_simple, ms_parallel, ms_simple / ms_parallel,
             ms_small_team, "yes" if same_team else "no", float(np.abs(out_parallel - out_simple).max())))
    print("parallel runs %d, chains on workers %d" % (branches.stats["parallel_runs"], branches.stats["worker_chains"]))


if __name__ == "__main__":
    main()
