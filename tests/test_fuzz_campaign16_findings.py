"""What fuzz campaign 16 (seed 18, docs/reliability.md) found, fixed at its source."""
import numpy as np
import pytest
from onnx import helper

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.onnx import backend


def _gemm(a, b, c, **attributes):
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attributes)
    return backend.run_node(node, [a, b, c], opset_version=13)[0]


def test_integer_gemm_with_float_alpha_and_negative_beta():
    # onnx:18:35035: uint32 Gemm, alpha 0.1, beta -1: NumPy refused -1 "out of bounds for uint32"
    a, b, c = (np.array(v, np.uint32).reshape(3, 1) for v in ([3, 4, 5], [2, 4, 2], [6, 6, 3]))
    y = _gemm(a, b, c, alpha=0.1, beta=-1.0, transB=1)
    # the float64 formula, truncated toward zero, then wrapped as uint32 arithmetic wraps
    alpha = float(np.float32(0.1))          # ONNX float attributes are float32
    exact = alpha * (a.astype(np.float64) @ b.T.astype(np.float64)) - c.astype(np.float64)
    want = np.trunc(exact).astype(np.int64).astype(np.uint32)
    assert y.dtype == np.uint32
    np.testing.assert_array_equal(y, want)
    assert y[0, 0] == 2 ** 32 - 5                                  # 0.6 - 6 = -5.4 -> -5
    y = _gemm(*(np.array([[v]], np.int32) for v in (3, 2, 5)), alpha=2.5, beta=-1.0)
    assert y.tolist() == [[10]]                                    # 15 - 5
    y = _gemm(*(np.array([[v]], np.int64) for v in (3, 2, 5)))     # alpha = beta = 1: exact integers
    assert y.tolist() == [[11]]


@pytest.mark.parametrize("shape", [(0, 2, 1, 1), (1, 1, 2, 2)])
def test_grid_sample_of_strings_is_a_named_error(shape):
    # onnx:18:55585: an empty object X reached NumPy's "Cannot cast ufunc 'add' output from dtype('O')"
    x = np.full(shape, "a", dtype=object)
    grid = np.zeros((shape[0], 2, 2, 2), np.float32)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    with pytest.raises(Caffe2Error, match="blob 'x': holds strings; GridSample samples numeric tensors"):
        backend.run_node(node, [x, grid], opset_version=20)


def test_accumulate_histogram_with_absurd_num_buckets_is_a_named_error():
    # op:18:46111: num_buckets 2**62 reached np.zeros' "array is too big" when the op was planned
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.array([0.25, 0.75, 2.0], np.float32))
    net = core.Net("histogram")
    net.AccumulateHistogram(["x"], ["cur", "acc"], num_buckets=2 ** 62)
    with pytest.raises(Caffe2Error, match="num_buckets 4611686018427387904: the output shape"):
        workspace.RunNetOnce(net)
    net = core.Net("histogram_ok")
    net.AccumulateHistogram(["x"], ["cur", "acc"], num_buckets=2)
    workspace.RunNetOnce(net)
    # [below 0, [0, 0.5), [0.5, 1), at or above 1]
    assert workspace.FetchBlob("cur").tolist() == [0, 1, 1, 1]


def test_memory_problems_are_named_alike_at_plan_and_run_time():
    from caffe2py.executor import memory_problem
    assert "larger than any memory can hold" in memory_problem(ValueError("array is too big; `arr.size` ..."))
    assert memory_problem(MemoryError()) is not None
    wrapped = SystemError("returned a result with an exception set")
    wrapped.__cause__ = MemoryError()
    assert memory_problem(wrapped) is not None
    assert memory_problem(ValueError("something else")) is None
    context = MemoryError()
    context.__context__ = KeyError("unrelated")   # a MemoryError raised while handling another error
    assert "KeyError" not in memory_problem(context)
