"""A small shared thread pool for kernels that split work across rows or bags.
NumPy releases the GIL inside ufuncs, take and BLAS, so threads give real speed-ups."""
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pool = None
_lock = threading.Lock()


_CPUS = os.cpu_count() or 1      # os.cpu_count() costs ~10 us a call: ask once


def num_threads():
    """CAFFE2PY_NUM_THREADS, else min(4, CPU count)."""
    env = os.environ.get("CAFFE2PY_NUM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(4, _CPUS))


def executor():
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, num_threads()), thread_name_prefix="caffe2py-kernel")
        return _pool


def run_split(fn, parts, threads=None):
    """Run fn(part) for every part; parts are spread over `threads` threads (this one included)."""
    threads = num_threads() if threads is None else threads
    if threads <= 1 or len(parts) <= 1:
        for part in parts:
            fn(part)
        return
    groups = [parts[t::threads] for t in range(threads)]
    futures = [executor().submit(lambda g=g: [fn(p) for p in g]) for g in groups[1:] if g]
    for p in groups[0]:
        fn(p)
    for f in futures:
        f.result()
