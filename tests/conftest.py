"""Shared pytest hooks."""
import os

import pytest

# Tests check the compiled kernels themselves: compile on first call and wait, rather
# than run NumPy twins while a background worker compiles (the default for users;
# tests/test_jit_modes.py covers that mode and the twins).
os.environ.setdefault("CAFFE2PY_JIT", "inline")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` unless PyCUDA and a GPU are usable."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    from caffe2py.cuda import context
    ok, reason, _count = context.probe()
    if ok:
        return
    skip = pytest.mark.skip(reason="needs PyCUDA and a CUDA GPU: %s" % reason)
    for item in marked:
        item.add_marker(skip)
