"""Fused rowwise conversions: caffe2py's ops (one-op nets) next to fbgemm's prepack /
unpack (torch.ops.quantized.embedding_bag_{byte,4bit,2bit}_{prepack,unpack}) and
torch's float16 casts, in the same process, on the same 1,000,000 x 64 table.

Each round times `--calls` calls of ours, then of the peer (a rest before each block);
medians and ranges over the rounds, ratio = median of the per-round ratios. GB/s
counts bytes read + written, next to this machine's copy bandwidth (a NumPy copy of
512 MB, read + written, same run): a conversion at memory speed reaches about that.
fbgemm's 4/2-bit prepack rounds the float16 scale and bias as Caffe2 does; its results
are compared byte for byte (the "same bytes" column).

Usage: python benchmarks/conversion_bench.py [--rows 1000000] [--dim 64] [--threads 1 2]
       [--rounds 5] [--calls 5] [--clock wall|cpu]
torch is optional (benchmark-only): without it the peer columns say "absent".
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


def copy_bandwidth():
    a = np.ones(1 << 27, np.float32)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(3):
        t0 = CLOCK[0]()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / max(CLOCK[0]() - t0, 1e-9) / 1e9)
    return best


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = [time.perf_counter]          # --clock cpu: process CPU time (a VM loaded past its cores)


def time_block(fn, calls):
    times = []
    for _ in range(calls):
        t0 = CLOCK[0]()
        fn()
        times.append(CLOCK[0]() - t0)
    return statistics.median(times)


def cell(values, scale=1e3):
    return "%.2f [%.2f-%.2f]" % (scale * statistics.median(values), scale * min(values), scale * max(values))


def one_thread_count(a):
    from caffe2py import core
    from caffe2py.workspace import Workspace
    threads = a.threads[0]
    os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
    if torch is not None:
        torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.rows, a.dim), dtype=np.float32)
    ws = Workspace("conversion_bench")
    ws.feed_blob("x", x)
    ws.feed_blob("h", x.astype(np.float16))
    nets = {}

    def net(op, src):
        n = core.Net("conv_" + op)
        n.Proto().op.extend([core.CreateOperator(op, [src], [op + "_out"])])
        ws.create_net(n)
        ws.run_net(n.Name())
        nets[op] = n.Name()
        return lambda: ws.run_net(n.Name())

    quantised = {}
    for op in ("FloatToFused8BitRowwiseQuantized", "FloatToFused4BitRowwiseQuantized",
               "FloatToFused2BitRowwiseQuantized"):
        net(op, "x")
        quantised[op] = ws.fetch_blob(op + "_out")
        ws.feed_blob(op + "_q", quantised[op])
    T = torch
    tx = None if T is None else T.from_numpy(x)
    q = {bits: None if T is None else T.from_numpy(quantised["FloatTo%sRowwiseQuantized" % name])
         for bits, name in ((8, "Fused8Bit"), (4, "Fused4Bit"), (2, "Fused2Bit"))}
    n, d = a.rows, a.dim
    cases = [  # name, ours, peer, bytes moved, our output blob, peer output for the byte comparison
        ("float -> fused 8-bit", net("FloatToFused8BitRowwiseQuantized", "x"),
         None if T is None else (lambda: T.ops.quantized.embedding_bag_byte_prepack(tx)), n * d * 4 + n * (d + 8),
         "FloatToFused8BitRowwiseQuantized_out"),
        ("float -> fused 4-bit", net("FloatToFused4BitRowwiseQuantized", "x"),
         None if T is None else (lambda: T.ops.quantized.embedding_bag_4bit_prepack(tx)),
         n * d * 4 + n * (d // 2 + 4), "FloatToFused4BitRowwiseQuantized_out"),
        ("float -> fused 2-bit", net("FloatToFused2BitRowwiseQuantized", "x"),
         None if T is None else (lambda: T.ops.quantized.embedding_bag_2bit_prepack(tx)),
         n * d * 4 + n * (d // 4 + 4), "FloatToFused2BitRowwiseQuantized_out"),
        ("fused 8-bit -> float", net("Fused8BitRowwiseQuantizedToFloat", "FloatToFused8BitRowwiseQuantized_q"),
         None if T is None else (lambda: T.ops.quantized.embedding_bag_byte_unpack(q[8])), n * (d + 8) + n * d * 4,
         "Fused8BitRowwiseQuantizedToFloat_out"),
        ("fused 4-bit -> float", net("Fused4BitRowwiseQuantizedToFloat", "FloatToFused4BitRowwiseQuantized_q"),
         None if T is None else (lambda: T.ops.quantized.embedding_bag_4bit_unpack(q[4])),
         n * (d // 2 + 4) + n * d * 4, "Fused4BitRowwiseQuantizedToFloat_out"),
        ("float -> half", net("FloatToHalf", "x"), None if T is None else (lambda: tx.half()), n * d * 6,
         "FloatToHalf_out"),
    ]
    copy = copy_bandwidth()
    print("# conversions, table %d x %d, %d thread(s), %d rounds x %d calls; copy bandwidth %.1f GB/s"
          % (n, d, threads, a.rounds, a.calls, copy))
    if T is None:
        print("# torch is absent (pip install torch for the peer columns)")
    print("| conversion | ours ms | peer ms | ratio | ours GB/s | peer GB/s | same bytes |")
    print("|---|---|---|---|---|---|---|")
    for name, ours, peer, moved, out_blob in cases:
        o, p, r = [], [], []
        for _ in range(a.rounds):
            time.sleep(0.2)
            ours()
            o.append(time_block(ours, a.calls))
            if peer is not None:
                time.sleep(0.2)
                peer()
                p.append(time_block(peer, a.calls))
                r.append(o[-1] / p[-1])
        same = ""
        if peer is not None:
            mine, theirs = ws.fetch_blob(out_blob), peer().numpy()
            same = "yes" if mine.shape == theirs.shape and np.array_equal(mine.view(np.uint8), theirs.view(np.uint8)) \
                else "max diff %.1e" % float(np.abs(mine.astype(np.float64) - theirs.astype(np.float64)).max()) \
                if mine.shape == theirs.shape else "shapes differ"
        gb = moved / 1e9
        print("| %s | %s | %s | %s | %.1f | %s | %s |" % (
            name, cell(o), cell(p) if p else "absent", cell(r, 1) if r else "", gb / statistics.median(o),
            "%.1f" % (gb / statistics.median(p)) if p else "", same), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()
    CLOCK[0] = CLOCKS[a.clock]
    if len(a.threads) == 1:
        one_thread_count(a)
        return
    for threads in a.threads:      # one process per thread count (the team size is fixed per process)
        subprocess.run([sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--threads", str(threads)],
                       check=True)


if __name__ == "__main__":
    main()
