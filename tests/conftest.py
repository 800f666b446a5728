"""Shared pytest hooks."""
import os

import pytest


def pytest_configure(config):
    """Without a GPU, tests marked `cuda` run on caffe2py's CPU emulator of the CUDA
    device (an explicit CAFFE2PY_CUDA_BACKEND is left as it is)."""
    if config.pluginmanager.has_plugin("_cuda_dryrun") or os.environ.get("CAFFE2PY_CUDA_BACKEND"):
        return
    from caffe2py.cuda import backend, context, emulator
    if not context.probe()[0] and emulator.available()[0]:
        backend.select("emulator")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` unless a GPU (or the emulator) is usable."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    from caffe2py.cuda import backend, context
    ok, reason, _count = context.probe()
    if ok:
        if backend.is_emulator():
            _prebuild_emulator_libraries()
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with PyCUDA, or the CPU emulator (g++ 12+): %s" % reason)
    for item in marked:
        item.add_marker(skip)


def _prebuild_emulator_libraries():
    """Compile every CUDA source the tests use for the emulator at once (in parallel;
    cached on disk afterwards), not one by one as tests first need them."""
    import glob
    from caffe2py.cuda.emulator import build
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = sorted(glob.glob(os.path.join(root, "kernels", "cuda", "*.cu")) +
                     glob.glob(os.path.join(root, "tests", "cuda_kernels", "*.cu")))
    build.prebuild(sources)
