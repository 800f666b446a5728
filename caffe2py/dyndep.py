"""caffe2.python.dyndep: Caffe2 loaded C++ op libraries here. caffe2py has no
C++ ops; importing a Python module that registers ops is the equivalent."""
import importlib

from .errors import Caffe2Error


def InitOpsLibrary(name, trigger_lazy=True):  # noqa: ARG001
    if name.endswith((".so", ".dylib", ".dll")):
        raise Caffe2Error("cannot load the C++ op library '%s': caffe2py runs Python ops only; "
                          "register the ops in a Python module and pass its module name" % name)
    importlib.import_module(name)


def GetImportedOpsLibraries():
    return set()
