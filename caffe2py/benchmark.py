"""Caffe2's net benchmark (SimpleNet::TEST_Benchmark): the text it prints and the
list it returns, [ms per iteration, then ms per op]."""
import sys
import time

from .blob_scopes import BlobOverlay
from .devices import cpu_run_context, wait_for_compiled_kernels
from .inplace import undo_on_failure
from .progress import Progress
from .registry import Cost, OpContext
from .schema_inference import type_of_value


def _op_cost(step, input_values):
    schema = step.context.schema
    if schema is None or schema.cost is None:
        return None
    types = [type_of_value(v) for v in input_values]
    try:
        return schema.cost(OpContext(step.op_def, schema, step.index, types), types)
    except Exception:  # noqa: BLE001 - cost is advisory
        return None


def _nbytes(value):
    return float(getattr(value, "nbytes", 0) or 0)


def per_op_timing(plan, blobs, iterations):
    """Run the net `iterations` times and return (ms per op, Cost per op, feature MB per
    op), one entry per op of plan.op_steps(). The runs are ordinary runs of the plan's
    generated code (its output pool, guards and fused loops; what they write reaches
    the workspace as after net.run()) with every kernel call timed, so an op's time is
    what it costs inside the net; a fused group's loop is shared equally by its ops.
    (Running the ops one by one instead wrote every output into fresh memory: a
    128x55x55 max pool took 0.17-0.20 ms that way against 0.10 inside the net.) Costs
    and feature sizes come from one more run before the timed ones, op by op, untimed
    (an extra run of the net, as a warm-up run is)."""
    steps = plan.op_steps()
    position = {id(step): k for k, step in enumerate(steps)}
    shares = {id(group): [position[id(m)] for m in group.members]
              for group in plan.steps if getattr(group, "members", None)}
    costs, feature_mb = _costs_and_sizes(plan, steps, blobs)
    totals = [0.0] * len(steps)

    def record(step, seconds):
        k = position.get(id(step))
        if k is not None:
            totals[k] += seconds
            return
        members = shares[id(step)]
        for k in members:
            totals[k] += seconds / len(members)
    runner = plan.timed_runner(record)
    for _ in range(iterations):
        plan.run_serial(blobs, runner)
    return [t * 1e3 / max(iterations, 1) for t in totals], costs, feature_mb


def _costs_and_sizes(plan, steps, blobs):
    """Cost and output MB of every op, from one run of the net op by op."""
    costs, feature_mb = [None] * len(steps), [0.0] * len(steps)
    env = BlobOverlay(blobs)
    with cpu_run_context(), undo_on_failure():
        for k, step in enumerate(steps):
            ins = [env[b] if b in env else blobs.get(b) for b in step.inputs]
            costs[k] = _op_cost(step, ins)
            # a second holder of a table would make in-place optimizer ops copy it
            del ins
            plan.run_step(step, env, blobs)
            feature_mb[k] = sum(_nbytes(env.get(b)) for b in step.outputs) / 1e6
    env.commit()
    return costs, feature_mb


def _type_table(out, title, unit, per_type, total_scale=1.0):
    out.write("%s per operator type:\n" % title)
    total = sum(per_type.values())
    for op_type, value in sorted(per_type.items(), key=lambda kv: -kv[1]):
        pct = 100.0 * value / total if total else 0.0
        out.write("%15.6g %s. %10.5g%%. %s\n" % (value * total_scale, unit, pct, op_type))
    out.write("%15.6g %s in Total\n" % (total * total_scale, unit))


def benchmark_net(net, warmup_runs, main_runs, run_individual, out=None, latencies=None):
    """Print Caffe2's benchmark text for a Net and return [ms/iter, per-op ms...].
    latencies: a list that receives the seconds of each main run (the runs the
    ms/iter figure averages), for percentile reports from the same runs."""
    out = out or sys.stdout
    plan = net.plan
    blobs = net.workspace.blobs
    out.write("Starting benchmark.\nRunning warmup runs.\n")
    for _ in range(warmup_runs):
        net.run()
    # kernels the warmup handed to background compilers: time machine code, not twins
    wait_for_compiled_kernels()
    out.write("Main runs.\n")
    runs = [] if latencies is None else latencies
    # a bar on a terminal once the main runs have taken a few seconds
    with Progress(main_runs, "benchmark", unit="runs", delay=3.0) as bar:
        for _ in range(main_runs):
            t0 = time.perf_counter()
            net.run()
            runs.append(time.perf_counter() - t0)
            bar.update()
    elapsed = sum(runs[-main_runs:]) if main_runs else 0.0
    ms_per_iter = elapsed * 1e3 / max(main_runs, 1)
    out.write("Main run finished. Milliseconds per iter: %.6g. Iters per second: %.6g\n"
              % (ms_per_iter, 1e3 / ms_per_iter if ms_per_iter > 0 else float("inf")))
    result = [ms_per_iter]
    if not run_individual:
        return result
    # Every net type runs its ops in order here, so all of them support per-op timing.
    op_ms, costs, feature_mb = per_op_timing(plan, blobs, max(main_runs, 1))
    time_by_type, flops_by_type, feat_by_type, param_by_type = {}, {}, {}, {}
    for step, ms, cost, mb in zip(plan.op_steps(), op_ms, costs, feature_mb):
        name = step.op_def.name or (step.outputs[0] if step.outputs else "NO_OUTPUT")
        line = "Operator #%d (%s, %s) %.6g ms/iter" % (step.index, name, step.op_def.type, ms)
        op_type = step.op_def.type
        cost = cost or Cost()
        if cost.flops:
            gflop = cost.flops / 1e9
            line += " (%.6g GFLOP, %.6g GFLOPS)" % (gflop, gflop / (ms / 1e3) if ms > 0 else 0.0)
        if mb:
            line += " (%.6g MB)" % mb
        out.write(line + "\n")
        time_by_type[op_type] = time_by_type.get(op_type, 0.0) + ms
        flops_by_type[op_type] = flops_by_type.get(op_type, 0.0) + cost.flops / 1e9
        feat_by_type[op_type] = feat_by_type.get(op_type, 0.0) + mb
        param_by_type[op_type] = param_by_type.get(op_type, 0.0) + cost.params_bytes / 1e6
        result.append(ms)
    _type_table(out, "Time", "ms", time_by_type)
    _type_table(out, "FLOP", "GFLOP", flops_by_type)
    _type_table(out, "Feature Memory", "MB", feat_by_type)
    _type_table(out, "Parameter Memory", "MB", param_by_type)
    return result
