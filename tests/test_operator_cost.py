"""workspace.GetOperatorCost: Caffe2's cost functions, (flops, bytes_written, bytes_read),
checked against the formulas written out here."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _feed(**arrays):
    for name, value in arrays.items():
        workspace.FeedBlob(name, value)


def test_conv_nchw_and_nhwc():
    _feed(X=np.zeros((2, 3, 8, 8), np.float32), W=np.zeros((4, 3, 3, 3), np.float32),
          b=np.zeros(4, np.float32))
    op = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernel=3, pad=1)
    y_elems = 2 * 4 * 8 * 8                      # N * M * Hout * Wout
    taps = 3 * 3 * 3                             # kh * kw * C
    expected = (2 * y_elems * taps, 4 * y_elems, 4 * (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 4))
    assert workspace.GetOperatorCost(op, ["X", "W", "b"]) == expected
    # the serialized form, and the C extension's function, answer the same
    assert workspace.C.get_operator_cost(op.SerializeToString(), ["X", "W", "b"]) == expected
    _feed(Xh=np.zeros((1, 6, 6, 2), np.float32), Wh=np.zeros((5, 3, 3, 2), np.float32))
    op = core.CreateOperator("Conv", ["Xh", "Wh"], ["Y"], kernel=3, stride=1, order="NHWC")
    y_elems = 1 * 5 * 4 * 4
    assert workspace.GetOperatorCost(op, ["Xh", "Wh"]) == (
        2 * y_elems * 3 * 3 * 2, 4 * y_elems, 4 * (6 * 6 * 2 + 5 * 3 * 3 * 2))


def test_caffe2_workspace_test_conv_flops():
    # Caffe2's workspace_test: 1 output channel, 8x8 output, 3x3 kernel, 1 input channel per filter
    _feed(X=np.zeros((1, 8, 8, 8)), W=np.zeros((1, 1, 3, 3)))
    op = core.CreateOperator("Conv", ["X", "W"], ["Y"], stride=1, pad_t=1, pad_l=1, pad_b=1, pad_r=1, kernel=3)
    flops, _, _ = workspace.GetOperatorCost(op.SerializeToString(), ["X", "W"])
    assert flops == 2 * 8 * 8 * 3 * 3 == 1152


def test_fc_and_fc_transposed():
    _feed(X=np.zeros((5, 2, 3), np.float32), W=np.zeros((7, 6), np.float32), b=np.zeros(7, np.float32),
          Wt=np.zeros((6, 7), np.float32))
    m, k, n = 5, 6, 7
    expected = (m * n * (2 * k + 1), 4 * m * n, 4 * (k * (m + n) + n))
    assert workspace.GetOperatorCost(core.CreateOperator("FC", ["X", "W", "b"], "Y"), ["X", "W", "b"]) == expected
    assert workspace.GetOperatorCost(core.CreateOperator("FCTransposed", ["X", "Wt", "b"], "Y"),
                                     ["X", "Wt", "b"]) == expected
    # axis=2: M = 5 * 2, K = 3
    _feed(W3=np.zeros((7, 3), np.float32))
    m, k = 10, 3
    assert workspace.GetOperatorCost(core.CreateOperator("FC", ["X", "W3", "b"], "Y", axis=2),
                                     ["X", "W3", "b"]) == (m * n * (2 * k + 1), 4 * m * n, 4 * (k * (m + n) + n))


def test_concat_and_split_count_moved_bytes():
    a, b = np.zeros((2, 3), np.float64), np.zeros((2, 5), np.float64)
    _feed(a=a, b=b)
    op = core.CreateOperator("Concat", ["a", "b"], ["y", "info"], axis=1)
    assert workspace.GetOperatorCost(op, ["a", "b"]) == (0, 8 * 2 * 8 + 4 * 2, a.nbytes + b.nbytes)
    op = core.CreateOperator("Concat", ["a", "a"], ["y", "info"], axis=0, add_axis=1)
    assert workspace.GetOperatorCost(op, ["a", "a"]) == (0, 8 * 2 * 2 * 3 + 4 * 2, 2 * a.nbytes)
    _feed(split=np.array([1, 2], np.int32))
    op = core.CreateOperator("Split", ["a", "split"], ["p", "q"], axis=1)
    assert workspace.GetOperatorCost(op, ["a", "split"]) == (0, a.nbytes, a.nbytes + 8)
    op = core.CreateOperator("Split", ["b"], ["p"], axis=1)
    assert workspace.GetOperatorCost(op, ["b"]) == (0, b.nbytes, b.nbytes)


def test_pointwise_ops_and_sum():
    x, y = np.zeros((4, 5), np.float32), np.zeros((5,), np.float32)
    _feed(x=x, y=y, z=np.zeros((4, 5), np.float32))
    for op_type, per_point in (("Add", 1), ("Mul", 1), ("Sub", 1), ("Div", 1), ("Relu", 0)):
        inputs = ["x"] if op_type == "Relu" else ["x", "y"]
        op = core.CreateOperator(op_type, inputs, "out", broadcast=1) if op_type != "Relu" \
            else core.CreateOperator("Relu", "x", "out")
        read = sum(workspace.FetchBlob(n).size for n in inputs) * 4
        assert workspace.GetOperatorCost(op, inputs) == (20 * per_point, 80, read), op_type
    op = core.CreateOperator("Sum", ["x", "z", "x"], "out")
    assert workspace.GetOperatorCost(op, ["x", "z", "x"]) == (2 * 20, 80, 3 * 80)


def test_batch_matmul():
    _feed(A=np.zeros((3, 4, 5), np.float32), B=np.zeros((3, 5, 6), np.float32),
          At=np.zeros((3, 5, 4), np.float32))
    y = 3 * 4 * 6
    expected = (2 * y * 5, 4 * y, 4 * (60 + 90))
    assert workspace.GetOperatorCost(core.CreateOperator("BatchMatMul", ["A", "B"], "Y"), ["A", "B"]) == expected
    assert workspace.GetOperatorCost(core.CreateOperator("BatchMatMul", ["At", "B"], "Y", trans_a=1),
                                     ["At", "B"]) == expected


def test_sparse_lengths_sum_and_weighted_sum():
    _feed(data=np.zeros((10, 3, 2), np.float32), idx=np.zeros(7, np.int64),
          lengths=np.array([3, 4], np.int32), w=np.zeros(7, np.float32))
    d = 6
    op = core.CreateOperator("SparseLengthsSum", ["data", "idx", "lengths"], "out")
    assert workspace.GetOperatorCost(op, ["data", "idx", "lengths"]) == (7 * d, 0, 7 * (d * 4 + 8) + 2 * 4)
    op = core.CreateOperator("SparseLengthsWeightedSum", ["data", "w", "idx", "lengths"], "out")
    assert workspace.GetOperatorCost(op, ["data", "w", "idx", "lengths"]) == (
        2 * 7 * d, 0, 7 * (d * 4 + 8) + 2 * 4 + 7 * 4)


def test_ops_without_a_caffe2_cost_function_and_missing_blobs_are_errors():
    _feed(x=np.zeros(3, np.float32))
    with pytest.raises(Caffe2Error, match="Cost inference function not defined"):
        workspace.GetOperatorCost(core.CreateOperator("Sigmoid", "x", "y"), ["x"])
    with pytest.raises(Caffe2Error, match="'nope' does not exist"):
        workspace.GetOperatorCost(core.CreateOperator("Relu", "x", "y"), ["nope"])
