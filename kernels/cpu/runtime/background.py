"""Compiling kernels in background processes, so a first run does not wait for them.

A kernel called with a signature that is not in the disk cache is handed to this
module as a job (`submit`) while its NumPy twin computes the call (jit.py). Jobs are
files in `<cache root>/jobs/`, named by what they compile, so the same job submitted
by two processes is one file. Detached worker processes (`python -m
caffe2py.kernels.cpu.runtime.background`) claim jobs by renaming them, compile them
into the kernel cache, and exit when the folder has been empty for a few seconds; they
outlive the process that started them, so a run of a few milliseconds still leaves
its kernels compiled for the next one. Workers run at the lowest priority
(SCHED_IDLE where the OS has it, else nice 19) from their first instruction, so the
program that needs the CPU now keeps it. They stay in the caller's session and leave
only its process group: Linux's autogroup scheduler weighs sessions against each other
before it looks at niceness, so a worker in a session of its own would take a full
core's share from the run it is meant to speed up (measured: the cold demo took 3.1 s
of wall clock for 1.3 s of CPU), while a terminal's Ctrl-C still does not reach it.

    submit(kernel, sig)        queue one compile (no-op when already queued)
    start_workers()            make sure workers are running for queued jobs (the new processes)
    job_state(kernel, sig)     "queued", "compiling", "failed: <reason>" or None (done / never queued)
    estimate_seconds(kernels)  from the compile times workers recorded on this machine
"""
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time

from .cache import cache_root, source_digest

_IDLE_EXIT_SECONDS = 3.0
_DEFAULT_COMPILE_SECONDS = 2.0
_submitted = {}          # job path -> (kernel, sig) of this process


def jobs_dir():
    return os.path.join(cache_root(), "jobs")


def _kernel_file(kernel):
    return kernel.py_func.__code__.co_filename


def _job_path(kernel, sig):
    what = "%s|%s|%s|%r" % (kernel.py_func.__module__, kernel.py_func.__qualname__,
                            source_digest(_kernel_file(kernel)), sig)
    return os.path.join(jobs_dir(), hashlib.sha1(what.encode()).hexdigest()[:24] + ".job")


def submit(kernel, sig):
    """Queue a background compile of `kernel` for the numba signature `sig`."""
    path = _job_path(kernel, sig)
    if path in _submitted:
        return path
    _submitted[path] = (kernel, sig)
    os.makedirs(jobs_dir(), exist_ok=True)
    if not os.path.exists(path):
        job = {"module": kernel.py_func.__module__, "name": kernel.py_func.__name__,
               "digest": source_digest(_kernel_file(kernel)), "sig": sig}
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "wb") as fh:
            pickle.dump(job, fh)
        os.replace(tmp, path)
    return path


def job_state(kernel, sig):
    path = _job_path(kernel, sig)
    failed = path + ".failed"
    if os.path.exists(failed):
        with open(failed) as fh:
            return "failed: " + fh.read().strip()
    if os.path.exists(path):
        return "queued"
    folder = os.path.dirname(path)
    base = os.path.basename(path)
    try:
        if any(name.startswith(base + ".claimed-") for name in os.listdir(folder)):
            return "compiling"
    except OSError:
        pass
    return None


# ----------------------------------------------------------------- worker processes

def _worker_count():
    # leave one CPU to the program that is running on the twins meanwhile
    return max(1, min(4, (os.cpu_count() or 1) - 1))


# The worker's first lines: drop to the lowest priority before importing anything, so
# even its imports (numba, caffe2py: ~1 s of CPU) do not compete with the caller.
_WORKER_BOOT = """
import os, sys
try:
    os.setpgid(0, 0)        # out of the terminal's foreground group: Ctrl-C is for the caller
except (AttributeError, OSError):
    pass
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    pass
try:
    os.nice(19)
except (AttributeError, OSError):
    pass
from caffe2py.kernels.cpu.runtime.background import work
sys.exit(work(int(sys.argv[1])))
"""


def _slot_path(slot):
    return os.path.join(jobs_dir(), "worker-%d.lock" % slot)


def _try_lock(path):
    """An open file holding an exclusive lock on path, or None when another process holds it."""
    try:
        import fcntl
    except ImportError:          # no flock (Windows): every caller may start a worker
        return open(path, "a")
    fh = open(path, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return fh


def start_workers():
    """Start a worker in every free slot (slots whose lock nobody holds); returns the
    processes started."""
    os.makedirs(jobs_dir(), exist_ok=True)
    started = []
    for slot in range(_worker_count()):
        probe = _try_lock(_slot_path(slot))
        if probe is None:
            continue                  # a worker runs in this slot
        probe.close()
        log = open(os.path.join(jobs_dir(), "worker-%d.log" % slot), "ab")
        started.append(subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, str(slot)], stdin=subprocess.DEVNULL,
            stdout=log, stderr=log, close_fds=True, env=dict(os.environ, CAFFE2PY_JIT="inline")))
        log.close()
    return started


def _stats_path():
    return os.path.join(cache_root(), "compile_seconds.json")


def _read_stats():
    try:
        with open(_stats_path()) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _record_seconds(key, seconds):
    stats = _read_stats()
    stats[key] = round(seconds, 2)
    tmp = "%s.tmp.%d" % (_stats_path(), os.getpid())
    with open(tmp, "w") as fh:
        json.dump(stats, fh)
    os.replace(tmp, _stats_path())


def estimate_seconds(kernels):
    """Seconds to compile these kernels once, from the times recorded on this machine."""
    stats = _read_stats()
    return sum(stats.get("%s.%s" % (k.py_func.__module__, k.__name__), _DEFAULT_COMPILE_SECONDS)
               for k in kernels)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _requeue_orphans(folder):
    """Claims of workers that died go back to the queue."""
    for name in os.listdir(folder):
        if ".job.claimed-" in name:
            pid = int(name.rsplit("-", 1)[1])
            if not _alive(pid):
                try:
                    os.replace(os.path.join(folder, name), os.path.join(folder, name.split(".claimed-")[0]))
                except OSError:
                    pass


def _compile_job(path):
    import importlib
    with open(path, "rb") as fh:
        job = pickle.load(fh)
    module = importlib.import_module(job["module"])
    kernel = getattr(module, job["name"])
    if source_digest(kernel.py_func.__code__.co_filename) != job["digest"]:
        return "skipped"             # another installation's source: its own process compiles it
    start = time.perf_counter()
    kernel.dispatcher.compile(job["sig"])
    _record_seconds("%s.%s" % (job["module"], job["name"]), time.perf_counter() - start)
    return "compiled"


def work(slot):
    """The worker loop: claim, compile, repeat; exit after a few idle seconds."""
    folder = jobs_dir()
    os.makedirs(folder, exist_ok=True)
    lock = _try_lock(_slot_path(slot))
    if lock is None:
        return 0                     # another worker took this slot
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < _IDLE_EXIT_SECONDS:
        _requeue_orphans(folder)
        jobs = sorted(n for n in os.listdir(folder) if n.endswith(".job"))
        if not jobs:
            time.sleep(0.1)
            continue
        for name in jobs:
            job = os.path.join(folder, name)
            claimed = "%s.claimed-%d" % (job, os.getpid())
            try:
                os.rename(job, claimed)
            except OSError:
                continue             # another worker took it
            try:
                outcome = _compile_job(claimed)
            except Exception as exc:     # noqa: BLE001 - reported to the waiting process through the file
                with open(job + ".failed", "w") as fh:
                    fh.write("%s: %s" % (type(exc).__name__, exc))
                outcome = "failed"
            os.remove(claimed)
            sys.stdout.write("%s %s\n" % (name, outcome))
            sys.stdout.flush()
        idle_since = time.monotonic()
    lock.close()
    return 0


if __name__ == "__main__":
    slot_arg = sys.argv.index("--slot") + 1 if "--slot" in sys.argv else None
    sys.exit(work(int(sys.argv[slot_arg]) if slot_arg else 0))
