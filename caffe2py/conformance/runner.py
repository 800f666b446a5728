"""Runs each test file in a pytest child process of its own, `jobs` at a time,
each under a time limit: a hang or a crash costs that file, not the run.

Children run in a scratch folder (their current directory, pytest's rootdir,
ini file and basetemp) and write no bytecode, so nothing lands in the test
folders or the caller's directory. Each child leads its own process group (a
timeout ends the tests' own subprocesses too; a terminal's Ctrl-C reaches only
this process, which stops the children) and ends with this process even when it
is SIGKILLed (caffe2py.child_processes)."""
import json
import os
import subprocess
import sys
import tempfile
import time

from caffe2py import child_processes

from . import LEGACY_HYPOTHESIS_ENV, LEGACY_NUMPY_ENV, REPORT_ENV, ROOT_ENV
from .report import from_report

POLL_SECONDS = 0.05


class _Child:
    def __init__(self, index, test_file, scratch, keyword, env):
        self.index, self.file = index, test_file
        folder = os.path.join(scratch, "f%d" % index)
        os.makedirs(folder)
        self.report_path = os.path.join(folder, "report.json")
        self.log_path = os.path.join(folder, "output.log")
        ini = os.path.join(folder, "pytest.ini")
        with open(ini, "w") as fh:
            fh.write("[pytest]\n")          # not the test tree's ini: its addopts are not ours
        cmd = [sys.executable, "-m", "pytest", test_file.path, "-q",
               "-p", "caffe2py.conformance.plugin", "-p", "no:cacheprovider",
               "-c", ini, "--rootdir", folder, "--confcutdir", test_file.top,
               "--basetemp", os.path.join(folder, "basetemp")]
        if keyword:
            cmd += ["-k", keyword]
        env = dict(env, **{REPORT_ENV: self.report_path})
        if test_file.caffe2_root:
            env[ROOT_ENV] = test_file.caffe2_root
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.began = time.monotonic()

    def report(self):
        try:
            with open(self.report_path) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - n))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def result(self, timed_out, timeout):
        return from_report(self.file, self.report(), self.proc.returncode, time.monotonic() - self.began,
                           timed_out, timeout, self.log_tail())


def child_env(legacy_numpy=False, legacy_hypothesis=False):
    env = child_processes.child_env()
    env["PYTHONDONTWRITEBYTECODE"] = "1"      # no __pycache__ in the test folders
    env.pop(ROOT_ENV, None)
    env[LEGACY_NUMPY_ENV] = "1" if legacy_numpy else "0"
    env[LEGACY_HYPOTHESIS_ENV] = "1" if legacy_hypothesis else "0"
    return env


def run_files(files, jobs=1, timeout=600.0, keyword=None, on_result=None, legacy_numpy=False,
              legacy_hypothesis=False):
    """Run every ConformanceFile; returns [FileResult] in the order of `files`;
    on_result(FileResult) as each one ends. legacy_numpy: the children put back the
    NumPy names Caffe2-era tests use (caffe2py/legacy_numpy.py); legacy_hypothesis: they
    accept the hypothesis keywords those tests pass (caffe2py/legacy_hypothesis.py)."""
    jobs = max(1, int(jobs))
    results = [None] * len(files)
    todo = list(enumerate(files))
    running = []
    env = child_env(legacy_numpy, legacy_hypothesis)
    with tempfile.TemporaryDirectory(prefix="caffe2py-conformance-") as scratch:
        try:
            with child_processes.terminate_unwinds():
                while todo or running:
                    while todo and len(running) < jobs:
                        index, test_file = todo.pop(0)
                        running.append(_Child(index, test_file, scratch, keyword, env))
                    time.sleep(POLL_SECONDS)
                    for child in list(running):
                        timed_out = child.proc.poll() is None and time.monotonic() - child.began > timeout
                        if timed_out:
                            child_processes.stop([child.proc], grace=1.0)
                        if child.proc.poll() is None:
                            continue
                        running.remove(child)
                        results[child.index] = child.result(timed_out, timeout)
                        if on_result is not None:
                            on_result(results[child.index])
        finally:
            # an error, Ctrl-C or SIGTERM: the children (and their groups) end before we do
            child_processes.stop([c.proc for c in running], grace=1.0)
    return results
