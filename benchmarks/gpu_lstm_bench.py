"""GPU LSTMUnit and LSTMUnitGradient, float32 and float16 (issue 5 shape: N=65,536,
D=1024, every row inside its sequence).

First (with or without a GPU) the bytes each call must move and the time that takes
at H100 HBM bandwidth (3.35 TB/s), the lower bound the measured time is printed beside.
Effective bandwidth = bytes the kernel must move / time: forward reads gates (4D)
and cell_t_prev (D) and writes hidden_t and cell_t (2D) per row; the gradient reads
cell_t_prev, gates, cell_t, hidden_t_grad, cell_t_grad (8D) and writes three
gradients (6D). Compared with the device-to-device copy bandwidth of the same run;
torch's composed ops (sigmoid/tanh on the same device) are the peer when torch with
CUDA is installed. Small batches report time and launches per op.

Usage: python benchmarks/gpu_lstm_bench.py [--n 65536] [--d 1024] [--iters 20]
Without PyCUDA and a GPU (or with the CPU emulator selected) it prints the lower
bounds and exits 0 with a message.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu_common import (BOUND_HEADER, LaunchCounter, bound_row, copy_bandwidth, describe_device, gb,  # noqa: E402
                         hbm_seconds, lstm_bytes, require_gpu, time_on_stream, time_synced, torch_cuda)


def kernel(op_type, n_inputs, n_outputs):
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    from caffe2py.registry import OpContext, select_kernel
    op = core.CreateOperator(op_type, ["x%d" % i for i in range(n_inputs)], ["y%d" % i for i in range(n_outputs)],
                             device_option=core.DeviceOption(caffe2_pb2.CUDA, 0))
    entry, _, schema = select_kernel(op)
    return entry.factory(OpContext(op, schema, 0))


def device_inputs(n, d, dtype, seed):
    from caffe2py.cuda import adapter, allocator
    rng = np.random.default_rng(seed)

    def dev(a):
        return adapter.tag(allocator.to_device(a), 0)
    h, c = (dev(rng.standard_normal((1, n, d)).astype(dtype)) for _ in range(2))
    gates = dev(rng.standard_normal((1, n, 4 * d)).astype(dtype))
    seq = dev(np.full(n, 10, np.int32))
    t = dev(np.array([1], np.int32))
    dh, dc = (dev(rng.standard_normal((1, n, d)).astype(dtype)) for _ in range(2))
    return h, c, gates, seq, t, dh, dc


def torch_lstm(torch, n, d, dtype):
    tdtype = torch.float32 if dtype == np.float32 else torch.float16
    gates = torch.randn(n, 4 * d, device="cuda", dtype=tdtype)
    c_prev = torch.randn(n, d, device="cuda", dtype=tdtype)

    def run():
        i, f, o, g = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=65_536)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy-mb", type=int, default=1024, help="buffer size for the copy-bandwidth reference")
    args = p.parse_args(argv)
    print("LSTMUnit and LSTMUnitGradient, N=%d, D=%d: the bytes each call must move" % (args.n, args.d))
    print(BOUND_HEADER)
    for dtype in (np.float32, np.float16):
        for grad in (False, True):
            print(bound_row("%s %s" % ("LSTMUnitGradient" if grad else "LSTMUnit", np.dtype(dtype).name),
                            lstm_bytes(args.n, args.d, np.dtype(dtype).itemsize, grad)))
    print()
    require_gpu()
    print("device:", describe_device())
    copy_bw = copy_bandwidth(args.copy_mb << 20)
    print("device-to-device copy: %.1f GB/s (read + written)" % gb(copy_bw))
    torch = torch_cuda()
    if torch is None:
        print("torch with CUDA is not installed here: no peer column")
    forward, backward = kernel("LSTMUnit", 5, 2), kernel("LSTMUnitGradient", 9, 3)
    print("\n| op | dtype | ours ms | HBM bound ms | ours / bound | GB/s | % of copy | launches/op | "
          "torch ms (composed ops) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype in (np.float32, np.float16):
        h, c, gates, seq, t, dh, dc = device_inputs(args.n, args.d, dtype, 0)
        item = np.dtype(dtype).itemsize
        h_new, c_new = forward(h, c, gates, seq, t)
        cases = [("LSTMUnit", lambda: forward(h, c, gates, seq, t), 7),
                 ("LSTMUnitGradient", lambda: backward(h, c, gates, seq, t, h_new, c_new, dh, dc), 14)]
        for name, run, row_elems in cases:
            with LaunchCounter() as launches:
                run()
            per_op, _ = time_on_stream(run, args.iters)
            moved = args.n * args.d * row_elems * item
            bound = hbm_seconds(lstm_bytes(args.n, args.d, item, name == "LSTMUnitGradient"))
            peer = "-"
            if torch is not None and name == "LSTMUnit":
                peer = "%.3f" % (time_synced(torch_lstm(torch, args.n, args.d, dtype), torch.cuda.synchronize,
                                             args.iters) * 1e3)
            print("| %s | %s | %.3f | %.3f | %.2f | %.1f | %.0f%% | %d | %s |" % (
                name, np.dtype(dtype).name, per_op * 1e3, bound * 1e3, per_op / bound, gb(moved / per_op),
                100 * moved / per_op / copy_bw, launches.count, peer))
    print("\nSmall batches (float32, D=%d): wall time per op" % args.d)
    print("| N | ours us/op | launches/op |")
    print("|---|---|---|")
    for n in (1, 4, 16, 64):
        h, c, gates, seq, t, _, _ = device_inputs(n, args.d, np.float32, n)
        with LaunchCounter() as launches:
            forward(h, c, gates, seq, t)
        _, wall = time_on_stream(lambda: forward(h, c, gates, seq, t), 200)
        print("| %d | %.1f | %d |" % (n, wall * 1e6, launches.count))


if __name__ == "__main__":
    main()
