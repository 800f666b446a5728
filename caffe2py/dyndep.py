"""caffe2.python.dyndep: Caffe2 loaded C++ op libraries here. caffe2py has no
C++ ops; importing a Python module that registers ops is the equivalent.

Caffe2 only warned about a library that is not there ("Ignoring ... as it is not
a valid file.") and went on, so a test whose ops live in a library of Caffe2's own
build (`@/caffe2:csrc`) still imported; caffe2py does the same for a name that is
neither an existing file nor an importable module."""
import importlib
import os
import sys

from .errors import Caffe2Error


def _not_a_module(name, exc):
    """Whether the import failed because `name` (or a package above it) is missing,
    not because something the module itself imports is."""
    missing = getattr(exc, "name", None)
    return missing is not None and (name == missing or name.startswith(missing + "."))


def InitOpsLibrary(name, trigger_lazy=True):  # noqa: ARG001
    if name.endswith((".so", ".dylib", ".dll")) and os.path.exists(name):
        raise Caffe2Error("cannot load the C++ op library '%s': caffe2py runs Python ops only; "
                          "register the ops in a Python module and pass its module name" % name)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if os.path.exists(name) or not _not_a_module(name, exc):
            raise
        sys.stderr.write("Ignoring %s as it is not a valid file.\n" % name)
    except (TypeError, ValueError):       # not a module name at all (a path, '@/caffe2:csrc')
        if os.path.exists(name):
            raise
        sys.stderr.write("Ignoring %s as it is not a valid file.\n" % name)


def GetImportedOpsLibraries():
    return set()
