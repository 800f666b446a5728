"""The thread count caffe2py's kernels use (the team's size, see jit.py)."""
import os

_CPUS = os.cpu_count() or 1      # os.cpu_count() costs ~10 us a call: ask once


def num_threads():
    """CAFFE2PY_NUM_THREADS, else min(4, CPU count)."""
    env = os.environ.get("CAFFE2PY_NUM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(4, _CPUS))
