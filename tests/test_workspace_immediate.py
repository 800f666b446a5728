"""Immediate mode: ops created between StartImmediate and StopImmediate run at once in a
workspace of their own, whose temporary root folder is removed at the stop."""
import os

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace()
    yield
    workspace.StopImmediate()
    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace()


def test_ops_run_when_created_and_stay_out_of_the_current_workspace():
    workspace.StartImmediate(i_know=True)
    assert workspace.IsImmediate()
    net = core.Net("immediate")
    net.GivenTensorFill([], "x", shape=[3], values=[1.0, 2.0, 3.0])
    net.Scale("x", "y", scale=2.0)
    assert workspace.ImmediateBlobs() == ["x", "y"]
    np.testing.assert_array_equal(workspace.FetchImmediate("y"), [2.0, 4.0, 6.0])
    assert workspace.CurrentWorkspace() == "default"
    assert not workspace.HasBlob("y")
    assert workspace.FeedImmediate("x", np.array([5.0], dtype=np.float32))
    workspace.RunOperatorImmediate(core.CreateOperator("Scale", "x", "z", scale=3.0))
    np.testing.assert_array_equal(workspace.FetchImmediate("z"), [15.0])


def test_stop_empties_the_workspace_and_removes_the_root_folder():
    workspace.StartImmediate(i_know=True)
    root = workspace._immediate_root_folder
    assert os.path.isdir(root)
    core.CreateOperator("ConstantFill", [], "c", shape=[2], value=1.0)
    workspace.StopImmediate()
    assert not workspace.IsImmediate()
    assert workspace._immediate_root_folder == ""
    assert not os.path.exists(root)
    with pytest.raises(Caffe2Error):
        workspace.FetchImmediate("c")
    # off again: creating an op runs nothing
    core.CreateOperator("ConstantFill", [], "d", shape=[2], value=1.0)
    assert workspace.ImmediateBlobs() == []


def test_restart_starts_fresh_and_warns_unless_told(capsys):
    workspace.StartImmediate(i_know=True)
    first_root = workspace._immediate_root_folder
    core.CreateOperator("ConstantFill", [], "c", shape=[1], value=1.0)
    workspace.StartImmediate()
    assert "i_know=True" in capsys.readouterr().out
    assert not os.path.exists(first_root)
    assert workspace.ImmediateBlobs() == []
