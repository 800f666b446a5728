"""Every gradient op: finite differences through caffe2py.gradient_checker on random
inputs with hypothesis-drawn shapes, and torch.autograd on the same inputs (those
tests skip without torch)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

from _grad_util import compare_with_torch, finite_difference_check, outputs_of, run_gradient, torch

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
FEW = settings(max_examples=4, deadline=None)


def randn(rng, *shape, away_from_zero=0.0):
    x = rng.standard_normal(shape).astype(np.float32)
    if away_from_zero:
        x = np.where(np.abs(x) < away_from_zero, np.sign(x + 1e-9) * away_from_zero * 2, x).astype(np.float32)
    return x


def spaced(rng, *shape):
    """Distinct values at least 0.05 apart (max pooling: no near-ties for the steps)."""
    n = int(np.prod(shape))
    return (rng.permutation(n).astype(np.float32) * 0.05 - n * 0.025).reshape(shape)


# ----------------------------------------------------------------- FC

@FEW
@given(st.data())
def test_fc(data):
    n, k, m = (data.draw(st.integers(1, 3)) for _ in range(3))
    transposed = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = randn(rng, n, 2, k)                    # flattened at axis 1: rows of 2 * k
    w = randn(rng, 2 * k, m) if transposed else randn(rng, m, 2 * k)
    b = randn(rng, m)
    op = core.CreateOperator("FCTransposed" if transposed else "FC", ["X", "W", "b"], ["Y"])
    finite_difference_check(op, [x, w, b], [0, 1, 2])
    if torch is not None:
        compare_with_torch(op, [x, w, b], [0, 1, 2],
                           lambda X, W, B: [X.reshape(n, -1) @ (W if transposed else W.T) + B])


def test_fc_gradient_names_and_outputs():
    op = core.CreateOperator("FC", ["data", "fc_w", "fc_b"], ["fc"])
    grads, g_input = run_gradient(op, [np.ones((2, 3), np.float32), np.ones((4, 3), np.float32),
                                       np.zeros(4, np.float32)], {0: np.ones((2, 4), np.float32)})
    assert g_input == ["data_grad", "fc_w_grad", "fc_b_grad"]
    np.testing.assert_allclose(grads[2], [2, 2, 2, 2])
    np.testing.assert_allclose(grads[1], np.full((4, 3), 2.0))


# ----------------------------------------------------------------- Conv

@FEW
@given(st.data())
def test_conv_2d(data):
    group = data.draw(st.integers(1, 2))
    cg, mg = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    kernel = data.draw(st.integers(1, 3))
    stride, dilation = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    pads = [data.draw(st.integers(0, 1)) for _ in range(4)]     # t, l, b, r
    reach = (kernel - 1) * dilation + 1
    size = data.draw(st.integers(reach, max(reach, 4)))
    n = 1
    bias = data.draw(st.booleans())
    nhwc = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = randn(rng, n, group * cg, size, size + 1)  # small: two forward runs per element
    w = randn(rng, group * mg, cg, kernel, kernel)
    b = randn(rng, group * mg)
    args = dict(kernel=kernel, stride=stride, dilation=dilation, pad_t=pads[0], pad_l=pads[1],
                pad_b=pads[2], pad_r=pads[3], group=group)
    inputs = [x, w] + ([b] if bias else [])
    names = ["X", "W"] + (["b"] if bias else [])
    if nhwc:
        inputs = [x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()] + inputs[2:]
        args["order"] = "NHWC"
    op = core.CreateOperator("Conv", names, ["Y"], **args)
    finite_difference_check(op, inputs, list(range(len(inputs))))
    if torch is not None:
        import torch.nn.functional as F

        def conv(X, W, B=None):
            if nhwc:
                X, W = X.permute(0, 3, 1, 2), W.permute(0, 3, 1, 2)
            X = F.pad(X, (pads[1], pads[3], pads[0], pads[2]))
            y = F.conv2d(X, W, B, stride=stride, dilation=dilation, groups=group)
            return [y.permute(0, 2, 3, 1) if nhwc else y]
        compare_with_torch(op, inputs, list(range(len(inputs))), conv)


@FEW
@given(st.data())
def test_conv_1d_and_3d(data):
    rank = data.draw(st.sampled_from([1, 3]))
    kernel = data.draw(st.integers(1, 2))
    stride, pad = data.draw(st.integers(1, 2)), data.draw(st.integers(0, 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    spatial = (data.draw(st.integers(2, 4 if rank == 1 else 3)),) * rank
    x = randn(rng, 1, 2, *spatial)
    w = randn(rng, 2, 2, *(kernel,) * rank)
    b = randn(rng, 2)
    op = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernels=[kernel] * rank, strides=[stride] * rank,
                             pads=[pad] * (2 * rank))
    finite_difference_check(op, [x, w, b], [0, 1, 2])
    if torch is not None:
        import torch.nn.functional as F
        conv = F.conv1d if rank == 1 else F.conv3d
        compare_with_torch(op, [x, w, b], [0, 1, 2], lambda X, W, B: [conv(X, W, B, stride=stride, padding=pad)])


def test_conv_gradient_outputs_follow_no_bias_and_no_gradient_to_input():
    x, w = np.ones((1, 1, 3, 3), np.float32), np.ones((2, 1, 2, 2), np.float32)
    op = core.CreateOperator("Conv", ["X", "W"], ["Y"], kernel=2)
    grads, g_input = run_gradient(op, [x, w], {0: np.ones((1, 2, 2, 2), np.float32)})
    assert g_input == ["X_grad", "W_grad"] and set(grads) == {0, 1}
    op = core.CreateOperator("Conv", ["X", "W", "b"], ["Y"], kernel=2, no_gradient_to_input=1)
    grads, g_input = run_gradient(op, [x, w, np.zeros(2, np.float32)], {0: np.ones((1, 2, 2, 2), np.float32)})
    assert g_input == [None, "W_grad", "b_grad"]
    np.testing.assert_allclose(grads[2], [4, 4])


# ----------------------------------------------------------------- pooling

@FEW
@given(st.data())
def test_max_pool(data):
    kernel, stride = data.draw(st.integers(2, 3)), data.draw(st.integers(1, 2))
    pad = data.draw(st.integers(0, kernel // 2))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = spaced(rng, 1, 2, data.draw(st.integers(kernel, 5)), data.draw(st.integers(kernel, 5)))
    op = core.CreateOperator("MaxPool", ["X"], ["Y"], kernel=kernel, stride=stride, pad=pad)
    finite_difference_check(op, [x], [0])
    if torch is not None:
        import torch.nn.functional as F
        compare_with_torch(op, [x], [0], lambda X: [F.max_pool2d(X, kernel, stride, pad)])


@FEW
@given(st.data())
def test_average_pool(data):
    kernel, stride = data.draw(st.integers(2, 3)), data.draw(st.integers(1, 2))
    pad = data.draw(st.integers(0, kernel // 2))
    include_pad = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = randn(rng, 1, 2, data.draw(st.integers(kernel, 5)), data.draw(st.integers(kernel, 5)))
    op = core.CreateOperator("AveragePool", ["X"], ["Y"], kernel=kernel, stride=stride, pad=pad,
                             count_include_pad=int(include_pad))
    finite_difference_check(op, [x], [0])
    if torch is not None:
        import torch.nn.functional as F
        compare_with_torch(op, [x], [0], lambda X: [F.avg_pool2d(X, kernel, stride, pad,
                                                                  count_include_pad=include_pad)])


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_global_and_ceil_mode_pooling(op_type, order):
    rng = np.random.default_rng(3)
    x = spaced(rng, 1, 2, 3, 5)
    if order == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    finite_difference_check(core.CreateOperator(op_type, ["X"], ["Y"], global_pooling=1, order=order), [x], [0])
    finite_difference_check(core.CreateOperator(op_type, ["X"], ["Y"], kernel=2, stride=2, ceil_mode=1,
                                                order=order), [x], [0])


# ----------------------------------------------------------------- activations

@FEW
@given(st.data())
def test_activations(data):
    op_type = data.draw(st.sampled_from(["Relu", "Sigmoid", "Tanh"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    x = randn(rng, *shape, away_from_zero=0.05)
    op = core.CreateOperator(op_type, ["X"], ["Y"])
    finite_difference_check(op, [x], [0])
    if torch is not None:
        fn = {"Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh}[op_type]
        compare_with_torch(op, [x], [0], lambda X: [fn(X)])


def test_in_place_relu_gradient_reads_its_output():
    op = core.CreateOperator("Relu", ["X"], ["X"])
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    grads, g_input = run_gradient(op, [x], {0: np.ones(4, np.float32)})
    assert g_input == ["X_grad"]
    np.testing.assert_allclose(grads[0], [0, 1, 0, 1])


@FEW
@given(st.data())
def test_softmax(data):
    axis = data.draw(st.integers(1, 2))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = randn(rng, 2, data.draw(st.integers(1, 3)), data.draw(st.integers(2, 4)))
    op = core.CreateOperator("Softmax", ["X"], ["Y"], axis=axis)
    finite_difference_check(op, [x], [0])
    if torch is not None:
        compare_with_torch(op, [x], [0], lambda X: [X.reshape(int(np.prod(x.shape[:axis])), -1)
                                                    .softmax(-1).reshape(x.shape)])


# ----------------------------------------------------------------- SpatialBN

@FEW
@given(st.data())
def test_spatial_bn_training(data):
    n, c = data.draw(st.integers(2, 3)), data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = randn(rng, n, c, 2, 3)
    scale, bias = randn(rng, c), randn(rng, c)
    rm, rv = randn(rng, c), np.abs(randn(rng, c)) + 0.5
    op = core.CreateOperator("SpatialBN", ["X", "s", "b", "rm", "rv"], ["Y", "rm", "rv", "sm", "siv"],
                             is_test=0, epsilon=1e-3, momentum=0.8)
    finite_difference_check(op, [x, scale, bias, rm, rv], [0, 1, 2], stepsize=1e-2, threshold=2e-2)
    y, new_rm, new_rv, saved_mean, saved_inv_std = outputs_of(op, [x, scale, bias, rm, rv])
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(saved_mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saved_inv_std, 1 / np.sqrt(var + 1e-3), rtol=1e-5)
    count = n * 6
    np.testing.assert_allclose(new_rm, 0.8 * rm + 0.2 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_rv, 0.8 * rv + 0.2 * var * count / (count - 1), rtol=1e-5)
    if torch is not None:
        import torch.nn.functional as F
        trm, trv = torch.tensor(rm.astype(np.float64)), torch.tensor(rv.astype(np.float64))
        ty = F.batch_norm(torch.tensor(x, dtype=torch.float64), trm, trv, torch.tensor(scale, dtype=torch.float64),
                          torch.tensor(bias, dtype=torch.float64), training=True, momentum=0.2, eps=1e-3)
        np.testing.assert_allclose(y, ty.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(new_rm, trm.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_rv, trv.numpy(), rtol=1e-5, atol=1e-6)
        compare_with_torch(op, [x, scale, bias, rm, rv], [0, 1, 2],
                           lambda X, S, B, RM, RV: [F.batch_norm(X, RM.detach().clone(), RV.detach().clone(), S, B,
                                                                 training=True, momentum=0.2, eps=1e-3)])


def test_spatial_bn_test_mode_and_nhwc():
    rng = np.random.default_rng(1)
    x = randn(rng, 2, 3, 2, 4)
    scale, bias, rm, rv = randn(rng, 4), randn(rng, 4), randn(rng, 4), np.abs(randn(rng, 4)) + 0.5
    op = core.CreateOperator("SpatialBN", ["X", "s", "b", "rm", "rv"], ["Y"], is_test=1, order="NHWC")
    finite_difference_check(op, [x, scale, bias, rm, rv], [0, 1, 2])
    op = core.CreateOperator("SpatialBN", ["X", "s", "b", "rm", "rv"], ["Y", "rm", "rv", "sm", "siv"],
                             is_test=0, order="NHWC")
    finite_difference_check(op, [x, scale, bias, rm, rv], [0, 1, 2], threshold=2e-2)
    if torch is not None:
        import torch.nn.functional as F
        compare_with_torch(op, [x, scale, bias, rm, rv], [0, 1, 2], lambda X, S, B, RM, RV: [
            F.batch_norm(X.permute(0, 3, 1, 2), RM.detach().clone(), RV.detach().clone(), S, B, training=True,
                         momentum=0.1, eps=1e-5).permute(0, 2, 3, 1)])


def test_spatial_bn_training_needs_five_outputs():
    op = core.CreateOperator("SpatialBN", ["X", "s", "b", "rm", "rv"], ["Y", "rm", "rv"], is_test=0)
    workspace.ResetWorkspace()
    for name, v in zip(op.input, [np.ones((2, 2, 1, 1), np.float32)] + [np.ones(2, np.float32)] * 4):
        workspace.FeedBlob(name, v)
    with pytest.raises(Caffe2Error, match="outputs, got 3"):
        workspace.RunOperatorOnce(op)


# ----------------------------------------------------------------- Dropout

def test_dropout_gradient_uses_the_mask():
    rng = np.random.default_rng(0)
    x = randn(rng, 50)
    op = core.CreateOperator("Dropout", ["X"], ["Y", "mask"], ratio=0.3, is_test=0)
    dy = randn(rng, 50)
    grads, g_input = run_gradient(op, [x], {0: dy})
    mask = workspace.FetchBlob("mask")
    assert mask.dtype == bool and 0 < mask.sum() < 50
    np.testing.assert_allclose(grads[0], dy * mask / 0.7, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("Y"), x * mask / 0.7, rtol=1e-6)
    test_op = core.CreateOperator("Dropout", ["X"], ["Y"], ratio=0.3, is_test=1)
    grads, _ = run_gradient(test_op, [x], {0: dy})
    np.testing.assert_allclose(grads[0], dy)
    finite_difference_check(test_op, [x], [0])


# ----------------------------------------------------------------- layout ops

@FEW
@given(st.data())
def test_concat_and_split(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    widths = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    axis = data.draw(st.integers(0, 1))
    parts = [randn(rng, *((w, 3) if axis == 0 else (2, w))) for w in widths]
    names = ["X%d" % i for i in range(len(parts))]
    op = core.CreateOperator("Concat", names, ["Y", "split"], axis=axis)
    finite_difference_check(op, parts, range(len(parts)))
    split = core.CreateOperator("Split", ["Y"], ["P%d" % i for i in range(len(widths))], axis=axis, split=widths)
    y = np.concatenate(parts, axis=axis)
    finite_difference_check(split, [y], [0], outputs_with_grads=list(range(len(widths))))
    if len(widths) > 1:      # an output without a gradient contributes zeros
        last = np.ones_like(parts[-1])
        grads, _ = run_gradient(split, [y], {len(widths) - 1: last})
        want = np.concatenate([np.zeros_like(p) for p in parts[:-1]] + [last], axis=axis)
        np.testing.assert_array_equal(grads[0], want)
    if torch is not None:
        compare_with_torch(op, parts, range(len(parts)), lambda *xs: [torch.cat(xs, axis)])
        compare_with_torch(split, [y], [0], lambda Y: list(torch.split(Y, widths, axis)),
                           outputs=range(len(widths)))


@FEW
@given(st.data())
def test_reshape_flatten_transpose(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    shape = data.draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    x = randn(rng, *shape)
    perm = data.draw(st.permutations(range(len(shape))))
    axis = data.draw(st.integers(0, len(shape)))
    ops = [(core.CreateOperator("Reshape", ["X"], ["Y", "old"], shape=[-1, shape[-1]]),
            lambda X: [X.reshape(-1, shape[-1])]),
           (core.CreateOperator("Flatten", ["X"], ["Y"], axis=axis),
            lambda X: [X.reshape(int(np.prod(shape[:axis])), -1)]),
           (core.CreateOperator("FlattenToVec", ["X"], ["Y"]), lambda X: [X.reshape(-1)]),
           (core.CreateOperator("Transpose", ["X"], ["Y"], axes=list(perm)), lambda X: [X.permute(*perm)]),
           (core.CreateOperator("Transpose", ["X"], ["Y"]), lambda X: [X.permute(*reversed(range(len(shape))))])]
    for op, fn in ops:
        finite_difference_check(op, [x], [0])
        if torch is not None:
            compare_with_torch(op, [x], [0], fn)


def test_reshape_and_concat_need_their_second_output():
    from caffe2py.gradients import get_gradient_for_op
    with pytest.raises(Caffe2Error, match="old_shape"):
        get_gradient_for_op(core.CreateOperator("Reshape", ["X"], ["Y"], shape=[-1]), ["Y_grad"])
    with pytest.raises(Caffe2Error, match="split_info"):
        get_gradient_for_op(core.CreateOperator("Concat", ["A", "B"], ["Y"]), ["Y_grad"])


# ----------------------------------------------------------------- BatchMatMul

@FEW
@given(st.data())
def test_batch_matmul(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    batch = tuple(data.draw(st.lists(st.integers(1, 2), min_size=0, max_size=2)))
    m, k, n = (data.draw(st.integers(1, 3)) for _ in range(3))
    ta, tb = data.draw(st.booleans()), data.draw(st.booleans())
    a = randn(rng, *(batch + ((k, m) if ta else (m, k))))
    b = randn(rng, *(batch + ((n, k) if tb else (k, n))))
    op = core.CreateOperator("BatchMatMul", ["A", "B"], ["Y"], trans_a=int(ta), trans_b=int(tb))
    finite_difference_check(op, [a, b], [0, 1])
    if torch is not None:
        compare_with_torch(op, [a, b], [0, 1], lambda A, B: [(A.transpose(-1, -2) if ta else A)
                                                             @ (B.transpose(-1, -2) if tb else B)])


def test_batch_matmul_of_a_blob_with_itself_sums_both_gradients():
    rng = np.random.default_rng(2)
    z = randn(rng, 2, 3, 4)
    net = core.Net("self_dot")
    net.BatchMatMul(["Z", "Z"], "Y", trans_b=1)
    grad_map = net.AddGradientOperators({"Y": "dY"})
    types = [op.type for op in net.Proto().op]
    assert types == ["BatchMatMul", "BatchMatMul", "BatchMatMul", "Sum"]
    assert str(grad_map["Z"]) == "Z_grad"
    dy = randn(rng, 2, 3, 3)
    workspace.ResetWorkspace()
    workspace.FeedBlob("Z", z)
    workspace.FeedBlob("dY", dy)
    workspace.RunNetOnce(net)
    want = dy @ z + np.swapaxes(dy, -1, -2) @ z           # d <Z Z^T, G> / dZ
    np.testing.assert_allclose(workspace.FetchBlob("Z_grad"), want, rtol=1e-5, atol=1e-5)


def test_batch_matmul_broadcast_has_no_gradient():
    from caffe2py.gradients import get_gradient_for_op
    with pytest.raises(Caffe2Error, match="broadcast"):
        get_gradient_for_op(core.CreateOperator("BatchMatMul", ["A", "B"], ["Y"], broadcast=1), ["Y_grad"])


# ----------------------------------------------------------------- Sum / Add / Sub / Mul / Div / Scale

@FEW
@given(st.data())
def test_binary_ops_with_numpy_broadcasting(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    op_type = data.draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    b_shape = [d if data.draw(st.booleans()) else 1 for d in shape][data.draw(st.integers(0, len(shape) - 1)):]
    a, b = randn(rng, *shape), randn(rng, *b_shape, away_from_zero=0.5 if op_type == "Div" else 0.0)
    if data.draw(st.booleans()):
        a, b = b, a.copy()
        if op_type == "Div":
            b = np.where(np.abs(b) < 0.5, 1.0, b).astype(np.float32)
    op = core.CreateOperator(op_type, ["A", "B"], ["C"])
    finite_difference_check(op, [a, b], [0, 1], threshold=2e-2)
    if torch is not None:
        fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op_type]
        compare_with_torch(op, [a, b], [0, 1], lambda A, B: [fn(A, B)])


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
def test_binary_ops_with_legacy_broadcast(op_type):
    rng = np.random.default_rng(4)
    a, b = randn(rng, 2, 3, 4, 2), randn(rng, 3, 4, away_from_zero=0.5)
    op = core.CreateOperator(op_type, ["A", "B"], ["C"], broadcast=1, axis=1)
    finite_difference_check(op, [a, b], [0, 1], threshold=2e-2)
    grads, g_input = run_gradient(op, [a, b], {0: np.ones_like(a)})
    assert g_input == ["A_grad", "B_grad"] and grads[1].shape == (3, 4)
    if torch is not None:
        fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op_type]
        compare_with_torch(op, [a, b], [0, 1], lambda A, B: [fn(A, B.reshape(1, 3, 4, 1))])


def test_in_place_mul_gradient_is_refused():
    net = core.Net("inplace_mul")
    net.Mul(["A", "B"], "A")
    with pytest.raises(Caffe2Error, match="in place on 'A'"):
        net.AddGradientOperators({"A": "dA"})


def test_sum_and_scale_and_copy():
    rng = np.random.default_rng(5)
    xs = [randn(rng, 2, 3) for _ in range(3)]
    op = core.CreateOperator("Sum", ["X0", "X1", "X2"], ["Y"])
    grads, g_input = run_gradient(op, xs, {0: np.full((2, 3), 2.0, np.float32)})
    assert g_input == ["Y_grad"] * 3           # handed over, no op
    finite_difference_check(op, xs, [0, 1, 2])
    scale = core.CreateOperator("Scale", ["X"], ["Y"], scale=-2.5)
    finite_difference_check(scale, [xs[0]], [0])
    np.testing.assert_allclose(outputs_of(scale, [xs[0]])[0], -2.5 * xs[0])
    finite_difference_check(core.CreateOperator("Copy", ["X"], ["Y"]), [xs[0]], [0])
    if torch is not None:
        compare_with_torch(op, xs, [0, 1, 2], lambda a, b, c: [a + b + c])
        compare_with_torch(scale, [xs[0]], [0], lambda X: [-2.5 * X])


# ----------------------------------------------------------------- Gather / BatchGather

@FEW
@given(st.data())
def test_gather_gives_a_gradient_slice(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    rows, width = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    idx = np.array(data.draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=6)), np.int32)
    table = randn(rng, rows, width)
    op = core.CreateOperator("Gather", ["DATA", "IDX"], ["Y"])
    grads, g_input = run_gradient(op, [table, idx], {0: np.ones((idx.size, width), np.float32)})
    assert g_input[0] == ("IDX", "Y_grad") and g_input[1] is None     # no op: indices and dY
    np.testing.assert_allclose(grads[0], np.bincount(idx, minlength=rows)[:, None] * np.ones(width))
    finite_difference_check(op, [table, idx], [0])
    dense = core.CreateOperator("Gather", ["DATA", "IDX"], ["Y"], dense_gradient=1)
    finite_difference_check(dense, [table, idx], [0])
    if torch is not None:
        compare_with_torch(op, [table, idx], [0], lambda D, I: [D[I.long()]])


@FEW
@given(st.data())
def test_batch_gather(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    cols = data.draw(st.integers(1, 5))
    idx = np.array(data.draw(st.lists(st.integers(0, cols - 1), min_size=1, max_size=5)), np.int64)
    x = randn(rng, 2, cols, 2)
    op = core.CreateOperator("BatchGather", ["X", "IDX"], ["Y"])
    finite_difference_check(op, [x, idx], [0])
    if torch is not None:
        compare_with_torch(op, [x, idx], [0], lambda X, I: [X[:, I.long()]])


# ----------------------------------------------------------------- SparseLengths*

@FEW
@given(st.data())
def test_sparse_lengths_reductions(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    reducer = data.draw(st.sampled_from(["Sum", "WeightedSum", "Mean"]))
    rows, width = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 3))
    lengths = np.array(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)), np.int32)
    idx = rng.integers(0, rows, lengths.sum()).astype(np.int64)
    table, weights = randn(rng, rows, width), randn(rng, int(lengths.sum()))
    grad_on_weights = reducer == "WeightedSum" and data.draw(st.booleans())
    names = ["DATA"] + (["W"] if reducer == "WeightedSum" else []) + ["IDX", "LEN"]
    inputs = [table] + ([weights] if reducer == "WeightedSum" else []) + [idx, lengths]
    op = core.CreateOperator("SparseLengths" + reducer, names, ["Y"], grad_on_weights=int(grad_on_weights))
    grads, g_input = run_gradient(op, inputs, {0: np.ones((lengths.size, width), np.float32)})
    assert g_input[0] == ("IDX", "DATA_grad_values")
    to_check = [0] + ([1] if grad_on_weights else [])
    if grad_on_weights:
        assert g_input[1] == "W_grad"
    finite_difference_check(op, inputs, to_check)
    if torch is not None:
        import torch.nn.functional as F
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        mode = "mean" if reducer == "Mean" else "sum"

        def bag(D, *rest):
            w = rest[0] if reducer == "WeightedSum" else None
            return [F.embedding_bag(torch.tensor(idx), D, torch.tensor(offsets), mode=mode, per_sample_weights=w)]
        compare_with_torch(op, inputs, to_check, bag)


def test_fused_lookups_have_no_gradient():
    from caffe2py.gradients import get_gradient_for_op
    op = core.CreateOperator("SparseLengthsSumFused8BitRowwise", ["T", "I", "L"], ["Y"])
    assert get_gradient_for_op(op, ["Y_grad"]) == ([], [None, None, None])


# ----------------------------------------------------------------- LSTMUnit

def _lstm_torch(h, c, gates, seq, t, forget_bias=0.0):
    d = c.shape[-1]
    i, f, o, g = (gates[..., k * d:(k + 1) * d] for k in range(4))
    c_new = torch.sigmoid(f + forget_bias) * c + torch.sigmoid(i) * torch.tanh(g)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    valid = (t < seq).reshape(1, -1, 1)
    return [torch.where(valid, h_new, h), torch.where(valid, c_new, c)]


@FEW
@given(st.data())
def test_lstm_unit(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    n, d = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    h, c, gates = randn(rng, 1, n, d), randn(rng, 1, n, d), randn(rng, 1, n, 4 * d)
    seq = rng.integers(1, 4, n).astype(np.int32)
    t = np.array([data.draw(st.integers(0, 3))], np.int32)
    op = core.CreateOperator("LSTMUnit", ["H", "C", "G", "SEQ", "T"], ["H_out", "C_out"], forget_bias=0.5)
    finite_difference_check(op, [h, c, gates, seq, t], [0, 1, 2], outputs_with_grads=[0, 1])
    # only the hidden state differentiated: refused, as Caffe2's gradient maker refuses a
    # missing cell-state gradient (callers give it one with ZeroGradient)
    with pytest.raises(Caffe2Error, match="C_out"):
        run_gradient(op, [h, c, gates, seq, t], {0: randn(rng, 1, n, d)})
    if torch is not None:
        compare_with_torch(op, [h, c, gates, seq, t], [0, 1, 2],
                           lambda H, C, G, S, T: _lstm_torch(H, C, G, S, T, 0.5), outputs=(0, 1))
