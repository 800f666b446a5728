"""Per-layer times of the light models' small convolutions (issue #38, task S): the
C_in = 3 stems, ShuffleNet's depthwise 3x3 and grouped 1x1 layers; ours (conv_nchw
with bias, the plan conv.py picks) against onnxruntime's single Conv node, both on one
thread, by this thread's CPU time, in alternating blocks. Where a layer has an older
path that a module switch restores (`VARIANTS`), both are timed in the same process.

    python benchmarks/small_conv_bench.py [--kind stem,depthwise,grouped] [--runs 30]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("CAFFE2PY_NUM_THREADS", "1")
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["CAFFE2PY_NUM_THREADS"]
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved_ms  # noqa: E402

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


def _conv():
    from caffe2py.kernels.cpu.cnn import conv
    return conv


# kind -> (label of the older path, switch to it, switch back)
VARIANTS = {
    "depthwise": ("strided loads", _set(_depthwise, "PHASED", False), _set(_depthwise, "PHASED", True)),
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="stem,depthwise,grouped")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--match", default="", help="only layers whose name contains this")
    args = parser.parse_args()
    from caffe2py.kernels.cpu.cnn import conv as conv_k
    from caffe2py.kernels.cpu.runtime.jit import wait_for_kernels
    rng = np.random.default_rng(0)
    kinds = args.kind.split(",")
    print("| layer | plan | ours ms | older path ms | onnxruntime ms | ours / ort |")
    print("|---|---|---|---|---|---|")
    for kind, name, xs, ws, strides, pads, group in LAYERS:
        if kind not in kinds or args.match not in name:
            continue
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        b = (rng.standard_normal(ws[0]) * 0.1).astype(np.float32)
        scratch = conv_k.Scratch()

        def ours():
            return conv_k.conv_nchw(x, w, b, strides, pads, (1, 1), group, scratch=scratch)
        ort = ort_conv(x, w, b, strides, pads, group)
        err = np.abs(ours() - ort()).max()
        wait_for_kernels()
        plan = conv_k._plan(xs, ws, strides, pads, (1, 1), group, "<f4")
        kind_name = getattr(plan.compute, "__qualname__", "?").split(".")[0]
        older = "-"
        if kind in VARIANTS:
            _, to_old, to_new = VARIANTS[kind]
            to_old()
            t_old, _ = interleaved_ms(ours, ort, args.runs, clock=time.thread_time)
            to_new()
            older = "%.3f" % t_old
        t_ours, t_ort = interleaved_ms(ours, ort, args.runs, clock=time.thread_time)
        assert err < 1e-3, (name, err)
        print("| %s | %s | %.3f | %s | %.3f | %.2f |" % (name, kind_name, t_ours, older, t_ort, t_ours / t_ort))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
