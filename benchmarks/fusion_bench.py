"""Elementwise chains: fused plan vs unfused plan vs torch eager vs one copy.

A chain of 2, 4 or 8 elementwise ops (Mul and Add by per-column vectors, Relu,
Scale, Sub, Abs, Mul, Negative) over a float32 tensor of 1M or 64M elements, run as
an ONNX-backend-style plan (only the last value is kept). The reference is one
np.copyto of the tensor into a preallocated array: a chain that reads the input
once and writes the output once cannot beat that by much, so "x copy" near 1.0
means the fused loop runs at the memory bandwidth limit. Medians of --runs runs.

--reduce adds a second table: the same chains ended by ReduceSum over the last axis
(rows of 1024; keepdims 0), fused into the loop (the chain's values are summed in
registers and never written) against the unfused ops, torch eager (chain then
.sum(-1)) and one np.sum(x, -1) (a read of x with NumPy's vectorised sum).

GPU: the fused CUDA kernels (caffe2py/fusion_cuda.py) have only run on the CUDA
emulator, which measures nothing about a GPU, so there are no GPU rows.

    python benchmarks/fusion_bench.py [--sizes 1M,64M] [--lengths 2,4,8] [--runs 7] [--reduce] [--append]
"""
import argparse
import os
import sys
import time

import numpy as np
from _timing import machine_label, median_ms

from caffe2py import core
from caffe2py.executor import compile_net
from caffe2py.proto import caffe2_pb2

COLS = 1024
OPS = ["Mul", "Add", "Relu", "Scale", "Sub", "Abs", "MulB", "Negative"]


def chain_net(length, fusion, reduce=False):
    net = core.Net("chain%d" % length)
    cur = "x"
    for k, op in enumerate(OPS[:length]):
        out = "t%d" % k if k < length - 1 or reduce else "y"
        if op in ("Mul", "MulB"):
            net.Mul([cur, "a"], out)
        elif op in ("Add", "Sub"):
            getattr(net, op)([cur, "b"], out)
        elif op == "Scale":
            net.Scale([cur], out, scale=0.5)
        else:
            getattr(net, op)([cur], out)
        cur = out
    if reduce:
        net.ReduceSum([cur], "y", axes=[-1], keepdims=0)
    proto = caffe2_pb2.NetDef()
    proto.CopyFrom(net.Proto())
    proto.arg.add(name="fusion", i=fusion)
    return proto


def torch_chain(torch, x, a, b, length):
    y = x
    for op in OPS[:length]:
        if op in ("Mul", "MulB"):
            y = torch.mul(y, a)
        elif op == "Add":
            y = torch.add(y, b)
        elif op == "Sub":
            y = torch.sub(y, b)
        elif op == "Scale":
            y = torch.mul(y, 0.5)
        elif op == "Relu":
            y = torch.relu(y)
        elif op == "Abs":
            y = torch.abs(y)
        else:
            y = torch.neg(y)
    return y


def bench(size, length, runs, reduce=False):
    rs = np.random.RandomState(0)
    x = rs.standard_normal((size // COLS, COLS)).astype(np.float32)
    a = rs.standard_normal(COLS).astype(np.float32)
    b = rs.standard_normal(COLS).astype(np.float32)
    feeds = {"x": x, "a": a, "b": b}
    times, results = {}, {}
    for label, mode in (("fused", 1), ("unfused", 0)):
        plan = compile_net(chain_net(length, mode, reduce), feeds.keys(), keep=["y"])
        assert plan.fused_groups == (1 if mode else 0)

        def run(plan=plan):
            blobs = dict(feeds)
            plan.run(blobs)
            return blobs["y"]
        results[label] = run()
        times[label] = median_ms(run, runs)
    if reduce:     # summation order differs (float64 in order vs NumPy's pairwise float32)
        assert np.allclose(results["fused"], results["unfused"], rtol=1e-4, atol=1e-3, equal_nan=True)
        times["copy"] = median_ms(lambda: np.sum(x, axis=-1), runs)
    else:
        assert np.array_equal(results["fused"], results["unfused"], equal_nan=True)
        dst = np.empty_like(x)
        times["copy"] = median_ms(lambda: np.copyto(dst, x), runs)
    try:
        import torch
        from caffe2py.kernels.cpu.runtime.jit import team_size
        torch.set_num_threads(team_size())
        tx, ta, tb = torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(b)
        if reduce:
            times["torch"] = median_ms(lambda: torch_chain(torch, tx, ta, tb, length).sum(-1), runs)
        else:
            times["torch"] = median_ms(lambda: torch_chain(torch, tx, ta, tb, length), runs)
    except ImportError:
        times["torch"] = float("nan")
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1M,64M")
    parser.add_argument("--lengths", default="2,4,8")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--reduce", action="store_true", help="also the chains ended by ReduceSum over the last axis")
    parser.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = [int(s[:-1]) << 20 if s.endswith("M") else int(s) for s in args.sizes.split(",")]
    lengths = [int(n) for n in args.lengths.split(",")]
    from caffe2py.kernels.cpu.runtime.jit import team_size
    lines = ["| elements | ops | fused ms | unfused ms | torch eager ms | one copy ms | fused / copy | "
             "unfused / fused | torch / fused | fused GB/s (read x + write y) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0])
    for size in sizes:
        for length in lengths:
            t = bench(size, length, args.runs)
            gbs = 2 * size * 4 / (t["fused"] / 1e3) / 1e9
            line = ("| %dM | %d | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx | %.1f |"
                    % (size >> 20, length, t["fused"], t["unfused"], t["torch"], t["copy"], t["fused"] / t["copy"],
                       t["unfused"] / t["fused"], t["torch"] / t["fused"], gbs))
            lines.append(line)
            print(line, flush=True)
    if args.reduce:
        lines += ["", "| elements | ops + ReduceSum(last axis) | fused ms | unfused ms | torch eager ms | "
                  "np.sum(x, -1) ms | fused / np.sum | unfused / fused | torch / fused | fused GB/s (read x) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        print("\n".join(lines[-3:-1]))
        for size in sizes:
            for length in lengths:
                t = bench(size, length, args.runs, reduce=True)
                gbs = size * 4 / (t["fused"] / 1e3) / 1e9
                line = ("| %dM | %d + 1 | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx | %.1f |"
                        % (size >> 20, length, t["fused"], t["unfused"], t["torch"], t["copy"],
                           t["fused"] / t["copy"], t["unfused"] / t["fused"], t["torch"] / t["fused"], gbs))
                lines.append(line)
                print(line, flush=True)
    if args.append:
        load = os.getloadavg()
        header = ("\n## Elementwise chains fused into one generated loop (benchmarks/fusion_bench.py, issue 38) — %s, "
                  "%s UTC, team of %d threads, shared machine (load %.1f at the end), medians of %d runs\n\n"
                  % (machine_label(), time.strftime("%Y-%m-%d %H:%M", time.gmtime()), team_size(), load[0],
                     args.runs))
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
        with open(path, "a") as fh:
            fh.write(header + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
