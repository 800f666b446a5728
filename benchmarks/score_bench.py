"""Throughput of `caffe2py score` (rows/s) next to onnxruntime on the same model and
batch size, in the same process: the built-in demo net (exported to ONNX for
onnxruntime with caffe2py.onnx.frontend) and the onnx package's light_squeezenet
(its batch dim made symbolic so batches of any size run).

Per model and round, in an order that alternates between rounds:
  ORT       onnxruntime on the rows held in memory, batch by batch (2 intra-op threads)
  ours mem  caffe2py's prepared model on the same arrays (what score runs per batch)
  score w1  run_job over the Parquet shards, this process (model preparation included)
  score w2  run_job with 2 spawned worker processes (start-up and preparation included)
  ray w2    run_job on Ray Data with 2 actors (Ray started once before; actor start-up
            and preparation included)
Every score run writes fresh output files; their values are checked against
onnxruntime's (max abs diff printed).

    python benchmarks/score_bench.py [--models demo,squeezenet] [--rounds 2] [--no-ray] [--append]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
from _timing import machine_label

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# onnxruntime's intra-op threads: CAFFE2PY_NUM_THREADS when set (ours follow it too), else 2
THREADS = int(os.environ.get("CAFFE2PY_NUM_THREADS") or 2)
# rows per shard, shards, batch size: enough rows that a run lasts several seconds
MODELS = {"demo": (512, 4, 64), "squeezenet": (16, 4, 16)}


def ort_session(model_bytes):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def demo_model(folder):
    """(ModelSpec, ONNX bytes for ORT, input name, row shape, output name)."""
    import onnx
    from caffe2py.demo import INPUT, OUTPUT, build_demo
    from caffe2py.onnx import frontend
    from caffe2py.scoring import ModelSpec
    init_net, predict_net, _ = build_demo()
    exported = frontend.export(predict_net, init_net,
                               value_info={INPUT: (onnx.TensorProto.FLOAT, ("N", 1, 28, 28))})
    return ModelSpec(), exported.model.SerializeToString(), INPUT, (1, 28, 28), OUTPUT


def squeezenet_model(folder):
    import onnx
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    inp.type.tensor_type.shape.dim[0].dim_param = "N"     # any batch size
    for out in model.graph.output:
        out.type.tensor_type.shape.dim[0].dim_param = "N"
    out_path = os.path.join(folder, "squeezenet_n.onnx")
    onnx.save(model, out_path)
    from caffe2py.scoring import ModelSpec
    dims = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim[1:])
    return ModelSpec(onnx=out_path), model.SerializeToString(), inp.name, dims, model.graph.output[0].name


def write_shards(folder, input_name, row_shape, rows, shards):
    """Parquet shards with an id column and the input as a fixed-size list; returns the full array."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(folder)
    rng = np.random.default_rng(0)
    width = int(np.prod(row_shape))
    every = rng.random((rows * shards, width), dtype=np.float32)
    for k in range(shards):
        part = every[k * rows:(k + 1) * rows]
        ids = pa.array(np.arange(k * rows, (k + 1) * rows, dtype=np.int64))
        column = pa.FixedSizeListArray.from_arrays(pa.array(part.reshape(-1)), width)
        pq.write_table(pa.table({"id": ids, input_name: column}), os.path.join(folder, "part-%d.parquet" % k))
    return every.reshape((rows * shards,) + tuple(row_shape))


def batches(x, batch):
    return [x[i:i + batch] for i in range(0, len(x), batch)]


def read_outputs(folder, column):
    import pyarrow.parquet as pq
    from caffe2py.scoring.columns import column_to_array
    ids, values = [], []
    for name in sorted(os.listdir(folder)):
        table = pq.read_table(os.path.join(folder, name))
        ids.extend(table.column("id").to_pylist())
        field = table.schema.field(column)
        values.append(np.asarray(column_to_array(table.column(column), field)).reshape(table.num_rows, -1))
    return np.asarray(ids), np.concatenate(values)


def bench_model(name, rounds, use_ray, tmp, scale=1.0):
    from caffe2py.scoring import run_job
    rows, shards, batch = MODELS[name]
    rows = max(1, int(rows * scale))
    spec, onnx_bytes, input_name, row_shape, output = (demo_model if name == "demo" else squeezenet_model)(tmp)
    data_dir = os.path.join(tmp, name + "_data")
    x = write_shards(data_dir, input_name, row_shape, rows, shards)
    total = len(x)
    session = ort_session(onnx_bytes)
    ort_out_name = session.get_outputs()[0].name
    reference = np.concatenate([session.run([ort_out_name], {input_name: b})[0] for b in batches(x, batch)])
    reference = reference.reshape(total, -1)
    model = spec.prepare()
    model_input = model.input_names[0]

    def ort_mem():
        for b in batches(x, batch):
            session.run([ort_out_name], {input_name: b})

    def ours_mem():
        for b in batches(x, batch):
            model.run({model_input: b})

    counter = [0]

    def score(workers, ray_address=None):
        def go():
            counter[0] += 1
            out = os.path.join(tmp, "%s_out_%d" % (name, counter[0]))
            summary = run_job(spec, [data_dir], out, batch_size=batch, workers=workers, ray_address=ray_address,
                              progress=False)
            if summary.failed or summary.rows != total:
                raise RuntimeError("%s: %s" % (summary.text(), "; ".join(r.error for r in summary.failed)))
            ids, got = read_outputs(out, output)
            order = np.argsort(ids)
            diffs.append(float(np.max(np.abs(got[order] - reference))))
            shutil.rmtree(out)
        return go

    diffs = []
    configs = [("ORT", ort_mem), ("ours mem", ours_mem), ("score w1", score(1)), ("score w2", score(2))]
    if use_ray:
        configs.append(("ray w2", score(2, "auto")))
    ort_mem()
    ours_mem()                                   # warm-up: kernels compiled, threads up
    seconds = {label: [] for label, _ in configs}
    for r in range(rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for label, fn in order:
            time.sleep(0.3)
            t0 = time.perf_counter()
            fn()
            seconds[label].append(time.perf_counter() - t0)
            print("  %s round %d %s: %s rows/s" % (name, r, label, rate_text(total / seconds[label][-1])), flush=True)
    rates = {label: [total / s for s in secs] for label, secs in seconds.items()}
    return {"model": name, "rows": total, "shards": shards, "batch": batch, "rates": rates,
            "max_diff": max(diffs) if diffs else 0.0}


def rate_text(value):
    return "%.0f" % value if value >= 100 else "%.1f" % value if value >= 10 else "%.2f" % value


def fmt_rate(values):
    return "%s (%s-%s)" % (rate_text(statistics.median(values)), rate_text(min(values)), rate_text(max(values)))


def table(results, labels):
    lines = ["| model | rows x shards, batch | " + " | ".join("%s rows/s" % lb for lb in labels) +
             " | score w1 / ORT | score w2 / ORT | max abs diff vs ORT |",
             "|---|---|" + "---|" * (len(labels) + 3)]
    for res in results:
        ort = statistics.median(res["rates"]["ORT"])
        cells = [fmt_rate(res["rates"][lb]) for lb in labels]
        ratio1 = statistics.median(res["rates"]["score w1"]) / ort
        ratio2 = statistics.median(res["rates"]["score w2"]) / ort
        lines.append("| %s | %d x %d, %d | %s | %.2f | %.2f | %.1e |"
                     % (res["model"], res["rows"] // res["shards"], res["shards"], res["batch"], " | ".join(cells),
                        ratio1, ratio2, res["max_diff"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="demo,squeezenet")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the rows per shard (quick checks)")
    parser.add_argument("--append", action="store_true", help="add the table to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("CAFFE2PY_QUIET", "1")
    use_ray = not args.no_ray
    if use_ray:
        import ray
        from caffe2py.scoring.ray_job import ray_init_options
        ray.init(num_cpus=THREADS, include_dashboard=False, log_to_driver=False, **ray_init_options())
    tmp = tempfile.mkdtemp(prefix="score_bench_")
    try:
        results = [bench_model(name, args.rounds, use_ray, tmp, args.scale) for name in args.models.split(",")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if use_ray:
            ray.shutdown()
    labels = ["ORT", "ours mem", "score w1", "score w2"] + (["ray w2"] if use_ray else [])
    text = table(results, labels)
    load = os.getloadavg()[0]
    header = ("## Batch scoring throughput: caffe2py score vs onnxruntime (benchmarks/score_bench.py)\n\n"
              "Machine: %s; date %s; onnxruntime %d intra-op threads, CAFFE2PY_NUM_THREADS=%s; "
              "%d rounds in alternating order, median (range) of rows/s; "
              "1-minute load average %.1f when the table was written (a shared, loaded machine: "
              "absolute numbers are low and noisy, compare within a row); "
              "`python benchmarks/score_bench.py --rounds %d --scale %g`.\n"
              % (machine_label(), time.strftime("%Y-%m-%d"), THREADS, os.environ.get("CAFFE2PY_NUM_THREADS", "unset"),
                 args.rounds, load, args.rounds, args.scale))
    print()
    print(header)
    print(text)
    if args.append:
        path = os.path.join(os.path.dirname(__file__), "RESULTS.md")
        with open(path, "a") as f:
            f.write("\n" + header + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
