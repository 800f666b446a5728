"""Caffe2's MatMul on the CPU (operators/math/caffe2_matmul.py): forward and gradient against
NumPy formulas (and torch's autograd where installed), the axis_a/axis_b flattening, and
named errors. Also: every catalogued op that is registered has a CPU kernel (MatMul had
only a CUDA one)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(11)


def _run(a, b, grads=False, **args):
    workspace.ResetWorkspace()
    workspace.FeedBlob("A", a)
    workspace.FeedBlob("B", b)
    net = core.Net("matmul")
    y = net.MatMul(["A", "B"], ["Y"], **args)
    if grads:
        net.AddGradientOperators([net.SumElements([y], "loss")])
    workspace.RunNetOnce(net)
    return [workspace.FetchBlob(n) for n in (("Y", "A_grad", "B_grad") if grads else ("Y",))]


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_and_its_gradient_follow_the_formulas(trans_a, trans_b, dtype):
    a = RNG.standard_normal((3, 4) if trans_a else (4, 3)).astype(dtype)
    b = RNG.standard_normal((5, 3) if trans_b else (3, 5)).astype(dtype)
    op_a, op_b = (a.T if trans_a else a), (b.T if trans_b else b)
    (y,) = _run(a, b, trans_a=trans_a, trans_b=trans_b)
    np.testing.assert_allclose(y, op_a @ op_b, rtol=1e-5, atol=1e-6)
    assert y.dtype == dtype
    if dtype != np.float32:
        return                                # the loss gradient Caffe2 seeds is float32
    y, da, db = _run(a, b, grads=True, trans_a=trans_a, trans_b=trans_b)
    ones = np.ones((4, 5), dtype)            # d(sum Y)/dY
    d_op_a, d_op_b = ones @ op_b.T, op_a.T @ ones
    np.testing.assert_allclose(da, d_op_a.T if trans_a else d_op_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, d_op_b.T if trans_b else d_op_b, rtol=1e-5, atol=1e-6)


def test_matmul_gradient_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((6, 4)).astype(np.float32)
    b = RNG.standard_normal((7, 4)).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("A", a)
    workspace.FeedBlob("B", b)
    workspace.FeedBlob("W", RNG.standard_normal((6, 7)).astype(np.float32))
    net = core.Net("matmul_torch")
    y = net.MatMul(["A", "B"], ["Y"], trans_b=1)
    loss = net.SumElements([net.Mul([y, "W"], "yw")], "loss")
    net.AddGradientOperators([loss])
    workspace.RunNetOnce(net)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((ta @ tb.T) * torch.tensor(workspace.FetchBlob("W"))).sum().backward()
    np.testing.assert_allclose(workspace.FetchBlob("A_grad"), ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("B_grad"), tb.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_inputs_are_flattened_at_axis_a_and_axis_b():
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    (y,) = _run(a, b.reshape(12, 5))
    np.testing.assert_allclose(y, a.reshape(2, 12) @ b.reshape(12, 5), rtol=1e-5, atol=1e-5)
    (y,) = _run(a, b, axis_a=2, axis_b=1)                    # A as (6, 4), B as (4, 15)
    np.testing.assert_allclose(y, a.reshape(6, 4) @ b.reshape(4, 15), rtol=1e-5, atol=1e-5)
    (y,) = _run(a, b.reshape(12, 5), axis_a=-2)              # negative axes count from the end
    np.testing.assert_allclose(y, a.reshape(2, 12) @ b.reshape(12, 5), rtol=1e-5, atol=1e-5)


def test_empty_inner_dimension_gives_zeros():
    (y,) = _run(np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32))
    np.testing.assert_array_equal(y, np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("a, b, args, message", [
    (np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), {}, "gives rows of 3 values"),
    (np.ones((2, 3), np.float32), np.ones((3, 5), np.float32), {"axis_a": 2}, "axis_a 2 is outside"),
    (np.ones((2, 3), np.int32), np.ones((3, 5), np.int32), {}, "must be a tensor of"),
    (np.ones((2, 3), np.float32), np.ones((3, 5), np.float64), {}, "must match"),
])
def test_bad_matmul_inputs_are_named_errors(a, b, args, message):
    workspace.ResetWorkspace()
    workspace.FeedBlob("Y", np.full(2, 7.0, np.float32))
    with pytest.raises(Caffe2Error, match=message):
        _run(a, b, **args)


def test_every_registered_catalogue_op_has_a_cpu_kernel():
    from caffe2py import catalogue, registry
    from caffe2py.proto import caffe2_pb2
    without = [name for name in catalogue.coverage().registered
               if not any(k[0] == registry.CAFFE2_DOMAIN and k[1] == name and k[2] == caffe2_pb2.CPU
                          for k in registry._kernels)]
    assert without == []
