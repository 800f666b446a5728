"""Executor cost per op: a net of 10,000 trivial ops, next to onnxruntime's cost per
node for the same chain, measured in the same process.

Rows:
  Alias chain   ours: each op returns its input (the executor's own cost + one call)
  Add chain     ours vs onnxruntime: y = x + 1 repeated on a [1] float tensor;
                'bare np.add' is the kernel alone, so ours - bare = executor overhead
  rules off     the Add chain with the schema's per-call rules (schema_rules guards:
                Add checks its inputs' dtypes) switched off, alternating with the rules-on
                run in the same process: their difference is what the per-call checks cost
  fusion off    the Add chain with elementwise fusion off (net argument fusion=0): no
                fused group's call (which declines [1]-element inputs) every 32 ops
  Mul/Relu/Sigmoid chains   the same chain with other op types (Mul: x * one)
Usage: python benchmarks/executor_overhead.py [--ops 10000] [--repeat 20]

--light-models NAMES (comma-separated light ONNX models, e.g. shufflenet,squeezenet):
the per-op cost inside real models, one thread. Ours: the model's runs with every
compiled kernel replaced by a call that does nothing (outputs are garbage), so what is
left is the executor, each op's Python (argument checks, plan lookups, output buffers,
the calls down to the kernel) and the NumPy calls between kernels: ms per run and us
per op (median and fastest of --repeat * 25 runs; the fastest is the steadiest figure
on a shared machine). Ops computed by NumPy stay real work: the one-row Gemm / FC
layers (alexnet's, vgg19's and zfnet512's are 100-400 MB of weights) and LRN
(inception_v1, alexnet), so for those models the figure is not overhead. onnxruntime
(its profiler on): each run's time minus the kernel times it reports inside that run,
median, per node. "replayed": the same model's runs once kernel replay
(caffe2py/kernel_replay.py) runs them, with every recorded call a no-op (ops that
replay as themselves keep their Python; their kernels are no-ops too).
"""
import argparse
import contextlib
import platform

import numpy as np
from _timing import machine_label, median_ms

from caffe2py import core, utils
from caffe2py.workspace import Workspace


def ours(op_type, n_ops, repeat, rules=True, fusion=True):
    import caffe2py.executor as executor
    saved = executor.runtime_guard
    if not rules:
        executor.runtime_guard = lambda schema, ctx: None
    try:
        return _ours(op_type, n_ops, repeat, fusion)
    finally:
        executor.runtime_guard = saved


def _ours(op_type, n_ops, repeat, fusion=True):
    ws = Workspace("bench")
    ws.feed_blob("x0", np.ones(1, np.float32))
    ws.feed_blob("one", np.ones(1, np.float32))
    net = core.Net("chain_%s" % op_type)
    if not fusion:
        net.Proto().arg.add().CopyFrom(utils.MakeArgument("fusion", 0))
    for i in range(n_ops):
        inputs = ["x%d" % i] + (["one"] if op_type in ("Add", "Mul") else [])
        getattr(net, op_type)(inputs, "x%d" % (i + 1))
    ws.create_net(net)
    compiled = ws.get_net(net.Name())
    return median_ms(compiled.run, repeat, warmup=1) / n_ops * 1e3


def bare_add(n_ops, repeat):
    one = np.ones(1, np.float32)

    def loop():
        x = one
        for _ in range(n_ops):
            x = np.add(x, one)
    return median_ms(loop, repeat, warmup=1) / n_ops * 1e3


def onnxruntime_add(n_ops, repeat):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    nodes = [helper.make_node("Add", ["x%d" % i, "one"], ["x%d" % (i + 1)]) for i in range(n_ops)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("x%d" % n_ops, TensorProto.FLOAT, [1])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every node
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {"x0": np.ones(1, np.float32)}
    _ = onnx  # imported to check availability
    return median_ms(lambda: sess.run(None, feed), repeat, warmup=1) / n_ops * 1e3


def light_model_overhead(name, runs):
    """(ours median ms, ours fastest ms, our op count, ORT ms outside kernels, ORT node
    count) per run of light model `name` (see the module docstring), one thread."""
    import json
    import os
    import statistics
    import tempfile
    import time
    import onnx
    import onnxruntime as ort
    import light_models as lm
    from caffe2py.devices import wait_for_compiled_kernels
    from caffe2py.kernels.cpu.runtime import jit
    from caffe2py.onnx import backend
    model = onnx.load(os.path.join(lm.light_dir(), "light_%s.onnx" % name))
    feeds = lm.random_feeds(model, np.random.default_rng(0))
    before = os.environ.get("CAFFE2PY_KERNEL_REPLAY")
    os.environ["CAFFE2PY_KERNEL_REPLAY"] = "0"      # plain runs: each op's Python (replay below)
    try:
        rep = backend.prepare(model)
    finally:
        if before is None:
            del os.environ["CAFFE2PY_KERNEL_REPLAY"]
        else:
            os.environ["CAFFE2PY_KERNEL_REPLAY"] = before
    for _ in range(3):
        rep.run(feeds)
    wait_for_compiled_kernels()

    def timed():
        for _ in range(10):
            rep.run(feeds)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            rep.run(feeds)
            times.append(time.perf_counter() - t0)
        return times
    with _kernels_as_noops(jit):
        times = timed()
    # the same with kernel replay (caffe2py/kernel_replay.py): its recorded calls no-ops
    rep = backend.prepare(model)
    for _ in range(5):
        rep.run(feeds)
    replay = rep.plan.replay
    replay_times = [float("nan")]
    if replay is not None and replay.state == "ready":
        kept = [(unit, unit.calls) for unit in replay.units]
        try:
            for unit, calls in kept:
                unit.calls = [(_nothing, args) for _, args in calls]
            with _kernels_as_noops(jit):
                replay_times = timed()
        finally:
            for unit, calls in kept:
                unit.calls = calls
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(3 + runs // 5):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    kernels = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    nodes = {e["name"] for e in kernels}
    outside = []
    for run in [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][3:]:
        inside = sum(e["dur"] for e in kernels if run["ts"] <= e["ts"] <= run["ts"] + run["dur"])
        outside.append((run["dur"] - inside) / 1e3)       # this run's time outside its kernels
    ort_ms = statistics.median(outside) if outside else float("nan")
    return (statistics.median(times) * 1e3, min(times) * 1e3, len(rep.plan.op_steps()), ort_ms, len(nodes),
            statistics.median(replay_times) * 1e3)


def _nothing(*args):
    return None


@contextlib.contextmanager
def _kernels_as_noops(jit):
    """Inside: every compiled kernel with machine code does nothing when called."""
    saved = [(k, k._run) for k in jit._all_kernels if k._run is not None]
    try:
        for kernel, _ in saved:
            kernel._run = _nothing
        yield
    finally:
        for kernel, run in saved:
            kernel._run = run


def light_models_main(names, runs):
    import os
    import sys
    if os.environ.get("CAFFE2PY_NUM_THREADS") != "1" or os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        # the team and OpenBLAS read their thread counts once: restart with them set
        os.environ["CAFFE2PY_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    print("machine: %s, Python %s; one thread; %d runs each" % (machine_label(), platform.python_version(), runs))
    print("| model | ours ms/run outside kernels (median / fastest) | ops | us/op (fastest) | "
          "replayed ms/run outside kernels (median) | onnxruntime ms/run outside kernels | nodes | us/node |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        med, fast, ops, ort_ms, nodes, replayed = light_model_overhead(name, runs)
        print("| %s | %.2f / %.2f | %d | %.1f | %.3f | %.3f | %d | %.1f |"
              % (name, med, fast, ops, fast / ops * 1e3, replayed, ort_ms, nodes, ort_ms / max(nodes, 1) * 1e3),
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--light-models", default="",
                        help="comma-separated light ONNX models: per-op cost inside them (see above)")
    args = parser.parse_args()
    if args.light_models:
        light_models_main(args.light_models.split(","), args.repeat * 25)
        return
    alias = ours("Alias", args.ops, args.repeat)
    add_on, add_off = [], []
    for _ in range(3):          # alternate, so both see the same machine load
        add_on.append(ours("Add", args.ops, args.repeat))
        add_off.append(ours("Add", args.ops, args.repeat, rules=False))
    add, add_no_rules = sorted(add_on)[1], sorted(add_off)[1]
    add_unfused = ours("Add", args.ops, args.repeat, fusion=False)
    others = [(op, ours(op, args.ops, args.repeat)) for op in ("Mul", "Relu", "Sigmoid")]
    bare = bare_add(args.ops, args.repeat)
    ort_add = onnxruntime_add(args.ops, args.repeat)
    print("machine: %s, %s; %d ops, median of %d runs" % (platform.processor() or platform.machine(),
                                                         platform.python_version(), args.ops, args.repeat))
    print("%-34s %10s" % ("measurement", "us/op"))
    print("%-34s %10.3f" % ("ours, Alias chain (executor + call)", alias))
    print("%-34s %10.3f" % ("ours, Add chain", add))
    print("%-34s %10.3f" % ("bare np.add loop (kernel only)", bare))
    print("%-34s %10.3f" % ("ours executor overhead (Add - bare)", add - bare))
    print("%-34s %10.3f" % ("ours, Add chain, schema rules off", add_no_rules))
    print("%-34s %10.3f" % ("per-call schema rules (on - off)", add - add_no_rules))
    print("%-34s %10.3f" % ("ours, Add chain, fusion off", add_unfused))
    for op, cost in others:
        print("%-34s %10.3f" % ("ours, %s chain" % op, cost))
    if ort_add is None:
        print("onnxruntime not installed: no peer row")
    else:
        print("%-34s %10.3f" % ("onnxruntime, Add chain, per node", ort_add))
        print("ratio ours/ORT (Add chain): %.2f" % (add / ort_add))


if __name__ == "__main__":
    main()
