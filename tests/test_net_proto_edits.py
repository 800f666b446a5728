"""core.Net after its proto was edited directly (net.Proto().op.extend(...)), as
Caffe2's tests do: Caffe2 rebuilds the net's lookup tables from the proto, so a blob
an added op writes is not taken for an external input by the ops built after it."""
import numpy as np

from caffe2py import core, workspace


def test_ops_added_through_the_proto_define_their_outputs():
    net = core.Net("edited")
    net.Proto().op.extend([core.CreateOperator("Relu", ["x"], ["y"])])
    assert net.BlobIsDefined("y")
    net.Sigmoid("y", "z")
    assert list(net.Proto().external_input) == []      # y is produced, x was never declared
    workspace.ResetWorkspace()
    x = np.array([-1.0, 0.5], np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("z"), 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


def test_external_inputs_added_through_the_proto_are_known():
    net = core.Net("declared")
    net.Proto().external_input.append("a")
    assert net.BlobIsDefined("a")
    net.Relu("a", "b")
    assert list(net.Proto().external_input) == ["a"]   # not declared twice
    net.Relu("c", "d")
    assert list(net.Proto().external_input) == ["a", "c"]
