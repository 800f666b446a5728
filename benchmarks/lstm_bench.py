"""LSTMUnit forward: caffe2py's op (run as a one-op net) next to torch composed of its
own ops (chunk, sigmoid, tanh, where), same process, same data.

Default (issue 4): N=256, D=1024, 140 of 256 rows past their sequence length, 2
threads. torch is optional (benchmark-only): without it the torch column says "absent".

Usage: python benchmarks/lstm_bench.py [--n 256] [--d 1024] [--threads 2] [--repeat 50]
"""
import argparse
import os

import numpy as np
from _timing import median_ms

from caffe2py import core
from caffe2py.workspace import Workspace

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


def torch_lstm_unit(h_prev, c_prev, gates, seq, t, forget_bias):
    i, f, o, g = gates.chunk(4, dim=-1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f + forget_bias), torch.sigmoid(o), torch.tanh(g)
    c = f * c_prev + i * g
    h = o * torch.tanh(c)
    valid = (t < seq).view(1, -1, 1)
    return torch.where(valid, h, h_prev), torch.where(valid, c, c_prev)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=50)
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    c = rng.standard_normal((1, a.n, a.d), dtype=np.float32)
    gates = rng.standard_normal((1, a.n, 4 * a.d), dtype=np.float32)
    seq = np.where(np.arange(a.n) < a.n - a.n * 140 // 256, 10, 3).astype(np.int32)
    t = np.array([5], np.int32)   # rows with seq 3 are past their length
    ws = Workspace("lstm_bench")
    for name, value in (("h", h), ("c", c), ("g", gates), ("seq", seq), ("t", t)):
        ws.feed_blob(name, value)
    net = core.Net("lstm_bench")
    net.Proto().op.extend([core.CreateOperator("LSTMUnit", ["h", "c", "g", "seq", "t"], ["H", "C"],
                                               forget_bias=1.0)])
    ws.create_net(net)
    ours = median_ms(lambda: ws.run_net(net.Name()), a.repeat)
    print("# LSTMUnit forward N=%d D=%d, %d threads, median of %d" % (a.n, a.d, a.threads, a.repeat))
    print("| case | ours ms | torch ms | ratio | max abs diff |")
    print("|---|---|---|---|---|")
    if torch is None:
        print("# torch is absent (pip install torch==2.13.0 for the peer column)")
        print("| LSTMUnit f32 | %.2f | absent | | |" % ours)
        return
    torch.set_num_threads(a.threads)
    args = [torch.from_numpy(x) for x in (h, c, gates, seq)] + [int(t[0]), 1.0]
    peer = median_ms(lambda: torch_lstm_unit(*args), a.repeat)
    th, tc = torch_lstm_unit(*args)
    diff = max(float(np.abs(ws.fetch_blob("H") - th.numpy()).max()),
               float(np.abs(ws.fetch_blob("C") - tc.numpy()).max()))
    print("| LSTMUnit f32 | %.2f | %.2f | %.2f | %.1e |" % (ours, peer, ours / peer, diff))


if __name__ == "__main__":
    main()
