"""A pool of worker processes that run fuzz cases, catching what a case can do to
the process that runs it: a case that dies (signal, abort, exit) is a `crash`, one
that runs past the time limit a `hang`; the worker is replaced and the pool goes on.
Workers end with the pool (caffe2py.child_processes): each exits when this process
is gone, and an error, Ctrl-C or SIGTERM here stops them before this process exits."""
import json
import os
import selectors
import signal
import subprocess
import sys
import time

from caffe2py import child_processes


class Worker:
    def __init__(self, number, env, workdir, log_dir):
        self.number = number
        self.log = os.path.join(log_dir, "worker%d.log" % number)
        self.cwd = os.path.join(workdir, "w%d" % number)
        os.makedirs(self.cwd, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "caffe2py.tools.fuzz.worker", self.log],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self.cwd, env=env, start_new_session=True, text=True, bufsize=1)
        self.buffer = ""
        self.case = None
        self.deadline = None
        self.partial = None
        self.ready = False

    def send(self, case_id, timeout):
        self.case = case_id
        self.partial = None
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write(case_id + "\n")
        self.proc.stdin.flush()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # its own session: the worker and its children
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def log_tail(self, n=3000):
        try:
            with open(self.log, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def worker_env(threads=1):
    env = dict(os.environ)
    env.setdefault("CAFFE2PY_JIT", "inline")      # compiled kernels run, as in production
    env["CAFFE2PY_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["CAFFE2PY_QUIET"] = "1"
    env.setdefault("CAFFE2PY_FUZZ_MEMORY_MB", "4096")
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def run_pool(case_ids, jobs, timeout, workdir, on_result, startup_timeout=300):
    """Run every case id on `jobs` workers; on_result(result dict) for each."""
    env = child_processes.child_env(worker_env())
    log_dir = os.path.join(workdir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    pending = list(reversed(case_ids))
    selector = selectors.DefaultSelector()
    workers = []
    counter = [0]

    def start():
        w = Worker(counter[0], env, workdir, log_dir)
        counter[0] += 1
        w.deadline = time.monotonic() + startup_timeout
        selector.register(w.proc.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        return w

    def retire(w):
        selector.unregister(w.proc.stdout)
        w.kill()
        workers.remove(w)

    def dispatch(w):
        if pending:
            w.send(pending.pop(), timeout)
        else:
            w.case, w.deadline = None, None

    def lost(w, cls, why):
        base = w.partial or {}
        result = {"case": w.case, "class": cls, "message": why, "log": w.log_tail()}
        if base:
            # caffe2py had answered; the reference (onnxruntime) took the process down or hung
            result = dict(base, note="reference_crashed" if cls == "crash" else "reference_hung", phase="done")
        on_result(result)

    try:
        with child_processes.terminate_unwinds():
            for _ in range(min(jobs, len(pending)) or 1):
                start()
            while workers:
                now = time.monotonic()
                wait = min((w.deadline for w in workers if w.deadline is not None), default=now + 1) - now
                for key, _mask in selector.select(timeout=max(0.05, wait)):
                    w = key.data
                    chunk = os.read(w.proc.stdout.fileno(), 1 << 16).decode("utf-8", "replace")
                    if not chunk:               # the process is gone
                        code = w.proc.wait()
                        if w.case is not None:
                            how = "killed by signal %d" % -code if code < 0 else "exited with status %d" % code
                            lost(w, "crash", "worker %s while running the case" % how)
                        elif not w.ready:
                            raise RuntimeError("a fuzz worker failed to start (exit %s); its log: %s"
                                               % (code, w.log_tail()))
                        retire(w)
                        if pending:
                            start()
                        continue
                    w.buffer += chunk
                    while "\n" in w.buffer:
                        line, w.buffer = w.buffer.split("\n", 1)
                        message = json.loads(line)
                        if "ready" in message:
                            w.ready = True
                            dispatch(w)
                        elif message.get("phase") == "ours":
                            w.partial = message
                        else:
                            on_result(message)
                            dispatch(w)
                    if w.case is None and w.ready and not pending and w in workers:
                        retire(w)
                now = time.monotonic()
                for w in list(workers):
                    if w.deadline is not None and now > w.deadline:
                        if not w.ready:
                            raise RuntimeError("a fuzz worker did not start within %d s" % startup_timeout)
                        lost(w, "hang", "no answer within %.0f s" % timeout)
                        retire(w)
                        if pending:
                            start()
    finally:
        # an error, Ctrl-C or SIGTERM: the workers (each its own session) end with the pool
        child_processes.stop([w.proc for w in workers], grace=1.0)
        selector.close()
