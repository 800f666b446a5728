"""A reference check in the shape of caffe2.python.hypothesis_test_util's
assertReferenceChecks(device_option, op, inputs, reference, threshold): run `op` on
`inputs` (fed under the op's input names) and compare every output with what the
NumPy `reference(*inputs)` returns (allclose for floats, exact otherwise).

Kept to that signature so that tests move to hu.HypothesisTestCase by replacing
`assert_reference_checks(op, ...)` with `self.assertReferenceChecks(gc, op, ...)`."""
import numpy as np
from hypothesis import HealthCheck, settings

from caffe2py import workspace

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)


def run(op, inputs):
    """Outputs of `op` on `inputs`, in a fresh workspace."""
    workspace.ResetWorkspace()
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value)
    workspace.RunOperatorOnce(op)
    return [workspace.FetchBlob(name) for name in op.output]


def assert_reference_checks(op, inputs, reference, threshold=1e-4):
    got = run(op, inputs)
    want = reference(*inputs)
    if not isinstance(want, (list, tuple)):
        want = [want]
    assert len(want) == len(got), "reference gave %d outputs, the op %d" % (len(want), len(got))
    for name, g, w in zip(op.output, got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, "%s: shape %s, reference %s" % (name, g.shape, w.shape)
        if w.dtype.kind == "f" or g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=threshold, atol=threshold, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
    return got
