"""caffe2.python.dyndep: Caffe2 loaded C++ op libraries here. caffe2py has no
C++ ops; importing a Python module that registers ops is the equivalent."""
import importlib
import logging
import os

from . import lazy
from .errors import Caffe2Error

log = logging.getLogger(__name__)


def InitOpsLibrary(name, trigger_lazy=True):
    """Import the Python module `name` (its ops register). A file path that does not
    exist is skipped with a warning, as Caffe2 did (resnet50_trainer.py names
    '@/caffe2/caffe2/distributed:file_store_handler_ops', whose ops caffe2py has built
    in); an existing C++ library cannot be loaded."""
    if trigger_lazy:
        lazy.TriggerLazyImport()
    if name.endswith((".so", ".dylib", ".dll")) and os.path.exists(name):
        raise Caffe2Error("cannot load the C++ op library '%s': caffe2py runs Python ops only; "
                          "register the ops in a Python module and pass its module name" % name)
    if "/" in name or name.endswith((".so", ".dylib", ".dll")):
        if not os.path.exists(name):
            log.warning("Ignoring %s as it is not a valid file.", name)
            return
        raise Caffe2Error("cannot load '%s': caffe2py imports Python modules by name, not files" % name)
    importlib.import_module(name)


def GetImportedOpsLibraries():
    return set()
