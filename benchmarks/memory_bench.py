"""Peak resident memory of warm light_resnet50 runs: caffe2py (output pool on / off)
against onnxruntime (its default CPU arena / enable_cpu_mem_arena off); and caffe2py's
time per run with the pool on and off, alternating in one process.

Each library is measured in a fresh subprocess (nothing else loaded there but what
it needs): it prepares the model, runs --warmup runs (kernels compiled, buffers
made), then resets the kernel's peak-RSS mark (`echo 5 > /proc/self/clear_refs`)
and runs --runs more: "warm peak" is VmHWM after those, the most resident memory any
warm run needed. "process peak" is VmHWM before the reset (includes loading and
compiling); "held" is the pool's buffers, with those kernel replay owns once warm runs
replay (caffe2py/kernel_replay.py). A first, unreported caffe2py process
compiles whatever kernels are not in numba's cache yet.

    python benchmarks/memory_bench.py [--model resnet50] [--runs 20] [--threads 2] [--append]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

CONFIGS = ("caffe2py", "caffe2py-nopool", "ort-arena", "ort-noarena")


def _status_kb(field):
    with open("/proc/self/status") as f:
        return int(re.search(r"%s:\s+(\d+)" % field, f.read()).group(1))


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child(config, model_name, warmup, runs, threads):
    """Measure one configuration in this (fresh) process; print one JSON line."""
    import numpy as np
    import onnx
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from light_models import light_dir, random_feeds
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % model_name))
    feeds = random_feeds(model, np.random.default_rng(0))
    held = None
    if config.startswith("caffe2py"):
        if config == "caffe2py-nopool":
            os.environ["CAFFE2PY_OUTPUT_POOL"] = "0"
        os.environ.setdefault("CAFFE2PY_JIT", "inline")
        os.environ["CAFFE2PY_NUM_THREADS"] = str(threads)
        from caffe2py.onnx import backend
        rep = backend.prepare(model)
        del model

        def run():
            return rep.run(feeds)
    else:
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.enable_cpu_mem_arena = config == "ort-arena"
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        del model

        def run():
            return sess.run(None, feeds)
    for _ in range(warmup):
        out = run()
    del out
    process_peak = _status_kb("VmHWM")
    _reset_peak()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
        del out
    if config == "caffe2py":       # the pool's buffers, and those kernel replay took from it
        replay = rep.plan.replay
        held = rep.plan.output_pool.held_bytes() + (replay.held_bytes() if replay is not None else 0)
    times.sort()
    print(json.dumps({"config": config, "warm_peak_kb": _status_kb("VmHWM"), "process_peak_kb": process_peak,
                      "rss_kb": _status_kb("VmRSS"), "median_ms": 1e3 * times[len(times) // 2],
                      "pool_held_bytes": held}))


def measure(config, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config, "--model", args.model,
           "--warmup", str(args.warmup), "--runs", str(args.runs), "--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def pool_on_off_ms(args):
    """Median ms per run of the same model prepared twice in this process, pool on
    and pool off, in alternating blocks."""
    import numpy as np
    import onnx
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _timing import interleaved_ms
    from light_models import light_dir, random_feeds
    os.environ["CAFFE2PY_NUM_THREADS"] = str(args.threads)
    from caffe2py.onnx import backend
    model = onnx.load(os.path.join(light_dir(), "light_%s.onnx" % args.model))
    feeds = random_feeds(model, np.random.default_rng(0))
    with_pool = backend.prepare(model)
    os.environ["CAFFE2PY_OUTPUT_POOL"] = "0"
    without = backend.prepare(model)
    del os.environ["CAFFE2PY_OUTPUT_POOL"]
    assert with_pool.plan.output_pool is not None and without.plan.output_pool is None
    return interleaved_ms(lambda: with_pool.run(feeds), lambda: without.run(feeds), args.runs, blocks=4)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", choices=CONFIGS)
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.model, args.warmup, args.runs, args.threads)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _timing import machine_label
    # a first process compiles (and caches) whatever kernels changed since the last
    # run: the compiler's heap stays resident (host_memory keeps freed memory), so
    # that process's numbers are not those of a warm deployment
    measure("caffe2py", args)
    rows = [measure(config, args) for config in CONFIGS]
    on_ms, off_ms = pool_on_off_ms(args)
    load = os.getloadavg()[0]
    lines = ["## Peak memory of warm light_%s runs (issue 38, benchmarks/memory_bench.py) — %s, %s UTC, "
             "%d threads, load average %.1f" % (args.model, machine_label(), time.strftime("%Y-%m-%d %H:%M",
                                                                                           time.gmtime()),
                                                 args.threads, load),
             "",
             "Fresh process per row; warm peak = VmHWM over %d warm runs after %d warm-ups (peak mark reset "
             "between), process peak = VmHWM of loading, compiling and warm-ups." % (args.runs, args.warmup),
             "",
             "| configuration | warm peak RSS (MB) | process peak RSS (MB) | RSS after (MB) | median ms/run | "
             "pool holds (MB) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %.1f | %.1f | %.1f | %.1f | %s |" % (
            r["config"], r["warm_peak_kb"] / 1024, r["process_peak_kb"] / 1024, r["rss_kb"] / 1024, r["median_ms"],
            "-" if r["pool_held_bytes"] is None else "%.1f" % (r["pool_held_bytes"] / 2 ** 20)))
    lines += ["", "Time per run in one process, alternating blocks: pool on %.2f ms, pool off %.2f ms (%.3fx)."
              % (on_ms, off_ms, on_ms / off_ms), ""]
    text = "\n".join(lines)
    print(text)
    if args.append:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
