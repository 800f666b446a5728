"""rnn_cell.LSTM forward (a RecurrentNetwork op running a 3-op step net per
timestep) next to torch.nn.LSTM on the same weights, same process, alternating
blocks; also the cost of the RecurrentNetwork machinery alone (a step net with a
single Add) per timestep.

Usage: python benchmarks/rnn_bench.py [--t 50] [--n 32] [--d 128] [--h 128] [--threads 2] [--runs 30]
"""
import argparse
import os

import numpy as np
from _timing import interleaved_ms, median_ms

from caffe2py import core, model_helper, rnn_cell, workspace

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


def _reorder(w):
    i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
    return np.concatenate([i, f, o, g], axis=0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t", type=int, default=50)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--h", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.t, a.n, a.d), dtype=np.float32)
    h0 = np.zeros((1, a.n, a.h), np.float32)
    lengths = np.full(a.n, a.t, np.int32)
    for name, value in (("input", x), ("seq_lengths", lengths), ("h0", h0), ("c0", h0)):
        workspace.FeedBlob(name, value)
    model = model_helper.ModelHelper(name="bench_lstm")
    hidden_all, _, _, _ = rnn_cell.LSTM(model, "input", "seq_lengths", ("h0", "c0"), a.d, a.h,
                                        scope="lstm", forward_only=True)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)

    def ours():
        workspace.RunNet(model.net.Name())

    # The RecurrentNetwork machinery alone: s_t = s_{t-1} + x_t (one Add per step).
    step = core.Net("acc_step")
    step.AddExternalInputs("x_t", "timestep", "s_prev")
    step.Add(["s_prev", "x_t"], "s")
    step.AddExternalOutput("s")
    workspace.FeedBlob("s0", np.zeros((a.n, a.d), np.float32))
    acc = core.Net("acc")
    acc.RecurrentNetwork(["input", "s0"], ["s_all", "s_last", "scratch"], step_net=step.Proto(),
                         recurrent_states=["s_states"], initial_recurrent_state_ids=[1],
                         link_internal=["s_prev", "s", "x_t"], link_external=["s_states", "s_states", "input"],
                         link_offset=[0, 1, 0], alias_src=["s_states", "s_states"],
                         alias_dst=["s_all", "s_last"], alias_offset=[1, -1])
    workspace.CreateNet(acc)
    acc_ms = median_ms(lambda: workspace.RunNet(acc.Name()), a.runs)
    print("RecurrentNetwork with a 1-op step net: %.3f ms for %d steps = %.1f us per step"
          % (acc_ms, a.t, 1e3 * acc_ms / a.t))

    if torch is None:
        print("torch absent: LSTM %.3f ms" % median_ms(ours, a.runs))
        return
    torch.set_num_threads(a.threads)
    ref = torch.nn.LSTM(a.d, a.h)
    for blob, param in (("i2h_w", ref.weight_ih_l0), ("i2h_b", ref.bias_ih_l0),
                        ("gates_t_w", ref.weight_hh_l0), ("gates_t_b", ref.bias_hh_l0)):
        workspace.FeedBlob("lstm/" + blob, _reorder(param))
    xt, h0t = torch.from_numpy(x), torch.from_numpy(h0)

    def peer():
        with torch.no_grad():
            return ref(xt, (h0t, h0t))

    ours()
    diff = np.abs(workspace.FetchBlob(hidden_all) - peer()[0].numpy()).max()
    ours_ms, peer_ms = interleaved_ms(ours, peer, a.runs)
    print("LSTM T=%d N=%d D=%d H=%d, %d threads: caffe2py %.3f ms, torch %.3f ms, ratio %.2f, max abs diff %.1e"
          % (a.t, a.n, a.d, a.h, a.threads, ours_ms, peer_ms, ours_ms / peer_ms, diff))


if __name__ == "__main__":
    main()
