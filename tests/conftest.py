"""Shared pytest hooks."""
import os

import pytest

# Tests check the compiled kernels themselves: compile on first call and wait, rather
# than run NumPy twins while a background worker compiles (the default for users;
# tests/test_jit_modes.py covers that mode and the twins).
os.environ.setdefault("CAFFE2PY_JIT", "inline")


def pytest_configure(config):
    """Without a GPU, tests marked `cuda` run on caffe2py's CPU emulator of the CUDA
    device (an explicit CAFFE2PY_CUDA_BACKEND is left as it is)."""
    if config.pluginmanager.has_plugin("_cuda_dryrun") or os.environ.get("CAFFE2PY_CUDA_BACKEND"):
        return
    from caffe2py.cuda import backend, context, emulator
    if not context.probe()[0] and emulator.available()[0]:
        backend.select("emulator")


_NO_DEVICE = "needs a CUDA GPU with PyCUDA, or the CPU emulator"
_cuda_outcomes = {"ids": set(), "passed": 0, "failed": 0, "no_device": 0, "other_skips": []}


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` unless a GPU (or the emulator) is usable."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    _cuda_outcomes["ids"] = {item.nodeid for item in marked}
    if not marked:
        return
    from caffe2py.cuda import backend, context
    ok, reason, _count = context.probe()
    if ok:
        if backend.is_emulator():
            _prebuild_emulator_libraries()
        return
    skip = pytest.mark.skip(reason="%s (g++ 12+): %s" % (_NO_DEVICE, reason))
    for item in marked:
        item.add_marker(skip)


def _prebuild_emulator_libraries():
    """Compile every CUDA source the tests use for the emulator at once (in parallel;
    cached on disk afterwards), not one by one as tests first need them."""
    import glob
    from caffe2py.cuda.emulator import build
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = sorted(glob.glob(os.path.join(root, "kernels", "cuda", "*", "*.cu")) +
                     glob.glob(os.path.join(root, "tests", "cuda_kernels", "*.cu")))
    build.prebuild(sources)


def pytest_runtest_logreport(report):
    if report.nodeid not in _cuda_outcomes["ids"]:
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if _NO_DEVICE in reason:
            _cuda_outcomes["no_device"] += 1
        else:
            _cuda_outcomes["other_skips"].append(reason)
    elif report.failed:
        _cuda_outcomes["failed"] += 1
    elif report.when == "call":
        _cuda_outcomes["passed"] += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line CI checks: how many CUDA tests ran, on what, and that none was skipped
    for want of a device (tests that need files absent from this checkout are listed)."""
    out = _cuda_outcomes
    if not out["ids"] or config.pluginmanager.has_plugin("_cuda_dryrun"):
        return  # a dry run: CPU kernels stood in for the CUDA ones
    from caffe2py.cuda import backend, context
    ok, _, _ = context.probe()
    where = ("the CPU emulator" if backend.is_emulator() else context.device_name(0)) if ok else "no device"
    others = ""
    if out["other_skips"]:
        others = "; %d skipped for other reasons: %s" % (len(out["other_skips"]), "; ".join(sorted(set(
            r.replace("Skipped: ", "") for r in out["other_skips"]))))
    terminalreporter.write_line("CUDA tests on %s: %d passed, %d failed, %d skipped for want of a device%s"
                                % (where, out["passed"], out["failed"], out["no_device"], others))


@pytest.fixture
def fresh_workspace():
    """A reset default workspace before and after the test; test files that want it for
    every test say `pytestmark = pytest.mark.usefixtures("fresh_workspace")`."""
    from caffe2py import workspace
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()
