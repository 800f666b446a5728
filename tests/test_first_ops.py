"""First CPU ops against NumPy references written here (naive loops where it matters)."""
import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.errors import Caffe2Error

RNG = np.random.default_rng(1234)


def run_op(op_type, inputs, outputs=1, **kwargs):
    workspace.ResetWorkspace()
    names = []
    for i, value in enumerate(inputs):
        names.append("in%d" % i)
        workspace.FeedBlob(names[-1], value)
    outs = ["out%d" % i for i in range(outputs)]
    workspace.RunOperatorOnce(core.CreateOperator(op_type, names, outs, **kwargs))
    vals = [workspace.FetchBlob(o) for o in outs]
    return vals[0] if outputs == 1 else vals


def ref_conv(x, w, b, stride, pad, dilation=(1, 1), group=1):
    """Direct loops: pad = (t, l, b, r)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])]).astype(np.float64)
    oh = (h + pad[0] + pad[2] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for nn in range(n):
        for mm in range(m):
            g = mm // mg
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for cc in range(cg):
                        for a in range(kh):
                            for bb in range(kw):
                                acc += xp[nn, g * cg + cc, i * stride[0] + a * dilation[0],
                                          j * stride[1] + bb * dilation[1]] * w[mm, cc, a, bb]
                    out[nn, mm, i, j] = acc + (b[mm] if b is not None else 0.0)
    return out


@pytest.mark.parametrize("args,stride,pad,dil,group", [
    (dict(kernel=3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (dict(kernels=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    (dict(kernel_h=3, kernel_w=2, stride_h=1, stride_w=2, pad_t=1, pad_l=0, pad_b=2, pad_r=1), (1, 2), (1, 0, 2, 1), (1, 1), 1),
    (dict(kernel=3, dilation=2, pad=2), (1, 1), (2, 2, 2, 2), (2, 2), 1),
    (dict(kernel=3, group=2, pad=1), (1, 1), (1, 1, 1, 1), (1, 1), 2),
])
def test_conv_matches_direct_loops(args, stride, pad, dil, group):
    x = RNG.standard_normal((2, 4, 7, 6)).astype(np.float32)
    kh = args.get("kernel_h", args.get("kernel", 3))
    kw = args.get("kernel_w", args.get("kernel", 3))
    w = RNG.standard_normal((6, 4 // group, kh, kw)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    got = run_op("Conv", [x, w, b], **args)
    np.testing.assert_allclose(got, ref_conv(x, w, b, stride, pad, dil, group), rtol=1e-4, atol=1e-4)


def test_conv_nhwc_matches_nchw():
    x = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)  # M, KH, KW, C
    b = np.zeros(4, np.float32)
    got = run_op("Conv", [x, w, b], kernel=3, order="NHWC")
    ref = ref_conv(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), b, (1, 1), (0, 0, 0, 0))
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def ref_pool(x, k, s, pad, kind, include_pad=False):
    n, c, h, w = x.shape
    oh = (h + pad[0] + pad[2] - k) // s + 1
    ow = (w + pad[1] + pad[3] - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - pad[0], j * s - pad[1]
            rs, cs = slice(max(r0, 0), min(r0 + k, h)), slice(max(c0, 0), min(c0 + k, w))
            win = x[:, :, rs, cs]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = k * k if include_pad else win.shape[2] * win.shape[3]
                out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


@pytest.mark.parametrize("kind,op", [("max", "MaxPool"), ("avg", "AveragePool")])
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_pooling(kind, op, k, s, p):
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    got = run_op(op, [x], kernel=k, stride=s, pad=p)
    np.testing.assert_allclose(got, ref_pool(x, k, s, (p,) * 4, kind), rtol=1e-5, atol=1e-6)


def test_global_pooling_and_legacy_ceil():
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_op("AveragePool", [x], global_pooling=1), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(run_op("MaxPool", [x], global_pooling=1), x.max(axis=(2, 3), keepdims=True))
    # legacy_pad=3 (CAFFE_LEGACY_POOLING) rounds the output size up: 5 -> ceil((5-2)/2)+1 = 3
    got = run_op("MaxPool", [x], kernel=2, stride=2, legacy_pad=3)
    assert got.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(got[..., 2, 2], x[..., 4, 4])


def test_fc_with_axis_and_errors():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((5, 12)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(run_op("FC", [x, w, b]), x.reshape(2, 12) @ w.T + b, rtol=1e-5)
    w2 = RNG.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(run_op("FC", [x, w2, b], axis=2), x @ w2.T + b, rtol=1e-5)
    with pytest.raises(Caffe2Error, match=r"FC #0 'out0'.*blob 'in1'.*needs 12 inputs per row but X 'in0'.*gives 4"):
        run_op("FC", [x, w, b], axis=2)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)])
def test_arithmetic_legacy_and_numpy_broadcast(op, fn):
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.uniform(1, 2, (3,)).astype(np.float32)
    got = run_op(op, [a, b], broadcast=1, axis=1)
    np.testing.assert_allclose(got, fn(a, b.reshape(1, 3, 1, 1)), rtol=1e-6)
    c = RNG.uniform(1, 2, (4, 5)).astype(np.float32)
    np.testing.assert_allclose(run_op(op, [a, c], broadcast=1), fn(a, c), rtol=1e-6)  # suffix match
    d = RNG.uniform(1, 2, (3, 1, 5)).astype(np.float32)
    np.testing.assert_allclose(run_op(op, [a, d]), fn(a, d), rtol=1e-6)  # NumPy broadcasting
    with pytest.raises(Caffe2Error, match="do not broadcast"):
        run_op(op, [a, RNG.standard_normal((7,)).astype(np.float32)])


def test_activations_and_softmax():
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32) * 5
    np.testing.assert_array_equal(run_op("Relu", [x]), np.where(x > 0, x, 0))
    np.testing.assert_allclose(run_op("Sigmoid", [x]), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(run_op("Tanh", [x]), np.tanh(x), rtol=1e-6)
    flat = x.reshape(3, 8).astype(np.float64)
    ref = np.exp(flat - flat.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(run_op("Softmax", [x]), ref.reshape(x.shape), rtol=1e-5)
    ref2 = np.exp(x - x.max(2, keepdims=True))
    np.testing.assert_allclose(run_op("Softmax", [x], axis=2), ref2 / ref2.sum(2, keepdims=True), rtol=1e-5)


def test_fills():
    out = run_op("ConstantFill", [], shape=[2, 3], value=4.0)
    assert out.dtype == np.float32 and out.tolist() == [[4.0] * 3] * 2
    out = run_op("ConstantFill", [np.zeros((4, 1))], value=2, dtype=2)
    assert out.dtype == np.int32 and out.shape == (4, 1)
    for op, dtype, values in [("GivenTensorFill", np.float32, [1.5, 2.5]), ("GivenTensorIntFill", np.int32, [1, 2]),
                              ("GivenTensorInt64Fill", np.int64, [3, 4]), ("GivenTensorDoubleFill", np.float64, [0.5, 1]),
                              ("GivenTensorBoolFill", np.bool_, [True, False])]:
        out = run_op(op, [], shape=[2], values=values)
        assert out.dtype == dtype and out.tolist() == list(np.asarray(values, dtype))
    s = run_op("GivenTensorStringFill", [], shape=[2], values=["a", "b"])
    assert list(s) == [b"a", b"b"]                 # string tensors are fetched as bytes
    u = run_op("UniformFill", [], shape=[1000], min=-2.0, max=3.0)
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.3
    g = run_op("GaussianFill", [], shape=[4000], mean=1.0, std=2.0)
    assert abs(g.mean() - 1.0) < 0.2 and abs(g.std() - 2.0) < 0.2
    xv = run_op("XavierFill", [], shape=[50, 12])
    assert np.abs(xv).max() <= np.sqrt(3 / 12)
    with pytest.raises(Caffe2Error, match="3 values do not fill shape"):
        run_op("GivenTensorFill", [], shape=[2, 2], values=[1.0, 2.0, 3.0])


def test_shape_ops():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    y, old = run_op("Reshape", [x], outputs=2, shape=[0, -1])
    assert y.shape == (2, 12) and old.tolist() == [2, 3, 4] and old.dtype == np.int64
    with pytest.raises(Caffe2Error, match="cannot reshape"):
        run_op("Reshape", [x], shape=[5, -1])
    assert run_op("Flatten", [x]).shape == (2, 12)
    np.testing.assert_array_equal(run_op("Transpose", [x], axes=[2, 0, 1]), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(run_op("Transpose", [x]), x.transpose())
    cat, info = run_op("Concat", [x, x[:, :1]], outputs=2, axis=1)
    np.testing.assert_array_equal(cat, np.concatenate([x, x[:, :1]], 1))
    assert info.tolist() == [3, 1] and info.dtype == np.int32
    stacked = run_op("Concat", [x, x], add_axis=1, axis=1)
    np.testing.assert_array_equal(stacked, np.stack([x, x], 1))
    parts = run_op("Split", [x], outputs=2, axis=2, split=[1, 3])
    np.testing.assert_array_equal(parts[1], x[:, :, 1:])
    np.testing.assert_array_equal(run_op("Sum", [x, x, x]), 3 * x)
    np.testing.assert_array_equal(run_op("Copy", [x]), x)
    np.testing.assert_array_equal(run_op("Dropout", [x], is_test=1), x)
    drop, mask = run_op("Dropout", [np.ones((100, 100), np.float32)], outputs=2, ratio=0.5)
    assert set(np.unique(drop)) <= {0.0, 2.0} and 0.4 < mask.mean() < 0.6
