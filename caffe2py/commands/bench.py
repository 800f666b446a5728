"""`caffe2py bench`: Caffe2's benchmark text (per-op lines and per-op-type tables
with --run-individual), onnxruntime perf_test-style latency percentiles, and an
optional Chrome-trace profile. With no files it benchmarks the built-in demo."""
import sys
import time

import numpy as np

from caffe2py.benchmark import benchmark_net
from caffe2py.errors import Caffe2Error
from caffe2py.kernels.cpu.math.gemm import blas_summary
from caffe2py.progress import Progress
from caffe2py.profiling import ChromeTraceObserver, format_latency_summary, latency_summary
from caffe2py.shape_report import build_report
from caffe2py.tensors import numpy_dtype
from caffe2py.workspace import Workspace

from ._bound_args import add_bound_arguments, add_net_arguments, hints_from, load_nets, spec_from
from .run import check_inputs, match_parameter_precision, parse_inputs

NAME = "bench"
HELP = "benchmark a net: Caffe2's per-op text, latency percentiles, Chrome-trace profile"
# runs shorter than this draw no progress bar
BAR_DELAY_S = 3.0


def add_arguments(parser):
    add_net_arguments(parser)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="feed blob NAME from FILE; inputs without a file are random at their hinted shape")
    add_bound_arguments(parser)
    parser.add_argument("--iters", type=int, default=10, help="timed runs (default 10)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed runs first (default 1, at least 1: kernels compile before timing)")
    parser.add_argument("--run-individual", action="store_true", help="also time each op (Caffe2's per-op tables)")
    parser.add_argument("--profile", metavar="OUT.json", help="write a Chrome-trace JSON: one event per op per run")
    parser.add_argument("--optimize", action="store_true",
                        help="first apply caffe2py.optimize's prepare-time rewrites (Conv+BN folding, ConvRelu, "
                             "SpatialBNRelu), as caffe2py.onnx.backend.prepare does")


def synthesize_inputs(predict_net, ws, args, given):
    """Random values for external inputs that have no value yet, at their bound shapes."""
    missing = [b for b in predict_net.external_input if not ws.has_blob(b)]
    if not missing:
        return {}
    report = build_report(predict_net, spec_from(args), hints=hints_from(args), workspace_blobs=ws.blobs,
                          inputs=given)
    rng = np.random.default_rng(0)
    made = {}
    for name in missing:
        info = report.shapes.get(name)
        if info is None:
            raise Caffe2Error("input '%s' has no value and no bound shape: give --input %s=FILE or "
                              "--hint '%s,d1,d2,...'" % (name, name, name))
        dtype = numpy_dtype(info.dtype)
        made[name] = (rng.random(info.dims).astype(dtype) if dtype.kind == "f" else np.zeros(info.dims, dtype))
    return made


def optimized(predict_net, ws, parameters):
    """The net after caffe2py.optimize, with the init net's blobs (`parameters`) as its
    constants; the folded constants it makes are fed into the workspace."""
    from caffe2py.optimize import optimize
    constants = {name: ws.blobs[name] for name in parameters if isinstance(ws.blobs[name], np.ndarray)}
    net = optimize(predict_net, constants)
    for name, value in constants.items():
        if name not in parameters:
            ws.feed_blob(name, value)
    print("optimized: %d ops -> %d" % (len(predict_net.op), len(net.op)))
    return net


def timed_runs(net, iters, progress_label):
    latencies = []
    with Progress(iters, progress_label, unit="runs", delay=BAR_DELAY_S) as bar:
        for _ in range(iters):
            t0 = time.perf_counter()
            net.run()
            latencies.append(time.perf_counter() - t0)
            bar.update()
    return latencies


def run(args):
    if args.iters < 1 or args.warmup < 0:
        raise Caffe2Error("--iters must be >= 1 and --warmup >= 0 (got %d and %d)" % (args.iters, args.warmup))
    args.warmup = max(args.warmup, 1)
    init_net, predict_net, inputs, note = load_nets(args)
    inputs = dict(inputs)
    inputs.update(parse_inputs(args.input))
    if note:
        print("note: %s" % note)
    ws = Workspace("bench")
    if init_net is not None:
        ws.run_net_once(init_net)
    parameters = set(ws.blobs)           # what the init net made: the only constants
    check_inputs(predict_net, ws, inputs, require_all=False)     # the rest are made up below
    inputs = match_parameter_precision(ws, inputs)
    for name, value in inputs.items():
        ws.feed_blob(name, value)
    if args.max_batch_size is None and inputs:
        args.max_batch_size = int(np.shape(next(iter(inputs.values())))[0] or 1)
    for name, value in synthesize_inputs(predict_net, ws, args, inputs).items():
        ws.feed_blob(name, value)
    if args.optimize:
        predict_net = optimized(predict_net, ws, parameters)
    ws.create_net(predict_net, overwrite=True)
    net = ws.get_net(predict_net.name)
    print("benchmarking net '%s' (%d ops): %d warmup, %d main runs" % (net.name, len(predict_net.op),
                                                                      args.warmup, args.iters))
    print("BLAS: %s" % blas_summary())
    latencies = []
    benchmark_net(net, args.warmup, args.iters, args.run_individual, out=sys.stdout, latencies=latencies)
    # the same main runs as "Milliseconds per iter" above, so the two figures agree
    sys.stdout.write("\nLatency of those %d main runs (onnxruntime perf_test style):\n" % args.iters)
    sys.stdout.write(format_latency_summary(latency_summary(latencies)))
    if args.profile:
        tracer = net.add_observer(ChromeTraceObserver())
        try:
            timed_runs(net, args.iters, "profiling")
        finally:
            net.remove_observer(tracer)
        tracer.write(args.profile)
        print("profile: %s (%d events; open in chrome://tracing or ui.perfetto.dev)"
              % (args.profile, len(tracer.events)))
    return 0
