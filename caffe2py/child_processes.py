"""Worker processes never outlive the process that started them (issue 39).

Child side, first thing in a worker:

    protect(parent_pid)     Linux: prctl(PR_SET_PDEATHSIG, SIGKILL), then a re-check of
                            the parent (it may have died before the prctl); everywhere:
                            a daemon thread that ends the process within CHECK_SECONDS
                            once os.getppid() is no longer parent_pid.
    protect_from_env()      the same for a child started as a command line: the parent
                            put its pid in CAFFE2PY_PARENT_PID (child_env()); the
                            variable is removed so the child's own children do not
                            take it for theirs.

`parent_pid` must be the direct parent (the process that called Popen / started the
multiprocessing worker). The kernel sends the death signal when the parent *thread*
that started the child ends, so parents start children from a thread that lives as
long as they do (the main thread here).

Parent side:

    child_env(env)          env with CAFFE2PY_PARENT_PID set to this process
    death_signal_preexec()  a Popen preexec_fn for children that are not Python (Linux)
    stop(processes, grace)  SIGTERM, SIGKILL after `grace` seconds, wait for each one
    terminate_unwinds()     within it, SIGTERM raises Terminated (a SystemExit with
                            status 143) in the main thread, so the code that started
                            children unwinds through the `finally` that stops them, as
                            Ctrl-C's KeyboardInterrupt does.

Processes meant to outlive a run (the background kernel compilers of
kernels/cpu/runtime/background.py) do not use this module.
"""
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

ENV_PARENT = "CAFFE2PY_PARENT_PID"
CHECK_SECONDS = 0.25            # the watchdog's period: an orphan is gone within about this long
ORPHAN_EXIT_STATUS = 75         # status of a child that ended because its parent was gone
_PR_SET_PDEATHSIG = 1
_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)     # Windows has no SIGKILL (os.kill terminates)

_protected = []                 # the parent pid this process watches (once per process)


def _prctl():
    """libc's prctl, or None off Linux (resolved before any fork that needs it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def set_death_signal(signum=_KILL):
    """Ask Linux to send `signum` to this process when its parent ends; False
    where that is not available."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def _watch(parent_pid):
    while True:
        time.sleep(CHECK_SECONDS)
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT_STATUS)


def protect(parent_pid):
    """Make this process end when `parent_pid` (its direct parent) does."""
    parent_pid = int(parent_pid)
    if _protected:
        return
    _protected.append(parent_pid)
    set_death_signal()
    if os.getppid() != parent_pid:     # died before the prctl took effect: no signal will come
        os._exit(ORPHAN_EXIT_STATUS)
    threading.Thread(target=_watch, args=(parent_pid,), name="caffe2py-parent-watchdog", daemon=True).start()


def protect_from_env():
    """protect() the parent named by CAFFE2PY_PARENT_PID, if set; True when it was."""
    value = os.environ.pop(ENV_PARENT, None)
    if not value:
        return False
    protect(int(value))
    return True


def child_env(env=None):
    """A copy of `env` (default os.environ) telling a Python child which process
    to outlive no longer (it calls protect_from_env())."""
    env = dict(os.environ if env is None else env)
    env[ENV_PARENT] = str(os.getpid())
    return env


def death_signal_preexec(signum=_KILL):
    """A preexec_fn for subprocess.Popen that sets the death signal in the child
    before it execs (it survives exec); None off Linux."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec():
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(ORPHAN_EXIT_STATUS)
    return preexec


# ------------------------------------------------------------------ parent side

def _is_running(proc):
    if hasattr(proc, "poll"):                   # subprocess.Popen
        return proc.poll() is None
    return proc.exitcode is None and proc.pid is not None   # multiprocessing.Process (polls)


def _leads_own_group(pid):
    try:
        return os.getpgid(pid) == pid and pid != os.getpgrp()
    except (OSError, AttributeError):
        return False


def _signal(pid, signum, group):
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc):
    if hasattr(proc, "wait"):
        proc.wait()
    else:
        proc.join()


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait until the children are stopped (they are delivered after)."""
    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stop(processes, grace=2.0):
    """End each process (Popen or multiprocessing.Process) still running: SIGTERM
    (to its whole group when it leads one, so its own children go too), SIGKILL
    after `grace` seconds, then wait for all of them."""
    processes = [p for p in processes if p is not None]
    with _signals_held():
        running = [p for p in processes if _is_running(p)]
        groups = {p.pid: _leads_own_group(p.pid) for p in running}
        for p in running:
            _signal(p.pid, signal.SIGTERM, groups[p.pid])
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_is_running(p) for p in running):
            time.sleep(0.02)
        for p in running:
            # a group outlives its leader when the leader's children ignored SIGTERM
            if groups[p.pid] or _is_running(p):
                _signal(p.pid, _KILL, groups[p.pid])
        for p in processes:
            _reap(p)


class Terminated(SystemExit):
    """SIGTERM arrived inside terminate_unwinds(); exits with 128 + SIGTERM."""


@contextlib.contextmanager
def terminate_unwinds():
    """Within the block, SIGTERM raises Terminated in the main thread, so `finally`
    clauses that stop children run before the process exits (the default action
    would end this process at once and leave them). A handler the program set
    itself is left alone, and so is everything off the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    fired = []

    def on_term(signum, _frame):
        if not fired:                   # once: a second SIGTERM must not cut the cleanup short
            fired.append(signum)
            raise Terminated(128 + signum)
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
