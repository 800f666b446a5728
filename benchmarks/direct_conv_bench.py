"""Per-layer times of the small-input-channel convolutions of the light ONNX models:
the plan conv.py picks with the direct kernel switched off (DIRECT_MAX_K = 0), the direct kernel
(kernels/cpu/cnn/direct_conv.py) and onnxruntime (one Conv + Relu node), alternating
in blocks so all three see the same machine load. Bias and a fused ReLU on every side.

    python benchmarks/direct_conv_bench.py --threads 1 [--cpu-time]
    python benchmarks/direct_conv_bench.py --threads 2
    python benchmarks/direct_conv_bench.py --threads 1 --models squeezenet,inception_v1
    python benchmarks/direct_conv_bench.py --threads 1 --sweep [--sweep-models resnet50]

--sweep: every distinct group-1 convolution with C_in >= 16 of the light models, 1 thread,
this thread's CPU time: the plan conv.py picks without the blocked direct kernel
(conv.BLOCKED_DIRECT off), the blocked kernel forced, and onnxruntime's single Conv node,
alternating in rounds; what conv.py picks now is named in the last column.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

# (name, x shape, w shape, strides, pads)
LAYERS = [
    ("squeezenet conv1", (1, 3, 224, 224), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)),
    ("shufflenet conv1", (1, 3, 224, 224), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1)),
    ("inception conv1 7x7", (1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
    ("squeezenet 16->64 55", (1, 16, 55, 55), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1)),
    ("squeezenet 32->128 27", (1, 32, 27, 27), (128, 32, 3, 3), (1, 1), (1, 1, 1, 1)),
    ("squeezenet 48->192 13", (1, 48, 13, 13), (192, 48, 3, 3), (1, 1), (1, 1, 1, 1)),
    ("squeezenet 64->256 13", (1, 64, 13, 13), (256, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
]


def ort_conv(x, w, b, strides, pads, threads):
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(strides), pads=list(pads))
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(
        [node, relu], "conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})[0]


def models_with_and_without(names, rounds, runs, switch="blocked"):
    """Whole light models, one process: the direct kernel on and off alternating per
    round, this thread's CPU time per run (run with --threads 1). switch: "blocked"
    (conv.BLOCKED_DIRECT, the cache-blocked dispatch) or "short" (DIRECT_MAX_K, the
    short-reduction rule)."""
    import light_models
    from _timing import median_ms
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    name_of, saved = ("BLOCKED_DIRECT", True) if switch == "blocked" else ("DIRECT_MAX_K", conv_k.DIRECT_MAX_K)
    off = False if switch == "blocked" else 0
    print("| model | with direct ms (median of rounds) | without ms | rounds with / without |")
    print("|---|---|---|---|")
    for name in names:
        ours, _, _ = light_models.prepare_model(name, np.random.default_rng(0))
        times = {True: [], False: []}
        for _ in range(rounds):
            for on in (True, False):
                setattr(conv_k, name_of, saved if on else off)
                conv_k._plan.cache_clear()
                times[on].append(median_ms(ours, runs, warmup=2, clock=time.thread_time))
        setattr(conv_k, name_of, saved)
        conv_k._plan.cache_clear()
        print("| %s | %.2f | %.2f | %s / %s |" % (name, statistics.median(times[True]), statistics.median(times[False]),
                                                 " ".join("%.1f" % v for v in times[True]),
                                                 " ".join("%.1f" % v for v in times[False])), flush=True)


def light_convs(names):
    """{(x shape, w shape, strides, pads): [count, first model]} of the group-1 convs with C_in >= 16."""
    import onnx
    import light_models
    seen = {}
    for name in names:
        model = onnx.load(os.path.join(light_models.light_dir(), "light_%s.onnx" % name))
        for node, shapes in light_models.layer_shapes(model):
            if node.op_type != "Conv":
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("group", 1) != 1 or shapes[0][1] < 16 or any(d != 1 for d in attrs.get("dilations", [1, 1])):
                continue
            key = (tuple(shapes[0]), tuple(shapes[1]), tuple(attrs.get("strides", [1, 1])),
                   tuple(attrs.get("pads", [0, 0, 0, 0])))
            seen.setdefault(key, [0, name])[0] += 1
    return seen


def sweep(names, rounds, runs):
    """The --sweep table (see the module docstring)."""
    from _timing import median_ms
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    from caffe2py.kernels.cpu.cnn.direct_conv import direct_plan
    from caffe2py.kernels.cpu.runtime.buffers import Scratch
    from caffe2py.kernels.cpu.runtime.jit import team
    rng = np.random.default_rng(0)
    print("| layer (x, w, stride) | count | model | before ms (GF/s) | blocked direct ms (GF/s) "
          "| onnxruntime ms (GF/s) | picked now |")
    print("|---|---|---|---|---|---|---|")
    for (xs, ws, strides, pads), (count, model) in light_convs(names).items():
        x = rng.standard_normal(xs).astype(np.float32)
        w = (0.1 * rng.standard_normal(ws)).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32)
        saved, conv_k.BLOCKED_DIRECT = conv_k.BLOCKED_DIRECT, False
        conv_k._plan.cache_clear()
        before = conv_k._plan(xs, ws, strides, pads, (1, 1), 1, "<f4")
        conv_k.BLOCKED_DIRECT = saved
        conv_k._plan.cache_clear()
        now = conv_k._plan(xs, ws, strides, pads, (1, 1), 1, "<f4")
        out_spatial = before.out_shape[2:]
        direct = direct_plan(xs, ws, strides, pads, (1, 1), out_spatial, "<f4")
        out = np.empty(before.out_shape, np.float32)
        s1, s2 = Scratch(), Scratch()

        def run_before():
            with team():
                if before.fuses_output:
                    before.compute(x, w, out, s1, b, True, None)
                else:
                    before.compute(x, w, out, s1)
                    conv_k.finish_channels(out, b, None, True)

        def run_direct():
            with team():
                direct(x, w, out, s2, b, True, None)
        ort = ort_conv(x, w, b, strides, pads, 1)
        run_before()
        want = out.copy()
        run_direct()
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
        fns = (run_before, run_direct, ort)
        times = ([], [], [])
        for _ in range(rounds):
            for fn, acc in zip(fns, times):
                acc.append(median_ms(fn, runs, 1, clock=time.thread_time))
        flop = 2.0 * np.prod(ws) * np.prod(out_spatial)
        med = [statistics.median(t) for t in times]
        kind = getattr(now.compute, "__qualname__", "?").split(".")[0]
        print("| %s %s s%d p%d | %d | %s | %s | %s | %s | %s |" % (
            list(xs[1:]), list(ws), strides[0], pads[0], count, model,
            *("%.3f (%.0f)" % (t, flop / t / 1e6) for t in med), kind), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--cpu-time", action="store_true",
                        help="this thread's CPU time instead of wall time (--threads 1 only): on a shared "
                             "machine the time other processes hold the core does not count")
    parser.add_argument("--models", default="",
                        help="comma-separated light ONNX models: time them whole with and without the direct "
                             "kernel instead of the layers (CPU time; needs --threads 1)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--switch", choices=("blocked", "short"), default="blocked",
                        help="--models: which rule to switch off (the blocked dispatch or the short-reduction one)")
    parser.add_argument("--sweep", action="store_true", help="every light-model conv with C_in >= 16 (1 thread)")
    parser.add_argument("--sweep-models", default="bvlc_alexnet,densenet121,inception_v1,inception_v2,resnet50,"
                        "squeezenet,zfnet512,vgg19,shufflenet")
    args = parser.parse_args()
    if (args.models or args.sweep) and args.threads != 1:
        parser.error("--models needs --threads 1")
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    if os.environ.get("CAFFE2PY_NUM_THREADS") != str(args.threads):
        env = dict(os.environ, CAFFE2PY_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _timing  # noqa: F401 - sets CAFFE2PY_JIT=inline
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    from caffe2py.kernels.cpu.cnn.direct_conv import direct_plan
    from caffe2py.kernels.cpu.runtime.buffers import Scratch
    from caffe2py.kernels.cpu.runtime.jit import team

    if args.sweep:
        print("machine: %s; load average %s; 1 thread, CPU time" % (
            _timing.machine_label(), ", ".join("%.2f" % v for v in os.getloadavg())))
        sweep(args.sweep_models.split(","), 5, 5)
        return
    if args.models:
        print("machine: %s; load average %s; 1 thread, CPU time" % (
            _timing.machine_label(), ", ".join("%.2f" % v for v in os.getloadavg())))
        models_with_and_without(args.models.split(","), args.rounds, 15, args.switch)
        return
    rng = np.random.default_rng(0)
    print("machine: %s; load average %s; %d thread(s), %s" % (
        _timing.machine_label(), ", ".join("%.2f" % v for v in os.getloadavg()), args.threads,
        "CPU time" if args.cpu_time else "wall time"))
    print("| layer | without direct ms | direct ms | onnxruntime ms | without / direct | direct / onnxruntime |")
    print("|---|---|---|---|---|---|")
    for name, xs, ws, strides, pads in LAYERS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = (0.1 * rng.standard_normal(ws)).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32)
        out_spatial = tuple(conv_k.conv_output_size(xs[2 + i], ws[2 + i], strides[i], pads[i], pads[2 + i], 1)
                            for i in range(2))
        out = np.empty((xs[0], ws[0]) + out_spatial, np.float32)
        # the plan conv.py picks with the direct kernel switched off
        saved, conv_k.DIRECT_MAX_K = conv_k.DIRECT_MAX_K, 0
        conv_k._plan.cache_clear()
        current = conv_k._plan(xs, ws, strides, pads, (1, 1), 1, "<f4")
        conv_k.DIRECT_MAX_K = saved
        conv_k._plan.cache_clear()
        direct = direct_plan(xs, ws, strides, pads, (1, 1), out_spatial, "<f4")
        s1, s2 = Scratch(), Scratch()
        assert current.compute is not direct

        def run_current():
            with team():
                if current.fuses_output:
                    current.compute(x, w, out, s1, b, True, None)
                else:
                    current.compute(x, w, out, s1)
                    conv_k.finish_channels(out, b, None, True)

        def run_direct():
            with team():
                direct(x, w, out, s2, b, True, None)
        ort = ort_conv(x, w, b, strides, pads, args.threads)
        run_current()
        want = out.copy()
        run_direct()
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(ort(), want, rtol=1e-3, atol=1e-3)
        fns = (run_current, run_direct, ort)
        times = ([], [], [])
        for fn in fns:
            fn()
        per_block = max(1, args.runs // args.blocks)
        for _ in range(args.blocks):
            for fn, acc in zip(fns, times):
                time.sleep(0.2)                # the other library's spinning threads go idle
                fn()
                for _ in range(per_block):
                    t0 = clock()
                    fn()
                    acc.append(1e3 * (clock() - t0))
        med = [statistics.median(t) for t in times]
        print("| %s %s x %s s%d | %.3f | %.3f | %.3f | %.2f | %.2f |" % (
            name, list(xs[1:]), list(ws), strides[0], med[0], med[1], med[2], med[0] / med[1], med[1] / med[2]))


if __name__ == "__main__":
    main()
