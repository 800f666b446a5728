"""What fuzz campaign 18 (seed 20, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

INT64_MAX = np.iinfo(np.int64).max


def _run(op_type, lengths, outputs=("out",)):
    workspace.ResetWorkspace()
    workspace.FeedBlob("lengths", lengths)
    net = core.Net(op_type)
    getattr(net, op_type)(["lengths"], list(outputs))
    workspace.RunNetOnce(net)
    return workspace.FetchBlob(outputs[0])


@pytest.mark.parametrize("op_type", ["LengthsToWeights", "LengthsToSegmentIds", "LengthsToRanges"])
def test_lengths_whose_sum_wraps_around_int64_are_a_named_error(op_type):
    # op:20:82706: LENGTHS [2, 2**63 - 1] summed to a negative int64 and reached
    # np.empty's "negative dimensions are not allowed" (LengthsToRanges' offsets wrapped silently)
    with pytest.raises(Caffe2Error, match="LENGTHS add up to 9223372036854775809, more than an int64 count holds"):
        _run(op_type, np.array([2, INT64_MAX], np.int64))
    assert not workspace.HasBlob("out")


def test_lengths_that_still_fit_int64_are_not_refused():
    # the exact sum decides near the limit: 2**62 + (2**62 - 1) = 2**63 - 1 fits
    ranges = _run("LengthsToRanges", np.array([2 ** 62, 2 ** 62 - 1], np.int64))
    assert ranges.tolist() == [[0, 2 ** 62], [2 ** 62, 2 ** 62 - 1]]
    weights = _run("LengthsToWeights", np.array([4, 0, 1], np.int32))
    np.testing.assert_allclose(weights, [0.5, 0.5, 0.5, 0.5, 1.0])       # 1 / sqrt(l), l times
