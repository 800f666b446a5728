"""ModelHelper.GetCompleteNet / ConstructInitTrainNetfromNet and Net.Clone's
update_external_list (Caffe2's): the round trip gives back the same ops, and the
split nets run like the originals (checked with NumPy)."""
import numpy as np

from caffe2py import brew, core, workspace
from caffe2py.model_helper import ModelHelper


def test_complete_net_round_trip_runs_like_the_model():
    workspace.ResetWorkspace()
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    workspace.FeedBlob("x", x)
    model = ModelHelper(name="orig")
    brew.fc(model, "x", "h", 4, 3, weight_init=("ConstantFill", {"value": 0.5}),
            bias_init=("ConstantFill", {"value": 1.0}))
    brew.relu(model, "h", "r")
    model.net.Proto().type = "dag"
    complete = model.GetCompleteNet()
    assert complete.Proto().type == "dag"
    marks = [op.debug_info.endswith("/param_init_net") for op in complete.Proto().op]
    assert marks == [True, True, False, False]

    split = ModelHelper(name="split")
    split.ConstructInitTrainNetfromNet(complete)
    assert [op.type for op in split.param_init_net.Proto().op] == ["ConstantFill", "ConstantFill"]
    assert [op.type for op in split.net.Proto().op] == ["FC", "Relu"]
    assert sorted(split.net.Proto().external_input) == ["h_b", "h_w", "x"]
    assert list(split.net.Proto().external_output) == ["r"]          # h is read again: not an output
    workspace.RunNetOnce(split.param_init_net)
    workspace.RunNetOnce(split.net)
    np.testing.assert_allclose(workspace.FetchBlob("r"), np.maximum(x @ np.full((4, 3), 0.5) + 1.0, 0), rtol=1e-5)
    workspace.ResetWorkspace()


def test_clone_keeps_the_lists_unless_asked_to_recompute_them():
    net = core.Net("lists")
    net.Copy("a", "b")
    net.Add(["b", "c"], "d")
    net.AddExternalOutput("b")
    kept = net.Clone("kept", op_id_mask=[1])
    assert list(kept.Proto().external_input) == ["a", "c"] and list(kept.Proto().external_output) == ["b"]
    fresh = net.Clone("fresh", op_id_mask=[1], update_external_list=True)
    assert list(fresh.Proto().external_input) == ["b", "c"] and list(fresh.Proto().external_output) == ["d"]
