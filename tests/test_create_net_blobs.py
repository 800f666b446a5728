"""CreateNet creates the output blobs of the net's ops, empty, as Caffe2's operator
constructors do, so a net created next may read them before the first one runs
(Caffe2's rand_quantization_op_speed_test creates its three nets before running any)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _net(name, *ops):
    net = core.Net(name)
    net.Proto().op.extend(ops)
    return net


def test_created_nets_outputs_exist_before_it_runs():
    workspace.FeedBlob("a", np.float32([1, -2, 3]))
    producer = _net("producer", core.CreateOperator("Relu", ["a"], ["b"]),
                    core.CreateOperator("Scale", ["b"], ["c"], scale=3.0))
    consumer = _net("consumer", core.CreateOperator("Sigmoid", ["c"], ["d"]))
    with pytest.raises(Caffe2Error, match="non-existing input blob"):
        workspace.CreateNet(consumer)
    workspace.CreateNet(producer)
    assert workspace.HasBlob("b") and workspace.HasBlob("c") and not workspace.HasBlob("d")
    workspace.CreateNet(consumer)
    workspace.RunNet(producer.Name())
    workspace.RunNet(consumer.Name())
    np.testing.assert_allclose(workspace.FetchBlob("d"), 1 / (1 + np.exp(-3 * np.maximum([1, -2, 3], 0))),
                               rtol=1e-6)


def test_a_net_that_fails_to_build_creates_nothing():
    bad = _net("bad", core.CreateOperator("Relu", ["missing"], ["out"]))
    with pytest.raises(Caffe2Error):
        workspace.CreateNet(bad)
    assert not workspace.HasBlob("out")
