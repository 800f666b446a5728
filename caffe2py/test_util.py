"""Caffe2's test helpers (caffe2.python.test_util): a unittest TestCase that gives
every test a fresh workspace, random-blob helpers and temporary folders.

    from caffe2.python import test_util

    class MyTest(test_util.TestCase):
        def test_relu(self):
            test_util.randBlobFloat32("x", 2, 3, offset=-0.5)
            ...
"""
import os
import pathlib
import shutil
import tempfile
import unittest

import numpy as np

from . import core, extension, workspace


def rand_array(*dims):
    """float32 values uniform in [-0.5, 0.5); a 0-d array when no dims are given."""
    return np.asarray(np.random.rand(*dims) - 0.5).astype(np.float32)


def randBlob(name, type, *dims, **kwargs):  # noqa: A002 - Caffe2's parameter name
    """Feed `name` with uniform [0, 1) values of numpy type `type`, plus `offset`."""
    offset = kwargs.get("offset", 0.0)
    workspace.FeedBlob(name, np.random.rand(*dims).astype(type) + offset)


def randBlobFloat32(name, *dims, **kwargs):
    randBlob(name, np.float32, *dims, **kwargs)


def randBlobsFloat32(names, *dims, **kwargs):
    for name in names:
        randBlobFloat32(name, *dims, **kwargs)


def numOps(net):
    """How many operators `net` (a core.Net) holds."""
    return len(net.Proto().op)


def str_compare(a, b, encoding="utf8"):
    """Compare two strings that may each be bytes or str."""
    if isinstance(a, bytes):
        a = a.decode(encoding)
    if isinstance(b, bytes):
        b = b.decode(encoding)
    return a == b


def get_default_test_flags():
    """The GlobalInit flags Caffe2's tests started with (accepted and ignored here)."""
    return ["caffe2", "--caffe2_log_level=0", "--caffe2_cpu_allocator_do_zero_fill=0",
            "--caffe2_cpu_allocator_do_junk_fill=1"]


def caffe2_flaky(test_method):
    """Mark a test flaky: it runs only when CAFFE2_RUN_FLAKY_TESTS=1, and the others
    run only when it is not set (Caffe2's split of flaky and regular test runs)."""
    test_method.__caffe2_flaky__ = True
    return test_method


def is_flaky_test_mode():
    return os.getenv("CAFFE2_RUN_FLAKY_TESTS", "0") == "1"


def _env_flag(name):
    return os.getenv(name, "").lower() in ("1", "true", "yes")


# CI-environment flags Caffe2's tests consulted to skip slow or flaky cases.
IN_CIRCLECI = _env_flag("IN_CIRCLECI")
IN_CIRCLECI_FLAKY_ENV = IN_CIRCLECI and _env_flag("IN_CIRCLECI_FLAKY_ENV")


class TestCase(unittest.TestCase):
    """unittest.TestCase whose tests each start and end with an empty current
    workspace; `self.ws` is a fresh workspace of its own, a C.Workspace as in Caffe2
    (create_blob(name).feed(x), run(op), blobs[name].fetch())."""

    @classmethod
    def setUpClass(cls):
        workspace.GlobalInit(get_default_test_flags())
        # engine preferences set elsewhere must not change which kernels a test runs
        core.SetEnginePref({}, {})

    def setUp(self):
        method = getattr(self, self._testMethodName, None)
        flaky = getattr(method, "__caffe2_flaky__", False)
        if is_flaky_test_mode() and not flaky:
            raise unittest.SkipTest("non-flaky tests are skipped in flaky test mode")
        if flaky and not is_flaky_test_mode():
            raise unittest.SkipTest("flaky tests run only with CAFFE2_RUN_FLAKY_TESTS=1")
        self.ws = extension.Workspace()
        workspace.ResetWorkspace()

    def tearDown(self):
        workspace.ResetWorkspace()

    def make_tempdir(self):
        """A new temporary folder (pathlib.Path), removed when the test ends."""
        path = pathlib.Path(tempfile.mkdtemp(prefix=type(self).__name__ + "_"))
        self.addCleanup(shutil.rmtree, path, ignore_errors=True)
        return path
