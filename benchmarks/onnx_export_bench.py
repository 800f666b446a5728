"""The exported embedding lookups (standard ONNX ops: a [segments, max length]
grid built from LENGTHS, Gather, masked ReduceSum) run by onnxruntime, next to
caffe2py's own lookup kernels on the same Caffe2 op, same process, alternating
blocks, one thread each; and how long exports take.

Rows (table 200,000 x 64, 512 segments), at opset 17 (the ScatterND form) and 15
(the ReduceSum grid form):
  uniform   lengths uniform in [0, 40] (mean 20)
  skewed    the same, plus one segment of 400: the grid is 512 x 400, so the
            exported form gathers and masks ~20x more rows than it sums
Usage: CAFFE2PY_NUM_THREADS=1 python benchmarks/onnx_export_bench.py [--runs 30]
"""
import argparse
import datetime
import os
import time

os.environ.setdefault("CAFFE2PY_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _timing import interleaved_ms, machine_label  # noqa: E402

from caffe2py import core  # noqa: E402
from caffe2py.onnx import frontend  # noqa: E402
from caffe2py.workspace import Workspace  # noqa: E402

ROWS, DIM, SEGMENTS = 200_000, 64, 512


def lookup_case(ort, op, skewed, rng, opset):
    weighted = "Weighted" in op
    fused = "Fused" in op
    lengths = rng.integers(0, 41, SEGMENTS).astype(np.int32)
    if skewed:
        lengths[7] = 400
    n = int(lengths.sum())
    feeds = {"idx": rng.integers(0, ROWS, n).astype(np.int64), "len": lengths,
             "w": rng.random(n).astype(np.float32)}
    ws = Workspace("onnx_export_bench_%s_%d" % (op, skewed))
    init = core.Net("init")
    init.GaussianFill([], "table_f" if fused else "table", shape=[ROWS, DIM])
    init.Proto().op[0].device_option.random_seed = 7    # the export runs the init net again: same table
    if fused:
        init.FloatToFused8BitRowwiseQuantized(["table_f"], "table")
    ws.run_net_once(init)
    net = core.Net("lookup_%s_%d" % (op, skewed))
    getattr(net, op)(["table", "w", "idx", "len"] if weighted else ["table", "idx", "len"], "out")
    net.Proto().external_input.extend(["table", "idx", "len", "w"])
    net.Proto().external_output.append("out")
    for k, v in feeds.items():
        ws.feed_blob(k, v)
    ws.create_net(net)
    ours = ws.get_net(net.Name()).run
    value_info = {"idx": (7, ["n"]), "len": (6, ["batch"]), "w": (1, ["n"])}
    model = frontend.export(net.Proto(), init.Proto(), value_info, opset=opset).model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ours()
    np.testing.assert_allclose(session.run(None, feeds)[0], ws.fetch_blob("out"), rtol=1e-4, atol=1e-3)
    return ours, lambda: session.run(None, feeds), n


def export_times(runs=3):
    import onnx
    from caffe2py.onnx import convert
    from caffe2py.onnx.convert import graph_inputs
    rows = []
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for name in ("light_squeezenet", "light_resnet50", "light_densenet121"):
        model = onnx.load(os.path.join(light, name + ".onnx"))
        init, pred = convert(model)
        data = next(v for v in model.graph.input if v.name == graph_inputs(model)[0])
        shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
        best = float("inf")
        for _ in range(runs):
            t0 = time.perf_counter()
            frontend.export(pred, init, {data.name: (1, shape)})
            best = min(best, time.perf_counter() - t0)
        rows.append((name, len(pred.op), best))
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    import onnxruntime as ort
    rng = np.random.default_rng(0)
    print("machine: %s; onnxruntime %s (1 thread), caffe2py %s thread(s); %s"
          % (machine_label(), ort.__version__, os.environ["CAFFE2PY_NUM_THREADS"], datetime.date.today()))
    print("%-56s %8s %10s %10s %7s" % ("lookup (ours: caffe2py's kernel; ort: the export)", "indices",
                                        "ours ms", "ort ms", "ratio"))
    for op in ("SparseLengthsSum", "SparseLengthsWeightedSumFused8BitRowwise"):
        for opset in (17, 15):      # ScatterND add form, ReduceSum grid form
            for skewed in (False, True):
                ours, peer, n = lookup_case(ort, op, skewed, rng, opset)
                a, b = interleaved_ms(ours, peer, args.runs)
                label = "%s %s opset %d" % (op, "skewed" if skewed else "uniform", opset)
                print("%-56s %8d %10.3f %10.3f %7.2f" % (label, n, a, b, a / b))
    print("\nexport time (best of 3): model, predict ops, seconds")
    for name, ops, seconds in export_times():
        print("  %-22s %5d ops %7.2f s" % (name, ops, seconds))


if __name__ == "__main__":
    main()
