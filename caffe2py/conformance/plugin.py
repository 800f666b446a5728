"""The pytest plugin of a conformance child (`pytest -p caffe2py.conformance.plugin`).

Loaded before collection, it ends this process with the runner's (even a
SIGKILLed one), installs the `caffe2` aliases and the folder layout, loads
Caffe2's hypothesis profile, and counts results into the JSON report the runner
reads (CAFFE2PY_CONFORMANCE_REPORT). The report is rewritten after every test,
and names the test that is running, so a crash or a hang still tells what got
done and where it stopped."""
import json
import os

from caffe2py import child_processes

from . import LEGACY_HYPOTHESIS_ENV, LEGACY_NUMPY_ENV, REPORT_ENV, ROOT_ENV

child_processes.protect_from_env()
import caffe2py.compat  # noqa: E402,F401  (caffe2.python -> caffe2py, before the test file imports)

if os.environ.get(LEGACY_NUMPY_ENV) == "1":     # `conformance --legacy-numpy`
    from caffe2py import legacy_numpy
    legacy_numpy.install()
if os.environ.get(LEGACY_HYPOTHESIS_ENV) == "1":     # `conformance --legacy-hypothesis`
    try:
        from caffe2py import legacy_hypothesis
        legacy_hypothesis.install()
    except ImportError:      # no hypothesis: only files that use it fail, at their import
        pass

if os.environ.get(ROOT_ENV):
    from .layout import install as _install_layout
    _install_layout(os.environ[ROOT_ENV])
try:
    # registers Caffe2's profiles and loads CAFFE2_HYPOTHESIS_PROFILE (default "dev"),
    # so @given tests of files that do not import it themselves run under it too
    import caffe2py.hypothesis_test_util  # noqa: F401
except ImportError:          # no hypothesis: only files that use it fail, at their import
    pass


def _one_line(text, limit=300, first=False):
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    # pytest marks the exception lines of a formatted traceback with "E "
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    lines = marked or lines
    line = (lines[0] if first else lines[-1]) if lines else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def short_message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        # "AssertionError: the test's message" first, assertion rewriting's detail after
        return _one_line(crash.message, first=True)
    if isinstance(report.longrepr, tuple):          # a skip: (file, line, reason)
        return _one_line(report.longrepr[2])
    return _one_line(report.longrepr)


def short_id(nodeid):
    """'Class::test' (the file is the table's row)."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


class Report:
    def __init__(self, path):
        self.path = path
        self.data = {"collected": None, "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                     "collect_errors": 0, "first_failure": None, "current": None,
                     "finished": False, "exitstatus": None}

    def write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)

    def fail(self, kind, nodeid, message):
        self.data[kind] += 1
        if self.data["first_failure"] is None:
            self.data["first_failure"] = {"test": short_id(nodeid), "message": message}

    # ------------------------------------------------------------ pytest hooks

    def pytest_collectreport(self, report):
        if report.failed:
            self.data["collect_errors"] += 1
            # the module's own report (the file did not import) has no "::" part
            nodeid = report.nodeid if "::" in report.nodeid else "(import)"
            self.fail("errors", nodeid, short_message(report))
            self.write()
        elif report.skipped:                # pytest.skip(allow_module_level=True), as pytest counts it
            self.data["skipped"] += 1
            self.write()

    def pytest_collection_finish(self, session):
        self.data["collected"] = len(session.items)
        self.write()

    def pytest_runtest_logstart(self, nodeid, location):
        self.data["current"] = short_id(nodeid)
        self.write()

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            if report.passed:
                self.data["passed"] += 1                 # an unexpected pass (xpass) too
            elif report.skipped:
                self.data["skipped"] += 1                # an expected failure (xfail) too
            else:
                self.fail("failed", report.nodeid, short_message(report))
        elif report.failed:                              # setup or teardown
            self.fail("errors", report.nodeid, short_message(report))
        elif report.skipped and report.when == "setup":
            self.data["skipped"] += 1

    def pytest_runtest_logfinish(self, nodeid, location):
        self.data["current"] = None
        self.write()

    def pytest_sessionfinish(self, session, exitstatus):
        self.data["finished"] = True
        self.data["exitstatus"] = int(exitstatus)
        self.write()


def pytest_configure(config):
    path = os.environ.get(REPORT_ENV)
    if path:
        config.pluginmanager.register(Report(path), "caffe2py-conformance-report")
