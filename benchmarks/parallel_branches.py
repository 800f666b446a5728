"""Branch parallelism (issue 38): Inception-style nets, `simple` against
`async_scheduling` with 2 workers, in one process, runs alternating (the order
rotating every round); medians.

Runs alternate in blocks of 3, the first of each block untimed (see measure).

Nets (--net):
  big    2 or 4 branches on 1x64x56x56, each Conv kxk (k = 1, 3, 5, 3) -> Relu ->
         Conv 3x3 -> Relu with 64 channels, then Concat (early Inception: each conv
         keeps the team of 2 busy on its own);
  small  a late-Inception block at batch 1 (default 1x64x14x14): branch A Conv 1x1
         -> Relu -> Conv 3x3 -> Relu, branch B Conv 1x1 -> Relu -> Conv 3x3 -> Relu ->
         Conv 3x3 -> Relu, 32 channels per conv, then Concat: many small ops, each too
         small for a team of 2 to split well.
  3a     GoogLeNet's inception 3a at batch 1: input 1x192x28x28; branches 1x1 -> 64;
         1x1 -> 96 -> 3x3 -> 128; 1x1 -> 16 -> 5x5 -> 32; MaxPool 3x3/1 -> 1x1 -> 32;
         a Relu after every conv; Concat (256 channels): four branches of unequal
         work (the 3x3 branch has ~3/4 of the block's multiply-adds).
Columns: `simple` on the whole team; `async_scheduling` as the executor decides it (the
work estimate, then the timed trial of parallel_executor.py: workers, or serial
again); the same net with workers forced (no trial); `simple` on a team of 1. The
team-of-2 speed-up is simple(team 1) / simple(team 2), the workers' is
simple(team 1) / forced workers. Results are checked: the decided and forced nets'
outputs against `simple`'s (to 1e-4: the GEMMs' blocking follows the team size; the
forced net bitwise against `simple` on a branch's team).

--sweep prints one row per op size (channels x spatial size of the small net), so
the regime where workers pay shows.

--contention measures what two branches cost each other inside one process, without
the executor: a conv (Conv + ReLU, caffe2py's conv kernel on a team of 1) called in a
loop on one Python thread, then on two Python threads at once, each thread's
per-call wall time and CPU time (median over rounds). Wall above CPU time on two
threads is time spent waiting (for the GIL: every op's Python part holds it, and
each compiled kernel releases and re-takes it). Two processes at once show what the
cores alone allow (no shared interpreter).

Usage: python benchmarks/parallel_branches.py [--net small|big|3a] [--branches 2] [--runs 30]
       [--size N] [--channels C] [--sweep]
       python benchmarks/parallel_branches.py --contention
       (CAFFE2PY_NUM_THREADS sets the thread budget: 2 workers x budget // 2 threads)
The last line is `ratio simple/async_scheduling: X.XXx` (above 1: the async net is faster).
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
BLOCK = 3          # runs per turn of one runner, the first untimed (measure)


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


def inception_small(name, net_type, workers=None, width=32):
    """Late Inception at batch 1: two branches of small convs (3 and 4 ops deep)."""
    net = core.Net(name)
    net.Proto().type = net_type
    if workers:
        net.Proto().num_workers = workers
    outs = []
    for b, kernels in enumerate(((1, 3), (1, 3, 3))):
        prev = "x"
        for d, k in enumerate(kernels):
            tag = "%d_%d" % (b, d)
            net.Conv([prev, "sw" + tag, "sb" + tag], "sc" + tag, kernel=k, pad=k // 2)
            net.Relu("sc" + tag, "sr" + tag)
            prev = "sr" + tag
        outs.append(prev)
    net.Concat(outs, ["out", "split"], axis=1)
    return net


def feed_small(ws, size, channels, width=32):
    rng = np.random.default_rng(0)
    ws.feed_blob("x", rng.standard_normal((1, channels, size, size)).astype(np.float32))
    for b, kernels in enumerate(((1, 3), (1, 3, 3))):
        c_in = channels
        for d, k in enumerate(kernels):
            tag = "%d_%d" % (b, d)
            ws.feed_blob("sw" + tag, (rng.standard_normal((width, c_in, k, k)) * 0.1).astype(np.float32))
            ws.feed_blob("sb" + tag, rng.standard_normal(width).astype(np.float32))
            c_in = width


# GoogLeNet inception 3a: per branch, (kernel, output channels) of each conv; "pool"
# is a 3x3 stride-1 MaxPool before the branch's convs
_3A = ((((1, 64),), False), (((1, 96), (3, 128)), False), (((1, 16), (5, 32)), False), (((1, 32),), True))


def inception_3a(name, net_type, workers=None):
    net = core.Net(name)
    net.Proto().type = net_type
    if workers:
        net.Proto().num_workers = workers
    outs = []
    for b, (convs, pool) in enumerate(_3A):
        prev = "x"
        if pool:
            net.MaxPool(prev, "p%d" % b, kernel=3, stride=1, pad=1)
            prev = "p%d" % b
        for d, (k, _) in enumerate(convs):
            tag = "%d_%d" % (b, d)
            net.Conv([prev, "aw" + tag, "ab" + tag], "ac" + tag, kernel=k, pad=k // 2)
            net.Relu("ac" + tag, "ar" + tag)
            prev = "ar" + tag
        outs.append(prev)
    net.Concat(outs, ["out", "split"], axis=1)
    return net


def feed_3a(ws, size=28, channels=192):
    rng = np.random.default_rng(0)
    ws.feed_blob("x", rng.standard_normal((1, channels, size, size)).astype(np.float32))
    for b, (convs, _) in enumerate(_3A):
        c_in = channels
        for d, (k, c_out) in enumerate(convs):
            tag = "%d_%d" % (b, d)
            scale = (2.0 / (c_in * k * k)) ** 0.5
            ws.feed_blob("aw" + tag, (rng.standard_normal((c_out, c_in, k, k)) * scale).astype(np.float32))
            ws.feed_blob("ab" + tag, (rng.standard_normal(c_out) * 0.1).astype(np.float32))
            c_in = c_out


def measure(ws, build, runs, tag):
    """Times (ms medians) of simple, async as decided, async with forced workers and
    simple on a team of 1, alternating run by run; plus the decided net's schedule and
    the outputs' check."""
    from caffe2py import net_dag, parallel_executor
    simple = build("simple_" + tag, "simple", None)
    decided = build("async_" + tag, "async_scheduling", 2)
    forced = build("forced_" + tag, "async_scheduling", 2)
    ws.create_net(simple)
    ws.create_net(decided)
    saved = parallel_executor.TRIAL_RUNS, net_dag.MIN_OVERLAP_WORK
    parallel_executor.TRIAL_RUNS, net_dag.MIN_OVERLAP_WORK = 0, 0.0
    try:
        ws.create_net(forced)
        ws.get_net(forced.Name()).run()      # decided (parallel) by now at the latest
    finally:
        parallel_executor.TRIAL_RUNS, net_dag.MIN_OVERLAP_WORK = saved
    run_simple, run_decided, run_forced = (ws.get_net(n.Name()).run for n in (simple, decided, forced))
    for _ in range(3):
        run_simple()
        run_forced()
    wait_for_compiled_kernels()
    for _ in range(2 + len(parallel_executor._trial_steps(parallel_executor.TRIAL_RUNS)) + 2):
        # the decided net's first run and trial, then 2 more
        run_decided()
    schedule = ws.get_net(decided.Name()).plan.branches
    forced_schedule = ws.get_net(forced.Name()).plan.branches
    assert forced_schedule is not None and forced_schedule.active, "the forced net did not go parallel"

    run_simple()
    out_simple = ws.fetch_blob("out").copy()
    with team_limit(max(1, thread_budget() // 2)):
        run_simple()
    out_team = ws.fetch_blob("out").copy()
    run_forced()
    out_forced = ws.fetch_blob("out").copy()
    run_decided()
    out_decided = ws.fetch_blob("out").copy()
    for out in (out_forced, out_decided):
        np.testing.assert_allclose(out, out_simple, rtol=1e-4, atol=1e-4)   # GEMM blocking follows the team

    def run_simple_team_1():
        with team_limit(1):
            run_simple()

    runners = (run_simple, run_decided, run_forced, run_simple_team_1)
    times = tuple([] for _ in runners)
    # round r starts with runner r % 4: each runner follows each other one equally
    # often. Each turn is a block of BLOCK runs of which the first is untimed: it pays
    # for the run before it, of another kind (a team of 2 keeps spinning ~4 ms after
    # its last region, on the core a worker or the next team needs)
    for r in range(runs):
        for k in range(len(runners)):
            i = (r + k) % len(runners)
            runners[i]()
            for _ in range(BLOCK - 1):
                t0 = time.perf_counter()
                runners[i]()
                times[i].append(time.perf_counter() - t0)
    ms = [1e3 * statistics.median(t) for t in times]
    return {"simple": ms[0], "decided": ms[1], "forced": ms[2], "team1": ms[3],
            "workers": bool(schedule is not None and schedule.active),
            "trial": schedule.measured if schedule is not None else None,
            "bitwise_team": bool(np.array_equal(out_forced, out_team)),
            "diff": float(np.abs(out_forced - out_simple).max())}


def _header(budget, team):
    print("| net | input | simple ms (team %d) | async_scheduling ms (decided) | workers kept? (trial: serial / "
          "parallel ms) | forced 2 workers x %d ms | simple ms (team 1) | team-of-%d speed-up | 2-worker "
          "speed-up | simple / async |" % (budget, team, budget))
    print("|---|---|---|---|---|---|---|---|---|---|")


def _row(label, shape, r):
    trial = r["trial"]
    kept = ("yes" if r["workers"] else "no") + (" (%.2f / %.2f)" % (trial["serial_ms"], trial["parallel_ms"])
                                                 if trial else "")
    print("| %s | %s | %.2f | %.2f | %s | %.2f | %.2f | %.2fx | %.2fx | %.2fx |"
          % (label, shape, r["simple"], r["decided"], kept, r["forced"], r["team1"], r["team1"] / r["simple"],
             r["team1"] / r["forced"], r["simple"] / r["decided"]), flush=True)


# --contention: (label, input shape, filter shape, pads) of the convs called side by side
_CONTENTION = (("1x1 64 -> 32 at 14x14", (1, 64, 14, 14), (32, 64, 1, 1), (0, 0, 0, 0)),
               ("3x3 32 -> 32 at 14x14", (1, 32, 14, 14), (32, 32, 3, 3), (1, 1, 1, 1)),
               ("3x3 64 -> 64 at 28x28", (1, 64, 28, 28), (64, 64, 3, 3), (1, 1, 1, 1)),
               ("3x3 64 -> 64 at 56x56", (1, 64, 56, 56), (64, 64, 3, 3), (1, 1, 1, 1)))


def _conv_loop(x_shape, w_shape, pads, calls, results):
    """Call one conv `calls` times on this thread (team of 1); append (wall ms, CPU ms)
    per call to results."""
    from caffe2py.kernels.cpu.cnn.conv import conv_nchw
    from caffe2py.kernels.cpu.runtime.jit import team
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = np.zeros(w_shape[0], np.float32)
    with team(), team_limit(1):
        conv_nchw(x, w, b, (1, 1), pads, (1, 1), 1, activation="relu")
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            conv_nchw(x, w, b, (1, 1), pads, (1, 1), 1, activation="relu")
        results.append(((time.perf_counter() - t0) * 1e3 / calls, (time.thread_time() - c0) * 1e3 / calls))


def _loop_in_process(x_shape, w_shape, pads, calls, queue):
    results = []
    _conv_loop(x_shape, w_shape, pads, calls, results)
    queue.put(results[0])


def contention(rounds):
    """Rows of --contention (see the module docstring)."""
    import multiprocessing
    import threading
    print("| conv (Conv + ReLU, team of 1 per thread) | alone: wall / CPU ms per call | two threads: "
          "wall / CPU ms | two threads' slow-down (wall) | two processes: wall ms | two processes' slow-down |")
    print("|---|---|---|---|---|---|")
    spawn = multiprocessing.get_context("spawn")
    for label, x_shape, w_shape, pads in _CONTENTION:
        macs = np.prod(w_shape) * x_shape[2] * x_shape[3]
        calls = max(10, int(3e8 / macs))            # ~0.1 s of work per thread and round
        _conv_loop(x_shape, w_shape, pads, 3, [])   # compiled before timing
        wait_for_compiled_kernels()
        alone, both, procs = [], [], []
        for _ in range(rounds):
            _conv_loop(x_shape, w_shape, pads, calls, alone)
            results = []
            threads = [threading.Thread(target=_conv_loop, args=(x_shape, w_shape, pads, calls, results))
                       for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            both.extend(results)
        queue = spawn.Queue()
        workers = [spawn.Process(target=_loop_in_process, args=(x_shape, w_shape, pads, calls * rounds, queue))
                   for _ in range(2)]
        for proc in workers:
            proc.start()
        procs = [queue.get() for _ in workers]
        for proc in workers:
            proc.join()
        a_wall, a_cpu = (statistics.median(v[i] for v in alone) for i in (0, 1))
        b_wall, b_cpu = (statistics.median(v[i] for v in both) for i in (0, 1))
        p_wall = statistics.median(v[0] for v in procs)
        print("| %s | %.3f / %.3f | %.3f / %.3f | %.2fx | %.3f | %.2fx |"
              % (label, a_wall, a_cpu, b_wall, b_cpu, b_wall / a_wall, p_wall, p_wall / a_wall), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--net", choices=("small", "big", "3a"), default="small")
    parser.add_argument("--branches", type=int, default=2, help="big net only")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--size", type=int, default=None, help="spatial size (small: 14, big: 56)")
    parser.add_argument("--channels", type=int, default=64, help="small net's input channels")
    parser.add_argument("--sweep", action="store_true", help="small net over op sizes")
    parser.add_argument("--contention", action="store_true",
                        help="two branches' ops side by side in one process, without the executor")
    args = parser.parse_args()
    budget, team = thread_budget(), max(1, thread_budget() // 2)
    load_before = os.getloadavg()
    print("machine: %s; thread budget %d; %s UTC" % (machine_label(), budget,
                                                   datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")))
    if args.contention:
        contention(max(3, args.runs // 10))
        return
    _header(budget, team)
    if args.sweep:
        cases = [(16, 7), (32, 7), (64, 7), (32, 14), (64, 14), (128, 14), (64, 28), (128, 28)]
    elif args.net == "small":
        cases = [(args.channels, args.size or 14)]
    elif args.net == "3a":
        cases = [(192, args.size or 28)]
    else:
        cases = [(64, args.size or 56)]
    result = None
    for channels, size in cases:
        ws = Workspace("bench_%d_%d" % (channels, size))
        tag = "%s_%d_%d" % (args.net if not args.sweep else "small", channels, size)
        if args.net == "3a" and not args.sweep:
            feed_3a(ws, size)
            result = measure(ws, inception_3a, args.runs, tag)
            _row("inception 3a (4 branches, 6 convs, pool)", "1x192x%dx%d" % (size, size), result)
        elif args.net == "big" and not args.sweep:
            feed(ws, args.branches, size)
            result = measure(ws, lambda n, t, w: inception(n, t, args.branches, w), args.runs, tag)
            _row("big, %d branches" % args.branches, "1x64x%dx%d" % (size, size), result)
        else:
            feed_small(ws, size, channels)
            result = measure(ws, inception_small, args.runs, tag)
            _row("small (2 branches, 5 convs)", "1x%dx%dx%d" % (channels, size, size), result)
    load_after = os.getloadavg()
    print("load average before/after: %s / %s" % (" ".join("%.2f" % v for v in load_before),
                                                 " ".join("%.2f" % v for v in load_after)))
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("forced workers' output bitwise = simple on a team of %d: %s; max abs diff to simple: %.2g"
          % (team, "yes" if result["bitwise_team"] else "no", result["diff"]))
    print("ratio simple/async_scheduling: %.2fx" % (result["simple"] / result["decided"]))


if __name__ == "__main__":
    main()
