"""Caffe2's caffe2.python.timeout_guard: end the process when a call hangs.

    with timeout_guard.CompleteInTimeOrDie(10.0):
        workspace.RunNet(net)

A watcher thread waits timeout_secs for the block to finish. If it does not, the
watcher logs an error, prints the stack of every thread to stdout and sends the
process SIGINT (a KeyboardInterrupt in the main thread, so cleanup handlers run);
if the process is still alive GRACE_SECS later it prints the caller's stack again
and leaves with os._exit(1).

EuthanizeIfNecessary(timeout_secs) starts a watcher nobody stops: the process
ends within timeout_secs (plus the grace period), for programs that hang at exit.
"""
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback

log = logging.getLogger("timeout_guard")

# Seconds between SIGINT and the hard exit.
GRACE_SECS = 10.0


def _stack_text(only_thread=None):
    lines = []
    for thread_id, frame in sys._current_frames().items():
        if only_thread is not None and thread_id != only_thread.ident:
            continue
        lines.append("\n# ThreadID: %s" % thread_id)
        for entry in traceback.extract_stack(frame):
            lines.append('File: "%s", line %d, in %s' % (entry.filename, entry.lineno, entry.name))
            if entry.line:
                lines.append("  %s" % entry.line.strip())
    return "\n".join(lines)


class WatcherThread(threading.Thread):
    """Ends the process unless `completed` is set within timeout_secs."""

    def __init__(self, timeout_secs, grace_secs=None):
        super().__init__(daemon=True)
        self.timeout_secs = timeout_secs
        self.grace_secs = GRACE_SECS if grace_secs is None else grace_secs
        self.completed = False
        self.condition = threading.Condition()
        self.caller_thread = threading.current_thread()

    def complete(self):
        with self.condition:
            self.completed = True
            self.condition.notify()

    def run(self):
        deadline = time.monotonic() + self.timeout_secs
        with self.condition:
            while not self.completed and time.monotonic() < deadline:
                self.condition.wait(deadline - time.monotonic())
        if self.completed:
            return
        log.error("Call did not finish in time. Timeout:%ss PID: %d", self.timeout_secs, os.getpid())
        threading.Thread(target=self._force_exit, daemon=True).start()
        print("Caller thread was: {}".format(self.caller_thread))
        print("-----Before forcing------")
        print(_stack_text(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)

    def _force_exit(self):
        time.sleep(self.grace_secs)
        print("Caller thread was: {}".format(self.caller_thread))
        print("-----After force------")
        print(_stack_text(only_thread=self.caller_thread), flush=True)
        log.error("Process did not terminate cleanly in %s s, forcing", self.grace_secs)
        os._exit(1)


@contextlib.contextmanager
def CompleteInTimeOrDie(timeout_secs):
    watcher = WatcherThread(timeout_secs)
    watcher.start()
    try:
        yield
    finally:
        # Also when the block raises: its error is the one to report, not a timeout.
        watcher.complete()


def EuthanizeIfNecessary(timeout_secs=120):
    WatcherThread(timeout_secs).start()
