"""caffe2py.core / scope / model_helper / brew behave like caffe2.python's."""
import re

import numpy as np
import pytest

from caffe2py import brew, core, model_helper, scope, workspace
from caffe2py.proto import caffe2_pb2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def test_net_appends_ops_and_tracks_external_inputs():
    net = core.Net("builder")
    y = net.FC(["x", "w", "b"], "y")
    z = net.Relu(y, "z")
    assert isinstance(y, core.BlobReference) and y == "y" and z.Net() is net
    proto = net.Proto()
    assert [op.type for op in proto.op] == ["FC", "Relu"]
    assert list(proto.external_input) == ["x", "w", "b"]


def test_unknown_op_suggests_close_match():
    net = core.Net("typo")
    with pytest.raises(AttributeError, match=r"Rleu is not a registered operator.*Relu"):
        net.Rleu("x", "y")


def test_auto_output_names_and_multiple_outputs():
    net = core.Net("auto")
    a = net.Relu("x")
    b = net.Relu("x")
    assert str(a) == "auto/Relu" and str(b) == "auto/Relu_2"
    outs = net.Split("x", 3, axis=0)
    assert [str(o) for o in outs] == ["auto/Split:0", "auto/Split:1", "auto/Split:2"]


def test_net_names_are_unique():
    a, b = core.Net("same"), core.Net("same")
    assert a.Name() != b.Name() and b.Name().startswith("same_")


def test_create_operator_kwargs_become_arguments():
    op = core.CreateOperator("Conv", ["x", "w"], "y", kernel=3, pads=[1, 1, 1, 1], order="NCHW",
                             epsilon=0.5, engine="CUDNN", random_seed=7)
    args = {a.name: a for a in op.arg}
    assert args["kernel"].i == 3 and list(args["pads"].ints) == [1, 1, 1, 1]
    assert args["order"].s == b"NCHW" and args["epsilon"].f == 0.5
    assert op.engine == "CUDNN" and op.device_option.random_seed == 7


def test_name_and_device_scopes():
    with core.NameScope("outer"):
        with core.NameScope("inner"):
            assert core.ScopedName("w") == "outer/inner/w"
            op = core.CreateOperator("Relu", "x", "y")
    assert list(op.input) == ["outer/inner/x"]
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CUDA, 2)):
        op = core.CreateOperator("Relu", "x", "y")
    assert op.device_option.device_type == caffe2_pb2.CUDA and op.device_option.device_id == 2
    assert scope.CurrentDeviceScope() is None
    with core.NameScope("a"):
        with core.NameScope("b", reset=True):
            assert scope.CurrentNameScope() == "b/"


def test_blob_reference_methods_chain_ops():
    net = core.Net("chain")
    x = net.AddExternalInput("x")
    y = x.Relu([], "y")
    assert net.Proto().op[0].type == "Relu" and list(net.Proto().op[0].input) == ["x"]
    assert (x + "_suffix") == "x_suffix" and y.GetUnscopedName() == "y"


def test_const_clone_and_is_operator():
    net = core.Net("const")
    c = net.Const(np.array([[1, 2]], dtype=np.int64), "c")
    clone = net.Clone("const_clone", blob_remap={"c": "d"})
    assert clone.Proto().op[0].output[0] == "d"
    workspace.RunNetOnce(net)
    out = workspace.FetchBlob(c)
    assert out.dtype == np.int64 and out.tolist() == [[1, 2]]
    assert core.IsOperator("Relu") and not core.IsOperator("NoSuchOp")


def test_model_helper_and_brew_build_a_runnable_model():
    model = model_helper.ModelHelper(name="mlp")
    fc1 = brew.fc(model, "data", "fc1", dim_in=6, dim_out=4)
    r = brew.relu(model, fc1, "r")
    s = brew.sigmoid(model, r, "s")
    t = brew.tanh(model, s, "t")
    sm = brew.softmax(model, t, "sm")
    brew.transpose(model, sm, "tr", axes=[1, 0])
    brew.sum(model, [sm, sm], "twice")
    brew.dropout(model, sm, "dr", is_test=1)
    brew.concat(model, [sm, sm], "cat", axis=1)
    it = brew.iter(model, "iter")
    assert [str(p) for p in model.params] == ["fc1_w", "fc1_b"]
    assert model.param_init_net.Proto().op[0].type == "XavierFill"
    data = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    workspace.FeedBlob("data", data)
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net.Name(), 2)
    w, b = workspace.FetchBlob("fc1_w"), workspace.FetchBlob("fc1_b")
    assert np.all(np.abs(w) <= np.sqrt(3.0 / 6)) and np.all(b == 0)
    h = np.tanh(1 / (1 + np.exp(-np.maximum(data @ w.T + b, 0))))
    ref = np.exp(h - h.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(workspace.FetchBlob("sm"), ref, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("tr"), ref.T, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("twice"), 2 * ref, rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("cat"), np.concatenate([ref, ref], 1), rtol=1e-5)
    assert workspace.FetchBlob(it).tolist() == [2]


def test_brew_conv_pool_and_spatial_bn_shapes():
    model = model_helper.ModelHelper(name="cnn")
    c = brew.conv(model, "img", "c", dim_in=3, dim_out=4, kernel=3, pad=1)
    bn = brew.spatial_bn(model, c, "bn", dim_in=4)
    p = brew.max_pool(model, bn, "p", kernel=2, stride=2)
    a = brew.average_pool(model, p, "a", global_pooling=True)
    workspace.FeedBlob("img", np.ones((2, 3, 8, 8), np.float32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob(p).shape == (2, 4, 4, 4)
    assert workspace.FetchBlob(a).shape == (2, 4, 1, 1)


def test_plan_and_execution_step_protos():
    net = core.Net("stepnet")
    net.Relu("x", "y")
    step = core.execution_step("s", [net], num_iter=3)
    plan = core.Plan("plan")
    plan.AddStep(step)
    proto = plan.Proto()
    assert proto.execution_step[0].num_iter == 3 and proto.network[0].name == "stepnet"


def test_next_blob_names_follow_caffe2():
    """Caffe2's NextBlob: the prefix itself, then `<prefix>_auto_<i>` when the net
    defines it or handed it out; NextScopedBlob prefixes the current name scope."""
    net = core.Net("naming")
    net.AddExternalInput("x")
    assert str(net.NextBlob("y")) == "y"
    assert str(net.NextBlob("y")) == "y_auto_0"         # handed out before
    assert str(net.NextBlob("x")) == "x_auto_0"         # defined in the net
    with scope.NameScope("s"):
        assert str(net.NextScopedBlob("z")) == "s/z"
    assert str(net.NextBlob()) == "unnamed"


def test_append_output_record_field_extends_the_schema_record_and_external_outputs():
    # core reaches schema.Struct through the hook schema sets on import (issue 30)
    from caffe2py import schema
    net = core.Net("record")
    a = net.ConstantFill([], "a", shape=[1], value=1.0)
    b = net.ConstantFill([], "b", shape=[2], value=2.0)
    with pytest.raises(core.Caffe2Error, match="has no output record"):
        net.AppendOutputRecordField("b", schema.Scalar(blob=b))
    net.set_output_record(schema.Struct(("a", schema.Scalar(blob=a))))
    net.AppendOutputRecordField("b", schema.Scalar(blob=b))
    record = net.output_record()
    assert isinstance(record, schema.Struct) and record.field_names() == ["a", "b"]
    assert [str(x) for x in record.field_blobs()] == ["a", "b"]
    assert list(net.Proto().external_output) == ["a", "b"]


def test_nets_built_in_a_net_builder_take_its_name_and_it_becomes_a_step():
    # core asks net_builder through hooks it fills on import (issue 30)
    from caffe2py.net_builder import NetBuilder, ops
    with NetBuilder("outer"):
        inner = core.Net("inner")
    assert inner.Name() == "outer/inner"
    assert re.fullmatch(r"after(_\d+)?", core.Net("after").Name())   # outside the builder: no prefix
    with NetBuilder("loop") as nb:
        ops.Const(1)
        stop = nb.stop_blob()
    step = core.to_execution_step(nb)
    assert step.Name() == "loop" and step.Proto().should_stop_blob == str(stop)
    # a net made without a name takes the builder's name alone (Caffe2's rule; a
    # numeric suffix when another net of the process has that name already)
    assert len(step.Proto().network) == 1 and re.fullmatch(r"loop(_\d+)?", step.Proto().network[0])



def test_device_type_predicates_and_layout_utils():
    """Caffe2's core.IsGPUDeviceType / IsCPUDeviceType and utils.NCHW2NHWC / NHWC2NCHW,
    which its operator tests call."""
    import numpy as np
    from caffe2py import utils
    from caffe2py.proto import caffe2_pb2
    assert core.IsGPUDeviceType(caffe2_pb2.CUDA) and core.IsGPUDeviceType(caffe2_pb2.HIP)
    assert not core.IsGPUDeviceType(caffe2_pb2.CPU)
    assert core.IsCPUDeviceType(caffe2_pb2.CPU) and not core.IsCPUDeviceType(caffe2_pb2.CUDA)
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    nhwc = utils.NCHW2NHWC(x)
    assert nhwc.shape == (2, 4, 5, 3) and nhwc[1, 2, 3, 0] == x[1, 0, 2, 3]
    np.testing.assert_array_equal(utils.NHWC2NCHW(nhwc), x)
