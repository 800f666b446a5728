"""rnn_cell.LSTM forward (a RecurrentNetwork op running a 3-op step net per
timestep) next to torch.nn.LSTM on the same weights, same process, alternating
blocks; also the cost of the RecurrentNetwork machinery alone (a step net with a
single Add) per timestep.

Usage: python benchmarks/rnn_bench.py [--t 50] [--n 32] [--d 128] [--h 128] [--threads 2] [--runs 30]

--suite (issue 37): the rows of benchmarks/RESULTS.md, each thread count in its own
process: Caffe2's char_rnn training step (rnn_cell.LSTM or gru_cell.GRU -> FC over
time -> Softmax -> LabelCrossEntropy -> AveragedLoss, gradients, SGD; one-hot input of
27 symbols) against torch (nn.LSTM / nn.GRU + Linear + cross entropy + SGD), and the
forward pass alone (LSTM, GRU, 2-layer LSTM), at T=25 N=1 H=100 and T=50 N=32 H=256.
CAFFE2PY_RNN_FUSED=0 in the environment times the generic step-net loop instead.

    python benchmarks/rnn_bench.py --suite [--threads 1 2] [--runs 30]

--stack LAYERS: a stacked LSTM char_rnn training step on the fused path against the
generic loop and torch, with the load average before and after:

    python benchmarks/rnn_bench.py --stack 2 --t 50 --n 32 --h 256 --threads 1 --runs 10

--step-cost (issue 37, generic path): the generic step-net loop's own cost per timestep,
a one-Add step net (s_t = s_{t-1} + x_t, N=4, D=8, T=100) run forward only (two
alternating step workspaces), forward with a backward step net (one workspace per
step) and backward (RecurrentNetworkGradient); then whole generic-path runs of
BasicRNN, LayerNormLSTM and LSTM (CAFFE2PY_RNN_FUSED=0) at T=50 N=32 H=256, forward only
and forward + backward, in ms. Medians (and minima) of --runs runs; the 1-minute load
average is printed next to each row.

    python benchmarks/rnn_bench.py --step-cost [--runs 50]
"""
import argparse
import os
import statistics

import numpy as np
from _timing import interleaved_ms, median_ms, samples_ms

from caffe2py import core, model_helper, rnn_cell, workspace

try:
    import torch
except ImportError:   # benchmark-only dependency
    torch = None


def _reorder(w):
    i, f, g, o = np.split(w.detach().numpy(), 4, axis=0)
    return np.concatenate([i, f, o, g], axis=0)


SYMBOLS = 27
SIZES = (("small", 25, 1, 100), ("large", 50, 32, 256))


def _char_rnn(kind, t, n, h, train, layers=1):
    """A caffe2py net (Caffe2's char_rnn model when train) and a torch closure doing
    the same; returns (ours, peer)."""
    from caffe2py import brew, gru_cell
    from caffe2py.optimizer import build_sgd
    workspace.ResetWorkspace()
    rng = np.random.default_rng(0)
    x = np.zeros((t, n, SYMBOLS), np.float32)
    x[np.arange(t)[:, None], np.arange(n)[None], rng.integers(0, SYMBOLS, (t, n))] = 1
    target = rng.integers(0, SYMBOLS, t * n).astype(np.int32)
    workspace.FeedBlob("input_blob", x)
    workspace.FeedBlob("target", target)
    workspace.FeedBlob("seq_lengths", np.full(n, t, np.int32))
    states = ["s%d" % k for k in range(layers * (2 if kind == "lstm" else 1))]
    for name in states:
        workspace.FeedBlob(name, np.zeros((1, n, h), np.float32))
    model = model_helper.ModelHelper(name="char_rnn_%s_%s" % (kind, train))
    dims = h if layers == 1 else [h] * layers
    if kind == "lstm":
        out = rnn_cell.LSTM(model, "input_blob", "seq_lengths", states, SYMBOLS, dims, scope="LSTM",
                            forward_only=not train)
    else:
        out = gru_cell.GRU(model, "input_blob", "seq_lengths", states, SYMBOLS, dims, scope="GRU",
                           linear_before_reset=True, forward_only=not train)
    if train:
        logits = brew.fc(model, out[0], None, dim_in=h, dim_out=SYMBOLS, axis=2)
        softmax = model.net.Softmax(logits, "softmax", axis=2)
        reshaped, _ = model.net.Reshape(softmax, ["softmax_reshaped", "_"], shape=[-1, SYMBOLS])
        xent = model.net.LabelCrossEntropy([reshaped, "target"], "xent")
        loss = model.net.AveragedLoss(xent, "loss")
        model.AddGradientOperators([loss])
        build_sgd(model, base_learning_rate=0.1 * t, policy="step", stepsize=1, gamma=0.9999)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    name = model.net.Name()

    def ours():
        workspace.RunNet(name)

    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    rnn = cls(SYMBOLS, h, num_layers=layers)
    xt = torch.from_numpy(x)
    zeros = torch.zeros(layers, n, h)
    init = (zeros, zeros.clone()) if kind == "lstm" else zeros
    if not train:
        def peer():
            with torch.no_grad():
                return rnn(xt, init)
        return ours, peer
    fc = torch.nn.Linear(h, SYMBOLS)
    opt = torch.optim.SGD(list(rnn.parameters()) + list(fc.parameters()), lr=0.1)
    tt = torch.from_numpy(target.astype(np.int64))

    def peer():
        opt.zero_grad()
        y, _ = rnn(xt, init)
        loss = torch.nn.functional.cross_entropy(fc(y).reshape(-1, SYMBOLS), tt)
        loss.backward()
        opt.step()
    return ours, peer


SUITE = (("LSTM", "lstm", True, 1), ("GRU", "gru", True, 1), ("LSTM", "lstm", False, 1),
         ("GRU", "gru", False, 1), ("LSTM 2-layer", "lstm", False, 2), ("LSTM 2-layer", "lstm", True, 2))


def fused_vs_generic(threads, runs, t, n, h, layers):
    """A stacked char_rnn LSTM training step on RecurrentNetwork's fused path against
    the generic step-net loop (CAFFE2PY_RNN_FUSED=0) and torch, alternating blocks."""
    torch.set_num_threads(threads)
    ours, peer = _char_rnn("lstm", t, n, h, True, layers)

    def generic():
        os.environ["CAFFE2PY_RNN_FUSED"] = "0"
        try:
            ours()
        finally:
            os.environ.pop("CAFFE2PY_RNN_FUSED")
    load_before = os.getloadavg()
    fused_ms, generic_ms = interleaved_ms(ours, generic, runs)
    _, torch_ms = interleaved_ms(ours, peer, runs)
    print("%d-layer LSTM train step T=%d N=%d H=%d, %d threads: fused %.1f ms, generic %.1f ms (%.2fx), "
          "torch %.1f ms (fused/torch %.2f); load average %s -> %s"
          % (layers, t, n, h, threads, fused_ms, generic_ms, generic_ms / fused_ms, torch_ms, fused_ms / torch_ms,
             "/".join("%.1f" % v for v in load_before), "/".join("%.1f" % v for v in os.getloadavg())), flush=True)


def suite(threads, runs):
    torch.set_num_threads(threads)
    for size, t, n, h in SIZES:
        for label, kind, train, layers in SUITE:
            ours, peer = _char_rnn(kind, t, n, h, train, layers)
            block_runs = runs if size == "small" else max(6, runs // 3)
            ours_ms, peer_ms = interleaved_ms(ours, peer, block_runs)
            print("| %s T=%d N=%d H=%d | %s | %s | %d | %.2f | %.2f | %.2f |"
                  % (size, t, n, h, label, "train step" if train else "forward", threads, ours_ms, peer_ms,
                     ours_ms / peer_ms), flush=True)


def _one_add_nets(t, n, d):
    """(forward-only net, training forward net, its gradient net) over a one-Add step net."""
    from caffe2py import recurrent
    rng = np.random.default_rng(0)
    workspace.FeedBlob("add_x", rng.standard_normal((t, n, d), dtype=np.float32))
    workspace.FeedBlob("add_s0", np.zeros((1, n, d), np.float32))
    nets = []
    for forward_only in (True, False):
        cell = core.Net("add_cell_%d" % forward_only)
        x_t, s_prev = cell.AddExternalInputs("x_t", "s_prev")
        s = cell.Add([s_prev, x_t], "s")
        cell.AddExternalOutput(s)
        model = model_helper.ModelHelper(name="add_rnn_%d" % forward_only)
        s_all, _ = recurrent.recurrent_net(model.net, cell, [(x_t, "add_x")], [(s_prev, "add_s0")], {s_prev: s},
                                           scope="add%d" % forward_only, forward_only=forward_only)
        if not forward_only:
            n_forward = len(model.net.Proto().op)
            workspace.FeedBlob("add_s_all_grad", np.ones((t, n, d), np.float32))
            model.AddGradientOperators({s_all: "add_s_all_grad"})
            backward = core.Net("add_rnn_backward")
            backward.Proto().op.extend(model.net.Proto().op[n_forward:])
            del model.net.Proto().op[n_forward:]
        workspace.CreateNet(model.net)
        nets.append(model.net.Name())
    workspace.RunNet(nets[1])
    workspace.CreateNet(backward)
    return nets[0], nets[1], backward.Name()


def _step_net_alone_us(net_name, t, n, d, runs):
    """Microseconds per call of the step net (the forward's, or the gradient op's backward
    step net) run alone on a dict of [1, n, d] inputs: the part of a step that is not
    the loop's."""
    from caffe2py import executor
    from caffe2py.proto import caffe2_pb2
    net_def = workspace._ws().nets[net_name].net_def     # noqa: SLF001 - benchmark only
    op = next(op for op in net_def.op if op.type.startswith("RecurrentNetwork"))
    field = "step_net" if op.type == "RecurrentNetwork" else "backward_step_net"
    step = next(a.n for a in op.arg if a.name == field)
    rng = np.random.default_rng(1)
    blobs = {name: rng.standard_normal((1, n, d), dtype=np.float32)
             for name in {b for o in step.op for b in o.input}}
    plan = executor.compile_net(caffe2_pb2.NetDef.FromString(step.SerializeToString()), blobs.keys())
    runner = plan.repeatable_runner() if hasattr(plan, "repeatable_runner") else plan._runner  # noqa: SLF001

    def steps():
        for _ in range(t):
            runner(blobs)
    with executor.cpu_run_context():
        return 1e3 * median_ms(steps, runs) / t


def _cell_nets(cell, t, n, h):
    """(forward-only net, training net) of an rnn_cell network over [t, n, h] input."""
    rng = np.random.default_rng(0)
    workspace.FeedBlob("cell_x", rng.standard_normal((t, n, h), dtype=np.float32))
    workspace.FeedBlob("cell_len", np.full(n, t, np.int32))
    names = []
    for forward_only in (True, False):
        model = model_helper.ModelHelper(name="%s_%d" % (cell.__name__ if hasattr(cell, "__name__") else "cell",
                                                         forward_only))
        states = ["cell_h0_%d" % forward_only, "cell_c0_%d" % forward_only]
        for name in states:
            workspace.FeedBlob(name, np.zeros((1, n, h), np.float32))
        kwargs = {"activation": "tanh"} if cell is rnn_cell.BasicRNN else {}
        if cell is rnn_cell.BasicRNN:
            states = states[:1]
        # BasicRNN's sequence-length masking overwrites hidden_t in place, which has no
        # gradient (in Caffe2 too): it runs without sequence lengths
        lengths = None if cell is rnn_cell.BasicRNN else "cell_len"
        out = cell(model, "cell_x", lengths, states, h, h, scope="c%d" % forward_only,
                   forward_only=forward_only, **kwargs)
        if not forward_only:
            loss = model.net.AveragedLoss(model.net.SumElements(out[0], "cell_sum"), "cell_loss")
            model.AddGradientOperators([loss])
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net)
        names.append(model.net.Name())
    return names


def _median_and_min_ms(fn, runs, warmup=2):
    samples = samples_ms(fn, runs, warmup)
    return statistics.median(samples), min(samples)


def step_cost(runs):
    """The --step-cost rows (see the module docstring)."""
    t, n, d = 100, 4, 8

    def load():
        return os.getloadavg()[0]

    fwd, train_fwd, bwd = _one_add_nets(t, n, d)
    print("one-Add step net, T=%d N=%d D=%d (us per timestep, median of %d; overhead: per step less the "
          "step net run alone)" % (t, n, d, runs))
    for label, net in (("forward (forward_only)", fwd), ("forward (with backward step net)", train_fwd),
                       ("backward (RecurrentNetworkGradient)", bwd)):
        step_ms, step_min_ms = _median_and_min_ms(lambda net=net: workspace.RunNet(net), runs)
        alone_us = _step_net_alone_us(net, t, n, d, runs)
        print("  %-36s %6.1f us/step (min %5.1f), step net alone %5.1f, overhead %5.1f us/step (min %5.1f)   "
              "load %.2f" % (label, 1e3 * step_ms / t, 1e3 * step_min_ms / t, alone_us, 1e3 * step_ms / t - alone_us,
                             1e3 * step_min_ms / t - alone_us, load()), flush=True)
    t, n, h = 50, 32, 256
    fused = os.environ.get("CAFFE2PY_RNN_FUSED")
    os.environ["CAFFE2PY_RNN_FUSED"] = "0"     # the generic path even for plain LSTM
    try:
        print("generic path, T=%d N=%d H=%d (ms per run, median of %d)" % (t, n, h, max(5, runs // 5)))
        for label, cell in (("BasicRNN", rnn_cell.BasicRNN), ("LayerNormLSTM", rnn_cell.LayerNormLSTM),
                            ("LSTM", rnn_cell.LSTM)):
            forward_only, train = _cell_nets(cell, t, n, h)
            f_ms, f_min = _median_and_min_ms(lambda: workspace.RunNet(forward_only), max(5, runs // 5))
            t_ms, t_min = _median_and_min_ms(lambda: workspace.RunNet(train), max(5, runs // 5))
            print("  %-14s forward %7.2f ms (min %7.2f)   forward+backward %7.2f ms (min %7.2f)   load %.2f"
                  % (label, f_ms, f_min, t_ms, t_min, load()), flush=True)
    finally:
        if fused is None:
            del os.environ["CAFFE2PY_RNN_FUSED"]
        else:
            os.environ["CAFFE2PY_RNN_FUSED"] = fused


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t", type=int, default=50)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--h", type=int, default=128)
    p.add_argument("--threads", type=int, nargs="+", default=[2])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--suite", action="store_true", help="the issue-37 rows (see the module docstring)")
    p.add_argument("--stack", type=int, default=0, metavar="LAYERS",
                   help="time a LAYERS-layer LSTM training step (--t --n --h) fused vs generic vs torch")
    p.add_argument("--step-cost", action="store_true", help="the generic loop's per-step cost (module docstring)")
    a = p.parse_args()
    if a.step_cost:
        os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads[0])
        step_cost(a.runs)
        return
    if a.suite:
        if torch is None:
            raise SystemExit("--suite compares against torch, which is not installed")
        if len(a.threads) > 1:          # one process per thread count (the team size is fixed per process)
            import subprocess
            import sys
            for threads in a.threads:
                subprocess.run([sys.executable, __file__, "--suite", "--threads", str(threads), "--runs",
                                str(a.runs)], check=True)
            return
        os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads[0])
        print("| size | net | step | threads | caffe2py ms | torch ms | ratio |\n|---|---|---|---|---|---|---|")
        suite(a.threads[0], a.runs)
        return
    a.threads = a.threads[0]
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    if a.stack:
        fused_vs_generic(a.threads, a.runs, a.t, a.n, a.h, a.stack)
        return
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
