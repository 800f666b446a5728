"""LLVM's pages leave the resident set after a run that linked kernels
(kernels/cpu/runtime/compiler_pages.py), and kernels keep working afterwards."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from caffe2py.kernels.cpu.runtime import compiler_pages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMAPS = """\
7f0000000000-7f0000100000 r--p 00000000 08:01 11 /venv/llvmlite/binding/libllvmlite.so
Rss:                 400 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
7f0000100000-7f0000900000 r-xp 00100000 08:01 11 /venv/llvmlite/binding/libllvmlite.so
Rss:                5000 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
7f0000900000-7f0000a00000 r--p 00900000 08:01 11 /venv/llvmlite/binding/libllvmlite.so
Rss:                1024 kB
Private_Dirty:      1024 kB
Anonymous:          1024 kB
7f0000a00000-7f0000a10000 rw-p 00a00000 08:01 11 /venv/llvmlite/binding/libllvmlite.so
Rss:                  64 kB
Private_Dirty:         0 kB
7f0000b00000-7f0000c00000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6
Rss:                 900 kB
Private_Dirty:         0 kB
7f0000c00000-7f0000d00000 rw-p 00000000 00:00 0
Rss:                1024 kB
Private_Dirty:      1024 kB
"""


def test_only_clean_read_only_mappings_of_the_library_are_chosen():
    # the relocated (dirty) read-only segment, the writable one and other libraries stay
    assert compiler_pages.clean_library_mappings(SMAPS) == [
        (0x7f0000000000, 0x7f0000100000), (0x7f0000100000, 0x7f0000900000)]
    assert compiler_pages.clean_library_mappings(SMAPS, "libfoo") == []


SCRIPT = """
    import json, re
    import numpy as np
    from caffe2py import core, workspace

    def llvm_resident_kb():
        total, inside = 0, False
        for line in open("/proc/self/smaps"):
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) == 6 and "libllvmlite" in head[5]
            elif inside and head[0] == "Rss:":
                total += int(head[1])
        return total

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    for name, value in (("x", x), ("w", w), ("b", b)):
        workspace.FeedBlob(name, value)
    net = core.Net("conv")
    net.Conv(["x", "w", "b"], "y", kernel=3, pad=1)
    workspace.CreateNet(net)
    workspace.RunNet(net)
    first = workspace.FetchBlob("y").copy()
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                       axis=(2, 3))
    reference = np.einsum("ncijkl,mckl->nmij", windows.astype(np.float64), w) + b[None, :, None, None]
    after_first = llvm_resident_kb()
    workspace.RunNet(net)
    print(json.dumps({"after_first_kb": after_first, "after_second_kb": llvm_resident_kb(),
                      "same": bool(np.array_equal(first, workspace.FetchBlob("y"))),
                      "error": float(np.abs(first - reference).max())}))
"""


def _run(keep):
    env = dict(os.environ, CAFFE2PY_JIT="inline", CAFFE2PY_KEEP_COMPILER_PAGES="1" if keep else "0")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")
def test_a_run_that_linked_kernels_hands_llvm_pages_back():
    kept = _run(keep=True)
    released = _run(keep=False)
    # linking a conv kernel leaves tens of MB of LLVM resident unless they are handed back
    assert kept["after_first_kb"] > 20 * 1024, kept
    assert released["after_first_kb"] < 4 * 1024, released
    # a run that links nothing does not fault them back; the kernel still computes
    assert released["after_second_kb"] < 4 * 1024 and released["same"], released
    assert released["error"] < 1e-3 and kept["error"] < 1e-3
