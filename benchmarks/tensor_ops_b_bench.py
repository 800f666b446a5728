"""Caffe2 tensor ops of issue 17 part B next to torch's equivalents, same process,
alternating blocks. Each of our timings is one op run as a compiled one-op net
(executor included); torch runs on as many threads as caffe2py's team (--threads).

Rows:
  ConvTranspose 64->32 3x3/s2   [8, 64, 28, 28] -> [8, 32, 56, 56] (adj 1; DCGAN-like)
  ConvTranspose 16->16 4x4/s2 g4 grouped, [8, 16, 32, 32] -> [8, 16, 64, 64]
  LayerNorm [4096, 512]         torch.nn.functional.layer_norm, no affine
  TopK k=10 of [4096, 1000]     torch.topk (values and indices)
  ReduceFrontSum [256, 4096]    torch.sum(dim=0)
  ReduceBackMax + lengths       [4096, 256] with per-row lengths; torch: masked_fill + amax
  ArgMax [4096, 1000]           torch.argmax(dim=1)
Usage: python benchmarks/tensor_ops_b_bench.py [--runs 30] [--threads 1]
"""
import argparse
import datetime
import os

import numpy as np
from _timing import interleaved_ms, machine_label


def _net(ws, core, name, op):
    net = core.Net(name)
    net.Proto().op.extend([op])
    ws.create_net(net)
    return ws.get_net(name).run


def cases(torch, core, ws):
    rng = np.random.default_rng(0)
    F = torch.nn.functional

    def feed(name, value):
        ws.feed_blob(name, value)
        return torch.from_numpy(value)

    rows = []
    for label, n, c, m, size, k, group in (("ConvTranspose 64->32 3x3/s2", 8, 64, 32, 28, 3, 1),
                                           ("ConvTranspose 16->16 4x4/s2 g4", 8, 16, 16, 32, 4, 4)):
        x = feed("x" + label, rng.standard_normal((n, c, size, size), dtype=np.float32))
        w = feed("w" + label, rng.standard_normal((c, m // group, k, k), dtype=np.float32))
        b = feed("b" + label, rng.standard_normal(m, dtype=np.float32))
        pad, adj = (1, 1) if k == 3 else (1, 0)
        op = core.CreateOperator("ConvTranspose", ["x" + label, "w" + label, "b" + label], ["y"], kernel=k,
                                 stride=2, pad=pad, adj=adj, group=group)
        rows.append((label, _net(ws, core, label, op),
                     (lambda x=x, w=w, b=b, pad=pad, adj=adj, group=group:
                      F.conv_transpose2d(x, w, b, stride=2, padding=pad, output_padding=adj, groups=group))))
    tx = feed("ln", rng.standard_normal((4096, 512), dtype=np.float32))
    rows.append(("LayerNorm [4096, 512]", _net(ws, core, "ln", core.CreateOperator(
        "LayerNorm", ["ln"], ["y", "m", "s"])), lambda: F.layer_norm(tx, (512,))))
    tk = feed("tk", rng.standard_normal((4096, 1000), dtype=np.float32))
    rows.append(("TopK k=10 of [4096, 1000]", _net(ws, core, "tk", core.CreateOperator(
        "TopK", ["tk"], ["v", "i"], k=10)), lambda: torch.topk(tk, 10)))
    rows.append(("ArgMax [4096, 1000]", _net(ws, core, "am", core.CreateOperator(
        "ArgMax", ["tk"], ["i"], keepdims=0)), lambda: torch.argmax(tk, dim=1)))
    tf = feed("fs", rng.standard_normal((256, 4096), dtype=np.float32))
    rows.append(("ReduceFrontSum [256, 4096]", _net(ws, core, "fs", core.CreateOperator(
        "ReduceFrontSum", ["fs"], ["y"])), lambda: torch.sum(tf, dim=0)))
    tb = feed("bm", rng.standard_normal((4096, 256), dtype=np.float32))
    lengths = rng.integers(1, 257, 4096).astype(np.int32)
    ws.feed_blob("len", lengths)
    mask = torch.arange(256)[None, :] >= torch.from_numpy(lengths.astype(np.int64))[:, None]
    rows.append(("ReduceBackMax + lengths [4096, 256]", _net(ws, core, "bm", core.CreateOperator(
        "ReduceBackMax", ["bm", "len"], ["y"])), lambda: tb.masked_fill(mask, float("-inf")).amax(dim=1)))
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(args.threads)
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to compare with")
        return
    from caffe2py import core
    from caffe2py.workspace import Workspace
    torch.set_num_threads(args.threads)
    ws = Workspace("tensor_ops_b_bench")
    print("machine: %s; torch %s; %d thread(s) each; %s" % (machine_label(), torch.__version__, args.threads,
                                                            datetime.date.today()))
    print("%-38s %10s %10s %7s" % ("op", "ours ms", "torch ms", "ratio"))
    for name, ours, peer in cases(torch, core, ws):
        a, b = interleaved_ms(ours, peer, args.runs)
        print("%-38s %10.3f %10.3f %7.2f" % (name, a, b, a / b))


if __name__ == "__main__":
    main()
