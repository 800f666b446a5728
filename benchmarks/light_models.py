"""Latency of the onnx package's nine light_* models: caffe2py vs onnxruntime.

Batch 1, 2 threads (caffe2py's thread team and ORT's intra-op pool; ORT's workers do
not spin between runs unless --ort-spinning), same random input for both, medians of
--runs runs taken in alternating blocks (ours, ORT, ours, ...) after warm-ups. Prints
model, ours ms, ORT ms, ratio and max abs diff; --append adds the table to
benchmarks/RESULTS.md.

--layers times every Conv / pool / Gemm / LRN of each model as a single-node
ONNX model against our kernels directly (per-layer sums), which needs no ONNX
importer and shows where the time goes. --gemm-floor times only the GEMMs the
models' convolutions need (im2col shapes, caffe2py's team GEMM with nothing else): a
floor for direct convolution on this BLAS.

--op-types times each model's ops by type inside the whole model: ours every kernel call
timed inside the plan's own runs (caffe2py.benchmark.per_op_timing: its output pool and
fused loops; a model's fused ops under their fused names), ORT's from its own profiler (SessionOptions.enable_profiling, kernel times per
node, its layout reorders included), so the gap shows per kind of op with the caches
as the model leaves them.

    python benchmarks/light_models.py [--models resnet50,vgg19] [--layers] [--gemm-floor] [--op-types] [--append]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
from _timing import interleaved_ms, machine_label, median_ms

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]
THREADS = 2
CLOCK = time.perf_counter


def light_dir():
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


# onnxruntime's intra-op workers spin between parallel regions by default (they hold a
# core while idle); issue 38's done-when compares with spinning off, as caffe2py's team
# runs. --ort-spinning measures the default for reference (no effect at 1 thread: no
# workers then).
ORT_SPINNING = False


def ort_session(model_bytes):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    if not ORT_SPINNING:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def median_ms_idle(fn, runs, warmup=3):
    time.sleep(0.05)  # let the other library's spinning worker threads go idle
    return median_ms(fn, runs, warmup)


def graph_inputs(model):
    """Real inputs: graph inputs that no initializer provides."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def random_feeds(model, rng):
    import onnx.helper
    feeds = {}
    for vi in graph_inputs(model):
        dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


# ------------------------------------------------------------------ whole models

def prepare_model(name, rng):
    """(run ours, run ORT, max abs diff of their outputs) for one model, both prepared once."""
    import onnx
    from caffe2py.onnx import backend
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % name))
    feeds = random_feeds(model, rng)
    sess = ort_session(model.SerializeToString())
    ort_out = sess.run(None, feeds)
    rep = backend.prepare(model)
    ours = rep.run(feeds)
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(ours, ort_out))
    return (lambda: rep.run(feeds)), (lambda: sess.run(None, feeds)), diff


def bench_models(names, runs, repeats, rng):
    """[(name, ours ms, ORT ms, ratios, diff)]: each model measured `repeats` times in
    rounds over all models (so one model's measurements are minutes apart), each time
    in alternating blocks; ms are medians over the rounds, ratios one per round."""
    prepared = {name: prepare_model(name, rng) for name in names}
    times = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names:
            ours, ort, _ = prepared[name]
            t_ours, t_ort = interleaved_ms(ours, ort, runs, clock=CLOCK)
            times[name].append((t_ours, t_ort))
            print("%-14s round %d  ours %8.2f ms  ORT %8.2f ms  ratio %5.2f"
                  % (name, round_ + 1, t_ours, t_ort, t_ours / t_ort), flush=True)
    rows = []
    for name in names:
        ours = statistics.median(t for t, _ in times[name])
        ort = statistics.median(t for _, t in times[name])
        rows.append((name, ours, ort, [a / b for a, b in times[name]], prepared[name][2]))
    return rows


# ------------------------------------------------------------------ per layer

def blob_dims(model):
    """{blob name: dims} for every value of the model, via onnx shape inference."""
    from onnx import shape_inference
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    return {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}


def layer_shapes(model, dims=None):
    """[(node, [input shapes])] for the compute-heavy nodes."""
    dims = blob_dims(model) if dims is None else dims
    return [(node, [dims.get(i) for i in node.input]) for node in model.graph.node
            if node.op_type in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "LRN", "Gemm")]


def single_node_model(node, in_shapes, rng):
    """(model bytes, feeds, weights): x is fed, every other input is an initializer."""
    from onnx import TensorProto, helper, numpy_helper
    x_name = "x"
    inits, weights = [], []
    for k, shape in enumerate(in_shapes[1:], 1):
        arr = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        weights.append(arr)
        inits.append(numpy_helper.from_array(arr, "w%d" % k))
    new = helper.make_node(node.op_type, [x_name] + ["w%d" % k for k in range(1, len(in_shapes))], ["y"])
    new.attribute.extend(node.attribute)
    graph = helper.make_graph([new], "g", [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, in_shapes[0])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    x = rng.standard_normal(in_shapes[0]).astype(np.float32)
    return model.SerializeToString(), {x_name: x}, weights


def our_layer(node, weights):
    """A callable x -> y running our kernel for the node (ONNX attribute semantics)."""
    import onnx
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    from caffe2py.kernels.cpu.cnn import pool as pool_k
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        w = weights[0]
        b = weights[1] if len(weights) > 1 else None
        k = w.ndim - 2
        scratch = conv_k.Scratch()
        args = (attrs.get("strides", [1] * k), attrs.get("pads", [0] * 2 * k), attrs.get("dilations", [1] * k),
                attrs.get("group", 1))
        return lambda x: conv_k.conv_nchw(x, w, b, *args, scratch=scratch)
    if node.op_type in ("MaxPool", "AveragePool"):
        kernel = attrs["kernel_shape"]
        k = len(kernel)
        strides, pads = attrs.get("strides", [1] * k), attrs.get("pads", [0] * 2 * k)
        ceil = bool(attrs.get("ceil_mode", 0))
        if node.op_type == "MaxPool":
            return lambda x: pool_k.max_pool(x, kernel, strides, pads, attrs.get("dilations"), ceil)
        inc = bool(attrs.get("count_include_pad", 0))
        return lambda x: pool_k.average_pool(x, kernel, strides, pads, inc, ceil)
    if node.op_type == "GlobalAveragePool":
        return lambda x: pool_k.global_pool(x, "avg")
    if node.op_type == "LRN":
        from caffe2py.kernels.cpu.cnn import norm as norm_k
        return lambda x: norm_k.lrn(x, attrs["size"], attrs.get("alpha", 1e-4), attrs.get("beta", 0.75),
                                    attrs.get("bias", 1.0))
    if node.op_type == "Gemm":
        from caffe2py.kernels.cpu.math import gemm as gemm_k
        w, b = weights[0], weights[1] if len(weights) > 1 else None
        return lambda x: gemm_k.gemm(x, w, b, alpha=attrs.get("alpha", 1.0), beta=attrs.get("beta", 1.0),
                                     trans_a=attrs.get("transA", 0), trans_b=attrs.get("transB", 0))
    raise NotImplementedError(node.op_type)


def bench_layers(name, runs, rng, verbose):
    import onnx
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % name))
    total_ours = total_ort = 0.0
    worst = 0.0
    rows = []
    for node, shapes in layer_shapes(model):
        if node.op_type == "Gemm" and len(shapes[0]) != 2:
            continue
        blob, feeds, weights = single_node_model(node, shapes, rng)
        sess = ort_session(blob)
        x = feeds["x"]
        ref = sess.run(None, feeds)[0]
        try:
            fn = our_layer(node, weights)
            y = fn(x)
        except (NotImplementedError, ImportError, AttributeError) as exc:
            print("  skip %s %s: %s" % (node.op_type, shapes, exc))
            continue
        diff = float(np.max(np.abs(y - ref))) / max(1.0, float(np.max(np.abs(ref))))
        worst = max(worst, diff)
        t_ours = median_ms_idle(lambda: fn(x), runs, warmup=1)
        t_ort = median_ms_idle(lambda: sess.run(None, feeds), runs, warmup=1)
        total_ours += t_ours
        total_ort += t_ort
        rows.append((t_ours - t_ort, node.op_type, shapes, t_ours, t_ort))
    if verbose:
        for extra, op, shapes, a, b in sorted(rows, reverse=True)[:verbose]:
            print("    %-12s %-40s ours %7.2f ORT %7.2f" % (op, shapes[:2], a, b))
    return total_ours, total_ort, worst


def gemm_floor(name, runs):
    """(ms, GFLOP) of just the GEMMs of the model's convolutions (im2col shapes,
    batched over groups), timed bare on caffe2py's team: a floor for any im2col/GEMM
    convolution on this BLAS, with no copies, no other op and no Python in between."""
    import onnx
    from caffe2py.kernels.cpu.runtime.jit import team
    from caffe2py.kernels.cpu.math.team_gemm import gemm_into
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % name))
    total_ms = flops = 0.0
    dims = blob_dims(model)
    for node, in_shapes in layer_shapes(model, dims):
        if node.op_type != "Conv":
            continue
        w = in_shapes[1]
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        m, k = w[0] // group, int(np.prod(w[1:]))
        p = int(np.prod(dims[node.output[0]][2:]))
        a = np.ones((group, m, k), np.float32)
        b = np.ones((group, k, p), np.float32)
        c = np.empty((group, m, p), np.float32)
        with team():
            total_ms += median_ms(lambda: gemm_into(a, b, c), runs, warmup=2)
        flops += 2.0 * group * m * k * p
    return total_ms, flops / 1e9


def op_type_times(name, runs, rng):
    """({op type: [count, ms per run]} ours, the same for ORT) inside the whole model."""
    import collections
    import json
    import tempfile
    import onnx
    import onnxruntime as ort
    from caffe2py.benchmark import per_op_timing
    from caffe2py.devices import wait_for_compiled_kernels
    from caffe2py.onnx import backend
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % name))
    feeds = random_feeds(model, rng)
    rep = backend.prepare(model)
    for _ in range(3):
        rep.run(feeds)
    wait_for_compiled_kernels()
    blobs = dict(rep.constants)
    blobs.update(feeds)
    ours = collections.defaultdict(lambda: [0, 0.0])
    for step, ms in zip(rep.plan.op_steps(), per_op_timing(rep.plan, blobs, runs)[0]):
        ours[step.op_def.type][0] += 1
        ours[step.op_def.type][1] += ms
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = THREADS, 1
    if not ORT_SPINNING:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(3 + runs):
        sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node[(e["name"], e["args"]["op_name"])].append(e["dur"] / 1e3)
    theirs = collections.defaultdict(lambda: [0, 0.0])
    for (_, op_type), times in per_node.items():
        theirs[op_type][0] += 1
        theirs[op_type][1] += statistics.median(times[3:] or times)   # after the warm-ups
    return ours, theirs


def print_op_types(name, ours, theirs):
    print("%s: ours %.2f ms (sum of its ops' kernel calls), ORT %.2f ms (sum of its kernel times)"
          % (name, sum(v[1] for v in ours.values()), sum(v[1] for v in theirs.values())))
    width = max(len(k) for k in list(ours) + list(theirs))
    rows = sorted(set(ours) | set(theirs), key=lambda k: -max(ours.get(k, [0, 0])[1], theirs.get(k, [0, 0])[1]))
    for k in rows:
        a, b = ours.get(k), theirs.get(k)
        print("  %-*s %s   %s" % (width, k, "ours %3d x %8.3f ms" % tuple(a) if a else " " * 22,
                                   "ORT %3d x %8.3f ms" % tuple(b) if b else ""))


def table(rows, header):
    """rows: (name, ours ms, ORT ms, ratios of the rounds, max abs diff)."""
    lines = ["| model | %s | ORT ms | ratio (median of rounds) | ratio range | max abs diff |" % header,
             "|---|---|---|---|---|---|"]
    for name, ours, ort, ratios, diff in rows:
        spread = "%.2f-%.2f" % (min(ratios), max(ratios)) if len(ratios) > 1 else "-"
        lines.append("| %s | %.1f | %.1f | %.2f | %s | %.2g |"
                     % (name, ours, ort, statistics.median(ratios), spread, diff))
    return "\n".join(lines)


def main(argv=None):
    global THREADS, CLOCK, ORT_SPINNING
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1,
                        help="measure every model this many times, in rounds over all models")
    parser.add_argument("--layers", action="store_true", help="per-layer single-node comparison")
    parser.add_argument("--gemm-floor", action="store_true",
                        help="time only the convolutions' GEMMs (a floor for im2col/GEMM convolution on this BLAS)")
    parser.add_argument("--verbose", type=int, default=0, help="show the N slowest layers (vs ORT)")
    parser.add_argument("--op-types", action="store_true",
                        help="time each model's ops by type inside the model: ours op by op, ORT by its profiler")
    parser.add_argument("--threads", type=int, default=THREADS, help="caffe2py's team and ORT's intra-op threads")
    parser.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    parser.add_argument("--ort-spinning", action="store_true",
                        help="let onnxruntime's workers spin between parallel regions (its default; the "
                             "done-when of issue 38 measures with spinning off)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="whole models: this thread's CPU time instead of wall time (--threads 1 only: "
                             "both libraries then run on the calling thread; for a shared, loaded machine)")
    args = parser.parse_args(argv)
    THREADS = args.threads
    ORT_SPINNING = args.ort_spinning
    if args.cpu_time:
        if THREADS != 1:
            parser.error("--cpu-time needs --threads 1 (other threads' time would not be counted)")
        CLOCK = time.thread_time
    if os.environ.get("CAFFE2PY_NUM_THREADS") != str(THREADS) or os.environ.get("OPENBLAS_NUM_THREADS") != str(THREADS):
        # the team and OpenBLAS read their thread counts once: restart with them set
        os.environ["CAFFE2PY_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    rng = np.random.default_rng(0)
    rows = []
    if args.gemm_floor:
        for name in args.models.split(","):
            ms, gflop = gemm_floor(name, args.runs)
            print("%-14s conv GEMMs alone %8.2f ms  %6.2f GFLOP  %5.0f GFLOP/s" % (name, ms, gflop, gflop / ms * 1e3))
        return 0
    names = args.models.split(",")
    if args.op_types:
        for name in names:
            print_op_types(name, *op_type_times(name, args.runs, rng))
        return 0
    if args.layers:
        for name in names:
            ours, ort, diff = bench_layers(name, args.runs, rng, args.verbose)
            rows.append((name, ours, ort, [ours / ort], diff))
            print("%-14s ours %8.2f ms  ORT %8.2f ms  ratio %5.2f  max abs diff %.3g"
                  % (name, ours, ort, ours / ort, diff), flush=True)
    else:
        rows = bench_models(names, args.runs, args.repeats, rng)
    header = "ours ms (sum of layers)" if args.layers else "ours ms"
    text = table(rows, header)
    print(text)
    if args.append:
        kind = "per-layer sums (Conv/pool/Gemm/LRN as single-node models)" if args.layers else "whole models"
        load = "%.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else "n/a"
        clock = "CPU time of the thread" if args.cpu_time else "wall time"
        section = ("\n## Light ONNX models, %s: caffe2py vs onnxruntime, %d thread%s\n\n"
                   "Machine: %s; date %s; batch 1, median of %d runs (%s) in alternating blocks, "
                   "%d round%s over the models, 1-minute load average %s when the table was written; "
                   "`python benchmarks/light_models.py --threads %d --runs %d --repeats %d%s%s%s`.\n\n%s\n"
                   % (kind, THREADS, "" if THREADS == 1 else "s", machine_label(), time.strftime("%Y-%m-%d"), args.runs,
                      clock, args.repeats, "" if args.repeats == 1 else "s", load, THREADS, args.runs, args.repeats,
                      " --layers" if args.layers else "", " --cpu-time" if args.cpu_time else "",
                      " --ort-spinning" if ORT_SPINNING else "", text))
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), "a") as f:
            f.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
