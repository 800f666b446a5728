"""Worker processes never outlive their parent (issue 39): `caffe2py score --workers 2`,
the fuzz harness's pool and `caffe2py conformance --jobs 2` are SIGKILLed, SIGTERMed
or interrupted mid-run, and every process of the run must be gone soon after. The
processes of a run are found by a marker in their environment (every descendant
inherits it), read from /proc, so the check does not rely on the code under test."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from caffe2py import child_processes

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self") or not sys.platform.startswith("linux"),
                                reason="finds the run's processes in Linux's /proc")

MARK = "CAFFE2PY_TEST_RUN"
GONE_WITHIN = 2.0          # seconds after the parent's death


def marked(token):
    """{pid: command line} of live processes whose environment holds MARK=token."""
    want = ("%s=%s" % (MARK, token)).encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as fh:
                env = fh.read().split(b"\0")          # empty for a zombie
            if want not in env:
                continue
            with open("/proc/%s/cmdline" % entry, "rb") as fh:
                found[int(entry)] = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
    return found


def start(cmd, token, cwd=None, sigint=False, **env):
    env = dict(os.environ, **{MARK: token}, CAFFE2PY_JIT="inline", CAFFE2PY_QUIET="1", **env)
    # Python takes Ctrl-C as KeyboardInterrupt only where SIGINT was not ignored at its start
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if sigint else None
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=preexec)


def wait_for(condition, what, seconds=180, parent=None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if parent is not None and parent.poll() is not None:
            raise AssertionError("the parent ended (%s) before %s: %s"
                                 % (parent.returncode, what, parent.stderr.read().decode()[-2000:]))
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def gone_after(token, limit=10.0):
    """Seconds until no marked process is left (fails past `limit`)."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        if not marked(token):
            return time.monotonic() - began
        time.sleep(0.02)
    left = marked(token)
    for pid in left:                       # do not leave them behind for the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    raise AssertionError("processes of the run still alive %.0f s after: %s" % (limit, left))


def kill_and_time(parent, token, signum=signal.SIGKILL):
    parent.send_signal(signum)
    parent.wait(timeout=30)
    seconds = gone_after(token)
    print("\n%s: run's processes gone %.2f s after the parent ended" % (signal.Signals(signum).name, seconds))
    return seconds


def workers_of(token, part):
    return [pid for pid, cmd in marked(token).items() if part in cmd]


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


# ------------------------------------------------------------------ the helper itself

def test_a_protected_child_exits_when_its_parent_is_killed(tmp_path):
    """Middle process starts a protected child (command line + env var), is SIGKILLed;
    the grandchild must go. Without protection it sleeps on (checked first)."""
    token = uuid.uuid4().hex
    middle = textwrap.dedent("""
        import subprocess, sys, time
        from caffe2py import child_processes
        env = child_processes.child_env() if sys.argv[1] == "protect" else None
        subprocess.Popen([sys.executable, "-c",
                          "from caffe2py.child_processes import protect_from_env; import time; "
                          "protect_from_env(); open(%r, 'w').close(); time.sleep(600)" % sys.argv[2]], env=env)
        time.sleep(600)
    """)
    results = {}
    for mode in ("bare", "protect"):
        ready = tmp_path / mode
        parent = start([sys.executable, "-c", middle, mode, str(ready)], token + mode)
        wait_for(ready.exists, "the grandchild", parent=parent)
        parent.kill()
        parent.wait()
        if mode == "bare":
            time.sleep(GONE_WITHIN)
            results[mode] = len(marked(token + mode))
            for pid in marked(token + mode):
                os.kill(pid, signal.SIGKILL)
        else:
            results[mode] = gone_after(token + mode)
    assert results["bare"] == 1                  # the orphan lives on: the test can see the problem
    assert results["protect"] <= GONE_WITHIN


def test_the_watchdog_alone_ends_an_orphan(tmp_path):
    """Where prctl is not available, the watchdog thread must do it within about a second."""
    token = uuid.uuid4().hex
    ready = tmp_path / "ready"
    middle = textwrap.dedent("""
        import subprocess, sys, time
        from caffe2py import child_processes
        code = ("import caffe2py.child_processes as c, time; c.set_death_signal = lambda *a: False; "
                "c.protect_from_env(); open(%r, 'w').close(); time.sleep(600)" % sys.argv[1])
        subprocess.Popen([sys.executable, "-c", code], env=child_processes.child_env())
        time.sleep(600)
    """)
    parent = start([sys.executable, "-c", middle, str(ready)], token)
    wait_for(ready.exists, "the child's watchdog", parent=parent)
    assert kill_and_time(parent, token) <= child_processes.CHECK_SECONDS + 1.0


def test_stop_terminates_then_kills_and_reaps():
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); "
                                 "time.sleep(600)"], stdout=subprocess.PIPE, start_new_session=True)
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert stubborn.stdout.readline().strip() == b"ok"
    began = time.monotonic()
    child_processes.stop([stubborn, polite], grace=0.5)
    assert time.monotonic() - began < 5
    assert stubborn.returncode == -signal.SIGKILL and polite.returncode == -signal.SIGTERM


# ------------------------------------------------------------------ caffe2py score

def _score_cmd(data, out):
    return [sys.executable, "-m", "caffe2py", "--quiet", "score", str(data), "-o", str(out), "--workers", "2",
            "--batch-size", "4"]


def _scoring(tmp_path, token, signum=signal.SIGKILL):
    """Start score with 2 workers, let both work, send `signum` to the parent; returns
    the parent and the seconds until the run's processes were gone."""
    pytest.importorskip("pyarrow")
    from _scoring_data import demo_dataset
    demo_dataset(tmp_path / "data", shards=6, rows=160)
    out = tmp_path / "out"
    parent = start(_score_cmd(tmp_path / "data", out), token, sigint=signum == signal.SIGINT)
    from caffe2py.scoring.outputs import TEMP_PREFIX

    writers = set()

    def working():
        # both workers past their start-up (each has written a temporary output, named
        # after its pid) and a shard being written now
        temps = [n for n in (os.listdir(out) if out.is_dir() else []) if n.startswith(TEMP_PREFIX)]
        writers.update(n[len(TEMP_PREFIX):].split("-", 1)[0] for n in temps)
        return len(writers) == 2 and bool(temps)
    deadline = time.monotonic() + 180
    while not working():
        if parent.poll() is not None or time.monotonic() > deadline:
            parent.kill()
            gone_after(token)
            pytest.skip("the run ended (%s) before both workers were seen scoring" % parent.returncode)
        time.sleep(0.01)
    assert len(workers_of(token, "spawn_main")) == 2
    return parent, kill_and_time(parent, token, signum)


def test_score_workers_die_with_a_sigkilled_parent_and_the_run_resumes(tmp_path, monkeypatch):
    from _scoring_data import read_output

    from caffe2py.scoring import ModelSpec, run_job
    # The thread count per worker decides the float sums (a GEMM split over the team
    # adds in another order), and a resumed run with one shard left starts one worker
    # with every CPU's threads: one thread per worker in all three runs, so the outputs
    # can be compared bit for bit.
    monkeypatch.setenv("CAFFE2PY_NUM_THREADS", "1")
    token = uuid.uuid4().hex
    _, seconds = _scoring(tmp_path, token)
    assert seconds <= GONE_WITHIN
    out, whole = str(tmp_path / "out"), str(tmp_path / "whole")
    clean = run_job(ModelSpec(), [str(tmp_path / "data")], whole, batch_size=4, workers=2, progress=False)
    assert clean.rows == 6 * 160 and not clean.failed
    resumed = run_job(ModelSpec(), [str(tmp_path / "data")], out, batch_size=4, workers=2, progress=False)
    assert not resumed.failed and len(resumed.skipped) + len(resumed.results) == 6
    assert sorted(os.listdir(out)) == sorted(os.listdir(whole))          # no temporary files left
    for name in os.listdir(whole):
        a, b = read_output(os.path.join(out, name)), read_output(os.path.join(whole, name))
        assert a[0] == b[0] and a[1].tobytes() == b[1].tobytes(), name


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_score_sigterm_or_ctrl_c_stops_the_workers_and_the_parent(tmp_path, signum):
    token = uuid.uuid4().hex
    parent, seconds = _scoring(tmp_path, token, signum)
    assert parent.returncode == (128 + signal.SIGTERM if signum == signal.SIGTERM else 130), \
        parent.stderr.read().decode()[-2000:]
    # the parent waited for its workers (the stdlib's resource tracker may take a moment longer)
    assert seconds <= GONE_WITHIN


# ------------------------------------------------------------------ the fuzz harness

_FUZZ_POOL = """
import sys
from caffe2py.tools.fuzz.pool import run_pool
run_pool(["selftest:0:1"] * 4, jobs=2, timeout=600, workdir=sys.argv[1], on_result=print)
"""


def _hanging_pool(tmp_path, token, signum):
    """The fuzz pool with 2 workers in hanging cases; the parent gets `signum`."""
    work = tmp_path / "fuzz"
    parent = start([sys.executable, "-c", _FUZZ_POOL, str(work)], token)

    def in_cases():
        logs = [work / "logs" / ("worker%d.log" % k) for k in (0, 1)]
        return all(p.exists() and "case selftest" in p.read_text() for p in logs)
    wait_for(in_cases, "both fuzz workers in their case", parent=parent)
    return parent, kill_and_time(parent, token, signum)


def test_fuzz_pool_workers_in_hanging_cases_die_with_a_sigkilled_parent(tmp_path):
    _, seconds = _hanging_pool(tmp_path, uuid.uuid4().hex, signal.SIGKILL)
    assert seconds <= GONE_WITHIN


def test_fuzz_pool_sigterm_stops_the_workers_and_the_parent(tmp_path):
    parent, seconds = _hanging_pool(tmp_path, uuid.uuid4().hex, signal.SIGTERM)
    assert parent.returncode == 128 + signal.SIGTERM
    assert seconds <= 0.5                  # the parent waited for them


def test_fuzz_command_line_workers_die_with_a_sigkilled_parent(tmp_path):
    token = uuid.uuid4().hex
    parent = start([sys.executable, "-m", "caffe2py.tools.fuzz", "--budget", "100000", "--seed", "1",
                    "--jobs", "2", "--family", "api"], token, cwd=str(tmp_path), TMPDIR=str(tmp_path))
    import glob

    def in_cases():          # past their start-up (imports, then the protection), running cases
        logs = glob.glob(str(tmp_path / "caffe2py-fuzz-*" / "logs" / "worker*.log"))
        return len(logs) == 2 and all("case api:" in open(p).read() for p in logs)
    wait_for(in_cases, "two fuzz workers running cases", parent=parent)
    # the pool's own workers are the parent's children (a case may fork helpers of its own,
    # which carry the same command line)
    assert len([pid for pid in workers_of(token, "caffe2py.tools.fuzz.worker") if _ppid(pid) == parent.pid]) == 2
    assert kill_and_time(parent, token) <= GONE_WITHIN


# ------------------------------------------------------------------ caffe2py conformance

SLOW_TEST = """
import os, time

def test_slow():
    open(os.path.join(os.environ["SLOW_STARTED"], os.path.basename(__file__)), "w").close()
    time.sleep(600)
"""


def _conformance(tmp_path, token, signum):
    suite, started = tmp_path / "suite", tmp_path / "started"
    suite.mkdir()
    started.mkdir()
    for k in range(3):
        (suite / ("slow%d_test.py" % k)).write_text(SLOW_TEST)
    parent = start([sys.executable, "-m", "caffe2py", "conformance", str(suite), "--jobs", "2"], token,
                   cwd=str(tmp_path), sigint=signum == signal.SIGINT, SLOW_STARTED=str(started),
                   TMPDIR=str(tmp_path))       # a SIGKILLed run leaves its scratch folder
    wait_for(lambda: len(os.listdir(started)) == 2, "two test files in their slow test", parent=parent)
    return parent, kill_and_time(parent, token, signum)


def test_conformance_children_die_with_a_sigkilled_parent(tmp_path):
    _, seconds = _conformance(tmp_path, uuid.uuid4().hex, signal.SIGKILL)
    assert seconds <= GONE_WITHIN


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_conformance_sigterm_or_ctrl_c_stops_the_children_and_the_parent(tmp_path, signum):
    parent, seconds = _conformance(tmp_path, uuid.uuid4().hex, signum)
    assert parent.returncode == (128 + signal.SIGTERM if signum == signal.SIGTERM else 130)
    assert seconds <= 0.5                  # the parent waited for them
