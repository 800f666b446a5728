"""The light models' pooling layers one by one: caffe2py's max_pool / average_pool
against onnxruntime's single-node MaxPool / AveragePool (NCHW, its own threads), timed
in alternating blocks (_timing.interleaved_ms). One thread: this thread's CPU time on
both sides (time.thread_time: on a shared machine the time other processes hold the
core does not count); more threads: wall time.

    python benchmarks/pool_layers.py [--threads 1] [--only avg,max27]
"""
import argparse
import os
import sys
import time

import numpy as np
from _timing import interleaved_ms

# label, op, input shape, kernel, strides, pads (begins, ends), count_include_pad
LAYERS = [
    ("shufflenet max 3x3/s2 p1", "MaxPool", (1, 24, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ("shufflenet avg 3x3/s2 p1 56", "AveragePool", (1, 24, 56, 56), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ("shufflenet avg 3x3/s2 p1 28", "AveragePool", (1, 136, 28, 28), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ("shufflenet avg 3x3/s2 p1 14", "AveragePool", (1, 272, 14, 14), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ("squeezenet max 3x3/s2 111", "MaxPool", (1, 64, 111, 111), [3, 3], [2, 2], [0, 0, 0, 0], 0),
    ("squeezenet max 3x3/s2 55", "MaxPool", (1, 128, 55, 55), [3, 3], [2, 2], [0, 0, 0, 0], 0),
    ("squeezenet max 3x3/s2 27", "MaxPool", (1, 256, 27, 27), [3, 3], [2, 2], [0, 0, 0, 0], 0),
    ("inception_v2 max 3x3/s2 end-pad 112", "MaxPool", (1, 64, 112, 112), [3, 3], [2, 2], [0, 0, 1, 1], 0),
    ("inception_v2 max 3x3/s2 end-pad 56", "MaxPool", (1, 192, 56, 56), [3, 3], [2, 2], [0, 0, 1, 1], 0),
    ("inception_v2 avg 3x3/s1 p1 28", "AveragePool", (1, 256, 28, 28), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v2 avg 3x3/s1 p1 14", "AveragePool", (1, 576, 14, 14), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v2 avg 3x3/s1 p1 7", "AveragePool", (1, 1024, 7, 7), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v2 max 3x3/s1 p1 7", "MaxPool", (1, 1024, 7, 7), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v1 max 3x3/s1 p1 27", "MaxPool", (1, 256, 27, 27), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v1 max 3x3/s1 p1 13", "MaxPool", (1, 512, 13, 13), [3, 3], [1, 1], [1, 1, 1, 1], 0),
    ("inception_v1 avg 7x7/s1 end-pad 6", "AveragePool", (1, 1024, 6, 6), [7, 7], [1, 1], [0, 0, 1, 1], 0),
    ("densenet121 max 3x3/s2 p1 112", "MaxPool", (1, 64, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ("densenet121 avg 2x2/s2 56", "AveragePool", (1, 128, 56, 56), [2, 2], [2, 2], [0, 0, 0, 0], 0),
]


def ort_pool_session(op, shape, kernel, strides, pads, include_pad, threads):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads)
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--only", default="", help="comma-separated substrings of the layer labels")
    args = parser.parse_args(argv)
    if os.environ.get("CAFFE2PY_NUM_THREADS") != str(args.threads):
        # the team and OpenBLAS read their thread counts once: restart with them set
        os.environ["CAFFE2PY_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    from caffe2py.kernels.cpu.cnn import pool as pool_k
    from caffe2py.kernels.cpu.runtime.jit import team
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    rng = np.random.default_rng(0)
    print("threads %d, load average %.2f %.2f %.2f" % ((args.threads,) + os.getloadavg()))
    totals = [0.0, 0.0]
    for label, op, shape, kernel, strides, pads, include_pad in LAYERS:
        if args.only and not any(o in label for o in args.only.split(",")):
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        sess = ort_pool_session(op, shape, kernel, strides, pads, include_pad, args.threads)
        if op == "MaxPool":
            def ours():
                return pool_k.max_pool(x, kernel, strides, pads)
        else:
            def ours():
                return pool_k.average_pool(x, kernel, strides, pads, bool(include_pad))
        with team():
            err = float(np.abs(ours() - sess.run(None, {"x": x})[0]).max())
            a, b = interleaved_ms(ours, lambda: sess.run(None, {"x": x}), args.runs, clock=clock)
        totals[0] += a
        totals[1] += b
        print("%-38s ours %7.3f ms  ORT %7.3f ms  %5.2fx  max abs diff %.1e" % (label, a, b, a / b, err))
    print("%-38s ours %7.3f ms  ORT %7.3f ms  %5.2fx" % ("total", totals[0], totals[1], totals[0] / totals[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
