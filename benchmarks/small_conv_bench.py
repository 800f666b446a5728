"""Per-layer times of the light models' small convolutions (issue #38, task S): the
C_in = 3 stems, ShuffleNet's depthwise 3x3 and grouped 1x1 layers; ours (conv_nchw
with bias, the plan conv.py picks), the path before (restored by a module switch,
`VARIANTS`) and onnxruntime's single Conv node, all on one thread, by this thread's CPU
time, in one process, taking turns round by round.

    python benchmarks/small_conv_bench.py [--kind stem,depthwise,grouped] [--runs 100]
    python benchmarks/small_conv_bench.py --models shufflenet,squeezenet --runs 10 --rounds 5
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("CAFFE2PY_NUM_THREADS", "1")
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["CAFFE2PY_NUM_THREADS"]
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import samples_ms  # noqa: E402

# (kind, name, x shape, w shape, strides, pads, group)
LAYERS = [
    ("stem", "squeezenet 3->64 3x3/s2", (1, 3, 224, 224), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0), 1),
    ("stem", "shufflenet 3->24 3x3/s2", (1, 3, 224, 224), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1), 1),
    ("stem", "alexnet 3->96 11x11/s4", (1, 3, 224, 224), (96, 3, 11, 11), (4, 4), (0, 0, 0, 0), 1),
    ("stem", "zfnet512 3->96 7x7/s2", (1, 3, 224, 224), (96, 3, 7, 7), (2, 2), (0, 0, 0, 0), 1),
    ("stem", "vgg19 3->64 3x3", (1, 3, 224, 224), (64, 3, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    ("stem", "inception/resnet 3->64 7x7/s2", (1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3), 1),
    ("depthwise", "112 at 56 s2", (1, 112, 56, 56), (112, 1, 3, 3), (2, 2), (1, 1, 1, 1), 112),
    ("depthwise", "136 at 28 s2", (1, 136, 28, 28), (136, 1, 3, 3), (2, 2), (1, 1, 1, 1), 136),
    ("depthwise", "272 at 14 s2", (1, 272, 14, 14), (272, 1, 3, 3), (2, 2), (1, 1, 1, 1), 272),
    ("depthwise", "136 at 28 s1 [x3]", (1, 136, 28, 28), (136, 1, 3, 3), (1, 1), (1, 1, 1, 1), 136),
    ("depthwise", "272 at 14 s1 [x7]", (1, 272, 14, 14), (272, 1, 3, 3), (1, 1), (1, 1, 1, 1), 272),
    ("depthwise", "544 at 7 s1 [x3]", (1, 544, 7, 7), (544, 1, 3, 3), (1, 1), (1, 1, 1, 1), 544),
    ("grouped", "24->112 at 56", (1, 24, 56, 56), (112, 6, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "112->112 at 28", (1, 112, 28, 28), (112, 28, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "136->136 at 28 [x7]", (1, 136, 28, 28), (136, 34, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "136->136 at 14", (1, 136, 14, 14), (136, 34, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "272->272 at 14 [x15]", (1, 272, 14, 14), (272, 68, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "272->272 at 7", (1, 272, 7, 7), (272, 68, 1, 1), (1, 1), (0, 0, 0, 0), 4),
    ("grouped", "544->544 at 7 [x6]", (1, 544, 7, 7), (544, 136, 1, 1), (1, 1), (0, 0, 0, 0), 4),
]


def _set(module, name, value):
    def apply():
        from caffe2py.kernels.cpu.cnn import conv as conv_k
        setattr(module(), name, value)
        conv_k._plan.cache_clear()
    return apply


def _depthwise():
    from caffe2py.kernels.cpu.cnn import depthwise
    return depthwise


def _stem():
    from caffe2py.kernels.cpu.cnn import stem_conv
    return stem_conv


def _grouped():
    from caffe2py.kernels.cpu.cnn import grouped_pointwise
    return grouped_pointwise


# kind -> (switch to the older path, switch back): the flattened-row GEMM or direct_conv
# for the stems, _depthwise's strided loads, a BLAS GEMM per group
VARIANTS = {
    "stem": (_set(_stem, "STEM_MAX_CHANNELS", 0), _set(_stem, "STEM_MAX_CHANNELS", 4)),
    "depthwise": (_set(_depthwise, "PHASED", False), _set(_depthwise, "PHASED", True)),
    "grouped": (_set(_grouped, "DIRECT_MIN_PIXELS", 1 << 30), _set(_grouped, "DIRECT_MIN_PIXELS", 24)),
}


def ort_conv(x, w, b, strides, pads, group):
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(strides), pads=list(pads), group=group)
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})[0]


def alternating(variants, runs, rounds=5):
    """Per (switch, fn) variant, the samples (ms, this thread's CPU time) of `rounds`
    rounds of runs / rounds calls each after switch(), the variants taking turns round
    by round (so all see the same machine load)."""
    times = [[] for _ in variants]
    for _ in range(rounds):
        for (switch, fn), out in zip(variants, times):
            switch()
            out.extend(samples_ms(fn, max(1, runs // rounds), warmup=2, clock=time.thread_time))
    return times


def models_before_after(names, rounds, runs):
    """Whole light models, one process: every path of this task switched to the one
    before and back, alternating per round with onnxruntime; medians (ms) of the rounds'
    medians of this thread's CPU time per run."""
    import light_models
    light_models.THREADS = 1
    print("| model | before | after | onnxruntime | before / ort | after / ort |")
    print("|---|---|---|---|---|---|")
    for name in names:
        ours, ort, _ = light_models.prepare_model(name, np.random.default_rng(0))
        olds = [switch for switch, _ in VARIANTS.values()]
        news = [switch for _, switch in VARIANTS.values()]
        rounds_ms = alternating([(lambda: [f() for f in olds], ours), (lambda: [f() for f in news], ours),
                                 (lambda: None, ort)], runs * rounds, rounds)
        per_round = [[statistics.median(t[r * runs:(r + 1) * runs]) for r in range(rounds)] for t in rounds_ms]
        t_old, t_new, t_ort = (statistics.median(v) for v in per_round)
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (name, t_old, t_new, t_ort, t_old / t_ort, t_new / t_ort))
        sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="stem,depthwise,grouped")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--match", default="", help="only layers whose name contains this")
    parser.add_argument("--models", default="", help="whole light models instead (comma-separated)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.models:
        models_before_after(args.models.split(","), args.rounds, args.runs)
        return
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    from caffe2py.kernels.cpu.runtime.jit import wait_for_kernels
    rng = np.random.default_rng(0)
    kinds = args.kind.split(",")
    print("median (fastest) of %d calls each, ms" % args.runs)
    print("| layer | plan | before | after | onnxruntime | after / ort |")
    print("|---|---|---|---|---|---|")
    for kind, name, xs, ws, strides, pads, group in LAYERS:
        if kind not in kinds or args.match not in name:
            continue
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        b = (rng.standard_normal(ws[0]) * 0.1).astype(np.float32)
        to_old, to_new = VARIANTS[kind]
        scratch = conv_k.Scratch()

        def ours():
            return conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), group, scratch=scratch)

        ort = ort_conv(x, w, b, strides, pads, group)
        want = ort()
        for switch in (to_old, to_new):
            switch()
            err = np.abs(ours() - want).max()
            assert err < 1e-3, (name, err)
        wait_for_kernels()
        plan = conv_k._plan(xs, ws, strides, pads, (1, 1), group, "<f4")
        kind_name = getattr(getattr(plan.compute, "product", plan.compute), "__qualname__", "?").split(".")[0]
        t_old, t_new, t_ort = alternating([(to_old, ours), (to_new, ours), (to_new, ort)], args.runs)
        cells = ["%.3f (%.3f)" % (statistics.median(t), min(t)) for t in (t_old, t_new, t_ort)]
        print("| %s | %s | %s | %s | %s | %.2f |" % (name, kind_name, *cells, statistics.median(t_new) /
                                                      statistics.median(t_ort)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
