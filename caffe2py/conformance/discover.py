"""Which test files a `caffe2py conformance PATH...` run covers, and what each
child needs to know about where a file lives."""
import os
from dataclasses import dataclass

from caffe2py.errors import Caffe2Error

PATTERNS = ("*_test.py", "test_*.py")
_SKIPPED_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".tox", ".venv", "venv", "node_modules"}


@dataclass
class ConformanceFile:
    path: str           # absolute
    name: str           # shown in the table: relative to the common folder of all files
    top: str            # the PATH it was found under (its conftest.py files are loaded, not those above)
    caffe2_root: str    # the folder holding caffe2/python/ when the file lives under one, else None


def is_test_file(name):
    return name.endswith(".py") and (name.endswith("_test.py") or name.startswith("test_"))


def caffe2_root(path):
    """The folder that holds `caffe2/python/` above `path`, or None: the files then
    import each other as caffe2.python.<folder>.<module>, as in Caffe2's tree."""
    parts = os.path.dirname(path).split(os.sep)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "caffe2" and parts[i + 1] == "python":
            return os.sep.join(parts[:i]) or os.sep
    return None


def _walk(folder):
    for here, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(names):
            if is_test_file(name):
                yield os.path.join(here, name)


def find_test_files(paths):
    """[ConformanceFile] for files and folders (searched for *_test.py and test_*.py), in
    the order given, each file once."""
    if not paths:
        raise Caffe2Error("give at least one test file or folder")
    found, seen = [], set()
    for given in paths:
        path = os.path.abspath(given)
        if os.path.isdir(path):
            candidates, top = list(_walk(path)), path
            if not candidates:
                raise Caffe2Error("no test files (%s) under '%s'" % (", ".join(PATTERNS), given))
        elif os.path.isfile(path):
            if not path.endswith(".py"):
                raise Caffe2Error("'%s' is not a Python file" % given)
            candidates, top = [path], os.path.dirname(path)
        else:
            raise Caffe2Error("no such file or folder: '%s'" % given)
        for candidate in candidates:
            if candidate not in seen:
                seen.add(candidate)
                found.append(ConformanceFile(candidate, None, top, caffe2_root(candidate)))
    common = os.path.commonpath([os.path.dirname(f.path) for f in found])
    for f in found:
        f.name = os.path.relpath(f.path, common)
    return found
