"""The backward pass builder (core.Net.AddGradientOperators, ModelHelper's): Caffe2's
blob names, sums of partial gradients, in-place ops, StopGradient, explicit output
gradients, sparse gradients, the named errors, and a small net trained by SGD."""
import numpy as np
import pytest

from caffe2py import brew, core, gradients, model_helper, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.gradient_checker import NetGradientChecker

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def op_types(net):
    return [op.type for op in net.Proto().op]


def run(net, **blobs):
    workspace.ResetWorkspace()
    for name, value in blobs.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)


def test_seed_names_and_gradient_op_flags():
    net = core.Net("seed")
    net.FC(["x", "w", "b"], "y")
    net.AveragedLoss("y", "loss")
    grad_map = net.AddGradientOperators(["loss"])
    ops = net.Proto().op
    seed = ops[2]
    assert (seed.type, list(seed.input), list(seed.output)) == ("ConstantFill", ["loss"], ["loss_autogen_grad"])
    assert [a.f for a in seed.arg if a.name == "value"] == [1.0]
    assert [op.type for op in ops[3:]] == ["AveragedLossGradient", "FCGradient"]
    assert all(op.is_gradient_op for op in ops[3:]) and not ops[0].is_gradient_op
    assert all(isinstance(k, core.BlobReference) and isinstance(v, core.BlobReference) for k, v in grad_map.items())
    assert {str(k): str(v) for k, v in grad_map.items()} == {
        "loss": "loss_autogen_grad", "y": "y_grad", "x": "x_grad", "w": "w_grad", "b": "b_grad"}
    x, w, b = f32(3, 4), f32(2, 4), f32(2)
    run(net, x=x, w=w, b=b)
    np.testing.assert_allclose(workspace.FetchBlob("w_grad"), np.ones((3, 2)).T @ x / 6, rtol=1e-5)


def test_skip_leaves_the_first_ops_out():
    net = core.Net("skip")
    net.GivenTensorFill([], "x", shape=[2, 2], values=[1.0, 2.0, 3.0, 4.0])
    net.Relu("x", "y")
    grad_map = net.AddGradientOperators({"y": "dy"}, skip=1)
    assert op_types(net) == ["GivenTensorFill", "Relu", "ReluGradient"]
    assert "x" in grad_map


def test_a_blob_read_twice_gets_the_sum_of_both_gradients():
    net = core.Net("branches")
    net.FC(["x", "w", "b"], "h")
    net.Relu("h", "r")
    net.Sigmoid("h", "s")
    net.Mul(["r", "s"], "y")
    net.AddGradientOperators({"y": "dy"})
    ops = net.Proto().op
    summing = ops[-2]           # before the FC's gradient
    assert summing.type == "Sum"
    assert sorted(summing.input) == ["_h_grad_autosplit_0", "h_grad"] and list(summing.output) == ["h_grad"]
    x, w, b, dy = f32(3, 4), f32(5, 4), f32(5), f32(3, 5)
    run(net, x=x, w=w, b=b, dy=dy)
    h = x @ w.T + b
    r, s = np.maximum(h, 0), 1 / (1 + np.exp(-h))
    dh = dy * s * (h > 0) + dy * r * s * (1 - s)
    np.testing.assert_allclose(workspace.FetchBlob("h_grad"), dh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), dh @ w, rtol=1e-5, atol=1e-5)


def test_three_readers_and_an_explicit_gradient_all_add_up():
    net = core.Net("three")
    net.Scale("x", "a", scale=2.0)
    net.Scale("x", "b", scale=3.0)
    net.Sum(["a", "b", "x"], "y")
    net.Scale("x", "z", scale=5.0)
    grad_map = net.AddGradientOperators({"y": "dy", "z": "dz"})
    x = f32(4)
    run(net, x=x, dy=np.ones(4, np.float32), dz=np.full(4, 2.0, np.float32))
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["x"]), np.full(4, 2 + 3 + 1 + 10.0))
    assert {"dy", "dz"} <= set(net.Proto().external_input)


def test_in_place_ops_chain():
    net = core.Net("inplace")
    net.FC(["x", "w", "b"], "h")
    net.Scale("h", "h", scale=0.5)
    net.Relu("h", "h")
    grad_map = net.AddGradientOperators({"h": "dh"})
    assert op_types(net)[3:] == ["ReluGradient", "Scale", "FCGradient"]
    assert str(grad_map["h"]) == "h_grad" and str(grad_map["w"]) == "w_grad"
    x, w, b, dh = f32(3, 4), f32(5, 4), f32(5), f32(3, 5)
    run(net, x=x, w=w, b=b, dh=dh)
    pre = x @ w.T + b
    dpre = dh * 0.5 * (pre > 0)
    np.testing.assert_allclose(workspace.FetchBlob("w_grad"), dpre.T @ x, rtol=1e-5, atol=1e-5)


def test_an_output_overwritten_before_its_gradient_reads_it_is_a_named_error():
    net = core.Net("inplace_twice")
    net.Relu("x", "h")
    net.Sigmoid("h", "h")            # ReluGradient needs Relu's output, which this replaced
    with pytest.raises(Caffe2Error, match="Relu #0 'h': its gradient needs output 'h'.*overwrote it"):
        net.AddGradientOperators({"h": "dh"})


def test_an_input_overwritten_after_use_is_a_named_error():
    net = core.Net("overwrite")
    net.FC(["x", "w", "b"], "y")
    net.Relu("x", "x")               # x is gone when FC's gradient would read it
    with pytest.raises(Caffe2Error, match="FC #0 'y'.*needs input 'x'.*overwritten"):
        net.AddGradientOperators({"y": "dy"})


def test_stop_gradient_stops_the_walk():
    net = core.Net("stop")
    net.FC(["x", "w1", "b1"], "h")
    net.StopGradient("h", "h")
    net.FC(["h", "w2", "b2"], "y")
    grad_map = net.AddGradientOperators({"y": "dy"})
    # the gradient of h (before StopGradient) is None, so h is not in the map either
    assert {str(k) for k in grad_map} == {"y", "w2", "b2"}
    assert op_types(net).count("FCGradient") == 1


def test_an_orphan_stop_gradient_is_an_error():
    net = core.Net("orphan")
    net.FC(["x", "w", "b"], "h")
    net.StopGradient("h", "h_stopped")
    net.Relu("h", "y")
    with pytest.raises(Caffe2Error, match="StopGradient's output 'h_stopped' is read by no op"):
        net.AddGradientOperators({"y": "dy"})


def test_an_op_without_a_gradient_on_the_path_is_a_named_error():
    net = core.Net("nograd")                       # Floor: Caffe2 has no gradient for it either
    net.Floor("x", "c")
    net.Relu("c", "y")
    with pytest.raises(Caffe2Error, match="Floor #0 'c': no gradient is defined for operator type 'Floor'"):
        net.AddGradientOperators({"y": "dy"})
    off_path = core.Net("nograd_off_path")        # the same op off the gradient's path is fine
    off_path.Floor("x", "c")
    off_path.Relu("x", "y")
    assert str(off_path.AddGradientOperators({"y": "dy"})["x"]) == "x_grad"


def test_no_gradient_ops_stop_quietly():
    net = core.Net("fill")
    net.ConstantFill([], "c", shape=[2], value=1.0)
    net.Add(["x", "c"], "y")
    grad_map = net.AddGradientOperators({"y": "dy"})
    assert "c" in grad_map and op_types(net)[-1] == "AddGradient"


def test_unknown_ys_are_an_error():
    net = core.Net("unknown_y")
    net.Relu("x", "y")
    with pytest.raises(Caffe2Error, match="no op of the net reads or writes it"):
        net.AddGradientOperators(["nothing"])


def test_gather_and_sparse_lengths_give_gradient_slices_and_two_are_concatenated():
    net = core.Net("sparse")
    net.Gather(["table", "i1"], "g")
    net.SparseLengthsSum(["table", "i2", "len"], "s")
    grad_map = net.AddGradientOperators({"g": "dg", "s": "ds"})
    g = grad_map["table"]
    assert isinstance(g, core.GradientSlice)
    assert isinstance(g.indices, core.BlobReference) and isinstance(g.values, core.BlobReference)
    assert (str(g.indices), str(g.values)) == ("table_grad_indices_concat", "table_grad_values_concat")
    assert op_types(net)[-2:] == ["Concat", "Concat"]
    table, i1, i2 = f32(6, 3), np.array([1, 4], np.int32), np.array([0, 4, 4], np.int64)
    lengths, dg, ds = np.array([2, 1], np.int32), f32(2, 3), f32(2, 3)
    run(net, table=table, i1=i1, i2=i2, len=lengths, dg=dg, ds=ds)
    indices = workspace.FetchBlob(g.indices)
    values = workspace.FetchBlob(g.values)
    dense = np.zeros((6, 3))
    np.add.at(dense, indices, values)
    want = np.zeros((6, 3))
    np.add.at(want, i1, dg)
    np.add.at(want, i2, ds[[0, 0, 1]])
    np.testing.assert_allclose(dense, want, rtol=1e-6)


def test_single_sparse_gradient_names():
    net = core.Net("sls")
    net.SparseLengthsWeightedSum(["emb", "wts", "ids", "len"], "out", grad_on_weights=1)
    grad_map = net.AddGradientOperators({"out": "dout"})
    assert grad_map["emb"] == core.GradientSlice("ids", "emb_grad_values")
    assert str(grad_map["wts"]) == "wts_grad"


def test_mixing_sparse_and_dense_gradients_is_an_error():
    net = core.Net("mix")
    net.Gather(["table", "i"], "g")
    net.Relu("table", "r")
    with pytest.raises(Caffe2Error, match="mix of sparse"):
        net.AddGradientOperators({"g": "dg", "r": "dr"})


def test_python_registered_gradient():
    @gradients.GradientRegistry.RegisterGradient("Exp")
    def exp_gradient(op, g_output):
        return [core.CreateOperator("Mul", [op.output[0], g_output[0]], [op.input[0] + "_grad"])], \
            [op.input[0] + "_grad"]
    try:
        net = core.Net("exp")
        net.Exp("x", "y")
        net.AddGradientOperators({"y": "dy"})
        x = f32(4)
        run(net, x=x, dy=np.ones(4, np.float32))
        np.testing.assert_allclose(workspace.FetchBlob("x_grad"), np.exp(x), rtol=1e-6)
    finally:
        gradients._REGISTRY.pop("Exp", None)


def test_net_gradient_checker():
    net = core.Net("checked")
    net.FC(["x", "w", "b"], "h")
    net.Tanh("h", "t")
    net.SquaredL2Distance(["t", "target"], "d")
    values = {"x": f32(2, 3), "w": f32(4, 3), "b": f32(4), "target": f32(2, 4)}
    workspace.ResetWorkspace()
    NetGradientChecker.Check(net, ["d"], values, "w", step_size=1e-2, threshold=1e-2)


def test_caffe2_compat_names():
    import caffe2py.compat  # noqa: F401
    from caffe2.python import core as c2core, gradient_checker
    assert c2core.GradientSlice is core.GradientSlice
    assert gradient_checker.GradientChecker(0.01, 0.01)


# ----------------------------------------------------------------- ModelHelper

def _mlp(name):
    model = model_helper.ModelHelper(name=name)
    fc1 = brew.fc(model, "data", name + "_fc1", dim_in=4, dim_out=16)
    relu = brew.relu(model, fc1, fc1)
    fc2 = brew.fc(model, relu, name + "_fc2", dim_in=16, dim_out=3)
    _, loss = model.net.SoftmaxWithLoss([fc2, "label"], [name + "_prob", name + "_loss"])
    return model, loss


def test_model_helper_records_param_to_grad():
    model, loss = _mlp("mh")
    grad_map = model.AddGradientOperators([loss])
    assert model.gradient_ops_added and model.grad_map is grad_map
    assert set(model.param_to_grad) == set(model.params) and len(model.params) == 4
    for p, g in model.param_to_grad.items():
        assert str(g) == str(p) + "_grad"
    with pytest.raises(Caffe2Error, match="already"):
        model.AddGradientOperators([loss])


def test_model_helper_refuses_a_loss_that_is_not_a_scalar():
    model = model_helper.ModelHelper(name="vector_loss")
    fc = brew.fc(model, "data", "vl_fc", dim_in=4, dim_out=3)
    softmax = model.net.Softmax(fc, "vl_prob")
    xent = model.net.LabelCrossEntropy([softmax, "label"], "vl_xent")
    model.AddGradientOperators([xent])
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("data", f32(5, 4))
    workspace.FeedBlob("label", np.zeros(5, np.int32))
    with pytest.raises(Caffe2Error, match="blob 'vl_xent': a loss must be a scalar"):
        workspace.RunNetOnce(model.net)


def test_mlp_trained_by_hand_written_sgd_lowers_its_loss():
    model, loss = _mlp("sgd")
    model.AddGradientOperators([loss])
    centers = RNG.standard_normal((3, 4)) * 2
    labels = RNG.integers(0, 3, 96).astype(np.int32)
    data = (centers[labels] + RNG.standard_normal((96, 4)) * 0.5).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("data", data)
    workspace.FeedBlob("label", labels)
    workspace.CreateNet(model.net)
    losses = []
    for _ in range(40):
        workspace.RunNet(model.net.Name())
        losses.append(float(workspace.FetchBlob(loss)))
        for param, grad in model.param_to_grad.items():
            workspace.FeedBlob(param, workspace.FetchBlob(param) - 0.2 * workspace.FetchBlob(grad))
    assert losses[-1] < 0.5 * losses[0], losses
    prob = workspace.FetchBlob("sgd_prob")
    assert (prob.argmax(axis=1) == labels).mean() > 0.8


def test_brew_spatial_bn_in_training_mode():
    model = model_helper.ModelHelper(name="bn_train")
    bn = brew.spatial_bn(model, "data", "bn", dim_in=3, is_test=False, momentum=0.5)
    loss = model.net.AveragedLoss(model.net.Relu(bn, "bn_relu"), "bn_loss")
    model.AddGradientOperators([loss])
    op = model.net.Proto().op[0]
    assert list(op.output) == ["bn", "bn_rm", "bn_riv", "bn_sm", "bn_siv"]
    assert {str(p) for p in model.param_to_grad} == {"bn_s", "bn_b"}
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    x = f32(4, 3, 2, 2) + 3.0
    workspace.FeedBlob("data", x)
    workspace.RunNetOnce(model.net)
    np.testing.assert_allclose(workspace.FetchBlob("bn_rm"), 0.5 * x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("bn").mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert workspace.FetchBlob("bn_s_grad").shape == (3,)


def test_docs_list_every_gradient():
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    section = doc[doc.index("## Gradients"):]
    missing = [t for t in gradients.registered_gradient_types() if t not in section]
    assert not missing, "docs/training.md does not list the gradients of %s" % missing


def test_in_place_add_and_sum():
    net = core.Net("inplace_add")
    net.Add(["a", "b"], "a")
    net.Sum(["c", "a"], "c")
    net.Relu("c", "y")
    grad_map = net.AddGradientOperators({"y": "dy"})
    a, b, c, dy = f32(2, 3), f32(3), f32(2, 3), f32(2, 3)
    run(net, a=a, b=b, c=c, dy=dy)
    mask = (a + b + c) > 0
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["a"]), dy * mask, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["b"]), (dy * mask).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["c"]), dy * mask, rtol=1e-6)


def test_mnist_tutorial_loss_chain():
    model = model_helper.ModelHelper(name="tutorial_chain")
    data = model.Scale("data", "data", scale=1.0 / 256)
    data = model.StopGradient(data, data)
    fc = brew.fc(model, data, "tc_fc", dim_in=6, dim_out=4)
    softmax = brew.softmax(model, fc, "tc_softmax")
    xent = model.LabelCrossEntropy([softmax, "label"], "tc_xent")
    loss = model.AveragedLoss(xent, "tc_loss")
    model.Accuracy([softmax, "label"], "tc_accuracy")
    model.AddGradientOperators([loss])
    assert "data" not in model.grad_map and set(model.param_to_grad) == set(model.params)
    x, labels = (f32(5, 6) * 256).astype(np.float32), RNG.integers(0, 4, 5).astype(np.int32)
    workspace.ResetWorkspace()
    workspace.RunNetOnce(model.param_init_net)
    run_blobs = {"data": x, "label": labels}
    for name, value in run_blobs.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(model.net)
    w, b = workspace.FetchBlob("tc_fc_w"), workspace.FetchBlob("tc_fc_b")
    logits = (x / 256) @ w.T + b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dlogits = (p - np.eye(4)[labels]) / 5
    np.testing.assert_allclose(workspace.FetchBlob("tc_fc_w_grad"), dlogits.T @ (x / 256), rtol=1e-4, atol=1e-6)
