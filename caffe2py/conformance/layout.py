"""Caffe2's test files import their neighbours by package path
(`from caffe2.python.operator_test.foo_helper import x`). Where the files live
under a `caffe2/python/` folder, module names `caffe2.python.<sub>...` that
caffe2py has no module for are looked up in that real folder instead."""
import importlib.abc
import importlib.machinery
import os
import sys


class FolderFinder(importlib.abc.MetaPathFinder):
    """Finds `caffe2.python.a.b` as <python_dir>/a/b(.py) when the compat aliases
    did not (they come first: caffe2py's own modules win)."""

    def __init__(self, python_dir):
        self.python_dir = python_dir

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("caffe2.python."):
            return None
        parts = fullname.split(".")[2:]
        folder = os.path.join(self.python_dir, *parts[:-1])
        if not os.path.isdir(folder):
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [folder])


def install(root):
    """Map `caffe2.python.*` onto <root>/caffe2/python after caffe2py's aliases."""
    import caffe2py.compat as compat
    compat.install()
    python_dir = os.path.join(root, "caffe2", "python")
    if any(isinstance(f, FolderFinder) and f.python_dir == python_dir for f in sys.meta_path):
        return
    aliases = [i for i, f in enumerate(sys.meta_path) if isinstance(f, compat._AliasFinder)]
    sys.meta_path.insert(aliases[0] + 1 if aliases else 0, FolderFinder(python_dir))
