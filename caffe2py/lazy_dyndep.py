"""caffe2.python.lazy_dyndep: op libraries loaded when ops are first needed.

RegisterOpsLibrary(name) records a library (what dyndep.InitOpsLibrary takes) to load
at the next lazy trigger (caffe2py.lazy); a library that fails to load is dropped
from the pending set and its exception handed to the handler SetErrorHandler set
(without one, the failure is ignored, as in Caffe2)."""
from . import dyndep, lazy

_pending = []
_error_handler = [None]


def RegisterOpsLibrary(name):
    """Load the op library `name` at the next trigger (once)."""
    if name not in _pending:
        _pending.append(name)


def SetErrorHandler(handler):
    """handler(exception) is called inside the `except` block of a failed load, so a
    bare `raise` in it re-raises the load's own exception."""
    _error_handler[0] = handler


def GetImportedOpsLibraries():
    _import_pending()
    return dyndep.GetImportedOpsLibraries()


def _import_pending():
    while _pending:
        name = _pending.pop(0)
        try:
            dyndep.InitOpsLibrary(name, trigger_lazy=False)
        except BaseException as exc:  # noqa: BLE001 - the handler decides, as in Caffe2
            if _error_handler[0] is not None:
                _error_handler[0](exc)


lazy.RegisterLazyImport(_import_pending)
