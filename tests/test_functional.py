"""caffe2py.functional (Caffe2's caffe2.python.functional): ops called on arrays,
checked against NumPy; workspace.WorkspaceGuard."""
import numpy as np
import pytest

from caffe2py import workspace
from caffe2py.functional import Functional


def test_single_output_by_position_and_by_name():
    x = np.array([[-1.5, 2.0], [0.5, -3.0]], np.float32)
    out = Functional.Relu(x)
    np.testing.assert_array_equal(out[0], np.maximum(x, 0))
    np.testing.assert_array_equal(out["output_0"], np.maximum(x, 0))
    assert out._fields == ("output_0",)


def test_all_outputs_the_schema_allows_and_op_arguments():
    a, b = np.ones((2, 3), np.float32), np.zeros((2, 1), np.float32)
    joined, split_info = Functional.Concat(a, b, axis=1)
    np.testing.assert_array_equal(joined, np.concatenate([a, b], axis=1))
    np.testing.assert_array_equal(split_info, [3, 1])
    np.testing.assert_allclose(Functional.Scale(a, scale=2.5)[0], 2.5 * a)


def test_num_output_for_ops_whose_count_depends_on_arguments():
    x = np.arange(10, dtype=np.float32)
    parts = Functional.Split(x, split=[3, 7], axis=0, num_output=2)
    np.testing.assert_array_equal(parts[0], x[:3])
    np.testing.assert_array_equal(parts[1], x[3:])
    with pytest.raises(ValueError, match="num_output"):
        Functional.Split(x, split=[3, 7], axis=0)


def test_bad_arity_and_unknown_ops():
    with pytest.raises(ValueError, match="inputs"):
        Functional.Relu(np.ones(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(AttributeError):
        Functional.NoSuchOperator


def test_functional_calls_leave_the_current_workspace_alone():
    workspace.ResetWorkspace()
    Functional.Relu(np.ones(3, np.float32))
    assert workspace.Blobs() == []


def test_workspace_guard_switches_and_comes_back():
    before = workspace.CurrentWorkspace()
    with workspace.WorkspaceGuard("guarded_ws"):
        assert workspace.CurrentWorkspace() == "guarded_ws"
        workspace.FeedBlob("inside", np.ones(1, np.float32))
    assert workspace.CurrentWorkspace() == before and not workspace.HasBlob("inside")
    with pytest.raises(RuntimeError):
        with workspace.WorkspaceGuard("guarded_ws"):
            raise RuntimeError("leave")
    assert workspace.CurrentWorkspace() == before
