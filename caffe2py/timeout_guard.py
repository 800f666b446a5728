"""caffe2.python.timeout_guard: CompleteInTimeOrDie(seconds), a block that must finish
in time or the process ends (Caffe2's guard against collective ops that deadlock).

A watchdog thread waits for the block; past the timeout it logs the stacks of every
thread and ends the process with exit status 1 (os._exit: a hung thread cannot block
it). EuthanizeIfNecessary(seconds) arms the same watchdog once for the whole process.
"""
import contextlib
import faulthandler
import logging
import os
import sys
import threading

log = logging.getLogger("timeout_guard")


class WatcherThread(threading.Thread):
    def __init__(self, timeout_secs):
        super().__init__(name="timeout_guard", daemon=True)
        self.timeout_secs = timeout_secs
        self.completed = threading.Event()
        self.condition = self.completed          # Caffe2's attribute name

    def run(self):
        if self.completed.wait(self.timeout_secs):
            return
        log.error("Call did not finish in time. Timeout: %ss; ending the process", self.timeout_secs)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(1)


@contextlib.contextmanager
def CompleteInTimeOrDie(timeout_secs):
    watcher = WatcherThread(timeout_secs)
    watcher.start()
    try:
        yield
    finally:
        watcher.completed.set()


_euthanizer = []


def EuthanizeIfNecessary(timeout_secs=120):
    """End the process if it is still running timeout_secs from the first call."""
    if not _euthanizer:
        watcher = WatcherThread(timeout_secs)
        watcher.start()
        _euthanizer.append(watcher)
