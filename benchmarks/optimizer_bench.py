"""Optimizer updates: caffe2py's ops (one-op nets) next to torch.optim on the same data,
same process, alternating blocks (benchmarks/_timing.interleaved_ms).

Sparse rows (the embedding-table case): table R x D float32, a batch of K random row
indices (with duplicates, as real batches have) and their gradient rows.
  * SparseAdagrad vs torch.optim.Adagrad stepping a sparse gradient (what
    nn.Embedding(sparse=True) training does; torch sums duplicate rows first,
    caffe2py applies them one after another as Caffe2 does: the same work class);
  * ScatterWeightedSum (build_sgd's sparse update) vs torch.optim.SGD on the sparse gradient.
  Our rows run inside a net, so they include the undo record (the touched rows'
  old values, kept in case a later op fails); "no undo" runs the same compiled net
  body without the record, to show its cost.
Dense rows: Adagrad and Adam on a P-element parameter vs torch.optim (foreach).

torch is optional (benchmark-only). Usage:
  python benchmarks/optimizer_bench.py [--rows 1000000] [--dim 64] [--batch 81920]
         [--dense 1048576] [--threads 2] [--runs 30]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _timing import interleaved_ms, machine_label  # noqa: E402

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


class OneOpNet:
    """A workspace holding the inputs and a compiled one-op net updating them."""

    def __init__(self, op_type, inputs, outputs, **kwargs):
        from caffe2py import core
        from caffe2py.workspace import Workspace
        self.ws = Workspace("optim_bench_" + op_type)
        for name, value in inputs.items():
            self.ws.feed_blob(name, value)
        net = core.Net("bench_" + op_type)
        net.Proto().op.extend([core.CreateOperator(op_type, list(inputs), outputs, **kwargs)])
        self.ws.create_net(net)
        self.net = self.ws.get_net(net.Name())

    def run(self):
        self.net.run()

    def run_without_undo(self):
        from caffe2py.devices import cpu_run_context
        with cpu_run_context():
            self.net.plan._runner(self.ws.blobs)


def sparse_rows(args, rng):
    table = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    idx = rng.integers(0, args.rows, size=args.batch).astype(np.int64)
    grad = rng.standard_normal((args.batch, args.dim)).astype(np.float32)
    lr = np.array([-0.01], np.float32)
    rows = []

    ours = OneOpNet("SparseAdagrad", {"p": table.copy(), "h": np.zeros_like(table), "i": idx, "g": grad, "lr": lr},
                    ["p", "h"], epsilon=1e-5)
    rows.append(("SparseAdagrad", ours, lambda: _torch_sparse(table, idx, grad, "adagrad")))
    ours = OneOpNet("ScatterWeightedSum", {"p": table.copy(), "one": np.ones(1, np.float32), "i": idx, "g": grad,
                                           "lr": lr}, ["p"])
    rows.append(("ScatterWeightedSum (sparse SGD)", ours, lambda: _torch_sparse(table, idx, grad, "sgd")))
    return rows, args.batch * args.dim * 4


def _torch_sparse(table, idx, grad, kind):
    param = torch.nn.Parameter(torch.from_numpy(table.copy()))
    opt = (torch.optim.Adagrad([param], lr=0.01, eps=1e-5) if kind == "adagrad"
           else torch.optim.SGD([param], lr=0.01))
    index = torch.from_numpy(idx).unsqueeze(0)
    values = torch.from_numpy(grad)

    def step():
        param.grad = torch.sparse_coo_tensor(index, values, param.shape)
        opt.step()
    return step


def dense_rows(args, rng):
    p = rng.standard_normal(args.dense).astype(np.float32)
    g = rng.standard_normal(args.dense).astype(np.float32)
    lr = np.array([-0.01], np.float32)
    rows = [("Adagrad (dense)", OneOpNet("Adagrad", {"p": p.copy(), "h": np.zeros_like(p), "g": g, "lr": lr},
                                         ["p", "h"], epsilon=1e-5),
             lambda: _torch_dense(p, g, "adagrad")),
            ("Adam (dense)", OneOpNet("Adam", {"p": p.copy(), "m1": np.zeros_like(p), "m2": np.zeros_like(p),
                                               "g": g, "lr": lr, "it": np.zeros(1, np.int64)}, ["p", "m1", "m2"]),
             lambda: _torch_dense(p, g, "adam"))]
    return rows


def _torch_dense(p, g, kind):
    param = torch.nn.Parameter(torch.from_numpy(p.copy()))
    param.grad = torch.from_numpy(g)
    opt = (torch.optim.Adagrad([param], lr=0.01, eps=1e-5, foreach=True) if kind == "adagrad"
           else torch.optim.Adam([param], lr=0.01, foreach=True))
    return opt.step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=81920)
    parser.add_argument("--dense", type=int, default=1 << 20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(args.threads)
    rng = np.random.default_rng(0)
    print("machine: %s; threads %d; torch %s" % (machine_label(), args.threads,
                                                  torch.__version__ if torch else "absent"))
    if torch is not None:
        torch.set_num_threads(args.threads)
    sparse, grad_bytes = sparse_rows(args, rng)
    print("sparse: table %d x %d, %d indices per step (%.1f MB of gradient rows)"
          % (args.rows, args.dim, args.batch, grad_bytes / 1e6))
    print("%-34s %10s %10s %10s %8s" % ("case", "ours ms", "no undo", "torch ms", "ratio"))
    for name, ours, make_peer in sparse + dense_rows(args, rng):
        no_undo = interleaved_ms(ours.run_without_undo, ours.run, args.runs)[0] if "dense" not in name else None
        if torch is None:
            mine = interleaved_ms(ours.run, ours.run, args.runs)[0]
            print("%-34s %10.3f %10s %10s %8s" % (name, mine, "%.3f" % no_undo if no_undo else "-", "absent", "-"))
            continue
        mine, peer = interleaved_ms(ours.run, make_peer(), args.runs)
        print("%-34s %10.3f %10s %10.3f %8.2f" % (name, mine, "%.3f" % no_undo if no_undo else "-", peer,
                                                 mine / peer))


if __name__ == "__main__":
    main()
