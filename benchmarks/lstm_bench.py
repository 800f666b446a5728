"""LSTMUnit and LSTMUnitGradient: caffe2py's ops (one-op nets) next to the same math
composed of torch ops (chunk, sigmoid, tanh, mul/add, where), same process, same data.

Default (issue 18): N=256, D=1024, 140 of 256 rows past their sequence length,
forget_bias 1. Each round times `--calls` calls of ours, then of torch (a rest before
each block so neither library's idle threads spin into the other's time); medians and
ranges over the rounds, ratio = median of the per-round ratios (ours / torch).
torch is optional (benchmark-only): without it the torch column says "absent".

Usage: python benchmarks/lstm_bench.py [--n 256] [--d 1024] [--threads 1 2] [--rounds 7] [--calls 20]
       [--clock wall|cpu]   (cpu: process CPU time, for a VM loaded past its cores)
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

# time machine code, never the NumPy twins a first call may answer with in background mode
os.environ.setdefault("CAFFE2PY_JIT", "inline")

import numpy as np

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


def torch_forward(h_prev, c_prev, gates, seq, t, forget_bias):
    i, f, o, g = gates.chunk(4, dim=-1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f + forget_bias), torch.sigmoid(o), torch.tanh(g)
    c = f * c_prev + i * g
    h = o * torch.tanh(c)
    valid = (t < seq).view(1, -1, 1)
    return torch.where(valid, h, h_prev), torch.where(valid, c, c_prev)


def torch_gradient(c_prev, gates, c, dc, dh, seq, t, forget_bias):
    i, f, o, g = gates.chunk(4, dim=-1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f + forget_bias), torch.sigmoid(o), torch.tanh(g)
    tc = torch.tanh(c)
    dct = dc + dh * o * (1 - tc * tc)
    valid = (t < seq).view(1, -1, 1)
    dgates = torch.cat([dct * g * i * (1 - i), dct * c_prev * f * (1 - f), dh * tc * o * (1 - o),
                        dct * i * (1 - g * g)], dim=-1)
    zero = torch.zeros((), dtype=dgates.dtype)
    return (torch.where(valid, zero, dh), torch.where(valid, dct * f, dc), torch.where(valid, dgates, zero))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = [time.perf_counter]          # --clock cpu: process CPU time (a VM loaded past its cores)


def time_block(fn, calls):
    times = []
    for _ in range(calls):
        t0 = CLOCK[0]()
        fn()
        times.append(CLOCK[0]() - t0)
    return statistics.median(times)


def alternate(ours, theirs, rounds, calls, rest=0.2):
    o, p, r = [], [], []
    for _ in range(rounds):
        time.sleep(rest)
        ours()
        o.append(time_block(ours, calls))
        if theirs is not None:
            time.sleep(rest)
            theirs()
            p.append(time_block(theirs, calls))
            r.append(o[-1] / p[-1])
    return o, p, r


def cell(values, scale=1e3):
    return "%.3f [%.2f-%.2f]" % (scale * statistics.median(values), scale * min(values), scale * max(values))


def one_thread_count(a):
    from caffe2py import core
    from caffe2py.workspace import Workspace
    threads = a.threads[0]
    os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    c = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    gates = rng.standard_normal((1, a.n, 4 * a.d), dtype=np.float32)
    seq = np.where(np.arange(a.n) < a.n - a.n * 140 // 256, 10, 3).astype(np.int32)
    t = np.array([5], np.int32)   # rows with seq 3 are past their length
    ws = Workspace("lstm_bench")
    for name, value in (("h", h), ("c", c), ("g", gates), ("seq", seq), ("t", t)):
        ws.feed_blob(name, value)
    fwd = core.Net("lstm_fwd")
    fwd.Proto().op.extend([core.CreateOperator("LSTMUnit", ["h", "c", "g", "seq", "t"], ["H", "C"], forget_bias=1.0)])
    ws.create_net(fwd)
    ws.run_net(fwd.Name())
    dh = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    dc = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    ws.feed_blob("dH", dh)
    ws.feed_blob("dC", dc)
    bwd = core.Net("lstm_bwd")
    bwd.Proto().op.extend([core.CreateOperator(
        "LSTMUnitGradient", ["h", "c", "g", "seq", "t", "H", "C", "dH", "dC"], ["dh_prev", "dc_prev", "dgates"],
        forget_bias=1.0)])
    ws.create_net(bwd)
    ws.run_net(bwd.Name())
    print("# LSTMUnit N=%d D=%d, %d thread(s), %d rounds x %d calls; ms median [range]"
          % (a.n, a.d, threads, a.rounds, a.calls))
    print("| case | ours ms | torch ms | ratio | max abs diff |")
    print("|---|---|---|---|---|")
    if torch is None:
        print("# torch is absent (pip install torch for the peer column)")
    else:
        torch.set_num_threads(threads)
        T = [torch.from_numpy(x) for x in (h, c, gates, seq, dh, dc)]
        th, tc = torch_forward(T[0], T[1], T[2], T[3], int(t[0]), 1.0)
        TH = torch.from_numpy(ws.fetch_blob("C"))
        grads = torch_gradient(T[1], T[2], TH, T[5], T[4], T[3], int(t[0]), 1.0)
    for name, net, peer in (("forward", fwd, None if torch is None else
                             (lambda: torch_forward(T[0], T[1], T[2], T[3], 5, 1.0))),
                            ("gradient", bwd, None if torch is None else
                             (lambda: torch_gradient(T[1], T[2], TH, T[5], T[4], T[3], 5, 1.0)))):
        o, p, r = alternate(lambda net=net: ws.run_net(net.Name()), peer, a.rounds, a.calls)
        if peer is None:
            print("| LSTMUnit %s | %s | absent | | |" % (name, cell(o)))
            continue
        if name == "forward":
            diff = max(float(np.abs(ws.fetch_blob("H") - th.numpy()).max()),
                       float(np.abs(ws.fetch_blob("C") - tc.numpy()).max()))
        else:
            diff = max(float(np.abs(ws.fetch_blob(b) - g.numpy()).max())
                       for b, g in zip(("dh_prev", "dc_prev", "dgates"), grads))
        print("| LSTMUnit %s | %s | %s | %s | %.1e |" % (name, cell(o), cell(p), cell(r, 1), diff), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    CLOCK[0] = CLOCKS[a.clock]
    if len(a.threads) == 1:
        one_thread_count(a)
        return
    for threads in a.threads:      # one process per thread count (the team size is fixed per process)
        subprocess.run([sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--threads", str(threads)],
                       check=True)


if __name__ == "__main__":
    main()
