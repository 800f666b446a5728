"""Run legacy Caffe2 scripts on caffe2py.

After `import caffe2py.compat`, `from caffe2.python import core, workspace, ...`
and `from caffe2.proto import caffe2_pb2` resolve to caffe2py's modules.
`python -m caffe2py.compat script.py [args]` runs such a script unmodified.
"""
import importlib
import runpy
import sys
import types

_ALIASED = ("core", "workspace", "model_helper", "brew", "scope", "utils", "dyndep")


def install():
    """Register the `caffe2` package aliases in sys.modules (idempotent)."""
    if "caffe2" in sys.modules and getattr(sys.modules["caffe2"], "__caffe2py__", False):
        return
    root = types.ModuleType("caffe2")
    root.__caffe2py__ = True
    root.__path__ = []
    python = types.ModuleType("caffe2.python")
    python.__path__ = []
    proto = types.ModuleType("caffe2.proto")
    proto.__path__ = []
    root.python, root.proto = python, proto
    sys.modules.update({"caffe2": root, "caffe2.python": python, "caffe2.proto": proto})
    for name in _ALIASED:
        module = importlib.import_module("caffe2py." + name)
        setattr(python, name, module)
        sys.modules["caffe2.python." + name] = module
    from caffe2py.proto import caffe2_pb2
    proto.caffe2_pb2 = caffe2_pb2
    sys.modules["caffe2.proto.caffe2_pb2"] = caffe2_pb2


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.stderr.write("usage: python -m caffe2py.compat SCRIPT.py [ARGS...]\n")
        return 2
    install()
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")
    return 0


install()

if __name__ == "__main__":
    sys.exit(main())
