"""The measurements behind the lookup kernel's design choices (docs/perfkernels.md),
each an in-process comparison in alternating rounds (medians and ranges of the rounds'
medians), on caffe2py's kernel alone (kernels/cpu/recsys/sparse_lengths.py):

  prefetch   prefetch distance 0 (off) .. 32 rows, f32 and fused 8-bit, hot and cold
  split      index positions split by work (the kernel) vs by bag count, modelled as
             the slower of the two halves of the bags run alone on one thread, on
             lengths whose long bags are all in the first half
  tiles      column tile width (lanes in registers) for rows of 64 and 128 values
  checks     the index check alone vs the whole lookup

Problem: table 1,000,000 x 64 (4,000,000 x 128 for the 128-wide tiles), 1024 bags x 80
random indices. "cold": fresh indices each call and a 64 MB write between calls.
Usage: python benchmarks/embedding_design.py [--what prefetch,split,tiles,checks]
       [--threads 2] [--rounds 7] [--calls 10] [--clock wall|cpu]
"""
import argparse
import os
import statistics
import time

# time machine code, never the NumPy twins a first call may answer with in background mode
os.environ.setdefault("CAFFE2PY_JIT", "inline")

import numpy as np


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = [time.perf_counter]          # --clock cpu: process CPU time (a VM loaded past its cores)


def summary(values):
    return "%.3f [%.2f-%.2f]" % (1e3 * statistics.median(values), 1e3 * min(values), 1e3 * max(values))


class Calls:
    """Timed calls of one lookup; cold calls get fresh indices and a 64 MB write first."""

    def __init__(self, fn, index_sets, cold):
        self.fn, self.sets, self.cold, self.i = fn, index_sets, cold, 0
        self.evict = np.empty(1 << 24, np.float32) if cold else None

    def block(self, calls):
        times = []
        for _ in range(calls):
            if self.cold:
                self.i = (self.i + 1) % len(self.sets)
                self.evict.fill(1.0)
            idx = self.sets[self.i]
            t0 = CLOCK[0]()
            self.fn(idx)
            times.append(CLOCK[0]() - t0)
        return statistics.median(times)


def alternate(variants, rounds, calls):
    """variants: {name: (setup, Calls)}; setup() runs before each block (untimed)."""
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (setup, runner) in variants.items():
            setup()
            runner.block(1)
            times[name].append(runner.block(calls))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="prefetch,split,tiles,checks")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="cpu: process CPU time; the split's whole lookup is then shown per thread "
                         "(CPU / threads: its parts are equal by construction)")
    a = ap.parse_args()
    CLOCK[0] = CLOCKS[a.clock]
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    from caffe2py.kernels.cpu.recsys import fused_rowwise as F
    from caffe2py.kernels.cpu.recsys import lookup_loops as loops
    from caffe2py.kernels.cpu.recsys import sparse_lengths as K
    from caffe2py.kernels.cpu.runtime.jit import team
    rng = np.random.default_rng(0)
    table = rng.standard_normal((1_000_000, 64), dtype=np.float32)
    q8 = F.float_to_fused8(table)
    lengths = np.full(1024, 80, np.int32)
    sets = [rng.integers(0, 1_000_000, 81920).astype(np.int64) for _ in range(8)]
    what = a.what.split(",")
    print("# %d thread(s), %d rounds x %d calls, ms median [range], %s clock, load %s"
          % (a.threads, a.rounds, a.calls, a.clock, " ".join("%.1f" % v for v in os.getloadavg())))

    if "prefetch" in what:
        distances = (0, 2, 4, 8, 16, 32)
        print("\n| prefetch distance | " + " | ".join(str(d) for d in distances) + " |")
        print("|---|" + "---|" * len(distances))
        for name, data, layout in (("f32", table, "float"), ("fused8", q8, "fused8")):
            for cold in (False, True):
                runner = Calls(lambda idx, data=data, layout=layout: K.segment_reduce(data, idx, lengths,
                                                                                        layout=layout), sets, cold)
                variants = {d: ((lambda d=d: (setattr(K, "PREFETCH_DISTANCE", d),
                                              setattr(K, "PREFETCH_DISTANCE_SHORT_ROWS", d))), runner)
                            for d in distances}
                times = alternate(variants, a.rounds, a.calls)
                print("| %s %s | %s |" % (name, "cold" if cold else "hot",
                                          " | ".join(summary(times[d]) for d in distances)), flush=True)
        K.PREFETCH_DISTANCE, K.PREFETCH_DISTANCE_SHORT_ROWS = 8, 16

    if "split" in what:
        # long bags (10x) all in the first half: a split by bag count gives one thread
        # ~5.5x the other's rows
        short = 16
        skew = np.where(np.arange(1024) < 102, 10 * short, short).astype(np.int32)
        total = int(skew.sum())
        skew_sets = [rng.integers(0, 1_000_000, total).astype(np.int64) for _ in range(8)]
        half = int(skew[:512].sum())
        print("\n| split (%d indices, long bags first) | hot | cold |" % total)
        print("|---|---|---|")
        rows = {}
        for cold in (False, True):
            whole = Calls(lambda idx: K.segment_reduce(table, idx, skew), skew_sets, cold)
            first = Calls(lambda idx: K.segment_reduce(table, idx[:half], skew[:512], threads=1), skew_sets, cold)
            second = Calls(lambda idx: K.segment_reduce(table, idx[half:], skew[512:], threads=1), skew_sets, cold)
            nothing = (lambda: None)
            times = alternate({"work": (nothing, whole), "first": (nothing, first), "second": (nothing, second)},
                              a.rounds, a.calls)
            model = [max(x, y) for x, y in zip(times["first"], times["second"])]
            work = times["work"] if a.clock == "wall" else [t / a.threads for t in times["work"]]
            rows.setdefault("by work (the kernel)", []).append(summary(work))
            rows.setdefault("by bag count (model: slower half alone)", []).append(summary(model))
        for name, cells in rows.items():
            print("| %s | %s |" % (name, " | ".join(cells)), flush=True)

    if "tiles" in what:
        print("\n| tile width (lanes) | row | hot | cold |")
        print("|---|---|---|---|")
        big = rng.standard_normal((4_000_000, 128), dtype=np.float32)
        big_sets = [rng.integers(0, 4_000_000, 81920).astype(np.int64) for _ in range(8)]
        for data, data_sets, widths in ((table, sets, (64, 32, 16, 8)), (big, big_sets, (64, 32, 16))):
            cells = {w: [] for w in widths}
            for cold in (False, True):
                runner = Calls(lambda idx, data=data: K.segment_reduce(data, idx, lengths), data_sets, cold)

                def use(w):
                    loops.WIDTHS = tuple(x for x in (64, 32, 16, 8, 4, 2, 1) if x <= w)
                    K._TILES.clear()
                variants = {w: ((lambda w=w: use(w)), runner) for w in widths}
                times = alternate(variants, a.rounds, a.calls)
                for w in widths:
                    cells[w].append(summary(times[w]))
            for w in widths:
                print("| %d | %d | %s |" % (w, data.shape[1], " | ".join(cells[w])), flush=True)
            use(64)
        del big

    if "checks" in what:
        found = np.empty(a.threads, np.int64)

        def check(idx):
            with team():
                loops.first_bad_index(idx, table.shape[0], a.threads, found)
        print("\n| 81,920 indices | hot | cold |")
        print("|---|---|---|")
        cells = {"index check alone": [], "whole lookup (f32)": []}
        for cold in (False, True):
            times = alternate({"index check alone": ((lambda: None), Calls(check, sets, cold)),
                               "whole lookup (f32)": ((lambda: None), Calls(
                                   lambda idx: K.segment_reduce(table, idx, lengths), sets, cold))},
                              a.rounds, a.calls)
            for name in cells:
                cells[name].append(summary(times[name]))
        for name, c in cells.items():
            print("| %s | %s |" % (name, " | ".join(c)), flush=True)


if __name__ == "__main__":
    main()
