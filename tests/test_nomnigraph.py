"""caffe2.python.nomnigraph and nomnigraph_transformations (caffe2py/nomnigraph.py,
caffe2py/nom/): the data-flow graph of a net, edits, matching, conversion back to a
NetDef (run and checked against NumPy) and transpose_network."""
import logging

import numpy as np
import pytest

from caffe2py import core, nomnigraph as ng, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.nomnigraph_transformations import transpose_network
from caffe2py.proto import caffe2_pb2


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _conv_nchw(x, w, b):
    """Valid (no pad), stride-1 convolution of NCHW x with MCHW filter w."""
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", windows, w) + b.reshape(1, -1, 1, 1)


def test_blob_versions_inputs_outputs_and_order():
    net = core.Net("versions")
    net.Relu(["X"], ["Y"])
    net.Relu(["Y"], ["Y"])          # in place: a second version of Y
    net.Add(["Y", "X"], ["Z"])
    net.Proto().external_output.extend(["Z"])
    nn = ng.NNModule(net)
    assert sorted(t.name for t in nn.tensors) == ["X", "Y", "Y", "Z"]
    first, second, add = nn.controlFlow
    assert [first.name, second.name, add.name] == ["Relu", "Relu", "Add"]
    assert second.inputs[0] is first.outputs[0]        # reads the first version
    assert add.inputs[0] is second.outputs[0]
    assert add.inputs[1] is first.inputs[0]            # X: one node, read twice
    assert [t.name for t in nn.inputs] == ["X"] and [t.name for t in nn.outputs] == ["Z"]
    assert add.getOperatorPredecessors() == [second]
    assert first.getOperatorSuccessors() == [second]     # Add reads X, not Y
    assert second.getOperatorSuccessors() == [add]


def test_round_trip_keeps_every_field_of_the_ops():
    net = core.Net("trip")
    net.Conv(["X", "w", "b"], ["Y"], kernel=3, order="NHWC", engine="CUDNN", name="c")
    net.Relu(["Y"], ["Y"])
    net.Proto().op[0].device_option.device_type = caffe2_pb2.CPU
    net.Proto().external_output.extend(["Y"])
    back = ng.NNModule(net).convertToCaffe2Proto(net.Proto())
    assert back.name == "trip"
    assert [op.SerializeToString() for op in back.op] == \
        [op.SerializeToString() for op in net.Proto().op]
    assert list(back.external_input) == ["X", "w", "b"]
    assert list(back.external_output) == ["Y"]


def test_rewired_graph_runs_in_data_flow_order():
    net = core.Net("rewire")
    net.Mul(["a", "b"], ["c"])
    net.Sub(["c", "d"], ["e"])
    nn = ng.NNModule(net)
    mul, sub = nn.controlFlow
    a, b = mul.inputs
    c, d, e = mul.outputs[0], sub.inputs[1], sub.outputs[0]
    for tail, head in [(a, mul), (b, mul), (mul, c), (c, sub), (d, sub), (sub, e)]:
        nn.deleteEdge(tail, head)
    # e = (a - d) * b, the Sub now runs first although it was listed second
    for tail, head in [(a, sub), (d, sub), (sub, c), (c, mul), (b, mul), (mul, e)]:
        nn.createEdge(tail, head)
    new_net = nn.convertToCaffe2Proto()
    assert [op.type for op in new_net.op] == ["Sub", "Mul"]
    values = {name: np.random.rand(4).astype(np.float32) for name in "abd"}
    for name, value in values.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(new_net)
    np.testing.assert_allclose(workspace.FetchBlob("e"),
                               (values["a"] - values["d"]) * values["b"], rtol=1e-6)


def test_inserted_op_goes_before_its_reader_and_slots_are_kept():
    net = core.Net("insert")
    net.Sub(["a", "b"], ["c"])
    nn = ng.NNModule(net)
    sub = nn.controlFlow[0]
    a = sub.inputs[0]
    doubled = nn.createUniqueDataNode("a")
    assert doubled.name == "a_0"
    scale = nn.createNode(core.CreateOperator("Scale", [], [], scale=2.0))
    nn.createEdge(a, scale)
    nn.createEdge(scale, doubled)
    nn.replaceAllUsesWith(a, doubled)
    nn.createEdge(a, scale)          # replaceAllUsesWith moved the Scale's read of a too
    nn.deleteEdge(doubled, scale)
    new_net = nn.convertToCaffe2Proto()
    assert [(op.type, list(op.input)) for op in new_net.op] == \
        [("Scale", ["a"]), ("Sub", ["a_0", "b"])]
    workspace.FeedBlob("a", np.array([5.0, 1.0], np.float32))
    workspace.FeedBlob("b", np.array([1.0, 4.0], np.float32))
    workspace.RunNetOnce(new_net)
    np.testing.assert_allclose(workspace.FetchBlob("c"), [9.0, -2.0])


def test_replace_node_and_delete_node():
    net = core.Net("replace")
    net.Add(["x", "y"], ["z"])
    nn = ng.NNModule(net)
    add = nn.controlFlow[0]
    sub = nn.createNode(ng.NeuralNetOperator("Sub"))
    nn.replaceNode(add, sub)
    nn.deleteNode(add)
    assert [n.name for n in nn.operators] == ["Sub"]
    assert [t.name for t in sub.inputs] == ["x", "y"] and sub.outputs[0].name == "z"
    ops = nn.convertToCaffe2Proto().op
    assert [(op.type, list(op.input), list(op.output)) for op in ops] == [("Sub", ["x", "y"], ["z"])]


def test_kind_errors_are_caffe2_errors():
    nn = ng.NNModule()
    x = nn.dataFlow.createNode(ng.NeuralNetData("x"))
    y = nn.dataFlow.createNode(ng.NeuralNetData("y"))
    op = nn.dataFlow.createNode(ng.NeuralNetOperator("Op"))
    with pytest.raises(Caffe2Error, match="between NeuralNetOperator and NeuralNetData"):
        nn.createEdge(x, y)
    with pytest.raises(Caffe2Error, match="no producer"):
        x.getProducer()
    with pytest.raises(Caffe2Error, match="operator node"):
        x.getInputs()
    with pytest.raises(Caffe2Error, match="createNode takes"):
        nn.dataFlow.createNode(7)
    with pytest.raises(Caffe2Error, match="core.Net or caffe2_pb2.NetDef"):
        ng.NNModule("net")
    nn.deleteNode(op)
    with pytest.raises(Caffe2Error, match="not a node of this graph"):
        nn.createEdge(op, x)


def test_missing_external_output_is_logged_and_skipped(caplog):
    net = core.Net("loose")
    net.Relu(["X"], ["Y"])
    net.Proto().external_output.extend(["Y", "nowhere"])
    with caplog.at_level(logging.ERROR):
        nn = ng.NNModule(net)
    assert "nowhere" in caplog.text
    assert list(nn.convertToCaffe2Proto(net.Proto()).external_output) == ["Y"]


def test_device_map_marks_declare_and_export_nodes():
    net = core.Net("dist")
    net.FC(["X", "W", "b"], ["Y"])
    net.Proto().external_output.extend(["Y"])
    gpu = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA, device_id=1)
    nn = ng.NNModule(net, {"X": gpu, "Y": gpu})
    declared = {n.outputs[0].name: n for n in nn.operators if n.name == "Declare"}
    exported = {n.inputs[0].name: n for n in nn.operators if n.name == "Export"}
    assert sorted(declared) == ["W", "X", "b"] and sorted(exported) == ["Y"]
    assert declared["X"].annotation.device_option.device_id == 1
    assert exported["Y"].annotation.hasDeviceOption()
    assert not declared["W"].annotation.hasDeviceOption()
    with pytest.raises(Caffe2Error, match='Unused names in the blob map.*"Fake"'):
        ng.NNModule(net, {"X": gpu, "Fake": gpu})


def test_annotation_is_copied_in_and_live_out():
    nn = ng.NNModule()
    node = nn.dataFlow.createNode(core.CreateOperator("Relu", [], [], name="r"))
    assert node.annotation.operator_def.name == "r"
    annot = ng.Annotation()
    annot.setDeviceType(caffe2_pb2.CUDA)
    node.setAnnotation(annot)
    annot.setDeviceType(caffe2_pb2.CPU)                # the node holds a copy
    assert node.getAnnotation().getDeviceType() == caffe2_pb2.CUDA
    node.getAnnotation().setDevice("host2")            # and hands out the live one
    assert node.annotation.getDevice() == "host2"
    with pytest.raises(Caffe2Error, match="DeviceOption"):
        node.annotation.device_option = "cpu"


def _pattern(strict_x):
    pattern = ng.NNMatchGraph()
    produce = pattern.createNode(ng.NeuralNetOperator("Produce"), strict=True)
    tensor = pattern.createNode(ng.NeuralNetData("t"), strict=strict_x)
    use = pattern.createNode(ng.NeuralNetOperator("Use"))
    pattern.createEdge(produce, tensor)
    pattern.createEdge(tensor, use)
    return pattern


def test_match_follows_out_edges_and_strictness():
    nn = ng.NNModule()
    produce = nn.dataFlow.createNode(ng.NeuralNetOperator("Produce"))
    t = nn.dataFlow.createNode(ng.NeuralNetData("t"))
    use = nn.dataFlow.createNode(ng.NeuralNetOperator("Use"))
    other = nn.dataFlow.createNode(ng.NeuralNetOperator("Other"))
    nn.createEdge(produce, t)
    nn.createEdge(t, use)
    matches = list(nn.match(_pattern(strict_x=True)))
    assert len(matches) == 1 and set(matches[0].nodes) == {produce, t, use}
    nn.createEdge(t, other)          # t now has a second reader: a strict t no longer matches
    assert list(nn.match(_pattern(strict_x=True))) == []
    assert len(list(nn.match(_pattern(strict_x=False)))) == 1
    anything = ng.NNMatchGraph()
    anything.createNode()
    assert len(list(nn.match(anything))) == len(nn.nodes)


def test_generic_graph_and_dot_text(capsys):
    g = ng.Graph()
    a, b = g.createNode("hello"), g.createNode(3)
    edge = g.createEdge(a, b)
    assert edge.tail() is a and edge.head() is b
    ng.render(g)
    out = capsys.readouterr().out
    assert 'label="hello"' in out and 'label="3"' in out and "0 -> 1;" in out
    nn = ng.NNModule()
    nn.dataFlow.createNode(ng.NeuralNetOperator("Op"))
    assert 'shape="box"' in repr(nn.dataFlow)


def test_transpose_network_runs_convs_in_nhwc():
    np.random.seed(3)
    net = core.Net("transpose")
    net.Conv(["X", "w1", "b1"], ["c1"], kernel=3)
    net.Conv(["X", "w2", "b2"], ["c2"], kernel=3, order="NCHW")
    net.Conv(["c1", "w3", "b3"], ["c3"], kernel=3)
    net.Add(["c3", "c3"], ["out"])
    blobs = {"X": np.random.rand(2, 3, 8, 8), "w1": np.random.rand(4, 3, 3, 3),
             "w2": np.random.rand(4, 3, 3, 3), "w3": np.random.rand(5, 4, 3, 3),
             "b1": np.random.rand(4), "b2": np.random.rand(4), "b3": np.random.rand(5)}
    nn = ng.NNModule(net)
    transpose_network(nn)
    new_net = nn.convertToCaffe2Proto()
    types = [op.type for op in new_net.op]
    # X once to NHWC, each filter once, each conv output once back to NCHW; c1's NHWC
    # form feeds the third conv directly
    assert types.count("NCHW2NHWC") == 4 and types.count("NHWC2NCHW") == 3
    assert all(dict((a.name, a.s) for a in op.arg)["order"] == b"NHWC"
               for op in new_net.op if op.type == "Conv")
    for name, value in blobs.items():
        workspace.FeedBlob(name, value.astype(np.float32))
    workspace.RunNetOnce(new_net)
    c1 = _conv_nchw(blobs["X"], blobs["w1"], blobs["b1"])
    np.testing.assert_allclose(workspace.FetchBlob("c1"), c1, rtol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob("c2"),
                               _conv_nchw(blobs["X"], blobs["w2"], blobs["b2"]), rtol=1e-4)
    np.testing.assert_allclose(workspace.FetchBlob("out"),
                               2 * _conv_nchw(c1, blobs["w3"], blobs["b3"]), rtol=1e-4)


def test_transpose_network_leaves_nhwc_convs_alone():
    net = core.Net("nhwc")
    net.Conv(["X", "w"], ["Y"], kernel=3, order="NHWC")
    nn = ng.NNModule(net)
    transpose_network(nn)
    assert [op.type for op in nn.convertToCaffe2Proto().op] == ["Conv"]
