"""A training loop that checkpoints with Checkpoint, is killed (SIGKILL, mid-run) and
resumes with Load ends with the same weights as a run that was never interrupted."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "_train_checkpointed.py")
TOTAL = 40


def _train(workdir, *extra, **popen):
    return subprocess.Popen([sys.executable, SCRIPT, str(workdir), str(TOTAL)] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    straight.mkdir()
    broken.mkdir()
    reference = _train(straight)
    victim = _train(broken, "--slow", "0.1")
    # kill once a few checkpoints exist, wherever the loop is (possibly inside a Save)
    deadline = time.time() + 120
    while len(glob.glob(str(broken / "ckpt_*.minidb"))) < 3:
        assert victim.poll() is None, victim.stdout.read()
        assert time.time() < deadline, "no checkpoints after 120 s"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert not (broken / "final.npy").exists()
    done = int(victim.stdout.read().split("iteration")[-1].split()[0])
    assert done < TOTAL

    resumed = _train(broken, "--resume")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    start = int(out.split("resumed from iteration")[1].split()[0])
    assert 0 < start <= done and start % 5 == 0

    out, _ = reference.communicate(timeout=300)
    assert reference.returncode == 0, out
    expected = np.load(straight / "final.npy")
    np.testing.assert_array_equal(np.load(broken / "final.npy"), expected)
    # and the weights did learn something: the regression's true weights
    np.testing.assert_allclose(expected, [[0.5, -1.0, 2.0, 0.25]], atol=0.1)
    # a kill during a Save may leave its temporary file, never a half-written checkpoint
    from caffe2py.db import minidb
    for path in glob.glob(str(broken / "ckpt_*.minidb")):
        assert [k for k, _ in minidb.read_records(path)] == [b"iter#%0", b"W#%0", b"cursor"]
