"""caffe2.python.lazy: work deferred until ops are first needed.

RegisterLazyImport(f) adds f to the functions TriggerLazyImport() calls; caffe2py
triggers them where Caffe2 does: core.RefreshRegisteredOperators, workspace.CreateNet
and dyndep.InitOpsLibrary (lazy_dyndep registers its pending op libraries here)."""

_lazy_imports = []


def RegisterLazyImport(lazy):
    _lazy_imports.append(lazy)


def TriggerLazyImport():
    for lazy in list(_lazy_imports):
        lazy()
