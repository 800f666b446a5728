"""Nets Caffe2's backward pass builder accepts that caffe2py refused (found by
Caffe2's rnn_cell_test): a given gradient of a blob that ops of the net also read,
and an in-place Add whose output a later in-place op overwrites. Against NumPy."""
import numpy as np

from caffe2py import core, workspace

RNG = np.random.default_rng(5)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run(net, **blobs):
    workspace.ResetWorkspace()
    for name, value in blobs.items():
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)


def test_a_given_gradient_of_a_blob_ops_also_read_is_replaced_by_theirs():
    # Caffe2's IR: a gradient passed in for y is where the walk starts, not a partial
    # gradient to sum; when ops also read y, their gradient of y replaces it. A
    # RecurrentNetwork step net relies on this (x = a state read by the next layer,
    # its linked gradient arriving as "x_grad", added by the backward step itself)
    net = core.Net("given_and_read")
    net.FC(["x", "w", "b"], "y")
    grad_map = net.AddGradientOperators({"y": "y_grad", "x": "x_grad"})
    assert [op.type for op in net.Proto().op[1:]] == ["FCGradient"]
    x, w, b, dy, dx_in = f32(3, 4), f32(2, 4), f32(2), f32(3, 2), f32(3, 4)
    run(net, x=x, w=w, b=b, y_grad=dy, x_grad=dx_in)
    assert str(grad_map["x"]) == "x_grad"
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), dy @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["w"]), dy.T @ x, rtol=1e-5, atol=1e-6)


def test_stacked_lstm_step_nets_take_the_gradient_of_a_state_the_next_layer_reads():
    # rnn_cell_test's multi_lstm: layer 0's hidden state is a state (linked gradient)
    # and layer 1's input; building the backward step net used to stop on it
    from caffe2py import model_helper, rnn_cell
    model = model_helper.ModelHelper(name="stacked")
    rnn_cell.LSTM(model, core.BlobReference("seq"), core.BlobReference("lengths"), None, 2, [3, 3],
                  scope="lstm", outputs_with_grads=(0,))
    rnn = [op for op in model.net.Proto().op if op.type == "RecurrentNetwork"][0]
    step = [a.n for a in rnn.arg if a.name == "backward_step_net"][0]
    assert "FCGradient" in [op.type for op in step.op]


def test_in_place_add_then_in_place_tanh():
    # attention.py's coverage attention: s = a + b; s += c (in place); s = tanh(s) (in place)
    net = core.Net("add_tanh")
    net.Add(["a", "b"], "s", broadcast=1)
    net.Add(["s", "c"], "s")
    net.Tanh("s", "s")
    grad_map = net.AddGradientOperators({"s": "ds"})
    a, b, c, ds = f32(2, 3), f32(3), f32(2, 3), f32(2, 3)
    run(net, a=a, b=b, c=c, ds=ds)
    dpre = ds * (1 - np.tanh(a + b + c) ** 2)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["a"]), dpre, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["b"]), dpre.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["c"]), dpre, rtol=1e-5, atol=1e-6)


def test_in_place_sub_on_its_second_operand():
    net = core.Net("sub_inplace")
    net.Sub(["a", "b"], "b")
    net.Sigmoid("b", "b")
    grad_map = net.AddGradientOperators({"b": "db"})
    a, b, db = f32(4), f32(4), f32(4)
    run(net, a=a, b=b, db=db)
    sig = 1 / (1 + np.exp(-(a - b)))
    dpre = db * sig * (1 - sig)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["a"]), dpre, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["b"]), -dpre, rtol=1e-5, atol=1e-6)


def test_gradient_outputs_a_schema_cannot_infer_take_their_blobs_shape():
    # Caffe2's shape inference: a gradient op's `<x>_grad` output its schema cannot
    # infer (Concat's gradient is a Split with the sizes as an input) has x's shape
    net = core.Net("concat_grad_shapes")
    net.Concat(["a", "b"], ["c", "split_info"], axis=1)
    net.AddGradientOperators({"c": "dc"})
    shapes, types = workspace.InferShapesAndTypes([net], {"a": [2, 3], "b": [2, 5], "dc": [2, 8]})
    assert shapes["a_grad"] == [2, 3] and shapes["b_grad"] == [2, 5]
    a, b, dc = f32(2, 3), f32(2, 5), f32(2, 8)
    run(net, a=a, b=b, dc=dc)
    assert workspace.FetchBlob("a_grad").shape == (2, 3) and workspace.FetchBlob("b_grad").shape == (2, 5)


def test_in_place_div_on_its_first_operand():
    # elementwise_ops_test runs Div in place on A with its gradient: the gradient reads
    # B and C (dA = dC / B, dB = -dC * C / B) and A for its shape only
    for b_shape in [(4,), (3, 1)]:
        net = core.Net("div_in_place")
        net.Div(["a", "b"], "a")
        grad_map = net.AddGradientOperators({"a": "a_grad_given"})
        a, b, dc = f32(3, 4), np.abs(f32(*b_shape)) + 1.0, f32(3, 4)
        run(net, a=a.copy(), b=b, a_grad_given=dc)
        c = a / b
        np.testing.assert_allclose(workspace.FetchBlob("a"), c, rtol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["a"]), dc / b, rtol=1e-5, atol=1e-6)
        db = (-dc * c / b).sum(axis=0 if b_shape == (4,) else 1).reshape(b_shape)
        np.testing.assert_allclose(workspace.FetchBlob(grad_map["b"]), db, rtol=1e-5, atol=1e-5)


def test_in_place_div_on_its_second_operand_is_still_refused():
    # B's value is gone once the op wrote over it, and dA needs it
    import pytest
    from caffe2py.errors import Caffe2Error
    net = core.Net("div_in_place_b")
    net.Div(["a", "b"], "b")
    with pytest.raises(Caffe2Error, match="runs in place on 'b'"):
        net.AddGradientOperators({"b": "b_grad_given"})


def test_div_gradient_takes_its_legacy_three_input_form():
    # DivGradient(B, C, dC), the form older Caffe2 nets hold: dA = dC / B,
    # dB = -dC * C / B summed over the axes B was broadcast along
    for b_shape in [(3, 4), (4,)]:
        b, c, dc = np.abs(f32(*b_shape)) + 1.0, f32(3, 4), f32(3, 4)
        workspace.ResetWorkspace()
        for name, value in dict(B=b, C=c, dC=dc).items():
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(core.CreateOperator("DivGradient", ["B", "C", "dC"], ["dA", "dB"]))
        np.testing.assert_allclose(workspace.FetchBlob("dA"), dc / b, rtol=1e-5, atol=1e-6)
        db = -dc * c / b
        np.testing.assert_allclose(workspace.FetchBlob("dB"), db if b_shape == (3, 4) else db.sum(axis=0),
                                   rtol=1e-5, atol=1e-5)
