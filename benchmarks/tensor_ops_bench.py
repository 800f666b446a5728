"""Caffe2 tensor ops (issue 17 part A) next to torch's equivalents, same process,
alternating blocks. Each of our timings is one op run as a compiled one-op net
(executor included) on ~1M-element float32 tensors.

Rows:
  GT legacy broadcast   A [64, 256, 64] > B [256] at axis 1 (torch: A > B.view(1, 256, 1))
  Cast float -> int32   torch: .to(torch.int32)
  Where                 torch.where(C, X, Y)
  Slice                 X[:, 16:240, :] made contiguous
  ScatterAssign         256 rows of a [100000, 64] table; ours copies the table (the
                        update is a new array), torch.index_copy_ writes in place
Usage: python benchmarks/tensor_ops_bench.py [--runs 30]
"""
import argparse
import datetime

import numpy as np
from _timing import interleaved_ms, machine_label

from caffe2py import core
from caffe2py.workspace import Workspace


def _net(ws, name, op):
    net = core.Net(name)
    net.Proto().op.extend([op])
    ws.create_net(net)
    return ws.get_net(name).run


def cases(torch):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 256, 64), dtype=np.float32)
    B = rng.standard_normal(256, dtype=np.float32)
    C = A > 0
    table = rng.standard_normal((100000, 64), dtype=np.float32)
    idx = rng.choice(100000, 256, replace=False).astype(np.int64)
    rows = rng.standard_normal((256, 64), dtype=np.float32)
    ws = Workspace("tensor_ops_bench")
    for name, value in (("A", A), ("B", B), ("C", C), ("Y", -A), ("T", table), ("I", idx), ("R", rows)):
        ws.feed_blob(name, value)
    tA, tB, tC, tY = (torch.from_numpy(x) for x in (A, B, C, -A))
    tT, tI, tR = torch.from_numpy(table.copy()), torch.from_numpy(idx), torch.from_numpy(rows)
    return [
        ("GT legacy broadcast", _net(ws, "gt", core.CreateOperator("GT", ["A", "B"], ["o"], broadcast=1, axis=1)),
         lambda: tA > tB.view(1, 256, 1)),
        ("Cast float -> int32", _net(ws, "cast", core.CreateOperator("Cast", ["A"], ["o"], to=core.DataType.INT32)),
         lambda: tA.to(torch.int32)),
        ("Where", _net(ws, "where", core.CreateOperator("Where", ["C", "A", "Y"], ["o"])),
         lambda: torch.where(tC, tA, tY)),
        ("Slice", _net(ws, "slice", core.CreateOperator("Slice", ["A"], ["o"], starts=[0, 16], ends=[-1, 240])),
         lambda: tA[:, 16:240, :].contiguous()),
        ("ScatterAssign 256 rows of 100000x64", _net(ws, "scatter", core.CreateOperator(
            "ScatterAssign", ["T", "I", "R"], ["T"])), lambda: tT.index_copy_(0, tI, tR)),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to compare with")
        return
    torch.set_num_threads(1)
    print("machine: %s; torch %s (1 thread); %s" % (machine_label(), torch.__version__, datetime.date.today()))
    print("%-38s %10s %10s %7s" % ("op", "ours ms", "torch ms", "ratio"))
    for name, ours, peer in cases(torch):
        a, b = interleaved_ms(ours, peer, args.runs)
        print("%-38s %10.3f %10.3f %7.2f" % (name, a, b, a / b))


if __name__ == "__main__":
    main()
