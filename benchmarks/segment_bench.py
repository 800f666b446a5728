"""Segment reductions and range gathers: caffe2py's ops (each run as a one-op net)
next to what a torch user writes for the same result, same process, same data,
alternating blocks of runs.

Rows:
  UnsortedSegmentSum [M, D] -> [K, D]   torch: zeros(K, D).index_add_(0, ids, data)
  UnsortedSegmentSum 1-D                torch: zeros(K).scatter_reduce_(0, ids, x, "sum")
  LengthsMax [M, D] by lengths          torch: torch.segment_reduce(data, "max", lengths=...)
  SortedSegmentSum [M, D]               torch: torch.segment_reduce(data, "sum", lengths=...)
  GatherRanges int64 (N, F, 2) ranges   torch: data[repeat_interleave(starts - out_offsets, lens) + arange]
                                               and lens.view(N, F).sum(1)

Usage: python benchmarks/segment_bench.py [--threads 2] [--runs 30] [--scale 1.0]
torch is optional (benchmark-only): without it the peer column says "absent".
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved_ms, machine_label  # noqa: E402

try:
    import torch
except ImportError:     # benchmark-only dependency
    torch = None


class OneOpNet:
    """A workspace holding the inputs and a compiled one-op net."""

    def __init__(self, op_type, inputs, n_out=1, **kwargs):
        from caffe2py import core
        from caffe2py.workspace import Workspace
        self.ws = Workspace("segment_bench_" + op_type)
        names = ["in%d" % i for i in range(len(inputs))]
        for name, value in zip(names, inputs):
            self.ws.feed_blob(name, value)
        self.outs = ["out%d" % i for i in range(n_out)]
        net = core.Net("segment_bench_" + op_type)
        net.Proto().op.extend([core.CreateOperator(op_type, names, self.outs, **kwargs)])
        self.ws.create_net(net)
        self.name = net.Name()

    def run(self):
        self.ws.run_net(self.name)

    def outputs(self):
        return [self.ws.fetch_blob(o) for o in self.outs]


def cases(rng, scale):
    m, d, k = int(200_000 * scale), 64, 10_000
    data = rng.standard_normal((m, d)).astype(np.float32)
    ids = rng.integers(0, k, size=m).astype(np.int32)
    yield ("UnsortedSegmentSum %dx%d -> %d" % (m, d, k), "UnsortedSegmentSum", [data, ids], {},
           lambda t: torch.zeros(k, d).index_add_(0, t[1].long(), t[0]), 1)

    m1 = int(2_000_000 * scale)
    x = rng.standard_normal(m1).astype(np.float32)
    ids1 = rng.integers(0, 1000, size=m1).astype(np.int64)
    yield ("UnsortedSegmentSum 1-D %d -> 1000" % m1, "UnsortedSegmentSum", [x, ids1], {},
           lambda t: torch.zeros(1000).scatter_reduce_(0, t[1], t[0], "sum"), 1)

    lengths = rng.integers(0, 40, size=int(5_000 * scale)).astype(np.int32)
    seg = rng.standard_normal((int(lengths.sum()), d)).astype(np.float32)
    yield ("LengthsMax %dx%d, %d segments" % (seg.shape[0], d, lengths.size), "LengthsMax", [seg, lengths], {},
           lambda t: torch.segment_reduce(t[0], "max", lengths=t[1], unsafe=True), 1)
    sorted_ids = np.repeat(np.arange(lengths[lengths > 0].size), lengths[lengths > 0]).astype(np.int32)
    yield ("SortedSegmentSum %dx%d, %d segments" % (seg.shape[0], d, sorted_ids[-1] + 1), "SortedSegmentSum",
           [seg, sorted_ids], {},
           lambda t: torch.segment_reduce(t[0], "sum", lengths=torch.bincount(t[1]), unsafe=True), 1)

    n, f, size = int(4096 * scale), 8, 2_000_000
    values = rng.integers(0, 1 << 40, size=size).astype(np.int64)
    lens = rng.integers(0, 40, size=(n, f))
    starts = rng.integers(0, size - 40, size=(n, f))
    ranges = np.stack([starts, lens], axis=2).astype(np.int32)

    def torch_gather(t):
        r = t[1].view(-1, 2).long()
        st, ln = r[:, 0], r[:, 1]
        out_off = torch.cumsum(ln, 0) - ln
        idx = torch.repeat_interleave(st - out_off, ln) + torch.arange(int(ln.sum()))
        return t[0][idx], ln.view(n, f).sum(1)
    yield ("GatherRanges int64, %d x %d ranges, %d values" % (n, f, int(lens.sum())), "GatherRanges",
           [values, ranges], {}, torch_gather, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--scale", type=float, default=1.0)
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    if torch is not None:
        torch.set_num_threads(a.threads)
    print("machine: %s; %d threads; load average %.1f" % (machine_label(), a.threads, os.getloadavg()[0]))
    print("| case | caffe2py ms | torch ms | ratio (ours / torch) | max abs diff |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for label, op_type, inputs, kwargs, peer, n_out in cases(rng, a.scale):
        net = OneOpNet(op_type, inputs, n_out, **kwargs)
        net.run()
        ours = net.outputs()
        if torch is None:
            ms = interleaved_ms(net.run, lambda: None, a.runs)[0]
            print("| %s | %.2f | absent | - | - |" % (label, ms))
            continue
        tin = [torch.from_numpy(v) for v in inputs]
        theirs = peer(tin)
        theirs = [theirs] if n_out == 1 else list(theirs)
        # torch's max of an empty segment is -inf where Caffe2 (and caffe2py) give 0
        diff = max(float(np.max(np.abs(o.astype(np.float64) - np.where(np.isneginf(t.numpy()), 0, t.numpy())),
                                initial=0))
                   for o, t in zip(ours, theirs))
        ms, peer_ms = interleaved_ms(net.run, lambda: peer(tin), a.runs)
        print("| %s | %.2f | %.2f | %.2f | %.1e |" % (label, ms, peer_ms, ms / peer_ms, diff))


if __name__ == "__main__":
    main()
