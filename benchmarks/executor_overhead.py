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
"""
import argparse
import platform

import numpy as np
from _timing import median_ms

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
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
