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


# Found reading the change after campaign 18: the same wrapped LENGTHS crashed the process
# (segmentation fault) in the lookups' compiled offsets loop, LengthsMax / LengthsWeightedSum
# and LengthsRangeFill's np.repeat, and AddPadding accepted them as two rows' lengths.
# Each runs in a child process, so a crash fails the test instead of ending the run.
_WRAPPED_CASES = [
    ("SparseLengthsSum", ["data", "indices", "lengths"], "the sum of lengths values should be the size"),
    ("SparseLengthsSumFused8BitRowwise", ["fused", "indices", "lengths"], "the sum of lengths values should be"),
    ("LengthsMax", ["rows", "lengths"], "LENGTHS add up to 18446744073709551618"),
    ("LengthsWeightedSum", ["rows", "weights", "lengths"], "LENGTHS add up to 18446744073709551618"),
    ("LengthsRangeFill", ["lengths"], "LENGTHS add up to 18446744073709551618"),
    ("LengthsGather", ["rows", "lengths", "indices"], "LENGTHS add up to 18446744073709551618"),
    ("AddPadding", ["rows", "lengths"], "LENGTHS add up to 18446744073709551618"),
    ("RemovePadding", ["rows", "lengths"], "LENGTHS add up to 18446744073709551618"),
]

_CHILD = """
import sys, numpy as np
from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
feeds = {"data": np.arange(12, dtype=np.float32).reshape(3, 4), "fused": np.zeros((3, 12), np.uint8),
         "rows": np.ones((2, 4), np.float32), "weights": np.ones(2, np.float32),
         "indices": np.array([0, 1], np.int64), "lengths": np.array([2**63 - 1, 2**63 - 1, 4], np.int64)}
op_type, names = sys.argv[1], sys.argv[2].split(",")
for name in names:
    workspace.FeedBlob(name, feeds[name])
net = core.Net("wrapped")
getattr(net, op_type)(names, ["out"])
try:
    workspace.RunNetOnce(net)
    print("RAN")
except Caffe2Error as exc:
    print("ERROR", exc, "HAS_OUT", workspace.HasBlob("out"))
"""


@pytest.mark.parametrize("op_type, inputs, message", _WRAPPED_CASES)
def test_wrapped_lengths_are_refused_without_crashing(op_type, inputs, message):
    import os
    import subprocess
    import sys
    env = dict(os.environ, CAFFE2PY_JIT="inline")      # the compiled loops, where the crash was
    done = subprocess.run([sys.executable, "-c", _CHILD, op_type, ",".join(inputs)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ERROR"), done.stdout
    assert "blob 'lengths'" in done.stdout and message in done.stdout, done.stdout
    assert "HAS_OUT False" in done.stdout


def test_lookup_offsets_saturate_instead_of_wrapping_in_kernel_and_twin():
    from caffe2py.kernels.cpu.recsys import lookup_loops as loops
    lengths = np.array([INT64_MAX, INT64_MAX, 4], np.int64)
    for run in (loops.offsets_of_lengths, loops._offsets_of_lengths_numpy):
        offsets = np.empty(4, np.int64)
        bad, longest = run(lengths, offsets)
        assert (bad, longest) == (-1, INT64_MAX)
        assert offsets.tolist() == [0, INT64_MAX, INT64_MAX, INT64_MAX]
        offsets = np.empty(4, np.int64)
        run(np.array([2, 0, 3], np.int64), offsets)
        assert offsets.tolist() == [0, 2, 2, 5]
