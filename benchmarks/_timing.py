"""Timing helpers shared by the benchmark scripts (run as `python benchmarks/x.py`,
so this module is importable as `_timing`)."""
import statistics
import time


def median_ms(fn, repeat, warmup=2):
    """Median wall time of fn() in milliseconds over `repeat` calls after `warmup` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(samples)


def interleaved_ms(ours, peer, runs, warmup=3, pause=0.002):
    """Medians (ms) of alternating runs, so both see the same machine load; a short
    pause before each run lets the other library's spinning worker threads go idle."""
    for _ in range(warmup):
        ours()
        peer()
    times = ([], [])
    for _ in range(runs):
        for fn, out in ((ours, times[0]), (peer, times[1])):
            time.sleep(pause)
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[0]), 1e3 * statistics.median(times[1])
