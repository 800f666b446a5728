"""Shared by the sparse/segment op tests: Caffe2's HypothesisTestCase with shape
inference asserted (every output's inferred shape and type must match the computed
one), a `check` that accepts a reference returning one array, and `run` for the
tests that look at outputs themselves."""
import numpy as np
from hypothesis import HealthCheck, settings

import caffe2py.compat  # noqa: F401  (the caffe2.python aliases, as a Caffe2 test imports them)
import caffe2.python.hypothesis_test_util as hu
from caffe2.python import workspace

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)


class ReferenceTestCase(hu.HypothesisTestCase):
    assert_shape_inference = True

    def check(self, op, inputs, reference, threshold=1e-4):
        """assertReferenceChecks on the CPU; `reference` may return one array."""
        def ref(*args):
            out = reference(*args)
            return tuple(out) if isinstance(out, (list, tuple)) else (out,)
        return self.assertReferenceChecks(hu.cpu_do, op, inputs, ref, threshold=threshold)


def run(op, inputs):
    """Outputs of `op` on `inputs`, in a fresh workspace."""
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, np.asarray(value) if not isinstance(value, np.ndarray) else value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(name) for name in op.output]
