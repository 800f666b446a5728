"""GPU embedding lookups: SparseLengthsSum over float32, float16 and fused 8-bit
tables (issue 5 shapes: 10,000,000 x 128 table, 65,536 bags x 32 uniform indices).

First (with or without a GPU) the bytes each call must move (every distinct row once,
the indices, lengths and output) and the time that takes at H100 HBM bandwidth
(3.35 TB/s): a lower bound for the measured time printed beside it on a GPU.
Effective bandwidth = (bytes of table rows read + bytes of output written) / time,
compared with the device-to-device copy bandwidth measured in the same run (read +
written bytes / time). torch.nn.functional.embedding_bag on the same device is the
peer when torch with CUDA is installed (fused 8-bit is compared with torch on the
dequantised float16 table). Small batches (1-64 bags) report time and kernel
launches per op, where launch overhead dominates.

Usage: python benchmarks/gpu_embedding_bench.py [--rows 10000000] [--dim 128]
       [--bags 65536] [--per-bag 32] [--iters 20]
Without PyCUDA and a GPU (or with the CPU emulator selected) it prints the lower
bounds and exits 0 with a message.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu_common import (BOUND_HEADER, LaunchCounter, bound_row, copy_bandwidth, describe_device,  # noqa: E402
                         drv_module, fill_device, gb, hbm_seconds, require_gpu, sls_bytes, time_on_stream,
                         time_synced, torch_cuda)

ROW_BYTES = {"float32": lambda dim: 4 * dim, "float16": lambda dim: 2 * dim, "fused8": lambda dim: dim + 8}


def must_move(args):
    """Bytes each lookup must move, per table kind, for the batch make_batch draws."""
    rng = np.random.default_rng(args.seed + 1)
    indices = rng.integers(0, args.rows, args.bags * args.per_bag).astype(np.int64)
    return {kind: sls_bytes(indices, args.bags, row(args.dim), args.dim) for kind, row in ROW_BYTES.items()}


def make_tables(rows, dim, seed):
    rng = np.random.default_rng(seed)
    f32 = fill_device((rows, dim), np.float32, lambda n: rng.standard_normal((n, dim), np.float32))
    f16 = fill_device((rows, dim), np.float16, lambda n: rng.standard_normal((n, dim), np.float32).astype(np.float16))

    def fused_chunk(n):
        q = rng.integers(0, 256, (n, dim), dtype=np.uint8)
        sb = np.stack([rng.uniform(0.001, 0.01, n), rng.uniform(-1, 1, n)], 1).astype("<f4").view(np.uint8)
        return np.concatenate([q, sb], 1)
    fused8 = fill_device((rows, dim + 8), np.uint8, fused_chunk)
    return {"float32": (f32, 4 * dim), "float16": (f16, 2 * dim), "fused8": (fused8, dim + 8)}


def make_batch(rows, bags, per_bag, seed):
    from caffe2py.cuda import adapter, allocator
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, rows, bags * per_bag).astype(np.int64)
    lengths = np.full(bags, per_bag, np.int32)
    return (adapter.tag(allocator.to_device(indices), 0), adapter.tag(allocator.to_device(lengths), 0),
            indices, lengths)


def sls_runner(table, indices, lengths, fused):
    """The CUDA op's kernel callable, created as the executor would."""
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    from caffe2py.registry import OpContext, select_kernel
    op = core.CreateOperator("SparseLengthsSum" + ("Fused8BitRowwise" if fused else ""), ["t", "i", "l"], ["o"],
                             device_option=core.DeviceOption(caffe2_pb2.CUDA, 0))
    entry, _, schema = select_kernel(op)
    kernel = entry.factory(OpContext(op, schema, 0))
    return lambda: kernel(table, indices, lengths)


def torch_table(torch, table):
    """A torch tensor on the same GPU holding a copy of a float32/float16 device table."""
    drv = drv_module()
    dtype = torch.float16 if table.dtype == np.float16 else torch.float32
    weight = torch.empty(tuple(table.shape), dtype=dtype, device="cuda")
    drv.memcpy_dtod(weight.data_ptr(), table.gpudata, table.nbytes)
    return weight


def torch_runner(torch, weight, indices_host, lengths_host):
    """embedding_bag(sum) on the same GPU, offsets form."""
    idx = torch.as_tensor(indices_host, device="cuda")
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(lengths_host)[:-1]]).astype(np.int64), device="cuda")
    return lambda: torch.nn.functional.embedding_bag(idx, weight, offsets, mode="sum")


def dequantised_half(table, dim):
    """float16 copy of a fused 8-bit table (for torch's side of the comparison)."""
    from caffe2py import core
    from caffe2py.proto import caffe2_pb2
    from caffe2py.registry import OpContext, select_kernel
    cuda0 = core.DeviceOption(caffe2_pb2.CUDA, 0)
    out = None
    for op_type, arg in (("Fused8BitRowwiseQuantizedToFloat", table), ("FloatToHalf", None)):
        op = core.CreateOperator(op_type, ["x"], ["y"], device_option=cuda0)
        entry, _, schema = select_kernel(op)
        out = entry.factory(OpContext(op, schema, 0))(arg if arg is not None else out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--bags", type=int, default=65_536)
    p.add_argument("--per-bag", type=int, default=32)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy-mb", type=int, default=1024, help="buffer size for the copy-bandwidth reference")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    bounds = must_move(args)
    print("SparseLengthsSum, %d bags x %d indices over a %d x %d table: the bytes each call must move"
          % (args.bags, args.per_bag, args.rows, args.dim))
    print(BOUND_HEADER)
    for kind, nbytes in bounds.items():
        print(bound_row(kind, nbytes))
    print()
    require_gpu()
    print("device:", describe_device())
    copy_bw = copy_bandwidth(args.copy_mb << 20)
    print("device-to-device copy: %.1f GB/s (read + written)" % gb(copy_bw))
    tables = make_tables(args.rows, args.dim, args.seed)
    idx_d, len_d, idx_h, len_h = make_batch(args.rows, args.bags, args.per_bag, args.seed + 1)
    torch = torch_cuda()
    peers = {}
    if torch is None:
        print("torch with CUDA is not installed here: no peer column")
    else:  # fused 8-bit is compared with torch on the dequantised float16 table
        peers = {"float32": torch_table(torch, tables["float32"][0]),
                 "float16": torch_table(torch, tables["float16"][0]),
                 "fused8": torch_table(torch, dequantised_half(tables["fused8"][0], args.dim))}
    print("\n| table | ours ms | HBM bound ms | ours / bound | GB/s | % of copy | launches/op | torch ms | "
          "ratio (ours/torch) |")
    print("|---|---|---|---|---|---|---|---|---|")
    n_idx = args.bags * args.per_bag
    for name, (table, row_bytes) in tables.items():
        run = sls_runner(table, idx_d, len_d, name == "fused8")
        with LaunchCounter() as launches:
            run()
        per_op, _ = time_on_stream(run, args.iters)
        moved = n_idx * row_bytes + args.bags * args.dim * 4
        peer_text, ratio_text = "-", "-"
        if peers:
            peer = time_synced(torch_runner(torch, peers[name], idx_h, len_h), torch.cuda.synchronize, args.iters)
            peer_text, ratio_text = "%.3f" % (peer * 1e3), "%.2f" % (per_op / peer)
        bound = hbm_seconds(bounds[name])
        print("| %s | %.3f | %.3f | %.2f | %.1f | %.0f%% | %d | %s | %s |" % (
            name, per_op * 1e3, bound * 1e3, per_op / bound, gb(moved / per_op), 100 * moved / per_op / copy_bw,
            launches.count, peer_text, ratio_text))
    print("\nSmall batches (fused 8-bit, %d indices per bag): time per op includes the status read-back"
          % args.per_bag)
    print("| bags | ours us/op | launches/op | torch us/op (synchronised) |")
    print("|---|---|---|---|")
    fused, _ = tables["fused8"]
    for bags in (1, 4, 16, 64):
        i_d, l_d, i_h, l_h = make_batch(args.rows, bags, args.per_bag, bags)
        run = sls_runner(fused, i_d, l_d, True)
        with LaunchCounter() as launches:
            run()
        _, wall = time_on_stream(run, 200)
        peer_text = "-"
        if peers:
            t_run = torch_runner(torch, peers["fused8"], i_h, l_h)

            def synced():
                t_run()
                torch.cuda.synchronize()
            peer_text = "%.1f" % (time_synced(synced, torch.cuda.synchronize, 200) * 1e6)
        print("| %d | %.1f | %d | %s |" % (bags, wall * 1e6, launches.count, peer_text))


if __name__ == "__main__":
    main()
