"""Per-file results of a conformance run, the table rows, the summary line and
the JSON document (`--json`)."""
import signal
from dataclasses import asdict, dataclass, field

STATUSES = ("ran", "timeout", "crashed", "pytest_error")


@dataclass
class FileResult:
    file: str                   # absolute path
    name: str                   # as shown in the table
    status: str = "ran"         # one of STATUSES
    imported: bool = False      # collected without errors (and did not die or hang while importing)
    collected: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    first_failure: dict = None  # {"test": ..., "message": ...}
    exit_code: int = None       # pytest's status, or -N for a signal
    seconds: float = 0.0
    log_tail: str = ""          # the child's last output lines when it did not finish

    def failure_line(self, width=None):
        if not self.first_failure:
            return ""
        line = "%s: %s" % (self.first_failure["test"], self.first_failure["message"])
        return line if width is None or len(line) <= width else line[:width - 3] + "..."

    @property
    def clean(self):
        return self.status == "ran" and self.imported and not (self.failed or self.errors)


def from_report(test_file, report, exit_code, seconds, timed_out, timeout, log_tail):
    """A FileResult from what the child's plugin wrote (None when it wrote nothing)
    and how the child ended."""
    r = FileResult(test_file.path, test_file.name, exit_code=exit_code, seconds=round(seconds, 2))
    report = report or {}
    for key in ("passed", "failed", "errors", "skipped"):
        setattr(r, key, report.get(key, 0))
    r.collected = report.get("collected") or 0
    r.first_failure = report.get("first_failure")
    r.imported = report.get("collected") is not None and not report.get("collect_errors")
    if timed_out or not report.get("finished"):
        r.status = "timeout" if timed_out else "crashed"
        r.log_tail = log_tail
        what = ("timed out after %g s" % timeout if timed_out else
                "the process died (%s)" % describe_exit(exit_code))
        current = report.get("current")
        if current is not None:
            where = current
        elif report.get("collected") is None:
            where, what = test_file.name, what + " while importing"
        else:
            where, what = test_file.name, what + " between tests"
        r.errors += 1                   # the test it stopped in (or the import) is an error
        if r.first_failure is None:         # the first failure in the order things happened
            r.first_failure = {"test": where, "message": what}
    elif report.get("exitstatus") in (3, 4):       # pytest's internal error, usage error
        r.status = "pytest_error"
        r.log_tail = log_tail
        if r.first_failure is None:
            r.first_failure = {"test": test_file.name, "message": "pytest stopped with status %d: %s"
                               % (report["exitstatus"], last_line(log_tail))}
    return r


def describe_exit(code):
    if code is None:
        return "unknown status"
    if code < 0:
        try:
            return "killed by signal %d, %s" % (-code, signal.Signals(-code).name)
        except ValueError:
            return "killed by signal %d" % -code
    return "exit status %d before pytest finished" % code


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# --------------------------------------------------------------------- output

_COLUMNS = (("imported", 8), ("passed", 6), ("failed", 6), ("errors", 6), ("skipped", 7))


def header(name_width):
    cells = ["file".ljust(name_width)] + [title.rjust(width) for title, width in _COLUMNS] + ["first failure"]
    return "  ".join(cells)


def row(result, name_width, failure_width=100):
    imported = "yes" if result.imported else "no"
    values = [imported, result.passed, result.failed, result.errors, result.skipped]
    cells = [result.name.ljust(name_width)] + [str(v).rjust(w) for v, (_, w) in zip(values, _COLUMNS)]
    return "  ".join(cells + [result.failure_line(failure_width)]).rstrip()


@dataclass
class Totals:
    files: int = 0
    imported: int = 0
    collected: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    timed_out: int = 0
    crashed: int = 0
    pytest_errors: int = 0
    seconds: float = 0.0
    percent: dict = field(default_factory=dict)


def _percent(part, whole):
    return round(100.0 * part / whole, 1) if whole else None


def totals(results, seconds=0.0):
    t = Totals(files=len(results), seconds=round(seconds, 2))
    for r in results:
        t.imported += r.imported
        for key in ("collected", "passed", "failed", "errors", "skipped"):
            setattr(t, key, getattr(t, key) + getattr(r, key))
        t.timed_out += r.status == "timeout"
        t.crashed += r.status == "crashed"
        t.pytest_errors += r.status == "pytest_error"
    t.percent = {"files_imported": _percent(t.imported, t.files), "tests_passed": _percent(t.passed, t.collected)}
    return t


def _pct(value):
    return "-" if value is None else "%.1f%%" % value


def summary_line(t):
    line = ("%d file(s): %d imported (%s); %d test(s) collected: %d passed (%s), %d failed, %d errors, "
            "%d skipped" % (t.files, t.imported, _pct(t.percent["files_imported"]), t.collected, t.passed,
                            _pct(t.percent["tests_passed"]), t.failed, t.errors, t.skipped))
    extra = [("%d timed out", t.timed_out), ("%d crashed", t.crashed), ("%d pytest error(s)", t.pytest_errors)]
    notes = [text % n for text, n in extra if n]
    if notes:
        line += "; files: " + ", ".join(notes)
    return line + "; %.1f s" % t.seconds


def to_json(results, t, options):
    return {"files": [asdict(r) for r in results], "totals": asdict(t), "options": options}
