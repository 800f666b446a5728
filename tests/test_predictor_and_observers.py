"""workspace.Predictor and core.Net's observer API (Caffe2's workspace.Predictor,
Net.AddObserver / GetObserver / RemoveObserver / NumObservers), against NumPy."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.executor import NetObserver


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _nets():
    init = core.Net("pred_init")
    init.GivenTensorFill([], "W", shape=[3, 2], values=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    init.GivenTensorFill([], "bias", shape=[2], values=[0.5, -0.5])
    predict = core.Net("pred_net")
    predict.AddExternalInputs("X", "W", "bias")
    y = predict.Add([predict.MatMul(["X", "W"], "xw"), "bias"], "Y", broadcast=1)
    predict.AddExternalOutput(y)
    return init, predict


W = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)
BIAS = np.array([0.5, -0.5], np.float32)


def test_predictor_runs_lists_dicts_and_serialized_nets():
    init, predict = _nets()
    predictor = workspace.Predictor(init.Proto().SerializeToString(), predict.Proto().SerializeToString())
    x = np.array([[1.0, 0.0, -1.0], [2.0, 1.0, 0.5]], np.float32)
    np.testing.assert_allclose(predictor.run([x])[0], x @ W + BIAS)
    replaced = np.ones((3, 2), np.float32)
    np.testing.assert_allclose(predictor.run({"X": x, "W": replaced})[0], x @ replaced + BIAS)
    # its workspace is its own
    assert not workspace.HasBlob("W") and predictor.input_names == ["X", "W", "bias"]
    assert predictor.output_names == ["Y"]
    # NetDef objects work too
    again = workspace.Predictor(init.Proto(), predict.Proto())
    np.testing.assert_allclose(again.run([x])[0], x @ W + BIAS)


def test_predictor_refuses_unknown_or_too_many_inputs():
    init, predict = _nets()
    predictor = workspace.Predictor(init.Proto().SerializeToString(), predict.Proto().SerializeToString())
    with pytest.raises(Caffe2Error, match="not an input"):
        predictor.run({"Z": np.zeros(1, np.float32)})
    with pytest.raises(Caffe2Error, match="4 inputs"):
        predictor.run([np.zeros(1, np.float32)] * 4)
    with pytest.raises(Exception, match="serialized NetDef"):
        workspace.Predictor(b"\xff\xff not a proto", predict.Proto().SerializeToString())


def test_observers_attach_to_the_created_net_and_see_every_op():
    net = core.Net("observed")
    net.Scale("x", "y", scale=2.0)
    net.Relu("y", "z")
    workspace.FeedBlob("x", np.array([-1.0, 3.0], np.float32))
    workspace.CreateNet(net)

    class Counter(NetObserver):
        def __init__(self):
            self.ops, self.nets = [], 0

        def op_start(self, step):
            self.ops.append(step.op_def.type)

        def net_stop(self, plan):
            self.nets += 1

    assert net.AddObserver("TimeObserver") == 1
    counter = Counter()
    assert net.AddObserver(counter) == 2 and net.NumObservers() == 2
    workspace.RunNet(net.Name(), num_iter=3)
    assert counter.ops == ["Scale", "Relu"] * 3 and counter.nets == 3
    timer = net.GetObserver(0)
    assert timer.runs == 3 and timer.average_time() >= 0.0
    net.RemoveObserver(counter)
    assert net.NumObservers() == 1
    np.testing.assert_allclose(workspace.FetchBlob("z"), [0.0, 6.0])
    with pytest.raises(Caffe2Error, match="unknown observer"):
        net.AddObserver("NoSuchObserver")
    with pytest.raises(Caffe2Error, match="does not exist"):
        core.Net("never_created").AddObserver("TimeObserver")
