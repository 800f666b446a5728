"""Running Caffe2-style test files on caffe2py (`caffe2py conformance`).

Each test file runs in a pytest child process of its own (runner.py) with the
`caffe2` import aliases installed and the Caffe2 folder layout mapped (plugin.py,
layout.py); the child's plugin counts its results into a small JSON report that
the parent reads (report.py). Files are found by discover.py.
"""

# How the runner tells a child where to write its report and where the caffe2/python/
# folder is (here, not in plugin.py: importing the plugin installs the aliases).
REPORT_ENV = "CAFFE2PY_CONFORMANCE_REPORT"
ROOT_ENV = "CAFFE2PY_CONFORMANCE_CAFFE2_ROOT"
LEGACY_NUMPY_ENV = "CAFFE2PY_CONFORMANCE_LEGACY_NUMPY"   # "1": the child puts back np.int & co.
LEGACY_HYPOTHESIS_ENV = "CAFFE2PY_CONFORMANCE_LEGACY_HYPOTHESIS"   # "1": settings(timeout=...) & co.
