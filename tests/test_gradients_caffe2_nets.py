"""Nets Caffe2's backward pass builder accepts that caffe2py refused (found by
Caffe2's rnn_cell_test): an explicit output gradient named like the gradient an op
writes for the same blob, and an in-place Add whose output a later in-place op
overwrites. Both against NumPy."""
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


def test_an_explicit_gradient_named_like_an_ops_gradient_is_summed_with_it():
    # x is both an output asked about (its gradient handed over as "x_grad", as
    # RecurrentNetwork's step nets do for a state) and FC's input, whose gradient op
    # writes "x_grad" too: both contributions must add up, neither clobber the other
    net = core.Net("handed_over")
    net.FC(["x", "w", "b"], "y")
    grad_map = net.AddGradientOperators({"y": "y_grad", "x": "x_grad"})
    x, w, b, dy, dx_in = f32(3, 4), f32(2, 4), f32(2), f32(3, 2), f32(3, 4)
    run(net, x=x, w=w, b=b, y_grad=dy, x_grad=dx_in)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["x"]), dx_in + dy @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(grad_map["w"]), dy.T @ x, rtol=1e-5, atol=1e-6)


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
