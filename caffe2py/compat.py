"""Run legacy Caffe2 scripts on caffe2py.

After `import caffe2py.compat`, `from caffe2.python import core, workspace, ...`,
`import caffe2.python.X.Y` for any caffe2py module `caffe2py.X.Y`, and
`from caffe2.proto import caffe2_pb2` resolve to caffe2py's modules (the same module
objects, so state such as the current workspace is shared).
`python -m caffe2py.compat script.py [args]` runs such a script unmodified
(`python -m caffe2py.compat -m module [args]` a module, e.g. pytest); with
`--legacy-numpy` first, the NumPy names Caffe2-era code used and NumPy removed (np.int,
np.float, np.asscalar, ...) are put back for that run (caffe2py/legacy_numpy.py); with
`--legacy-hypothesis`, hypothesis accepts the keywords Caffe2-era tests pass and it
removed (settings(timeout=...), average_size=, ...: caffe2py/legacy_hypothesis.py); with
`--gpu-nets-on-cpu`, Net.RunAllOnGPU keeps a net on the CPU (caffe2py/gpu_nets_on_cpu.py:
GPU-era scripts such as resnet50_trainer.py call it even when told to use the CPU).
"""
import importlib
import importlib.abc
import importlib.util
import runpy
import sys
import types

# Caffe2 module paths whose caffe2py counterpart has another name.
_RENAMED = {"caffe2.proto.caffe2_pb2": "caffe2py.proto.caffe2_pb2",
            # Caffe2's C++ extension (workspace.C): caffe2py's stand-in for it
            "caffe2.python._import_c_extension": "caffe2py.extension",
            "caffe2.python.caffe2_pybind11_state": "caffe2py.extension"}


def _target(fullname):
    """The caffe2py module that stands for Caffe2's `fullname`, or None."""
    if fullname in _RENAMED:
        return _RENAMED[fullname]
    if fullname.startswith("caffe2.python."):
        return "caffe2py." + fullname[len("caffe2.python."):]
    if fullname.startswith("caffe2.proto.") and fullname.endswith("_pb2"):
        return "caffe2py.proto." + fullname[len("caffe2.proto."):]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # importlib stamped the alias spec on the module; the module keeps its own
        module.__spec__ = self._own_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds `caffe2.python.*` as the caffe2py module of the same dotted name."""

    def find_spec(self, fullname, path=None, target=None):
        name = _target(fullname)
        if name is None:
            return None
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name),
                                               is_package=found.submodule_search_locations is not None)


def _package(name):
    module = types.ModuleType(name)
    module.__path__ = []
    module.__caffe2py__ = True
    return module


def install():
    """Register the `caffe2` package aliases (idempotent)."""
    if "caffe2" in sys.modules and getattr(sys.modules["caffe2"], "__caffe2py__", False):
        return
    root, python, proto = _package("caffe2"), _package("caffe2.python"), _package("caffe2.proto")
    root.python, root.proto = python, proto
    sys.modules.update({"caffe2": root, "caffe2.python": python, "caffe2.proto": proto})
    sys.meta_path.insert(0, _AliasFinder())
    # `from caffe2.python import core` looks the name up on the package first
    python.__getattr__ = _lazy_attribute("caffe2.python")
    proto.__getattr__ = _lazy_attribute("caffe2.proto")


def _lazy_attribute(package):
    def __getattr__(name):
        try:
            return importlib.import_module(package + "." + name)
        except ImportError:
            raise AttributeError("module '%s' has no attribute '%s' (caffe2py has no such module)"
                                 % (package, name)) from None
    return __getattr__


USAGE = "usage: python -m caffe2py.compat [--legacy-numpy] [--legacy-hypothesis] [--gpu-nets-on-cpu] (SCRIPT.py | -m MODULE) [ARGS...]\n"
# compat's own options, before the script; each names the module that installs it
_OPTIONS = {"--legacy-numpy": "legacy_numpy", "--legacy-hypothesis": "legacy_hypothesis",
            "--gpu-nets-on-cpu": "gpu_nets_on_cpu"}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    asked = []
    while argv and argv[0] in _OPTIONS:
        if argv[0] not in asked:
            asked.append(argv[0])
        argv = argv[1:]
    as_module = bool(argv) and argv[0] == "-m"
    if not argv or (as_module and len(argv) < 2):
        sys.stderr.write(USAGE)
        return 2
    install()
    for option in asked:        # only for the runs that ask
        importlib.import_module("." + _OPTIONS[option], __package__).install()
    if as_module:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")
    return 0


install()

if __name__ == "__main__":
    sys.exit(main())
