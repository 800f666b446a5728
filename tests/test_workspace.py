"""Caffe2's module-level workspace API."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.proto import caffe2_pb2
from caffe2py.tensors import numpy_to_tensor


@pytest.fixture(autouse=True)
def fresh_workspace():
    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace()
    yield
    workspace.SwitchWorkspace("default")
    workspace.ResetWorkspace()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8,
                                   np.int8, np.int16, np.uint16, np.bool_])
def test_feed_fetch_every_dtype(dtype):
    arr = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    assert workspace.FeedBlob("a", arr)
    out = workspace.FetchBlob("a")
    assert out.dtype == arr.dtype
    np.testing.assert_array_equal(out, arr)


def test_feed_strings_scalars_and_tensorproto():
    workspace.FeedBlob("s", np.array(["ab", "c"]))
    assert workspace.FetchBlob("s").dtype == object
    assert list(workspace.FetchBlob("s")) == [b"ab", b"c"]     # Caffe2 gives string tensors back as bytes
    workspace.FeedBlob("k", 3.5)
    assert workspace.FetchBlob("k").shape == ()
    workspace.FeedBlob("t", numpy_to_tensor(np.array([[1, 2]], dtype=np.int64)))
    np.testing.assert_array_equal(workspace.FetchBlob("t"), [[1, 2]])


def test_feed_copies_and_fetch_copies():
    arr = np.zeros(3, np.float32)
    workspace.FeedBlob("a", arr)
    arr[0] = 5
    got = workspace.FetchBlob("a")
    assert got[0] == 0
    got[1] = 9
    assert workspace.FetchBlob("a")[1] == 0


def test_missing_blob_message():
    with pytest.raises(Caffe2Error, match="Can't find blob: nope"):
        workspace.FetchBlob("nope")


def test_blobs_has_blob_and_view():
    workspace.FeedBlob("x", np.ones(2, np.float32))
    assert workspace.HasBlob("x") and not workspace.HasBlob("y")
    assert workspace.Blobs() == ["x"]
    assert "x" in workspace.blobs and len(workspace.blobs) == 1
    workspace.blobs["y"] = np.zeros(1, np.float32)
    assert workspace.FetchBlobs(["x", "y"])[1].tolist() == [0.0]


def test_switch_workspace():
    workspace.FeedBlob("x", np.ones(1, np.float32))
    with pytest.raises(Caffe2Error):
        workspace.SwitchWorkspace("other")
    workspace.SwitchWorkspace("other", True)
    assert workspace.CurrentWorkspace() == "other" and not workspace.HasBlob("x")
    assert "other" in workspace.Workspaces()
    workspace.SwitchWorkspace("default")
    assert workspace.HasBlob("x")


def _relu_net(name="relu_net"):
    net = core.Net(name)
    net.Relu("x", "y")
    return net


def test_create_and_run_net_and_overwrite_rule():
    workspace.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    net = _relu_net()
    assert workspace.CreateNet(net)
    with pytest.raises(Caffe2Error, match="respectfully refuse"):
        workspace.CreateNet(net)
    assert workspace.CreateNet(net, overwrite=True)
    assert workspace.RunNet(net.Name(), num_iter=3)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 2.0])
    with pytest.raises(Caffe2Error, match="does not exist"):
        workspace.RunNet("no_such_net")


def test_run_net_once_operator_once_and_operators_once():
    workspace.FeedBlob("x", np.array([-3.0], np.float32))
    workspace.RunNetOnce(_relu_net("once"))
    assert workspace.FetchBlob("y")[0] == 0.0
    workspace.RunOperatorOnce(core.CreateOperator("Sigmoid", ["x"], ["s"]))
    np.testing.assert_allclose(workspace.FetchBlob("s"), 1 / (1 + np.exp(3.0)), rtol=1e-6)
    workspace.RunOperatorsOnce([core.CreateOperator("Tanh", ["x"], ["t"]),
                                core.CreateOperator("Relu", ["t"], ["r"])])
    assert workspace.FetchBlob("r")[0] == 0.0


def test_run_plan_with_iterations_and_should_stop():
    init = core.Net("plan_init")
    init.ConstantFill([], "it", shape=[1], value=0, dtype=core.DataType.INT64)
    body = core.Net("plan_body")
    body.Iter("it", "it")
    step = core.ExecutionStep("loop", body, num_iter=5)
    plan = core.Plan("p")
    plan.AddStep(core.ExecutionStep("init", init))
    plan.AddStep(step)
    workspace.RunPlan(plan)
    assert workspace.FetchBlob("it")[0] == 5


def test_serialize_deserialize_blob():
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    workspace.FeedBlob("a", arr)
    data = workspace.SerializeBlob("a")
    proto = caffe2_pb2.BlobProto.FromString(data)
    assert proto.name == "a" and list(proto.tensor.dims) == [2, 3]
    workspace.DeserializeBlob("b", data)
    np.testing.assert_array_equal(workspace.FetchBlob("b"), arr)


def test_infer_shapes_and_types():
    net = core.Net("shapes")
    net.FC(["x", "w", "b"], "y")
    net.Relu("y", "z")
    shapes, types = workspace.InferShapesAndTypes([net], {"x": [8, 3], "w": [5, 3], "b": [5]})
    assert shapes["y"] == [8, 5] and shapes["z"] == [8, 5]
    assert types["z"] == caffe2_pb2.TensorProto.FLOAT


def test_registered_operators_and_gpu_queries():
    ops = workspace.RegisteredOperators()
    assert "Relu" in ops and "Conv" in ops
    assert workspace.GpuDeviceType == caffe2_pb2.CUDA
    assert workspace.NumGpuDevices() >= 0
    assert isinstance(workspace.has_gpu_support, bool)


def test_serialized_protos_as_caffe2_passes_them_on():
    """Caffe2's workspace functions StringifyProto their argument, so serialized
    NetDef / PlanDef / OperatorDef bytes work where the message does."""
    x = np.array([-1.0, 2.0], np.float32)
    workspace.FeedBlob("x", x)
    net = core.Net("bytes_net")
    net.Relu("x", "y")
    workspace.RunNetOnce(net.Proto().SerializeToString())
    np.testing.assert_array_equal(workspace.FetchBlob("y"), np.maximum(x, 0))
    assert workspace.CreateNet(net.Proto().SerializeToString())
    assert workspace.RunNet("bytes_net")
    plan = core.Plan("bytes_plan")
    counter = core.Net("count")
    counter.Add(["x", "x"], "x")
    plan.AddStep(core.execution_step("twice", counter, num_iter=2))
    workspace.RunPlan(plan.Proto().SerializeToString())
    np.testing.assert_array_equal(workspace.FetchBlob("x"), 4 * x)
    with pytest.raises(Caffe2Error, match="not a serialized PlanDef"):
        workspace.RunPlan(b"\xff\xff not a proto")
