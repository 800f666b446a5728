"""Int8Conv / Int8FC against onnxruntime's QLinearConv / QLinearMatMul and against our own
float32 Conv / FC on the same shapes, in one process: each a one-op net (ours) or a
one-node session (onnxruntime), medians of runs taken in alternating blocks (the three
in turn, in a rotating order, resting between blocks so no library's spinning threads slow
another's runs).

Shapes: ResNet-50's 3x3 convolutions of its four stages and two of its 1x1 layers,
MobileNet-v2's expansion 1x1, depthwise 3x3 and projection 1x1 of one block, and the
ResNet-50 classifier (2048 -> 1000) at batch 1 and 32. Batch 1 images, stride 1.
Int8 tensors are NHWC (Caffe2's layout) and the float Conv runs NCHW (its default).
Ratios: Int8Conv / QLinearConv and Int8Conv / float32 Conv (lower is better), of the
medians; the fastest run of each is shown too (on a loaded machine the least disturbed).
"max diff vs ORT": the largest difference of the uint8 outputs (Caffe2's fixed-point
rounding against onnxruntime's float rounding: at most 1).

Usage: python benchmarks/int8_bench.py [--threads 2] [--runs 15] [--only resnet]
"""
import argparse
import os
import statistics
import time

import numpy as np
from _timing import machine_label

CONVS = [  # label, H, C, M, kernel, group
    ("ResNet-50 conv2 3x3 56x56 64->64", 56, 64, 64, 3, 1),
    ("ResNet-50 conv3 3x3 28x28 128->128", 28, 128, 128, 3, 1),
    ("ResNet-50 conv4 3x3 14x14 256->256", 14, 256, 256, 3, 1),
    ("ResNet-50 conv5 3x3 7x7 512->512", 7, 512, 512, 3, 1),
    ("ResNet-50 1x1 56x56 64->256", 56, 64, 256, 1, 1),
    ("ResNet-50 1x1 14x14 1024->256", 14, 1024, 256, 1, 1),
    ("MobileNet-v2 1x1 56x56 24->144", 56, 24, 144, 1, 1),
    ("MobileNet-v2 depthwise 3x3 56x56 144", 56, 144, 144, 3, 144),
    ("MobileNet-v2 1x1 28x28 144->32", 28, 144, 32, 1, 1),
]
FCS = [("ResNet-50 FC 2048->1000, batch 1", 1, 2048, 1000), ("ResNet-50 FC 2048->1000, batch 32", 32, 2048, 1000)]


def alternating_ms(fns, runs, warmup=3, blocks=None, rest=0.3):
    """(medians, minima) in ms of `runs` calls of each fn, in alternating blocks (3 runs
    each); the order rotates from block to block, so none always runs first after the rest."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    blocks = blocks or max(3, runs // 3)
    per_block = max(1, -(-runs // blocks))
    for b in range(blocks):
        order = [(b + i) % len(fns) for i in range(len(fns))]
        for fn, out in ((fns[i], times[i]) for i in order):
            time.sleep(rest)
            fn()
            for _ in range(per_block):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(t) for t in times], [1e3 * min(t) for t in times]


def _session(model, threads):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _onnx_model(node, inputs, initializers):
    from onnx import helper
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", 2, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _scalars(helper, TensorProto, **values):
    out = []
    for name, (value, dtype) in values.items():
        out.append(helper.make_tensor(name, dtype, [], [value]))
    return out


def conv_case(rng, h, c, m, k, group, threads, ws):
    from onnx import TensorProto, helper
    from caffe2py import core
    x = rng.integers(0, 256, (1, h, h, c), dtype=np.uint8)
    w = rng.integers(0, 256, (m, k, k, c // group), dtype=np.uint8)
    b = rng.integers(-1000, 1000, m).astype(np.int32)
    xs, wsc, ys = 0.02, 0.004, 0.5
    ws.feed_blob("xq", _int8(x, xs, 120))
    ws.feed_blob("wq", _int8(w, wsc, 128))
    ws.feed_blob("bq", _int8(b, xs * wsc, 0))
    ws.feed_blob("xf", rng.standard_normal((1, c, h, h)).astype(np.float32))
    ws.feed_blob("wf", rng.standard_normal((m, c // group, k, k)).astype(np.float32))
    ws.feed_blob("bf", rng.standard_normal(m).astype(np.float32))
    q = core.Net("int8_conv_%d_%d_%d_%d" % (h, c, m, k))
    q.Int8Conv(["xq", "wq", "bq"], ["yq"], kernel=k, pad=k // 2, group=group, order="NHWC", Y_scale=ys,
               Y_zero_point=128)
    f = core.Net("float_conv_%d_%d_%d_%d" % (h, c, m, k))
    f.Conv(["xf", "wf", "bf"], ["yf"], kernel=k, pad=k // 2, group=group)
    ws.create_net(q, overwrite=True)
    ws.create_net(f, overwrite=True)
    w_nchw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            kernel_shape=[k, k], pads=[k // 2] * 4, group=group)
    inits = _scalars(helper, TensorProto, xs=(xs, 1), xz=(120, 2), ws=(wsc, 1), wz=(128, 2), ys=(ys, 1), yz=(128, 2))
    inits += [helper.make_tensor("w", 2, w_nchw.shape, w_nchw.tobytes(), raw=True),
              helper.make_tensor("b", 6, [m], b.tolist())]
    session = _session(_onnx_model(node, [helper.make_tensor_value_info("x", 2, [1, c, h, h])], inits), threads)
    feeds = {"x": np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
    ws.run_net(q.Name())
    (want,) = session.run(None, feeds)
    got = ws.fetch_blob("yq")[0].transpose(0, 3, 1, 2)
    diff = int(np.abs(got.astype(np.int32) - want.astype(np.int32)).max())
    return (lambda: ws.run_net(q.Name()), lambda: session.run(None, feeds), lambda: ws.run_net(f.Name())), diff


def fc_case(rng, batch, k, n, threads, ws):
    from onnx import TensorProto, helper
    from caffe2py import core
    x = rng.integers(0, 256, (batch, k), dtype=np.uint8)
    w = rng.integers(0, 256, (n, k), dtype=np.uint8)
    ws.feed_blob("xq", _int8(x, 0.02, 120))
    ws.feed_blob("wq", _int8(w, 0.004, 128))
    ws.feed_blob("bq", _int8(np.zeros(n, np.int32), 0.00008, 0))
    ws.feed_blob("xf", rng.standard_normal((batch, k)).astype(np.float32))
    ws.feed_blob("wf", rng.standard_normal((n, k)).astype(np.float32))
    ws.feed_blob("bf", rng.standard_normal(n).astype(np.float32))
    q = core.Net("int8_fc_%d" % batch)
    q.Int8FC(["xq", "wq", "bq"], ["yq"], Y_scale=0.5, Y_zero_point=128)
    f = core.Net("float_fc_%d" % batch)
    f.FC(["xf", "wf", "bf"], ["yf"])
    ws.create_net(q, overwrite=True)
    ws.create_net(f, overwrite=True)
    wt = np.ascontiguousarray(w.T)
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    inits = _scalars(helper, TensorProto, xs=(0.02, 1), xz=(120, 2), ws=(0.004, 1), wz=(128, 2), ys=(0.5, 1),
                     yz=(128, 2))
    inits.append(helper.make_tensor("w", 2, wt.shape, wt.tobytes(), raw=True))
    session = _session(_onnx_model(node, [helper.make_tensor_value_info("x", 2, [batch, k])], inits), threads)
    feeds = {"x": x}
    ws.run_net(q.Name())
    (want,) = session.run(None, feeds)
    diff = int(np.abs(ws.fetch_blob("yq")[0].astype(np.int32) - want.astype(np.int32)).max())
    return (lambda: ws.run_net(q.Name()), lambda: session.run(None, feeds), lambda: ws.run_net(f.Name())), diff


def _int8(data, scale, zero_point):
    from caffe2py.workspace import Int8Tensor
    return Int8Tensor(data, scale, zero_point)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--only", default="", help="run the rows whose label contains this text")
    a = p.parse_args()
    os.environ["CAFFE2PY_NUM_THREADS"] = str(a.threads)
    from caffe2py.workspace import Workspace
    print("# Int8 conv / FC, %s, %d thread(s), median of %d runs (alternating blocks), %s"
          % (machine_label(), a.threads, a.runs, time.strftime("%Y-%m-%d")))
    print("| layer | Int8 ms | onnxruntime QLinear ms | float32 ms | Int8 / ORT | Int8 / float32 | fastest runs: Int8 / "
          "ORT / float32 ms | max diff vs ORT |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    ws = Workspace("int8_bench")
    cases = [(label, lambda h=h, c=c, m=m, k=k, g=g: conv_case(rng, h, c, m, k, g, a.threads, ws))
             for label, h, c, m, k, g in CONVS]
    cases += [(label, lambda b=b, k=k, n=n: fc_case(rng, b, k, n, a.threads, ws)) for label, b, k, n in FCS]
    for label, make in cases:
        if a.only and a.only not in label:
            continue
        fns, diff = make()
        (ours, ort_ms, float_ms), best = alternating_ms(fns, a.runs)
        print("| %s | %.3f | %.3f | %.3f | %.2f | %.2f | %.3f / %.3f / %.3f | %d |"
              % (label, ours, ort_ms, float_ms, ours / ort_ms, ours / float_ms, best[0], best[1], best[2], diff),
              flush=True)


if __name__ == "__main__":
    main()
