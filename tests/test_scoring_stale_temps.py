"""A scoring run removes the temporary outputs of runs that died before it: a writer is
dead when its process is gone, a zombie (killed, not yet reaped) or its number now
belongs to another process (the tag records the start time); a live writer's stay."""
import os
import subprocess
import sys
import time

import pytest

from caffe2py.scoring import outputs

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="start times and zombies come from /proc")


def _temp(out, tag):
    path = os.path.join(out, "%s%s-abcd1234-part-0.parquet" % (outputs.TEMP_PREFIX, tag))
    open(path, "wb").close()
    return path


@needs_proc
def test_the_tag_names_the_process_and_its_start():
    pid, _, started = outputs._process_tag().partition(".")
    assert int(pid) == os.getpid()
    assert outputs._alive(os.getpid(), int(started))
    assert not outputs._alive(os.getpid(), int(started) + 1)       # the number reused by another


@needs_proc
def test_a_zombie_writer_is_dead_and_a_live_ones_files_stay(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = _temp(tmp_path, outputs._process_tag(child.pid))
        gone = _temp(tmp_path, "999999999")
        assert outputs.remove_stale_temps(str(tmp_path)) == 1
        assert os.path.exists(live) and not os.path.exists(gone)
        child.kill()
        deadline = time.monotonic() + 10
        while outputs._proc_stat(child.pid)[0] != b"Z" and time.monotonic() < deadline:
            time.sleep(0.01)                  # killed, not reaped: a zombie
        assert outputs._proc_stat(child.pid)[0] == b"Z"
        assert outputs.remove_stale_temps(str(tmp_path)) == 1 and not os.path.exists(live)
    finally:
        child.kill()
        child.wait()
