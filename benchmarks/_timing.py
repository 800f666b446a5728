"""Timing helpers shared by the benchmark scripts (run as `python benchmarks/x.py`,
so this module is importable as `_timing`)."""
import os
import statistics
import time

# Benchmarks time machine code: kernels compile on their first call (during warmup)
# instead of running NumPy twins while a background worker compiles them.
os.environ.setdefault("CAFFE2PY_JIT", "inline")


def samples_ms(fn, repeat, warmup=2, clock=time.perf_counter):
    """Times of fn() in milliseconds, one per call, for `repeat` calls after `warmup`
    calls; wall time, or this thread's CPU time with clock=time.thread_time."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        samples.append(1e3 * (clock() - t0))
    return samples


def median_ms(fn, repeat, warmup=2, clock=time.perf_counter):
    """Median time of fn() in milliseconds over `repeat` calls after `warmup` calls."""
    return statistics.median(samples_ms(fn, repeat, warmup, clock))


def interleaved_ms(ours, peer, runs, warmup=3, blocks=3, rest=0.3, clock=time.perf_counter):
    """Medians (ms) of `runs` calls each, taken in alternating blocks (ours, peer, ours,
    ...) so both see the same machine load over time. Between blocks the process rests
    `rest` seconds: OpenBLAS's and onnxruntime's worker threads spin for up to ~0.1 s
    after their last call, and on a 2-core machine a peer's spinning workers would slow
    the next runs of the other library (run-by-run alternation measured both sides up
    to 2-4x slow). clock: time.thread_time counts only this thread's CPU time (one
    thread on both sides: on a shared machine the time other processes hold the core
    then does not count; cache and memory contention still do)."""
    for _ in range(warmup):
        ours()
        peer()
    times = ([], [])
    per_block = max(1, -(-runs // blocks))
    for _ in range(blocks):
        for fn, out in ((ours, times[0]), (peer, times[1])):
            time.sleep(rest)
            fn()                                  # wake this library's threads
            for _ in range(per_block):
                t0 = clock()
                fn()
                out.append(clock() - t0)
    return 1e3 * statistics.median(times[0]), 1e3 * statistics.median(times[1])


def machine_label():
    """'N-CPU <model name>' from /proc/cpuinfo (the platform module only knows the arch)."""
    import os
    import platform
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    label = "%d-CPU %s" % (os.cpu_count() or 1, model)
    from caffe2py.kernels.cpu.math.gemm import blas_summary
    return label + ", " + blas_summary()
