"""caffe2.python.transformations (caffe2py/transformations.py, caffe2py/nom/passes_*):
each pass's rewrite of the NetDef (ops counted and named) and the rewritten net's
results against NumPy references."""
import numpy as np
import pytest

from caffe2py import core, transformations, workspace
from caffe2py.errors import Caffe2Error
from caffe2py.transformations import Transformer

transformer = Transformer()


pytestmark = pytest.mark.usefixtures("fresh_workspace")   # tests/conftest.py


def _conv(x, w, b=None):
    """Valid, stride-1 convolution of N C spatial... x with M C kernel... w (any rank)."""
    rank = x.ndim - 2
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=tuple(range(2, 2 + rank)))
    letters = "ijk"[:rank]
    y = np.einsum("nc%s%s,mc%s->nm%s" % ("xyz"[:rank], letters, letters, "xyz"[:rank]), windows, w)
    return y if b is None else y + b.reshape((1, -1) + (1,) * rank)


def _bn(y, scale, bias, mean, var, eps):
    shape = (1, -1) + (1,) * (y.ndim - 2)
    return (y - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) \
        + bias.reshape(shape)


def _args(op):
    return {a.name: a for a in op.arg}


def _feed(**blobs):
    for name, value in blobs.items():
        workspace.FeedBlob(name, np.asarray(value, np.float32))


def _bn_params(rng, c):
    return dict(scale=rng.rand(c), bias=rng.rand(c), mean=rng.rand(c), var=rng.rand(c) + 0.5)


@pytest.mark.parametrize("order,rank,with_bias", [
    ("NCHW", 2, True), ("NHWC", 2, True), ("NCHW", 2, False), ("NHWC", 2, False),
    ("NCHW", 3, True), ("NCHW", 3, False)])
def test_fuse_conv_bn_folds_exactly(order, rank, with_bias):
    rng = np.random.RandomState(7)
    c, m, k, eps = 3, 4, 3, 1e-3
    x = rng.rand(2, c, *([6] * rank))
    w = rng.rand(m, c, *([k] * rank))
    b = rng.rand(m)
    params = _bn_params(rng, m)
    expected = _bn(_conv(x, w, b if with_bias else None), eps=eps, **params)
    net = core.Net("fold")
    inputs = ["X", "w", "b"] if with_bias else ["X", "w"]
    kernel = {"kernel": k} if rank == 2 else {"kernels": [k] * rank}
    net.Conv(inputs, ["Y"], order=order, **kernel)
    net.SpatialBN(["Y", "scale", "bias", "mean", "var"], ["Z"], is_test=True, order=order, epsilon=eps)
    if order == "NHWC":
        _feed(X=np.moveaxis(x, 1, -1), w=np.moveaxis(w, 1, -1))
    else:
        _feed(X=x, w=w)
    _feed(b=b, **params)
    transformer.FuseConvBN(net)
    ops = net.Proto().op
    assert [op.type for op in ops] == ["Conv"]
    assert list(ops[0].output) == ["Z"]
    assert list(ops[0].input)[:2] == ["X", "w"]
    if not with_bias:
        assert list(ops[0].input)[2] == "_bias0"
        assert "_bias0" in net.Proto().external_input
    workspace.RunNetOnce(net)
    got = workspace.FetchBlob("Z")
    if order == "NHWC":
        got = np.moveaxis(got, -1, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    coeff = params["scale"] / np.sqrt(params["var"] + eps)
    np.testing.assert_allclose(workspace.FetchBlob(ops[0].input[2]),
                               ((b if with_bias else 0) - params["mean"]) * coeff + params["bias"],
                               rtol=1e-5)


def test_fuse_conv_bn_new_bias_name_skips_taken_names():
    rng = np.random.RandomState(1)
    net = core.Net("names")
    net.Conv(["X", "w"], ["Y"], kernel=1)
    net.SpatialBN(["Y", "scale", "_bias0", "mean", "var"], ["Z"], is_test=True)
    p = _bn_params(rng, 2)
    _feed(X=rng.rand(1, 2, 3, 3), w=rng.rand(2, 2, 1, 1), scale=p["scale"], _bias0=p["bias"],
          mean=p["mean"], var=p["var"])
    transformer.FuseConvBN(net)
    assert list(net.Proto().op[0].input) == ["X", "w", "_bias1"]
    np.testing.assert_allclose(workspace.FetchBlob("_bias0"), p["bias"].astype(np.float32))


def test_fuse_conv_bn_shared_filter_gets_its_own_blob():
    rng = np.random.RandomState(2)
    x, w, b = rng.rand(1, 2, 5, 5), rng.rand(2, 2, 3, 3), rng.rand(2)
    p = _bn_params(rng, 2)
    net = core.Net("shared")
    net.Conv(["X", "w", "b"], ["Y"], kernel=3)
    net.SpatialBN(["Y", "scale", "bias", "mean", "var"], ["Z"], is_test=True)
    net.Conv(["X", "w", "b"], ["plain"], kernel=3)       # reads the same filter and bias
    _feed(X=x, w=w, b=b, **p)
    transformer.FuseConvBN(net)
    assert [op.type for op in net.Proto().op] == ["Conv", "Conv"]
    fused = net.Proto().op[0]
    assert fused.input[1] != "w" and fused.input[2] != "b"
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("w"), w.astype(np.float32))
    np.testing.assert_allclose(workspace.FetchBlob("plain"), _conv(x, w, b), rtol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("Z"), _bn(_conv(x, w, b), eps=1e-5, **p),
                               rtol=1e-4, atol=1e-5)


def test_fuse_conv_bn_leaves_computed_parameters_alone():
    net = core.Net("computed")
    net.Scale(["w0"], ["w"], scale=2.0)                  # the filter is computed by the net
    net.Conv(["X", "w", "b"], ["Y"], kernel=1)
    net.SpatialBN(["Y", "scale", "bias", "mean", "var"], ["Z"], is_test=True)
    transformer.FuseConvBN(net)
    assert [op.type for op in net.Proto().op] == ["Scale", "Conv", "SpatialBN"]


def test_fuse_conv_bn_errors_name_the_blob():
    net = core.Net("missing")
    net.Conv(["X", "w", "b"], ["Y"], kernel=1)
    net.SpatialBN(["Y", "scale", "bias", "mean", "var"], ["Z"], is_test=True)
    with pytest.raises(Caffe2Error, match="'w', which is not in the workspace"):
        transformer.FuseConvBN(net)
    _feed(w=np.ones((2, 2, 1, 1)), b=np.ones(2), scale=np.ones(2), bias=np.ones(2), mean=np.ones(3),
          var=np.ones(2))
    with pytest.raises(Caffe2Error, match="mean has 3 values, the conv has 2"):
        transformer.FuseConvBN(net)
    workspace.FeedBlob("w", np.ones((2, 2, 1, 1), np.int32))
    with pytest.raises(Caffe2Error, match="'w' must be a float32 tensor"):
        transformer.FuseConvBN(net)


def _conv_relu_net(*relu_pairs, **conv_args):
    net = core.Net("nnpack")
    net.Conv(["X", "w", "b"], ["Y"], kernel=3, order="NCHW", **conv_args)
    for source, target in relu_pairs:
        net.Relu([source], [target])
    return net


@pytest.mark.parametrize("conv_args,nnpack", [
    ({}, True), ({"stride": 2}, False), ({"stride_h": 2}, False)])
def test_add_nnpack_picks_eligible_convs(conv_args, nnpack):
    net = _conv_relu_net(("Y", "Y2"), **conv_args)
    transformer.AddNNPACK(net)
    op = net.Proto().op[0]
    assert (op.engine == "NNPACK") == nnpack
    assert ("convolution_transform_strategy" in _args(op)) == nnpack
    assert net.Proto().op[1].engine == ""


@pytest.mark.parametrize("build", [
    lambda net: net.Conv(["X", "w"], ["Y"], kernel=3, order="NCHW"),             # no bias
    lambda net: net.Conv(["X", "w", "b"], ["Y"], kernel=3),                       # order unstated
    lambda net: net.Conv(["X", "w", "b"], ["Y"], kernel=3, order="NHWC"),
    lambda net: net.Conv(["X", "w", "b"], ["Y"], kernel_h=1, kernel_w=3, order="NCHW"),
    lambda net: net.Conv(["X", "w", "b"], ["Y"], kernels=[3, 3, 3], order="NCHW")])
def test_add_nnpack_skips_what_nnpack_does_not_run(build):
    net = core.Net("skip")
    build(net)
    transformer.AddNNPACK(net)
    assert net.Proto().op[0].engine == ""


def test_fused_nnpack_conv_relu_computes_relu_of_conv():
    rng = np.random.RandomState(4)
    x, w, b = rng.randn(1, 2, 6, 6), rng.randn(3, 2, 3, 3), rng.randn(3)
    net = _conv_relu_net(("Y", "Y2"))
    transformer.AddNNPACK(net)
    transformations.fuseNNPACKConvRelu(net)
    ops = net.Proto().op
    assert len(ops) == 1 and _args(ops[0])["activation"].s == b"Relu"
    assert list(ops[0].output) == ["Y2"]
    _feed(X=x, w=w, b=b)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("Y2"), np.maximum(_conv(x, w, b), 0),
                               rtol=1e-4, atol=1e-5)


def test_fuse_nnpack_conv_relu_keeps_ops_out_of_place():
    net = _conv_relu_net(("Y", "X"))                      # the fused conv would write its input
    net.Conv(["X", "w", "b"], ["Y"], kernel=3, order="NCHW")
    transformer.AddNNPACK(net)
    transformer.FuseNNPACKConvRelu(net)
    first, second = net.Proto().op
    assert list(first.output) == ["Y_fusion_fix"] and list(second.input)[0] == "Y_fusion_fix"
    assert list(second.output) == ["Y"]
    rng = np.random.RandomState(5)
    x, w, b = rng.randn(1, 3, 7, 7), rng.randn(3, 3, 3, 3), rng.randn(3)
    _feed(X=x, w=w, b=b)
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("Y"), _conv(np.maximum(_conv(x, w, b), 0), w, b),
                               rtol=1e-4, atol=1e-4)


def test_fuse_nnpack_conv_relu_needs_single_reader_and_nnpack():
    net = _conv_relu_net(("Y", "Y2"), ("Y", "Y3"))
    transformer.AddNNPACK(net)
    transformer.FuseNNPACKConvRelu(net)
    assert [op.type for op in net.Proto().op] == ["Conv", "Relu", "Relu"]
    net = _conv_relu_net(("Y", "Y2"))                     # default engine: nothing to fuse into
    transformer.FuseNNPACKConvRelu(net)
    assert [op.type for op in net.Proto().op] == ["Conv", "Relu"]


def test_nnpack_engine_refuses_unknown_activation():
    net = core.Net("act")
    net.Conv(["X", "w"], ["Y"], kernel=1, engine="NNPACK", activation="Tanh")
    _feed(X=np.ones((1, 1, 2, 2)), w=np.ones((1, 1, 1, 1)))
    with pytest.raises(Caffe2Error, match='unsupported activation type "Tanh"'):
        workspace.RunNetOnce(net)


def test_sink_max_pool_moves_relu_first_with_the_same_values():
    rng = np.random.RandomState(6)
    x = rng.randn(1, 2, 6, 6).astype(np.float32)
    net = core.Net("sink")
    net.MaxPool(["X"], ["P"], kernel=2, stride=2)
    net.Relu(["P"], ["R"])
    workspace.FeedBlob("X", x)
    workspace.RunNetOnce(net)
    before = workspace.FetchBlob("R")
    transformer.SinkMaxPool(net)
    assert [(op.type, list(op.input), list(op.output)) for op in net.Proto().op] == \
        [("Relu", ["X"], ["P"]), ("MaxPool", ["P"], ["R"])]
    workspace.ResetWorkspace()
    workspace.FeedBlob("X", x)
    workspace.RunNetOnce(net)
    pooled = x.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_allclose(workspace.FetchBlob("R"), np.maximum(pooled, 0))
    np.testing.assert_allclose(workspace.FetchBlob("R"), before)


def test_sink_max_pool_keeps_a_pooled_result():
    net = core.Net("keep")
    net.MaxPool(["X"], ["P"], kernel=2)
    net.Relu(["P"], ["R"])
    net.Proto().external_output.extend(["P", "R"])
    transformer.SinkMaxPool(net)
    assert [op.type for op in net.Proto().op] == ["MaxPool", "Relu"]


def test_converter_external_inputs_and_outputs():
    net = core.Net("ext")
    net.Relu(["X"], ["Y"])
    net.Proto().external_input.extend(["unused"])
    transformer.AddNNPACK(net)
    assert list(net.Proto().external_input) == ["X", "unused"]
    net.Proto().external_output.extend(["fake"])
    with pytest.raises(Caffe2Error, match="external_output.*'fake'"):
        transformer.AddNNPACK(net)


def test_unknown_transformation():
    with pytest.raises(AttributeError, match="Transformation NoSuchPass not found"):
        transformer.NoSuchPass(core.Net("n"))
    with pytest.raises(Caffe2Error, match="IDEEP"):
        transformations.optimizeForMKLDNN(core.Net("n"))
