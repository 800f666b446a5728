"""What the user sees while kernels compile: one line on stderr when compiling will
take more than about a second, a progress bar on a terminal while a caller waits, and
nothing with CAFFE2PY_QUIET=1 (the command line's --quiet sets it).

    announce_background(kernels)   once per process: they compile in the background
    announce_inline(kernel)        once per process: this call compiles first
    wait_for(kernels, timeout)     block until they run machine code
"""
import os
import sys
import time

_NOTABLE_SECONDS = 1.0
_said = set()


def quiet():
    return os.environ.get("CAFFE2PY_QUIET", "") not in ("", "0")


def _say(key, text):
    if key in _said or quiet():
        return
    _said.add(key)
    sys.stderr.write("caffe2py: %s\n" % text)
    sys.stderr.flush()


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def announce_background(kernels):
    from .background import estimate_seconds
    seconds = estimate_seconds(kernels)
    if seconds < _NOTABLE_SECONDS:
        return
    _say("background", "compiling %s for this machine in the background, once (~%.0f s); until they are "
         "ready their ops run on NumPy, slower" % (_plural(len(kernels), "CPU kernel"), seconds))


def announce_inline(kernel):
    from .background import estimate_seconds
    seconds = estimate_seconds([kernel])
    if seconds < _NOTABLE_SECONDS:
        return
    _say("inline", "compiling CPU kernels for this machine, once (~%.0f s each)" % seconds)


def _bar(done, total, seconds_left, width=24):
    filled = width * done // max(1, total)
    return "\rcompiling %s for this machine, once: [%s%s] %d/%d ~%.0f s left " % (
        _plural(total, "CPU kernel"), "#" * filled, "-" * (width - filled), done, total, max(0.0, seconds_left))


def wait_for(kernels, timeout=None):
    """Wait until each kernel (handed to background workers) runs machine code; True
    when all do. A bar on stderr when it is a terminal and the wait is notable."""
    from .background import estimate_seconds, start_workers
    pending = [k for k in dict.fromkeys(kernels) if not k.ready() and k._waiting is not None]
    if not pending:
        return True
    total = len(pending)
    start_workers()              # in case the workers of an earlier run have exited
    expected = estimate_seconds(pending)
    show = sys.stderr.isatty() and not quiet() and expected >= _NOTABLE_SECONDS
    began = time.monotonic()
    while pending:
        for kernel in list(pending):
            sig = kernel._waiting[0]
            if kernel._load_cached(sig):
                kernel._waiting = None
                kernel._use_machine_code()
                pending.remove(kernel)
            elif kernel._background_failed(sig):
                kernel._waiting = None
                kernel._use_machine_code()       # the next call compiles here and reports
                pending.remove(kernel)
        elapsed = time.monotonic() - began
        if show:
            sys.stderr.write(_bar(total - len(pending), total, expected - elapsed))
            sys.stderr.flush()
        if not pending:
            break
        if timeout is not None and elapsed > timeout:
            break
        time.sleep(0.1)
    if show:
        sys.stderr.write("\n")
    return not pending
