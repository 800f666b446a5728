"""Embedding-bag lookups: caffe2py's SparseLengths* ops (each a one-op net) next to
torch's embedding_bag and fbgemm's quantized embedding_bag kernels
(torch.ops.quantized.embedding_bag_{byte,4bit,2bit}_rowwise_offsets), in the same
process, on the same arrays.

Problems (issue 18): tables 1,000,000 x 64 and 4,000,000 x 128, 1024 bags x 80
uniform random indices (skewed: 10% of the bags 10x longer, about the same total);
"hot" repeats the same indices every call, "cold" uses fresh indices every call and
writes 64 MB between calls (the rows come from DRAM). Each case runs `--rounds`
rounds; a round times `--calls` calls of ours, then of the peer (alternating, with a
rest between blocks so that neither library's idle threads spin into the other's
time); medians and ranges are over the rounds' medians, the ratio is the median of
the per-round ratios. GB/s counts table rows touched (indices x row bytes) and is
printed next to this machine's copy bandwidth (a NumPy copy of 512 MB, read + write,
measured in the same run). Every call of ours includes the index/length checks.

Usage: python benchmarks/embedding_bench.py [--threads 1 2] [--tables 1000000x64 4000000x128]
       [--rounds 5] [--calls 10] [--cases f32,fp16,...] [--temps hot,cold] [--clock wall|cpu]
       [--via net|kernel]
Small lookups (per-call latency): --bags 64 --length 10 --calls 200 --temps hot, once
--via net and once --via kernel.
torch is optional (benchmark-only): without it the peer columns say "absent".
The measurements behind the kernel's design (prefetch distance, split, tiles) are
benchmarks/embedding_design.py.
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

CASES = ("f32", "fp16", "weighted", "mean", "positional", "skewed", "fused8", "fused8_weighted", "fused4", "fused2")


def copy_bandwidth(clock=time.perf_counter):
    """GB/s of a NumPy copy of 512 MB (bytes read + written), best of 3."""
    a = np.ones(1 << 27, np.float32)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(3):
        t0 = clock()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / max(clock() - t0, 1e-9) / 1e9)
    return best


class OneOpNet:
    """A compiled one-op net in the problem's workspace. Workspace.feed_blob copies its
    input, so every array is fed once (by identity) and shared by the nets that use it:
    a 2 GB table is not copied per case."""

    def __init__(self, ws, op_type, inputs, name, idx_pos):
        from caffe2py import core
        self.ws = ws
        self.names = [ws.fed_name(value) for value in inputs]
        self.idx_name = self.names[idx_pos] = "indices_" + name      # its own: cold runs rewrite it
        ws.feed_blob(self.idx_name, inputs[idx_pos])
        net = core.Net("bench_" + name)
        net.Proto().op.extend([core.CreateOperator(op_type, self.names, ["out_" + name])])
        self.ws.create_net(net)
        self.net, self.out = net.Name(), "out_" + name

    def feed_indices(self, value):
        self.ws.feed_blob(self.idx_name, value)

    def run(self):
        self.ws.run_net(self.net)

    def output(self):
        return self.ws.fetch_blob(self.out)


class KernelCall:
    """The same lookup as OneOpNet through the kernel itself
    (kernels/cpu/recsys/sparse_lengths.segment_reduce, checks included): what an op
    costs without the net run and the operator wrapper around it."""

    def __init__(self, op_type, inputs, idx_pos):
        from caffe2py.kernels.cpu.recsys import sparse_lengths
        rest = op_type[len("SparseLengths"):]
        reduction = next(r for r in ("PositionalWeightedSum", "WeightedSum", "Mean", "Sum") if rest.startswith(r))
        fused = rest[len(reduction):]
        layout = "fused" + fused[len("Fused")] if fused else "float"
        self.inputs, self.idx_pos = list(inputs), idx_pos
        self.call = lambda data, *rest: sparse_lengths.segment_reduce(
            data, rest[-2], rest[-1], rest[0] if len(rest) == 3 else None,
            reduction == "PositionalWeightedSum", reduction == "Mean", layout)
        self.out = None

    def feed_indices(self, value):
        self.inputs[self.idx_pos] = value

    def run(self):
        self.out = self.call(*self.inputs)

    def output(self):
        return self.out


class SharedWorkspace:
    """A Workspace whose inputs are fed once per array (see OneOpNet)."""

    def __init__(self, name):
        from caffe2py.workspace import Workspace
        self.ws = Workspace(name)
        self.fed = {}

    def fed_name(self, value):
        key = id(value)
        if key not in self.fed:
            self.fed[key] = ("in%d" % len(self.fed), value)     # keeps value alive: ids stay unique
            self.ws.feed_blob(self.fed[key][0], value)
        return self.fed[key][0]

    def __getattr__(self, name):
        return getattr(self.ws, name)


def offsets_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


class Problem:
    """One table size: the tables (float32, float16, fused 8/4/2-bit) and index sets."""

    def __init__(self, rows, dim, bags, length, sets, seed=0):
        from caffe2py.workspace import Workspace
        rng = np.random.default_rng(seed)
        self.rows, self.dim = rows, dim
        self.table = rng.standard_normal((rows, dim), dtype=np.float32)
        self.half = self.table.astype(np.float16)
        ws = Workspace("emb_bench_quantise")
        self.fused = {}
        for bits, op in ((8, "FloatToFused8BitRowwiseQuantized"), (4, "FloatToFused4BitRowwiseQuantized"),
                         (2, "FloatToFused2BitRowwiseQuantized")):
            from caffe2py import core
            ws.feed_blob("x", self.table)
            ws.run_operator_once(core.CreateOperator(op, ["x"], ["q"]))
            self.fused[bits] = ws.fetch_blob("q")
        del ws
        self.lengths = np.full(bags, length, np.int32)
        long_bags = rng.random(bags) < 0.1
        short = max(1, int(round(length / 1.9)))
        self.skew_lengths = np.where(long_bags, 10 * short, short).astype(np.int32)
        n, n_skew = int(self.lengths.sum()), int(self.skew_lengths.sum())
        self.index_sets = [rng.integers(0, rows, n).astype(np.int64) for _ in range(sets)]
        self.skew_sets = [rng.integers(0, rows, n_skew).astype(np.int64) for _ in range(sets)]
        self.weights = rng.random(n, dtype=np.float32)
        self.skew_weights = rng.random(n_skew, dtype=np.float32)
        self.positions = rng.random(int(self.lengths.max()), dtype=np.float32)
        self.ws = SharedWorkspace("emb_bench_%dx%d" % (rows, dim))


def make_case(p, case):
    """(our op, our inputs given indices, index input position, peer given indices or
    None, row bytes, skewed)."""
    T = torch
    lengths, offs = p.lengths, offsets_of(p.lengths)
    skewed = case == "skewed"
    if skewed:
        lengths, offs = p.skew_lengths, offsets_of(p.skew_lengths)

    def bag(table, mode="sum", weights=None):
        if T is None:
            return None
        t_table, t_offs = T.from_numpy(table), T.from_numpy(offs)
        t_w = None if weights is None else T.from_numpy(weights)
        return lambda idx: (lambda i=T.from_numpy(idx): T.nn.functional.embedding_bag(
            i, t_table, t_offs, mode=mode, per_sample_weights=t_w))

    def fbgemm(bits, mode=0, weights=None):
        if T is None:
            return None
        fn = {8: "embedding_bag_byte_rowwise_offsets", 4: "embedding_bag_4bit_rowwise_offsets",
              2: "embedding_bag_2bit_rowwise_offsets"}[bits]
        op = getattr(T.ops.quantized, fn)
        t_q, t_offs = T.from_numpy(p.fused[bits]), T.from_numpy(offs)
        t_w = None if weights is None else T.from_numpy(weights)
        return lambda idx: (lambda i=T.from_numpy(idx): op(t_q, i, t_offs, False, mode, False, t_w, None, False))

    f32 = 4 * p.dim
    if case in ("f32", "skewed"):
        return "SparseLengthsSum", lambda idx: [p.table, idx, lengths], 1, bag(p.table), f32, skewed
    if case == "fp16":
        return "SparseLengthsSum", lambda idx: [p.half, idx, lengths], 1, bag(p.half), 2 * p.dim, False
    if case == "weighted":
        return ("SparseLengthsWeightedSum", lambda idx: [p.table, p.weights, idx, lengths], 2,
                bag(p.table, weights=p.weights), f32, False)
    if case == "mean":
        return "SparseLengthsMean", lambda idx: [p.table, idx, lengths], 1, bag(p.table, "mean"), f32, False
    if case == "positional":
        return ("SparseLengthsPositionalWeightedSum", lambda idx: [p.table, p.positions, idx, lengths], 2,
                None, f32, False)
    if case == "fused8":
        return ("SparseLengthsSumFused8BitRowwise", lambda idx: [p.fused[8], idx, lengths], 1, fbgemm(8),
                p.fused[8].shape[1], False)
    if case == "fused8_weighted":
        return ("SparseLengthsWeightedSumFused8BitRowwise", lambda idx: [p.fused[8], p.weights, idx, lengths], 2,
                fbgemm(8, weights=p.weights), p.fused[8].shape[1], False)
    bits = int(case[-1])
    return ("SparseLengthsSumFused%dBitRowwise" % bits, lambda idx: [p.fused[bits], idx, lengths], 1,
            fbgemm(bits), p.fused[bits].shape[1], False)


class Evictor:
    """Writes 64 MB: afterwards nothing of the table is left in the caches."""

    def __init__(self):
        self.buf = np.empty(1 << 24, np.float32)

    def __call__(self):
        self.buf.fill(1.0)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_block(fn, before, calls, clock=time.perf_counter):
    """Median seconds of `calls` calls of fn(), before() run (untimed) before each."""
    times = []
    for _ in range(calls):
        before()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def summary(values):
    return statistics.median(values), min(values), max(values)


def run_case(p, case, temp, args, evict):
    op, inputs, idx_pos, peer, row_bytes, skewed = make_case(p, case)
    sets = p.skew_sets if skewed else p.index_sets
    if args.via == "kernel":
        net = KernelCall(op, inputs(sets[0]), idx_pos)
    else:
        net = OneOpNet(p.ws, op, inputs(sets[0]), "%s_%s" % (case, temp), idx_pos)
    peers = [peer(s) for s in sets] if peer is not None else None
    state = {"i": 0}

    def next_set():           # cold: fresh indices (fed untimed) and a 64 MB write
        if temp == "cold":
            state["i"] = (state["i"] + 1) % len(sets)
            net.feed_indices(sets[state["i"]])
            evict()

    def peer_call():
        peers[state["i"]]()

    # warm up (and check the results agree)
    net.run()
    diff = None
    if peers is not None:
        for _ in range(2):
            peer_call()
        diff = float(np.abs(net.output() - peers[state["i"]]().float().numpy()).max())
    ours, theirs, ratios = [], [], []
    for _ in range(args.rounds):
        time.sleep(args.rest)
        net.run()
        ours.append(time_block(net.run, next_set, args.calls, CLOCKS[args.clock]))
        if peers is not None:
            time.sleep(args.rest)
            peer_call()
            theirs.append(time_block(peer_call, next_set, args.calls, CLOCKS[args.clock]))
            ratios.append(ours[-1] / theirs[-1])
    gb = sets[0].size * row_bytes / 1e9
    return ours, theirs, ratios, gb, diff


def one_thread_count(args):
    threads = args.threads[0]
    os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
    if torch is not None:
        torch.set_num_threads(threads)
    evict = Evictor()
    copy = copy_bandwidth(CLOCKS[args.clock])
    print("# %d thread(s); copy bandwidth %.1f GB/s (NumPy copy of 512 MB, read + write); %s clock; load %s"
          % (threads, copy, args.clock, " ".join("%.1f" % v for v in os.getloadavg())))
    cases = args.cases.split(",")
    temps = args.temps.split(",")
    for spec in args.tables:
        rows, dim = (int(v) for v in spec.lower().split("x"))
        p = Problem(rows, dim, args.bags, args.length, sets=8)
        print("\n## table %d x %d, %d bags x %d, %d thread(s), %d rounds x %d calls, via %s"
              % (rows, dim, args.bags, args.length, threads, args.rounds, args.calls, args.via))
        print("| case | temp | ours ms median [range] | peer ms median [range] | ratio median [range] "
              "| ours GB/s | peer GB/s | copy GB/s | max abs diff |")
        print("|---|---|---|---|---|---|---|---|---|")
        for case in cases:
            for temp in temps:
                ours, theirs, ratios, gb, diff = run_case(p, case, temp, args, evict)
                om, olo, ohi = summary(ours)
                row = "| %s | %s | %.3f [%.2f-%.2f] | " % (case, temp, 1e3 * om, 1e3 * olo, 1e3 * ohi)
                if theirs:
                    tm, tlo, thi = summary(theirs)
                    rm, rlo, rhi = summary(ratios)
                    row += "%.3f [%.2f-%.2f] | %.2f [%.2f-%.2f] | %.1f | %.1f | %.1f | %.1e |" % (
                        1e3 * tm, 1e3 * tlo, 1e3 * thi, rm, rlo, rhi, gb / om, gb / tm, copy, diff)
                else:
                    row += "none | | %.1f | | %.1f | |" % (gb / om, copy)
                print(row, flush=True)
        del p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tables", nargs="+", default=["1000000x64", "4000000x128"])
    ap.add_argument("--bags", type=int, default=1024)
    ap.add_argument("--length", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rest", type=float, default=0.2, help="seconds of rest before each timed block")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--temps", default="hot,cold")
    ap.add_argument("--via", choices=("net", "kernel"), default="net",
                    help="net: each call runs a prepared one-op net (RunNet); kernel: each call is "
                         "sparse_lengths.segment_reduce itself (no operator wrapper, no net run)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="cpu: process CPU time per call (all threads), for a machine so loaded that "
                         "wall time is mostly waiting for a core; spinning idle threads count too")
    args = ap.parse_args()
    if torch is None:
        print("# torch is absent (pip install torch for the peer columns)")
    if len(args.threads) == 1:
        one_thread_count(args)
        return
    for threads in args.threads:       # one process per thread count (the team size is fixed per process)
        cmd = [sys.executable, os.path.abspath(__file__)] + [
            a for a in sys.argv[1:]] + ["--threads", str(threads)]
        # the last --threads wins in argparse
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
