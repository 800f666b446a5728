"""Latency statistics (onnxruntime perf_test style) and a Chrome-trace observer
that records one complete event per op per run (chrome://tracing, Perfetto)."""
import json
import math
import os
import time

from .executor import NetObserver


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, int(math.ceil(p / 100.0 * len(sorted_values))))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies_s):
    """{count, total_s, mean_ms, per_second, min_s, max_s, p50_s, p90_s, p95_s, p99_s, p999_s}."""
    values = sorted(latencies_s)
    total = sum(values)
    n = len(values)
    out = {"count": n, "total_s": total, "mean_ms": total * 1e3 / n if n else float("nan"),
           "per_second": n / total if total > 0 else float("inf"),
           "min_s": values[0] if n else float("nan"), "max_s": values[-1] if n else float("nan")}
    for p, key in ((50, "p50_s"), (90, "p90_s"), (95, "p95_s"), (99, "p99_s"), (99.9, "p999_s")):
        out[key] = percentile(values, p)
    return out


def format_latency_summary(s):
    """The lines onnxruntime_perf_test prints after a run."""
    return "\n".join([
        "Total inference time cost: %.6g s" % s["total_s"],
        "Total inference requests: %d" % s["count"],
        "Average inference time cost: %.6g ms" % s["mean_ms"],
        "Number of inferences per second: %.6g" % s["per_second"],
        "Min Latency: %.6g s" % s["min_s"],
        "Max Latency: %.6g s" % s["max_s"],
        "P50 Latency: %.6g s" % s["p50_s"],
        "P90 Latency: %.6g s" % s["p90_s"],
        "P95 Latency: %.6g s" % s["p95_s"],
        "P99 Latency: %.6g s" % s["p99_s"],
        "P999 Latency: %.6g s" % s["p999_s"],
    ]) + "\n"


class ChromeTraceObserver(NetObserver):
    """Collects trace events: a 'net' event per run and an 'X' event per op."""

    def __init__(self):
        self.events = []
        self.runs = 0
        self._t0 = time.perf_counter()
        self._net_start = 0.0
        self._op_start = 0.0
        self._pid = os.getpid()

    def _us(self, t):
        return (t - self._t0) * 1e6

    def net_start(self, plan):
        self._net_start = time.perf_counter()

    def net_stop(self, plan):
        end = time.perf_counter()
        self.events.append({"name": "run %d of %s" % (self.runs, plan.name or "net"), "cat": "net", "ph": "X",
                            "ts": self._us(self._net_start), "dur": (end - self._net_start) * 1e6,
                            "pid": self._pid, "tid": 0, "args": {"run": self.runs}})
        self.runs += 1

    def op_start(self, step):
        self._op_start = time.perf_counter()

    def op_stop(self, step):
        end = time.perf_counter()
        op = step.op_def
        self.events.append({"name": op.name or (op.output[0] if op.output else op.type), "cat": op.type,
                            "ph": "X", "ts": self._us(self._op_start), "dur": (end - self._op_start) * 1e6,
                            "pid": self._pid, "tid": 1,
                            "args": {"run": self.runs, "op_index": step.index, "op_type": op.type,
                                     "inputs": list(op.input), "outputs": list(op.output)}})

    def trace(self):
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}

    def write(self, path):
        with open(path, "w") as f:
            json.dump(self.trace(), f)
