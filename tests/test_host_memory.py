"""Freed feature maps stay in the heap between runs (caffe2py/host_memory.py)."""
import os
import platform
import subprocess
import sys

import pytest

from caffe2py import host_memory

glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="malloc tuning applies to glibc only")

# Compiles a one-op net (which applies the tuning), then allocates 40 MB of 1 MB
# arrays at the heap top and frees them, 20 times: the allocation pattern of a net
# run. Prints the minor page faults of those 20 rounds.
_CHILD = r"""
import resource, numpy as np
from caffe2py import core, workspace
net = core.Net("one_op")
net.Relu("x", "y")
workspace.FeedBlob("x", np.ones(4, np.float32))
workspace.RunNetOnce(net)
def round_trip():
    arrays = [np.ones(250_000, np.float32) for _ in range(40)]
    del arrays
for _ in range(3):
    round_trip()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_trip()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(tuning):
    env = dict(os.environ, CAFFE2PY_MALLOC_TUNING=tuning)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("MALLOC_TOP_PAD_", None)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_compiled_net_keeps_freed_heap_memory():
    untuned = _faults("0")
    tuned = _faults("1")
    # 40 MB freed per round is 10,240 pages: without tuning glibc trims and
    # re-faults most of them every round; with it they stay mapped.
    assert untuned > 20 * 5000, untuned
    assert tuned < untuned / 20, (tuned, untuned)


def test_tuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("CAFFE2PY_MALLOC_TUNING", "0")
    assert not host_memory.tuning_enabled()
    assert not host_memory._apply()
    monkeypatch.setenv("CAFFE2PY_MALLOC_TUNING", "1")
    assert host_memory.tuning_enabled()
