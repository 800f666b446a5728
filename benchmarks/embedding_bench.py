"""Embedding-bag lookups: caffe2py's SparseLengths* ops (run as a one-op net) next to
torch's embedding_bag / quantized embedding_bag kernels, same process, same data.

Default problem (issue 4): table 1,000,000 x 64, 1024 bags x 80 uniform random
indices, 2 threads. Rows: float32, float16 table, weighted sum, fused 8-bit,
fused 4-bit, skewed lengths (10% of bags 10x longer, same total). GB/s counts the
table rows touched (indices x row bytes). torch is optional (benchmark-only):
without it the torch columns say "absent".

Usage: python benchmarks/embedding_bench.py [--rows 1000000] [--dim 64] [--bags 1024]
       [--length 80] [--threads 2] [--repeat 50]
"""
import argparse
import os
import platform
import statistics
import time

import numpy as np

from caffe2py import core
from caffe2py.workspace import Workspace

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


def median_ms(fn, repeat):
    fn()
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(samples)


class OneOpNet:
    """A workspace holding the inputs and a compiled one-op net."""

    def __init__(self, op_type, inputs, **kwargs):
        self.ws = Workspace("emb_bench_" + op_type)
        names = []
        for i, value in enumerate(inputs):
            names.append("in%d" % i)
            self.ws.feed_blob(names[-1], value)
        net = core.Net("bench_" + op_type)
        net.Proto().op.extend([core.CreateOperator(op_type, names, ["out"], **kwargs)])
        self.ws.create_net(net)
        self.name = net.Name()

    def run(self):
        self.ws.run_net(self.name)

    def output(self):
        return self.ws.fetch_blob("out")


def run_once(op_type, inputs):
    net = OneOpNet(op_type, inputs)
    net.run()
    return net.output()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bags", type=int, default=1024)
    p.add_argument("--length", type=int, default=80)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=50)
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    if torch is not None:
        torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((a.rows, a.dim), dtype=np.float32)
    lengths = np.full(a.bags, a.length, np.int32)
    indices = rng.integers(0, a.rows, int(lengths.sum())).astype(np.int64)
    weights = rng.random(indices.size, dtype=np.float32)
    long_bags = rng.random(a.bags) < 0.1
    short = max(1, int(round(a.length / (0.9 + 0.1 * 10))))
    skew_lengths = np.where(long_bags, 10 * short, short).astype(np.int32)
    skew_indices = rng.integers(0, a.rows, int(skew_lengths.sum())).astype(np.int64)
    q8 = run_once("FloatToFused8BitRowwiseQuantized", [table])
    q4 = run_once("FloatToFused4BitRowwiseQuantized", [table])
    half = table.astype(np.float16)

    def offsets_of(lens):
        return np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)

    cases = [  # name, our op, our inputs, torch callable factory, row bytes, n indices
        ("SLS f32", "SparseLengthsSum", [table, indices, lengths],
         lambda T: (lambda: T.nn.functional.embedding_bag(
             T.from_numpy(indices), T.from_numpy(table), T.from_numpy(offsets_of(lengths)), mode="sum")),
         4 * a.dim, indices.size),
        ("SLS fp16 table", "SparseLengthsSum", [half, indices, lengths],
         lambda T: (lambda: T.nn.functional.embedding_bag(
             T.from_numpy(indices), T.from_numpy(half), T.from_numpy(offsets_of(lengths)), mode="sum")),
         2 * a.dim, indices.size),
        ("SLWS f32 weighted", "SparseLengthsWeightedSum", [table, weights, indices, lengths],
         lambda T: (lambda: T.nn.functional.embedding_bag(
             T.from_numpy(indices), T.from_numpy(table), T.from_numpy(offsets_of(lengths)), mode="sum",
             per_sample_weights=T.from_numpy(weights))),
         4 * a.dim, indices.size),
        ("SLS f32 skewed lengths", "SparseLengthsSum", [table, skew_indices, skew_lengths],
         lambda T: (lambda: T.nn.functional.embedding_bag(
             T.from_numpy(skew_indices), T.from_numpy(table), T.from_numpy(offsets_of(skew_lengths)),
             mode="sum")),
         4 * a.dim, skew_indices.size),
        ("SLS fused 8-bit", "SparseLengthsSumFused8BitRowwise", [q8, indices, lengths],
         lambda T: (lambda: T.ops.quantized.embedding_bag_byte_rowwise_offsets(
             T.from_numpy(q8), T.from_numpy(indices), T.from_numpy(offsets_of(lengths)), False, 0, False,
             None, None, False)),
         q8.shape[1], indices.size),
        ("SLS fused 4-bit", "SparseLengthsSumFused4BitRowwise", [q4, indices, lengths],
         lambda T: (lambda: T.ops.quantized.embedding_bag_4bit_rowwise_offsets(
             T.from_numpy(q4), T.from_numpy(indices), T.from_numpy(offsets_of(lengths)), False, 0, False,
             None, None, False)),
         q4.shape[1], indices.size),
    ]
    print("# embedding lookups: table %d x %d, %d bags x %d indices, %d threads, median of %d, %s"
          % (a.rows, a.dim, a.bags, a.length, a.threads, a.repeat, platform.processor() or platform.machine()))
    if torch is None:
        print("# torch is absent (pip install torch==2.13.0 for the peer columns)")
    print("| case | ours ms | torch ms | ratio | ours GB/s | torch GB/s | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name, op, inputs, torch_fn, row_bytes, n_idx in cases:
        net = OneOpNet(op, inputs)
        ours = median_ms(net.run, a.repeat)
        gb = n_idx * row_bytes / 1e9
        peer, diff = None, None
        if torch is not None:
            try:
                fn = torch_fn(torch)
                peer = median_ms(fn, a.repeat)
                diff = float(np.abs(net.output() - fn().float().numpy()).max())
            except (RuntimeError, NotImplementedError) as exc:
                print("# torch %s unavailable: %s" % (name, str(exc).splitlines()[0][:100]))
        print("| %s | %.2f | %s | %s | %.1f | %s | %s |" % (
            name, ours, "absent" if peer is None else "%.2f" % peer,
            "" if peer is None else "%.2f" % (ours / peer), gb / ours * 1e3,
            "" if peer is None else "%.1f" % (gb / peer * 1e3), "" if diff is None else "%.1e" % diff))


if __name__ == "__main__":
    main()
