"""CreateNet constructs the operators as Caffe2 does: inputs must exist, outputs are created."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def test_an_input_nobody_made_is_refused_and_nothing_is_created():
    net = core.Net("needs_x")
    net.Relu("x", "y")
    net.Relu("y", "z")
    with pytest.raises(Caffe2Error, match="op Relu: Encountered a non-existing input blob: x"):
        workspace.CreateNet(net)
    assert workspace.Blobs() == []
    with pytest.raises(Caffe2Error, match="non-existing input blob: x"):
        workspace.C.Workspace().create_net(net)


def test_outputs_of_earlier_ops_fed_and_created_blobs_are_accepted():
    net = core.Net("chain")
    net.ConstantFill([], "a", shape=[2], value=3.0)
    net.Add(["a", "fed"], "b")
    net.Mul(["b", "declared"], "c")
    workspace.FeedBlob("fed", np.array([1.0, 2.0], np.float32))
    workspace.CreateBlob("declared")           # exists, empty: enough to create the net
    workspace.CreateNet(net)
    assert {"a", "b", "c"} <= set(workspace.Blobs())   # created by CreateNet, before any run
    workspace.FeedBlob("declared", np.array([2.0, 2.0], np.float32))
    workspace.RunNet(net.Name())         # core.Net names are unique per process: "chain" may be "chain_1"
    np.testing.assert_array_equal(workspace.FetchBlob("c"), [8.0, 10.0])


def test_input_blobs_argument_creates_them_first():
    net = core.Net("with_inputs")
    net.Relu("x", "y")
    workspace.CreateNet(net, input_blobs=["x"])
    assert workspace.HasBlob("x") and workspace.HasBlob("y")


def test_plans_still_create_nets_whose_inputs_an_earlier_step_makes():
    init, train = core.Net("init"), core.Net("train")
    init.ConstantFill([], "w", shape=[3], value=2.0)
    train.Scale("w", "w2", scale=3.0)
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("train", train))
    workspace.RunPlan(plan)
    np.testing.assert_array_equal(workspace.FetchBlob("w2"), [6.0, 6.0, 6.0])
